"""The CPU MoE operators through MindSpeed-MM's own consumers; run by `test_mindspeed_moe_experts.py`.

Runs in the upstream interpreter with the CPU Ascend surface, MindSpeed, Megatron-LM and MindSpeed-MM on the path.
Upstream's Qwen3-VL-MoE has two expert paths: `Qwen3VLMoeTextExperts` (plain torch: a loop over the experts hit)
and `Qwen3VLNpuFusedMoETextExperts` (`use_npu_fused_moe: true`: `npu_moe_token_permute`, `torch.histc` of the
expert indices, `npu_group_gemm` -> `npu_grouped_matmul` forward and backward, `npu_swiglu`,
`npu_moe_token_unpermute`); expert parallelism runs `fused_moe.fused_ep_forward`, here without an EP group (in a
one-process world: its all-to-alls ask the default group's size). With
the same weights and routing all of them must give the same output and the same gradients of the input, the
routing weights and both expert weights. Prints one JSON object: the largest error of each check.
"""
from __future__ import annotations

import json
import types

import torch
import torch_npu  # noqa: F401  (binds torch.npu, as upstream's modules expect)
from torch_npu.contrib import transfer_to_npu  # noqa: F401  (torch.histc on integer indices, as on the device)

from mindspeed_mm.models.common.fused_moe import fused_ep_forward
from mindspeed_mm.models.transformers.qwen3vl.modeling_qwen3_vl_moe import (
    Qwen3VLMoeTextExperts, Qwen3VLNpuFusedMoETextExperts,
)

EXPERTS, TOP_K, HIDDEN, EXPERT_DIM, TOKENS = 4, 2, 6, 5, 11


def routed(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(1, TOKENS, HIDDEN, generator=g, dtype=torch.float64)
    logits = torch.randn(TOKENS, EXPERTS, generator=g, dtype=torch.float64)
    weights, indices = torch.topk(torch.softmax(logits, dim=-1), TOP_K, dim=-1)
    return hidden, weights / weights.sum(-1, keepdim=True), indices, logits


def experts(cls, state: dict | None) -> torch.nn.Module:
    config = types.SimpleNamespace(num_experts=EXPERTS, moe_intermediate_size=EXPERT_DIM, hidden_size=HIDDEN,
                                   hidden_act="silu")
    module = cls(config).double().train()
    if state is None:
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for param in module.parameters():
                param.copy_(torch.randn(param.shape, generator=g, dtype=torch.float64) * 0.5)
    else:
        module.load_state_dict(state)
    return module


def run(module: torch.nn.Module, forward) -> dict[str, torch.Tensor]:
    hidden, weights, indices, logits = routed()
    hidden.requires_grad_(True)
    weights.requires_grad_(True)
    out = forward(module, hidden, weights, indices, logits)
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    (out * upstream).sum().backward()
    return {"out": out.detach().reshape(-1, HIDDEN), "hidden": hidden.grad, "weights": weights.grad,
            "gate_up": module.gate_up_proj.grad, "down": module.down_proj.grad}


def main() -> None:
    # fused_ep_forward's all-to-alls ask the default group's size even without an EP group: a world of one.
    torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
    reference_module = experts(Qwen3VLMoeTextExperts, None)
    state = {k: v.clone() for k, v in reference_module.state_dict().items()}
    reference = run(reference_module, lambda m, h, w, i, logits: m(h, w, i, logits))
    fused = run(experts(Qwen3VLNpuFusedMoETextExperts, state), lambda m, h, w, i, logits: m(h, w, i))

    def expert_parallel(m, h, w, i, logits):
        gate_up, down = m._view_experts_weight()
        return fused_ep_forward(EXPERTS, w, i, h.reshape(-1, HIDDEN), fc1_weight=gate_up, fc2_weight=down,
                                ep_group=None)

    parallel = run(experts(Qwen3VLNpuFusedMoETextExperts, state), expert_parallel)
    errors = {}
    for name, got in (("fused", fused), ("fused_ep_forward", parallel)):
        for key, value in got.items():
            errors[f"{name}:{key}"] = float((value - reference[key]).abs().max())
    calls = dict(torch_npu._trace.CALLS)
    errors["ops_called"] = float(all(calls.get(op, 0) > 0 for op in (
        "npu_moe_token_permute", "npu_moe_token_unpermute", "npu_swiglu", "npu_grouped_matmul")))
    print(json.dumps(errors))


if __name__ == "__main__":
    main()
