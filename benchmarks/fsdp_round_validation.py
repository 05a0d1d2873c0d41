"""The cost model's FSDP round term against torch's FSDP2 on this host.

Under FSDP (the lockstep semantics, `solver.step_time`) a round whose slowest group's pass lasts p
lasts `StepFigures.lockstep_round_ms(p)` = max(p, t) + (1 - w) min(p, t), with t = `fsdp_round_ms`
(the round's parameter all-gathers and gradient reduce-scatter) and w = `fsdp_overlap`. This script
runs the profiler's tiny decoder with attention on N gloo processes twice, plainly and with FSDP2
(`fully_shard` on every layer and the root, parameters resharded after the forward pass, as
`fcp profile` shards it), and times forward + backward of one round of one document at several
token counts (wall clock, every rank started together, the round ending with its slowest rank;
median of `--repeats`). The measured FSDP2 round is compared with the term at the measured plain
pass, for the step figures of
- the `cpu` hardware preset for the same shape and ranks (`cost.analytic.step_figures`: bytes over
  bandwidth, overlap 1), and
- tables `fcp profile` measures on the same N processes (its fit of FSDP2 rounds of the decoder
  without attention work against the unsharded passes, `profiler.fsdp`), on the process-CPU clock it
  reads on the CPU by default and on the wall clock.

    python benchmarks/fsdp_round_validation.py [--nproc 4] [--tokens 64,256,1024,2048] [--repeats 7]
"""
from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.cost.analytic import Setup, step_figures
from mindspeed_mm.core.fcp.cost.presets import HARDWARE, MODELS
from mindspeed_mm.core.fcp.cost.table import ProfileTable, StepFigures
from mindspeed_mm.core.fcp.profiler.probe_batch import cu_seqlens_of, shard_inputs
from mindspeed_mm.core.fcp.profiler.profile_config import model_shape
from mindspeed_mm.core.fcp.profiler.decoder import Decoder, fcp_core
from mindspeed_mm.core.fcp.profiler.fsdp import sharded_decoder
from mindspeed_mm.core.fcp.profiler.world import run_world

logger = logging.getLogger("fsdp_round_validation")
MODEL = "tiny"


def _round_ms(model: Decoder, tokens: int, rank: int, repeats: int) -> float:
    """Median over repeats of the slowest rank's forward + backward of `tokens` tokens (one document)."""
    shape = model_shape(MODEL)
    inputs = shard_inputs([tokens], shape.vocab, 0, 1, seed=rank)
    core = fcp_core(cu_seqlens_of([tokens]), None, "ring", True)
    times = []
    for attempt in range(repeats + 2):
        dist.barrier()
        started = time.perf_counter()
        model(inputs, core).backward()
        elapsed = torch.tensor([(time.perf_counter() - started) * 1e3])
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if attempt >= 2:
            times.append(float(elapsed))
    model.zero_grad(set_to_none=True)
    return statistics.median(times)


def _measure_rank(rank: int, world_size: int, tokens: tuple[int, ...], repeats: int) -> dict[str, list[float]]:
    torch.set_num_threads(1)   # as each `fcp train` process runs
    plain = Decoder(model_shape(MODEL), "fp32", seed=0)
    sharded = sharded_decoder(model_shape(MODEL), "fp32", 0, torch.device("cpu"))   # as `fcp profile` shards it
    out: dict[str, list[float]] = {"plain": [], "fsdp": []}
    for count in tokens:
        out["plain"].append(_round_ms(plain, count, rank, repeats))
        out["fsdp"].append(_round_ms(sharded, count, rank, repeats))
    return out


def preset_step(nproc: int) -> StepFigures:
    setup = Setup(tp=1, pp=1, dtype="fp32", recompute="none", sharding="fsdp", shard_ranks=nproc)
    return step_figures(HARDWARE["cpu"], MODELS[MODEL], setup)


def profiled_step(nproc: int, folder: Path, clock: str) -> StepFigures:
    """The step figures of a table `fcp profile` measures on `nproc` processes (a small grid) on `clock`."""
    table_path = folder / "profile.json"
    command = [sys.executable, "-m", "mindspeed_mm.core.fcp.cli", "profile", "-o", str(table_path),
               "--world-size", str(nproc), "--attention-lengths", "16,32,64", "--linear-tokens", "64,256",
               "--message-bytes", "1024,65536", "--sweeps", "2", "--no-vision", "--no-progress", "--clock", clock]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    step = ProfileTable.load(table_path).step
    assert step is not None, f"{table_path} has no step section"
    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=4, help="processes (default 4)")
    parser.add_argument("--tokens", default="64,256,1024,2048",
                        help="tokens per rank and round (default 64,256,1024,2048)")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds per case (default 7)")
    parser.add_argument("--profile-clocks", default="cpu,wall",
                        help="clocks of the profiled tables compared (default cpu,wall; `fcp profile` reads cpu on "
                        "the CPU by default)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    tokens = tuple(int(t) for t in args.tokens.split(","))
    measured = run_world(_measure_rank, args.nproc, tokens, args.repeats)[0]
    with tempfile.TemporaryDirectory() as folder:
        sources = {"cpu preset": preset_step(args.nproc),
                   **{f"profiled, {clock} clock": profiled_step(args.nproc, Path(folder), clock)
                      for clock in args.profile_clocks.split(",")}}
    print(f"{MODEL} decoder on {args.nproc} gloo processes; "
          + ", ".join(f"{name}: fsdp_round_ms {s.fsdp_round_ms:.3f}, fsdp_overlap {s.fsdp_overlap:.2f}"
                      for name, s in sources.items()))
    print("| tokens per rank | plain pass, ms | FSDP2 round, ms | FSDP2 - plain, ms | "
          + " | ".join(f"{name}, ms | error" for name in sources) + " |")
    print("|---|---|---|---|" + "---|---|" * len(sources))
    errors: dict[str, list[float]] = {name: [] for name in sources}
    for count, plain, fsdp in zip(tokens, measured["plain"], measured["fsdp"]):
        cells = []
        for name, step in sources.items():
            predicted = step.lockstep_round_ms(plain)
            errors[name].append(predicted / fsdp - 1)
            cells.append(f"{predicted:.2f} | {100 * errors[name][-1]:+.0f}%")
        print(f"| {count} | {plain:.2f} | {fsdp:.2f} | {fsdp - plain:.2f} | " + " | ".join(cells) + " |")
    print("mean absolute error: " + ", ".join(f"{name} {100 * statistics.mean(map(abs, e)):.0f}%"
                                               for name, e in errors.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
