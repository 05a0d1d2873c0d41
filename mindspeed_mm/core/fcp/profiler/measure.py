"""The measurement sequence every rank of the profiling world runs, and what it returns."""
from __future__ import annotations

import dataclasses
import logging
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
from tqdm import tqdm

from mindspeed_mm.core.fcp.parallel import CommGroupPool
from mindspeed_mm.core.fcp.profiler.comm import COMM_KINDS, comm_samples, prewarm_groups
from mindspeed_mm.core.fcp.profiler.compute import (
    ATTENTION_KINDS,
    Repeats,
    attention_samples,
    decoder_samples,
    matmul_tflops,
)
from mindspeed_mm.core.fcp.profiler.config import ProfileConfig
from mindspeed_mm.core.fcp.profiler.decoder import Decoder
from mindspeed_mm.core.fcp.profiler.memory import runtime_bytes, saved_activation_bytes, training_state_bytes

logger = logging.getLogger(__name__)

MEMORY_PROBE_LENGTHS = ((64, 32, 32), (256, 128, 128))
"""Two packed batches (document lengths) whose saved-activation difference gives bytes per token."""


@dataclass(frozen=True)
class RankMeasurements:
    """Summaries (milliseconds, bytes) one rank measured; keys name the grid point."""

    attention_ms: dict[tuple[str, int], float]
    """(kind, document length) -> forward + backward time of one layer's attention core, per document."""
    attention_forward_ms: dict[tuple[str, int], float]
    """(kind, document length) -> forward time alone, per document."""
    decoder_ms: dict[tuple[int, int], float]
    """(layers, tokens) -> forward + backward of a decoder of that many layers without attention work."""
    decoder_forward_ms: dict[tuple[int, int], float]
    """(layers, tokens) -> forward alone."""
    comm_ms: dict[tuple[str, int, int], float]
    """(kind, group size, bytes) -> one exchange, only for group sizes this rank took part in."""
    activation_bytes: dict[int, int]
    """Tokens of a probe batch -> bytes autograd saved for backward."""
    training_state_bytes: int
    """Parameters, gradients and Adam state of the whole decoder."""
    runtime_bytes: int
    """Memory held before any model tensor existed."""
    matmul_tflops: float
    """Achieved dense matmul throughput."""


def probe_layers(layers: int) -> tuple[int, ...]:
    """Decoder depths timed for the linear work: 1 and 2 layers (2 - 1 isolates one layer)."""
    return (1, 2) if layers >= 2 else (1,)


def _steps(config: ProfileConfig) -> int:
    attention = len(ATTENTION_KINDS) * len(config.attention_lengths)
    decoder = len(probe_layers(config.model.layers)) * len(config.linear_tokens)
    comm = len(COMM_KINDS) * (config.world_size - 1) * len(config.message_bytes)
    return attention + decoder + comm + 2


def rank_device(config: ProfileConfig, rank: int) -> torch.device:
    """The device of a rank: the CPU, or the accelerator with the rank's local index."""
    if config.device == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count() if config.device == "cuda" else torch.npu.device_count()  # type: ignore[attr-defined]
    device = torch.device(config.device, rank % count)
    if config.device == "cuda":
        torch.cuda.set_device(device)
    return device


def measure_rank(rank: int, world_size: int, config: ProfileConfig, progress: bool) -> RankMeasurements:
    """Run every measurement of `config` on this rank, in step with the other ranks."""
    device = rank_device(config, rank)
    runtime = runtime_bytes(device)
    repeats = Repeats(config.warmup, config.repeats, device, config.min_sample_ms)
    shape = config.model
    bar = tqdm(total=_steps(config), desc="fcp profile", unit="step", file=sys.stderr,
               disable=not progress or rank != 0)

    attention: dict[tuple[str, int], float] = {}
    attention_forward: dict[tuple[str, int], float] = {}
    for kind in ATTENTION_KINDS:
        for length in config.attention_lengths:
            bar.set_postfix_str(f"attention {kind} {length}")
            docs = config.attention_docs_per_call
            both, forward = attention_samples(shape, kind, length, docs, config.dtype, repeats, config.seed)
            attention[(kind, length)] = both.summary(config.statistic) / docs
            attention_forward[(kind, length)] = forward.summary(config.statistic) / docs
            bar.update()

    decoder_ms: dict[tuple[int, int], float] = {}
    decoder_forward: dict[tuple[int, int], float] = {}
    for layers in probe_layers(shape.layers):
        decoder = Decoder(dataclasses.replace(shape, layers=layers), config.dtype, config.seed).to(device)
        for tokens in config.linear_tokens:
            bar.set_postfix_str(f"linear {layers} layer(s) {tokens} tokens")
            both, forward = decoder_samples(decoder, shape, tokens, repeats, config.seed)
            decoder_ms[(layers, tokens)] = both.summary(config.statistic)
            decoder_forward[(layers, tokens)] = forward.summary(config.statistic)
            bar.update()

    pool = CommGroupPool()
    sizes = tuple(range(2, world_size + 1))
    prewarm_groups(pool, sizes, world_size)
    comm: dict[tuple[str, int, int], float] = {}
    for kind in COMM_KINDS:
        for size in sizes:
            for nbytes in config.message_bytes:
                bar.set_postfix_str(f"{kind} {size} ranks {nbytes} B")
                samples = comm_samples(kind, nbytes, size, pool, repeats)
                if samples is not None:
                    comm[(kind, size, nbytes)] = samples.summary(config.statistic)
                bar.update()

    bar.set_postfix_str("memory")
    full = Decoder(shape, config.dtype, config.seed).to(device)
    activation = {sum(lengths): saved_activation_bytes(full, shape, list(lengths), device, config.seed)
                  for lengths in MEMORY_PROBE_LENGTHS}
    state = training_state_bytes(full, shape, device, config.seed)
    bar.update()
    tflops = matmul_tflops(config.dtype, repeats)
    bar.update()
    bar.close()
    dist.barrier()
    return RankMeasurements(attention_ms=attention, attention_forward_ms=attention_forward, decoder_ms=decoder_ms,
                            decoder_forward_ms=decoder_forward, comm_ms=comm, activation_bytes=activation,
                            training_state_bytes=state, runtime_bytes=runtime, matmul_tflops=tflops)
