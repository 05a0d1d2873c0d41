"""Scalar coefficients of the time model of one pipeline stage, derived once from a profile table.

Assumptions (all stated here once):
- The non-attention work of a layer (projections, MLP, norms, fixed-TP collectives) grows with
  the tokens a rank holds: per token, or along the table's measured curve (`time.linear_ms`).
- The attention core of one document of s tokens costs A(s) = alpha s^2 + beta s + gamma per
  layer (forward + backward), a fit of the table's grid for the model's mask (the causal grid
  carries the mask efficiency of about 1/2). A packed batch then needs only sum(s^2), sum(s) and
  its document count, which keeps workloads additive and the time O(1) in documents. An
  attention call (one per layer and pass for Ulysses, one per layer and ring step) costs at least
  the table's `attention_call_ms` whatever the documents it holds: the host-side floor that small
  calls pay and larger ones hide, shared by every document of the call.
- Forward and backward are split with the table's backward/forward ratios (about 2 for matmuls,
  2.5 for attention); `recompute == "full"` runs the forward pass once more before backward.
- The vision encoder runs on the group's patches split evenly over its ranks, in one call per rank
  and round: the table's `vision_ms` curve at the rank's patches, else a fixed cost per call plus a
  cost per patch.
- Ulysses runs whole documents with heads / d heads per rank. Kernels do not always get d times
  faster on d times fewer heads; a table with per-degree Ulysses grids gives each degree its own
  fit, else the attention of the full heads is divided by d.
- Expert parallelism (a mixture-of-experts table with `expert_parallel` > 1): each layer's dispatch and combine
  all-to-alls move the routed copies of the rank's own tokens (`time.expert_exchange_ms` vs tokens per rank),
  their forward pair once more under full recompute. A group priced alone pays them and its experts' work on its
  own tokens; a round's coupling of the groups by these all-to-alls is priced by `solver.expert_phases`.
- A causal ring's off-diagonal steps compute a rectangle per document (its shard's tokens against
  half as many keys). Kernels that skip masked work make that cost A(s) like the diagonal step; a
  table with an `off_diagonal` grid gives its own fit B(s) = alpha' s^2 + beta' s + gamma'.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from mindspeed_mm.core.fcp.cost.grid import Grid, fit_quadratic
from mindspeed_mm.core.fcp.cost.table import ProfileTable

logger = logging.getLogger(__name__)

BYTES_PER_ELEMENT = {"bf16": 2, "fp16": 2, "fp32": 4}
FIT_WARN_RELATIVE_ERROR = 0.25


@dataclass(frozen=True)
class StageCoefficients:
    """Per-stage constants of the time model (all layers of a stage folded in)."""

    attention_fit: tuple[float, float, float]
    """(alpha, beta, gamma) of ONE layer's attention A(s), ms; s in tokens."""
    alpha: float
    """Stage attention, ms per squared token (layers x alpha)."""
    beta: float
    """Stage attention, ms per token (layers x beta)."""
    gamma: float
    """Stage attention, ms per document (layers x gamma)."""
    attention_call_ms: float
    """Stage attention, the least one call costs (layers x the table's `attention_call_ms`)."""
    attention_forward_fraction: float
    """Forward share of the attention's forward + backward time."""
    forward_passes: int
    """Forward passes per round: 2 with full recompute, else 1."""
    attention_passes_scale: float
    """Attention time of all passes over one forward + backward: passes x fwd + bwd shares."""
    per_token_ms: float
    """Non-attention stage work (with recompute) plus output layer, ms per token."""
    layer_linear: Grid | None
    """One layer's non-attention work vs tokens per rank (the table's `linear_ms`); None: `per_token_ms`."""
    layer_linear_scale: float
    """Layers of the stage times the recompute factor of their non-attention work."""
    output_ms_per_token: float
    """Embedding + LM head + loss, ms per token."""
    per_patch_ms: float
    """Vision encoder (with recompute), ms per patch."""
    vision_call_ms: float
    """Vision encoder (with recompute), fixed ms of one call on a rank holding patches."""
    vision_curve: Grid | None
    """One call of the encoder vs the patches of the rank (the table's `vision_ms`); None: the two above."""
    vision_scale: float
    """Recompute factor of the encoder's work, applied to `vision_curve`."""
    expert_exchange: Grid | None
    """One layer's expert-parallel all-to-alls vs tokens per rank (the table's `expert_exchange_ms`); None: none."""
    expert_exchange_scale: float
    """Layers of the stage times the recompute factor of the all-to-alls (a recomputed forward repeats its pair)."""
    expert_ms_per_token: float
    """The routed experts' share of one layer's non-attention work per token (the table's `expert_ms_per_token`)."""
    launch_ms: float
    """Fixed cost of one round of a group."""
    off_diagonal: tuple[float, float, float]
    """Stage (alpha', beta', gamma') of an off-diagonal ring block (the diagonal's when not profiled)."""
    comm_overlap: float
    """Share of a ring step's transfer hidden behind its block compute."""
    ulysses_fits: dict[int, tuple[float, float, float]]
    """Per Ulysses degree with a profiled grid: stage (alpha, beta, gamma) of one rank's attention."""
    heads: int
    """Query heads per TP rank."""
    kv_heads: int
    """Key/value heads per TP rank."""
    head_bytes: int
    """Bytes of one head of one token."""
    ranks_per_node: int
    """Ranks per node."""

    def non_attention_ms(self, tokens: np.ndarray, patches: np.ndarray, inv_degree: np.ndarray) -> np.ndarray:
        """The stage's non-attention work, the output layer and the vision encoder on one rank of a group
        sharing `tokens` and `patches` evenly (`inv_degree` = 1 / degree)."""
        vision = self.vision_ms(inv_degree * patches)
        if self.expert_exchange is not None:
            vision = vision + self.expert_exchange_scale * self.expert_exchange(inv_degree * tokens)
        if self.layer_linear is None:
            return inv_degree * (self.per_token_ms * tokens) + vision
        per_rank = inv_degree * tokens
        return (self.layer_linear_scale * self.layer_linear(per_rank) + self.output_ms_per_token * per_rank
                + vision)

    def routed_expert_ms(self, tokens_on_rank: np.ndarray) -> np.ndarray:
        """The stage's routed-expert work (with recompute) on `tokens_on_rank` tokens' routed copies."""
        return self.layer_linear_scale * self.expert_ms_per_token * np.asarray(tokens_on_rank, dtype=np.float64)

    def expert_exchange_ms(self, tokens_on_rank: np.ndarray) -> np.ndarray:
        """The stage's expert-parallel all-to-alls of a rank holding `tokens_on_rank` tokens (0 without them)."""
        tokens = np.asarray(tokens_on_rank, dtype=np.float64)
        if self.expert_exchange is None:
            return np.zeros_like(tokens)
        return self.expert_exchange_scale * self.expert_exchange(tokens)

    def vision_ms(self, patches_on_rank: np.ndarray) -> np.ndarray:
        """One call of the vision encoder on a rank encoding `patches_on_rank` patches (0: no call)."""
        if self.vision_curve is None:
            return self.per_patch_ms * patches_on_rank + self.vision_call_ms * (patches_on_rank > 0)
        return self.vision_scale * self.vision_curve(patches_on_rank) * (patches_on_rank > 0)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes per token of a forward ring step's block: K and V of the rank's KV heads."""
        return 2 * self.kv_heads * self.head_bytes

    @classmethod
    def from_table(cls, table: ProfileTable) -> "StageCoefficients":
        """Derive the coefficients of a (validated) table."""
        tm, model = table.time, table.model
        fit = _checked_fit(tm.attention_ms(model.attention_mask), model.name, "attention")
        block = fit
        if model.attention_mask == "causal" and tm.attention_off_diagonal_ms is not None:
            block = _checked_fit(tm.attention_off_diagonal_ms, model.name, "off-diagonal attention")
        layers = table.layers_per_stage
        passes = 2 if table.recompute == "full" else 1
        attn_fwd = 1.0 / (1.0 + tm.attention_backward_ratio)
        linear_scale = 1.0 + (passes - 1) / (1.0 + tm.linear_backward_ratio)
        return cls(
            attention_fit=fit,
            alpha=layers * fit[0], beta=layers * fit[1], gamma=layers * fit[2],
            attention_call_ms=layers * tm.attention_call_ms,
            attention_forward_fraction=attn_fwd,
            forward_passes=passes,
            attention_passes_scale=passes * attn_fwd + (1.0 - attn_fwd),
            per_token_ms=layers * tm.linear_ms_per_token * linear_scale + tm.output_ms_per_token,
            layer_linear=tm.linear_ms,
            layer_linear_scale=layers * linear_scale,
            output_ms_per_token=tm.output_ms_per_token,
            per_patch_ms=tm.vision_ms_per_patch * linear_scale,
            vision_call_ms=tm.vision_ms_per_call * linear_scale,
            vision_curve=tm.vision_ms,
            vision_scale=linear_scale,
            expert_exchange=tm.expert_exchange_ms,
            # Of an exchange's four all-to-alls, the forward two run again in a recomputed forward pass.
            expert_exchange_scale=layers * (1.0 + 0.5 * (passes - 1)),
            expert_ms_per_token=tm.expert_ms_per_token,
            launch_ms=tm.launch_ms,
            off_diagonal=(layers * block[0], layers * block[1], layers * block[2]),
            comm_overlap=tm.comm_overlap,
            ulysses_fits={d: tuple(layers * v for v in _checked_fit(grid, model.name, f"Ulysses degree {d}"))
                          for d, grid in (tm.attention_ulysses_ms or {}).items()},
            heads=model.heads // table.tp,
            kv_heads=model.kv_heads // table.tp,
            head_bytes=model.head_dim * BYTES_PER_ELEMENT[table.dtype],
            ranks_per_node=table.hardware.ranks_per_node,
        )


def _checked_fit(grid: Grid, model: str, what: str) -> tuple[float, float, float]:
    """Quadratic fit of an attention grid; warns when it departs far from the points."""
    fit = fit_quadratic(grid)
    x = np.asarray(grid.x)
    worst = float(np.max(np.abs((fit[0] * x * x + fit[1] * x + fit[2]) / np.asarray(grid.y) - 1.0)))
    if worst > FIT_WARN_RELATIVE_ERROR:
        logger.warning("%s grid of '%s' departs up to %.0f%% from its quadratic fit; "
                       "attention times may be off by as much", what, model, 100 * worst)
    return fit
