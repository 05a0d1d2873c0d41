"""The cost model's vision-encoder term against the real encoder on this host.

The term prices the vision encoder and merger, forward + backward, of one rank in a round as
`time.vision_ms_per_call` + `time.vision_ms_per_patch` x patches (`cost.coefficients`). Two sources of
the figures are checked:
- the `cpu-tiny` preset the example plans with (`cost.analytic.time_figures`: the encoder blocks'
  launch and attention-call costs per call, the encoder FLOPs per patch at the preset's peak and
  efficiencies), and
- what `fcp profile` measures (`profiler.vision`): the line through calls of 1, 2, 4 and 8 synthetic
  frame groups of the preset's attention window, taken here in the same process.

This script builds the encoder of the demo trainer's tiny Qwen3-VL (shipped configuration `tiny_qwen3vl_fcp`,
the encoder `fcp train` runs and the `tiny` preset's shape), encodes the frame groups of single samples
and of packed batches of several samples from the example's dataset (their frames, and windows of 48 or
60 patches), and times forward + backward (median of `--repeats` after a warm-up).

    python benchmarks/vision_term_validation.py [--repeats 7]
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.presets import MODELS
from mindspeed_mm.core.fcp.sandbox.run_config import load_run_config, resolve_config_path
from mindspeed_mm.core.fcp.sandbox.vision.video_dataset import build_video_dataset
from mindspeed_mm.core.fcp.sandbox.vision.encoder import FrameBatch, VisionEncoder
from mindspeed_mm.core.fcp.profiler.compute import Repeats
from mindspeed_mm.core.fcp.profiler.profile_config import DEFAULT_VISION_FRAME_GROUPS
from mindspeed_mm.core.fcp.profiler.vision import model_parallel_state, vision_figures
from mindspeed_mm.core.fcp.sandbox.vision.encoder_probe import EncoderProbe, vision_config

logger = logging.getLogger("vision_term_validation")
CONFIG = resolve_config_path("tiny_qwen3vl_fcp")
# Samples of the example's dataset encoded alone, then packed together, as a round's group packs them.
CASES = ((0,), (1,), (2,), (3,), (0, 1), (2, 3, 4), (0, 1, 2, 3, 4, 5), tuple(range(12)))


def timed_ms(encoder: VisionEncoder, frames: FrameBatch, repeats: int) -> float:
    """Median wall time of forward + backward of `frames` (one untimed warm-up)."""
    times = []
    for attempt in range(repeats + 1):
        encoder.zero_grad(set_to_none=True)
        started = time.perf_counter()
        encoder(frames).square().mean().backward()
        if attempt:
            times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per case (default 7)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)  # as each `fcp train` process runs (OMP_NUM_THREADS=1)
    with tempfile.TemporaryDirectory() as store:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(store, 'store')}", rank=0, world_size=1)
        try:
            with model_parallel_state():
                profiled = _profiled(args.repeats)
                rows = _measure(args.repeats)
        finally:
            dist.destroy_process_group()
    preset = CostModel.from_preset("cpu-tiny").table.time
    sources = {"cpu-tiny preset": (preset.vision_ms_per_call, preset.vision_ms_per_patch), "profiled": profiled}
    for name, (call, patch) in sources.items():
        print(f"{name}: {call:.3f} ms per call + {patch:.5f} ms per patch")
    print("| samples | patches | measured, ms | " + " | ".join(f"{n}, ms | error" for n in sources) + " |")
    print("|---|---|---|" + "---|---|" * len(sources))
    errors: dict[str, list[float]] = {name: [] for name in sources}
    for samples, patches, measured in rows:
        cells = []
        for name, (call, patch) in sources.items():
            predicted = call + patch * patches
            errors[name].append(predicted / measured - 1)
            cells.append(f"{predicted:.2f} | {100 * errors[name][-1]:+.0f}%")
        print(f"| {','.join(map(str, samples))} | {patches} | {measured:.2f} | " + " | ".join(cells) + " |")
    print("mean absolute error: " + ", ".join(f"{name} {100 * statistics.mean(map(abs, e)):.0f}%"
                                               for name, e in errors.items()))
    slope, fixed = statistics.linear_regression([float(r[1]) for r in rows], [r[2] for r in rows])
    print(f"measured, least squares: {fixed:.2f} ms per call + {slope:.5f} ms per patch")
    return 0


def _profiled(repeats: int) -> tuple[float, float]:
    """(ms per call, ms per patch) as `fcp profile` measures them, on this process."""
    probe = EncoderProbe(MODELS["tiny"].encoder, "fp32", torch.device("cpu"), seed=0)
    timing = Repeats(warmup=1, repeats=repeats, device=torch.device("cpu"), min_sample_ms=25.0, clock="cpu")
    calls = {groups: statistics.median(probe.samples(groups, timing).times_ms) for groups in DEFAULT_VISION_FRAME_GROUPS}
    figures = vision_figures(probe.shape, DEFAULT_VISION_FRAME_GROUPS, calls, 0.0)
    return figures.ms_per_call, figures.ms_per_patch


def _measure(repeats: int) -> list[tuple[tuple[int, ...], int, float]]:
    config = load_run_config(CONFIG)
    vision = config.vision
    assert vision is not None, f"{CONFIG} has no vision section"
    shape = MODELS["tiny"].encoder
    if vision_config(shape) != vision or shape.out_hidden != config.model.hidden_size:
        raise SystemExit(f"the tiny preset's encoder {shape} is not the one of {CONFIG}")
    dataset = build_video_dataset(config)
    torch.manual_seed(config.training.seed)
    encoder = VisionEncoder(vision, config.model.hidden_size, config.model.init_method_std)
    rows = []
    for samples in CASES:
        groups, layouts = [], []
        for index in samples:
            layout = dataset.layout(index)
            for group in range(layout.frame_groups):
                groups.append(dataset.frame_group(index, group))
                layouts.append(layout)
        frames = FrameBatch.from_frame_groups(groups, layouts)
        patches = int(frames.patches.shape[0])
        rows.append((samples, patches, timed_ms(encoder, frames, repeats)))
        logger.info("samples %s: %d patches", samples, patches)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
