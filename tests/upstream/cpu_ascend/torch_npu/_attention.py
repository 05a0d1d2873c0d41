"""`npu_fusion_attention` / `npu_fusion_attention_grad` on the host, with the NPU kernel's semantics.

Conventions (torch_npu docs, `torch_npu-npu_fusion_attention.md` in Ascend/op-plugin; the statistics layout
as MindSpeed's TND ring attention reads it, `mindspeed/core/context_parallel/utils.py`):

- layouts: `TND` (varlen; `actual_seq_qlen` / `actual_seq_kvlen` are cumulative END offsets, e.g. lengths
  2, 2, 2 are passed as 2, 4, 6; trailing zeros mark batches that take no part), `BSND`, `BNSD`, `BSH`, `SBH`;
  `head_num` is the query head count; key/value may have fewer heads (GQA: query head h reads key head
  h // (Nq / Nkv)).
- `atten_mask`: True (or 1) = masked out. `sparse_mode` 0 / 1: the mask as given (SS, 11SS, B1SS, BNSS;
  None = full attention, `pre_tockens` / `next_tockens` ignored: "如果atten_mask未传入则不做mask操作, 忽略
  pre_tockens和next_tockens取值"); 2: causal from the top-left corner (key j <= query i); 3: causal from the
  bottom-right corner (key j <= i + Skv - Sq), both passed with the compressed 2048 x 2048 upper-triangular
  mask, per document in the TND layout.
- outputs `(attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels)`: `softmax_max` is the
  row max of `scale * q k^T` (masked entries excluded), `softmax_sum` the row sum of `exp(s - max)`, both
  float32 with the value repeated 8 times on the last axis; so `lse = max + log(sum)`. `[B, N, Sq, 8]` in the
  dense layouts. In TND they are `[T, N, 8]` tensors whose rows come, by default, in NTD order inside each
  query segment: the `N * s` rows of a segment of `s` tokens hold head 0's `s` tokens, then head 1's, ...;
  with `softmax_layout="TND"` (torch_npu 7.2.0) they are token-major. `softmax_out` is the reserved (empty)
  tensor; seed / offset / numels are 0 (no dropout). A row that sees no key gets output 0, max -inf and sum 0.
- the gradient op rebuilds `P = exp(s - max) / sum` from the given statistics, read in the layout its own
  `softmax_layout` names, which is what lets a caller pass a merged lse as max with sum 1.
- arithmetic: matrix products take the input dtype and accumulate in float32; the softmax is float32; the
  probabilities (and their gradients) are cast to the input dtype before the products that consume them, as
  a flash kernel does; outputs come back in the input dtype.
- documented limits, refused with a RuntimeError as the operator's checks do: query / key / value dtype
  float16, bfloat16 or float32 and all equal; D (head dim) 1..768; Nq 1..256 and a multiple of Nkv; varlen T
  1..1M (query and key rows), at most 1K entries in `actual_seq_qlen`; S 1..1M otherwise.

Everything else (dropout, pse, prefix, band modes, explicit masks in TND) raises NotImplementedError.
"""
from __future__ import annotations

import inspect
import math

import torch

from torch_npu._trace import count

_STAT_COPIES = 8
_COMPRESSED_MASK = 2048
_MAX_TOKENS = 1 << 20
_MAX_VARLEN_SEGMENTS = 1024
_MAX_HEAD_DIM = 768
_MAX_HEADS = 256
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_DEFAULT_TOKENS = 2147483647
_LAYOUTS = ("TND", "BSND", "BNSD", "BSH", "SBH")
_checked_masks: dict[tuple[int, int, tuple], bool] = {}


def _unsupported(what: str) -> NotImplementedError:
    return NotImplementedError(f"cpu_ascend torch_npu.npu_fusion_attention: {what} is not implemented")


def _refused(what: str) -> RuntimeError:
    """The operator's own parameter checks fail the call with a RuntimeError."""
    return RuntimeError(f"npu_fusion_attention: {what} (documented constraint of the operator)")


