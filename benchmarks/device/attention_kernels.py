"""Device check of FCP's attention kernels: accuracy against an fp32 reference, and time against the device's
own varlen call. Runs on one GPU (CUDA kernels) or one NPU (`npu_fusion`) in a few minutes; CI never runs it.

    OUT=/tmp python benchmarks/device/attention_kernels.py          # from the project root

Qwen3-VL-8B heads (32 query / 8 key-value heads of 128), bf16. For every kernel that builds here:
1. single calls against an fp32 reference written here (dense softmax per head, autograd for the gradients):
   one causal document of 1 to 32,768 tokens, a packed causal call of documents of 1 to 2,048 tokens, and
   the same packed call without the mask; errors of out, lse, dq, dk, dv as max |got - want| / max |want|
   (at least 0.01),
   next to the same errors of the device's own call (torch's `varlen_attn` through autograd, with the key /
   value heads repeated where it has no `enable_gqa`) as the bar a bf16 kernel can reach;
2. a two-block ring merge: the second half of one document's queries against the first half of its keys
   (full) and the second half (causal), merged by log-sum-exp, each block's backward given the merged output
   and log-sum-exp, against the reference of the whole causal document;
3. forward + backward time (median of 10 CUDA-event-timed runs after 3 warm-ups) against the device's own
   call: one document of 4K / 16K / 32K tokens and 32K tokens packed as 64 documents of 512; and FCP's
   reference kernel (`torch`) at 4K, the CUDA default before `torch_varlen`.
One JSON object per line to stdout and to $OUT/attention_kernels.jsonl. `DRY=1` runs the script's logic on
the CPU with the reference kernel at small sizes (a check of the script, not of a device).
"""
from __future__ import annotations

import json
import math
import os
import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mindspeed_mm.core.fcp.parallel.kernels import (  # noqa: E402
    KernelUnavailableError,
    VarlenSegments,
    get_kernel,
    resolve_kernel_name,
)

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
SCALE = 1.0 / math.sqrt(HEAD_DIM)
DRY = os.environ.get("DRY") == "1"
SINGLE_LENGTHS = (1, 7, 64) if DRY else (1, 7, 128, 1000, 4096, 16384, 32768)
PACKED_LENGTHS = (1, 3, 10, 7) if DRY else (1, 3, 100, 2048, 513, 7, 1024)
RING_LENGTHS = (64,) if DRY else (8192, 32768)
TIMED = {"packed_4x16": (16,) * 4} if DRY else {
    "doc_4096": (4096,), "doc_16384": (16384,), "doc_32768": (32768,), "packed_64x512": (512,) * 64}
DTYPE = torch.float32 if DRY else torch.bfloat16
ROWS: list[dict] = []


def emit(**row) -> None:
    ROWS.append(row)
    print(json.dumps(row), flush=True)


def device() -> torch.device:
    if DRY:
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    try:
        import torch_npu  # noqa: F401

        return torch.device("npu")
    except ImportError:
        raise SystemExit("no CUDA or NPU device here")


DEV = device()


def synchronize() -> None:
    torch.cuda.synchronize() if DEV.type == "cuda" else torch.npu.synchronize()


def event():
    return (torch.cuda if DEV.type == "cuda" else torch.npu).Event(enable_timing=True)


def timed_ms(fn, warmup: int = 3, repeats: int = 10) -> float:
    if DRY:
        fn()
        return float("nan")
    for _ in range(warmup):
        fn()
    synchronize()
    times = []
    for _ in range(repeats):
        start, end = event(), event()
        start.record()
        fn()
        end.record()
        synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def segments_of(lengths) -> VarlenSegments:
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return VarlenSegments(tuple(cu), tuple(cu))


