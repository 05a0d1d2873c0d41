"""Parameter, FLOP and activation-byte counts of the decoder and vision-encoder shapes.

Pure arithmetic on a model shape; the presets turn these counts into times and bytes. Formulas:
- matmul FLOPs = 2 x multiply-accumulates; a linear layer with P weights costs 2 P FLOPs per token.
- attention core forward FLOPs of one document of s tokens = 4 s^2 head_dim heads (Q K^T and
  P V), halved by a causal mask.
- activation bytes kept per token and layer (16-bit, SwiGLU, GQA, RMSNorm, no dropout, fused
  attention keeping q, k, v and its output): 8 h + 4 heads hd + 4 kv_heads hd + 6 ffn
  (presets.md 3a, [inferred] variant of [kor]); full recompute keeps only the layer input, 2 h.
- vision blocks (LayerNorm, GELU MLP, MHA): 16 h_v + 4 mlp bytes per patch and block [inferred,
  same accounting: norm input 2h, q/k/v 6h, attention output 2h, residual + norm 4h, 2h spare for
  the MLP input, fc1 output and GELU output 2 mlp each].
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DecoderShape:
    """LLM decoder shape plus the few details that change parameter counts."""

    layers: int
    """Transformer layers."""
    hidden: int
    """Hidden size."""
    heads: int
    """Query heads."""
    kv_heads: int
    """Key/value heads."""
    head_dim: int
    """Head size."""
    ffn: int
    """SwiGLU intermediate size."""
    vocab: int
    """Vocabulary size."""
    tied_embeddings: bool
    """Whether the LM head shares the embedding matrix."""
    qkv_bias: bool
    """Whether the q/k/v projections carry biases."""
    qk_norm: bool
    """Whether q and k get an RMSNorm per head."""

    def layer_matmul_params(self) -> int:
        """Weights of the matmuls of one layer (q, k, v, o, gate, up, down)."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return self.hidden * (q + 2 * kv) + q * self.hidden + 3 * self.hidden * self.ffn

    def layer_params(self) -> int:
        """All parameters of one layer."""
        extra = 2 * self.hidden
        if self.qk_norm:
            extra += 2 * self.head_dim
        if self.qkv_bias:
            extra += (self.heads + 2 * self.kv_heads) * self.head_dim
        return self.layer_matmul_params() + extra

    def embedding_params(self) -> int:
        """Input embedding (and final norm)."""
        return self.vocab * self.hidden + self.hidden

    def head_params(self) -> int:
        """LM head weights held separately from the embedding (0 when tied)."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    def attention_forward_flops(self, tokens: float, causal: bool) -> float:
        """Forward FLOPs of the attention core over one document of `tokens` tokens (all heads)."""
        flops = 4.0 * tokens * tokens * self.head_dim * self.heads
        return flops / 2 if causal else flops

    def layer_activation_bytes(self) -> int:
        """16-bit activation bytes one layer keeps per token without recompute."""
        return (8 * self.hidden + 4 * self.heads * self.head_dim + 4 * self.kv_heads * self.head_dim
                + 6 * self.ffn)


@dataclass(frozen=True)
class EncoderShape:
    """Vision encoder shape plus the merger that maps patches to LLM tokens."""

    depth: int
    """Vision blocks."""
    hidden: int
    """Vision hidden size."""
    heads: int
    """Vision attention heads."""
    mlp: int
    """Vision MLP size."""
    patch_size: int
    """Patch side in pixels."""
    spatial_merge: int
    """Patches merged per side into one LLM token."""
    temporal_patch: int
    """Frames per patch along time."""
    out_hidden: int
    """LLM hidden size the merger projects to."""
    mergers: int
    """Patch mergers (1 + number of DeepStack mergers)."""
    attention_window: int
    """Patches in one vision attention sequence (one frame group or image tile)."""

    @property
    def patches_per_token(self) -> int:
        """Patches merged into one LLM token."""
        return self.spatial_merge * self.spatial_merge

    def block_matmul_params(self) -> int:
        """Weights of the matmuls of one vision block (q, k, v, o, fc1, fc2)."""
        return 4 * self.hidden * self.hidden + 2 * self.hidden * self.mlp

    def merger_params(self) -> int:
        """Weights of all mergers: (hidden merge^2) -> same -> out_hidden MLPs."""
        merged = self.hidden * self.patches_per_token
        return self.mergers * (merged * merged + merged * self.out_hidden)

    def params(self) -> int:
        """All vision parameters (biases and norms approximated as 10 hidden + mlp per block)."""
        patch_embed = 3 * self.temporal_patch * self.patch_size * self.patch_size * self.hidden
        per_block = self.block_matmul_params() + 10 * self.hidden + self.mlp
        return self.depth * per_block + patch_embed + self.merger_params()

    def matmul_forward_flops_per_patch(self) -> float:
        """Forward matmul FLOPs per patch: blocks plus mergers (a merger sees merge^2 patches at once)."""
        merged = self.hidden * self.patches_per_token
        merger = self.mergers * 2.0 * (merged * merged + merged * self.out_hidden) / self.patches_per_token
        return self.depth * 2.0 * self.block_matmul_params() + merger

    def attention_forward_flops_per_patch(self) -> float:
        """Forward attention-core FLOPs per patch (full mask over the attention window)."""
        return self.depth * 4.0 * self.attention_window * self.hidden

    def block_activation_bytes(self) -> int:
        """16-bit activation bytes one vision block keeps per patch without recompute."""
        return 16 * self.hidden + 4 * self.mlp
