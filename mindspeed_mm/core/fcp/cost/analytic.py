"""Analytic time and memory figures of a model shape on a piece of hardware (used by the presets).

Times come from FLOP counts over achieved peak plus memory traffic over device bandwidth; links
are latency + bytes / (bandwidth x efficiency); memory follows the activation and bytes-per-
parameter accounting of [kor], [megmem] and [zero] (source keys of `presets.SOURCES`).
Forward + backward: a matmul's backward is 2 GEMMs (ratio 2); fused attention's backward is
about 5 matmuls against 2 forward (ratio 2.5). Collectives over n ranks move S (n - 1) / n bytes per
rank for an all-gather or reduce-scatter of S bytes and twice that for an all-reduce, at the bus
bandwidth of the slowest link they cross [nccl-perf].
"""
from __future__ import annotations

from dataclasses import dataclass

from mindspeed_mm.core.fcp.cost.expert_terms import (
    exchange_grid, fsdp_gathered_params, gathered_layer_params, routed_expert_ms_per_token, routed_params_per_token,
)
from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.cost.shapes import DecoderShape, EncoderShape
from mindspeed_mm.core.fcp.cost.table import MemoryFigures, StepFigures, TimeFigures

SHARDING_MODES = ("none", "distributed_optimizer", "fsdp")
ATTENTION_BACKWARD_RATIO = 2.5
LINEAR_BACKWARD_RATIO = 2.0


@dataclass(frozen=True)
class HardwarePreset:
    """Public figures of one accelerator and its cluster links, per rank."""

    description: str
    """What the preset models."""
    device: str
    """Device kind: npu, cuda or cpu."""
    ranks_per_node: int
    """Ranks on one node's fast fabric."""
    memory_bytes: int
    """Device memory per rank."""
    usable_memory_fraction: float
    """Share of memory left to tensors after runtime reservation and allocator slack."""
    peak_tflops: dict[str, float]
    """Dense peak per supported dtype (the first key is the default dtype)."""
    memory_bytes_per_s: float
    """Device-memory bandwidth."""
    p2p_intra_bytes_per_s: float
    """One-direction bandwidth between two ranks of a node."""
    a2a_intra_bytes_per_s: float
    """One-direction bandwidth a rank can spread over all its node peers at once."""
    inter_node_bytes_per_s: float
    """One-direction network bandwidth per rank between nodes."""
    p2p_efficiency: float
    """Achieved fraction of the link for point-to-point messages."""
    a2a_efficiency: float
    """Achieved fraction of the links for all-to-all."""
    inter_efficiency: float
    """Achieved fraction of the network link."""
    p2p_latency_ms: float
    """Latency of one point-to-point message inside a node."""
    a2a_latency_ms: float
    """Latency of one all-to-all inside a node."""
    inter_latency_ms: float
    """Latency of one message / all-to-all across nodes."""
    linear_efficiency: float
    """Achieved fraction of peak for the GEMMs."""
    attention_efficiency: float
    """Achieved fraction of peak of the attention kernel on long documents."""
    attention_half_tokens: float
    """Document length at which the attention kernel reaches half its long-document efficiency."""
    attention_call_ms: float
    """The least one attention forward + backward call costs (its kernel pair's launch)."""
    launch_ms_per_layer: float
    """Unhidden host / launch cost per layer and round (forward + backward)."""
    runtime_bytes: float
    """Memory taken by the runtime and communication buffers."""
    sources: str
    """Source keys behind the figures above, in order."""
    vision_block_ms: float | None = None
    """The least one vision block's call costs, forward + backward (its host-side floor); None: a block is
    charged what a decoder layer's launch and one attention call cost."""


@dataclass(frozen=True)
class ModelPreset:
    """Public shape of one model."""

    decoder: DecoderShape
    """LLM decoder."""
    encoder: EncoderShape | None
    """Vision encoder and merger."""
    recompute: str
    """Default activation recompute of the recipe."""
    sources: str
    """Source keys of the shape."""
    shard_ranks: int | None = None
    """Ranks the recipe shards the training state over by default (None: one node)."""


