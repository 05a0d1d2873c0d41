"""Schema of a profile table: its enumerations, its error and the typed sections it is made of.

The meaning of every figure is described in the docstring of `mindspeed_mm.core.fcp.cost.table`.
"""
from __future__ import annotations

from dataclasses import dataclass

from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.cost.shapes import ExpertShape

SCHEMA_VERSION = 1
DEVICES = ("npu", "cuda", "cpu")
DTYPES = ("bf16", "fp16", "fp32")
RECOMPUTE_MODES = ("none", "full")
MASK_TYPES = ("causal", "full")
LINK_TYPES = ("intra", "inter")


class ProfileTableError(ValueError):
    """A profile table is missing a field or holds a wrong value; the message names file and field."""


@dataclass(frozen=True)
class HardwareInfo:
    """The device and its links, as one rank sees them."""

    name: str
    """Short hardware name, e.g. `a3`."""
    device: str
    """Device kind: one of DEVICES."""
    ranks_per_node: int
    """Ranks sharing the fast intra-node fabric; a group larger than this spans nodes."""
    memory_bytes: int
    """Device memory of one rank in bytes."""
    usable_memory_fraction: float
    """Fraction of `memory_bytes` the training job can really use (runtime, allocator slack)."""
    peak_tflops: float
    """Dense peak of one rank in the table's dtype, TFLOP/s (informational for profiled tables)."""
    intra_node_bytes_per_s: float
    """Nominal one-direction point-to-point bandwidth inside a node, bytes/s (informational)."""
    inter_node_bytes_per_s: float
    """Nominal one-direction bandwidth per rank between nodes, bytes/s (informational)."""


@dataclass(frozen=True)
class VisionShape:
    """Shape of the vision encoder."""

    depth: int
    """Number of vision transformer blocks."""
    hidden: int
    """Vision hidden size."""
    heads: int
    """Vision attention heads."""
    mlp: int
    """Vision MLP intermediate size."""
    patch_size: int
    """Patch side in pixels."""
    spatial_merge: int
    """Patches merged per side into one LLM token (merge**2 patches per token)."""
    temporal_patch: int
    """Frames folded into one patch along time (1 for images-as-tiles)."""
    mergers: int = 1
    """Feature rows the encoder hands the LLM per merged token: its merger's, plus one per DeepStack merger
    (Qwen3-VL: 4). Sizes the rows a rank encoding for another rank sends it."""


@dataclass(frozen=True)
class ModelShape:
    """Shape of the language model (and optional vision encoder)."""

    name: str
    """Short model name, e.g. `qwen3vl-8b`."""
    layers: int
    """Transformer layers of the LLM (all pipeline stages together)."""
    hidden: int
    """LLM hidden size."""
    heads: int
    """Query heads (before TP)."""
    kv_heads: int
    """Key/value heads (before TP)."""
    head_dim: int
    """Size of one attention head."""
    ffn: int
    """MLP intermediate size."""
    vocab: int
    """Vocabulary size."""
    attention_mask: str
    """Mask of the LLM attention: one of MASK_TYPES."""
    vision: VisionShape | None
    """Vision encoder shape, or None for a text-only model."""
    experts: ExpertShape | None = None
    """The mixture-of-experts MLP of every layer (None: the dense SwiGLU of `ffn`)."""


