"""Kernel registry and the PyTorch reference kernel, checked against dense masked attention."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from attention_reference import dense_attention, document_ids
from mindspeed_mm.core.fcp.parallel import HybridGroup, fcp_attention
from mindspeed_mm.core.fcp.parallel import kernels
from mindspeed_mm.core.fcp.parallel.kernels import (
    KERNEL_CHOICES,
    KernelLimits,
    KernelUnavailableError,
    LimitedKernel,
    VarlenSegments,
    default_kernel_name,
    get_kernel,
    plan_calls,
    resolve_kernel_name,
)
from mindspeed_mm.core.fcp.parallel.kernels.torch_reference import TorchReferenceKernel
from mindspeed_mm_fcp.options import ATTENTION_KERNELS
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
    assert KERNEL_CHOICES == ATTENTION_KERNELS
    assert default_kernel_name(torch.device("cpu")) == "torch"
    assert default_kernel_name(torch.device("meta")) == "torch"
    assert resolve_kernel_name("torch_varlen", torch.device("cpu")) == "torch_varlen"
    assert get_kernel("torch") is get_kernel("torch")
    with pytest.raises(KernelUnavailableError, match="fcp_attention_kernel='nope' is not an attention kernel; "
                                                     "choose one of auto, npu_fusion, torch_varlen, flash_attn, torch"):
        get_kernel("nope")


@pytest.mark.parametrize("name, module", [("flash_attn", "flash_attn"), ("npu_fusion", "torch_npu")])
def test_device_kernels_fail_clearly_when_not_installed(name: str, module: str) -> None:
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    with pytest.raises(KernelUnavailableError, match=rf"fcp_attention_kernel='{name}' is not available here "
                                                     r"\(No module named .*\); available: auto, .*torch"):
        get_kernel(name)


def test_torch_varlen_refuses_cpu_tensors_naming_the_kernel() -> None:
    q, k, v = (x.detach() for x in _qkv(4, 2, 1, torch.bfloat16))
    with pytest.raises(ValueError, match="attention kernel torch_varlen runs on CUDA"):
        get_kernel("torch_varlen").forward(q, k, v, VarlenSegments((0, 4), (0, 4)), causal=True, softmax_scale=1.0)


def test_cuda_without_a_flash_kernel_falls_back_with_a_warning_naming_the_option(monkeypatch, caplog) -> None:
    def unavailable(name: str):
        raise KernelUnavailableError(f"{name} missing")

    monkeypatch.setattr(kernels, "get_kernel", unavailable)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (9, 0))
    with caplog.at_level("WARNING"):
        assert kernels._cuda_kernel.__wrapped__() == "torch"
    assert "set fcp_attention_kernel: torch" in caplog.text


def _reference_results(q, k, v, dout, segments, causal):
    kernel = TorchReferenceKernel()
    out, lse = kernel.forward(q, k, v, segments, causal=causal, softmax_scale=0.4)
    return (out, lse, *kernel.backward(dout, q, k, v, out, lse, segments, causal=causal, softmax_scale=0.4))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("limits", [
    KernelLimits(max_segments=2),
    KernelLimits(max_rows=9),
    KernelLimits(max_rows=4, max_segments=3, accepts_empty_segments=False),
])
def test_calls_over_the_kernel_limits_are_split_and_merged_exactly(causal: bool, limits: KernelLimits) -> None:
    cu = (0, 1, 9, 20, 20, 27, 41)  # an empty document and documents longer than max_rows
    segments = VarlenSegments(cu, cu)
    q, k, v = (x.detach() for x in _qkv(cu[-1], 4, 2, torch.float64, seed=3))
    dout = torch.randn(q.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    calls: list[VarlenSegments] = []

    class Recording(TorchReferenceKernel):
        def forward(self, q, k, v, segments, **kwargs):
            calls.append(segments)
            return super().forward(q, k, v, segments, **kwargs)

    split = LimitedKernel(Recording(), limits)
    out, lse = split.forward(q, k, v, segments, causal=causal, softmax_scale=0.4)
    grads = split.backward(dout, q, k, v, out, lse, segments, causal=causal, softmax_scale=0.4)
    for got, want in zip((out, lse, *grads), _reference_results(q, k, v, dout, segments, causal)):
        torch.testing.assert_close(got, want)
    assert len(calls) > 1
    for call in calls:
        lengths = [(b - a, d - c) for a, b, c, d in zip(call.cu_seqlens_q[:-1], call.cu_seqlens_q[1:],
                                                         call.cu_seqlens_k[:-1], call.cu_seqlens_k[1:])]
        assert limits.max_segments is None or len(lengths) <= limits.max_segments
        assert limits.max_rows is None or (call.cu_seqlens_q[-1] <= limits.max_rows
                                           and call.cu_seqlens_k[-1] <= limits.max_rows)
        assert limits.accepts_empty_segments or all(lq and lk for lq, lk in lengths)


def test_a_call_within_the_limits_runs_as_it_is_and_an_empty_one_not_at_all() -> None:
    limits = KernelLimits(max_rows=8, max_segments=2, accepts_empty_segments=False)
    assert plan_calls(VarlenSegments((0, 3, 8), (0, 3, 8)), True, limits).direct
    nothing = plan_calls(VarlenSegments((0, 0, 0), (0, 0, 0)), True, limits)
    assert not nothing.direct and nothing.calls == ()
    q = torch.zeros(3, 2, 4)
    empty_keys = VarlenSegments((0, 3), (0, 0))
    out, lse = LimitedKernel(TorchReferenceKernel(), limits).forward(
        q, q[:0], q[:0], empty_keys, causal=False, softmax_scale=1.0)
    assert torch.equal(out, torch.zeros_like(q)) and torch.isneginf(lse).all()


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
    with pytest.raises(ValueError, match="unknown algo 'zigzag'"):
        fcp_attention(q, k, v, cu, group=None, algo="zigzag")
    with pytest.raises(ValueError, match="algo 'hybrid' needs a HybridGroup as group, got NoneType"):
        fcp_attention(q, k, v, cu, group=None, algo="hybrid")
    with pytest.raises(ValueError, match="algo 'ring' needs a process group or None as group, got HybridGroup"):
        fcp_attention(q, k, v, cu, group=HybridGroup(None, None, 1, 1), algo="ring")
    with pytest.raises(ValueError, match="a hybrid group of ulysses_degree 2 needs a ulysses process group"):
        HybridGroup(None, None, 2, 1)
    with pytest.raises(ValueError, match="q has 76 tokens but rank 0's zigzag shard of cu_seqlens holds 77"):
        fcp_attention(q[:-1], k, v, cu, group=None)
    with pytest.raises(ValueError, match=r"heads \(4\) must be a multiple of kv_heads \(3\)"):
        fcp_attention(q, torch.zeros(77, 3, 8), torch.zeros(77, 3, 8), cu, group=None)
    with pytest.raises(ValueError, match="share dtype"):
        fcp_attention(q, k.double(), v.double(), cu, group=None)