@dataclass(frozen=True)
class Setup:
    """The fixed parallel layout and training options a table is built for."""

    tp: int
    """Tensor-parallel size."""
    pp: int
    """Pipeline-parallel size."""
    dtype: str
    """Training dtype."""
    recompute: str
    """`none` or `full` activation recompute."""
    sharding: str
    """Parameter / gradient / optimizer state keeping: one of SHARDING_MODES."""
    shard_ranks: int
    """Ranks the state is sharded over."""
    expert_parallel: int = 1
    """Ranks a mixture-of-experts model's experts are split over (`expert_terms`)."""

    @property
    def element_bytes(self) -> int:
        """Bytes of one activation / parameter element."""
        return 4 if self.dtype == "fp32" else 2


def time_figures(hw: HardwarePreset, model: ModelPreset, setup: Setup,
                 ranks_per_node: int | None = None) -> TimeFigures:
    """Per-rank time figures of one stage (`ranks_per_node`: the node size, default the hardware's)."""
    dec, enc, tp = model.decoder, model.encoder, setup.tp
    elem = setup.element_bytes
    peak = hw.peak_tflops[setup.dtype]
    lin_rate = peak * 1e12 * hw.linear_efficiency
    fwd_bwd = 1 + LINEAR_BACKWARD_RATIO

    # The routed experts of a mixture-of-experts layer are priced apart (`expert_terms`); the router and a shared
    # expert run on every token like the dense parts.
    layer_flops = 2.0 * (dec.active_matmul_params() - routed_params_per_token(dec)) / tp
    mlp_width = dec.ffn if dec.experts is None else dec.experts.shared_expert_ffn
    elementwise_bytes = (12 * dec.hidden + 4 * mlp_width) * elem / tp   # norms, SwiGLU, residuals [inferred]
    expert_ms = routed_expert_ms_per_token(hw, dec, setup, fwd_bwd)
    linear_ms = 1e3 * fwd_bwd * (layer_flops / lin_rate + elementwise_bytes / hw.memory_bytes_per_s) + expert_ms
    if tp > 1:
        # Sequence parallelism: 2 all-gathers + 2 reduce-scatters of h per token forward, the
        # same backward, not overlapped.
        tp_bytes = 8 * (tp - 1) / tp * dec.hidden * elem
        linear_ms += 1e3 * tp_bytes / (hw.a2a_intra_bytes_per_s * hw.a2a_efficiency)
    head_flops = 2.0 * dec.hidden * dec.vocab / tp
    loss_bytes = 4 * 4 * dec.vocab / tp   # fp32 logits written, read by softmax, gradient written and read
    output_ms = 1e3 * (fwd_bwd * head_flops / lin_rate + loss_bytes / hw.memory_bytes_per_s)
    vision_ms = vision_call_ms = 0.0
    if enc is not None:
        # Each block pays its own call floor once per call (the frame groups of a call share one varlen
        # attention call), not the text layer's host work [inferred].
        block_ms = hw.vision_block_ms if hw.vision_block_ms is not None else hw.launch_ms_per_layer + hw.attention_call_ms
        vision_call_ms = enc.depth * block_ms
        window = enc.attention_window
        vision_attn_rate = peak * 1e12 * hw.attention_efficiency * window / (window + hw.attention_half_tokens)
        vision_ms = 1e3 * (fwd_bwd * enc.matmul_forward_flops_per_patch() / tp / lin_rate
                           + (1 + ATTENTION_BACKWARD_RATIO) * enc.attention_forward_flops_per_patch() / tp
                           / vision_attn_rate)
    return TimeFigures(
        attention_causal_ms=_attention_grid(dec, hw, peak, tp, elem, causal=True),
        attention_full_ms=_attention_grid(dec, hw, peak, tp, elem, causal=False),
        attention_backward_ratio=ATTENTION_BACKWARD_RATIO,
        linear_ms_per_token=linear_ms,
        linear_backward_ratio=LINEAR_BACKWARD_RATIO,
        output_ms_per_token=output_ms,
        vision_ms_per_patch=vision_ms,
        vision_ms_per_call=vision_call_ms,
        launch_ms=hw.launch_ms_per_layer * (dec.layers // setup.pp),
        attention_call_ms=hw.attention_call_ms,
        p2p_intra_ms=_comm_grid(hw.p2p_intra_bytes_per_s * hw.p2p_efficiency, hw.p2p_latency_ms),
        p2p_inter_ms=_comm_grid(hw.inter_node_bytes_per_s * hw.inter_efficiency, hw.inter_latency_ms),
        all_to_all_intra_ms=_comm_grid(hw.a2a_intra_bytes_per_s * hw.a2a_efficiency, hw.a2a_latency_ms),
        all_to_all_inter_ms=_comm_grid(hw.inter_node_bytes_per_s * hw.inter_efficiency, hw.inter_latency_ms),
        expert_ms_per_token=expert_ms,
        expert_exchange_ms=exchange_grid(hw, dec, setup, hw.ranks_per_node if ranks_per_node is None
                                         else ranks_per_node),
    )


def params_per_rank(model: ModelPreset, setup: Setup) -> float:
    """Parameters held by the rank of the largest pipeline stage."""
    dec, enc = model.decoder, model.encoder
    stage_layers = dec.layers // setup.pp * dec.layer_params()
    first = stage_layers + dec.embedding_params() + (enc.params() if enc is not None else 0)
    if setup.pp == 1:
        return (first + dec.head_params()) / setup.tp
    last = stage_layers + dec.head_params() + (dec.embedding_params() if dec.tied_embeddings else 0)
    return max(first, last) / setup.tp


def memory_figures(hw: HardwarePreset, model: ModelPreset, setup: Setup) -> MemoryFigures:
    """Per-rank memory figures of the largest stage."""
    dec, enc, tp = model.decoder, model.encoder, setup.tp
    elem = setup.element_bytes
    scale = elem / 2   # the activation formulas count 16-bit tensors
    full = setup.recompute == "full"
    div = tp   # with TP, sequence parallelism shards the activations too

    keep = dec.layer_activation_bytes() * scale / div
    kept_per_layer = 2 * dec.hidden * scale / div if full else keep
    live = keep if full else 0.0                      # the layer being recomputed
    output_bytes = 4 * (dec.hidden + dec.vocab) / tp  # fp32 logits path [megmem]
    # 1F1B keeps pp micro-batches on the first stage: all `layers` worth of activations [kor].
    first = dec.layers * kept_per_layer + live + (output_bytes if setup.pp == 1 else 0.0)
    last = dec.layers // setup.pp * kept_per_layer + live + output_bytes
    # Context-parallel buffers of the layer at work, per token on the rank: ring keeps the K, V
    # block in flight twice (send + receive) and fp32 dK, dV accumulators; Ulysses holds q, k, v
    # and the output while they travel. The larger of the two is reserved [inferred].
    kv_width = dec.kv_heads // tp * dec.head_dim
    ring_buffers = 2 * 2 * kv_width * elem + 2 * kv_width * 4
    ulysses_buffers = (2 * dec.heads // tp * dec.head_dim + 2 * kv_width) * elem
    activation = max(first, last) + max(ring_buffers, ulysses_buffers)

    vision_activation = 0.0
    if enc is not None:
        vkeep = enc.block_activation_bytes() * scale / div
        per_patch = enc.depth * 2 * enc.hidden * scale / div + vkeep if full else enc.depth * vkeep
        vision_activation = per_patch * enc.patches_per_token

    gathered = 0.0
    if setup.sharding == "fsdp":
        # Two layers gathered at once (current + prefetch): parameters and unsharded gradients.
        gathered = 2 * 2 * gathered_layer_params(dec, setup.expert_parallel) / tp * elem
    static = params_per_rank(model, setup) * _bytes_per_param(setup)
    return MemoryFigures(static_bytes=float(static), workspace_bytes=float(hw.runtime_bytes + gathered),
                         activation_bytes_per_token=float(activation),
                         vision_activation_bytes_per_token=float(vision_activation))


def step_figures(hw: HardwarePreset, model: ModelPreset, setup: Setup) -> StepFigures:
    """Per-rank costs of a step outside the groups' passes, for the `setup.shard_ranks` ranks of the run.

    - FSDP round: parameters gathered in the training dtype before the forward pass and again before
      the backward pass (`reshard_after_forward`; recomputation runs inside the backward's gather),
      gradients reduce-scattered in fp32 after every backward, as FSDP2 does by default [fsdp2] and
      MindSpeed-MM's Qwen3-VL FSDP2 configuration sets (param bf16, reduce fp32) [msmm-fsdp2]. The
      shorter of a round's pass and its traffic hides behind the longer (`fsdp_overlap` 1: FSDP2 issues
      the next unit's all-gather on its own stream while the current one computes [fsdp2]).
    - Replicas (DDP): one all-reduce of the fp32 gradients per step, not overlapped with the last
      backward (an upper bound); the distributed optimizer's fp32 reduce-scatter and parameter
      all-gather [megmem] move no more bytes.
    - Optimizer: Adam is memory-bound: it reads fp32 parameters, gradients and both moments and writes
      parameters and moments (28 bytes per parameter), plus the 16-bit parameter copy in mixed
      precision, over the rank's shard [zero][inferred].
    - A mixture-of-experts model's round gathers every expert of every layer (`expert_terms`: 31B parameters for
      Qwen3-VL-30B-A3B against 8.8B for the 8B), or with expert parallelism each rank's experts only, over the ranks
      holding the same ones.
    Message latencies are left out: each layer's collective moves hundreds of MB for these models.
    """
    params = params_per_rank(model, setup)
    ranks = setup.shard_ranks
    spans_nodes = ranks > hw.ranks_per_node
    bus = (hw.inter_node_bytes_per_s * hw.inter_efficiency if spans_nodes
           else hw.p2p_intra_bytes_per_s * hw.p2p_efficiency)
    share = (ranks - 1) / ranks

    elem = setup.element_bytes
    optimizer_bytes = 28.0 + (elem if elem != 4 else 0)
    shards = 1 if setup.sharding == "none" else ranks
    # An FSDP round moves (2 elem + 4) bytes per parameter it gathers (`expert_terms`: experts split over ranks
    # are gathered over the ranks holding the same experts only).
    gathered = fsdp_gathered_params(model, setup, params)
    return StepFigures(
        optimizer_ms=1e3 * optimizer_bytes * params / shards / hw.memory_bytes_per_s,
        fsdp_round_ms=1e3 * (2 * elem + 4) * gathered / bus,
        replica_reduction_ms=2 * 1e3 * 4 * params * share / bus,
    )


def _comm_grid(bandwidth: float, latency_ms: float) -> Grid:
    """latency + bytes / bandwidth at 1 KiB ... 4 GiB (x4 steps)."""
    sizes = [float(4**k * 1024) for k in range(12)]
    return Grid(tuple(sizes), tuple(latency_ms + 1e3 * b / bandwidth for b in sizes), "linear")


def _attention_grid(dec: DecoderShape, hw: HardwarePreset, peak: float, tp: int, elem: int,
                    causal: bool) -> Grid:
    """Fused-attention forward + backward per document length, one layer, the rank's heads.

    compute: FLOPs / (peak x eff x s / (s + s_half)); memory traffic: q, k, v, o read / written
    once forward, ATTENTION_BACKWARD_RATIO times that backward. The kernel pair's call cost is the
    table's `attention_call_ms`, the least a call costs whatever the documents in it.
    """
    lengths = [float(2**k) for k in range(6, 19)]
    heads = dec.heads // tp
    kv_heads = dec.kv_heads // tp
    times = []
    for s in lengths:
        flops = dec.attention_forward_flops(s, causal) / tp
        compute = flops / (peak * 1e12 * hw.attention_efficiency * s / (s + hw.attention_half_tokens))
        traffic = s * (2 * heads + 2 * kv_heads) * dec.head_dim * elem / hw.memory_bytes_per_s
        times.append(1e3 * (1 + ATTENTION_BACKWARD_RATIO) * (compute + traffic))
    return Grid(tuple(lengths), tuple(times), "loglog")


def _bytes_per_param(setup: Setup) -> float:
    """Parameter + gradient + Adam bytes per parameter on one rank [megmem][zero]."""
    shards = setup.shard_ranks
    if setup.sharding == "fsdp":
        return 16.0 / shards   # fp32 params, grads, Adam m and v, all sharded
    if setup.dtype == "fp32":
        return 16.0 if setup.sharding == "none" else 8.0 + 8.0 / shards
    return 18.0 if setup.sharding == "none" else 6.0 + 12.0 / shards
