"""Analytic profile tables built from public hardware and model figures, for planning without a device.

Every figure names its origin with a source key of the project's preset notes (`[gk]`, `[LLS]`,
...; the keys are expanded in each table's `provenance.sources`). `[inferred]` marks a value
derived here rather than stated by a source; `[estimate]` marks an engineering guess that only
a measured table (`fcp profile`) can replace. Units: bytes, bytes/s (1 GB/s = 1e9 B/s), TFLOP/s,
milliseconds. Memory sizes given in GB by the sources are taken as 1e9 bytes (conservative: HBM
stacks are binary-sized).

Achieved-efficiency factors (fraction of peak really reached), per hardware:
- `linear_efficiency`: projections / MLP GEMMs of these 1.5B-8B models. Large GEMMs reach
  0.89 of peak on 910B2 [b2mm]; end-to-end LLM training reaches 0.34 (910B, [idx]) to 0.41-0.48
  MFU (H100, [meg]) including attention, communication and optimizer. 0.6 sits between the
  kernel and the end-to-end figure [inferred].
- `attention_efficiency`: fused attention kernels reach 0.35 (FA2) to 0.75 (FA3) on H100 [fa3];
  0.5 on NVIDIA, 0.45 on Ascend (no public figure for npu_fusion_attention) [estimate]. It
  falls for short documents as s / (s + `attention_half_tokens`) [estimate].
- `p2p_efficiency` / `a2a_efficiency`: NCCL ring busbw on H100 NVLink is 0.80-0.82 of the
  one-direction link [nccl212], [nccl1455]; DeepEP-Ascend all-to-all at EP8 on A3 is about 0.74
  of 196 GB/s [sglnpu]; DeepEP inter-node reaches 0.86-1.0 of 50 GB/s [deepep].
"""
from __future__ import annotations

import dataclasses
from typing import Any

from mindspeed_mm.core.fcp.cost.analytic import (
    SHARDING_MODES, HardwarePreset, ModelPreset, Setup, memory_figures, params_per_rank, step_figures, time_figures,
)
from mindspeed_mm.core.fcp.cost.measured_compute import MeasuredCompute, load_h200_qwen3vl8b, quadratic_grid
from mindspeed_mm.core.fcp.cost.shapes import DecoderShape, EncoderShape, ExpertShape
from mindspeed_mm.core.fcp.cost.term_provenance import preset_term_provenance
from mindspeed_mm.core.fcp.cost.table import (
    RECOMPUTE_MODES, SCHEMA_VERSION, HardwareInfo, ModelShape, ProfileTable, TimeFigures, VisionShape,
)

