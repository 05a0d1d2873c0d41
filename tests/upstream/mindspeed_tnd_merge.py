"""The CPU `npu_fusion_attention` through upstream's own TND ring helpers; run by `test_mindspeed_tnd_merge.py`.

Runs in the upstream interpreter with the CPU Ascend surface, MindSpeed and MindSpeed-MM on the path.
Upstream's TND ring attention reads the operator's softmax statistics per query segment (`flatten_softmax` /
`unflatten_softmax`, `get_selection_indices_for_tnd_softmax_update`), merges blocks with
`forward_update_without_fused` / `tnd_out_update`, and hands the merged statistics back to
`npu_fusion_attention_grad`. If the emulation lays the statistics out as the operator does, every merge below
is exact attention. Prints one JSON object: the largest error of each check against a float64 reference.

The helpers are MindSpeed-MM's (`mindspeed_mm/fsdp/distributed/context_parallel/ring_context_parallel/utils.py`):
MindSpeed's own `unflatten_softmax` calls `view` on a transposed tensor and fails for more than one head,
which MindSpeed-MM's copy fixes. That file's package needs a newer MindSpeed (`mindspeed.fsdp`), so it is
loaded by path; its one import from that package, `get_parallel_state`, serves the ring drivers, which
this script does not call, and is bound to a function that raises if called.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import types

import torch
import torch_npu


def _load_ring_utils() -> types.ModuleType:
    def not_called(*args, **kwargs):
        raise NotImplementedError("get_parallel_state is not part of the statistics check")

    state = types.ModuleType("mindspeed_mm.fsdp.distributed.parallel_state")
    state.get_parallel_state = not_called
    sys.modules[state.__name__] = state
    path = os.path.join(os.environ["MINDSPEED_MM_DIR"], "mindspeed_mm", "fsdp", "distributed", "context_parallel",
                        "ring_context_parallel", "utils.py")
    spec = importlib.util.spec_from_file_location("mindspeed_mm_ring_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ring_utils = _load_ring_utils()

SCALE = 0.3
MASK = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
HEADS, KV_HEADS, DIM = 4, 2, 8
HALVES = [3, 1, 5, 2]  # each document is two chunks of this many tokens


def reference(q, k, v, lengths_q, lengths_k, allowed):
    """float64 attention per segment pair; `allowed(i, lq, lk)` -> [lq, lk] mask. Returns out, lse."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    lse = torch.zeros(q.shape[:2], dtype=torch.float64)
    qa = ka = 0
    for i, (lq, lk) in enumerate(zip(lengths_q, lengths_k)):
        qs = q[qa:qa + lq].double().transpose(0, 1)
        ks = k[ka:ka + lk].double().transpose(0, 1).repeat_interleave(HEADS // KV_HEADS, 0)
        vs = v[ka:ka + lk].double().transpose(0, 1).repeat_interleave(HEADS // KV_HEADS, 0)
        scores = (qs @ ks.transpose(-1, -2) * SCALE).masked_fill(~allowed(i, lq, lk), float("-inf"))
        out[qa:qa + lq] = (torch.softmax(scores, -1) @ vs).transpose(0, 1)
        lse[qa:qa + lq] = torch.logsumexp(scores, -1).transpose(0, 1)
        qa, ka = qa + lq, ka + lk
    return out, lse


def cumulative(lengths):
    ends, total = [], 0
    for n in lengths:
        total += n
        ends.append(total)
    return ends


def attention(q, k, v, lengths_q, lengths_k, causal):
    return torch_npu.npu_fusion_attention(
        q, k, v, HEADS, "TND", atten_mask=MASK if causal else None, scale=SCALE, sparse_mode=3 if causal else 0,
        actual_seq_qlen=cumulative(lengths_q), actual_seq_kvlen=cumulative(lengths_k))


def grad(q, k, v, dout, out, smax, ssum, lengths_q, lengths_k, causal):
    return torch_npu.npu_fusion_attention_grad(
        q, k, v, dout, HEADS, "TND", atten_mask=MASK if causal else None, softmax_max=smax, softmax_sum=ssum,
        attention_in=out, scale_value=SCALE, sparse_mode=3 if causal else 0,
        actual_seq_qlen=cumulative(lengths_q), actual_seq_kvlen=cumulative(lengths_k))[:3]


def lse_of(smax, ssum, lengths):
    """Token-major lse of statistics in the operator's layout, through MindSpeed's own reader."""
    return (ring_utils.flatten_softmax(smax, lengths) + torch.log(ring_utils.flatten_softmax(ssum, lengths)))[..., 0]


def err(got, want):
    return float((got.double() - want).abs().max())


def main() -> None:
    g = torch.Generator().manual_seed(0)
    docs = [2 * h for h in HALVES]
    total = sum(docs)
    q = torch.randn(total, HEADS, DIM, generator=g)
    k, v = torch.randn(total, KV_HEADS, DIM, generator=g), torch.randn(total, KV_HEADS, DIM, generator=g)
    dout = torch.randn(total, HEADS, DIM, generator=g)
    starts = [sum(docs[:i]) for i in range(len(docs))]
    front = torch.cat([torch.arange(s, s + h) for s, h in zip(starts, HALVES)])
    back = torch.cat([torch.arange(s + h, s + 2 * h) for s, h in zip(starts, HALVES)])
    results = {}

    # (a) whole documents without a mask, as two key blocks (front chunks, back chunks) merged by
    # forward_update_without_fused in the TND layout.
    full = lambda i, lq, lk: torch.ones(lq, lk, dtype=torch.bool)  # noqa: E731
    want, want_lse = reference(q, k, v, docs, docs, full)
    a = attention(q, k[front], v[front], docs, HALVES, causal=False)
    b = attention(q, k[back], v[back], docs, HALVES, causal=False)
    out, smax, ssum = ring_utils.forward_update_without_fused(a[0], a[1], a[2], b[0], b[1], b[2],
                                                              actual_seq_qlen=docs, layout="TND")
    results["full_merge_out"] = err(out, want)
    results["full_merge_lse"] = err(lse_of(smax, ssum, docs), want_lse)
    # backward of each block from the merged statistics, in the operator's layout
    qr, kr, vr = (t.double().requires_grad_() for t in (q, k, v))
    ref_out = reference(qr, kr, vr, docs, docs, full)[0]
    ref_dq, ref_dk, ref_dv = torch.autograd.grad(ref_out, (qr, kr, vr), dout.double())
    ga = grad(q, k[front], v[front], dout, out, smax, ssum, docs, HALVES, causal=False)
    gb = grad(q, k[back], v[back], dout, out, smax, ssum, docs, HALVES, causal=False)
    results["full_merge_dq"] = err(ga[0] + gb[0], ref_dq)
    results["full_merge_dk"] = max(err(ga[1], ref_dk[front]), err(gb[1], ref_dk[back]))
    results["full_merge_dv"] = max(err(ga[2], ref_dv[front]), err(gb[2], ref_dv[back]))

    # (b) a ring update of MindSpeed's `tnd_out_update`: the statistics of causal documents, then a key block seen
    # by the back chunks only, merged into the back halves of the statistics through `softmax_indices`; the block's
    # gradient from the back halves of the merged statistics, selected as MindSpeed's backward selects them.
    diagonal = attention(q, k, v, docs, docs, causal=True)
    extra_k = torch.randn(sum(HALVES), KV_HEADS, DIM, generator=g)
    extra_v = torch.randn(sum(HALVES), KV_HEADS, DIM, generator=g)
    block = attention(q[back], extra_k, extra_v, HALVES, HALVES, causal=False)
    softmax_indices = ring_utils.get_selection_indices_for_tnd_softmax_update(total, HEADS, tuple(HALVES))
    state = [diagonal[0].clone(), diagonal[1].clone(), diagonal[2].clone(), [[0, 0, 0]] * 2]
    out, smax, ssum, _ = ring_utils.tnd_out_update(0, 1, [block[0], block[1], block[2]], state, back,
                                                   softmax_indices, HALVES)
    # reference, documents in order: front chunk (causal), back chunk (its document causally, then its extra keys)
    qs, ks, vs, lengths_q, lengths_k, masks = [], [], [], [], [], []
    extra_start = 0
    for s0, h in zip(starts, HALVES):
        qs += [q[s0:s0 + h], q[s0 + h:s0 + 2 * h]]
        ks += [k[s0:s0 + h], torch.cat([k[s0:s0 + 2 * h], extra_k[extra_start:extra_start + h]])]
        vs += [v[s0:s0 + h], torch.cat([v[s0:s0 + 2 * h], extra_v[extra_start:extra_start + h]])]
        lengths_q += [h, h]
        lengths_k += [h, 3 * h]
        visible = torch.ones(h, 3 * h, dtype=torch.bool)
        visible[:, h:2 * h] = torch.ones(h, h, dtype=torch.bool).tril()
        masks += [torch.ones(h, h, dtype=torch.bool).tril(), visible]
        extra_start += h
    qr, kr, vr = (torch.cat(t).double().requires_grad_() for t in (qs, ks, vs))
    want, want_lse = reference(qr, kr, vr, lengths_q, lengths_k, lambda i, lq, lk: masks[i])
    results["ring_update_out"] = err(out, want.detach())
    results["ring_update_lse"] = err(lse_of(smax, ssum, docs), want_lse.detach())
    _, ref_dk, ref_dv = torch.autograd.grad(want, (qr, kr, vr), dout.double())
    extra_rows = torch.cat([torch.arange(p0 + 2 * h, p0 + 3 * h)
                            for p0, h in zip([sum(lengths_k[:2 * i + 1]) for i in range(len(HALVES))], HALVES)])
    half_max = smax.view(-1, 8)[softmax_indices].view(-1, HEADS, 8)
    half_sum = ssum.view(-1, 8)[softmax_indices].view(-1, HEADS, 8)
    g_block = grad(q[back], extra_k, extra_v, dout[back], out[back], half_max, half_sum, HALVES, HALVES,
                   causal=False)
    results["ring_update_extra_dk"] = err(g_block[1], ref_dk[extra_rows])
    results["ring_update_extra_dv"] = err(g_block[2], ref_dv[extra_rows])
    print(json.dumps(results))


if __name__ == "__main__":
    main()
