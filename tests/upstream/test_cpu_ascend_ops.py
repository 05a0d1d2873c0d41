"""The CPU Ascend surface against plain-torch references (needs only torch; runs in the project venv)."""
from __future__ import annotations

import math
import re

import pytest
import torch
from torch.testing import assert_close

from cpu_ascend_fixture import loaded, run_isolated

MASK = torch.ones(2048, 2048, dtype=torch.bool).triu(1)


@pytest.fixture(scope="module")
def npu():
    with loaded() as module:
        yield module


def reference_attention(q, k, v, allowed, scale):
    """Dense softmax attention in float64; q [N, Sq, D], k/v [Nkv, Sk, D], allowed [Sq, Sk] or [N, Sq, Sk].

    Returns out [N, Sq, D] and the log-sum-exp [N, Sq] (-inf and output 0 for rows that see nothing).
    """
    groups = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(groups, 0).double(), v.repeat_interleave(groups, 0).double()
    scores = (q.double() @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)).unsqueeze(-1))
    return probs @ v, lse


def causal_allowed(sq, sk, right_down=True):
    shift = sk - sq if right_down else 0
    return torch.arange(sk).unsqueeze(0) <= torch.arange(sq).unsqueeze(1) + shift


def tnd_reference(q, k, v, cu_q, cu_k, scale, causal):
    out = torch.zeros(q.shape, dtype=torch.float64)
    lse = torch.full(q.shape[:2], float("-inf"), dtype=torch.float64)
    for qa, qb, ka, kb in zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:]):
        if qb == qa:
            continue
        allowed = causal_allowed(qb - qa, kb - ka) if causal else torch.ones(qb - qa, kb - ka, dtype=torch.bool)
        o, s = reference_attention(q[qa:qb].transpose(0, 1), k[ka:kb].transpose(0, 1), v[ka:kb].transpose(0, 1),
                                   allowed, scale)
        out[qa:qb], lse[qa:qb] = o.transpose(0, 1), s.transpose(0, 1)
    return out, lse


def _qkv(t_q, t_k, heads=4, kv_heads=2, dim=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(t_q, heads, dim, generator=g).to(dtype), torch.randn(t_k, kv_heads, dim, generator=g).to(dtype),
            torch.randn(t_k, kv_heads, dim, generator=g).to(dtype))


def ntd_to_token_major(stat, cu):
    """[T, N] (token, head) values of a default-layout TND statistic: inside each query segment of s tokens the
    N * s rows of the [T * N, 8] view hold head 0's s tokens, then head 1's (torch_npu docs, softmax_layout)."""
    rows = stat.reshape(-1, 8)[:, 0]
    heads = stat.shape[1]
    out = torch.empty(stat.shape[:2], dtype=stat.dtype)
    for a, b in zip(cu[:-1], cu[1:]):
        out[a:b] = rows[a * heads: b * heads].view(heads, b - a).transpose(0, 1)
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("softmax_layout", ["", "TND"])
def test_tnd_varlen_matches_per_document_reference(npu, causal, softmax_layout):
    lengths = [5, 1, 7, 3]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    q, k, v = _qkv(cu[-1], cu[-1])
    scale = 1 / math.sqrt(8)
    out, smax, ssum, reserved, seed, offset, numels = npu.npu_fusion_attention(
        q, k, v, 4, "TND", atten_mask=MASK if causal else None, scale=scale, keep_prob=1.0,
        actual_seq_qlen=cu[1:], actual_seq_kvlen=cu[1:], sparse_mode=3 if causal else 0, softmax_layout=softmax_layout)
    ref, ref_lse = tnd_reference(q, k, v, cu, cu, scale, causal)
    assert out.dtype == torch.float32 and (seed, offset, numels) == (0, 0, 0) and reserved.numel() == 0
    assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    assert smax.shape == (cu[-1], 4, 8) and ssum.shape == (cu[-1], 4, 8) and smax.dtype == torch.float32
    assert torch.equal(smax, smax[..., :1].expand_as(smax)) and torch.equal(ssum, ssum[..., :1].expand_as(ssum))
    if softmax_layout == "TND":
        lse = smax[..., 0] + torch.log(ssum[..., 0])
    else:
        lse = ntd_to_token_major(smax, cu) + torch.log(ntd_to_token_major(ssum, cu))
        # token-major reading of the default layout is wrong wherever a segment has more than one token
        assert not torch.allclose((smax[..., 0] + torch.log(ssum[..., 0])).double(), ref_lse, atol=1e-3)
    assert_close(lse.double(), ref_lse, rtol=1e-5, atol=1e-5)


