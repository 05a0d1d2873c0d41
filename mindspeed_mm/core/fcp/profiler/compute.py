"""Compute measurements of one rank: attention grids, linear work per token, launch cost.

Every rank of the measurement world runs the same sequence at the same time (each timed run
starts after a barrier), so the figures are those of a rank on a fully loaded host, as in a
training round where every rank works.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from mindspeed_mm.core.fcp.cost.table import ModelShape
from mindspeed_mm.core.fcp.parallel import fcp_attention
from mindspeed_mm.core.fcp.parallel.kernels import VarlenSegments, default_kernel_name, get_kernel
from mindspeed_mm.core.fcp.profiler.probe_batch import cu_seqlens_of, shard_inputs
from mindspeed_mm.core.fcp.profiler.decoder import TORCH_DTYPES, Decoder, fcp_core, skip_core
from mindspeed_mm.core.fcp.profiler.timing import Samples, time_repeats

ATTENTION_KINDS = ("causal", "full", "block")
"""Attention grids: causal / full mask over one document, and the off-diagonal block of a causal ring
step (x query rows against x/2 key rows, no mask)."""


@dataclass(frozen=True)
class Repeats:
    """How every measurement is repeated."""

    warmup: int
    """Untimed runs first."""
    repeats: int
    """Timed runs."""
    device: torch.device
    """Device the runs execute on."""
    min_sample_ms: float = 0.0
    """Each sample repeats the operation to last at least this long (see `time_repeats`)."""
    clock: str = "wall"
    """Clock the samples read (see `timing.CLOCKS`)."""

    def time(self, fn: Callable[[], object]) -> Samples:
        """Samples of ``fn`` started together on every rank."""
        return time_repeats(fn, warmup=self.warmup, repeats=self.repeats, device=self.device,
                            min_sample_ms=self.min_sample_ms, clock=self.clock)


def _qkv(shape: ModelShape, q_len: int, kv_len: int, dtype: torch.dtype, device: torch.device,
         generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    def leaf(rows: int, heads: int) -> torch.Tensor:
        return torch.randn(rows, heads, shape.head_dim, generator=generator, dtype=dtype).to(device).requires_grad_()

    return leaf(q_len, shape.heads), leaf(kv_len, shape.kv_heads), leaf(kv_len, shape.kv_heads)


def attention_samples(shape: ModelShape, kind: str, length: int, docs: int, dtype: str, repeats: Repeats,
                      seed: int, *, forward_too: bool = True) -> tuple[Samples, Samples | None]:
    """(forward + backward, forward alone or None) of one layer's attention core, ``docs`` documents of ``length``.

    ``causal`` / ``full`` go through ``fcp_attention`` on a group of one (the code a ring step or
    Ulysses runs locally); ``block`` calls the device's varlen kernel on the off-diagonal block of
    each document. The times are for the whole call.
    """
    torch_dtype = TORCH_DTYPES[dtype]
    generator = torch.Generator().manual_seed(seed)
    if kind == "block":
        kv_len = max(1, math.ceil(length / 2))
        q, k, v = _qkv(shape, docs * length, docs * kv_len, torch_dtype, repeats.device, generator)
        kernel = get_kernel(default_kernel_name(repeats.device))
        segments = VarlenSegments(tuple(range(0, docs * length + 1, length)),
                                  tuple(range(0, docs * kv_len + 1, kv_len)))
        scale = 1.0 / math.sqrt(shape.head_dim)
        dout = torch.randn(q.shape, generator=generator, dtype=torch_dtype).to(repeats.device)

        def forward() -> tuple[torch.Tensor, torch.Tensor]:
            return kernel.forward(q, k, v, segments, causal=False, softmax_scale=scale)

        def forward_backward() -> None:
            out, lse = forward()
            kernel.backward(dout, q, k, v, out, lse, segments, causal=False, softmax_scale=scale)

        return repeats.time(forward_backward), repeats.time(forward) if forward_too else None
    if kind not in ("causal", "full"):
        raise ValueError(f"attention kind must be one of {list(ATTENTION_KINDS)}, got {kind!r}")
    q, k, v = _qkv(shape, docs * length, docs * length, torch_dtype, repeats.device, generator)
    dout = torch.randn(q.shape, generator=generator, dtype=torch_dtype).to(repeats.device)
    causal = kind == "causal"
    cu_seqlens = tuple(range(0, docs * length + 1, length))

    def attend() -> torch.Tensor:
        return fcp_attention(q, k, v, cu_seqlens, group=None, causal=causal)

    def forward_only() -> None:
        with torch.no_grad():
            attend()

    def forward_backward_core() -> None:
        torch.autograd.grad(attend(), (q, k, v), dout)

    return repeats.time(forward_backward_core), repeats.time(forward_only) if forward_too else None


def linear_samples(decoder: Decoder, shape: ModelShape, tokens: int, repeats: Repeats, seed: int) -> Samples:
    """Forward + backward of ``decoder`` (plain or sharded) without attention work over ``tokens`` tokens."""
    inputs = shard_inputs([tokens], shape.vocab, 0, 1, seed=seed, device=repeats.device)

    def forward_backward() -> None:
        decoder(inputs, skip_core).backward()
        decoder.zero_grad(set_to_none=True)

    return repeats.time(forward_backward)


def decoder_samples(decoder: Decoder, shape: ModelShape, tokens: int, repeats: Repeats,
                    seed: int) -> tuple[Samples, Samples]:
    """(forward + backward, forward only) of ``decoder`` without attention work over ``tokens`` tokens."""
    inputs = shard_inputs([tokens], shape.vocab, 0, 1, seed=seed, device=repeats.device)

    def forward_only() -> None:
        with torch.no_grad():
            decoder(inputs, skip_core)

    return linear_samples(decoder, shape, tokens, repeats, seed), repeats.time(forward_only)


def whole_decoder_samples(decoder: Decoder, shape: ModelShape, lengths: Sequence[int], repeats: Repeats,
                          seed: int) -> Samples:
    """Forward + backward of the whole ``decoder`` with local attention over a packed batch of ``lengths``."""
    inputs = shard_inputs(list(lengths), shape.vocab, 0, 1, seed=seed, device=repeats.device)
    core = fcp_core(cu_seqlens_of(lengths), None, "ring", shape.attention_mask == "causal")

    def forward_backward() -> None:
        decoder(inputs, core).backward()
        decoder.zero_grad(set_to_none=True)

    return repeats.time(forward_backward)


def matmul_tflops(dtype: str, repeats: Repeats, size: int = 512) -> float:
    """Achieved dense matmul throughput of one rank (TFLOP/s), informational."""
    torch_dtype = TORCH_DTYPES[dtype]
    a = torch.randn(size, size, dtype=torch_dtype, device=repeats.device)
    b = torch.randn(size, size, dtype=torch_dtype, device=repeats.device)
    samples = repeats.time(lambda: a @ b)
    return 2.0 * size**3 / (samples.summary("median") * 1e-3) / 1e12
