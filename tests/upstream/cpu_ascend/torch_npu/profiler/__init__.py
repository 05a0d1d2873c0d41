"""`torch_npu.profiler` on the host: the NPU profiler is torch's own profiler over host activities.

`profile(...)` builds a `torch.profiler.profile` (construction starts nothing, as upstream relies on when
profiling is off); the NPU activity is the host's CPU activity; Ascend-only settings (levels, AI-core metrics,
`_ExperimentalConfig`) are accepted and kept on the object, since the host has no counterpart to apply them to.
"""
from __future__ import annotations

import enum

import torch.profiler as _torch_profiler

from torch_npu._ops import loud_stub
from torch_npu.profiler import dynamic_profile, profiler  # noqa: F401


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    NPU = "NPU"


class ProfilerLevel(enum.Enum):
    Level_none = "Level_none"
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"


class AiCMetrics(enum.Enum):
    AiCoreNone = "AiCoreNone"
    PipeUtilization = "PipeUtilization"
    ArithmeticUtilization = "ArithmeticUtilization"
    Memory = "Memory"
    MemoryL0 = "MemoryL0"
    MemoryUB = "MemoryUB"
    ResourceConflictRatio = "ResourceConflictRatio"
    L2Cache = "L2Cache"


class ExportType(enum.Enum):
    Text = "text"
    Db = "db"


class _ExperimentalConfig:
    """Ascend-only profiler settings; kept as given (no host meaning)."""

    def __init__(self, **kwargs):
        self.settings = dict(kwargs)


schedule = _torch_profiler.schedule


def tensorboard_trace_handler(dir_name, worker_name=None, analyse_flag=True, async_mode=False):
    """torch's trace handler (host traces); `analyse_flag` / `async_mode` concern Ascend post-processing."""
    return _torch_profiler.tensorboard_trace_handler(dir_name, worker_name=worker_name)

supported_activities = loud_stub("torch_npu.profiler.supported_activities")


def profile(activities=None, schedule=None, on_trace_ready=None, record_shapes=False, profile_memory=False,
            with_stack=False, with_flops=False, with_modules=False, experimental_config=None, **kwargs):
    """A torch profiler over the host activities that stand for the requested NPU/CPU ones."""
    host = [_torch_profiler.ProfilerActivity.CPU] if activities is None or activities else []
    prof = _torch_profiler.profile(activities=host, schedule=schedule, on_trace_ready=on_trace_ready,
                                   record_shapes=record_shapes, profile_memory=profile_memory,
                                   with_stack=with_stack, with_flops=with_flops, with_modules=with_modules)
    prof.npu_experimental_config = experimental_config
    return prof
