"""`PackedSeqParams` extended with what FCP attention needs for one round on one rank."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from megatron.core.packed_seq_params import PackedSeqParams

from mindspeed_mm.core.fcp.parallel import AttentionGroup


@dataclass
class FCPPackedSeqParams(PackedSeqParams):
    """Per-round attention context, passed down megatron-core's `packed_seq_params` argument.

    megatron-core's own `cu_seqlens_q` / `cu_seqlens_kv` stay unset: when they are set, its attention
    applies RoPE per document assuming the local tokens sit at positions 0, 1, ... of each document,
    which a zigzag shard does not. FCP instead gives each token its rotary angle from `position_ids`
    (see `ShardRotaryEmbedding`) and passes the group's layout in `cu_seqlens`.
    """

    cu_seqlens: torch.Tensor | None = None
    """`[num_docs + 1]` int64 document boundaries of the group's whole packed batch (same on all its ranks)."""
    position_ids: torch.Tensor | None = None
    """`[shard_tokens]` int64 position of each of this rank's tokens inside its own document."""
    group: AttentionGroup = None
    """What the attention of this rank's round runs over: its CP group, or a hybrid group's block and ring."""
    degree: int = 1
    """Ranks in the CP group."""
    algo: str = "ring"
    """How attention is split over the group: "ring", "ulysses" or "hybrid"."""
    kernel: str = "auto"
    """Local attention kernel (a value of `fcp_attention_kernel`)."""

    def __post_init__(self) -> None:
        if self.qkv_format is None:
            self.qkv_format = "thd"

    def to(self, device: torch.device) -> "FCPPackedSeqParams":
        """The same parameters (of the same class) with every tensor on `device`."""
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                 if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **moved)