def test_tnd_sparse_mode_3_is_right_down_causal_for_unequal_segments(npu):
    # query segments 2 and 3 against key segments 5 and 3: row i of a segment sees keys j <= i + (Sk - Sq).
    cu_q, cu_k = [0, 2, 5], [0, 5, 8]
    q, k, v = _qkv(5, 8, heads=2, kv_heads=2, seed=1)
    out, smax, ssum, *_ = npu.npu_fusion_attention(q, k, v, 2, "TND", atten_mask=MASK, scale=0.5,
                                                   actual_seq_qlen=cu_q[1:], actual_seq_kvlen=cu_k[1:], sparse_mode=3,
                                                   softmax_layout="TND")
    ref, ref_lse = tnd_reference(q, k, v, cu_q, cu_k, 0.5, causal=True)
    assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    assert_close((smax[..., 0] + torch.log(ssum[..., 0])).double(), ref_lse, rtol=1e-5, atol=1e-5)


def test_tnd_gradients_match_autograd_of_the_reference(npu):
    cu = [0, 4, 9, 12]
    q, k, v = (t.requires_grad_() for t in _qkv(12, 12, seed=2))
    out = npu.npu_fusion_attention(q, k, v, 4, "TND", atten_mask=MASK, scale=0.3, actual_seq_qlen=cu[1:],
                                   actual_seq_kvlen=cu[1:], sparse_mode=3)[0]
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(9))
    grads = torch.autograd.grad((out * weight).sum(), (q, k, v))
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = tnd_reference(q64, k64, v64, cu, cu, 0.3, causal=True)[0]
    ref_grads = torch.autograd.grad((ref * weight.double()).sum(), (q64, k64, v64))
    for got, want in zip(grads, ref_grads):
        assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


def _to_layout(x, layout):
    """x [B, N, S, D] -> the layout's tensor."""
    b, n, s, d = x.shape
    return {"BNSD": x, "BSND": x.transpose(1, 2), "BSH": x.transpose(1, 2).reshape(b, s, n * d),
            "SBH": x.permute(2, 0, 1, 3).reshape(s, b, n * d)}[layout].contiguous()


@pytest.mark.parametrize("layout", ["BNSD", "BSND", "BSH", "SBH"])
@pytest.mark.parametrize("mode", [0, 2, 3])
def test_dense_layouts_and_sparse_modes(npu, layout, mode):
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(2, 4, 5, 8, generator=g), torch.randn(2, 2, 7, 8, generator=g), torch.randn(2, 2, 7, 8, generator=g)
    allowed = torch.ones(5, 7, dtype=torch.bool) if mode == 0 else causal_allowed(5, 7, right_down=mode == 3)
    out, smax, ssum, *_ = npu.npu_fusion_attention(
        _to_layout(q, layout), _to_layout(k, layout), _to_layout(v, layout), 4, layout,
        atten_mask=None if mode == 0 else MASK, scale=0.25, sparse_mode=mode)
    assert smax.shape == (2, 4, 5, 8)
    for b in range(2):
        lse = reference_attention(q[b], k[b], v[b], allowed, 0.25)[1]
        assert_close((smax[b, ..., 0] + torch.log(ssum[b, ..., 0])).double(), lse, rtol=1e-5, atol=1e-5)
    full_ref = torch.stack([reference_attention(q[b], k[b], v[b], allowed, 0.25)[0] for b in range(2)])
    assert_close(out.double(), _to_layout(full_ref, layout), rtol=1e-5, atol=1e-6)


def test_explicit_mask_bnsd_masks_true_entries(npu):
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 6, 8, generator=g) for _ in range(3))
    mask = torch.rand(1, 1, 6, 6, generator=g) > 0.6
    mask[..., 0] = False  # no fully masked row
    out = npu.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=mask, scale=0.4)[0]
    ref = reference_attention(q[0], k[0], v[0], ~mask[0, 0], 0.4)[0]
    assert_close(out[0].double(), ref, rtol=1e-5, atol=1e-6)