def _offsets(values, total: int, name: str) -> list[int]:
    if values is None:
        raise ValueError(f"npu_fusion_attention: input_layout TND needs {name}")
    ends = [int(v) for v in (values.tolist() if isinstance(values, torch.Tensor) else values)]
    # Trailing zeros mark batches that take no part (documented); drop them.
    while len(ends) > 1 and ends[-1] == 0:
        ends.pop()
    if any(b < a for a, b in zip([0] + ends[:-1], ends)) or ends[-1] > total:
        raise ValueError(f"npu_fusion_attention: {name}={ends} are not cumulative end offsets within {total} rows")
    return [0] + ends


def _check_compressed_mask(mask: torch.Tensor | None, sparse_mode: int) -> None:
    if mask is None:
        raise ValueError(f"npu_fusion_attention: sparse_mode {sparse_mode} needs the 2048x2048 compressed mask")
    key = (mask.data_ptr(), mask._version, tuple(mask.shape))
    if key in _checked_masks:
        return
    expected = torch.ones(_COMPRESSED_MASK, _COMPRESSED_MASK, dtype=torch.bool, device=mask.device).triu(1)
    if tuple(mask.shape[-2:]) != (_COMPRESSED_MASK, _COMPRESSED_MASK) or not torch.equal(
        mask.reshape(_COMPRESSED_MASK, _COMPRESSED_MASK).bool(), expected
    ):
        raise ValueError(
            f"npu_fusion_attention: sparse_mode {sparse_mode} expects the 2048x2048 upper-triangular mask "
            f"(triu(diagonal=1)), got shape {tuple(mask.shape)}"
        )
    _checked_masks[key] = True