SOURCES = {
    "MM8": "Ascend/MindSpeed-MM examples/mindspore/qwen3vl/model_8B.json (commit 57069cd5)",
    "MM30": "Ascend/MindSpeed-MM examples/mindspore/qwen3vl/model_30B.json (commit 57069cd5: 128 experts, top-8, "
            "moe_intermediate_size 768, full recompute)",
    "MMy": "Ascend/MindSpeed-MM examples/qwen3vl/qwen3vl_full_sft_8B.yaml",
    "MMy-all": "Ascend/MindSpeed-MM examples/qwen3vl/qwen3vl_full_sft_{32B,30B,235B}.yaml (commit 57069cd5: FSDP2, "
               "model_id qwen3_vl_moe for 30B and 235B, text_decoder num_layers 64 / 48 / 94; 32B on 16 ranks, "
               "235B on 16 A3 nodes)",
    "Q32hf": "official Qwen/Qwen3-VL-32B-Instruct config.json (a code-corpus copy, find_string id 57421871688: text "
             "64 layers, hidden 5120, 64 / 8 heads of 128, intermediate 25600; vision out_hidden_size 5120)",
    "Q30hf": "official Qwen/Qwen3-VL-30B-A3B-Instruct config.json at commit 1fc78ad (a code-corpus transcription, "
             "find_string id 62478544309: 48 layers, hidden 2048, 32 / 4 heads of 128, 128 experts, top-8, "
             "moe_intermediate_size 768, mlp_only_layers [], decoder_sparse_step 1, no shared expert)",
    "Q235hf": "official Qwen/Qwen3-VL-235B-A22B-Instruct config.json (quoted by a code-corpus architecture note, "
              "find_string id 66750245330: 94 layers, hidden 4096, 64 / 4 heads of 128, 128 experts, top-8, "
              "moe_intermediate_size 1536, no shared expert; vision out_hidden_size 4096)",
    "mzoo": "yanring/Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md (Qwen3-235B-A22B on 256 H100: 200-276 "
            "model TFLOP/s per GPU)",
    "msmm-ep": "Ascend/MindSpeed-MM mindspeed_mm/models/transformers/base_model.py (create_ep_device_mesh, "
               "_init_ep_model: experts split over an [ep_replicate, ep] mesh, FSDP over ep_replicate) and "
               "models/common/fused_moe.py (dispatch and combine all-to-alls)",
    "Q2": "official Qwen3-VL-2B config.json",
    "Q4": "official Qwen3-VL-4B config.json (unsloth/Qwen3-VL-4B-Instruct copy)",
    "Q8hf": "Qwen3-VL-8B derivative config.json (tie_word_embeddings false)",
    "LLS": "JiusiServe/light-llm-simulator conf/hardware_config.py",
    "verl": "volcengine/verl verl/utils/flops_counter.py (_DEVICE_FLOPS)",
    "popo": "popomen.github.io 2023-10-16 Ascend 910B notes",
    "meemx": "meemx.com HCCL contest log",
    "hiasc-fm": "hiascend.com PyTorch 60RC1 performance tuning: 8p HCCS full mesh",
    "CM384": "arXiv 2506.12708, Serving LLMs on Huawei CloudMatrix384",
    "crc": "chinaresearchcollective.substack.com, Huawei Ascend CloudMatrix 384 supernode",
    "hia3": "hiascend.com MindCluster scheduling guide, A3 affinity pages dl_affinity_0007/0040",
    "sglnpu": "sgl-project/sgl-kernel-npu README (DeepEP-Ascend on A3 SuperPoD)",
    "b2mm": "github.com/zzc0721/torch-performance-test-data/issues/109 (910B2 GEMM)",
    "idx": "github.com/bilibili/Index-1.9B/issues/2 (910B pretraining throughput)",
    "gk": "glennklockwood.com/garden/processors/h100",
    "mlc-h200": "mlcommons inference_results_v4.1 H200-SXM-141GBx8 system description",
    "hwds": "devidasmishra/ai-inference-hardware-economics-2026 (H200 4.8 TB/s)",
    "nccl212": "github.com/NVIDIA/nccl-tests/issues/212",
    "nccl1455": "github.com/NVIDIA/nccl/issues/1455",
    "deepep": "deepseek-ai/DeepEP README and docs/legacy.md",
    "fa3": "PyTorch blog 2024-07-11 FlashAttention-3",
    "meg": "NVIDIA/Megatron-LM README (MFU figures)",
    "megmem": "NVIDIA/Megatron-LM theoretical_memory_usage.py and dist_optimizer.md",
    "kor": "Korthikanti et al., arXiv 2205.05198, Tables 1-2",
    "zero": "Rajbhandari et al., arXiv 1910.02054 (ZeRO)",
    "nccl-perf": "NVIDIA/nccl-tests doc/PERFORMANCE.md (bus bandwidth of all-gather, reduce-scatter, all-reduce)",
    "fsdp2": "PyTorch docs, torch.distributed.fsdp.fully_shard (reshard_after_forward; gradients reduce-scattered "
             "after every backward unless set_requires_gradient_sync(False)); pytorch/pytorch pull request 117973 "
             "(implicit prefetching: all-gathers on their own streams, overlapping the previous unit's compute)",
    "msmm-fsdp2": "Ascend/MindSpeed-MM examples/qwen3vl/fsdp2_config.yaml (reshard_after_forward, param bf16, "
                  "reduce fp32)",
    "workloads": "project workload notes: Qwen3-VL video token rule (720 tokens per second at 720p)",
    "h200-measured": "one NVIDIA H200, Qwen3-VL-8B shapes, bf16, torch 2.11 (measured/h200_qwen3vl8b_compute.jsonl "
                     "in this package; the lines of each term are in provenance.measured_compute)",
}

# Compute terms measured on a device replace the analytic ones for these (hardware, model) pairs at the
# measured TP size; communication, memory and step terms stay analytic.
MEASURED_COMPUTE = {("h200", "qwen3vl-8b"): load_h200_qwen3vl8b}
MEASURED_TP = 1


_GB = 1e9

# Host-side floors of the real model's calls, measured on the H200 [h200-measured]: one attention call costs at
# least ~1.1 ms forward + backward and one decoder layer ~2 ms of kernels' floor plus ~3.2 ms of the Hugging Face
# layer's own host work (the model MindSpeed-MM forks; the constant that, added to the kernels at every size,
# comes closest to it), whatever few tokens it holds; one Hugging Face vision block's call ~4.6 ms. They come
# from the host and the eager PyTorch code that drives the device, so the other accelerators take the same
# floors [copied: the H200's measurements assumed for them; a table measured by `fcp profile` replaces them].
_H200_MEASURED = load_h200_qwen3vl8b()[2]
HOST_ATTENTION_CALL_MS = _H200_MEASURED.attention_call_ms
HOST_LAYER_MS = _H200_MEASURED.layer_floor_ms + _H200_MEASURED.additive_host_ms
HOST_VISION_BLOCK_MS = _H200_MEASURED.vision_floor_ms

