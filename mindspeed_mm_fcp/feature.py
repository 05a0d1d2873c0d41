"""FCPFeature: turns on Flexible Context Parallelism with ``--context-parallel-algo fcp_cp_algo``.

FCP owns the whole DP x CP plane: every step it splits the ``world_size / (TP x PP)`` ranks that share
a (tp_rank, pp_rank) coordinate into context-parallel groups of any size. Megatron must therefore
build no static CP groups: ``--context-parallel-size`` must stay 1 (Megatron then computes
DP = world size / (TP x PP), and its data-parallel group spans exactly the ranks FCP re-partitions);
``--fcp-max-degree`` bounds FCP's groups instead.

When MindSpeed calls each hook, and what FCP does there:

- ``register_args``: in MindSpeed's first parse (inside ``import mindspeed.megatron_adaptor``) and in
  Megatron's parse. Adds ``fcp_cp_algo`` to ``--context-parallel-algo`` and the ``--fcp-*`` flags.
- ``pre_register_patches`` / ``register_patches``: inside the adaptor, with MindSpeed's first parse,
  where Megatron's own flags are still strings. FCP checks what must fail before anything runs (a
  static CP size, the micro-batch size) on those strings, and records the patch manager. It imports
  nothing of ``mindspeed_mm`` here: MindSpeed-MM's package may only be imported after the adaptor.
- ``pre_validate_args`` / ``validate_args`` / ``post_validate_args``: inside Megatron's
  ``validate_args``, with the fully typed arguments. ``validate_args`` checks every FCP option, then
  registers and applies FCP's patches, once, before Megatron initialises its process groups. Megatron's
  own timeouts (``--distributed-timeout-minutes``) are left as the run sets them: upstream preprocesses the
  dataset inside a world barrier on first use; only FCP's own groups take ``--fcp-comm-timeout-s``.
  MindSpeed also runs these hooks on every ``TransformerConfig``; FCP validates the command-line
  arguments only.
"""
from __future__ import annotations

import argparse
from typing import Any

from .mindspeed_compat import MindSpeedFeature, MindSpeedPatchesManager
from .options import FCP_CP_ALGO, add_fcp_arguments
from .parallel_layout import check_static_layout

KNOWN_CP_ALGOS = ("megatron_cp_algo", "ulysses_cp_algo", "hybrid_cp_algo")
"""Choices given to ``--context-parallel-algo`` when no other feature has registered it."""


class FCPFeature(MindSpeedFeature):
    """Registers, validates and patches FCP into a Megatron / MindSpeed-MM training run."""

    def __init__(self) -> None:
        super().__init__("context-parallel-algo")
        self._patch_manager: Any = None
        self._patched = False

    def is_need_apply(self, args: Any) -> bool:
        return getattr(args, "context_parallel_algo", None) == FCP_CP_ALGO

    # ------------------------------------------------------------------ arguments
    def register_args(self, parser: argparse.ArgumentParser) -> None:
        if not any("--context-parallel-algo" in action.option_strings for action in parser._actions):
            parser.add_argument("--context-parallel-algo", type=str, default="megatron_cp_algo",
                                choices=list(KNOWN_CP_ALGOS), help="Context parallel algorithm.")
        self.add_parser_argument_choices_value(parser, "--context-parallel-algo", FCP_CP_ALGO)
        add_fcp_arguments(parser)

    # ------------------------------------------------------------------ patches (inside the adaptor)
    def pre_register_patches(self, patch_manager: Any, args: argparse.Namespace) -> None:
        check_static_layout(args)

    def register_patches(self, patch_manager: Any, args: argparse.Namespace) -> None:
        self._patch_manager = patch_manager

    # ------------------------------------------------------------------ validation (Megatron's parse)
    def pre_validate_args(self, args: Any) -> None:
        if self._applies_to(args):
            check_static_layout(args)

    def validate_args(self, args: Any) -> None:
        if not self._applies_to(args):
            return
        from mindspeed_mm.features_manager.fcp.patches import register_fcp_patches
        from mindspeed_mm.features_manager.fcp.validation import validate_fcp_args

        validate_fcp_args(args)
        if not self._patched:
            manager = self._patch_manager or MindSpeedPatchesManager
            register_fcp_patches(manager, args)
            manager.apply_patches()
            self._patched = True

    def _applies_to(self, args: Any) -> bool:
        return isinstance(args, argparse.Namespace) and self.is_need_apply(args)


__all__ = ["FCPFeature", "FCP_CP_ALGO"]