def _to_bnsd(x: torch.Tensor, layout: str, heads: int | None) -> torch.Tensor:
    """[B, N, S, D] view of a BSND / BNSD / BSH / SBH tensor (`heads` needed for the H layouts)."""
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BSH":
        b, s, h = x.shape
        return x.reshape(b, s, heads, h // heads).transpose(1, 2)
    s, b, h = x.shape  # SBH
    return x.reshape(s, b, heads, h // heads).permute(1, 2, 0, 3)


def _from_bnsd(x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "BNSD":
        return x.contiguous()
    if layout == "BSND":
        return x.transpose(1, 2).contiguous()
    b, n, s, d = x.shape
    if layout == "BSH":
        return x.transpose(1, 2).reshape(b, s, n * d)
    return x.permute(2, 0, 1, 3).reshape(s, b, n * d)


def _kv_heads(x: torch.Tensor, layout: str, q_heads: int, q: torch.Tensor) -> int | None:
    """Key/value head count of a BSH / SBH tensor (None for the layouts that carry N explicitly)."""
    if layout in ("BSH", "SBH"):
        return x.shape[-1] // (q.shape[-1] // q_heads)
    return None


def _allowed(sq: int, sk: int, sparse_mode: int, mask: torch.Tensor | None, device) -> torch.Tensor | None:
    """Boolean [.., sq, sk] of allowed entries, or None when all are allowed."""
    if sparse_mode in (2, 3):
        shift = 0 if sparse_mode == 2 else sk - sq
        rows = torch.arange(sq, device=device).unsqueeze(1)
        cols = torch.arange(sk, device=device).unsqueeze(0)
        return cols <= rows + shift
    if mask is None:
        return None
    return ~mask.bool()


def _repeat_kv(x: torch.Tensor, groups: int, head_dim: int) -> torch.Tensor:
    return x if groups == 1 else x.repeat_interleave(groups, dim=head_dim)


def _product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` of two input-dtype operands, accumulated in float32 (the products of two float16 / bfloat16
    values are exact in float32, so float32 operands give the kernel's sums)."""
    return torch.matmul(a.float(), b.float())


def _block_forward(q, k, v, allowed, scale):
    """q [.., N, Sq, D], k/v [.., N, Sk, D] (input dtype, heads matched) -> out fp32, max, sum [.., N, Sq]."""
    scores = _product(q, k.transpose(-1, -2)) * scale
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    row_max = scores.amax(dim=-1) if scores.shape[-1] else scores.new_full(scores.shape[:-1], float("-inf"))
    safe_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    probs = torch.exp(scores - safe_max.unsqueeze(-1))
    row_sum = probs.sum(dim=-1)
    out = _product(probs.to(q.dtype), v) / torch.where(row_sum > 0, row_sum, torch.ones_like(row_sum)).unsqueeze(-1)
    return out, row_max, row_sum


def _block_backward(q, k, v, dout, out, allowed, row_max, row_sum, scale):
    """Float32 gradients of one block from the given statistics; kv heads already expanded to query heads."""
    scores = _product(q, k.transpose(-1, -2)) * scale
    probs = torch.exp(scores - row_max.unsqueeze(-1)) / row_sum.unsqueeze(-1)
    if allowed is not None:
        probs = probs.masked_fill(~allowed, 0.0)
    probs = torch.nan_to_num(probs, nan=0.0, posinf=0.0)
    dv = _product(probs.to(q.dtype).transpose(-1, -2), dout)
    dprobs = _product(dout, v.transpose(-1, -2))
    delta = (dout.float() * out.float()).sum(dim=-1, keepdim=True)
    dscores = (probs * (dprobs - delta)).to(q.dtype)
    return _product(dscores, k) * scale, _product(dscores.transpose(-1, -2), q) * scale, dv


def _fold_groups(x: torch.Tensor, groups: int, head_dim: int) -> torch.Tensor:
    """Sum the gradients of the query heads that share one key/value head."""
    if groups == 1:
        return x
    shape = list(x.shape)
    shape[head_dim: head_dim + 1] = [shape[head_dim] // groups, groups]
    return x.reshape(shape).sum(dim=head_dim + 1)


def _check_common(layout, keep_prob, pse, padding_mask, prefix, sparse_mode, pre_tockens, next_tockens, mask):
    if layout not in _LAYOUTS:
        raise ValueError(f"npu_fusion_attention: input_layout {layout!r} is not one of {_LAYOUTS}")
    if keep_prob != 1.0:
        raise _unsupported(f"dropout (keep_prob={keep_prob})")
    for name, value in (("pse", pse), ("padding_mask", padding_mask), ("prefix", prefix)):
        if value is not None:
            raise _unsupported(name)
    if sparse_mode not in (0, 1, 2, 3):
        raise _unsupported(f"sparse_mode {sparse_mode}")
    # Without atten_mask, defaultMask (0) computes everything and ignores pre_tockens / next_tockens (as MindSpeed's
    # TND ring passes them for its unmasked blocks); with a mask they would cut a band.
    banded = pre_tockens != _DEFAULT_TOKENS or next_tockens != _DEFAULT_TOKENS
    if banded and (sparse_mode == 1 or (sparse_mode == 0 and mask is not None)):
        raise _unsupported("band limits pre_tockens / next_tockens")
    if sparse_mode in (2, 3):
        _check_compressed_mask(mask, sparse_mode)
    elif sparse_mode == 1 and mask is None:
        raise ValueError("npu_fusion_attention: sparse_mode 1 (allMask) needs atten_mask")
    if layout == "TND" and sparse_mode in (0, 1) and mask is not None:
        raise _unsupported("an explicit atten_mask in the TND layout")


def _check_softmax_layout(softmax_layout, layout):
    if softmax_layout not in ("", "TND"):
        raise _refused(f"softmax_layout must be \"\" or \"TND\", got {softmax_layout!r}")
    if softmax_layout == "TND" and layout != "TND":
        raise _refused("softmax_layout=\"TND\" is only configurable with input_layout TND")


def _check_limits(q, k, v, head_num, layout, qlen, kvlen):
    """The operator's documented shape and dtype constraints; returns the TND segment offsets (or None)."""
    if q.dtype not in _DTYPES or not q.dtype == k.dtype == v.dtype:
        raise _refused(f"query, key and value must share one dtype of float16, bfloat16, float32; got "
                       f"{q.dtype}, {k.dtype}, {v.dtype}")
    if k.shape != v.shape:
        raise _refused(f"key and value shapes must match, got {tuple(k.shape)} and {tuple(v.shape)}")
    if not 1 <= head_num <= _MAX_HEADS:
        raise _refused(f"head_num (Nq) must be in 1..{_MAX_HEADS}, got {head_num}")
    head_dim = q.shape[-1] if layout in ("TND", "BSND", "BNSD") else q.shape[-1] // head_num
    if not 1 <= head_dim <= _MAX_HEAD_DIM:
        raise _refused(f"head dim D must be in 1..{_MAX_HEAD_DIM}, got {head_dim}")
    if layout == "TND":
        if q.shape[1] != head_num:
            raise _refused(f"head_num {head_num} differs from the query's N {q.shape[1]}")
        if k.shape[1] == 0 or head_num % k.shape[1]:
            raise _refused(f"Nq / Nkv must be a positive integer, got Nq={head_num}, Nkv={k.shape[1]}")
        for name, rows in (("query", q.shape[0]), ("key/value", k.shape[0])):
            if not 1 <= rows <= _MAX_TOKENS:
                raise _refused(f"varlen T of the {name} must be in 1..{_MAX_TOKENS} (1M), got {rows}")
        cu_q, cu_k = _offsets(qlen, q.shape[0], "actual_seq_qlen"), _offsets(kvlen, k.shape[0], "actual_seq_kvlen")
        if len(cu_q) - 1 > _MAX_VARLEN_SEGMENTS:
            raise _refused(f"actual_seq_qlen holds at most {_MAX_VARLEN_SEGMENTS} entries in the varlen case, "
                           f"got {len(cu_q) - 1}")
        if len(cu_q) != len(cu_k):
            raise _refused(f"{len(cu_q) - 1} query vs {len(cu_k) - 1} key segments")
        return cu_q, cu_k
    seq_axis = {"BSND": 1, "BNSD": 2, "BSH": 1, "SBH": 0}[layout]
    for name, x in (("query", q), ("key/value", k)):
        if not 1 <= x.shape[seq_axis] <= _MAX_TOKENS:
            raise _refused(f"S of the {name} must be in 1..{_MAX_TOKENS} (1M), got {x.shape[seq_axis]}")
    return None


def _ntd_rows(cu_q: list[int], total: int, heads: int) -> torch.Tensor:
    """[T, N]: the row of the NTD-ordered `[T * N, 8]` statistics that holds (token, head); rows past the last
    segment (batches that take no part) stay where they are."""
    rows = torch.arange(total * heads, dtype=torch.int64).view(total, heads)
    for a, b in zip(cu_q[:-1], cu_q[1:]):
        # segment [a, b): head h's s = b - a tokens sit at rows a * N + h * s + (0 .. s - 1)
        rows[a:b] = a * heads + torch.arange(heads).unsqueeze(0) * (b - a) + torch.arange(b - a).unsqueeze(1)
    return rows


def _tnd_stats_out(values: torch.Tensor, cu_q: list[int], softmax_layout: str) -> torch.Tensor:
    """[T, N] token-major values -> the operator's [T, N, 8] statistic in `softmax_layout`."""
    if softmax_layout != "TND":
        native = torch.empty(values.numel(), dtype=values.dtype)
        native[_ntd_rows(cu_q, *values.shape).reshape(-1)] = values.reshape(-1)
        values = native.view(values.shape)
    return values.unsqueeze(-1).expand(*values.shape, _STAT_COPIES).contiguous()


def _tnd_stats_in(stat: torch.Tensor, cu_q: list[int], softmax_layout: str) -> torch.Tensor:
    """The operator's [T, N, 8] statistic in `softmax_layout` -> [T, N] token-major float32 values."""
    values = stat[..., 0].float()
    if softmax_layout == "TND":
        return values
    return values.reshape(-1)[_ntd_rows(cu_q, *values.shape)]


def _stats(values: torch.Tensor) -> torch.Tensor:
    return values.unsqueeze(-1).expand(*values.shape, _STAT_COPIES).contiguous()


def _forward(q, k, v, head_num, layout, mask, scale, sparse_mode, cu_q, cu_k):
    """Returns out (dtype of q), row max and row sum ([T, N] token-major for TND, [B, N, Sq] otherwise)."""
    if layout == "TND":
        groups = q.shape[1] // k.shape[1]
        out = q.new_zeros(q.shape, dtype=torch.float32)
        row_max = q.new_full(q.shape[:2], float("-inf"), dtype=torch.float32)
        row_sum = q.new_zeros(q.shape[:2], dtype=torch.float32)
        for qa, qb, ka, kb in zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:]):
            if qb == qa:
                continue
            # [s, N, D] -> [N, s, D]
            qs = q[qa:qb].transpose(0, 1)
            ks = _repeat_kv(k[ka:kb].transpose(0, 1), groups, 0)
            vs = _repeat_kv(v[ka:kb].transpose(0, 1), groups, 0)
            allowed = _allowed(qb - qa, kb - ka, sparse_mode, None, q.device)
            o, m, s = _block_forward(qs, ks, vs, allowed, scale)
            out[qa:qb], row_max[qa:qb], row_sum[qa:qb] = o.transpose(0, 1), m.transpose(0, 1), s.transpose(0, 1)
        return out.to(q.dtype), row_max, row_sum
    kv_heads = _kv_heads(k, layout, head_num, q)
    qb_, kb_, vb_ = _to_bnsd(q, layout, head_num), _to_bnsd(k, layout, kv_heads), _to_bnsd(v, layout, kv_heads)
    groups = qb_.shape[1] // kb_.shape[1]
    allowed = _allowed(qb_.shape[2], kb_.shape[2], sparse_mode, mask, q.device)
    o, m, s = _block_forward(qb_, _repeat_kv(kb_, groups, 1), _repeat_kv(vb_, groups, 1), allowed, scale)
    return _from_bnsd(o.to(q.dtype), layout), m, s


class _FusionAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, head_num, layout, mask, scale, sparse_mode, cu_q, cu_k):
        out, row_max, row_sum = _forward(q, k, v, head_num, layout, mask, scale, sparse_mode, cu_q, cu_k)
        ctx.save_for_backward(q, k, v, out, row_max, row_sum, mask)
        ctx.args = (head_num, layout, scale, sparse_mode, cu_q, cu_k)
        ctx.mark_non_differentiable(row_max, row_sum)
        return out, row_max, row_sum

    @staticmethod
    def backward(ctx, dout, _dmax, _dsum):
        q, k, v, out, row_max, row_sum, mask = ctx.saved_tensors
        count("npu_fusion_attention:backward")
        head_num, layout, scale, sparse_mode, cu_q, cu_k = ctx.args
        dq, dk, dv = _backward(q, k, v, dout, out, row_max, row_sum, head_num, layout, mask, scale,
                               sparse_mode, cu_q, cu_k)
        return dq, dk, dv, None, None, None, None, None, None, None


def _backward(q, k, v, dout, out, row_max, row_sum, head_num, layout, mask, scale, sparse_mode, cu_q, cu_k):
    """Gradients from token-major (TND) or [B, N, Sq] statistics, in the input dtype."""
    if layout == "TND":
        groups = q.shape[1] // k.shape[1]
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dk = torch.zeros(k.shape, dtype=torch.float32, device=q.device)
        dv = torch.zeros(v.shape, dtype=torch.float32, device=q.device)
        for qa, qb, ka, kb in zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:]):
            if qb == qa or kb == ka:
                continue
            allowed = _allowed(qb - qa, kb - ka, sparse_mode, None, q.device)
            g = _block_backward(
                q[qa:qb].transpose(0, 1), _repeat_kv(k[ka:kb].transpose(0, 1), groups, 0),
                _repeat_kv(v[ka:kb].transpose(0, 1), groups, 0), dout[qa:qb].transpose(0, 1).to(q.dtype),
                out[qa:qb].transpose(0, 1), allowed, row_max[qa:qb].transpose(0, 1),
                row_sum[qa:qb].transpose(0, 1), scale)
            dq[qa:qb] = g[0].transpose(0, 1)
            dk[ka:kb] = _fold_groups(g[1], groups, 0).transpose(0, 1)
            dv[ka:kb] = _fold_groups(g[2], groups, 0).transpose(0, 1)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
    kv_heads = _kv_heads(k, layout, head_num, q)
    qb_ = _to_bnsd(q, layout, head_num)
    kb_, vb_ = _to_bnsd(k, layout, kv_heads), _to_bnsd(v, layout, kv_heads)
    dob, ob = _to_bnsd(dout.to(q.dtype), layout, head_num), _to_bnsd(out, layout, head_num)
    groups = qb_.shape[1] // kb_.shape[1]
    allowed = _allowed(qb_.shape[2], kb_.shape[2], sparse_mode, mask, q.device)
    g = _block_backward(qb_, _repeat_kv(kb_, groups, 1), _repeat_kv(vb_, groups, 1), dob, ob, allowed,
                        row_max, row_sum, scale)
    return (_from_bnsd(g[0].to(q.dtype), layout), _from_bnsd(_fold_groups(g[1], groups, 1).to(k.dtype), layout),
            _from_bnsd(_fold_groups(g[2], groups, 1).to(v.dtype), layout))


def _caller() -> str:
    """Module of the code that called the operator (the bed's tests tell FCP's calls from upstream's)."""
    frame = inspect.currentframe()
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("torch_npu", "torch.")):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "?") if frame is not None else "?"


def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None, atten_mask=None,
                         scale=1.0, keep_prob=1.0, pre_tockens=_DEFAULT_TOKENS, next_tockens=_DEFAULT_TOKENS,
                         inner_precise=0, prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                         gen_mask_parallel=True, sync=False, softmax_layout=""):
    """Fused attention forward; see the module docstring for the conventions."""
    _check_common(input_layout, keep_prob, pse, padding_mask, prefix, sparse_mode, pre_tockens, next_tockens,
                  atten_mask)
    _check_softmax_layout(softmax_layout, input_layout)
    if scale is None or not math.isfinite(float(scale)):
        raise ValueError(f"npu_fusion_attention: scale must be a finite float, got {scale}")
    segments = _check_limits(query, key, value, int(head_num), input_layout, actual_seq_qlen, actual_seq_kvlen)
    count(f"npu_fusion_attention:{input_layout}:sparse_mode{int(sparse_mode)}")
    count(f"npu_fusion_attention:caller:{_caller()}")
    cu_q, cu_k = segments if segments is not None else (None, None)
    out, row_max, row_sum = _FusionAttention.apply(
        query, key, value, int(head_num), input_layout, atten_mask, float(scale), int(sparse_mode), cu_q, cu_k)
    reserved = torch.empty(0, dtype=query.dtype, device=query.device)
    if input_layout == "TND":
        return (out, _tnd_stats_out(row_max, cu_q, softmax_layout), _tnd_stats_out(row_sum, cu_q, softmax_layout),
                reserved, 0, 0, 0)
    return out, _stats(row_max), _stats(row_sum), reserved, 0, 0, 0


def npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, *, pse=None, padding_mask=None,
                              atten_mask=None, softmax_max=None, softmax_sum=None, softmax_in=None,
                              attention_in=None, scale_value=1.0, keep_prob=1.0, pre_tockens=_DEFAULT_TOKENS,
                              next_tockens=_DEFAULT_TOKENS, inner_precise=0, seed=0, offset=0, numels=0,
                              prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                              gen_mask_parallel=True, sync=False, softmax_layout=""):
    """Gradient of `npu_fusion_attention`: returns (dq, dk, dv, dpse) from the given max/sum (read in
    `softmax_layout`) and output."""
    _check_common(input_layout, keep_prob, pse, padding_mask, prefix, sparse_mode, pre_tockens, next_tockens,
                  atten_mask)
    _check_softmax_layout(softmax_layout, input_layout)
    if softmax_max is None or softmax_sum is None or attention_in is None:
        raise ValueError("npu_fusion_attention_grad needs softmax_max, softmax_sum and attention_in")
    segments = _check_limits(query, key, value, int(head_num), input_layout, actual_seq_qlen, actual_seq_kvlen)
    count(f"npu_fusion_attention_grad:{input_layout}:sparse_mode{int(sparse_mode)}")
    count(f"npu_fusion_attention_grad:caller:{_caller()}")
    cu_q, cu_k = segments if segments is not None else (None, None)
    if input_layout == "TND":
        row_max = _tnd_stats_in(softmax_max, cu_q, softmax_layout)
        row_sum = _tnd_stats_in(softmax_sum, cu_q, softmax_layout)
    else:
        row_max, row_sum = softmax_max[..., 0].float(), softmax_sum[..., 0].float()
    dq, dk, dv = _backward(query, key, value, dy, attention_in, row_max, row_sum, int(head_num), input_layout,
                           atten_mask, float(scale_value), int(sparse_mode), cu_q, cu_k)
    return dq, dk, dv, torch.empty(0, dtype=query.dtype, device=query.device)
