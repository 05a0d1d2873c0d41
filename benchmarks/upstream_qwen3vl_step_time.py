"""Per-step time of upstream MindSpeed-MM's Qwen3-VL with FCP against the static layouts a user would pick.

On the upstream test bed (the real `pretrain_transformers.py` on the tiny Qwen3-VL, gloo processes on this
host), one run of each layout over the same samples and loaded weights:

- FCP (`fcp_cp_algo`, `FCPBatchSampler`) on N processes, once with `--fcp-max-tokens-per-rank` forcing groups of
  2-4 ranks (as the system test does) and once with the preset's own memory limit (the planner's free choice);
- CP = 1, DP = N (upstream's `BaseRandomBatchSampler`, one sample per micro-batch);
- static `ulysses_cp_algo`, CP = 2, DP = N / 2.

It reports the median step time (steps 2..end; step 1 holds one-off set-up) and each layout's losses. On a
CPU host the processes share the cores, so the figures compare layouts on this host only; they say nothing
of an accelerator cluster. `--long-videos`: every fourth sample a 24 s video (738 tokens, 24 frame groups; the
tiny CPU example's data keys), FCP capped at 256 tokens per rank with groups of at most 3 ranks.

    python benchmarks/upstream_qwen3vl_step_time.py --nproc 4 --steps 6
    python benchmarks/upstream_qwen3vl_step_time.py --nproc 4 --steps 6 --long-videos --max-tokens-per-rank 256
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "upstream"))

from harness import UpstreamBed  # noqa: E402

logger = logging.getLogger("upstream_qwen3vl_step_time")
TRAINING = {"lr": 1e-3, "min_lr": 1e-3, "lr_warmup_fraction": None, "lr_warmup_iters": 0}
LONG_VIDEO_DATA = {"video_max_pixels": 16384, "video_min_pixels": 0, "video_fps": 2.0, "video_maxlen": 64}


def layouts(bed: UpstreamBed, nproc: int, steps: int, global_batch: int, max_tokens: int,
            long_videos: bool = False) -> list[dict]:
    def recipe(**keywords) -> dict:
        extra = dict(TRAINING, **keywords.pop("extra", {}))
        built = bed.recipe(train_iters=steps, global_batch_size=global_batch, extra_gpt=extra, **keywords)
        if long_videos:
            built["data"]["dataset_param"]["preprocess_parameters"].update(LONG_VIDEO_DATA)
        return built

    def fcp(extra: dict) -> dict:
        if long_videos:
            extra = dict(extra, fcp_max_degree=3)
        built = recipe(cp_algo="fcp_cp_algo", extra=dict(extra, fcp_preset="cpu-tiny"))
        built["data"]["dataloader_param"]["sampler_type"] = "FCPBatchSampler"
        return built

    return [
        dict(name=f"fcp_{nproc}_capped_{max_tokens}", recipe=fcp({"fcp_max_tokens_per_rank": max_tokens}), nproc=nproc,
             register_fcp=True),
        dict(name=f"fcp_{nproc}", recipe=fcp({}), nproc=nproc, register_fcp=True),
        dict(name=f"dp{nproc}_cp1", recipe=recipe(), nproc=nproc),
        dict(name=f"ulysses_cp2_dp{nproc // 2}", recipe=recipe(cp=2, cp_algo="ulysses_cp_algo"), nproc=nproc),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--global-batch-size", type=int, default=8)
    parser.add_argument("--max-tokens-per-rank", type=int, default=70)
    parser.add_argument("--long-videos", action="store_true", help="a dataset with long videos (see above)")
    parser.add_argument("--out", type=Path, default=None, help="markdown file for the table (default: print only)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(prefix="fcp_upstream_bench_") as root:
        bed = UpstreamBed.create(Path(root), long_videos=args.long_videos)
        rows = []
        for launch in layouts(bed, args.nproc, args.steps, args.global_batch_size, args.max_tokens_per_rank,
                              args.long_videos):
            log = bed.run(**launch)
            rows.append((launch["name"], statistics.median(log.step_times_ms[1:]), log.losses))
    fcp_ms = rows[1][1]
    lines = ["| layout | median step (ms) | step time / uncapped FCP's | losses |", "|---|---|---|---|"]
    for name, ms, losses in rows:
        lines.append(f"| {name} | {ms:.1f} | {ms / fcp_ms:.2f} | {', '.join(f'{x:.6f}' for x in losses)} |")
    table = "\n".join(lines)
    logger.info("%s", table)
    if args.out is not None:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