HARDWARE: dict[str, HardwarePreset] = {
    "a3": HardwarePreset(
        description="Atlas 800T A3: 8 Ascend 910C packages = 16 dies per node, one rank per die",
        device="npu",
        # 16 dies per node, each its own device and HCCL rank [hia3]; the design's "8 devices"
        # counts 910C packages, but the framework (and the planner) sees dies.
        ranks_per_node=16,
        memory_bytes=int(64 * _GB),            # 128 GB per package / 2 dies [CM384][inferred], [LLS]
        usable_memory_fraction=0.9,            # [estimate]
        peak_tflops={"bf16": 376.0, "fp16": 376.0},   # per die [CM384]
        memory_bytes_per_s=1.6e12,             # 3.2 TB/s per package / 2 [CM384][inferred], [LLS]
        p2p_intra_bytes_per_s=196 * _GB,       # 7 x 224 Gbps UB per die, one direction [hia3][crc][inferred]
        a2a_intra_bytes_per_s=196 * _GB,       # same fabric, switched [hia3]
        inter_node_bytes_per_s=25 * _GB,       # 200 Gbps RDMA per die [hia3]; a SuperPoD's UB is faster
        p2p_efficiency=0.8,                    # NCCL-class ring efficiency [nccl212][inferred for HCCL]
        a2a_efficiency=0.74,                   # DeepEP-Ascend EP8 [sglnpu][inferred]
        inter_efficiency=0.86,                 # [deepep]
        p2p_latency_ms=0.02, a2a_latency_ms=0.04, inter_latency_ms=0.03,   # [estimate]
        linear_efficiency=0.6,                 # see module docstring [b2mm][idx][inferred]
        attention_efficiency=0.45,             # [estimate]
        attention_half_tokens=512.0,           # [estimate]
        attention_call_ms=HOST_ATTENTION_CALL_MS,    # [h200-measured][estimate], see HOST_ATTENTION_CALL_MS
        launch_ms_per_layer=HOST_LAYER_MS,           # [h200-measured][estimate]
        vision_block_ms=HOST_VISION_BLOCK_MS,        # [h200-measured][estimate]
        runtime_bytes=2 * 2**30,               # CANN runtime + HCCL buffers [estimate]
        sources="hia3, CM384, LLS, crc, sglnpu, deepep, nccl212, b2mm, idx, h200-measured",
    ),
    "910b": HardwarePreset(
        description="Atlas 800T A2: 8 Ascend 910B2 per node, HCCS full mesh, 200GE RoCE per NPU",
        device="npu",
        ranks_per_node=8,                      # [hiasc-fm]
        memory_bytes=int(64 * _GB),            # [LLS]
        usable_memory_fraction=0.9,            # [estimate]
        # 24 AI cores x 1.8 GHz x 16^3 x 2 = 353.9 TFLOP/s [LLS]; verl uses 354 [verl]
        peak_tflops={"bf16": 353.9, "fp16": 353.9},
        memory_bytes_per_s=1.6e12,             # [LLS]
        # 7 HCCS links, 392 GB/s aggregate read as both directions (the simulator uses 196 per NPU)
        # -> 196 GB/s one direction over 7 peers -> 28 GB/s per peer pair [popo][LLS][inferred]
        p2p_intra_bytes_per_s=28 * _GB,
        a2a_intra_bytes_per_s=196 * _GB,       # all 7 links at once [popo][LLS][inferred]
        inter_node_bytes_per_s=25 * _GB,       # 1 x 200GE RoCE per NPU [popo][meemx]
        p2p_efficiency=0.8, a2a_efficiency=0.7, inter_efficiency=0.86,   # [nccl212][sglnpu][deepep][inferred]
        p2p_latency_ms=0.02, a2a_latency_ms=0.04, inter_latency_ms=0.03,   # [estimate]
        linear_efficiency=0.6, attention_efficiency=0.45, attention_half_tokens=512.0,
        attention_call_ms=HOST_ATTENTION_CALL_MS, launch_ms_per_layer=HOST_LAYER_MS,   # [h200-measured][estimate]
        vision_block_ms=HOST_VISION_BLOCK_MS,
        runtime_bytes=2 * 2**30,
        sources="LLS, verl, popo, meemx, hiasc-fm, b2mm, idx, h200-measured",
    ),
    "h100": HardwarePreset(
        description="HGX H100 SXM5: 8 GPUs per node, NVLink4, 400 Gb/s InfiniBand per GPU",
        device="cuda",
        ranks_per_node=8,                      # [gk]
        memory_bytes=int(80 * _GB),            # [gk]
        usable_memory_fraction=0.9,            # [estimate]
        peak_tflops={"bf16": 989.4, "fp16": 989.4},   # dense [gk]
        memory_bytes_per_s=3.35e12,            # [gk]
        p2p_intra_bytes_per_s=450 * _GB,       # 900 GB/s both directions [gk]
        a2a_intra_bytes_per_s=450 * _GB,       # NVSwitch: full bandwidth to any peer [gk]
        inter_node_bytes_per_s=50 * _GB,       # 1 x CX7 400 Gb/s per GPU [gk][deepep]
        p2p_efficiency=0.81,                   # 365-370 of 450 GB/s [nccl212][nccl1455]
        a2a_efficiency=0.8,                    # [nccl212][inferred]
        inter_efficiency=0.86,                 # [deepep]
        p2p_latency_ms=0.01, a2a_latency_ms=0.02, inter_latency_ms=0.02,   # [estimate]
        linear_efficiency=0.6,                 # [meg][inferred]
        attention_efficiency=0.5,              # between FA2 0.35 and FA3 0.75 [fa3][estimate]
        attention_half_tokens=512.0,
        attention_call_ms=HOST_ATTENTION_CALL_MS,    # [h200-measured][inferred: same host software]
        launch_ms_per_layer=HOST_LAYER_MS, vision_block_ms=HOST_VISION_BLOCK_MS,
        runtime_bytes=1.5 * 2**30,             # CUDA context + NCCL buffers [estimate]
        sources="gk, nccl212, nccl1455, deepep, meg, fa3, h200-measured",
    ),
    "h200": HardwarePreset(
        description="HGX H200 SXM: 8 GPUs per node, NVLink4, 400 Gb/s class InfiniBand per GPU",
        device="cuda",
        ranks_per_node=8,                      # [mlc-h200]
        memory_bytes=int(141 * _GB),           # [mlc-h200]
        usable_memory_fraction=0.9,
        peak_tflops={"bf16": 989.0, "fp16": 989.0},   # same GH100 compute [mlc-h200][verl]
        memory_bytes_per_s=4.8e12,             # [hwds]
        p2p_intra_bytes_per_s=450 * _GB,       # 18 x NVLink4, 900 GB/s both directions [mlc-h200]
        a2a_intra_bytes_per_s=450 * _GB,
        inter_node_bytes_per_s=50 * _GB,       # 400 Gb/s class [mlc-h200]
        p2p_efficiency=0.81, a2a_efficiency=0.8, inter_efficiency=0.86,
        p2p_latency_ms=0.01, a2a_latency_ms=0.02, inter_latency_ms=0.02,
        linear_efficiency=0.6, attention_efficiency=0.5, attention_half_tokens=512.0,
        attention_call_ms=HOST_ATTENTION_CALL_MS, launch_ms_per_layer=HOST_LAYER_MS,   # [h200-measured]
        vision_block_ms=HOST_VISION_BLOCK_MS,
        runtime_bytes=1.5 * 2**30,
        sources="mlc-h200, hwds, verl, nccl212, deepep, fa3, h200-measured",
    ),
    "cpu": HardwarePreset(
        description="This development machine: 2 AMD EPYC cores (AVX2 + FMA), gloo over loopback; "
                    "rough figures until `fcp profile` measures them",
        device="cpu",
        ranks_per_node=8,                      # all test ranks share one host
        memory_bytes=int(2 * _GB),             # 24 GB host shared by up to 8 ranks and the OS [estimate]
        usable_memory_fraction=0.9,
        # 2 cores x 2.6 GHz x 2 FMA pipes x 8 fp32 lanes x 2 = 0.166 TFLOP/s [inferred from lscpu]
        peak_tflops={"fp32": 0.166},
        memory_bytes_per_s=20 * _GB,           # [estimate]
        p2p_intra_bytes_per_s=2 * _GB, a2a_intra_bytes_per_s=2 * _GB, inter_node_bytes_per_s=2 * _GB,
        p2p_efficiency=0.5, a2a_efficiency=0.5, inter_efficiency=0.5,
        p2p_latency_ms=0.1, a2a_latency_ms=0.2, inter_latency_ms=0.1,
        linear_efficiency=0.3,
        # torch SDPA in fp32 on one thread with head_dim 16 is memory-bound: a 2-layer tiny model
        # took about 0.28 s / 6.8 s forward + backward at 1000 / 4000 tokens (rough, on a shared
        # machine), i.e. about 2% of peak [measured].
        attention_efficiency=0.02, attention_half_tokens=64.0,
        attention_call_ms=0.1,
        launch_ms_per_layer=2.0,   # 16-token forward + backward took about 4 ms [measured]
        # The bed's tiny Qwen3-VL encoder (2 blocks): about 4 ms a call at few patches (`fcp profile --recipe`)
        # [measured, rough].
        vision_block_ms=2.0,
        runtime_bytes=128 * 2**20,
        sources="lscpu and rough timings of the tiny model on the development machine; the rest [estimate]",
    ),
}


