"""Device memory a rank's communicators hold, which the cost model's memory limit sets aside (`build_cost_model`).

HCCL (Ascend NPUs) gives every communicator an input and an output buffer of `HCCL_BUFFSIZE` MB on each member
(CANN's default 200 MB), allocated when the communicator is set up at its first collective and kept for the run: 2 x
HCCL_BUFFSIZE per communicator a rank joins. A rank of an FCP run joins FCP's communicators (at most the worst count of
the run's catalogue of groups, `GroupCatalogue.worst`, within its communicator budget) and those of MindSpeed /
Megatron (`framework_communicators`). A run on another backend sets nothing aside here: NCCL's buffers are per
connection and channel (NCCL_BUFFSIZE, 4 MiB by default), far smaller, and stay in the preset's runtime bytes; gloo (CPU
runs, the test bed) keeps none on a device, and `HCCL_BUFFSIZE` is not read.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

HCCL_BUFFSIZE = "HCCL_BUFFSIZE"
"""The environment variable of HCCL's buffer size, in MB."""
DEFAULT_HCCL_BUFFSIZE_MB = 200
"""CANN's default `HCCL_BUFFSIZE`."""
BUFFERS_PER_COMMUNICATOR = 2
"""HCCL's input and output buffer of every communicator."""
_MB = 1 << 20


class CommunicatorMemoryError(ValueError):
    """`HCCL_BUFFSIZE` cannot be read, or the communicators' buffers leave no room for the model."""


def hccl_buffer_mb(environ: Mapping[str, str] = os.environ) -> int:
    """`HCCL_BUFFSIZE` from the environment (CANN's default when unset); an error naming the variable when it is
    not a positive whole number of MB."""
    raw = environ.get(HCCL_BUFFSIZE)
    if raw is None or raw.strip() == "":
        return DEFAULT_HCCL_BUFFSIZE_MB
    try:
        value = int(raw.strip())
    except ValueError:
        raise CommunicatorMemoryError(
            f"the environment variable {HCCL_BUFFSIZE}={raw!r} is not a whole number of MB (HCCL's buffer size per "
            f"communicator; unset it for CANN's default of {DEFAULT_HCCL_BUFFSIZE_MB})") from None
    if value < 1:
        raise CommunicatorMemoryError(f"the environment variable {HCCL_BUFFSIZE}={raw!r} must be at least 1 (MB)")
    return value


def framework_communicators(num_ranks: int, tp: int = 1, pp: int = 1) -> int:
    """Communicators of more than one rank that MindSpeed / Megatron give each rank of a run whose FCP planes hold
    `num_ranks` ranks (the data-parallel size; context parallelism 1 under FCP) at tensor / pipeline sizes tp / pp.

    Megatron-core 0.12.1's `initialize_model_parallel` (which MindSpeed-MM's Qwen3-VL runs call; no expert or
    context parallelism, one distributed-optimizer instance) creates, besides gloo copies that hold no device buffer:
    data-parallel, data-parallel with CP, tensor-and-data-parallel with and without CP, and expert data-parallel groups
    (each of the plane's ranks), model-parallel (tp x pp), tensor-parallel, tensor-and-CP, expert tensor-parallel,
    expert tensor-and-model-parallel (tp) and expert tensor-model-pipeline (tp x pp) groups, the pipeline group (pp) and
    the embedding groups (the first and last pipeline stage: pp > 1 only); torch adds the world group. FSDP2's mesh
    over the data-parallel group reuses that group (`DeviceMesh.from_group`). Groups of one rank are left out.
    """
    if min(num_ranks, tp, pp) < 1:
        raise ValueError(f"ranks, tp and pp must be positive, got {num_ranks}, {tp}, {pp}")
    sizes = [num_ranks * tp * pp,                       # world
             num_ranks, num_ranks,                      # data-parallel, with CP
             tp * num_ranks, tp * num_ranks,            # tensor-and-data-parallel, with CP
             num_ranks,                                 # expert data-parallel
             tp * pp, tp, tp, tp, tp, tp * pp,          # model, tensor, tensor-and-CP, expert TP, TP x EP, TP x EP x PP
             pp]                                        # pipeline
    embedding = [2, 2] if pp > 1 else []                # embedding and position embedding: first and last stage
    return sum(1 for size in sizes + embedding if size > 1)


@dataclass(frozen=True)
class CommunicatorMemory:
    """The communicators of one rank and the device memory their buffers hold."""

    fcp: int
    """FCP's communicators the rank may join (the catalogue's worst rank)."""
    framework: int
    """MindSpeed / Megatron's communicators of the rank (`framework_communicators`)."""
    buffer_mb: int
    """`HCCL_BUFFSIZE`."""

    @property
    def bytes_per_communicator(self) -> int:
        """Device bytes one communicator holds on each member."""
        return BUFFERS_PER_COMMUNICATOR * self.buffer_mb * _MB

    @property
    def total_bytes(self) -> int:
        """Device bytes all of the rank's communicators hold."""
        return (self.fcp + self.framework) * self.bytes_per_communicator

    def describe(self) -> str:
        """The figures in words."""
        return (f"{self.fcp} FCP + {self.framework} MindSpeed / Megatron communicators x {BUFFERS_PER_COMMUNICATOR} x "
                f"{HCCL_BUFFSIZE}={self.buffer_mb} MB = {self.total_bytes / 2**30:.2f} GiB")


def communicator_memory(device: str, fcp: int, framework: int,
                        environ: Mapping[str, str] = os.environ) -> CommunicatorMemory | None:
    """The communicators' memory of a rank on `device` (a profile table's `hardware.device`): HCCL's buffers on
    "npu", None elsewhere (module docstring)."""
    if device != "npu":
        return None
    return CommunicatorMemory(fcp, framework, hccl_buffer_mb(environ))


__all__ = ["BUFFERS_PER_COMMUNICATOR", "CommunicatorMemory", "CommunicatorMemoryError", "DEFAULT_HCCL_BUFFSIZE_MB",
           "HCCL_BUFFSIZE", "communicator_memory", "framework_communicators", "hccl_buffer_mb"]