def test_bf16_inputs_give_bf16_output_and_fp32_statistics(npu):
    cu = [0, 6, 10]
    q, k, v = (t.requires_grad_() for t in _qkv(10, 10, dtype=torch.bfloat16, seed=5))
    out, smax, ssum, *_ = npu.npu_fusion_attention(q, k, v, 4, "TND", atten_mask=MASK, scale=0.35,
                                                   actual_seq_qlen=cu[1:], actual_seq_kvlen=cu[1:], sparse_mode=3)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = tnd_reference(q64, k64, v64, cu, cu, 0.35, causal=True)[0]
    assert out.dtype == torch.bfloat16 and smax.dtype == torch.float32 and ssum.dtype == torch.float32
    # Products of bf16 operands accumulated in fp32, probabilities cast to bf16 before P @ V: about one bf16 ulp.
    assert_close(out.double(), ref, rtol=2e-2, atol=2e-2)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(15)).to(torch.bfloat16)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    want = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    for got, expected in zip(grads, want):
        assert got.dtype == torch.bfloat16
        assert_close(got.double(), expected, rtol=3e-2, atol=3e-2)


def test_grad_op_rebuilds_softmax_from_statistics_and_accepts_merged_lse(npu):
    cu = [0, 5, 11]
    q, k, v = (t.requires_grad_() for t in _qkv(11, 11, seed=6))
    out, smax, ssum, *_ = npu.npu_fusion_attention(q, k, v, 4, "TND", atten_mask=MASK, scale=0.3,
                                                   actual_seq_qlen=cu[1:], actual_seq_kvlen=cu[1:], sparse_mode=3)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
    want = torch.autograd.grad(out, (q, k, v), dout)
    common = dict(atten_mask=MASK, attention_in=out.detach(), scale_value=0.3, actual_seq_qlen=cu[1:],
                  actual_seq_kvlen=cu[1:], sparse_mode=3)
    got = npu.npu_fusion_attention_grad(q.detach(), k.detach(), v.detach(), dout, 4, "TND", softmax_max=smax,
                                        softmax_sum=ssum, **common)
    lse = (smax + torch.log(ssum)).contiguous()
    merged = npu.npu_fusion_attention_grad(q.detach(), k.detach(), v.detach(), dout, 4, "TND", softmax_max=lse,
                                           softmax_sum=torch.ones_like(lse), **common)
    for a, b, c in zip(got[:3], merged[:3], want):
        assert_close(a, c, rtol=1e-5, atol=1e-6)
        assert_close(b, c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tnd_statistics", [True, False])
def test_project_npu_kernel_agrees_with_torch_reference_and_merges_blocks(npu, tnd_statistics):
    from mindspeed_mm.core.fcp.parallel.kernels.base import VarlenSegments
    from mindspeed_mm.core.fcp.parallel.kernels.npu_fusion import NpuFusionAttentionKernel, accepts_tnd_statistics
    from mindspeed_mm.core.fcp.parallel.kernels.torch_reference import TorchReferenceKernel

    assert accepts_tnd_statistics(npu)
    kernel, reference = NpuFusionAttentionKernel(npu, tnd_statistics=tnd_statistics), TorchReferenceKernel()
    q, k, v = _qkv(12, 12, seed=8)
    full = VarlenSegments((0, 5, 12), (0, 5, 12))
    for causal in (False, True):
        out, lse = kernel.forward(q, k, v, full, causal=causal, softmax_scale=0.3)
        ref_out, ref_lse = reference.forward(q, k, v, full, causal=causal, softmax_scale=0.3)
        assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
        assert_close(lse, ref_lse.float(), rtol=1e-5, atol=1e-5)
        dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(10))
        grads = kernel.backward(dout, q, k, v, out, lse, full, causal=causal, softmax_scale=0.3)
        ref_grads = reference.backward(dout, q, k, v, ref_out, ref_lse, full, causal=causal, softmax_scale=0.3)
        for a, b in zip(grads, ref_grads):
            assert_close(a, b, rtol=1e-5, atol=1e-6)
    # two documents of 8 and 6 tokens: their back halves against the front halves (full) and the back halves
    # (causal), merged by lse, as a ring step does; the backward of each block takes the merged out and lse.
    qd, kd, vd = _qkv(14, 14, seed=11)
    back, front = torch.tensor([4, 5, 6, 7, 11, 12, 13]), torch.tensor([0, 1, 2, 3, 8, 9, 10])
    halves = VarlenSegments((0, 4, 7), (0, 4, 7))
    first = kernel.forward(qd[back], kd[front], vd[front], halves, causal=False, softmax_scale=0.3)
    second = kernel.forward(qd[back], kd[back], vd[back], halves, causal=True, softmax_scale=0.3)
    lse = torch.logaddexp(first[1], second[1])
    merged = first[0] * torch.exp(first[1] - lse).unsqueeze(-1) + second[0] * torch.exp(second[1] - lse).unsqueeze(-1)
    docs = VarlenSegments((0, 8, 14), (0, 8, 14))
    whole, whole_lse = reference.forward(qd, kd, vd, docs, causal=True, softmax_scale=0.3)
    assert_close(merged, whole[back], rtol=1e-5, atol=1e-6)
    assert_close(lse, whole_lse[back], rtol=1e-5, atol=1e-5)
    dout = torch.zeros(14, 4, 8)
    dout[back] = torch.randn(7, 4, 8, generator=torch.Generator().manual_seed(12))
    want = reference.backward(dout, qd, kd, vd, whole, whole_lse, docs, causal=True, softmax_scale=0.3)
    g1 = kernel.backward(dout[back], qd[back], kd[front], vd[front], merged, lse, halves, causal=False,
                         softmax_scale=0.3)
    g2 = kernel.backward(dout[back], qd[back], kd[back], vd[back], merged, lse, halves, causal=True, softmax_scale=0.3)
    assert_close(g1[0] + g2[0], want[0][back], rtol=1e-5, atol=1e-5)
    for got_front, got_back, wanted in ((g1[1], g2[1], want[1]), (g1[2], g2[2], want[2])):
        assert_close(got_front, wanted[front], rtol=1e-5, atol=1e-5)
        assert_close(got_back, wanted[back], rtol=1e-5, atol=1e-5)