def _qwen3vl_vit(depth: int, hidden: int, mlp: int, out_hidden: int) -> EncoderShape:
    # Patch 16, 2x2 spatial merge, 2-frame temporal patch, 3 DeepStack mergers [Q2][Q4][MM8]; one
    # attention sequence per 2-frame group: 720 tokens x 4 patches at 720p [workloads][inferred].
    return EncoderShape(depth=depth, hidden=hidden, heads=16, mlp=mlp, patch_size=16, spatial_merge=2,
                        temporal_patch=2, out_hidden=out_hidden, mergers=4, attention_window=2880)


# Real models default to full recompute, as MindSpeed-MM's Qwen3-VL 8B recipe [MM8]: without it
# the activations of Qwen3-VL-8B leave about 5K tokens per 64 GB rank.
MODELS: dict[str, ModelPreset] = {
    "qwen3vl-2b": ModelPreset(
        DecoderShape(layers=28, hidden=2048, heads=16, kv_heads=8, head_dim=128, ffn=6144, vocab=151936,
                     tied_embeddings=True, qkv_bias=False, qk_norm=True),
        _qwen3vl_vit(depth=24, hidden=1024, mlp=4096, out_hidden=2048), "full", "Q2, MM8, workloads"),
    "qwen3vl-4b": ModelPreset(
        DecoderShape(layers=36, hidden=2560, heads=32, kv_heads=8, head_dim=128, ffn=9728, vocab=151936,
                     tied_embeddings=True, qkv_bias=False, qk_norm=True),
        _qwen3vl_vit(depth=24, hidden=1024, mlp=4096, out_hidden=2560), "full", "Q4, MM8, workloads"),
    "qwen3vl-8b": ModelPreset(
        DecoderShape(layers=36, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=12288, vocab=151936,
                     tied_embeddings=False, qkv_bias=False, qk_norm=True),
        _qwen3vl_vit(depth=27, hidden=1152, mlp=4304, out_hidden=4096), "full", "MM8, MMy, Q8hf, workloads"),
    "qwen3vl-32b": ModelPreset(
        DecoderShape(layers=64, hidden=5120, heads=64, kv_heads=8, head_dim=128, ffn=25600, vocab=151936,
                     tied_embeddings=False, qkv_bias=False, qk_norm=True),
        # Upstream's recipe runs 16 ranks [MMy-all]: an 8-device node cannot hold its state.
        _qwen3vl_vit(depth=27, hidden=1152, mlp=4304, out_hidden=5120), "full", "Q32hf, MMy-all, MM8, workloads",
        shard_ranks=16),
    # Every layer is a mixture of experts (mlp_only_layers [], decoder_sparse_step 1); `ffn` is the config's dense
    # intermediate_size, which no layer uses. Full recompute as MindSpeed-MM's 30B model file [MM30].
    "qwen3vl-30b-a3b": ModelPreset(
        DecoderShape(layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128, ffn=6144, vocab=151936,
                     tied_embeddings=False, qkv_bias=False, qk_norm=True,
                     experts=ExpertShape(experts=128, top_k=8, expert_ffn=768)),
        _qwen3vl_vit(depth=27, hidden=1152, mlp=4304, out_hidden=2048), "full", "Q30hf, MM30, MMy-all, workloads"),
    "qwen3vl-235b-a22b": ModelPreset(
        DecoderShape(layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128, ffn=12288, vocab=151936,
                     tied_embeddings=False, qkv_bias=False, qk_norm=True,
                     experts=ExpertShape(experts=128, top_k=8, expert_ffn=1536)),
        # Upstream's recipe runs 16 A3 nodes (256 dies) [MMy-all]: one node cannot hold its state.
        _qwen3vl_vit(depth=27, hidden=1152, mlp=4304, out_hidden=4096), "full", "Q235hf, MM30, MMy-all, workloads",
        shard_ranks=256),
    # Project-defined model for CPU tests and demos.
    "tiny": ModelPreset(
        DecoderShape(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=512,
                     tied_embeddings=False, qkv_bias=False, qk_norm=False),
        # The encoder of the demo trainer's tiny_qwen3vl_fcp config (sandbox/configs); 60 patches (3 x 5 merged
        # tokens) are the frame group of most of its dataset's videos.
        EncoderShape(depth=2, hidden=32, heads=2, mlp=64, patch_size=2, spatial_merge=2, temporal_patch=2,
                     out_hidden=64, mergers=1, attention_window=60),
        "none", "project-defined"),
    # Project-defined: the CPU bed's Qwen3-VL-MoE (tests/upstream/tiny_qwen3vl.py --moe): every layer 4 experts, top 2.
    "tiny-moe": ModelPreset(
        DecoderShape(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=320,
                     tied_embeddings=False, qkv_bias=False, qk_norm=True,
                     experts=ExpertShape(experts=4, top_k=2, expert_ffn=32)),
        EncoderShape(depth=2, hidden=32, heads=2, mlp=64, patch_size=16, spatial_merge=2, temporal_patch=2,
                     out_hidden=64, mergers=2, attention_window=64),
        "none", "project-defined"),
}

