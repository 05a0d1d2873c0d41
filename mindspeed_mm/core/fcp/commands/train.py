"""`fcp train CONFIG.yaml`: train the tiny Qwen3-style model (or, with a `vision:` section, the tiny
Qwen3-VL-shaped model) with FCP or static ring CP.

Launch one process per rank with torchrun (`torchrun --nproc-per-node 4 --no-python fcp train
tiny_qwen3_fcp`); without torchrun it trains on one process. `--reference` runs the single-process,
unsharded reference that FCP runs must reproduce.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from mindspeed_mm.core.fcp.executor.config import embedded_config_names, load_run_config

_TRAINING_LOGGERS = ("mindspeed_mm.core.fcp.executor",)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `fcp train`."""
    parser = subparsers.add_parser(
        "train",
        help="train the tiny model with FCP or static CP (one process per rank, via torchrun)",
        description="Train a tiny Qwen3-shaped megatron-core decoder on the embedded synthetic dataset, "
        "re-planning the context-parallel groups every step (fcp_cp_algo) or with Megatron's static ring CP "
        "(megatron_cp_algo). A config with a vision section trains a tiny Qwen3-VL-shaped model on synthetic "
        "video-caption samples, each group splitting the video encoder over its ranks. Logs follow Megatron's "
        "format.",
    )
    shipped = ", ".join(name.removesuffix(".yaml") for name in embedded_config_names())
    parser.add_argument("config", help=f"run YAML, or the name of a shipped one ({shipped})")
    parser.add_argument("--output-dir", type=Path, help="rank 0 writes result.json and final_state.pt here")
    parser.add_argument(
        "--reference", action="store_true", help="run the single-process unsharded reference instead (one process)"
    )
    parser.add_argument("--cpu", action="store_true", help="train on the CPU with gloo even if an accelerator exists")
    parser.add_argument("--progress", action="store_true", help="progress bar on rank 0 (stderr)")
    return parser


def _configure_training_log() -> None:
    """Training lines go to stdout as plain Megatron-style lines, whatever the CLI's verbosity."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name in _TRAINING_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
        logger.propagate = False


def run(args: argparse.Namespace) -> int:
    """Train; rank 0 prints the mean step-time split at the end."""
    config = load_run_config(args.config)
    _configure_training_log()
    from mindspeed_mm.core.fcp.executor.distributed import init_distributed, shutdown_distributed
    from mindspeed_mm.core.fcp.executor.reference import train_reference
    from mindspeed_mm.core.fcp.executor.results import final_parameters, save_result
    from mindspeed_mm.core.fcp.executor.trainer import Trainer

    context = init_distributed(force_cpu=args.cpu)
    try:
        if args.reference:
            if context.world_size != 1:
                raise ValueError(f"--reference runs on one process, but {context.world_size} were launched")
            result, params = train_reference(config, progress=args.progress)
        else:
            trainer = Trainer(config, context)
            result = trainer.train(progress=args.progress)
            params = final_parameters(trainer.model)
        if context.rank == 0:
            if args.output_dir is not None:
                save_result(result, params, args.output_dir)
            split = ", ".join(f"{k.removesuffix('_ms')} {v:.1f} ms" for k, v in result.mean_timings_ms().items())
            logging.getLogger(_TRAINING_LOGGERS[0]).info(
                "%s on %d rank(s), mean over steps 2..%d: %s",
                result.context_parallel_algo,
                result.world_size,
                len(result.steps),
                split,
            )
    finally:
        shutdown_distributed()
    return 0