def test_project_npu_kernel_finds_softmax_layout_in_the_signature(npu):
    from mindspeed_mm.core.fcp.parallel.kernels.npu_fusion import NpuFusionAttentionKernel

    class OlderTorchNpu:  # torch_npu before 7.2.0: no softmax_layout
        def npu_fusion_attention(self, query, key, value, head_num, input_layout, **kwargs):
            return npu.npu_fusion_attention(query, key, value, head_num, input_layout, **kwargs)

        def npu_fusion_attention_grad(self, query, key, value, dy, head_num, input_layout, **kwargs):
            return npu.npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, **kwargs)

    class Older(OlderTorchNpu):
        def npu_fusion_attention(self, query, key, value, head_num, input_layout, pse=None, atten_mask=None,
                                 scale=1.0, keep_prob=1.0, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0):
            return super().npu_fusion_attention(query, key, value, head_num, input_layout, atten_mask=atten_mask,
                                                scale=scale, actual_seq_qlen=actual_seq_qlen,
                                                actual_seq_kvlen=actual_seq_kvlen, sparse_mode=sparse_mode)

        def npu_fusion_attention_grad(self, query, key, value, dy, head_num, input_layout, *, atten_mask=None,
                                      softmax_max=None, softmax_sum=None, attention_in=None, scale_value=1.0,
                                      keep_prob=1.0, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0):
            return super().npu_fusion_attention_grad(
                query, key, value, dy, head_num, input_layout, atten_mask=atten_mask, softmax_max=softmax_max,
                softmax_sum=softmax_sum, attention_in=attention_in, scale_value=scale_value,
                actual_seq_qlen=actual_seq_qlen, actual_seq_kvlen=actual_seq_kvlen, sparse_mode=sparse_mode)

    assert NpuFusionAttentionKernel(npu).tnd_statistics
    assert not NpuFusionAttentionKernel(Older()).tnd_statistics


