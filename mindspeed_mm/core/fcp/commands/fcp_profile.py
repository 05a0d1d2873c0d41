"""`fcp profile`: measure the profile table on this host; `--validate` checks it against real group runs."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mindspeed_mm.core.fcp.atomic_io import atomic_write_text
from mindspeed_mm.core.fcp.commands.cli_options import positive_int
from mindspeed_mm.core.fcp.cost.model_config import (
    DEFAULT_VISION_WINDOW,
    RECIPE_MODEL_KEY,
    ModelConfig,
    read_model_config,
    recipe_model_config_path,
    recipe_vision_window,
)
from mindspeed_mm.core.fcp.cost.presets import MODELS
from mindspeed_mm.core.fcp.cost.table import DEVICES, DTYPES, ProfileTable
from mindspeed_mm.core.fcp.profiler.profile_config import (
    DEFAULT_ATTENTION_LENGTHS,
    DEFAULT_BACKEND,
    DEFAULT_LINEAR_TOKENS,
    DEFAULT_MESSAGE_BYTES,
    DEFAULT_VISION_FRAME_GROUPS,
    LAYER_SOURCES,
    ProfileConfig,
    encoder_shape,
    model_shape,
)
from mindspeed_mm.core.fcp.profiler.timing import CLOCKS, STATISTICS

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.profiler.profiling import ProfileResult
    from mindspeed_mm.core.fcp.profiler.group_validation import HeldOutValidation, ValidationReport


_PROFILE_ONLY = (3, 3)
"""(sweeps, repeats) of a plain profile."""
_VALIDATING = (8, 2)
"""(sweeps, repeats) when validation passes run between the sweeps."""


def size_list(text: str) -> tuple[int, ...]:
    """argparse type: comma-separated positive integers, e.g. `16,32,64`."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    bad = [v for v in values if v <= 0]
    if bad:
        raise argparse.ArgumentTypeError(f"sizes must be positive, got {bad[0]} in {text!r}")
    return values


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `fcp profile`."""
    parser = subparsers.add_parser(
        "profile",
        help="measure the cost model's profile table on this host (and validate it)",
        description="Time attention (causal, full, off-diagonal ring block, the call's floor), linear work, "
        "point-to-point and all-to-all exchanges and memory of a model shape on the current device, on several "
        "processes at once (or on one device with --world-size 1, the links from --comm-from), and write the profile "
        "table the cost model reads. --validate also runs real group executions of mixed "
        "packed batches (degrees 1..world size, ring and Ulysses) between the measurement sweeps and prints "
        "predicted against measured time.",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("-o", "--output", type=Path, metavar="FILE", help="profile table to write (JSON)")
    target.add_argument("--check-table", type=Path, metavar="FILE",
                        help="validate an existing table instead of profiling (its load may differ from now)")
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument("--model", choices=sorted(MODELS),
                       help="decoder and vision encoder shape of a preset model (default tiny)")
    shape.add_argument("--model-config", type=Path, metavar="CONFIG",
                       help="the shape of the Hugging Face Qwen3-VL config.json (or its model folder) the run trains, "
                       "any size, dense (qwen3_vl) or mixture of experts (qwen3_vl_moe); named in the table's "
                       "provenance")
    shape.add_argument("--recipe", type=Path, metavar="YAML",
                       help=f"the MindSpeed-MM recipe of the run: the shape of the config.json in its "
                       f"{RECIPE_MODEL_KEY} folder (relative paths from the current folder, as "
                       "pretrain_transformers.py reads them)")
    parser.add_argument("--vision-window", type=positive_int, metavar="PATCHES",
                        help="patches of one vision attention sequence (a frame group of the videos the run trains "
                        "on) for --model-config / --recipe (default: the largest frame a --recipe's data keeps, "
                        f"else {DEFAULT_VISION_WINDOW}, a 720p frame group); a preset model has its own")
    parser.add_argument("--no-vision", action="store_true",
                        help="profile the decoder only (a text-only table: model.vision null, vision figures 0)")
    parser.add_argument("--vision-frame-groups", type=size_list, default=DEFAULT_VISION_FRAME_GROUPS, metavar="G,G,...",
                        help="frame groups of the encoder's attention window per timed encoder call (default "
                        f"{_csv(DEFAULT_VISION_FRAME_GROUPS)})")
    parser.add_argument("--device", default="cpu", choices=DEVICES, help="device kind (default cpu)")
    parser.add_argument("--backend", help="torch.distributed backend (default: gloo / nccl / hccl by device)")
    parser.add_argument("--dtype", default="fp32", choices=DTYPES, help="dtype (default fp32)")
    parser.add_argument("--world-size", type=positive_int, default=4,
                        help="processes measuring at once (default 4); 1 measures the compute terms on one device, "
                        "taking the communication terms from --comm-from")
    parser.add_argument("--layers", default="lean", choices=LAYER_SOURCES,
                        help="what the layers are timed on: the profiler's lean decoder and encoder (lean, default) "
                        "or Hugging Face's Qwen3-VL text and vision models, which MindSpeed-MM's Qwen3-VL forks "
                        "(hf; needs transformers)")
    parser.add_argument("--comm-from", metavar="PRESET|FILE",
                        help="with --world-size 1: the hardware preset (h200, a3, ...) or the profile table measured "
                        "with several processes on the real node whose links, FSDP round and gradient reduction the "
                        "table takes")
    parser.add_argument("--ranks-per-node", type=positive_int, default=8, help="recorded in the table (default 8)")
    parser.add_argument("--attention-lengths", type=size_list, default=DEFAULT_ATTENTION_LENGTHS, metavar="L,L,...",
                        help=f"document lengths of the attention grids (default {_csv(DEFAULT_ATTENTION_LENGTHS)})")
    parser.add_argument("--linear-tokens", type=size_list, default=DEFAULT_LINEAR_TOKENS, metavar="T,T,...",
                        help=f"batch sizes of the linear measurements (default {_csv(DEFAULT_LINEAR_TOKENS)})")
    parser.add_argument("--attention-tokens-per-call", type=positive_int, default=2048, metavar="T",
                        help="most tokens of one timed attention call of several documents (default 2048); on a "
                        "device whose calls have a large fixed floor, enough to exceed it (e.g. 32768 on an H200)")
    parser.add_argument("--attention-docs-per-call", type=positive_int, default=8, metavar="N",
                        help="most documents of one timed attention call (default 8)")
    parser.add_argument("--message-bytes", type=size_list, default=DEFAULT_MESSAGE_BYTES, metavar="B,B,...",
                        help=f"message sizes of the communication grids (default {_csv(DEFAULT_MESSAGE_BYTES)})")
    parser.add_argument("--repeats", type=positive_int,
                        help=f"samples per measurement and sweep (default {_PROFILE_ONLY[1]}, {_VALIDATING[1]} with "
                        "--validate)")
    parser.add_argument("--sweeps", type=positive_int,
                        help=f"passes over all measurements (default {_PROFILE_ONLY[0]}, {_VALIDATING[0]} with "
                        "--validate: validation passes run between sweeps, so finer sweeps follow the host's load "
                        "more closely)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs before each measurement (default 1)")
    parser.add_argument("--statistic", default="median", choices=STATISTICS, help="summary of repeats")
    parser.add_argument("--clock", default="auto", choices=("auto", *CLOCKS),
                        help="wall or cpu (process CPU time); auto: cpu on the CPU device, else wall")
    parser.add_argument("--nice", type=int, metavar="N",
                        help="run the measuring processes at this scheduling priority (-20..19; negative needs "
                        "privileges and takes CPU time from other jobs on the host)")
    parser.add_argument("--validate", action="store_true", help="also run the cost-model validation")
    parser.add_argument("--validation-passes", type=positive_int, default=15, help="timed passes (default 15)")
    parser.add_argument("--validation-window-ms", type=float, default=300.0,
                        help="how long each group repeats its run per pass (default 300)")
    parser.add_argument("--report", type=Path, metavar="FILE", help="write the validation report (JSON) here")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def _csv(values: tuple[int, ...]) -> str:
    return ",".join(str(v) for v in values)


def _model_config(args: argparse.Namespace) -> ModelConfig | None:
    """The model config named by --model-config or --recipe (None: a preset model)."""
    if args.vision_window is not None and args.model_config is None and args.recipe is None:
        raise ValueError("--vision-window sets the window of a shape read with --model-config or --recipe; a preset "
                         "model (--model) has its own")
    window = args.vision_window or DEFAULT_VISION_WINDOW
    if args.model_config is not None:
        return read_model_config(args.model_config, vision_window=window)
    if args.recipe is None:
        return None
    config = read_model_config(recipe_model_config_path(args.recipe), vision_window=window)
    if args.vision_window is not None:
        return config
    # The window of the largest frame the recipe's data keeps, where it says.
    recipe_window = recipe_vision_window(args.recipe, config.encoder.patch_size, config.encoder.spatial_merge)
    return config if recipe_window is None else read_model_config(config.path, vision_window=recipe_window)


def _config(args: argparse.Namespace) -> ProfileConfig:
    sweeps, repeats = _VALIDATING if args.validate and args.check_table is None else _PROFILE_ONLY
    source = _model_config(args)
    if source is None:
        name = args.model or "tiny"
        model, encoder = model_shape(name), encoder_shape(name)
    else:
        model, encoder = dataclasses.replace(source.model_shape(), vision=None), source.encoder
    return ProfileConfig(
        model=model, encoder=None if args.no_vision else encoder, model_config=source, recipe=args.recipe,
        vision_frame_groups=args.vision_frame_groups, dtype=args.dtype, device=args.device,
        backend=args.backend or DEFAULT_BACKEND[args.device], world_size=args.world_size,
        ranks_per_node=args.ranks_per_node, attention_lengths=args.attention_lengths,
        linear_tokens=args.linear_tokens, message_bytes=args.message_bytes, warmup=args.warmup,
        attention_tokens_per_call=args.attention_tokens_per_call, attention_docs_per_call=args.attention_docs_per_call,
        comm_from=args.comm_from, layers=args.layers,
        repeats=args.repeats or repeats, sweeps=args.sweeps or sweeps, statistic=args.statistic, clock=args.clock,
        nice=args.nice,
    )


def _write_report(report: ValidationReport, held_out: HeldOutValidation, path: Path) -> None:
    """Write the report JSON (with the held-out scores) atomically (temporary file in the same folder, fsync,
    rename)."""
    atomic_write_text(path, json.dumps({**report.to_json(), "held_out": held_out.to_json()}, indent=1) + "\n")


def _load(load: object) -> str:
    return "n/a" if not isinstance(load, (list, tuple)) else "/".join(f"{x:.1f}" for x in load)


def _summary(result: ProfileResult, path: Path) -> list[str]:
    t = result.table
    tm, prov = t.time, t.provenance
    causal = ", ".join(f"{int(x)}:{y:.3g}" for x, y in zip(tm.attention_causal_ms.x, tm.attention_causal_ms.y))
    shape_source = prov.get("model_shape_source", {})
    return [
        f"profile table  {path} ({t.model.name} on {prov.get('device_name')}, {t.dtype}, "
        f"{prov['measurement']['clock']} clock)",
        f"model shape    {shape_source['path']} ({shape_source['model_type']})" if "path" in shape_source
        else f"model shape    preset {t.model.name}",
        f"profiling took {prov['profile_seconds']:.0f} s, load average {_load(prov.get('load_average_before'))} -> "
        f"{_load(prov.get('load_average'))}",
        f"attention causal per layer and document (tokens:ms)  {causal}",
        f"attention call floor {tm.attention_call_ms:.3g} ms per layer",
        f"linear {tm.linear_ms_per_token * 1e3:.2f} us/token/layer, output {tm.output_ms_per_token * 1e3:.2f} "
        f"us/token, launch {tm.launch_ms:.2f} ms, transfer overlap {tm.comm_overlap:.2f}",
        f"communication  {prov['term_sources']['communication']}",
        f"whole decoder / sum of its timed parts {prov['composition']['factor']:.3f} (compute terms scaled by it)"
        if "composition" in prov else f"layers timed on {prov.get('layers', 'the lean decoder')}",
        f"p2p {tm.p2p_intra_ms.y[0]:.2f}..{tm.p2p_intra_ms.y[-1]:.2f} ms, all-to-all "
        f"{tm.all_to_all_intra_ms.y[0]:.2f}..{tm.all_to_all_intra_ms.y[-1]:.2f} ms over "
        f"{int(tm.p2p_intra_ms.x[0])}..{int(tm.p2p_intra_ms.x[-1])} bytes",
        f"vision encoder {tm.vision_ms_per_call:.2f} ms per call + {tm.vision_ms_per_patch * 1e3:.2f} us per patch, "
        f"{t.memory.vision_activation_bytes_per_token:.0f} B per merged token" if t.model.vision is not None
        else "no vision encoder profiled",
        f"activations {t.memory.activation_bytes_per_token:.0f} B/token, training state "
        f"{t.memory.static_bytes / 2**20:.1f} MiB",
    ]


def run(args: argparse.Namespace) -> int:
    """Profile (and validate), or validate an existing table."""
    # The measuring code loads the model stacks it times (megatron-core among them): only when profiling.
    from mindspeed_mm.core.fcp.profiler.profiling import ValidationPlan, check_writable, write_profile
    from mindspeed_mm.core.fcp.profiler.group_validation import (
        TARGET_MAPE_PERCENT,
        ValidationSettings,
        default_rounds,
        held_out_validation,
        validate,
    )

    if args.validate and args.world_size == 1:
        raise ValueError("--validate runs groups of several ranks: it needs --world-size >= 2")
    if args.validate and args.layers == "hf":
        raise ValueError("--validate runs its groups on the profiler's lean decoder, which a table timed with "
                         "--layers hf does not price: validate with --layers lean")
    if args.report is not None and not args.validate:
        raise ValueError("--report needs --validate")
    if args.report is not None:
        check_writable(args.report)
    config = _config(args)
    settings = ValidationSettings(passes=args.validation_passes, window_ms=args.validation_window_ms,
                                  statistic=args.statistic, clock=config.clock)
    progress = not args.no_progress and sys.stderr.isatty()
    if args.check_table is not None:
        if not args.validate:
            raise ValueError("--check-table needs --validate")
        from mindspeed_mm.core.fcp.cost import CostModel

        table = ProfileTable.load(args.check_table)
        rounds = default_rounds(args.world_size, table.model)
        report = validate(CostModel(table), rounds, world_size=args.world_size, settings=settings,
                          dtype=table.dtype, progress=progress, nice=args.nice)
    else:
        plan = None
        if args.validate:
            rounds = default_rounds(args.world_size, config.model)
            plan = ValidationPlan(tuple(rounds), settings)
        result = write_profile(config, args.output, validation=plan, progress=progress)
        for line in _summary(result, args.output):
            print(line)
        report, table = result.report, result.table
    if report is not None:
        for line in report.lines():
            print(line)
        held_out = held_out_validation(table, report)
        for line in held_out.lines():
            print(line)
        if report.mape > TARGET_MAPE_PERCENT:
            print(f"warning: the error is above the {TARGET_MAPE_PERCENT:.0f}% target; see the load average "
                  f"above and the spread column", file=sys.stderr)
        if args.report is not None:
            _write_report(report, held_out, args.report)
            print(f"report         {args.report}")
    return 0
