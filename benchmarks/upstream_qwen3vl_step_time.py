"""The loop closed on the CPU bed: the bed's own model profiled, FCP planned from that table, every step measured.

On the upstream test bed (the real `pretrain_transformers.py` on the tiny Qwen3-VL, gloo processes on this host):

1. `fcp profile --recipe` of the bed's recipe (its model folder's Qwen3-VL shape, Hugging Face's layers:
   `--layers hf`) on as many processes as the runs use, in the bed's thread setting (one thread a process), on
   the wall clock the runs' step times are read on;
2. per workload (images, short videos, long videos: `tests/upstream/tiny_qwen3vl.py`), the same samples and
   loaded weights trained by FCP planned from that table and by every static layout that holds the longest
   sample under the same per-rank token cap (`seq_length`, which truncates every sample): DP (CP 1), Ulysses CP
   2 and 4, ring CP 2 (MindSpeed's `megatron_cp_algo`); optionally FCP on the `cpu-tiny` preset (`--with-preset`);
3. every layout `--repeats` times, interleaved (one launch of each layout, then the next round), each launch's
   median step time (steps 2..end; step 1 holds one-off set-up), then per layout the median over the launches
   and their spread (lowest and highest);
4. FCP's predicted step (the plan's rounds and the step's own costs, as its log reports them) against its
   measured step; the
   recalibration's per-(degree, algo) factors at the end of the run; how many rounds spread their media over all
   their ranks.

On a CPU host the processes share the cores: the figures compare layouts on this host only, and are disturbed
by anything else it runs (the load average is printed with them).

    python benchmarks/upstream_qwen3vl_step_time.py --nproc 4 --steps 6 --repeats 3 --out FILE.md
    python benchmarks/upstream_qwen3vl_step_time.py --quick            # a check that it works: small profile,
                                                                       # 1 launch of each layout, 3 steps
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "upstream"))

from harness import UpstreamBed  # noqa: E402
from mindspeed_mm.core.fcp.cost.model_error import model_error  # noqa: E402
from mindspeed_mm.core.fcp.cost.table import ProfileTable  # noqa: E402
from mindspeed_mm.core.fcp.cost.term_validation import lines as term_lines, table_held_out  # noqa: E402
from recipe import write_recipe  # noqa: E402
from runner import LaunchError, RunLog  # noqa: E402

logger = logging.getLogger("upstream_qwen3vl_step_time")
WORKLOADS = ("images", "short_videos", "long_videos")
TRAINING = {"lr": 1e-3, "min_lr": 1e-3, "lr_warmup_fraction": None, "lr_warmup_iters": 0}
LONG_VIDEO_DATA = {"video_max_pixels": 16384, "video_min_pixels": 0, "video_fps": 2.0, "video_maxlen": 64}
SEQ_LENGTH = 1024
STATIC_LAYOUTS = {"dp": (1, "ulysses_cp_algo"), "ulysses_cp2": (2, "ulysses_cp_algo"),
                  "ulysses_cp4": (4, "ulysses_cp_algo"), "ring_cp2": (2, "megatron_cp_algo")}
"""name -> (CP degree, MindSpeed's CP algo) of the static layouts."""
PROFILE_GRID = ["--attention-lengths", "16,32,64,128,256,512,1024", "--linear-tokens", "64,128,256,512,1024",
                "--vision-frame-groups", "1,4,16,48", "--message-bytes", "1024,16384,262144,1048576"]
QUICK_PROFILE_GRID = ["--attention-lengths", "16,64,256,1024", "--linear-tokens", "64,256,1024",
                      "--vision-frame-groups", "1,8,48", "--message-bytes", "1024,65536,1048576",
                      "--sweeps", "1", "--repeats", "2"]
PLAN_LINE = re.compile(r"FCP plan of step (\d+): (\d+) rounds, degrees (\[.*?\]), predicted [\d.]+ ms .*?"
                       r"predicted step with its own costs ([\d.]+) ms")
CALIBRATION_LINE = re.compile(r"calibration iteration (\d+) \|.*?factors: (.*?) \(other keys ([\d.]+)\)")
SPREAD_LINE = re.compile(r"the round's \d+ media of \d+ patches encoded over its \d+ ranks")


@dataclass
class Layout:
    """One layout's launches on one workload."""

    name: str
    step_ms: list[float] = field(default_factory=list)
    """Median step time (steps 2..end) of each launch."""
    predicted_ms: list[float] = field(default_factory=list)
    """FCP: median predicted step (steps 2..end) of each launch."""
    losses: list[float] = field(default_factory=list)
    """The first launch's losses."""
    factors: str = ""
    """FCP: the recalibration's factors at the end of the last launch."""
    spread_rounds: int = 0
    """FCP: rounds whose media were encoded over all their ranks, over all launches."""
    rounds: int = 0
    """FCP: rounds planned, over all launches and steps."""
    error: str = ""
    """Why a launch failed (the layout's row then says so)."""

    @property
    def median_ms(self) -> float:
        return statistics.median(self.step_ms) if self.step_ms else float("nan")


def profile_table(bed: UpstreamBed, nproc: int, out: Path, quick: bool) -> Path:
    """`fcp profile --recipe` of the bed's recipe on `nproc` processes (this interpreter's FCP)."""
    recipe = write_recipe(bed.recipe(), out.parent / "profiled_recipe.yaml")
    # The wall clock, as the runs' step times are read: their processes share the host's cores.
    command = [sys.executable, "-m", "mindspeed_mm.core.fcp.cli", "profile", "--recipe", str(recipe), "--layers", "hf",
               "--world-size", str(nproc), "--device", "cpu", "--clock", "wall", "-o", str(out), "--no-progress",
               *(QUICK_PROFILE_GRID if quick else PROFILE_GRID)]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"fcp profile failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    logger.info("profiled the bed's model in %.0f s:\n%s", time.monotonic() - started, done.stdout)
    return out


def recipes(bed: UpstreamBed, workload: str, steps: int, global_batch: int, cap: int, table: Path, nproc: int,
            with_preset: bool) -> dict[str, tuple[dict, bool]]:
    """name -> (recipe, FCP registered) of every layout of one workload."""
    def recipe(**keywords) -> dict:
        extra = dict(TRAINING, seq_length=SEQ_LENGTH, **keywords.pop("extra", {}))
        built = bed.recipe(train_iters=steps, global_batch_size=global_batch, extra_gpt=extra, **keywords)
        if workload == "long_videos":
            built["data"]["dataset_param"]["preprocess_parameters"].update(LONG_VIDEO_DATA)
        return built

    def fcp(source: dict) -> dict:
        built = recipe(cp_algo="fcp_cp_algo", extra=dict(source, fcp_max_tokens_per_rank=cap, fcp_max_degree=nproc,
                                                         fcp_log_plan=True))
        built["data"]["dataloader_param"]["sampler_type"] = "FCPBatchSampler"
        return built

    out = {"fcp_measured_table": (fcp({"fcp_profile_table": str(table)}), True)}
    if with_preset:
        out["fcp_cpu_tiny_preset"] = (fcp({"fcp_preset": "cpu-tiny"}), True)
    for name, (cp, algo) in STATIC_LAYOUTS.items():
        if nproc % cp == 0:
            out[name] = (recipe(cp=cp, cp_algo=algo), False)
    return out


def not_runnable(bed: UpstreamBed, name: str) -> str:
    """Why upstream cannot run a static layout on the bed's model ('' when it can)."""
    cp, algo = STATIC_LAYOUTS[name]
    heads = {"vision tower": bed.summary["vit_heads"], "text model": bed.summary["llm_heads"]}
    if algo == "ulysses_cp_algo":
        short = [f"the {part}'s {count} heads" for part, count in heads.items() if count % cp]
        if short:
            return f"{' and '.join(short)} do not split over {cp} ranks (Ulysses splits every attention's heads)"
    return ""


def failure(error: LaunchError) -> str:
    """The first line of a launch's failure, and the exception its log ends with."""
    text = str(error)
    raised = [line.split("]: ", 1)[-1] for line in text.splitlines() if re.search(r"\b\w+Error: ", line)
              and "ChildFailedError" not in line and "Connection closed" not in line]
    return text.splitlines()[0].split(";")[0] + (f": {raised[-1][:220]}" if raised else "")


def record(layout: Layout, log: RunLog) -> None:
    """One launch's step time (and, for FCP, its predictions, factors and spread rounds)."""
    layout.step_ms.append(statistics.median(log.step_times_ms[1:]))
    if not layout.losses:
        layout.losses = log.losses
    plans: dict[int, float] = {}
    rounds: dict[int, int] = {}
    for match in PLAN_LINE.finditer(log.text):
        step = int(match.group(1))
        rounds.setdefault(step, int(match.group(2)))
        if step >= 2:
            plans.setdefault(step, float(match.group(4)))
    if plans:
        layout.predicted_ms.append(statistics.median(plans.values()))
        layout.rounds += sum(rounds.values())
        calibrations = CALIBRATION_LINE.findall(log.text)
        if calibrations:
            _, factors, default = calibrations[-1]
            layout.factors = f"{factors} (other keys {default})"
        # The first rank of a round logs it when it spreads its media (every step, the first included).
        layout.spread_rounds += len(SPREAD_LINE.findall(log.text))


def run_workload(bed: UpstreamBed, workload: str, args: argparse.Namespace, table: Path) -> dict[str, Layout]:
    launches = recipes(bed, workload, args.steps, args.global_batch_size, args.max_tokens_per_rank, table, args.nproc,
                       args.with_preset)
    layouts = {name: Layout(name) for name in launches}
    for name, layout in layouts.items():
        if name in STATIC_LAYOUTS:
            layout.error = not_runnable(bed, name) and f"not runnable upstream: {not_runnable(bed, name)}"
    for repeat in range(args.repeats):
        for name, (recipe, register) in launches.items():
            if layouts[name].error:
                continue
            try:
                log = bed.run(recipe, args.nproc, name=f"{workload}_{name}_{repeat}", register_fcp=register,
                              timeout_s=args.timeout_s)
            except LaunchError as failed:
                layouts[name].error = failure(failed)
                logger.warning("%s %s: %s", workload, name, layouts[name].error)
                continue
            record(layouts[name], log)
            logger.info("%s %s launch %d: %.1f ms per step (load %s)", workload, name, repeat + 1,
                        layouts[name].step_ms[-1], _load())
    return layouts


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def table_lines(workload: str, layouts: dict[str, Layout]) -> list[str]:
    statics = [layout for name, layout in layouts.items() if name in STATIC_LAYOUTS and layout.step_ms]
    best = min(statics, key=lambda layout: layout.median_ms) if statics else None
    lines = [f"### {workload.replace('_', ' ')}", "",
             "| layout | launches | median step (ms) | spread (lowest-highest) | / best static | FCP predicted (ms) | "
             "predicted / measured | rounds spread over all ranks | recalibration factors (degree x algo) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, layout in layouts.items():
        if layout.error:
            lines.append(f"| {name} | failed | {layout.error} | | | | | | |")
            continue
        ratio = f"{layout.median_ms / best.median_ms:.3f}" if best else "-"
        predicted = statistics.median(layout.predicted_ms) if layout.predicted_ms else None
        lines.append(
            f"| {name} | {len(layout.step_ms)} | {layout.median_ms:.1f} | {min(layout.step_ms):.1f}-"
            f"{max(layout.step_ms):.1f} | {ratio} | {'' if predicted is None else f'{predicted:.1f}'} | "
            f"{'' if predicted is None else f'{predicted / layout.median_ms:.2f}'} | "
            f"{f'{layout.spread_rounds} of {layout.rounds}' if layout.rounds else ''} | {layout.factors} |")
    if best is not None:
        for name, layout in layouts.items():
            if name.startswith("fcp") and layout.step_ms:
                beyond = max(layout.step_ms) < min(best.step_ms)
                behind = min(layout.step_ms) > max(best.step_ms)
                verdict = ("faster than the best static layout beyond the spread" if beyond else
                           "slower than the best static layout beyond the spread" if behind else
                           "within the spread of the best static layout")
                lines.append(f"\n{name}: {verdict} ({best.name}).")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved launches of every layout")
    parser.add_argument("--global-batch-size", type=int, default=8)
    parser.add_argument("--max-tokens-per-rank", type=int, default=SEQ_LENGTH,
                        help=f"FCP's per-rank token cap (default {SEQ_LENGTH}, the seq_length every layout truncates to)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--table", type=Path, help="a profile table of the bed's model (default: profile it now)")
    parser.add_argument("--with-preset", action="store_true", help="also FCP on the cpu-tiny preset")
    parser.add_argument("--quick", action="store_true", help="small profile, 1 launch of each layout, 3 steps")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="limit of one launch")
    parser.add_argument("--out", type=Path, help="markdown file for the tables (default: print only)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.steps = 1, 3
    workloads = args.workloads.split(",")
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        parser.error(f"--workloads: unknown {unknown}; valid: {', '.join(WORKLOADS)}")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    started, load_before = time.monotonic(), _load()
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fcp_upstream_bench_") as root:
        beds = {w: UpstreamBed.create(Path(root) / w, workload=w) for w in workloads}
        first = beds[workloads[0]]
        for bed in beds.values():   # one assembled checkout for all (the code is the same)
            bed._checkouts = first._checkouts
        table = args.table or profile_table(first, args.nproc, Path(root) / "bed_table.json", args.quick)
        if args.out is not None and args.table is None:
            (args.out.parent / (args.out.stem + "_table.json")).write_text(table.read_text())
        measured = ProfileTable.load(table)
        lines += [f"The bed's profile table: {model_error(measured).describe()}.", "",
                  *term_lines(table_held_out(measured), "points"), ""]
        for workload in workloads:
            lines += table_lines(workload, run_workload(beds[workload], workload, args, table)) + [""]
    lines.append(f"`python benchmarks/upstream_qwen3vl_step_time.py {' '.join(argv if argv is not None else sys.argv[1:])}`"
                 f": {args.nproc} gloo processes, global batch {args.global_batch_size}, {args.steps} steps a launch, "
                 f"{args.repeats} interleaved launch(es) of every layout, {time.monotonic() - started:.0f} s; load "
                 f"average {load_before} before, {_load()} after.")
    text = "\n".join(lines)
    logger.info("%s", text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