@pytest.mark.parametrize("call, what", [
    (lambda n: n.npu_fusion_attention(*_qkv(0, 0), 4, "TND", actual_seq_qlen=[0], actual_seq_kvlen=[0]),
     "varlen T of the query must be in 1..1048576"),
    (lambda n: n.npu_fusion_attention(torch.zeros((1 << 20) + 1, 1, 1), torch.zeros(4, 1, 1), torch.zeros(4, 1, 1), 1,
                                      "TND", actual_seq_qlen=[(1 << 20) + 1], actual_seq_kvlen=[4]),
     "varlen T of the query must be in 1..1048576"),
    (lambda n: n.npu_fusion_attention(*_qkv(1025, 1025, heads=1, kv_heads=1, dim=1), 1, "TND",
                                      actual_seq_qlen=list(range(1, 1026)), actual_seq_kvlen=list(range(1, 1026))),
     "at most 1024 entries"),
    (lambda n: n.npu_fusion_attention(*_qkv(4, 4, dim=769), 4, "TND", actual_seq_qlen=[4], actual_seq_kvlen=[4]),
     "head dim D must be in 1..768"),
    (lambda n: n.npu_fusion_attention(*_qkv(4, 4, heads=6, kv_heads=4), 6, "TND", actual_seq_qlen=[4],
                                      actual_seq_kvlen=[4]), "Nq / Nkv must be a positive integer"),
    (lambda n: n.npu_fusion_attention(*(t.double() for t in _qkv(4, 4)), 4, "TND", actual_seq_qlen=[4],
                                      actual_seq_kvlen=[4]), "float16, bfloat16, float32"),
    (lambda n: n.npu_fusion_attention(*_qkv(4, 4), 4, "TND", actual_seq_qlen=[4],
                                      actual_seq_kvlen=[4], softmax_layout="NTD"), "softmax_layout"),
])
def test_documented_limits_are_refused_as_the_operator_does(npu, call, what):
    with pytest.raises(RuntimeError, match=re.escape(what)):
        call(npu)


def test_empty_key_segment_gives_zero_output_and_minus_inf_lse(npu):
    q, k, v = _qkv(3, 2, seed=12)
    out, smax, ssum, *_ = npu.npu_fusion_attention(q, k, v, 4, "TND", scale=0.5, actual_seq_qlen=[1, 3],
                                                   actual_seq_kvlen=[2, 2])
    assert torch.equal(out[1:], torch.zeros_like(out[1:]))
    assert torch.isneginf(smax[1:, :, 0] + torch.log(ssum[1:, :, 0])).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_fp32_statistics_cast_back(npu, dtype):
    g = torch.Generator().manual_seed(13)
    x, gamma = torch.randn(3, 5, 16, generator=g).to(dtype), torch.randn(16, generator=g).to(dtype)
    y, rstd = npu.npu_rms_norm(x, gamma, epsilon=1e-6)
    xf = x.float()
    want_rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert y.dtype == dtype and rstd.dtype == torch.float32 and rstd.shape == (3, 5, 1)
    assert_close(rstd, want_rstd)
    assert_close(y, (xf * want_rstd * gamma.float()).to(dtype), rtol=0, atol=0)


def test_rotary_mul_is_x_cos_plus_rotate_half_x_sin(npu):
    g = torch.Generator().manual_seed(14)
    x = torch.randn(2, 6, 4, 8, generator=g)
    cos, sin = torch.randn(1, 6, 1, 8, generator=g), torch.randn(1, 6, 1, 8, generator=g)
    rotated = torch.cat((-x[..., 4:], x[..., :4]), dim=-1)
    assert_close(npu.npu_rotary_mul(x, cos, sin), x * cos + rotated * sin, rtol=0, atol=0)


@pytest.mark.parametrize("call, name", [
    (lambda n: n.npu_fusion_attention(*_qkv(4, 4), 4, "TND", keep_prob=0.9, actual_seq_qlen=[4],
                                      actual_seq_kvlen=[4]), "dropout"),
    (lambda n: n.npu_fusion_attention(*_qkv(4, 4), 4, "TND", atten_mask=MASK, sparse_mode=4, actual_seq_qlen=[4],
                                      actual_seq_kvlen=[4]), "sparse_mode 4"),
    (lambda n: n.npu_gelu(torch.ones(2, 4)), "torch_npu.npu_gelu"),
    (lambda n: n.npu_moe_token_permute(torch.ones(2, 4), torch.zeros(2, 1, dtype=torch.long), padded_mode=True),
     "padded_mode"),
    (lambda n: n.npu_grouped_matmul([torch.ones(2, 4)], [torch.ones(1, 4, 3)], group_list=[2], split_item=0,
                                    group_type=0), "group_type 0 with split_item 0"),
    (lambda n: n.npu.memory._record_memory_history(), "torch.npu.memory._record_memory_history"),
    (lambda n: n.npu_rotary_mul(torch.ones(2), torch.ones(2), torch.ones(2), rotary_mode="interleave"), "rotary_mode"),
])
def test_unimplemented_calls_raise_naming_them(npu, call, name):
    with pytest.raises(NotImplementedError, match=name):
        call(npu)


