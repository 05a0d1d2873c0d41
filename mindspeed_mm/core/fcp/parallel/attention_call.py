"""Everything one distributed attention call needs besides its tensors."""
from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from mindspeed_mm.core.fcp.parallel.collectives import CommStats
from mindspeed_mm.core.fcp.parallel.hybrid_group import HybridGroup
from mindspeed_mm.core.fcp.parallel.kernels import AttentionKernel
from mindspeed_mm.core.fcp.parallel.zigzag import ZigzagLayout


@dataclass(frozen=True)
class AttentionCall:
    """Arguments of one ``fcp_attention`` call, carried from its forward to its backward."""

    group: dist.ProcessGroup | HybridGroup | None
    """Process group of the CP group (its Ulysses block and ring for hybrid attention); None only for local
    attention (degree 1)."""
    rank: int
    """This rank's index inside ``group``."""
    layout: ZigzagLayout
    """Zigzag layout of the group's packed batch."""
    causal: bool
    """Causal mask inside each document (else full attention inside each document)."""
    softmax_scale: float
    """Factor applied to q.k before the softmax."""
    kernel: AttentionKernel
    """Local varlen kernel that computes each block."""
    stats: CommStats | None
    """Where the bytes sent by this call are recorded, if anywhere."""

    @property
    def degree(self) -> int:
        """Number of ranks in the CP group."""
        return self.layout.degree

    def record(self, nbytes: int, *, backward: bool) -> None:
        """Account ``nbytes`` sent in the forward or backward pass."""
        if self.stats is not None:
            self.stats.record(nbytes, backward=backward)
