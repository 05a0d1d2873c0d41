"""The cost model's vision-encoder term against the real encoder on this host.

The term prices the vision encoder and merger, forward + backward, as `time.vision_ms_per_patch` x
patches (`cost.coefficients`); an analytic preset derives the figure from the encoder shape's FLOPs
per patch, the hardware's peak and its linear and attention efficiencies (`cost.analytic.time_figures`).

This script builds the encoder of the tiny Qwen3-VL example (`examples/qwen3vl/tiny_qwen3vl_fcp_cpu.yaml`,
the encoder `fcp train` runs) in one process, encodes the frame groups of single samples and of packed
batches of several samples from the example's dataset, and times forward + backward (median of
`--repeats` after a warm-up). Each case is compared with
- the `cpu` hardware preset's figure for the YAML's encoder shape (attention window: each sample's
  patches per frame group), and
- the figure of the `cpu-tiny` preset that the example plans with, whose encoder shape is the
  project's tiny one (`cost.presets.MODELS["tiny"]`), not the YAML's.

    python benchmarks/vision_term_validation.py [--repeats 7]
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.analytic import ModelPreset, Setup, time_figures
from mindspeed_mm.core.fcp.cost.presets import HARDWARE, MODELS
from mindspeed_mm.core.fcp.cost.shapes import EncoderShape
from mindspeed_mm.core.fcp.executor.config import load_run_config
from mindspeed_mm.core.fcp.executor.vision.dataset import build_video_dataset
from mindspeed_mm.core.fcp.executor.vision.encoder import FrameBatch, VisionEncoder

logger = logging.getLogger("vision_term_validation")
CONFIG = Path(__file__).resolve().parents[1] / "examples" / "qwen3vl" / "tiny_qwen3vl_fcp_cpu.yaml"
# Samples of the example's dataset encoded alone, then packed together, as a round's group packs them.
CASES = ((0,), (1,), (2,), (3,), (0, 1), (2, 3, 4), (0, 1, 2, 3, 4, 5), tuple(range(12)))


def yaml_encoder_ms_per_patch(vision, out_hidden: int, window: int) -> float:
    """The `cpu` preset's vision figure for the YAML's encoder shape, with `window` patches per attention sequence."""
    shape = EncoderShape(depth=vision.num_layers, hidden=vision.hidden_size, heads=vision.num_attention_heads,
                         mlp=vision.ffn_hidden_size, patch_size=vision.patch_size,
                         spatial_merge=vision.spatial_merge_size, temporal_patch=vision.temporal_patch_size,
                         out_hidden=out_hidden, mergers=1, attention_window=window)
    model = dataclasses.replace(MODELS["tiny"], encoder=shape)
    setup = Setup(tp=1, pp=1, dtype="fp32", recompute="none", sharding="none", shard_ranks=1)
    return time_figures(HARDWARE["cpu"], model, setup).vision_ms_per_patch


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
        from megatron.core import parallel_state

        parallel_state.initialize_model_parallel(1, 1)
        try:
            rows = _measure(args.repeats)
        finally:
            parallel_state.destroy_model_parallel()
            dist.destroy_process_group()
    planned_per_patch = CostModel.from_preset("cpu-tiny").table.time.vision_ms_per_patch
    print(f"`cpu-tiny` preset (the example plans with it): {planned_per_patch:.5f} ms per patch")
    print("| samples | patches | measured, ms | cpu preset, YAML shape, ms | error | cpu-tiny preset, ms | error |")
    print("|---|---|---|---|---|---|---|")
    errors, planned_errors = [], []
    for samples, patches, measured, predicted in rows:
        planned = planned_per_patch * patches
        errors.append(predicted / measured - 1)
        planned_errors.append(planned / measured - 1)
        print(f"| {','.join(map(str, samples))} | {patches} | {measured:.2f} | {predicted:.2f} | "
              f"{100 * errors[-1]:+.0f}% | {planned:.2f} | {100 * planned_errors[-1]:+.0f}% |")
    print(f"mean absolute error: cpu preset for the YAML's shape {100 * statistics.mean(map(abs, errors)):.0f}%, "
          f"cpu-tiny {100 * statistics.mean(map(abs, planned_errors)):.0f}%")
    slope, fixed = statistics.linear_regression([float(r[1]) for r in rows], [r[2] for r in rows])
    print(f"measured, least squares: {fixed:.2f} ms per call + {slope:.5f} ms per patch "
          "(the term has no per-call part)")
    return 0


def _measure(repeats: int) -> list[tuple[tuple[int, ...], int, float, float]]:
    config = load_run_config(CONFIG)
    vision = config.vision
    assert vision is not None, f"{CONFIG} has no vision section"
    dataset = build_video_dataset(config)
    torch.manual_seed(config.training.seed)
    encoder = VisionEncoder(vision, config.model.hidden_size, config.model.init_method_std)
    rows = []
    for samples in CASES:
        groups, layouts, predicted = [], [], 0.0
        for index in samples:
            layout = dataset.layout(index)
            predicted += layout.vision_patches * yaml_encoder_ms_per_patch(
                vision, config.model.hidden_size, layout.patches_per_group)
            for group in range(layout.frame_groups):
                groups.append(dataset.frame_group(index, group))
                layouts.append(layout)
        frames = FrameBatch.from_frame_groups(groups, layouts)
        patches = int(frames.patches.shape[0])
        rows.append((samples, patches, timed_ms(encoder, frames, repeats), predicted))
        logger.info("samples %s: %d patches", samples, patches)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
