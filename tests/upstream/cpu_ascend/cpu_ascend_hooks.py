"""Import-time fixes for the CPU bed, installed by this folder's `sitecustomize.py`.

Each fix runs when (and only if) the module it concerns is imported, so processes that never import
them pay nothing:

- `torchvision` (PyPI 0.28 is a CUDA build): its import registers fake kernels for `torchvision::nms` and
  `torchvision::qnms`, which only works when those operator schemas exist; the schemas are defined first
  (no kernel: calling `nms` still fails loudly).
- `torchvision.io.video` (0.28 re-exports it from an internal module that is not shipped): replaced by a module
  whose names (`read_video`, `_read_from_stream`, `_align_audio_frames`, `_check_av_available`, `_video_opt` ...)
  MindSpeed-MM imports and never calls on this path; they raise NotImplementedError when called.
- `accelerate.state`: with `torch.npu` available accelerate picks `torch.device("npu")` and the `hccl` backend;
  the host's device is `cpu` and its backend `gloo`.
- `mindspeed_mm.models.common.communications`: `_gather` requires `input_.device.type in ("cuda", "npu")`;
  on this bed the host is the device, so `cpu` is added to the accepted device types of that check (only the
  constant tuple of the check changes; the function body is upstream's).

- `mindspeed_mm.patchs.premul_sum_patch` (expert parallelism): upstream's workaround for a backend without
  `ReduceOp.PREMUL_SUM` (HCCL, and gloo here) wraps `all_reduce`, `reduce_scatter` and `reduce_scatter_tensor`, which
  FSDP2 used in upstream's torch 2.7.1; the bed's torch 2.13 reduce-scatters through `reduce_scatter_single`, so the
  same wrapper of upstream's is applied to it too when upstream applies its patch.

One observer, not a fix: `mindspeed_mm.training.train_step` is wrapped so that rank 0 prints each step's
grad norm in full precision (Megatron's log line rounds it to 3 decimals); training is unchanged.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
import types

LOG = logging.getLogger("cpu_ascend")
_PRE: dict = {}
_POST: dict = {}
_REPLACE: dict = {}
_done: set = set()


class _PostLoader(importlib.abc.Loader):
    def __init__(self, loader, post):
        self._loader, self._post = loader, post

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._post(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _ReplaceLoader(importlib.abc.Loader):
    def __init__(self, build):
        self._build = build

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        self._build(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname in _REPLACE:
            return importlib.util.spec_from_loader(fullname, _ReplaceLoader(_REPLACE[fullname]))
        if fullname in _PRE and fullname not in _done:
            _done.add(fullname)
            _PRE[fullname]()
        if fullname not in _POST:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PostLoader(spec.loader, _POST[fullname])
                return spec
        return None


# --- the fixes ------------------------------------------------------------------------------------------------

def _torchvision_schemas() -> None:
    import torch

    for name in ("nms", "qnms"):
        if not torch._C._dispatch_has_kernel(f"torchvision::{name}") and not _has_schema(f"torchvision::{name}"):
            signature = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor" if name == "nms" else \
                "(Tensor dets, Tensor scores, float iou_threshold, int output_size) -> Tensor"
            torch.library.define(f"torchvision::{name}", signature)


def _has_schema(qualified: str) -> bool:
    import torch

    try:
        torch._C._get_schema(qualified, "")
        return True
    except RuntimeError:
        return False


def _build_video_module(module: types.ModuleType) -> None:
    def loud(name):
        def stub(*args, **kwargs):
            raise NotImplementedError(f"cpu_ascend: torchvision.io.video.{name} is not available with torchvision 0.28")

        stub.__name__ = name
        return stub

    for name in ("read_video", "read_video_timestamps", "write_video", "_read_from_stream", "_align_audio_frames",
                 "_check_av_available", "_video_opt"):
        setattr(module, name, loud(name))
    try:
        import av
    except ImportError:  # pragma: no cover - av is pinned in the bed's requirements
        av = None
    module.av = av
    module._av_available = av is not None


def _accelerate_host(module: types.ModuleType) -> None:
    import torch

    state = module.PartialState
    state.default_device = property(lambda self: torch.device("cpu"))
    prepare = state._prepare_backend

    def _prepare_backend(self, *args, **kwargs):
        backend, distributed_type = prepare(self, *args, **kwargs)
        if backend in ("hccl", "nccl"):
            backend, distributed_type = "gloo", module.DistributedType.MULTI_CPU
        return backend, distributed_type

    state._prepare_backend = _prepare_backend


def _gather_accepts_host(module: types.ModuleType) -> None:
    function = module._gather
    code = function.__code__
    accepted = ("cuda", "npu")
    if accepted not in code.co_consts:
        raise RuntimeError("cpu_ascend: mindspeed_mm communications._gather no longer checks ('cuda', 'npu'); "
                           "update cpu_ascend_hooks._gather_accepts_host")
    consts = tuple(c + ("cpu",) if c == accepted else c for c in code.co_consts)
    function.__code__ = code.replace(co_consts=consts)


def _premul_sum_for_reduce_scatter_single(module: types.ModuleType) -> None:
    import torch.distributed as dist

    apply = module.apply_hccl_premul_sum_patch

    def apply_also_to_reduce_scatter_single():
        apply()
        dist.reduce_scatter_single = module.hccl_premul_sum_wrapper(dist.reduce_scatter_single, "output")

    module.apply_hccl_premul_sum_patch = apply_also_to_reduce_scatter_single


EXACT_GRAD_NORM_PREFIX = "[bed] exact grad norm:"
"""Line prefix of the full-precision grad norm the bed's observer prints on rank 0 (Megatron logs 3 decimals)."""


def _print_exact_grad_norm(module: types.ModuleType) -> None:
    """Observation only: rank 0 prints each step's grad norm in full precision after upstream's `train_step`."""
    import functools
    import os

    train_step = module.train_step

    @functools.wraps(train_step)
    def observed(*args, **kwargs):
        result = train_step(*args, **kwargs)
        if os.environ.get("RANK", "0") == "0":
            # One write with its newline: the ranks share the log file, and print's separate write of the
            # end of line let another rank's line in between.
            sys.stdout.write(f"{EXACT_GRAD_NORM_PREFIX} {float(result[2])!r}\n")
            sys.stdout.flush()
        return result

    module.train_step = observed


def install() -> None:
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    _PRE["torchvision"] = _torchvision_schemas
    _REPLACE["torchvision.io.video"] = _build_video_module
    _POST["accelerate.state"] = _accelerate_host
    _POST["mindspeed_mm.models.common.communications"] = _gather_accepts_host
    _POST["mindspeed_mm.patchs.premul_sum_patch"] = _premul_sum_for_reduce_scatter_single
    _POST["mindspeed_mm.training"] = _print_exact_grad_norm
    sys.meta_path.insert(0, _Finder())
