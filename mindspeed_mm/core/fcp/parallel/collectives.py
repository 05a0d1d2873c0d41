"""Communication helpers of the distributed attention: byte counting, ring P2P, uneven all-to-all."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass
class CommStats:
    """Bytes this rank sent to other ranks, accumulated over the attention calls it was passed to."""

    forward_bytes_sent: int = 0
    """Bytes sent by the forward passes."""
    backward_bytes_sent: int = 0
    """Bytes sent by the backward passes."""
    forward_calls: int = 0
    """Number of forward passes recorded."""
    backward_calls: int = 0
    """Number of backward passes recorded."""

    def record(self, nbytes: int, *, backward: bool) -> None:
        """Add one pass that sent ``nbytes``."""
        if backward:
            self.backward_bytes_sent += nbytes
            self.backward_calls += 1
        else:
            self.forward_bytes_sent += nbytes
            self.forward_calls += 1


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Payload size of ``tensor`` in bytes."""
    return tensor.numel() * tensor.element_size()


@dataclass
class PendingExchange:
    """Non-blocking sends/receives in flight; ``wait`` before reading the receive buffer."""

    works: list[dist.Work] = field(default_factory=list)
    """Outstanding requests (empty when nothing had to move)."""
    bytes_sent: int = 0
    """Bytes this rank sends in the exchange."""

    def wait(self) -> None:
        """Block until every request has completed."""
        for work in self.works:
            work.wait()
        self.works.clear()


class RingComm:
    """Sends to the next rank and receives from the previous one of a process group (global peers)."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        ranks = dist.get_process_group_ranks(group)
        rank = dist.get_rank(group)
        self.group = group
        self.next_peer = ranks[(rank + 1) % len(ranks)]
        self.prev_peer = ranks[(rank - 1) % len(ranks)]

    def exchange(self, send: torch.Tensor, recv: torch.Tensor, *, tag: int = 0) -> PendingExchange:
        """Start sending ``send`` forward while receiving ``recv`` from behind.

        Buffer sizes are known on both sides, so empty buffers are skipped symmetrically.
        """
        ops = []
        if send.numel() > 0:
            ops.append(dist.P2POp(dist.isend, send, peer=self.next_peer, group=self.group, tag=tag))
        if recv.numel() > 0:
            ops.append(dist.P2POp(dist.irecv, recv, peer=self.prev_peer, group=self.group, tag=tag))
        works = dist.batch_isend_irecv(ops) if ops else []
        return PendingExchange(works=list(works), bytes_sent=tensor_bytes(send))


def all_to_all_rows(
    send: torch.Tensor, send_rows: Sequence[int], recv_rows: Sequence[int], group: dist.ProcessGroup | None
) -> tuple[torch.Tensor, int]:
    """All-to-all over dim 0 with uneven splits; returns the received rows and the bytes sent to others."""
    if group is None or dist.get_world_size(group) == 1:
        return send, 0
    recv = send.new_empty((sum(recv_rows), *send.shape[1:]))
    dist.all_to_all_single(
        recv, send.contiguous(), output_split_sizes=list(recv_rows), input_split_sizes=list(send_rows), group=group
    )
    row_bytes = tensor_bytes(send) // max(send.shape[0], 1)
    own_rows = send_rows[dist.get_rank(group)]
    return recv, (send.shape[0] - own_rows) * row_bytes
