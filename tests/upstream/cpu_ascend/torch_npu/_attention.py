"""`npu_fusion_attention` / `npu_fusion_attention_grad` on the host, with the NPU kernel's semantics.

Conventions (torch_npu docs, `torch_npu-npu_fusion_attention.md`, and MindSpeed's ring-attention code,
which reads the statistics as `[T, N, 8]` for TND and `[B, N, S, 8]` otherwise):

- layouts: `TND` (varlen; `actual_seq_qlen` / `actual_seq_kvlen` are cumulative END offsets, e.g. lengths
  2, 2, 2 are passed as 2, 4, 6), `BSND`, `BNSD`, `BSH`, `SBH`; `head_num` is the query head count; key/value
  may have fewer heads (GQA: query head h reads key head h // (Nq / Nkv)).
- `atten_mask`: True (or 1) = masked out. `sparse_mode` 0 / 1: the mask as given (SS, 11SS, B1SS, BNSS;
  None = full attention); 2: causal from the top-left corner (key j <= query i); 3: causal from the
  bottom-right corner (key j <= i + Skv - Sq), both passed with the compressed 2048 x 2048 upper-triangular
  mask, per document in the TND layout.
- outputs `(attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels)`: `softmax_max` is the
  row max of `scale * q k^T` (masked entries excluded), `softmax_sum` the row sum of `exp(s - max)`, both
  float32 with the value repeated 8 times on the last axis; so `lse = max + log(sum)`. `softmax_out` is the
  reserved (empty) tensor; seed / offset / numels are 0 (no dropout). A row that sees no key gets output 0,
  max -inf and sum 0 (lse -inf).
- the gradient op rebuilds `P = exp(s - max) / sum` from the given statistics, which is what lets a caller
  pass a merged lse as max with sum 1.

Everything else (dropout, pse, prefix, band modes, explicit masks in TND) raises NotImplementedError.
"""
from __future__ import annotations

import math

import torch

from torch_npu._trace import count

_STAT_COPIES = 8
_COMPRESSED_MASK = 2048
_DEFAULT_TOKENS = 2147483647
_LAYOUTS = ("TND", "BSND", "BNSD", "BSH", "SBH")
_checked_masks: dict[tuple[int, int, tuple], bool] = {}


def _unsupported(what: str) -> NotImplementedError:
    return NotImplementedError(f"cpu_ascend torch_npu.npu_fusion_attention: {what} is not implemented")


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


def _block_forward(q, k, v, allowed, scale):
    """q [.., N, Sq, D], k/v [.., N, Sk, D] (heads already matched) -> out fp32, max, sum [.., N, Sq]."""
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    row_max = scores.amax(dim=-1) if scores.shape[-1] else scores.new_full(scores.shape[:-1], float("-inf"))
    safe_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    probs = torch.exp(scores - safe_max.unsqueeze(-1))
    row_sum = probs.sum(dim=-1)
    weights = probs / torch.where(row_sum > 0, row_sum, torch.ones_like(row_sum)).unsqueeze(-1)
    return torch.matmul(weights, v.float()), row_max, row_sum


def _block_backward(q, k, v, dout, out, allowed, row_max, row_sum, scale):
    """Gradients of one block from the saved statistics; kv heads already expanded to query heads."""
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    probs = torch.exp(scores - row_max.unsqueeze(-1)) / row_sum.unsqueeze(-1)
    if allowed is not None:
        probs = probs.masked_fill(~allowed, 0.0)
    probs = torch.nan_to_num(probs, nan=0.0, posinf=0.0)
    dout = dout.float()
    dv = torch.matmul(probs.transpose(-1, -2), dout)
    dprobs = torch.matmul(dout, v.float().transpose(-1, -2))
    delta = (dout * out.float()).sum(dim=-1, keepdim=True)
    dscores = probs * (dprobs - delta) * scale
    return torch.matmul(dscores, k.float()), torch.matmul(dscores.transpose(-1, -2), q.float()), dv


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
    if sparse_mode in (0, 1) and (pre_tockens != _DEFAULT_TOKENS or next_tockens != _DEFAULT_TOKENS):
        raise _unsupported("band limits pre_tockens / next_tockens")
    if sparse_mode in (2, 3):
        _check_compressed_mask(mask, sparse_mode)
    elif sparse_mode == 1 and mask is None:
        raise ValueError("npu_fusion_attention: sparse_mode 1 (allMask) needs atten_mask")
    if layout == "TND" and sparse_mode in (0, 1) and mask is not None:
        raise _unsupported("an explicit atten_mask in the TND layout")


def _stats(values: torch.Tensor) -> torch.Tensor:
    return values.unsqueeze(-1).expand(*values.shape, _STAT_COPIES).contiguous()


def _forward(q, k, v, head_num, layout, mask, scale, sparse_mode, qlen, kvlen):
    """Returns out (dtype of q), row max and row sum ([T, N] for TND, [B, N, Sq] otherwise)."""
    if layout == "TND":
        groups = q.shape[1] // k.shape[1]
        cu_q, cu_k = _offsets(qlen, q.shape[0], "actual_seq_qlen"), _offsets(kvlen, k.shape[0], "actual_seq_kvlen")
        if len(cu_q) != len(cu_k):
            raise ValueError(f"npu_fusion_attention: {len(cu_q) - 1} query vs {len(cu_k) - 1} key segments")
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
    def forward(ctx, q, k, v, head_num, layout, mask, scale, sparse_mode, qlen, kvlen):
        out, row_max, row_sum = _forward(q, k, v, head_num, layout, mask, scale, sparse_mode, qlen, kvlen)
        ctx.save_for_backward(q, k, v, out, row_max, row_sum, mask)
        ctx.args = (head_num, layout, scale, sparse_mode, qlen, kvlen)
        ctx.mark_non_differentiable(row_max, row_sum)
        return out, row_max, row_sum

    @staticmethod
    def backward(ctx, dout, _dmax, _dsum):
        q, k, v, out, row_max, row_sum, mask = ctx.saved_tensors
        count("npu_fusion_attention:backward")
        head_num, layout, scale, sparse_mode, qlen, kvlen = ctx.args
        dq, dk, dv = _backward(q, k, v, dout, out, row_max, row_sum, head_num, layout, mask, scale,
                               sparse_mode, qlen, kvlen)
        return dq, dk, dv, None, None, None, None, None, None, None