def test_band_limits_without_a_mask_are_ignored_as_documented(npu):
    """defaultMask without atten_mask computes every query-key pair whatever pre_tockens / next_tockens say, as
    MindSpeed's TND ring attention passes them for the unmasked blocks of a step
    (`ring_context_parallel.CausalEodAttentionStrategy`: pre_tockens = next_tockens = the block's key rows); with a
    mask the band is still refused."""
    cu_q, cu_k = [0, 6, 10], [0, 3, 5]
    q, k, v = _qkv(10, 5, heads=2, kv_heads=2, seed=3)
    scale = 1 / math.sqrt(8)
    full = npu.npu_fusion_attention(q, k, v, 2, "TND", scale=scale, actual_seq_qlen=cu_q[1:],
                                    actual_seq_kvlen=cu_k[1:])
    banded = npu.npu_fusion_attention(q, k, v, 2, "TND", scale=scale, pre_tockens=k.shape[0], next_tockens=k.shape[0],
                                      sparse_mode=0, actual_seq_qlen=cu_q[1:], actual_seq_kvlen=cu_k[1:])
    for got, want in zip(banded[:3], full[:3]):
        assert torch.equal(got, want)
    ref, _ = tnd_reference(q, k, v, cu_q, cu_k, scale, False)
    assert_close(banded[0].double(), ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="band limits"):
        npu.npu_fusion_attention(*_qkv(4, 4), 4, "TND", atten_mask=MASK, pre_tockens=2, next_tockens=0,
                                 sparse_mode=0, actual_seq_qlen=[4], actual_seq_kvlen=[4])


def test_sparse_mode_3_rejects_a_mask_that_is_not_the_compressed_one(npu):
    with pytest.raises(ValueError, match="2048x2048"):
        npu.npu_fusion_attention(*_qkv(4, 4), 4, "TND", atten_mask=MASK.T.contiguous(), sparse_mode=3,
                                 actual_seq_qlen=[4], actual_seq_kvlen=[4])


def test_torchair_is_import_only(npu):
    import torchair
    from torchair.ge_concrete_graph.ge_graph import Tensor

    assert not hasattr(torchair, "some_probe_name")
    with pytest.raises(NotImplementedError, match="ge_graph.Tensor"):
        Tensor()
    assert torchair.register_fx_node_ge_converter("op")(len) is len


