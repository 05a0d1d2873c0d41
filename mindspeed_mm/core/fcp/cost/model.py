"""The cost model: per-rank memory and forward+backward time of a group, from a profile table.

Time of one group (samples packed into one varlen batch of T tokens and P vision patches, on d
ranks, algo ring or ulysses), per round, for one pipeline stage:

    attention(algo, d) + per_token * T / d + per_patch * P / d + launch

where the attention term holds the per-document quadratic work and the communication of the
algo (see `coefficients`, `ring` and `ulysses` for the assumptions behind each term).

Memory of a rank = static (parameters, gradients, optimizer state) + workspace + activation
bytes per token x tokens on the rank. Tokens spread evenly: T / d per rank (the per-document
padding to 2d chunks is ignored), so a group of degree d can hold d x capacity_tokens tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost.coefficients import StageCoefficients
from mindspeed_mm.core.fcp.cost.comm import CommCurve
from mindspeed_mm.core.fcp.cost.presets import preset_table
from mindspeed_mm.core.fcp.cost.ring import RingDegreeTerms, RingTimer
from mindspeed_mm.core.fcp.cost.table import ProfileTable
from mindspeed_mm.core.fcp.cost.ulysses import UlyssesTimer
from mindspeed_mm.core.fcp.cost.workload import GroupWorkload

ALGOS = ("ring", "ulysses")

# Degree vectors remembered; solvers typically query one or a few vectors millions of times.
_DEGREE_CACHE_SIZE = 32


class ModelDoesNotFitError(ValueError):
    """The static memory of the model alone leaves no room for activations on a rank."""


class CostModel:
    """Per-rank memory and group forward+backward time, from one profile table."""

    def __init__(self, table: ProfileTable, *, max_tokens_per_rank: int | None = None,
                 algos: Sequence[str] = ALGOS) -> None:
        table.validate()
        algos = tuple(algos)
        if not algos or len(set(algos)) != len(algos) or any(a not in ALGOS for a in algos):
            raise ValueError(f"algos must be a non-empty list of distinct names from {list(ALGOS)}, "
                             f"got {list(algos)}")
        self.table = table
        """The profile table every figure comes from."""
        self.algos: tuple[str, ...] = algos
        """Algos the model may choose from, in order (best_time_ms returns indices into it)."""
        self.ranks_per_node: int = table.hardware.ranks_per_node
        """Ranks per node; a group of more ranks spans nodes."""
        self.capacity_tokens: int = self._capacity(max_tokens_per_rank)
        """Most LLM tokens one rank can hold."""
        self.coefficients = StageCoefficients.from_table(table)
        """Scalar constants of the time model."""
        layers = table.layers_per_stage
        tm = table.time
        self._ring = RingTimer(self.coefficients, CommCurve(tm.p2p_intra_ms, tm.p2p_inter_ms, layers))
        self._ulysses = UlyssesTimer(self.coefficients,
                                     CommCurve(tm.all_to_all_intra_ms, tm.all_to_all_inter_ms, layers))
        self._ulysses_index = algos.index("ulysses") if "ulysses" in algos else -1
        self._degree_cache: dict[bytes, _DegreeTerms] = {}

    @classmethod
    def from_preset(cls, name: str, *, max_tokens_per_rank: int | None = None,
                    algos: Sequence[str] = ALGOS, **table_options: Any) -> "CostModel":
        """Cost model of a named preset such as `a3-qwen3vl-8b`.

        `table_options` go to `build_preset_table` (tp, pp, dtype, recompute, sharding, ...).
        """
        return cls(preset_table(name, **table_options), max_tokens_per_rank=max_tokens_per_rank, algos=algos)

    def _capacity(self, max_tokens_per_rank: int | None) -> int:
        if max_tokens_per_rank is not None:
            if isinstance(max_tokens_per_rank, bool) or not isinstance(max_tokens_per_rank, (int, np.integer)) \
                    or max_tokens_per_rank < 1:
                raise ValueError(f"max_tokens_per_rank must be a positive int, got {max_tokens_per_rank!r}")
            return int(max_tokens_per_rank)
        hw, mem = self.table.hardware, self.table.memory
        usable = hw.memory_bytes * hw.usable_memory_fraction
        free = usable - mem.static_bytes - mem.workspace_bytes
        capacity = math.floor(free / self._bytes_per_token()) if free > 0 else 0
        if capacity < 1:
            raise ModelDoesNotFitError(
                f"model '{self.table.model.name}' does not fit on '{hw.name}': static "
                f"{mem.static_bytes / 2**30:.2f} GiB + workspace {mem.workspace_bytes / 2**30:.2f} GiB leave no "
                f"room for one token in {usable / 2**30:.2f} GiB usable; raise tp / pp, shard the optimizer "
                f"wider or pass max_tokens_per_rank")
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
        total = sq = 0
        for i, length in enumerate(lengths):
            if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length <= 0:
                raise ValueError(f"sample {i}: length must be a positive int, got {length!r}")
            total += int(length)
            sq += int(length) * int(length)
        vision = 0
        if patches is not None:
            if len(patches) != len(lengths):
                raise ValueError(f"patches has {len(patches)} entries for {len(lengths)} samples")
            for i, count in enumerate(patches):
                if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
                    raise ValueError(f"sample {i}: patches must be an int >= 0, got {count!r}")
                vision += int(count)
            if vision and self.table.model.vision is None:
                raise ValueError(f"model '{self.table.model.name}' has no vision encoder, "
                                 f"but the samples carry {vision} patches")
        return GroupWorkload(total, len(lengths), sq, vision)

    # ------------------------------------------------------------------ time
    def ulysses_supported(self, degree: int) -> bool:
        """Whether Ulysses can split this model's (per TP rank) heads over `degree` ranks."""
        return self._ulysses.supported(int(degree))

    def group_time_ms(self, workload: GroupWorkload, degrees: Any, algo: str) -> np.ndarray | float:
        """Forward+backward time (ms) of `workload` on groups of each degree with `algo`.

        `degrees` is an int or a 1-D int array; the result is a float or a new array, inf where
        the degree is infeasible (memory, or Ulysses head divisibility). Cost O(len(degrees)),
        independent of the number of documents.
        """
        terms, scalar = self._terms(degrees)
        if algo == "ring":
            out = self._ring.times(workload, terms.ring)
        elif algo == "ulysses":
            out = np.full(terms.degrees.shape, np.inf)
            if terms.ulysses_where.size:
                out[terms.ulysses_where] = self._ulysses.supported_times(workload)[terms.ulysses_slots]
        else:
            raise ValueError(f"unknown algo {algo!r}; valid: {list(ALGOS)}")
        self._mask_memory(workload, terms, out)
        return float(out[0]) if scalar else out

    def best_time_ms(self, workload: GroupWorkload, degrees: Any) -> tuple[np.ndarray, np.ndarray]:
        """Min over `self.algos` of group_time_ms: (times, index into self.algos), 1-D arrays."""
        terms, _ = self._terms(degrees)
        index = np.zeros(terms.degrees.shape, dtype=np.int64)
        if "ring" in self.algos:
            best = self._ring.times(workload, terms.ring)
        else:
            best = np.full(terms.degrees.shape, np.inf)
        if self._ulysses_index >= 0 and terms.ulysses_where.size:
            uly = self._ulysses.supported_times(workload)[terms.ulysses_slots]
            better = uly < best[terms.ulysses_where]
            where = terms.ulysses_where[better]
            best[where] = uly[better]
            index[where] = self._ulysses_index
        self._mask_memory(workload, terms, best)
        return best, index

    def _mask_memory(self, workload: GroupWorkload, terms: "_DegreeTerms", times: np.ndarray) -> None:
        """Set inf where the group's ranks cannot hold the batch."""
        need = self.min_degree(workload.total_tokens)
        if need > terms.smallest:
            times[terms.degrees < need] = np.inf

    def _terms(self, degrees: Any) -> tuple["_DegreeTerms", bool]:
        """Checked, cached workload-independent arrays of a degree vector (and whether it was a scalar)."""
        d_int = np.asarray(degrees)
        scalar = d_int.ndim == 0
        if scalar:
            d_int = d_int.reshape(1)
        if d_int.ndim != 1 or d_int.dtype.kind not in "iu":
            raise ValueError(f"degrees must be an int or a 1-D int array, got {d_int.dtype} of shape {d_int.shape}")
        if d_int.dtype != np.int64:
            d_int = d_int.astype(np.int64)
        key = d_int.tobytes()
        terms = self._degree_cache.get(key)
        if terms is None:
            if d_int.size and d_int.min() < 1:
                raise ValueError(f"degrees must be >= 1, got {int(d_int.min())}")
            d_int = d_int.copy()   # the cache must not see later changes of the caller's array
            where, slots = self._ulysses.positions(d_int)
            smallest = int(d_int.min()) if d_int.size else 1
            terms = _DegreeTerms(d_int, smallest, self._ring.terms(d_int), where, slots)
            if len(self._degree_cache) >= _DEGREE_CACHE_SIZE:
                # Start afresh (rebinding is atomic, so a planner thread sharing the model stays safe).
                self._degree_cache = {}
            self._degree_cache[key] = terms
        return terms, scalar


@dataclass(frozen=True)
class _DegreeTerms:
    """Workload-independent arrays of one degree vector, cached across calls."""

    degrees: np.ndarray
    """The degrees (a private copy)."""
    smallest: int
    """Smallest degree."""
    ring: RingDegreeTerms
    """Arrays of the ring time."""
    ulysses_where: np.ndarray
    """Indices of the degrees Ulysses supports."""
    ulysses_slots: np.ndarray
    """Their positions among the Ulysses timer's degrees."""
