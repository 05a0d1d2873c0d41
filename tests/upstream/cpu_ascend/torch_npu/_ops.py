"""The other torch_npu operators of the Qwen3-VL path, and loud stubs for those imported but not implemented."""
from __future__ import annotations

import torch

from torch_npu._trace import count


def npu_rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6):
    """RMSNorm as the NPU kernel computes it: fp32 statistics, result cast back to the input dtype.

    Returns `(y, rstd)`; `rstd` (float32) has the shape of `x` with the normalised (gamma's) dimensions set to 1.
    """
    count("npu_rms_norm")
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    y = (xf * rstd * gamma.float()).to(x.dtype)
    return y, rstd


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def npu_rotary_mul(x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half"):
    """`x * cos + rotate_half(x) * sin` with `cos` = r1, `sin` = r2 broadcast to x (mode "half" only)."""
    count("npu_rotary_mul")
    if rotary_mode != "half":
        raise NotImplementedError(f"cpu_ascend torch_npu.npu_rotary_mul: rotary_mode {rotary_mode!r} is not implemented")
    return x * r1 + _rotate_half(x) * r2


def loud_stub(qualified_name: str):
    """A callable that exists (so imports succeed) and raises NotImplementedError naming itself when called."""

    def stub(*args, **kwargs):
        raise NotImplementedError(f"cpu_ascend: {qualified_name} is not implemented on the CPU test bed")

    stub.__name__ = qualified_name.rsplit(".", 1)[-1]
    stub.__qualname__ = qualified_name
    return stub


# Imported (at module level or by feature code) on some MindSpeed / MindSpeed-MM paths; not implemented here.
# Names that upstream probes with hasattr() for optional features are deliberately absent.
STUB_OPS = (
    "npu_confusion_transpose", "npu_scaled_masked_softmax", "npu_gelu", "npu_add_rms_norm",
    "npu_dynamic_quant", "npu_quant_matmul", "npu_dynamic_block_quant", "npu_dynamic_mx_quant",
    "npu_all_gather_base_mm", "npu_mm_reduce_scatter_base", "npu_mm_all_reduce_base", "npu_gmm_alltoallv",
    "npu_alltoallv_gmm", "npu_rotary_position_embedding", "npu_fused_infer_attention_score", "npu_quantize",
    "npu_matmul_add_fp", "npu_apply_adam_w", "npu_apply_fused_ema_adamw", "npu_grouped_dynamic_mx_quant",
    "npu_format_cast", "npu_dtype_cast",
)