def inputs(total: int, seed: int = 0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    make = lambda heads: torch.randn(total, heads, HEAD_DIM, generator=g).to(DEV, DTYPE)  # noqa: E731
    return make(HEADS), make(KV_HEADS), make(KV_HEADS), make(HEADS)


def reference(q, k, v, dout, lengths, causal):
    """fp32 out [T, H, D], lse [T, H] and grads, one document and one head at a time (memory-bounded)."""
    group = HEADS // KV_HEADS
    out = torch.zeros(q.shape, dtype=torch.float32, device=DEV)
    lse = torch.zeros(q.shape[:2], dtype=torch.float32, device=DEV)
    dq = torch.zeros(q.shape, dtype=torch.float32, device=DEV)
    dk = torch.zeros(k.shape, dtype=torch.float32, device=DEV)
    dv = torch.zeros(v.shape, dtype=torch.float32, device=DEV)
    start = 0
    for length in lengths:
        rows = slice(start, start + length)
        for h in range(HEADS):
            kv = h // group
            qh = q[rows, h].float().requires_grad_()
            kh = k[rows, kv].float().requires_grad_()
            vh = v[rows, kv].float().requires_grad_()
            scores = (qh @ kh.T) * SCALE
            if causal:
                scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
            o = torch.softmax(scores, dim=-1) @ vh
            gq, gk, gv = torch.autograd.grad(o, (qh, kh, vh), dout[rows, h].float())
            out[rows, h] = o.detach()
            lse[rows, h] = torch.logsumexp(scores.detach(), dim=-1)
            dq[rows, h] = gq
            dk[rows, kv] += gk
            dv[rows, kv] += gv
            del scores, o
        start += length
    return out, lse, (dq, dk, dv)


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| over the reference's largest magnitude, or over 0.01 where that is smaller (a one-token
    document's dq and dk are 0)."""
    return float((got.detach().float() - want).abs().max() / want.abs().max().clamp_min(1e-2))


def own_call():
    """The device's own varlen call through autograd (None where there is none)."""
    if DEV.type != "cuda":
        return None
    try:
        from torch.nn.attention import varlen
    except ImportError:
        return None
    import inspect

    parameters = inspect.signature(varlen.varlen_attn).parameters

    def run(q, k, v, seg: VarlenSegments, causal: bool):
        if "enable_gqa" in parameters:
            extra = {"enable_gqa": True}
        else:
            k, v, extra = k.repeat_interleave(HEADS // KV_HEADS, 1), v.repeat_interleave(HEADS // KV_HEADS, 1), {}
        mask = {"window_size": (-1, 0) if causal else (-1, -1)} if "window_size" in parameters else {"is_causal": causal}
        cu_q, cu_k = seg.cu_tensors(DEV)
        out, lse = varlen.varlen_attn(q, k, v, cu_q, cu_k, seg.max_seqlen_q, seg.max_seqlen_k,
                                      return_aux=varlen.AuxRequest(lse=True), scale=SCALE, **mask, **extra)
        return out, lse

    return run


def own_forward_backward(run, q, k, v, dout, seg, causal):
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    out, lse = run(qg, kg, vg, seg, causal)
    grads = torch.autograd.grad(out, (qg, kg, vg), dout)
    lse = lse.float()
    return out, (lse.transpose(0, 1) if lse.shape[0] == HEADS else lse), grads


def check_accuracy(name: str, kernel, own) -> None:
    cases = [(f"doc_{n}", (n,), True) for n in SINGLE_LENGTHS]
    cases += [("packed_causal", PACKED_LENGTHS, True), ("packed_full", PACKED_LENGTHS, False)]
    for case, lengths, causal in cases:
        seg = segments_of(lengths)
        q, k, v, dout = inputs(sum(lengths))
        want_out, want_lse, want_grads = reference(q, k, v, dout, lengths, causal)
        out, lse = kernel.forward(q, k, v, seg, causal=causal, softmax_scale=SCALE)
        grads = kernel.backward(dout, q, k, v, out, lse, seg, causal=causal, softmax_scale=SCALE)
        row = dict(part="accuracy", kernel=name, case=case, causal=causal, tokens=sum(lengths),
                   out=rel_error(out, want_out), lse=rel_error(lse, want_lse),
                   **{g: rel_error(x, w) for g, x, w in zip(("dq", "dk", "dv"), grads, want_grads)})
        if own is not None:
            o, l, gs = own_forward_backward(own, q, k, v, dout, seg, causal)
            row["own_call"] = dict(out=rel_error(o, want_out), lse=rel_error(l, want_lse),
                                   **{g: rel_error(x, w) for g, x, w in zip(("dq", "dk", "dv"), gs, want_grads)})
            row["same_as_own_call"] = bool(torch.equal(out, o))
        emit(**row)
        del q, k, v, dout, want_out, want_grads
        torch.cuda.empty_cache() if DEV.type == "cuda" else None


def check_ring_merge(name: str, kernel) -> None:
    for length in RING_LENGTHS:
        half = length // 2
        q, k, v, dout = inputs(length, seed=1)
        seg = segments_of((half,))
        tail = slice(half, length)
        front, back = slice(0, half), slice(half, length)
        out1, lse1 = kernel.forward(q[tail], k[front], v[front], seg, causal=False, softmax_scale=SCALE)
        out2, lse2 = kernel.forward(q[tail], k[back], v[back], seg, causal=True, softmax_scale=SCALE)
        lse = torch.logaddexp(lse1, lse2)
        out = (out1.float() * torch.exp(lse1 - lse).unsqueeze(-1) + out2.float() * torch.exp(lse2 - lse).unsqueeze(-1))
        out = out.to(q.dtype)
        # Only the back half's outputs are in play: the reference's gradients with dout 0 on the front half.
        dout_back = dout.clone()
        dout_back[front] = 0
        want_out, want_lse, (ref_dq, ref_dk, ref_dv) = reference(q, k, v, dout_back, (length,), True)
        g1 = kernel.backward(dout[tail], q[tail], k[front], v[front], out, lse, seg, causal=False, softmax_scale=SCALE)
        g2 = kernel.backward(dout[tail], q[tail], k[back], v[back], out, lse, seg, causal=True, softmax_scale=SCALE)
        dk = torch.cat([g1[1], g2[1]])
        dv = torch.cat([g1[2], g2[2]])
        emit(part="ring_merge", kernel=name, tokens=length, out=rel_error(out, want_out[tail]),
             lse=rel_error(lse, want_lse[tail]), dq=rel_error(g1[0].float() + g2[0].float(), ref_dq[tail]),
             dk=rel_error(dk, ref_dk), dv=rel_error(dv, ref_dv))


def check_times(name: str, kernel, own) -> None:
    for case, lengths in TIMED.items():
        seg = segments_of(lengths)
        q, k, v, dout = inputs(sum(lengths), seed=2)

        def fcp():
            out, lse = kernel.forward(q, k, v, seg, causal=True, softmax_scale=SCALE)
            kernel.backward(dout, q, k, v, out, lse, seg, causal=True, softmax_scale=SCALE)

        row = dict(part="time", kernel=name, case=case, fb_ms=timed_ms(fcp))
        if own is not None:
            row["own_call_fb_ms"] = timed_ms(lambda: own_forward_backward(own, q, k, v, dout, seg, True))
        emit(**row)


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    emit(part="setup", device=torch.cuda.get_device_name() if DEV.type == "cuda" else str(DEV), dry=DRY,
         torch=torch.__version__, auto_kernel=resolve_kernel_name("auto", DEV))
    own = own_call()
    names = ("torch",) if DRY else ("torch_varlen", "flash_attn") if DEV.type == "cuda" else ("npu_fusion",)
    for name in names:
        try:
            kernel = get_kernel(name)
        except KernelUnavailableError as missing:
            emit(part="setup", kernel=name, unavailable=str(missing))
            continue
        emit(part="setup", kernel=name, native_gqa=getattr(kernel.kernel, "native_gqa", None),
             tnd_statistics=getattr(kernel.kernel, "tnd_statistics", None))
        for part in (check_accuracy, check_ring_merge, check_times):
            try:
                part(name, kernel, own) if part is not check_ring_merge else part(name, kernel)
            except Exception as error:  # one failed part must not cost the others
                emit(part=part.__name__, kernel=name, error=f"{type(error).__name__}: {error}",
                     tb=traceback.format_exc()[-1500:])
    try:
        reference_kernel = get_kernel("torch")
        seg = segments_of((64,) if DRY else (4096,))
        q, k, v, dout = inputs(seg.cu_seqlens_q[-1], seed=2)

        def run_reference():
            out, lse = reference_kernel.forward(q, k, v, seg, causal=True, softmax_scale=SCALE)
            reference_kernel.backward(dout, q, k, v, out, lse, seg, causal=True, softmax_scale=SCALE)

        emit(part="time", kernel="torch", case="doc_4096", fb_ms=timed_ms(run_reference, warmup=1, repeats=3))
    except Exception as error:
        emit(part="time", kernel="torch", error=f"{type(error).__name__}: {error}")
    out_dir = Path(os.environ.get("OUT", "/tmp"))
    (out_dir / "attention_kernels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))


if __name__ == "__main__":
    main()