# Memory accounting (activations, bytes per parameter) follows these for every preset.
_MEMORY_SOURCES = "kor, megmem, zero"
_STEP_SOURCES = "nccl-perf, fsdp2, msmm-fsdp2, megmem, zero, inferred"
_EXPERT_SOURCES = "mzoo, meg, msmm-ep, inferred"
_ACCELERATORS = ("a3", "910b", "h100", "h200")
_REAL_MODELS = {"qwen3vl-2b": _ACCELERATORS, "qwen3vl-4b": _ACCELERATORS, "qwen3vl-8b": _ACCELERATORS,
                "qwen3vl-32b": _ACCELERATORS, "qwen3vl-30b-a3b": ("a3", "h200"), "qwen3vl-235b-a22b": ("a3", "h200")}
"""The models FCP trains (MindSpeed-MM's Qwen3-VL on `pretrain_transformers.py`) and the accelerators each is
listed for; the CPU runs the tiny models."""


def list_presets() -> list[str]:
    """Names `<hardware>-<model>` of the presets that make sense (the CPU only runs the tiny models)."""
    return [f"{hw}-{m}" for hw in _ACCELERATORS for m, accelerators in _REAL_MODELS.items()
            if hw in accelerators] + ["cpu-tiny", "cpu-tiny-moe"]


