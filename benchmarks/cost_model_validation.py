"""Cost-model fidelity on this host: profile the tiny decoder and validate it against real group runs.

Each run profiles the device and, between its sweeps, runs the validation rounds: ring and
Ulysses groups of degrees 1..4 on mixed packed batches, every rank busy, as in a training round.
It prints the per-case table (predicted vs measured, error, spread) and the mean absolute
percentage error (and, from the same measurements, the error with the table's measured linear curve
replaced by one slope per token), and writes the table, the report and the raw samples of every run to
--output-dir. It takes more samples than a plain `fcp profile` and runs the validation passes
between 8 sweeps, because on a shared host the noise and drift of both sides, not the model, set
the floor of the error; several runs show how much the host's load moves the result.

    python benchmarks/cost_model_validation.py --output-dir out/validation [--runs 2] [--nice -10]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import sys
from pathlib import Path

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.profiler.profile_config import ProfileConfig
from mindspeed_mm.core.fcp.profiler.profiling import ValidationPlan, write_profile
from mindspeed_mm.core.fcp.profiler.group_validation import ValidationSettings, default_rounds

logger = logging.getLogger("cost_model_validation")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, required=True, help="tables and reports go here")
    parser.add_argument("--runs", type=int, default=1, help="independent profile + validation runs (default 1)")
    parser.add_argument("--world-size", type=int, default=4, help="processes (default 4)")
    parser.add_argument("--passes", type=int, default=24, help="validation passes per run (default 24)")
    parser.add_argument("--sweeps", type=int, default=8, help="profile sweeps (default 8)")
    parser.add_argument("--repeats", type=int, default=2, help="samples per measurement and sweep (default 2)")
    parser.add_argument("--clock", default="auto", choices=("auto", "wall", "cpu"), help="see `fcp profile --help`")
    parser.add_argument("--nice", type=int, help="scheduling priority of the measuring processes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    args.output_dir.mkdir(parents=True, exist_ok=True)

    config = ProfileConfig(world_size=args.world_size, clock=args.clock, nice=args.nice, sweeps=args.sweeps,
                           repeats=args.repeats)
    settings = ValidationSettings(passes=args.passes, clock=config.clock)
    plan = ValidationPlan(tuple(default_rounds(args.world_size, config.model)), settings)
    mapes = []
    for run in range(args.runs):
        table_path = args.output_dir / f"cpu_tiny_run{run}.json"
        result = write_profile(config, table_path, validation=plan, progress=sys.stderr.isatty())
        report = result.report
        if report is None:
            raise RuntimeError("the profile came back without its validation report")
        report_path = args.output_dir / f"validation_run{run}.json"
        report_path.write_text(json.dumps(report.to_json(), indent=1) + "\n")
        samples_path = args.output_dir / f"samples_run{run}.json"
        samples_path.write_text(json.dumps([m.to_json() for m in result.measurements]) + "\n")
        logger.info("run %d: table %s (profile and validation together took %.0f s), report %s", run, table_path,
                    result.table.provenance["profile_seconds"], report_path)
        for line in report.lines():
            logger.info("%s", line)
        mapes.append(report.mape)
        time = result.table.time
        if time.linear_ms is not None:
            sloped = CostModel(dataclasses.replace(result.table, time=dataclasses.replace(time, linear_ms=None)))
            logger.info("run %d: MAPE %.1f%% with the measured linear curve, %.1f%% with one slope per token "
                        "(the same measurements)", run, report.mape, report.repriced(sloped).mape)
    if len(mapes) > 1:
        logger.info("MAPE per run: %s (median %.1f%%)", ", ".join(f"{m:.1f}%" for m in mapes),
                    statistics.median(mapes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
