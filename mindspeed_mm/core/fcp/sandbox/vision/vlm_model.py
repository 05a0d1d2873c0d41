"""The tiny Qwen3-VL-shaped model: video encoder + merger in front of the executor's decoder with 3D mRoPE."""
from __future__ import annotations

import torch
from megatron.core.models.gpt.gpt_model import GPTModel
from torch import nn

from mindspeed_mm.core.fcp.sandbox.core_attention import FCPCoreAttention
from mindspeed_mm.core.fcp.sandbox.run_config import ModelConfig, VisionConfig
from mindspeed_mm.core.fcp.sandbox.gpt_model import build_gpt_model
from mindspeed_mm.core.fcp.sandbox.vision.encoder import FrameBatch, VisionEncoder
from mindspeed_mm.core.fcp.sandbox.vision.shard_mrope import MRopePackedSeqParams, ShardMRotaryEmbedding

VISION_SEED_OFFSET = 1
"""The encoder is initialised from seed + this, the decoder from the run seed."""


class VisionLanguageModel(nn.Module):
    """`vision` encodes frame groups into merged tokens; `decoder` reads text embeddings with those tokens
    written in at the vision positions and returns per-token losses."""

    def __init__(self, vision: VisionEncoder, decoder: GPTModel) -> None:
        super().__init__()
        self.vision = vision
        self.decoder = decoder

    def encode(self, frames: FrameBatch) -> torch.Tensor:
        """`[merged tokens, hidden]` vision tokens of the frame groups, in order."""
        return self.vision(frames)

    def forward(
        self,
        tokens: torch.Tensor,
        labels: torch.Tensor,
        vision_tokens: torch.Tensor,
        vision_positions: torch.Tensor,
        packed_seq_params: MRopePackedSeqParams,
    ) -> torch.Tensor:
        """`[1, t]` token losses of `tokens [1, t]`; row `vision_positions[i]` takes `vision_tokens[i]`."""
        if vision_tokens.shape[0] != vision_positions.numel():
            raise ValueError(f"{vision_tokens.shape[0]} vision tokens for {vision_positions.numel()} positions")
        embeddings = self.decoder.embedding(input_ids=tokens, position_ids=None)  # [t, b=1, hidden]
        embeddings = embeddings.index_copy(0, vision_positions, vision_tokens.unsqueeze(1).to(embeddings.dtype))
        return self.decoder(
            tokens, None, None, decoder_input=embeddings, labels=labels, packed_seq_params=packed_seq_params
        )


def build_vlm_model(
    model: ModelConfig, vision: VisionConfig, seed: int, core_attention: type = FCPCoreAttention
) -> VisionLanguageModel:
    """The VLM with `core_attention` in the decoder; the same seed gives the same weights."""
    decoder = build_gpt_model(model, seed, core_attention=core_attention)
    sections = vision.mrope_sections(model.head_dim)
    decoder.rotary_pos_emb = ShardMRotaryEmbedding(model.head_dim, model.rotary_base, sections)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + VISION_SEED_OFFSET)
        encoder = VisionEncoder(vision, model.hidden_size, model.init_method_std)
    return VisionLanguageModel(encoder, decoder)