def test_transfer_to_npu_maps_devices_backends_and_the_cuda_namespace():
    done = run_isolated("""
        import os, tempfile
        import torch, torch.distributed as dist
        import torch_npu
        from torch_npu.contrib import transfer_to_npu
        from torch.distributed.device_mesh import DeviceMesh
        assert torch.zeros(2, device="cuda").device.type == "cpu"
        assert torch.ones(2, device="npu:1").device.type == "cpu"
        assert torch.empty(3, device=0).device.type == "cpu"
        assert torch.tensor([1.0], device=torch.device("cuda", 0)).device.type == "cpu"
        x = torch.arange(4.0)
        assert x.to(0).device.type == "cpu" and x.to("npu").device.type == "cpu" and x.cuda() is x
        assert x.to(device="cuda:0", dtype=torch.float64).dtype == torch.float64
        assert x.new_zeros(2, device="npu").device.type == "cpu"
        layer = torch.nn.Linear(2, 2).cuda().to("npu:0")
        assert layer.weight.device.type == "cpu"
        assert torch.cuda.current_device is torch.npu.current_device and torch.cuda.is_available()
        torch.cuda.set_device(1); assert torch.npu.current_device() == 1; torch.cuda.set_device(0)
        torch.manual_seed(5); a = torch.rand(3)
        torch.npu.manual_seed(5); assert torch.equal(torch.rand(3), a)
        state = torch.cuda.get_rng_state(); b = torch.rand(2); torch.cuda.set_rng_state(state)
        assert torch.equal(torch.rand(2), b)
        torch.cuda.synchronize(); torch.cuda.current_stream().synchronize(); torch.cuda.empty_cache()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            assert torch.cuda.current_stream() is s
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); e1.record(); assert e0.elapsed_time(e1) >= 0
        assert torch.cuda.memory_allocated() > 0 and torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated()
        store = tempfile.mktemp()
        opts = torch_npu._C._distributed_c10d.ProcessGroupHCCL.Options()
        assert not hasattr(opts, "hccl_config")
        dist.init_process_group(backend="nccl", init_method="file://" + store, rank=0, world_size=1)
        assert dist.get_backend() == "gloo"
        group = dist.new_group([0], backend="hccl", pg_options=opts)
        t = torch.ones(2); dist.all_reduce(t, group=group); dist.barrier()
        assert DeviceMesh("npu", [0]).device_type == "cpu"
        from torch.distributed.device_mesh import init_device_mesh
        assert init_device_mesh("npu", (1,)).device_type == "cpu"
        prof = torch_npu.profiler.profile(activities=[torch_npu.profiler.ProfilerActivity.NPU],
                                          schedule=torch_npu.profiler.schedule(wait=0, warmup=0, active=1, repeat=1),
                                          on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(
                                              tempfile.mkdtemp(), analyse_flag=False),
                                          experimental_config=torch_npu.profiler._ExperimentalConfig(
                                              aic_metrics=torch_npu.profiler.AiCMetrics.PipeUtilization))
        dist.destroy_process_group()
        print("OK")
    """)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stdout + done.stderr


def test_gather_check_patch_adds_only_the_host_to_the_accepted_devices():
    done = run_isolated("""
        import types, torch, cpu_ascend_hooks
        module = types.ModuleType("fake")
        exec('def _gather(x):\\n    if x.device.type not in ["cuda", "npu"]:\\n        raise AssertionError("no")\\n'
             '    return "gathered"\\n', module.__dict__)
        cpu_ascend_hooks._gather_accepts_host(module)
        assert module._gather(torch.ones(1)) == "gathered"
        try:
            module._gather(torch.ones(1, device="meta"))
        except AssertionError:
            print("OK")
    """)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stdout + done.stderr


def _routing(tokens: int, experts: int, top_k: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=g)
    weights, indices = torch.topk(torch.softmax(logits, dim=-1), top_k, dim=-1)
    return weights / weights.sum(-1, keepdim=True), indices


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_moe_permute_groups_each_tokens_copies_by_expert_in_token_order(npu, top_k):
    tokens = torch.randn(7, 5, dtype=torch.float64)
    _, indices = _routing(7, 4, top_k)
    permuted, sorted_indices = npu.npu_moe_token_permute(tokens, indices if top_k > 1 else indices[:, 0])
    # plain torch: for each expert in order, every (token, slot) routed to it, tokens in order
    expected = torch.stack([tokens[i] for e in range(4) for i in range(7) for k in range(top_k)
                            if int(indices[i, k]) == e])
    assert_close(permuted, expected, rtol=0, atol=0)
    assert sorted_indices.dtype == torch.int32
    flat = indices.reshape(-1)
    assert torch.equal(permuted[sorted_indices.long()], tokens.repeat_interleave(top_k, 0))  # row of each copy
    assert torch.equal(flat[torch.argsort(sorted_indices.long())], flat.sort(stable=True).values)


