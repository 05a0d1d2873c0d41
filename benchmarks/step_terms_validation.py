"""The cost model's step terms against a real run on this host: gradient reduction and optimizer step.

`fcp train` runs the tiny decoder on N gloo processes (`torchrun`); every rank all-reduces its
gradients in one flat buffer and runs torch's Adam on all parameters, the replica semantics of a
table built with `sharding: none`. Its per-step `grad_sync_ms` and `optimizer_ms` (median over
steps 2..end, mean over ranks) are compared with the `replica_reduction_ms` and `optimizer_ms` of
- the `cpu` hardware preset for the same model shape and ranks (`cost.analytic.step_figures`), and
- a table `fcp profile` measures on the same N processes (a small grid; its step section times the
  same all-reduce and Adam on the profiled decoder, `profiler.step_costs`).

The preset counts bytes over bandwidth only; for a model this small, per-message latency and per-
tensor kernel launches dominate, so its error says how much those leave out at small sizes, not how
far off the figures are for a model whose layers move hundreds of MB.

    python benchmarks/step_terms_validation.py --nproc 4 --output-dir out/step_terms
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
from pathlib import Path

from mindspeed_mm.core.fcp.cost.analytic import ModelPreset, Setup, params_per_rank, step_figures
from mindspeed_mm.core.fcp.cost.presets import HARDWARE
from mindspeed_mm.core.fcp.cost.shapes import DecoderShape
from mindspeed_mm.core.fcp.cost.table import ProfileTable
import torch

from mindspeed_mm.core.fcp.sandbox.run_config import load_run_config
from mindspeed_mm.core.fcp.sandbox.run_outputs import FINAL_STATE_FILE

logger = logging.getLogger("step_terms_validation")
CONFIG = Path(__file__).resolve().parents[1] / "mindspeed_mm" / "core" / "fcp" / "configs" / "tiny_qwen3_fcp.yaml"


def measured_timings(nproc: int, output_dir: Path) -> dict[str, float]:
    """Median over steps 2..end of the per-step timings of one `fcp train` run: the gradient reduction
    as the last rank to reach it measured it (`grad_sync_ms`: the reduction itself) and as the mean
    over ranks (`grad_sync_mean_ms`: with each rank's wait for the slowest), the optimizer step as
    the mean over ranks."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "-m",
               "mindspeed_mm.core.fcp.cli", "train", str(CONFIG), "--cpu", "--output-dir", str(output_dir)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    steps = json.loads((output_dir / "result.json").read_text())["steps"][1:]
    return {
        "grad_sync_ms": statistics.median(min(s["grad_sync_ms_per_rank"]) for s in steps),
        "grad_sync_mean_ms": statistics.median(s["timings_ms"]["grad_sync_ms"] for s in steps),
        "optimizer_ms": statistics.median(s["timings_ms"]["optimizer_ms"] for s in steps),
    }


def profiled_terms(nproc: int, output_dir: Path) -> dict[str, float]:
    """The step figures of a table measured by `fcp profile` on `nproc` processes (a small grid)."""
    table_path = output_dir / "profile.json"
    command = [sys.executable, "-m", "mindspeed_mm.core.fcp.cli", "profile", "-o", str(table_path),
               "--world-size", str(nproc), "--attention-lengths", "16,32,64", "--linear-tokens", "64,256",
               "--message-bytes", "1024,65536", "--sweeps", "2", "--no-progress"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    step = ProfileTable.load(table_path).step
    return {"grad_sync_ms": step.replica_reduction_ms, "optimizer_ms": step.optimizer_ms}


def trained_parameters(output_dir: Path) -> int:
    """Parameters of the trained model (its saved final state)."""
    state = torch.load(output_dir / FINAL_STATE_FILE, map_location="cpu", weights_only=True)
    return sum(t.numel() for t in state.values())


def predicted(nproc: int) -> tuple[dict[str, float], float]:
    """The preset's figures for the run's model shape: (terms, parameters the shape counts)."""
    config = load_run_config(CONFIG)
    m = config.model
    decoder = DecoderShape(layers=m.num_layers, hidden=m.hidden_size, heads=m.num_attention_heads,
                           kv_heads=m.num_query_groups, head_dim=m.head_dim, ffn=m.ffn_hidden_size,
                           vocab=m.vocab_size, tied_embeddings=False, qkv_bias=False, qk_norm=True)
    model = ModelPreset(decoder=decoder, encoder=None, recompute="none", sources="the run's YAML")
    setup = Setup(tp=1, pp=1, dtype="fp32", recompute="none", sharding="none", shard_ranks=nproc)
    figures = step_figures(HARDWARE["cpu"], model, setup)
    terms = {"grad_sync_ms": figures.replica_reduction_ms, "optimizer_ms": figures.optimizer_ms}
    return terms, params_per_rank(model, setup)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=4, help="training processes (default 4)")
    parser.add_argument("--output-dir", type=Path, default=Path("out/step_terms"), help="the run's outputs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    terms, modelled = predicted(args.nproc)
    measured = measured_timings(args.nproc, args.output_dir)
    real = trained_parameters(args.output_dir)
    profiled = profiled_terms(args.nproc, args.output_dir)
    print(f"tiny decoder: {real} parameters ({modelled:.0f} counted by the preset's shape), {args.nproc} gloo "
          "processes")
    print(f"gradient all-reduce, mean over ranks (with each rank's wait for the slowest): "
          f"{measured['grad_sync_mean_ms']:.3f} ms")
    print("| term | measured in training, ms | preset, ms | error | profiled table, ms | error |")
    print("|---|---|---|---|---|---|")
    for key, label in (("grad_sync_ms", "gradient reduction (all-reduce, last rank to arrive)"),
                       ("optimizer_ms", "optimizer step (Adam, mean over ranks)")):
        print(f"| {label} | {measured[key]:.3f} | {terms[key]:.3f} | {100 * (terms[key] / measured[key] - 1):+.0f}% "
              f"| {profiled[key]:.3f} | {100 * (profiled[key] / measured[key] - 1):+.0f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
