"""The cost model: per-rank memory and forward+backward time of a group, from a profile table.

Time of one group (samples S packed into one varlen batch, degree d, algo a), per round:

    layers * attention_layer(a, d) + layer_linear * T / d + vision * P / d + launch

with T = sum of sample lengths and P = vision patches. Assumptions (all stated here once):

- The non-attention work of a layer (projections, MLP, norms, fixed-TP collectives) scales with
  the tokens a rank holds, T / d; the table gives it per token, forward + backward.
- The attention core of one document of s tokens costs A(s) = alpha s^2 + beta s + gamma
  (forward + backward), a fit of the table's grid for the model's mask (the causal grid carries
  the mask efficiency of about 1/2). A packed batch thus needs only sum(s^2), sum(s) and the
  document count, which keeps workloads additive and the time O(1) in the number of documents.
- Forward / backward are split with the table's backward ratios (about 2 for matmuls, 2.5 for
  attention); `recompute == "full"` runs the forward pass once more before the backward pass.
- ring: per-document zigzag sharding balances causal work, so every one of the d steps computes
  an (s/d) x (s/d) block of each document: c = alpha sum(s^2)/d^2 + beta T/d + gamma n. The KV
  block of the next step (forward: K, V; backward: K, V plus the dK, dV accumulators, twice the
  bytes) is sent while the current block computes, so a pass costs
  c + (d - 1) * max(c, p2p(bytes)).
- ulysses: all-to-all of q, k, v in and of the output back (and the mirror pair in backward),
  not overlapped, around full-length attention over heads / d. KV heads are replicated when
  d exceeds their count, so d must divide the query heads and either divide or be a multiple of
  the KV heads (per TP rank).
- A group of degree d > ranks_per_node spans nodes: ring steps run at the inter-node speed (the
  slowest hop paces a synchronous ring); an all-to-all sends part of its bytes inside the node and
  part across, both at once.
- Memory: tokens are spread evenly, T / d per rank (per-document padding to 2d chunks ignored).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, fields
from typing import Any, Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.cost.table import ProfileTable

logger = logging.getLogger(__name__)

ALGOS = ("ring", "ulysses")

_BYTES_PER_ELEMENT = {"bf16": 2, "fp16": 2, "fp32": 4}


class ModelDoesNotFitError(ValueError):
    """The static memory of the model alone exceeds the usable device memory."""


@dataclass(frozen=True)
class GroupWorkload:
    """Additive aggregates of a packed batch: merging two batches is the field-wise sum."""

    total_tokens: int
    """Sum of the sample lengths (LLM tokens)."""
    num_docs: int
    """Number of documents (samples) in the batch."""
    sum_sq_tokens: int = 0
    """Sum of squared sample lengths: the quadratic attention term."""
    vision_patches: int = 0
    """Vision-encoder patches of the batch (before the spatial merge)."""

    def __add__(self, other: "GroupWorkload") -> "GroupWorkload":
        if not isinstance(other, GroupWorkload):
            return NotImplemented
        return GroupWorkload(self.total_tokens + other.total_tokens, self.num_docs + other.num_docs,
                             self.sum_sq_tokens + other.sum_sq_tokens,
                             self.vision_patches + other.vision_patches)

    @classmethod
    def empty(cls) -> "GroupWorkload":
        """The workload of an empty batch (neutral element of `+`)."""
        return cls(0, 0, 0, 0)


def fit_attention_polynomial(grid: Grid) -> tuple[float, float, float]:
    """Non-negative (alpha, beta, gamma) of A(s) = alpha s^2 + beta s + gamma fitted to a grid.

    Least squares in relative error (every point weighs the same whatever its magnitude); the
    non-negativity constraint is solved exactly by trying every subset of free coefficients.
    """
    s = np.asarray(grid.x, dtype=np.float64)
    y = np.asarray(grid.y, dtype=np.float64)
    design = np.stack([s * s, s, np.ones_like(s)], axis=1) / y[:, None]
    target = np.ones_like(s)
    best: tuple[float, np.ndarray] | None = None
    for mask in range(1, 8):
        cols = [i for i in range(3) if mask >> i & 1]
        coef, *_ = np.linalg.lstsq(design[:, cols], target, rcond=None)
        if np.any(coef < 0):
            continue
        full = np.zeros(3)
        full[cols] = coef
        err = float(np.sum((design @ full - target) ** 2))
        if best is None or err < best[0]:
            best = (err, full)
    assert best is not None  # a single non-negative column always fits with coef >= 0
    alpha, beta, gamma = (float(v) for v in best[1])
    return alpha, beta, gamma


class _CommCurve:
    """Time (scaled by a layer count) of a message of n bytes, inside a node or across nodes.

    A grid that lies on one line (latency + bytes / bandwidth) is evaluated in closed form, which
    is several times faster than interpolating; other grids are interpolated.
    """

    def __init__(self, intra: Grid, inter: Grid, scale: float) -> None:
        self._scale = scale
        self._intra, self._inter = intra, inter
        a_in, a_out = intra.affine(), inter.affine()
        self._affine = None if a_in is None or a_out is None else (
            scale * a_in[0], scale * a_in[1], scale * a_out[0], scale * a_out[1])

    def intra(self, nbytes: np.ndarray) -> np.ndarray:
        """Time inside a node."""
        if self._affine is not None:
            return self._affine[0] + self._affine[1] * nbytes
        return self._scale * self._intra(nbytes)

    def inter(self, nbytes: np.ndarray) -> np.ndarray:
        """Time across nodes."""
        if self._affine is not None:
            return self._affine[2] + self._affine[3] * nbytes
        return self._scale * self._inter(nbytes)

    def pair(self, nbytes: np.ndarray, spans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Times of messages of `nbytes` and of twice that; `spans` marks those crossing nodes."""
        if self._affine is not None:
            a_in, b_in, a_out, b_out = self._affine
            if spans.any():
                slope = np.where(spans, b_out, b_in) * nbytes
                base = np.where(spans, a_out, a_in)
            else:
                slope = b_in * nbytes
                base = a_in
            return base + slope, base + 2.0 * slope
        double = 2.0 * nbytes
        one, two = self.intra(nbytes), self.intra(double)
        if spans.any():
            one = np.where(spans, self.inter(nbytes), one)
            two = np.where(spans, self.inter(double), two)
        return one, two


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
        self.algos: tuple[str, ...] = algos
        self.ranks_per_node: int = table.hardware.ranks_per_node
        self.capacity_tokens: int = self._capacity(max_tokens_per_rank)

        model, tm = table.model, table.time
        mask_grid = tm.attention_ms(model.attention_mask)
        self.attention_fit: tuple[float, float, float] = fit_attention_polynomial(mask_grid)
        """(alpha, beta, gamma) of one layer's attention A(s) = alpha s^2 + beta s + gamma (ms)."""
        self._check_fit(mask_grid)
        layers = table.layers_per_stage
        # Everything per layer is scaled to the whole stage here, once.
        self._ring_alpha, self._ring_beta, self._ring_gamma = (layers * c for c in self.attention_fit)
        self._attn_fwd_frac = 1.0 / (1.0 + tm.attention_backward_ratio)
        self._forward_passes = 2 if table.recompute == "full" else 1
        lin_fwd_frac = 1.0 / (1.0 + tm.linear_backward_ratio)
        extra_fwd = self._forward_passes - 1
        self._per_token_ms = layers * tm.linear_ms_per_token * (1.0 + extra_fwd * lin_fwd_frac) \
            + tm.output_ms_per_token
        self._per_patch_ms = tm.vision_ms_per_patch * (1.0 + extra_fwd * lin_fwd_frac)
        self._launch_ms = tm.launch_ms
        # Attention compute of all passes over its forward+backward: recompute adds one forward.
        self._ring_own_scale = self._forward_passes * self._attn_fwd_frac + (1.0 - self._attn_fwd_frac)
        self._a2a_passes = self._forward_passes + 1

        elem = _BYTES_PER_ELEMENT[table.dtype]
        self._heads = model.heads // table.tp
        self._kv_heads = model.kv_heads // table.tp
        self._head_bytes = model.head_dim * elem
        # Bytes per token of a forward ring step's block: K and V of the rank's KV heads.
        self._kv_bytes_per_token = 2 * self._kv_heads * self._head_bytes
        self._p2p = _CommCurve(tm.p2p_intra_ms, tm.p2p_inter_ms, layers)
        self._a2a_curve = _CommCurve(tm.all_to_all_intra_ms, tm.all_to_all_inter_ms, layers)
        # _ulysses_lut[d]: Ulysses possible on d ranks; the last entry stands for every larger d.
        lut = [False] + [self._heads % d == 0 and (self._kv_heads % d == 0 or d % self._kv_heads == 0)
                         for d in range(1, self._heads + 1)] + [False]
        self._ulysses_lut = np.asarray(lut, dtype=bool)

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_preset(cls, name: str, *, max_tokens_per_rank: int | None = None,
                    algos: Sequence[str] = ALGOS, **table_options: Any) -> "CostModel":
        """Cost model of a named preset such as `a3-qwen3vl-8b`.

        `table_options` go to `build_preset_table` (tp, pp, dtype, recompute, ...).
        """
        from mindspeed_mm.core.fcp.cost.presets import preset_table

        return cls(preset_table(name, **table_options), max_tokens_per_rank=max_tokens_per_rank, algos=algos)

    def _capacity(self, max_tokens_per_rank: int | None) -> int:
        if max_tokens_per_rank is not None:
            if isinstance(max_tokens_per_rank, bool) or not isinstance(max_tokens_per_rank, (int, np.integer)) \
                    or max_tokens_per_rank < 1:
                raise ValueError(f"max_tokens_per_rank must be a positive int, got {max_tokens_per_rank!r}")
            return int(max_tokens_per_rank)
        hw, mem = self.table.hardware, self.table.memory
        free = hw.memory_bytes * hw.usable_memory_fraction - mem.static_bytes - mem.workspace_bytes
        per_token = mem.activation_bytes_per_token + mem.vision_activation_bytes_per_token
        capacity = math.floor(free / per_token) if free > 0 else 0
        if capacity < 1:
            raise ModelDoesNotFitError(
                f"model '{self.table.model.name}' does not fit on '{hw.name}': static "
                f"{mem.static_bytes / 2**30:.1f} GiB + workspace {mem.workspace_bytes / 2**30:.1f} GiB leave "
                f"no room for one token in {hw.memory_bytes * hw.usable_memory_fraction / 2**30:.1f} GiB usable; "
                f"raise tp/pp, shard the optimizer wider or pass max_tokens_per_rank")
        return capacity

    def _check_fit(self, grid: Grid) -> None:
        s = np.asarray(grid.x)
        alpha, beta, gamma = self.attention_fit
        fitted = alpha * s * s + beta * s + gamma
        worst = float(np.max(np.abs(fitted / np.asarray(grid.y) - 1.0)))
        if worst > 0.25:
            logger.warning("attention grid of '%s' departs up to %.0f%% from its quadratic fit; "
                           "attention times may be off by as much", self.table.model.name, 100 * worst)

    # ------------------------------------------------------------------ memory
    def min_degree(self, tokens: int) -> int:
        """Smallest group size whose ranks can hold `tokens` LLM tokens."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        return max(1, -(-int(tokens) // self.capacity_tokens))

    def rank_memory_bytes(self, tokens_on_rank: float) -> float:
        """Predicted peak memory of a rank holding `tokens_on_rank` LLM tokens."""
        mem = self.table.memory
        per_token = mem.activation_bytes_per_token + mem.vision_activation_bytes_per_token
        return mem.static_bytes + mem.workspace_bytes + per_token * float(tokens_on_rank)

    # ------------------------------------------------------------------ workloads
    def workload(self, lengths: Sequence[int], patches: Sequence[int] | None = None) -> GroupWorkload:
        """Aggregates of a packed batch of samples with these LLM lengths (and vision patches)."""
        total = sq = 0
        for i, length in enumerate(lengths):
            if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length <= 0:
                raise ValueError(f"sample {i}: length must be a positive int, got {length!r}")
            total += int(length)
            sq += int(length) * int(length)
        n = len(lengths)
        vision = 0
        if patches is not None:
            if len(patches) != n:
                raise ValueError(f"patches has {len(patches)} entries for {n} samples")
            for i, count in enumerate(patches):
                if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
                    raise ValueError(f"sample {i}: patches must be an int >= 0, got {count!r}")
                vision += int(count)
            if vision and self.table.model.vision is None:
                raise ValueError(f"model '{self.table.model.name}' has no vision encoder, "
                                 f"but the samples carry {vision} patches")
        return GroupWorkload(total, n, sq, vision)

    # ------------------------------------------------------------------ time
    def ulysses_supported(self, degree: int) -> bool:
        """Whether Ulysses can split this model's (per TP rank) heads over `degree` ranks."""
        return 1 <= degree < len(self._ulysses_lut) and bool(self._ulysses_lut[degree])

    def group_time_ms(self, workload: GroupWorkload, degrees: Any, algo: str) -> np.ndarray | float:
        """Forward+backward time (ms) of `workload` on groups of each degree with `algo`.

        `degrees` is an int or an int array; the result is a float or an array of the same shape,
        inf where the degree is infeasible (memory, or Ulysses head divisibility).
        """
        d_int, scalar = self._degrees(degrees)
        d = d_int.astype(np.float64)
        if algo == "ring":
            out = self._ring_ms(workload, d)
        elif algo == "ulysses":
            out = np.full(d.shape, np.inf)
            where = self._ulysses_positions(d_int)
            out[where] = self._ulysses_ms(workload, d[where])
        else:
            raise ValueError(f"unknown algo {algo!r}; valid: {list(ALGOS)}")
        self._mask_memory(workload, d_int, out)
        return float(out[0]) if scalar else out

    def best_time_ms(self, workload: GroupWorkload, degrees: Any) -> tuple[np.ndarray, np.ndarray]:
        """Min over `self.algos` of group_time_ms: (times, index into self.algos)."""
        d_int, _ = self._degrees(degrees)
        d = d_int.astype(np.float64)
        index = np.zeros(d.shape, dtype=np.int64)
        if "ring" in self.algos:
            best = self._ring_ms(workload, d)
        else:
            best = np.full(d.shape, np.inf)
        if "ulysses" in self.algos:
            where = self._ulysses_positions(d_int)
            uly = self._ulysses_ms(workload, d[where])
            better = uly < best[where] if "ring" in self.algos else np.ones(uly.shape, dtype=bool)
            where = where[better]
            best[where] = uly[better]
            index[where] = self.algos.index("ulysses")
        self._mask_memory(workload, d_int, best)
        return best, index

    def _degrees(self, degrees: Any) -> tuple[np.ndarray, bool]:
        """Degrees as a 1-D int array (and whether a scalar was given); all must be >= 1."""
        d_int = np.asarray(degrees)
        scalar = d_int.ndim == 0
        if scalar:
            d_int = d_int.reshape(1)
        if d_int.dtype.kind not in "iu":
            raise ValueError(f"degrees must be integers, got dtype {d_int.dtype}")
        if d_int.size and d_int.min() < 1:
            raise ValueError(f"degrees must be >= 1, got {d_int.min()}")
        return d_int, scalar

    def _mask_memory(self, workload: GroupWorkload, d_int: np.ndarray, times: np.ndarray) -> None:
        """Set inf where the group's ranks cannot hold the batch."""
        need = self.min_degree(workload.total_tokens)
        if need > 1:
            times[d_int < need] = np.inf

    def _ulysses_positions(self, d_int: np.ndarray) -> np.ndarray:
        """Indices of the degrees Ulysses supports."""
        return np.flatnonzero(np.take(self._ulysses_lut, d_int, mode="clip"))

    def _ring_ms(self, w: GroupWorkload, d: np.ndarray) -> np.ndarray:
        inv = 1.0 / d
        # One ring step of the whole stage (all layers at once: max() commutes with the scaling).
        step = (self._ring_alpha * w.sum_sq_tokens * inv + self._ring_beta * w.total_tokens) * inv
        step += self._ring_gamma * w.num_docs
        fwd = self._attn_fwd_frac * step
        bwd = step - fwd
        # Forward sends K, V; backward sends K, V and the dK, dV accumulators: twice the bytes.
        p_fwd, p_bwd = self._p2p.pair(self._kv_bytes_per_token * w.total_tokens * inv, d > self.ranks_per_node)
        overlap = np.maximum(fwd, p_fwd)
        overlap *= self._forward_passes
        overlap += np.maximum(bwd, p_bwd)
        overlap *= d - 1.0
        overlap += self._ring_own_scale * step
        overlap += (self._per_token_ms * w.total_tokens + self._per_patch_ms * w.vision_patches) * inv
        overlap += self._launch_ms
        return overlap

    def _ulysses_ms(self, w: GroupWorkload, d: np.ndarray) -> np.ndarray:
        """Ulysses time at degrees `d`, all of which it supports."""
        inv = 1.0 / d
        compute = (self._ring_alpha * w.sum_sq_tokens + self._ring_beta * w.total_tokens) * inv \
            + self._ring_gamma * w.num_docs
        tokens_width = w.total_tokens * self._head_bytes * inv
        # q, k, v in and the output back; KV heads replicated up to one per rank.
        qkv = tokens_width * (self._heads + 2.0 * np.maximum(self._kv_heads, d))
        comm = self._all_to_all_ms(qkv, d) + self._all_to_all_ms(tokens_width * self._heads, d)
        linear = (self._per_token_ms * w.total_tokens + self._per_patch_ms * w.vision_patches) * inv
        # Forward passes and the backward pass each run the pair of all-to-alls once.
        return self._ring_own_scale * compute + self._a2a_passes * comm + linear + self._launch_ms

    def _all_to_all_ms(self, buffer_bytes: np.ndarray, d: np.ndarray) -> np.ndarray:
        """All-to-all where each rank holds `buffer_bytes` and keeps 1/d of it (0 when d == 1)."""
        rpn = self.ranks_per_node
        t = self._a2a_curve.intra(buffer_bytes * ((np.minimum(d, rpn) - 1.0) / d))
        spans = d > rpn
        if spans.any():
            inter = self._a2a_curve.inter(buffer_bytes * (np.maximum(d - rpn, 0.0) / d))
            t = np.where(spans, np.maximum(t, inter), t)
        return np.where(d > 1.0, t, 0.0)