@pytest.mark.parametrize("top_k", [1, 2])
def test_moe_unpermute_weighs_and_sums_each_tokens_copies_with_exact_gradients(npu, top_k):
    tokens = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    probs, indices = _routing(6, 5, top_k, seed=1)
    probs = probs.double().requires_grad_(True)
    permuted, sorted_indices = npu.npu_moe_token_permute(tokens, indices)
    transformed = permuted * torch.arange(1, permuted.shape[0] + 1, dtype=torch.float64).unsqueeze(1)
    out = npu.npu_moe_token_unpermute(transformed, sorted_indices, probs=probs)
    # plain torch: copy k of token i went through row position[i, k] of the grouped rows
    position = sorted_indices.long().reshape(6, top_k)
    scale = (position + 1).to(torch.float64)
    expected = (tokens.unsqueeze(1) * scale.unsqueeze(-1) * probs.unsqueeze(-1)).sum(1)
    assert_close(out, expected, rtol=1e-12, atol=1e-12)
    weights = torch.randn(6, 4, dtype=torch.float64)
    got = torch.autograd.grad((out * weights).sum(), (tokens, probs))
    want = torch.autograd.grad((expected * weights).sum(), (tokens, probs))
    for a, b in zip(got, want):
        assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert torch.equal(npu.npu_moe_token_unpermute(permuted, sorted_indices, probs=torch.ones(6, top_k,
                                                                                               dtype=torch.float64)),
                       tokens.detach() * top_k)


def test_swiglu_is_swish_of_the_first_half_times_the_second(npu):
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    first, second = x[:, :4], x[:, 4:]
    reference = first * torch.sigmoid(first) * second
    assert_close(npu.npu_swiglu(x, dim=-1), reference, rtol=1e-12, atol=1e-12)
    assert_close(npu.npu_swiglu(x.T.contiguous(), dim=0), reference.T, rtol=1e-12, atol=1e-12)


def test_grouped_matmul_along_m_and_along_k(npu):
    g = torch.Generator().manual_seed(3)
    counts = [3, 0, 4, 1]
    x = torch.randn(sum(counts), 5, generator=g, dtype=torch.float64)
    w = torch.randn(4, 5, 6, generator=g, dtype=torch.float64)
    rows = torch.repeat_interleave(torch.arange(4), torch.tensor(counts))
    expected = torch.einsum("mk,mkn->mn", x, w[rows])
    (out,) = npu.npu_grouped_matmul([x], [w], group_list=torch.tensor(counts), split_item=2, group_type=0,
                                    group_list_type=1)
    assert_close(out, expected, rtol=1e-12, atol=1e-12)
    (cumulative,) = npu.npu_grouped_matmul([x], [w], group_list=[3, 3, 7, 8], split_item=3, group_type=0,
                                           group_list_type=0)
    assert_close(cumulative, expected, rtol=1e-12, atol=1e-12)
    grad = torch.randn(sum(counts), 6, generator=g, dtype=torch.float64)
    (per_group,) = npu.npu_grouped_matmul([x.T], [grad], group_list=counts, split_item=3, group_type=2,
                                          group_list_type=1)
    expected_w = torch.stack([x[rows == e].T @ grad[rows == e] for e in range(4)])
    assert per_group.shape == (4, 5, 6)
    assert_close(per_group, expected_w, rtol=1e-12, atol=1e-12)


def test_transfer_to_npu_counts_integer_tensors_in_histc_as_the_accelerator_does():
    done = run_isolated("""
        import torch
        import torch_npu
        from torch_npu.contrib import transfer_to_npu
        indices = torch.tensor([[0, 3], [3, 1], [2, 3]])
        counts = torch.histc(indices, bins=4, min=0, max=4)
        assert counts.dtype == torch.int64 and counts.tolist() == [1, 1, 1, 3], counts
        assert torch.equal(counts, torch.bincount(indices.reshape(-1), minlength=4))
        floats = torch.histc(torch.tensor([0.5, 1.5, 1.6]), bins=2, min=0, max=2)
        assert floats.dtype == torch.float32 and floats.tolist() == [1.0, 2.0]
    """)
    assert done.returncode == 0, done.stderr[-2000:]


def test_transfer_to_npu_gathers_into_the_stacked_output_torch_documents():
    done = run_isolated("""
        import torch, torch.distributed as dist
        import torch_npu
        from torch_npu.contrib import transfer_to_npu
        dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
        counts = torch.tensor([3, 0, 2, 5])
        stacked = torch.zeros(1, 4, dtype=counts.dtype)
        dist.all_gather_into_tensor(stacked, counts)
        assert stacked.tolist() == [[3, 0, 2, 5]], stacked
        flat = torch.zeros(4, dtype=counts.dtype)
        dist.all_gather_into_tensor(flat, counts)
        assert flat.tolist() == [3, 0, 2, 5]
        dist.destroy_process_group()
    """)
    assert done.returncode == 0, done.stderr[-2000:]
