"""Mixture-of-experts terms of the analytic presets: routed expert work, expert parallelism's all-to-alls, and the
parameters an FSDP round gathers when experts are split over ranks.

The MoE MLP of MindSpeed-MM's Qwen3-VL MoE (`Qwen3VLNpuFusedMoETextExperts`, the grouped-GEMM path that expert
parallelism needs and the 235B recipe sets) routes each token to `top_k` of `experts` SwiGLU experts: the token
rows are permuted by expert, two grouped GEMMs and a SwiGLU run per expert, and the rows are un-permuted
weighted by their routing probabilities. Per token and layer that is 2 x top_k x 3 h expert_ffn FLOPs forward
(`shapes.ExpertShape`); the router (h x experts) runs on every token like the attention projections.

- Grouped GEMMs over experts reach less of the peak than one dense GEMM: each expert multiplies only the rows
  routed to it (tokens x top_k / experts). `GROUPED_GEMM_SHARE` of the hardware's `linear_efficiency` is an
  [estimate], bounded by what MoE training reaches end to end: Qwen3-235B-A22B trained at 200-276 model TFLOP/s
  per H100 ([mzoo], all-to-alls and attention included) against 390 for a dense 175B model on the same GPUs
  ([meg]), 0.51-0.71 of it.
- The router's softmax and the permutation move memory: the permuted rows are written and read once forward on
  the way in and once on the way out (4 top_k h bytes per token in 16-bit), and the SwiGLU reads the gate and up
  outputs and writes its own (6 top_k expert_ffn) [inferred, as the dense layer's elementwise traffic].
- Expert parallelism (`expert_parallel` = ep > 1; MindSpeed-MM's FSDP2 `expert_parallel_size`, a [ep_replicate,
  ep] mesh of contiguous ranks): each rank keeps experts / ep experts; per layer, forward, a dispatch all-to-all
  sends every routed copy of a token (top_k rows of h) to the rank of its expert and a combine all-to-all brings
  the results back; backward, their gradients travel the same two ways, and a recomputed forward pass repeats
  the forward pair. A rank sends top_k h x element bytes per token it holds, (ep - 1) / ep of them to other
  ranks (uniform routing [inferred]); an expert-parallel group larger than a node sends its all-to-alls across
  nodes, which set their pace (as Ulysses' all-to-alls in `ulysses_costs`).
- FSDP with expert parallelism: the non-expert parameters are sharded over all ranks, each rank's experts over
  the ranks holding the same experts (ranks / ep), so an FSDP round gathers the whole non-expert part and 1 / ep
  of the experts ([msmm-ep]: `create_ep_device_mesh`, `_init_ep_model`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.cost.shapes import DecoderShape

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.cost.analytic import HardwarePreset, ModelPreset, Setup

GROUPED_GEMM_SHARE = 0.6
"""Achieved fraction of the routed experts' grouped GEMMs relative to a dense GEMM's (`linear_efficiency`)
[estimate, bounded by [mzoo] against [meg]: see the module docstring]."""
EXCHANGES_PER_LAYER = 4
"""All-to-alls of one layer's forward + backward: dispatch and combine, and their gradients."""
EXCHANGE_TOKENS = tuple(float(2 ** k) for k in range(6, 19))
"""Tokens per rank the exchange grid is written at (64 ... 262,144)."""


def routed_params_per_token(dec: DecoderShape) -> int:
    """Weights of the routed experts one token multiplies (0 for a dense decoder)."""
    experts = dec.experts
    return 0 if experts is None else experts.top_k * 3 * dec.hidden * experts.expert_ffn


def routed_expert_ms_per_token(hw: "HardwarePreset", dec: DecoderShape, setup: "Setup", fwd_bwd: float) -> float:
    """Forward + backward of one layer's routed experts per token (ms): the grouped GEMMs at their share of the
    hardware's linear efficiency, the permutation and SwiGLU traffic at memory speed (`fwd_bwd` = 1 + the
    matmuls' backward / forward ratio). 0 for a dense decoder."""
    experts = dec.experts
    if experts is None:
        return 0.0
    rate = hw.peak_tflops[setup.dtype] * 1e12 * hw.linear_efficiency * GROUPED_GEMM_SHARE
    flops = 2.0 * routed_params_per_token(dec) / setup.tp
    traffic = experts.top_k * (4 * dec.hidden + 6 * experts.expert_ffn) * setup.element_bytes / setup.tp
    return 1e3 * fwd_bwd * (flops / rate + traffic / hw.memory_bytes_per_s)


def exchange_bytes_per_token(dec: DecoderShape, setup: "Setup") -> float:
    """Bytes one rank sends to other ranks in one dispatch (or combine) all-to-all, per token it holds."""
    if dec.experts is None or setup.expert_parallel == 1:
        return 0.0
    ep = setup.expert_parallel
    return dec.experts.top_k * dec.hidden * setup.element_bytes / setup.tp * (ep - 1) / ep


def exchange_grid(hw: "HardwarePreset", dec: DecoderShape, setup: "Setup", ranks_per_node: int) -> Grid | None:
    """One layer's expert-parallel all-to-alls, forward + backward, vs the tokens a rank holds (None without
    expert parallelism): `EXCHANGES_PER_LAYER` all-to-alls of `exchange_bytes_per_token` each, inside a node or,
    for a group larger than one, across nodes."""
    per_token = exchange_bytes_per_token(dec, setup)
    if per_token == 0.0:
        return None
    if setup.expert_parallel > ranks_per_node:
        bandwidth, latency = hw.inter_node_bytes_per_s * hw.inter_efficiency, hw.inter_latency_ms
    else:
        bandwidth, latency = hw.a2a_intra_bytes_per_s * hw.a2a_efficiency, hw.a2a_latency_ms
    return Grid(EXCHANGE_TOKENS, tuple(EXCHANGES_PER_LAYER * (latency + 1e3 * t * per_token / bandwidth)
                                       for t in EXCHANGE_TOKENS), "linear")


def gathered_layer_params(dec: DecoderShape, expert_parallel: int) -> float:
    """Parameters of one layer an FSDP unit gathers on a rank: all of them, but only its experts / ep routed
    experts under expert parallelism."""
    routed = 0 if dec.experts is None else dec.experts.routed_params(dec.hidden)
    return dec.layer_params() - routed + routed / expert_parallel


def fsdp_gathered_params(model: "ModelPreset", setup: "Setup", params_per_rank: float) -> float:
    """Parameters one rank receives in an FSDP round's all-gather: the (ranks - 1) / ranks share of the rank's
    stage, and with expert parallelism, of its routed experts only 1 / ep, gathered over the ranks / ep ranks
    holding the same experts."""
    ranks, ep = setup.shard_ranks, setup.expert_parallel
    dec = model.decoder
    routed = 0.0 if dec.experts is None else dec.layers // setup.pp * dec.experts.routed_params(dec.hidden) / setup.tp
    replicas = ranks // ep
    expert_share = (replicas - 1) / replicas / ep if replicas > 1 else 0.0
    return (params_per_rank - routed) * (ranks - 1) / ranks + routed * expert_share
