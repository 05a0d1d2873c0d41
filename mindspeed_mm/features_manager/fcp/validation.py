"""Validation of the FCP arguments: every inconsistent combination raises an error naming its flags."""
from __future__ import annotations

import argparse
import difflib
import os
from typing import Protocol

from mindspeed_mm.core.fcp.cost import ProfileTable, ProfileTableError, list_presets
from mindspeed_mm.core.fcp.cost.presets import MODELS, split_preset_name
from mindspeed_mm.core.fcp.parallel.kernels import KernelUnavailableError, check_kernel_option
from mindspeed_mm.features_manager.fcp.cost_source import check_cost_source
from mindspeed_mm.features_manager.fcp.run_checks import check_supported_run

from mindspeed_mm_fcp.parallel_layout import check_static_layout, fcp_ranks
from mindspeed_mm_fcp.options import FCP_OPTIONS, FCPOptionError, coerce_option

FCPArgumentError = FCPOptionError
"""An FCP option (or its combination with another option) is invalid."""

INCOMPATIBLE_FLAGS = (
    "use_cp_send_recv_overlap",  # double-buffered static ring
    "kv_head_repeat_before_uly_alltoall",
    "reset_attention_mask",  # FCP builds its own per-document masks from cu_seqlens
)
"""Options that change how static CP or attention is laid out and have no meaning under FCP."""


def validate_fcp_args(args: argparse.Namespace) -> None:
    """Check the `--fcp-*` options against each other and against the model and parallel layout."""
    _check_unknown_fcp_options(args)
    _coerce_fcp_options(args)
    check_static_layout(args)
    check_supported_run(args)
    _check_incompatible_flags(args)
    _check_attention_kernel(args)
    table = _load_cost_source(args)
    if table is not None:
        _check_table_parallel_sizes(table, args)
    # The model the run trains is its config.json's (`cost_source`); without one, Megatron's arguments tell.
    if not check_cost_source(args, table, args.fcp_preset):
        if table is not None:
            _check_table_matches_model(table, args)
        else:
            _check_preset_matches_model(args.fcp_preset, args)
    ranks = fcp_ranks(args)
    if args.fcp_max_degree is not None and args.fcp_max_degree > ranks:
        raise FCPArgumentError(
            f"--fcp-max-degree={args.fcp_max_degree} exceeds the {ranks} DP x CP ranks FCP can group "
            f"(world size / (--tensor-model-parallel-size x --pipeline-model-parallel-size))")
    if args.fcp_attention_algo == "ulysses":
        _check_ulysses_has_a_degree(args, args.fcp_max_degree or ranks)
    _check_communicator_memory(args, ranks)