@dataclass(frozen=True)
class TimeFigures:
    """Time grids and per-unit costs (milliseconds) of one rank; see the `cost.table` docstring."""

    attention_causal_ms: Grid
    """Causal attention core of one layer, forward + backward, vs document tokens."""
    attention_full_ms: Grid
    """Full-mask attention core of one layer, forward + backward, vs document tokens."""
    attention_backward_ratio: float
    """Backward time / forward time of the attention core."""
    linear_ms_per_token: float
    """Non-attention work of one layer, forward + backward, per token."""
    linear_backward_ratio: float
    """Backward time / forward time of the non-attention work."""
    output_ms_per_token: float
    """Embedding + LM head + loss, forward + backward, per token."""
    vision_ms_per_patch: float
    """Vision encoder + merger, forward + backward, per patch (0 without a vision encoder)."""
    launch_ms: float
    """Fixed cost of one group's forward + backward round."""
    p2p_intra_ms: Grid
    """One point-to-point message inside a node vs bytes."""
    p2p_inter_ms: Grid
    """One point-to-point message between nodes vs bytes."""
    all_to_all_intra_ms: Grid
    """All-to-all inside a node vs bytes sent by each rank."""
    all_to_all_inter_ms: Grid
    """All-to-all across nodes vs bytes each rank sends to other nodes."""
    attention_off_diagonal_ms: Grid | None = None
    """Off-diagonal block of a causal ring step vs the document's tokens on the rank (None: the causal grid)."""
    comm_overlap: float = 1.0
    """Share of a ring step's transfer hidden behind its block compute, in [0, 1]."""
    p2p_by_group_size_ms: dict[int, Grid] | None = None
    """Intra-node point-to-point curves per group size (None: `p2p_intra_ms` for every size)."""
    all_to_all_by_group_size_ms: dict[int, Grid] | None = None
    """Intra-node all-to-all curves per group size (None: `all_to_all_intra_ms` for every size)."""
    attention_ulysses_ms: dict[int, Grid] | None = None
    """Per Ulysses degree: one rank's attention (model mask, heads / d heads) vs document tokens."""
    vision_ms_per_call: float = 0.0
    """Vision encoder + merger, forward + backward: the fixed cost of one call on one rank whatever its
    patches (per-block kernel launches and calls; 0 without a vision encoder)."""
    linear_ms: Grid | None = None
    """Non-attention work of one layer above its fixed cost, forward + backward, vs the tokens a rank
    holds (measured points: small shards run kernels below their peak); None: `linear_ms_per_token` x tokens."""
    attention_call_ms: float = 0.0
    """The least one attention call of one layer on one rank costs, forward + backward (host-side launch
    and the kernels' floor): a call costs the larger of it and the sum of its documents' grid times, so
    the documents packed into one call share it."""
    vision_ms: Grid | None = None
    """Vision encoder + merger, forward + backward, of one call on one rank vs the patches it encodes,
    fixed cost included (measured points: a call's host-side floor hides small work); None:
    `vision_ms_per_call` + `vision_ms_per_patch` x patches."""
    expert_ms_per_token: float = 0.0
    """The routed experts' share of `linear_ms_per_token` (one layer, forward + backward, per token routed from
    the rank): with expert parallelism the experts of a rank compute the tokens the whole expert-parallel group
    routes to them, so a round prices this share at the group's mean tokens (`solver.expert_phases`). 0: a
    dense model, or not separated."""
    expert_exchange_ms: Grid | None = None
    """Expert parallelism: the dispatch and combine all-to-alls of one layer, forward + backward, vs the tokens
    a rank holds (None: no expert parallelism)."""

    def attention_ms(self, mask: str) -> Grid:
        """The attention grid of a mask type."""
        return self.attention_causal_ms if mask == "causal" else self.attention_full_ms


@dataclass(frozen=True)
class MemoryFigures:
    """Memory figures of one rank, bytes."""

    static_bytes: float
    """Parameters, gradients and optimizer state held by the rank."""
    workspace_bytes: float
    """Fixed working memory: communication buffers, gathered parameters, runtime."""
    activation_bytes_per_token: float
    """LLM activations kept for backward, per LLM token held by the rank."""
    vision_activation_bytes_per_token: float
    """Vision-encoder activations per LLM token, counted as if every token were a vision token."""


@dataclass(frozen=True)
class StepFigures:
    """Costs of one training step outside the groups' forward + backward passes, one rank, milliseconds,
    for the run's ranks (the ranks the state is sharded over)."""

    optimizer_ms: float
    """The optimizer step over the rank's share of the parameters (once per step)."""
    fsdp_round_ms: float
    """FSDP (lockstep rounds): one round's parameter all-gathers (forward and backward) and gradient
    reduce-scatter over all ranks, with the sharding's own per-round work. A round lasts at least this long."""
    replica_reduction_ms: float
    """Replicas that meet once per step (DDP): the step's all-reduce of the fp32 gradients over all ranks,
    not overlapped with the backward pass (with the distributed optimizer, its reduce-scatter and
    parameter all-gather move no more bytes)."""
    fsdp_overlap: float = 1.0
    """Share of the shorter of a round's pass and its FSDP traffic that the longer hides: a round lasts
    max(pass, traffic) + (1 - overlap) min(pass, traffic) (1: FSDP2's prefetching hides it all)."""

    def lockstep_round_ms(self, pass_ms: float) -> float:
        """Length of a lockstep FSDP round whose slowest group's pass lasts `pass_ms`."""
        traffic = self.fsdp_round_ms
        return max(pass_ms, traffic) + (1.0 - self.fsdp_overlap) * min(pass_ms, traffic)