def _backward(q, k, v, dout, out, row_max, row_sum, head_num, layout, mask, scale, sparse_mode, qlen, kvlen):
    if layout == "TND":
        groups = q.shape[1] // k.shape[1]
        cu_q, cu_k = _offsets(qlen, q.shape[0], "actual_seq_qlen"), _offsets(kvlen, k.shape[0], "actual_seq_kvlen")
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dk = torch.zeros(k.shape, dtype=torch.float32, device=q.device)
        dv = torch.zeros(v.shape, dtype=torch.float32, device=q.device)
        for qa, qb, ka, kb in zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:]):
            if qb == qa or kb == ka:
                continue
            allowed = _allowed(qb - qa, kb - ka, sparse_mode, None, q.device)
            g = _block_backward(
                q[qa:qb].transpose(0, 1), _repeat_kv(k[ka:kb].transpose(0, 1), groups, 0),
                _repeat_kv(v[ka:kb].transpose(0, 1), groups, 0), dout[qa:qb].transpose(0, 1),
                out[qa:qb].transpose(0, 1), allowed, row_max[qa:qb].transpose(0, 1),
                row_sum[qa:qb].transpose(0, 1), scale)
            dq[qa:qb] = g[0].transpose(0, 1)
            dk[ka:kb] = _fold_groups(g[1], groups, 0).transpose(0, 1)
            dv[ka:kb] = _fold_groups(g[2], groups, 0).transpose(0, 1)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
    kv_heads = _kv_heads(k, layout, head_num, q)
    qb_ = _to_bnsd(q, layout, head_num)
    kb_, vb_ = _to_bnsd(k, layout, kv_heads), _to_bnsd(v, layout, kv_heads)
    dob, ob = _to_bnsd(dout, layout, head_num), _to_bnsd(out, layout, head_num)
    groups = qb_.shape[1] // kb_.shape[1]
    allowed = _allowed(qb_.shape[2], kb_.shape[2], sparse_mode, mask, q.device)
    g = _block_backward(qb_, _repeat_kv(kb_, groups, 1), _repeat_kv(vb_, groups, 1), dob, ob, allowed,
                        row_max, row_sum, scale)
    return (_from_bnsd(g[0].to(q.dtype), layout), _from_bnsd(_fold_groups(g[1], groups, 1).to(k.dtype), layout),
            _from_bnsd(_fold_groups(g[2], groups, 1).to(v.dtype), layout))


def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None, atten_mask=None,
                         scale=1.0, keep_prob=1.0, pre_tockens=_DEFAULT_TOKENS, next_tockens=_DEFAULT_TOKENS,
                         inner_precise=0, prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                         gen_mask_parallel=True, sync=False, softmax_layout=""):
    """Fused attention forward; see the module docstring for the conventions."""
    _check_common(input_layout, keep_prob, pse, padding_mask, prefix, sparse_mode, pre_tockens, next_tockens,
                  atten_mask)
    if softmax_layout not in ("", "TND") or (softmax_layout == "TND" and input_layout != "TND"):
        raise _unsupported(f"softmax_layout {softmax_layout!r}")
    if scale is None or not math.isfinite(float(scale)):
        raise ValueError(f"npu_fusion_attention: scale must be a finite float, got {scale}")
    count(f"npu_fusion_attention:{input_layout}:sparse_mode{int(sparse_mode)}")
    out, row_max, row_sum = _FusionAttention.apply(
        query, key, value, int(head_num), input_layout, atten_mask, float(scale), int(sparse_mode),
        actual_seq_qlen, actual_seq_kvlen)
    reserved = torch.empty(0, dtype=query.dtype, device=query.device)
    return out, _stats(row_max), _stats(row_sum), reserved, 0, 0, 0


def npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, *, pse=None, padding_mask=None,
                              atten_mask=None, softmax_max=None, softmax_sum=None, softmax_in=None,
                              attention_in=None, scale_value=1.0, keep_prob=1.0, pre_tockens=_DEFAULT_TOKENS,
                              next_tockens=_DEFAULT_TOKENS, inner_precise=0, seed=0, offset=0, numels=0,
                              prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                              gen_mask_parallel=True, sync=False):
    """Gradient of `npu_fusion_attention`: returns (dq, dk, dv, dpse) from the saved max/sum and output."""
    _check_common(input_layout, keep_prob, pse, padding_mask, prefix, sparse_mode, pre_tockens, next_tockens,
                  atten_mask)
    if softmax_max is None or softmax_sum is None or attention_in is None:
        raise ValueError("npu_fusion_attention_grad needs softmax_max, softmax_sum and attention_in")
    count(f"npu_fusion_attention_grad:{input_layout}:sparse_mode{int(sparse_mode)}")
    dq, dk, dv = _backward(query, key, value, dy, attention_in, softmax_max[..., 0].float(),
                           softmax_sum[..., 0].float(), int(head_num), input_layout, atten_mask,
                           float(scale_value), int(sparse_mode), actual_seq_qlen, actual_seq_kvlen)
    return dq, dk, dv, torch.empty(0, dtype=query.dtype, device=query.device)