def _check_unknown_fcp_options(args: argparse.Namespace) -> None:
    """MindSpeed parses with parse_known_args and keeps unknown options: a misspelt `fcp_*` key must not pass."""
    dests = {option.dest for option in FCP_OPTIONS}
    for name in sorted(vars(args)):
        if name.startswith("fcp_") and name not in dests:
            flag = "--" + name.replace("_", "-")
            known = [option.flag for option in FCP_OPTIONS]
            close = difflib.get_close_matches(flag, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise FCPArgumentError(f"unknown FCP option {flag}{hint}; the FCP options are: {', '.join(known)}")


def _coerce_fcp_options(args: argparse.Namespace) -> None:
    """Options another parser kept as strings (MindSpeed's first parse) get their typed values."""
    for option in FCP_OPTIONS:
        setattr(args, option.dest, coerce_option(option.dest, getattr(args, option.dest, None)))


def _check_attention_kernel(args: argparse.Namespace) -> None:
    """The kernel must build here (its package installed); `auto` is resolved per device at the first call."""
    try:
        check_kernel_option(args.fcp_attention_kernel)
    except KernelUnavailableError as err:
        raise FCPArgumentError(f"--fcp-attention-kernel: {err}") from None


def _check_incompatible_flags(args: argparse.Namespace) -> None:
    for name in INCOMPATIBLE_FLAGS:
        if getattr(args, name, None):
            flag = "--" + name.replace("_", "-")
            raise FCPArgumentError(f"{flag} cannot be combined with --context-parallel-algo fcp_cp_algo")


def _load_cost_source(args: argparse.Namespace) -> ProfileTable | None:
    """The profile table named by --fcp-profile-table, or the preset's table; one of them is required."""
    if args.fcp_profile_table is not None:
        path = args.fcp_profile_table
        if not os.path.isfile(path):
            raise FCPArgumentError(f"--fcp-profile-table: file {path!r} does not exist")
        try:
            return ProfileTable.load(path)
        except ProfileTableError as err:
            raise FCPArgumentError(f"--fcp-profile-table: {err}") from err
    if args.fcp_preset is None:
        raise FCPArgumentError("FCP needs a cost source: pass --fcp-profile-table (measured by `fcp profile`) "
                               "or --fcp-preset (one of: " + ", ".join(list_presets()) + ")")
    if args.fcp_preset not in list_presets():
        raise FCPArgumentError(f"--fcp-preset={args.fcp_preset!r} is unknown; choose one of: "
                               + ", ".join(list_presets()))
    return None  # presets are resolved by the executor with the run's TP/PP


class _DecoderDims(Protocol):
    """The LLM dimensions a cost source was made for (a table's ModelShape or a preset's DecoderShape)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int


def _model_mismatches(dims: _DecoderDims, args: argparse.Namespace) -> list[str]:
    """`model.<field>=<source value> but <flag>=<run value>` for every dimension the run sets differently."""
    expected = {
        "layers": ("--num-layers", getattr(args, "num_layers", None)),
        "hidden": ("--hidden-size", getattr(args, "hidden_size", None)),
        "heads": ("--num-attention-heads", getattr(args, "num_attention_heads", None)),
    }
    if getattr(args, "group_query_attention", False):
        expected["kv_heads"] = ("--num-query-groups", getattr(args, "num_query_groups", None))
    mismatches = []
    for field_name, (flag, value) in expected.items():
        made_for = getattr(dims, field_name)
        if value is not None and made_for != value:
            mismatches.append(f"model.{field_name}={made_for} but {flag}={value}")
    return mismatches


def _check_table_matches_model(table: ProfileTable, args: argparse.Namespace) -> None:
    mismatches = _model_mismatches(table.model, args)
    if mismatches:
        raise FCPArgumentError(
            f"--fcp-profile-table {args.fcp_profile_table!r} was measured for another model: "
            f"{', '.join(mismatches)}; profile this model with `fcp profile`")


def _check_table_parallel_sizes(table: ProfileTable, args: argparse.Namespace) -> None:
    for field_name, flag in (("tp", "--tensor-model-parallel-size"), ("pp", "--pipeline-model-parallel-size")):
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is not None and getattr(table, field_name) != value:
            raise FCPArgumentError(
                f"--fcp-profile-table {args.fcp_profile_table!r} was measured with {field_name}="
                f"{getattr(table, field_name)}, but {flag}={value}")


def _check_preset_matches_model(preset: str, args: argparse.Namespace) -> None:
    """A preset is made for one model: its LLM dimensions must be the run's (TP/PP are the run's anyway)."""
    _, model = split_preset_name(preset)
    mismatches = _model_mismatches(MODELS[model].decoder, args)
    if not mismatches:
        return
    fitting = [name for name in list_presets()
               if not _model_mismatches(MODELS[split_preset_name(name)[1]].decoder, args)]
    hint = (f"choose a preset of this model ({', '.join(fitting)})" if fitting
            else "no preset has this model's shape")
    raise FCPArgumentError(
        f"--fcp-preset={preset!r} (YAML key fcp_preset) is made for model {model}, not this run's: "
        f"{', '.join(mismatches)}; {hint}, or measure a table with `fcp profile` and pass --fcp-profile-table")


def _check_ulysses_has_a_degree(args: argparse.Namespace, max_degree: int) -> None:
    heads = getattr(args, "num_attention_heads", None)
    if heads is None:
        return
    heads_per_tp_rank = heads // args.tensor_model_parallel_size
    if not any(heads_per_tp_rank % degree == 0 for degree in range(2, max_degree + 1)):
        raise FCPArgumentError(
            f"--fcp-attention-algo ulysses: no CP degree in 2..{max_degree} divides the "
            f"{heads_per_tp_rank} attention heads per TP rank (--num-attention-heads={heads}, "
            f"--tensor-model-parallel-size={args.tensor_model_parallel_size}); use ring or auto")


def _check_communicator_memory(args: argparse.Namespace, ranks: int) -> None:
    """On HCCL, the buffers of the communicators a rank may hold (FCP's within --fcp-communicator-budget and
    MindSpeed / Megatron's) must leave memory for the model, and HCCL_BUFFSIZE must be readable."""
    from mindspeed_mm.core.fcp.cost.communicator_memory import CommunicatorMemoryError
    from mindspeed_mm.core.fcp.runtime.fcp_options import FCPOptions

    try:
        FCPOptions.from_namespace(args).cost_model(num_ranks=ranks,
                                                   tp=int(getattr(args, "tensor_model_parallel_size", 1) or 1))
    except CommunicatorMemoryError as err:
        raise FCPArgumentError(str(err)) from None
