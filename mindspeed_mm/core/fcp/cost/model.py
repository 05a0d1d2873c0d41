"""The cost model: per-rank memory and forward+backward time of a group, from a profile table.

Time of one group (samples packed into one varlen batch of T tokens and P vision patches, on d
ranks, algo ring, ulysses or hybrid), per round, for one pipeline stage:

    attention(algo, d) + per_token * T / d + per_patch * P / d + launch

where the attention term holds the per-document quadratic work and the communication of the
algo (see `coefficients`, `ring_costs`, `ulysses_costs` and `hybrid_costs` for the assumptions behind
each term). A hybrid group is priced at its fastest Ulysses x ring split (`hybrid_splits` says which).

Memory of a rank = static (parameters, gradients, optimizer state) + workspace + activation
bytes per token x tokens on the rank. Tokens spread evenly: T / d per rank (the per-document
padding to 2d chunks is ignored), so a group of degree d can hold d x capacity_tokens tokens.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import math
from typing import Any, Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost.coefficients import StageCoefficients
from mindspeed_mm.core.fcp.cost.comm_costs import CommCurve
from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.cost.hybrid_costs import HybridSplitRule, HybridTimer
from mindspeed_mm.core.fcp.cost.presets import preset_table
from mindspeed_mm.core.fcp.cost.ring_costs import RingDegreeTerms, RingTimer
from mindspeed_mm.core.fcp.cost.table import ProfileTable, StepFigures
from mindspeed_mm.core.fcp.cost.ulysses_costs import UlyssesTimer
from mindspeed_mm.core.fcp.cost.workload import GroupWorkload, WorkloadColumns

logger = logging.getLogger(__name__)

ALGOS = ("ring", "ulysses", "hybrid")
HYBRID = "hybrid"
# Tokens per rank of a model without memory limit (`without_memory_limit`).
UNLIMITED_TOKENS = 1 << 60
# Lengths from this size on have squares summed with Python integers (int64 could overflow).
_EXACT_SQUARE_LIMIT = 1 << 31


def state_shard_ranks(table: ProfileTable) -> int | None:
    """The `shard_ranks` a preset table was built with (its provenance options), None when the
    state is not sharded (`sharding: none`) or the table does not record it."""
    options = table.provenance.get("options")
    if not isinstance(options, dict) or options.get("sharding") == "none":
        return None
    shards = options.get("shard_ranks")
    return shards if isinstance(shards, int) and not isinstance(shards, bool) and shards >= 1 else None


class ModelDoesNotFitError(ValueError):
    """The static memory of the model alone leaves no room for activations on a rank."""


class CostModel:
    """Per-rank memory and group forward+backward time, from one profile table."""

    def __init__(self, table: ProfileTable, *, max_tokens_per_rank: int | None = None,
                 algos: Sequence[str] = ALGOS, memory_limited: bool = True) -> None:
        table.validate()
        algos = tuple(algos)
        if not algos or len(set(algos)) != len(algos) or any(a not in ALGOS for a in algos):
            raise ValueError(f"algos must be a non-empty list of distinct names from {list(ALGOS)}, "
                             f"got {list(algos)}")
        self.table = table
        """The profile table every figure comes from."""
        self.algos: tuple[str, ...] = algos
        """Algos the model may choose from, in order (best_time_ms returns indices into it; on equal
        times the earlier one wins)."""
        self.ranks_per_node: int = table.hardware.ranks_per_node
        """Ranks per node; a group of more ranks spans nodes."""
        self.memory_limited: bool = memory_limited
        """False for the memory-free copy (`without_memory_limit`): every degree holds any batch."""
        self.capacity_tokens: int = self._capacity(max_tokens_per_rank) if memory_limited else UNLIMITED_TOKENS
        """Most LLM tokens one rank can hold: the memory limit, lowered by `max_tokens_per_rank`."""
        self.step: StepFigures | None = table.step
        """Costs of a step outside the groups' passes (optimizer, parameter and gradient traffic); None when
        the table does not price them (`solver.step_time`)."""
        self.state_shard_ranks: int | None = state_shard_ranks(table)
        """Ranks the table's static memory assumes parameters, gradients and optimizer state sharded
        over (a preset's `shard_ranks`); None when the table does not shard them or does not say
        (a measured table holds what was measured). On a run of fewer ranks the memory limit is
        optimistic: the planners warn (`solver.memory_checks`)."""
        self.coefficients = StageCoefficients.from_table(table)
        """Scalar constants of the time model."""
        self._p2p, self._a2a = _comm_curves(table)
        self._ring = RingTimer(self.coefficients, self._p2p)
        self._ring_table: RingDegreeTerms | None = None
        self._ulysses = UlyssesTimer(self.coefficients, self._a2a)
        self._hybrid = HybridTimer(self.coefficients, self._p2p, self._a2a, self.ranks_per_node)
        # Beside ring and Ulysses, hybrid leaves them what they price themselves (`hybrid_costs`).
        self._hybrid_options = {"beside_ring": "ring" in algos, "beside_ulysses": "ulysses" in algos}
        self._placed_timers: dict[int, tuple[RingTimer, UlyssesTimer, HybridTimer]] = {}
        self._restricted: dict[frozenset[int] | None, CostModel] = {}
        self._memory_free: CostModel | None = None
        self._work_bound: CostModel | None = None

    def without_memory_limit(self) -> "CostModel":
        """The same model (same class, table and algos) with no memory limit, built once."""
        if not self.memory_limited:
            return self
        if self._memory_free is None:
            self._memory_free = type(self)(self.table, algos=self.algos, memory_limited=False)
        return self._memory_free

    def work_bound_model(self) -> "CostModel":
        """The memory-free model the work bound reads (`solver.lower_bound`), built once: attention calls cost
        their documents' work alone (no `attention_call_ms` floor) and the measured linear and vision curves
        are replaced by their affine lower envelopes (`_affine_envelope`). Its times never exceed this
        model's, and on one rank they are affine in the workload, as the bound needs."""
        if self._work_bound is None:
            self._work_bound = type(self)(_work_bound_table(self.table), algos=self.algos, memory_limited=False)
        return self._work_bound

    @classmethod
    def from_preset(cls, name: str, *, max_tokens_per_rank: int | None = None,
                    algos: Sequence[str] = ALGOS, **table_options: Any) -> "CostModel":
        """Cost model of a named preset such as `a3-qwen3vl-8b`.

        `table_options` go to `build_preset_table` (tp, pp, dtype, recompute, sharding, ...).
        """
        return cls(preset_table(name, **table_options), max_tokens_per_rank=max_tokens_per_rank, algos=algos)

    def _capacity(self, max_tokens_per_rank: int | None) -> int:
        """The memory limit in tokens per rank; `max_tokens_per_rank` only lowers it. A larger value
        is capped at the memory limit (with a warning naming the option): a rank cannot hold more
        than its memory."""
        if max_tokens_per_rank is not None:
            if isinstance(max_tokens_per_rank, bool) or not isinstance(max_tokens_per_rank, (int, np.integer)) \
                    or max_tokens_per_rank < 1:
                raise ValueError(f"max_tokens_per_rank must be a positive int, got {max_tokens_per_rank!r}")
        memory = self._memory_capacity(max_tokens_per_rank)
        if max_tokens_per_rank is None or max_tokens_per_rank <= memory:
            return memory if max_tokens_per_rank is None else int(max_tokens_per_rank)
        logger.warning("max_tokens_per_rank (--max-tokens-per-rank / fcp_max_tokens_per_rank) = %d is above the "
                       "%d tokens the memory of a rank holds; capped at %d (the option can only lower the limit)",
                       max_tokens_per_rank, memory, memory)
        return memory

    def _memory_capacity(self, max_tokens_per_rank: int | None) -> int:
        hw, mem = self.table.hardware, self.table.memory
        usable = hw.memory_bytes * hw.usable_memory_fraction
        free = usable - mem.static_bytes - mem.workspace_bytes
        capacity = math.floor(free / self._bytes_per_token()) if free > 0 else 0
        if capacity < 1:
            raise ModelDoesNotFitError(
                f"model '{self.table.model.name}' does not fit on '{hw.name}': static "
                f"{mem.static_bytes / 2**30:.2f} GiB + workspace {mem.workspace_bytes / 2**30:.2f} GiB leave no "
                f"room for one token in {usable / 2**30:.2f} GiB usable; raise tp / pp, shard the optimizer "
                f"wider (sharding / shard_ranks)")
        return capacity

    def _bytes_per_token(self) -> float:
        mem = self.table.memory
        return mem.activation_bytes_per_token + mem.vision_activation_bytes_per_token

    # ------------------------------------------------------------------ memory
    def min_degree(self, tokens: int) -> int:
        """Smallest group size whose ranks can hold `tokens` LLM tokens: ceil(tokens / capacity)."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        return max(1, -(-int(tokens) // self.capacity_tokens))

    def rank_memory_bytes(self, tokens_on_rank: float) -> float:
        """Predicted peak memory of a rank holding `tokens_on_rank` LLM tokens."""
        if tokens_on_rank < 0:
            raise ValueError(f"tokens_on_rank must be >= 0, got {tokens_on_rank}")
        mem = self.table.memory
        return mem.static_bytes + mem.workspace_bytes + self._bytes_per_token() * float(tokens_on_rank)

    # ------------------------------------------------------------------ workloads
    def workload(self, lengths: Sequence[int], patches: Sequence[int] | None = None) -> GroupWorkload:
        """Aggregates of a packed batch of samples with these LLM lengths (and vision patches)."""
        length_arr, patch_arr = self._checked_samples(lengths, patches)
        if length_arr.size and int(length_arr.max()) >= _EXACT_SQUARE_LIMIT:
            sq = sum(int(x) * int(x) for x in length_arr.tolist())
        else:
            sq = int(np.dot(length_arr, length_arr))
        return GroupWorkload(int(length_arr.sum()), int(length_arr.size), sq, int(patch_arr.sum()))

    def workload_columns(self, lengths: Sequence[int], patches: Sequence[int] | None = None) -> WorkloadColumns:
        """One workload per sample (each sample alone), as columns for `best_time_table`; their
        `group_sums` are the workloads of packed batches."""
        length_arr, patch_arr = self._checked_samples(lengths, patches)
        values = np.empty((length_arr.size, 4))
        values[:, 0] = length_arr
        values[:, 1] = 1.0
        values[:, 2] = values[:, 0] * values[:, 0]
        values[:, 3] = patch_arr
        return WorkloadColumns(values)

    def _checked_samples(self, lengths: Sequence[int], patches: Sequence[int] | None) -> tuple[np.ndarray, np.ndarray]:
        """Lengths and patches as int64 arrays, after the checks that name the first bad sample."""
        length_arr = _counts(lengths, "length must be a positive int", 1)
        if patches is None:
            return length_arr, np.zeros(length_arr.size, dtype=np.int64)
        if len(patches) != len(lengths):
            raise ValueError(f"patches has {len(patches)} entries for {len(lengths)} samples")
        patch_arr = _counts(patches, "patches must be an int >= 0", 0)
        if patch_arr.any() and self.table.model.vision is None:
            raise ValueError(f"model '{self.table.model.name}' has no vision encoder, "
                             f"but the samples carry {int(patch_arr.sum())} patches")
        return length_arr, patch_arr

    # ------------------------------------------------------------------ time
    def ulysses_supported(self, degree: int) -> bool:
        """Whether Ulysses can split this model's (per TP rank) heads over `degree` ranks."""
        return self._ulysses.supported(int(degree))

    @property
    def hybrid_ulysses_degrees(self) -> tuple[int, ...]:
        """The block sizes u a hybrid group may use: the Ulysses degrees of the heads that fit in a node."""
        return self._hybrid.ulysses_degrees

    @property
    def hybrid_rule(self) -> HybridSplitRule:
        """The split each degree's hybrid groups use, and the degrees that may have them (`hybrid_costs`)."""
        return self._hybrid.rule

    def with_hybrid_degrees(self, degrees: frozenset[int] | None) -> "CostModel":
        """This model with hybrid groups priced only on `degrees` (None: every degree with a split), e.g. those
        of a run's communicator catalogue; built once per set."""
        if degrees == self._hybrid.rule.degrees:
            return self
        known = self._restricted.get(degrees)
        if known is None:
            known = copy.copy(self)
            known._hybrid = HybridTimer(self.coefficients, self._p2p, self._a2a, self.ranks_per_node, degrees)
            known._placed_timers = {}
            known._restricted = {}
            self._restricted[degrees] = known
        return known

    def runs_at(self, algo: str, degree: int) -> bool:
        """Whether this model prices `algo` on a group of `degree` ranks placed compactly (memory aside): ring
        always, Ulysses where it splits the heads, hybrid where it has a split (`hybrid_costs`)."""
        if algo not in ALGOS:
            raise ValueError(f"unknown algo {algo!r}; valid: {list(ALGOS)}")
        if algo == "ulysses":
            return self.ulysses_supported(degree)
        if algo == HYBRID:
            return self._hybrid.priced(int(degree), **self._hybrid_options)
        return True

    def group_time_ms(self, workload: GroupWorkload, degrees: Any, algo: str, *,
                      node_part: int | None = None, ulysses_degree: int | None = None) -> np.ndarray | float:
        """Forward+backward time (ms) of `workload` on groups of each degree with `algo`.

        `degrees` is an int or a 1-D int array; the result is a float or a new array, inf where
        the degree is infeasible (memory, or Ulysses head divisibility). Cost O(len(degrees)),
        independent of the number of documents.

        `node_part`: the fewest of the group's ranks on one node, for a group already placed
        (`placed_node_part`); a group of d ranks with node_part < d crosses nodes and pays the
        inter-node cost: a ring is paced by its slowest hop, and the rank with the fewest peers on
        its node sends d - node_part shares of each all-to-all across nodes. None (the planner's
        search) assumes the compact placement: inside one node when d <= ranks_per_node.

        `ulysses_degree`: a hybrid group's u, priced alone (inf where that split cannot run); None: the
        fastest split the model may choose.
        """
        if algo not in ALGOS:
            raise ValueError(f"unknown algo {algo!r}; valid: {list(ALGOS)}")
        if ulysses_degree is not None and algo != HYBRID:
            raise ValueError(f"ulysses_degree prices a hybrid split; algo {algo!r} has none")
        d_int, scalar = _degree_vector(degrees)
        columns = WorkloadColumns.stack([workload])
        d_row = d_int[None, :]
        out = self._algo_times(columns, d_row, algo, node_part, ulysses_degree)
        self._mask_memory(columns, d_row, out)
        return float(out[0, 0]) if scalar else out[0]

    def best_time_ms(self, workload: GroupWorkload, degrees: Any) -> tuple[np.ndarray, np.ndarray]:
        """Min over `self.algos` of group_time_ms: (times, index into self.algos), 1-D arrays."""
        d_int, _ = _degree_vector(degrees)
        times, index = self.best_time_table([workload], d_int[None, :])
        return times[0], index[0]

    def best_placed_time_ms(self, workload: GroupWorkload, degree: int, node_part: int) -> tuple[float, str]:
        """(time, algo) of the fastest of `self.algos` for one placed group (`group_time_ms`'s
        `node_part`); on equal times the earlier algo wins."""
        times, algos = self.best_placed_time_table([workload], [degree], [node_part])
        return float(times[0]), algos[0]

    def best_placed_time_table(self, workloads: Sequence[GroupWorkload] | WorkloadColumns, degrees: Sequence[int],
                               node_parts: Sequence[int]) -> tuple[np.ndarray, list[str]]:
        """`best_placed_time_ms` of many placed groups at once: workload k on degrees[k] ranks,
        node_parts[k] of them on its emptiest node. Returns (times [K], the algo of each)."""
        columns = workloads if isinstance(workloads, WorkloadColumns) else WorkloadColumns.stack(workloads)
        d_int, _ = _degree_vector(np.asarray(degrees, dtype=np.int64))
        parts = np.asarray(node_parts, dtype=np.int64)
        if not len(columns) == d_int.size == parts.size:
            raise ValueError(f"{len(columns)} workloads, {d_int.size} degrees and {parts.size} node parts")
        times = np.empty((d_int.size, len(self.algos)))
        for part in np.unique(parts).tolist():
            rows = np.flatnonzero(parts == part)
            placed = WorkloadColumns(columns.values[rows])
            d_rows = d_int[rows, None]
            for k, algo in enumerate(self.algos):
                algo_times = self._algo_times(placed, d_rows, algo, node_part=part)
                self._mask_memory(placed, d_rows, algo_times)
                times[rows, k] = algo_times[:, 0]
        best = np.argmin(times, axis=1)
        return times[np.arange(d_int.size), best], [self.algos[k] for k in best.tolist()]

    def placed_time_table(self, workloads: Sequence[GroupWorkload] | WorkloadColumns, degrees: Sequence[int],
                          node_parts: Sequence[int], algos: Sequence[str]) -> np.ndarray:
        """`group_time_ms` of many placed groups at once: workload k on degrees[k] ranks with algos[k],
        node_parts[k] of them on its emptiest node. Returns times [K] (inf where infeasible)."""
        columns = workloads if isinstance(workloads, WorkloadColumns) else WorkloadColumns.stack(workloads)
        d_int, _ = _degree_vector(np.asarray(degrees, dtype=np.int64))
        parts = np.asarray(node_parts, dtype=np.int64)
        algo_arr = np.asarray(algos, dtype=object)
        if not len(columns) == d_int.size == parts.size == algo_arr.size:
            raise ValueError(f"{len(columns)} workloads, {d_int.size} degrees, {parts.size} node parts and "
                             f"{algo_arr.size} algos")
        unknown = sorted(set(algo_arr.tolist()) - set(ALGOS))
        if unknown:
            raise ValueError(f"unknown algo {unknown[0]!r}; valid: {list(ALGOS)}")
        times = np.empty(d_int.size)
        for part in np.unique(parts).tolist():
            for algo in ALGOS:
                rows = np.flatnonzero((parts == part) & (algo_arr == algo))
                if rows.size:
                    placed = WorkloadColumns(columns.values[rows])
                    d_rows = d_int[rows, None]
                    algo_times = self._algo_times(placed, d_rows, algo, node_part=part)
                    self._mask_memory(placed, d_rows, algo_times)
                    times[rows] = algo_times[:, 0]
        return times

    def group_time_table(self, columns: WorkloadColumns, degrees: np.ndarray, algo: str) -> np.ndarray:
        """`group_time_ms` of many workloads for one algo: row k of `degrees` (an int [K, W] matrix)
        holds the degrees of workload k; returns times [K, W] (inf where infeasible)."""
        if algo not in ALGOS:
            raise ValueError(f"unknown algo {algo!r}; valid: {list(ALGOS)}")
        d_int = np.asarray(degrees)
        if d_int.ndim != 2 or d_int.dtype.kind not in "iu" or d_int.shape[0] != len(columns):
            raise ValueError(f"degrees must be a 2-D int array with one row per workload, got {d_int.shape}")
        if d_int.size and d_int.min() < 1:
            raise ValueError(f"degrees must be >= 1, got {int(d_int.min())}")
        out = self._algo_times(columns, d_int, algo)
        self._mask_memory(columns, d_int, out)
        return out

    def best_time_table(self, workloads: Sequence[GroupWorkload] | WorkloadColumns,
                        degrees: Any) -> tuple[np.ndarray, np.ndarray]:
        """`best_time_ms` of many workloads at once: row k of `degrees` (an int [K, W] matrix) holds
        the degrees of workload k; returns (times [K, W], index into self.algos [K, W]).

        Fully vectorised: the workloads' aggregates are stacked into columns and every term of the
        time model is evaluated on the whole matrix (one pass per algo).
        """
        columns = workloads if isinstance(workloads, WorkloadColumns) else WorkloadColumns.stack(workloads)
        d_int = np.asarray(degrees)
        if d_int.ndim != 2 or d_int.dtype.kind not in "iu":
            raise ValueError(f"degrees must be a 2-D int array, got {d_int.dtype} of shape {d_int.shape}")
        if d_int.shape[0] != columns.total_tokens.shape[0]:
            raise ValueError(f"degrees has {d_int.shape[0]} rows for {columns.total_tokens.shape[0]} workloads")
        if d_int.size and d_int.min() < 1:
            raise ValueError(f"degrees must be >= 1, got {int(d_int.min())}")
        best = self._algo_times(columns, d_int, self.algos[0])
        index = np.zeros(d_int.shape, dtype=np.int64)
        for k, algo in enumerate(self.algos[1:], start=1):
            times = self._algo_times(columns, d_int, algo)
            better = times < best
            np.copyto(best, times, where=better)
            index[better] = k
        self._mask_memory(columns, d_int, best)
        return best, index

    def _algo_times(self, columns: WorkloadColumns, d_int: np.ndarray, algo: str,
                    node_part: int | None = None, ulysses_degree: int | None = None) -> np.ndarray:
        """Times [K, W] of one algo, memory not checked; `node_part` and `ulysses_degree` as in `group_time_ms`."""
        placed = node_part is not None and node_part != self.ranks_per_node
        ring, ulysses, hybrid = self._placed(node_part) if placed else (self._ring, self._ulysses, self._hybrid)
        if algo == "ring":
            return ring.times(columns, ring.terms(d_int) if placed else self._ring_terms(d_int))
        if algo == "ulysses":
            return ulysses.times(columns, d_int)
        return hybrid.times(columns, d_int, only=ulysses_degree, **self._hybrid_options)[0]

    def hybrid_splits(self, workloads: Sequence[GroupWorkload] | WorkloadColumns, degrees: Sequence[int],
                      node_parts: Sequence[int | None]) -> np.ndarray:
        """u of the fastest hybrid split of each placed group (workload k on degrees[k] ranks, node_parts[k] of them
        on its emptiest node, None: compact), the split `group_time_ms(..., "hybrid")` prices; 0 where none runs."""
        columns = workloads if isinstance(workloads, WorkloadColumns) else WorkloadColumns.stack(workloads)
        d_int, _ = _degree_vector(np.asarray(degrees, dtype=np.int64))
        parts = [self.ranks_per_node if p is None else int(p) for p in node_parts]
        if not len(columns) == d_int.size == len(parts):
            raise ValueError(f"{len(columns)} workloads, {d_int.size} degrees and {len(parts)} node parts")
        out = np.zeros(d_int.size, dtype=np.int64)
        for part in sorted(set(parts)):
            rows = np.flatnonzero(np.asarray(parts) == part)
            timer = self._hybrid if part == self.ranks_per_node else self._placed(part)[2]
            out[rows] = timer.times(WorkloadColumns(columns.values[rows]), d_int[rows, None],
                                    **self._hybrid_options)[1][:, 0]
        return out

    def _placed(self, node_part: int) -> tuple[RingTimer, UlyssesTimer, HybridTimer]:
        """Timers of groups whose emptiest node holds `node_part` of their ranks: the default ones
        with that as the node size (intra-node peers node_part - 1, the rest across nodes)."""
        if isinstance(node_part, bool) or not isinstance(node_part, (int, np.integer)) or node_part < 1:
            raise ValueError(f"node_part must be a positive int, got {node_part!r}")
        timers = self._placed_timers.get(int(node_part))
        if timers is None:
            coefficients = dataclasses.replace(self.coefficients, ranks_per_node=int(node_part))
            timers = (RingTimer(coefficients, self._p2p), UlyssesTimer(coefficients, self._a2a),
                      HybridTimer(coefficients, self._p2p, self._a2a, self.ranks_per_node, self._hybrid.rule.degrees))
            self._placed_timers[int(node_part)] = timers
        return timers

    def _ring_terms(self, d_int: np.ndarray) -> RingDegreeTerms:
        """The ring's degree terms of a degree matrix, gathered from a table of every degree up to the
        largest asked so far (built once, doubled when outgrown)."""
        top = int(d_int.max()) if d_int.size else 1
        table = self._ring_table
        if table is None or top >= table.degrees.size:
            size = max(top + 1, 2 * (0 if table is None else table.degrees.size), 64)
            with np.errstate(divide="ignore"):  # degree 0 pads the table; it is never read
                table = self._ring.terms(np.arange(size, dtype=np.int64))
            self._ring_table = table
        return RingDegreeTerms(
            table.inv[d_int], table.hops[d_int], table.spans[d_int],
            None if table.p2p_base is None else table.p2p_base[d_int],
            None if table.p2p_slope_inv is None else table.p2p_slope_inv[d_int],
            d_int)

    def _mask_memory(self, columns: WorkloadColumns, d_int: np.ndarray, times: np.ndarray) -> None:
        """Set inf where the group's ranks cannot hold the batch (d x capacity < tokens)."""
        times[d_int * float(self.capacity_tokens) < columns.total_tokens] = np.inf


def _comm_curves(table: ProfileTable) -> tuple[CommCurve, CommCurve]:
    """(point-to-point, all-to-all) curves of a table, scaled to its layers per stage."""
    tm, layers = table.time, table.layers_per_stage
    return (CommCurve(tm.p2p_intra_ms, tm.p2p_inter_ms, layers, tm.p2p_by_group_size_ms),
            CommCurve(tm.all_to_all_intra_ms, tm.all_to_all_inter_ms, layers, tm.all_to_all_by_group_size_ms))


def _affine_envelope(grid: Grid) -> tuple[float, float]:
    """(intercept, slope) of a line at or below a `linear` grid everywhere from 0 up: the slope of its last
    segment (where the grid's extrapolation continues) and the largest intercept that keeps the line under
    every point (and under the grid's value at 0)."""
    xs, ys = np.asarray(grid.x), np.asarray(grid.y)
    slope = float((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
    intercept = min(float(np.min(ys - slope * xs)), float(grid(0.0)))
    return intercept, slope


def _work_bound_table(table: ProfileTable) -> ProfileTable:
    """`table` with no attention call floor and affine linear and vision terms (`CostModel.work_bound_model`).

    The linear curve's envelope a + b x per layer becomes b per token, its intercept going to the round's
    fixed cost (`launch_ms`, with the layers and the recompute factor the coefficients apply to the curve;
    kept >= 0); the vision curve's envelope becomes the per-call and per-patch costs.
    """
    tm = table.time
    changes: dict[str, Any] = {"attention_call_ms": 0.0}
    if tm.linear_ms is not None:
        intercept, slope = _affine_envelope(tm.linear_ms)
        passes = 2 if table.recompute == "full" else 1
        scale = table.layers_per_stage * (1.0 + (passes - 1) / (1.0 + tm.linear_backward_ratio))
        changes.update(linear_ms=None, linear_ms_per_token=max(slope, 1e-12),
                       launch_ms=max(0.0, tm.launch_ms + scale * intercept))
    if tm.vision_ms is not None:
        intercept, slope = _affine_envelope(tm.vision_ms)
        changes.update(vision_ms=None, vision_ms_per_patch=max(slope, 0.0), vision_ms_per_call=max(intercept, 0.0))
    return dataclasses.replace(table, time=dataclasses.replace(tm, **changes))


def _counts(values: Sequence[int], rule: str, minimum: int) -> np.ndarray:
    """Per-sample integer counts as an int64 array; a ValueError naming the first sample that breaks
    `rule` (not an integer, a bool, or below `minimum`)."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    arr = np.asarray(values)
    exact = isinstance(values, np.ndarray) or bool not in set(map(type, values))
    if arr.ndim == 1 and arr.dtype.kind in "iu" and exact and arr.min() >= minimum:
        return arr.astype(np.int64, copy=False)
    for i, value in enumerate(values):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
            raise ValueError(f"sample {i}: {rule}, got {value!r}")
    raise ValueError(f"sample counts must be a flat list of integers, got {type(values).__name__}")


def _degree_vector(degrees: Any) -> tuple[np.ndarray, bool]:
    """Checked int64 vector of degrees (and whether they came as a scalar)."""
    d_int = np.asarray(degrees)
    scalar = d_int.ndim == 0
    if scalar:
        d_int = d_int.reshape(1)
    if d_int.ndim != 1 or d_int.dtype.kind not in "iu":
        raise ValueError(f"degrees must be an int or a 1-D int array, got {d_int.dtype} of shape {d_int.shape}")
    if d_int.size and d_int.min() < 1:
        raise ValueError(f"degrees must be >= 1, got {int(d_int.min())}")
    return d_int.astype(np.int64, copy=False), scalar
