"""Per-rank time and sent bytes of ring and Ulysses attention against single-process attention.

Runs one packed varlen batch forward + backward three ways on this machine's CPU:
single process (the whole batch on one rank), and ring / Ulysses on a gloo group of `--degree`
processes (each rank holding its zigzag shard). Every process uses one intra-op thread, so the
per-rank figures compare the work one rank does. Usage:

    python benchmarks/attention_bench.py [--lengths 2048,1024,700,300,23] [--degree 2]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mindspeed_mm.core.fcp.parallel import CommStats, fcp_attention, zigzag_shard


@dataclass(frozen=True)
class BenchConfig:
    """Shape of the benchmarked batch and how often to time it."""

    lengths: tuple[int, ...]
    """Document lengths of the packed batch."""
    heads: int
    """Query heads."""
    kv_heads: int
    """Key/value heads."""
    head_dim: int
    """Channels per head."""
    degree: int
    """Ranks of the CP group."""
    causal: bool
    """Causal mask inside each document."""
    repeats: int
    """Timed forward + backward passes (after one warm-up)."""

    @property
    def cu_seqlens(self) -> list[int]:
        """Document boundaries of the packed batch."""
        bounds = [0]
        for length in self.lengths:
            bounds.append(bounds[-1] + length)
        return bounds


@dataclass(frozen=True)
class Timing:
    """Median times of one rank and the bytes it sent in one pass."""

    forward_ms: float
    """Median forward time."""
    backward_ms: float
    """Median backward time."""
    forward_bytes: int
    """Bytes sent by one forward pass."""
    backward_bytes: int
    """Bytes sent by one backward pass."""


def _inputs(config: BenchConfig) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    total = config.cu_seqlens[-1]
    return [
        torch.randn(total, heads, config.head_dim, generator=generator)
        for heads in (config.heads, config.kv_heads, config.kv_heads)
    ]


def _time_passes(config: BenchConfig, run: Callable[[list[torch.Tensor], CommStats], torch.Tensor],
                 tensors: list[torch.Tensor], barrier: Callable[[], None]) -> Timing:
    forward, backward = [], []
    stats = CommStats()
    for _ in range(config.repeats + 1):
        leaves = [x.detach().requires_grad_() for x in tensors]
        barrier()
        started = time.perf_counter()
        out = run(leaves, stats)
        middle = time.perf_counter()
        out.backward(torch.ones_like(out))
        ended = time.perf_counter()
        forward.append((middle - started) * 1e3)
        backward.append((ended - middle) * 1e3)
    passes = config.repeats + 1
    return Timing(
        statistics.median(forward[1:]), statistics.median(backward[1:]),
        stats.forward_bytes_sent // passes, stats.backward_bytes_sent // passes,
    )


def _single_process(config: BenchConfig) -> Timing:
    torch.set_num_threads(1)
    cu = config.cu_seqlens

    def run(leaves: list[torch.Tensor], stats: CommStats) -> torch.Tensor:
        return fcp_attention(*leaves, cu, group=None, causal=config.causal, comm_stats=stats)

    return _time_passes(config, run, _inputs(config), barrier=lambda: None)


def _rank_main(rank: int, config: BenchConfig, init_file: str, results: mp.SimpleQueue) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=config.degree, timeout=timedelta(minutes=5)
    )
    group = dist.new_group(list(range(config.degree)))
    cu = config.cu_seqlens
    shards = [zigzag_shard(x, cu, rank, config.degree) for x in _inputs(config)]
    for algo in ("ring", "ulysses"):
        if algo == "ulysses" and config.heads % config.degree:
            continue

        def run(leaves: list[torch.Tensor], stats: CommStats, algo: str = algo) -> torch.Tensor:
            return fcp_attention(*leaves, cu, group=group, algo=algo, causal=config.causal, comm_stats=stats)

        results.put((algo, rank, _time_passes(config, run, shards, barrier=lambda: dist.barrier(group))))
    dist.destroy_process_group()


def _distributed(config: BenchConfig) -> dict[str, list[Timing]]:
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    with tempfile.TemporaryDirectory(prefix="fcp_bench_") as workdir:
        mp.spawn(_rank_main, args=(config, str(Path(workdir) / "store"), results), nprocs=config.degree)
    timings: dict[str, list[Timing | None]] = {}
    while not results.empty():
        algo, rank, timing = results.get()
        timings.setdefault(algo, [None] * config.degree)[rank] = timing
    return timings


def _table(config: BenchConfig, single: Timing, timings: dict[str, list[Timing]]) -> str:
    single_ms = single.forward_ms + single.backward_ms
    rows = [
        f"batch: {len(config.lengths)} docs, {config.cu_seqlens[-1]} tokens {list(config.lengths)}; "
        f"heads {config.heads}/{config.kv_heads}, head_dim {config.head_dim}, float32, "
        f"{'causal' if config.causal else 'full'}; 1 thread per process",
        f"{'run':<14}{'rank':>5}{'fwd ms':>10}{'bwd ms':>10}{'total ms':>10}{'vs single':>11}"
        f"{'fwd KiB sent':>14}{'bwd KiB sent':>14}",
        f"{'single':<14}{'-':>5}{single.forward_ms:>10.1f}{single.backward_ms:>10.1f}{single_ms:>10.1f}{1.0:>10.2f}x"
        f"{0:>14.1f}{0:>14.1f}",
    ]
    for algo, per_rank in timings.items():
        for rank, timing in enumerate(per_rank):
            total = timing.forward_ms + timing.backward_ms
            rows.append(
                f"{algo + ' d=' + str(config.degree):<14}{rank:>5}{timing.forward_ms:>10.1f}{timing.backward_ms:>10.1f}"
                f"{total:>10.1f}{single_ms / total:>10.2f}x{timing.forward_bytes / 1024:>14.1f}"
                f"{timing.backward_bytes / 1024:>14.1f}"
            )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="2048,1024,700,300,23", help="comma-separated document lengths")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--degree", type=int, default=2)
    parser.add_argument("--full", action="store_true", help="full (non-causal) attention inside documents")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = BenchConfig(
        lengths=tuple(int(x) for x in args.lengths.split(",")), heads=args.heads, kv_heads=args.kv_heads,
        head_dim=args.head_dim, degree=args.degree, causal=not args.full, repeats=args.repeats,
    )
    print(_table(config, _single_process(config), _distributed(config)))


if __name__ == "__main__":
    main()
