"""`fcp train CONFIG.yaml`: train the tiny Qwen3-style model (or, with a `vision:` section, the tiny
Qwen3-VL-shaped model) with FCP or static ring CP.

Launch one process per rank with torchrun (`torchrun --nproc-per-node 4 --no-python fcp train
tiny_qwen3_fcp`); without torchrun it trains on one process. `--reference` runs the single-process,
unsharded reference that FCP runs must reproduce.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from pathlib import Path

from mindspeed_mm_fcp.options import positive_seconds
from mindspeed_mm.core.fcp.sandbox.run_config import (
    DEFAULT_COMM_TIMEOUT_S,
    RunConfig,
    embedded_config_names,
    load_run_config,
)

_TRAINING_LOGGERS = ("mindspeed_mm.core.fcp.sandbox",)
EXIT_COMMUNICATION_FAILURE = 1
"""Exit status of a rank whose exchange with a stalled or dead rank failed."""



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
    parser.add_argument("--output-dir", type=Path,
                        help="rank 0 writes run_status.json, final_state.pt and result.json here (checked before "
                        "training; each file written atomically, result.json last)")
    parser.add_argument(
        "--reference", action="store_true", help="run the single-process unsharded reference instead (one process)"
    )
    parser.add_argument("--cpu", action="store_true", help="train on the CPU with gloo even if an accelerator exists")
    parser.add_argument("--progress", action="store_true", help="progress bar on rank 0 (stderr)")
    parser.add_argument("--comm-timeout-s", type=positive_seconds, metavar="S",
                        help="longest wait of any exchange on the world group and the FCP groups; a stalled rank "
                        "makes every other rank stop with an error naming the step and the group within it "
                        f"(overrides the YAML's fcp_comm_timeout_s; default {DEFAULT_COMM_TIMEOUT_S:g})")
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


def effective_run_config(args: argparse.Namespace) -> RunConfig:
    """The YAML's configuration with the command-line overrides applied."""
    config = load_run_config(args.config)
    if args.comm_timeout_s is not None:
        config = dataclasses.replace(config, fcp=dataclasses.replace(config.fcp, comm_timeout_s=args.comm_timeout_s))
    return config


def run(args: argparse.Namespace) -> int:
    """Train; rank 0 prints the mean step-time split at the end."""
    config = effective_run_config(args)
    _configure_training_log()
    from mindspeed_mm.core.fcp.runtime.comm_errors import CommunicationError, communication
    from mindspeed_mm.core.fcp.sandbox.config_check import check_run_agreement, effective_config
    from mindspeed_mm.core.fcp.sandbox.distributed import init_distributed, shutdown_distributed
    from mindspeed_mm.core.fcp.sandbox.reference_training import train_reference
    from mindspeed_mm.core.fcp.sandbox.vision.vlm_reference import train_vlm_reference
    from mindspeed_mm.core.fcp.sandbox.results import final_parameters
    from mindspeed_mm.core.fcp.sandbox.run_outputs import OutputDirError, RunOutputs
    from mindspeed_mm.core.fcp.sandbox.trainer import Trainer

    context = init_distributed(force_cpu=args.cpu, comm_timeout_s=config.fcp.comm_timeout_s)
    outputs = RunOutputs(args.output_dir) if args.output_dir is not None and context.rank == 0 else None
    started = False
    try:
        problem = None
        if outputs is not None:
            try:
                outputs.start()
                started = True
            except OutputDirError as err:
                problem = str(err)
        with communication("start-up", "configuration check", list(range(context.world_size)),
                           context.comm_timeout_s):
            check_run_agreement(effective_config(config, context.world_size), problem)
        if args.reference:
            if context.world_size != 1:
                raise ValueError(f"--reference runs on one process, but {context.world_size} were launched")
            train = train_vlm_reference if config.is_vlm else train_reference
            result, params = train(config, progress=args.progress)
        else:
            trainer = Trainer(config, context)
            result = trainer.train(progress=args.progress)
            params = final_parameters(trainer.model)
        if outputs is not None:
            outputs.save(result, params)
        if context.rank == 0:
            split = ", ".join(f"{k.removesuffix('_ms')} {v:.1f} ms" for k, v in result.mean_timings_ms().items())
            logging.getLogger(_TRAINING_LOGGERS[0]).info(
                "%s on %d rank(s), mean over steps 2..%d: %s",
                result.context_parallel_algo,
                result.world_size,
                len(result.steps),
                split,
            )
    except CommunicationError as err:
        if started and outputs is not None:
            outputs.interrupted(str(err))
        print(f"fcp train: error: rank {context.rank}: {err}", file=sys.stderr)
        if context.world_size > 1:
            # A peer is gone: tearing the groups and the interpreter down can wait on it (NCCL's destroy
            # can hang; gloo's and the interpreter's teardown take seconds on a loaded host), so the
            # rank leaves at once, as torch's own NCCL error handling does. torchrun ends the others.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_COMMUNICATION_FAILURE)
        return EXIT_COMMUNICATION_FAILURE
    except BaseException as err:
        if started and outputs is not None:
            outputs.interrupted(f"{type(err).__name__}: {err}")
        raise
    finally:
        shutdown_distributed()
    return 0