def split_preset_name(name: str) -> tuple[str, str]:
    """`a3-qwen3vl-8b` -> (`a3`, `qwen3vl-8b`); unknown parts raise a ValueError listing valid names."""
    hardware, _, model = name.partition("-")
    if hardware not in HARDWARE or model not in MODELS:
        raise ValueError(f"unknown preset {name!r}; valid presets: {', '.join(list_presets())} "
                         f"(any of hardware {sorted(HARDWARE)} with model {sorted(MODELS)} also builds)")
    return hardware, model


def preset_table(name: str, **options: Any) -> ProfileTable:
    """The table of a named preset; `options` go to build_preset_table."""
    hardware, model = split_preset_name(name)
    return build_preset_table(hardware, model, **options)


def build_preset_table(hardware: str, model: str, tp: int = 1, pp: int = 1, dtype: str | None = None,
                       recompute: str | None = None, sharding: str = "fsdp",
                       shard_ranks: int | None = None, ranks_per_node: int | None = None,
                       host_floors: tuple[float, ...] | None = None, expert_parallel: int = 1,
                       model_preset: ModelPreset | None = None) -> ProfileTable:
    """An analytic profile table for `hardware` x `model`.

    tp / pp: fixed tensor / pipeline sizes; dtype: default the hardware's first (bf16 on
    accelerators, fp32 on the CPU); recompute: `none` or `full` (default: the model recipe's);
    sharding: how parameters, gradients and Adam state are kept (`none` = plain DDP,
    `distributed_optimizer` = Megatron, `fsdp` = full shard, as MindSpeed-MM's Qwen3-VL recipes
    [MMy]); shard_ranks: ranks the state is sharded over (default: the model recipe's, else one node); ranks_per_node:
    override of the hardware's node size; host_floors: (attention call ms, layer ms[, vision block ms])
    replacing the hardware's host-side floors (`HOST_ATTENTION_CALL_MS`, `HOST_LAYER_MS`,
    `HOST_VISION_BLOCK_MS`), e.g. measured on the target;
    expert_parallel: ranks a mixture-of-experts model's experts are split over (MindSpeed-MM's FSDP2
    `expert_parallel_size`; 1, its default, runs every expert on every rank: `expert_terms`);
    model_preset: the shape to build for, named `model` (e.g. read from a model's config.json), instead of
    MODELS[model].
    """
    if hardware not in HARDWARE:
        raise ValueError(f"unknown hardware {hardware!r}; valid: {sorted(HARDWARE)}")
    if model_preset is None and model not in MODELS:
        raise ValueError(f"unknown model {model!r}; valid: {sorted(MODELS)}")
    hw, mp = HARDWARE[hardware], MODELS[model] if model_preset is None else model_preset
    if host_floors is not None:
        if len(host_floors) not in (2, 3) or not all(isinstance(x, (int, float)) and x >= 0 for x in host_floors):
            raise ValueError(f"host_floors must be two or three times >= 0 (attention call ms, layer ms[, vision "
                             f"block ms]), got {host_floors!r}")
        call_ms, layer_ms, *vision_ms = host_floors
        hw = dataclasses.replace(hw, attention_call_ms=float(call_ms), launch_ms_per_layer=float(layer_ms),
                                 vision_block_ms=float(vision_ms[0]) if vision_ms else hw.vision_block_ms)
    dtype = dtype if dtype is not None else next(iter(hw.peak_tflops))
    if dtype not in hw.peak_tflops:
        raise ValueError(f"dtype {dtype!r} not supported on {hardware!r}; valid: {list(hw.peak_tflops)}")
    recompute = recompute if recompute is not None else mp.recompute
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {list(RECOMPUTE_MODES)}, got {recompute!r} (with fused "
                         f"attention, selective recompute stores the same as `none`)")
    if sharding not in SHARDING_MODES:
        raise ValueError(f"sharding must be one of {list(SHARDING_MODES)}, got {sharding!r}")
    node = ranks_per_node if ranks_per_node is not None else hw.ranks_per_node
    shards = shard_ranks if shard_ranks is not None else mp.shard_ranks if mp.shard_ranks is not None else node
    for option, value in (("tp", tp), ("pp", pp), ("ranks_per_node", node), ("shard_ranks", shards),
                          ("expert_parallel", expert_parallel)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{option} must be a positive int, got {value!r}")
    dec = mp.decoder
    if expert_parallel > 1 and dec.experts is None:
        raise ValueError(f"expert_parallel={expert_parallel}: {model} has no experts to split")
    if dec.experts is not None and (dec.experts.experts % expert_parallel or shards % expert_parallel):
        raise ValueError(f"expert_parallel={expert_parallel} must divide the experts ({dec.experts.experts}) of "
                         f"{model} and the shard_ranks ({shards}) they are split over")
    if dec.heads % tp or dec.kv_heads % tp:
        raise ValueError(f"tp={tp} must divide the heads ({dec.heads}) and kv heads ({dec.kv_heads}) of {model}")
    if dec.layers % pp:
        raise ValueError(f"pp={pp} must divide the layers ({dec.layers}) of {model}")

    setup = Setup(tp=tp, pp=pp, dtype=dtype, recompute=recompute, sharding=sharding, shard_ranks=shards,
                  expert_parallel=expert_parallel)
    enc = mp.encoder
    time = time_figures(hw, mp, setup, ranks_per_node=node)
    measured_provenance: dict[str, Any] = {}
    loader = MEASURED_COMPUTE.get((hardware, model)) if model_preset is None else None
    if loader is not None and tp == MEASURED_TP and dtype == "bf16" and host_floors is None:
        file_name, _, measured = loader()
        time = measured_time_figures(time, measured, layers=dec.layers // pp, recompute=recompute,
                                     vision_depth=None if enc is None else enc.depth)
        measured_provenance = {"measured_compute": {"file": file_name, **measured.rows,
                                                    "model_layer_floor_ms": measured.model_layer_floor_ms}}
    table = ProfileTable(
        hardware=HardwareInfo(
            name=hardware, device=hw.device, ranks_per_node=node, memory_bytes=hw.memory_bytes,
            usable_memory_fraction=hw.usable_memory_fraction, peak_tflops=hw.peak_tflops[dtype],
            intra_node_bytes_per_s=hw.p2p_intra_bytes_per_s, inter_node_bytes_per_s=hw.inter_node_bytes_per_s),
        model=table_model_shape(model, mp),
        dtype=dtype, tp=tp, pp=pp, recompute=recompute,
        time=time,
        memory=memory_figures(hw, mp, setup),
        step=step_figures(hw, mp, setup),
        provenance={
            "source": "analytic preset",
            "preset": f"{hardware}-{model}",
            "hardware": hw.description,
            "hardware_sources": hw.sources,
            "model_sources": mp.sources,
            "memory_sources": _MEMORY_SOURCES,
            "step_sources": _STEP_SOURCES,
            "options": {"sharding": sharding, "shard_ranks": shards,
                        **({} if host_floors is None else {"host_floors": list(host_floors)}),
                        **({} if dec.experts is None else {"expert_parallel": expert_parallel})},
            "total_params": _total_params(mp),
            **({} if dec.experts is None else {"expert_sources": _EXPERT_SOURCES,
                                              "active_params_per_token": _active_params(mp)}),
            **measured_provenance,
            "terms": preset_term_provenance(
                hardware, hw.sources, host_floors=host_floors,
                measured_file=measured_provenance["measured_compute"]["file"] if measured_provenance else None),
            "params_per_rank": params_per_rank(mp, setup),
            "sources": {key: SOURCES[key] for key in _keys(", ".join((hw.sources, mp.sources, _MEMORY_SOURCES,
                                                                      _STEP_SOURCES, _EXPERT_SOURCES)))},
            "notes": [
                "Analytic figures from public peak FLOP/s, memory and link data with documented "
                "efficiency factors; replace with a table measured by `fcp profile` on the target.",
                "Attention grids: fused kernel, forward + backward, efficiency s / (s + s_half).",
                "Vision memory counts every LLM token as a vision token (video-dominated batches).",
            ],
        },
        schema_version=SCHEMA_VERSION,
        expert_parallel=expert_parallel,
    )
    table.validate(source=f"preset {hardware}-{model}")
    return table

def table_model_shape(name: str, mp: ModelPreset) -> ModelShape:
    """The shape a table of the preset model `mp` records, named `name`."""
    dec, enc = mp.decoder, mp.encoder
    return ModelShape(
        name=name, layers=dec.layers, hidden=dec.hidden, heads=dec.heads, kv_heads=dec.kv_heads,
        head_dim=dec.head_dim, ffn=dec.ffn, vocab=dec.vocab, attention_mask="causal",
        vision=None if enc is None else VisionShape(
            depth=enc.depth, hidden=enc.hidden, heads=enc.heads, mlp=enc.mlp, patch_size=enc.patch_size,
            spatial_merge=enc.spatial_merge, temporal_patch=enc.temporal_patch, mergers=enc.mergers),
        experts=dec.experts)


def measured_time_figures(analytic: TimeFigures, measured: MeasuredCompute, *, layers: int, recompute: str,
                          vision_depth: int | None) -> TimeFigures:
    """`analytic` with its compute terms replaced by measured ones (`measured_compute`); the output layer
    and every communication term stay analytic.

    The kernels' fixed cost of a layer goes to `launch_ms`, once per layer and round, its forward share once
    more under full recompute; the linear curve carries the rest of the real model's host floor
    (`MeasuredCompute.real_layer_linear_ms`); a Ulysses rank runs the full heads' work / d (no grid of its
    own); the full mask's curve doubles the causal quadratic term [inferred].
    """
    alpha, beta, gamma = measured.attention
    forward_share = measured.layer_floor_forward_ms / measured.layer_floor_ms
    passes = 2 if recompute == "full" else 1
    vision: dict[str, Any] = {}
    if vision_depth is not None and measured.vision_line is not None:
        intercept, slope = measured.vision_line
        vision = {"vision_ms": measured.vision_grid(vision_depth), "vision_ms_per_patch": vision_depth * slope,
                  "vision_ms_per_call": vision_depth * max(intercept, 0.0)}
    linear = measured.real_layer_linear_ms()
    return dataclasses.replace(
        analytic,
        attention_causal_ms=quadratic_grid(measured.attention),
        attention_full_ms=quadratic_grid((2.0 * alpha, beta, gamma)),
        attention_off_diagonal_ms=None,
        attention_ulysses_ms=None,
        attention_backward_ratio=measured.attention_backward_ratio,
        attention_call_ms=measured.attention_call_ms,
        linear_ms=linear,
        linear_ms_per_token=float(linear.y[-1] / linear.x[-1]),
        linear_backward_ratio=measured.linear_backward_ratio,
        launch_ms=layers * measured.layer_floor_ms * (1.0 + (passes - 1) * forward_share),
        **vision,
    )


def _total_params(mp: ModelPreset) -> int:
    """Every parameter of the model, experts and vision encoder included (no parallelism)."""
    dec, enc = mp.decoder, mp.encoder
    return (dec.layers * dec.layer_params() + dec.embedding_params() + dec.head_params()
            + (0 if enc is None else enc.params()))


def _active_params(mp: ModelPreset) -> int:
    """The decoder's parameters one token multiplies (its routed experts only), embedding and head included."""
    dec = mp.decoder
    return dec.layers * (dec.layer_params() - dec.layer_matmul_params() + dec.active_matmul_params()) \
        + dec.embedding_params() + dec.head_params()


def _keys(text: str) -> list[str]:
    """Source keys named in a comma-separated list, known ones only, in order, once."""
    seen: list[str] = []
    for part in text.split(","):
        key = part.strip()
        if key in SOURCES and key not in seen:
            seen.append(key)
    return seen


__all__ = ["HARDWARE", "MODELS", "SHARDING_MODES", "HardwarePreset", "ModelPreset", "build_preset_table",
           "list_presets", "preset_table", "split_preset_name"]
