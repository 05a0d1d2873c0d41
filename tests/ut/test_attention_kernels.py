"""Kernel registry and the PyTorch reference kernel, checked against dense masked attention."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from attention_reference import dense_attention, document_ids
from mindspeed_mm.core.fcp.parallel import fcp_attention
from mindspeed_mm.core.fcp.parallel.kernels import VarlenSegments, default_kernel_name, get_kernel
from mindspeed_mm.core.fcp.parallel.ulysses import kv_repeat_factor

CU = (0, 1, 9, 40, 41, 77)


def _qkv(total: int, heads: int, kv_heads: int, dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.randn(total, n, 8, dtype=dtype, generator=generator).requires_grad_()
        for n in (heads, kv_heads, kv_heads)
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (6, 2)])
def test_reference_kernel_matches_dense_attention(dtype: torch.dtype, causal: bool, heads: int, kv_heads: int) -> None:
    q, k, v = _qkv(CU[-1], heads, kv_heads, dtype)
    kernel = get_kernel("torch")
    scale = 0.3
    out, lse = kernel.forward(q, k, v, VarlenSegments(CU, CU), causal=causal, softmax_scale=scale)
    expected = dense_attention(q, k, v, CU, causal=causal, softmax_scale=scale)
    torch.testing.assert_close(out, expected)

    docs = document_ids(CU)
    visible = docs[:, None] == docs[None, :]
    if causal:
        visible &= torch.ones_like(visible).tril()
    scores = torch.einsum("qhd,khd->hqk", q, k.repeat_interleave(heads // kv_heads, dim=1)) * scale
    expected_lse = torch.logsumexp(scores.masked_fill(~visible, float("-inf")), dim=-1).transpose(0, 1)
    assert lse.dtype == torch.promote_types(dtype, torch.float32)
    torch.testing.assert_close(lse, expected_lse.to(lse.dtype))

    dout = torch.randn_like(out)
    expected.backward(dout)
    grads = kernel.backward(
        dout, q.detach(), k.detach(), v.detach(), out, lse, VarlenSegments(CU, CU), causal=causal, softmax_scale=scale
    )
    for grad, tensor in zip(grads, (q, k, v)):
        torch.testing.assert_close(grad, tensor.grad)


def test_reference_kernel_uneven_segments_and_empty_keys() -> None:
    q, k, v = (x.detach() for x in _qkv(12, 2, 1, torch.float64))
    segments = VarlenSegments((0, 5, 9, 12), (0, 3, 3, 12))
    out, lse = get_kernel("torch").forward(q, k, v, segments, causal=False, softmax_scale=0.5)
    torch.testing.assert_close(out[:5], _cross(q[:5], k[:3], v[:3], 0.5))
    torch.testing.assert_close(out[9:], _cross(q[9:], k[3:], v[3:], 0.5))
    # Segment 1 has no keys: output 0 and lse -inf, which merge as "nothing seen".
    assert torch.all(out[5:9] == 0)
    assert torch.all(torch.isneginf(lse[5:9]))


def _cross(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    probs = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) * scale, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def test_causal_kernel_needs_equal_segment_lengths() -> None:
    q, k, v = (x.detach() for x in _qkv(6, 2, 2, torch.float32))
    with pytest.raises(ValueError, match="segment 0 has 2 query and 4 key rows"):
        get_kernel("torch").forward(q, k, v, VarlenSegments((0, 2, 6), (0, 4, 6)), causal=True, softmax_scale=1.0)


def test_kernel_registry() -> None:
    assert default_kernel_name(torch.device("cpu")) == "torch"
    assert default_kernel_name(torch.device("meta")) == "torch"
    assert get_kernel("torch") is get_kernel("torch")
    with pytest.raises(ValueError, match="unknown attention kernel 'nope'"):
        get_kernel("nope")


@pytest.mark.parametrize("name, module", [("flash_attn", "flash_attn"), ("npu_fusion", "torch_npu")])
def test_device_kernels_fail_clearly_when_not_installed(name: str, module: str) -> None:
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    with pytest.raises(ValueError, match=f"attention kernel '{name}' is not available"):
        get_kernel(name)


@pytest.mark.parametrize(
    "heads, kv_heads, degree, repeat",
    [(12, 4, 4, 1), (12, 4, 3, 3), (12, 4, 6, 3), (8, 2, 4, 2), (8, 8, 8, 1), (6, 1, 3, 3)],
)
def test_kv_repeat_factor(heads: int, kv_heads: int, degree: int, repeat: int) -> None:
    assert kv_repeat_factor(heads, kv_heads, degree) == repeat


def test_ulysses_rejects_heads_not_divisible_by_degree() -> None:
    with pytest.raises(ValueError, match="heads=12, kv_heads=4, degree=5"):
        kv_repeat_factor(12, 4, 5)


@pytest.mark.parametrize("algo", ["ring", "ulysses"])
def test_local_attention_without_group_matches_reference(algo: str) -> None:
    q, k, v = _qkv(CU[-1], 4, 2, torch.float64)
    out = fcp_attention(q, k, v, torch.tensor(CU), group=None, algo=algo, causal=True)
    torch.testing.assert_close(out, dense_attention(q, k, v, CU, causal=True))


def test_fcp_attention_rejects_bad_input() -> None:
    q, k, v = (x.detach() for x in _qkv(CU[-1], 4, 2, torch.float32))
    cu = torch.tensor(CU)
    with pytest.raises(ValueError, match="unknown algo 'hybrid'"):
        fcp_attention(q, k, v, cu, group=None, algo="hybrid")
    with pytest.raises(ValueError, match="q has 76 tokens but rank 0's zigzag shard of cu_seqlens holds 77"):
        fcp_attention(q[:-1], k, v, cu, group=None)
    with pytest.raises(ValueError, match=r"heads \(4\) must be a multiple of kv_heads \(3\)"):
        fcp_attention(q, torch.zeros(77, 3, 8), torch.zeros(77, 3, 8), cu, group=None)
    with pytest.raises(ValueError, match="share dtype"):
        fcp_attention(q, k.double(), v.double(), cu, group=None)
