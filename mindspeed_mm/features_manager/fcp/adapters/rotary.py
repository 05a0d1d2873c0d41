"""`RotaryEmbedding` with megatron-core's constructor and FCP's shard positions."""
from __future__ import annotations

from mindspeed_mm.core.fcp.executor.rotary import ShardRotaryEmbedding


class FCPRotaryEmbedding(ShardRotaryEmbedding):
    """Takes megatron-core 0.12's `RotaryEmbedding` arguments and gives each token the angle of its own
    position inside its document (from `FCPPackedSeqParams.position_ids`), on the tokens' device.

    Only the RoPE variant FCP's shards support is accepted: full rotary dimension, non-interleaved,
    no interpolation or Llama-3 scaling; anything else raises instead of training with wrong angles.
    """

    def __init__(
        self,
        kv_channels: int,
        rotary_percent: float,
        rotary_interleaved: bool = False,
        seq_len_interpolation_factor: float | None = None,
        rotary_base: int = 10000,
        rope_scaling: bool = False,
        rope_scaling_factor: float = 8.0,
        use_cpu_initialization: bool = False,
    ) -> None:
        unsupported = {
            "rotary_percent": (rotary_percent, rotary_percent != 1.0),
            "rotary_interleaved": (rotary_interleaved, bool(rotary_interleaved)),
            "seq_len_interpolation_factor": (seq_len_interpolation_factor, seq_len_interpolation_factor is not None),
            "rope_scaling": (rope_scaling, bool(rope_scaling)),
        }
        for name, (value, bad) in unsupported.items():
            if bad:
                raise ValueError(
                    f"FCP's rotary embedding supports full, non-interleaved, unscaled RoPE only; got {name}={value!r}"
                )
        super().__init__(kv_channels, rotary_base)
