"""A self-contained decoder (RMSNorm, GQA with RoPE, SwiGLU or a mixture of SwiGLU experts, LM head) built from
plain torch ops.

The profiler times its pieces and the validation runs it whole, so both measure the same code:
QKV / output projections, MLP and norms in torch, the attention core through ``fcp_attention``
(ring or Ulysses over an explicit process group, or local when the group is None). A shape with experts gets
Qwen3-VL MoE's MLP: a softmax router, the top-k experts of each token (weights renormalised over them), the
token rows permuted by expert and each expert's SwiGLU run on its rows, as MindSpeed-MM's unfused MoE path loops
over its experts (`Qwen3VLMoeTextExperts`), and a shared SwiGLU expert where the shape has one.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from mindspeed_mm.core.fcp.cost.shapes import ExpertShape
from mindspeed_mm.core.fcp.cost.table import ModelShape
from mindspeed_mm.core.fcp.parallel import fcp_attention

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ROTARY_BASE = 10000.0

AttentionCore = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(q ``[t, heads, hd]``, k, v ``[t, kv_heads, hd]``) -> out ``[t, heads, hd]`` for this rank's tokens."""


@dataclass(frozen=True)
class ShardInputs:
    """One rank's zigzag shard of a packed batch, ready for the decoder."""

    tokens: torch.Tensor
    """``[t]`` int64 token ids of the shard."""
    labels: torch.Tensor
    """``[t]`` int64 next-token labels of the shard."""
    positions: torch.Tensor
    """``[t]`` int64 position of each token inside its document."""


def fcp_core(cu_seqlens: tuple[int, ...], group: dist.ProcessGroup | None, algo: str, causal: bool) -> AttentionCore:
    """The attention core of a CP group: ``fcp_attention`` over ``group`` with ``algo``."""

    def core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return fcp_attention(q, k, v, cu_seqlens, group=group, algo=algo, causal=causal)

    return core


def skip_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A free stand-in for attention (returns q), to time everything else of a layer."""
    return q


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class ExpertMLP(nn.Module):
    """Qwen3-VL MoE's MLP (module docstring): router, `top_k` of `experts` SwiGLU experts, optional shared expert."""

    def __init__(self, hidden: int, experts: ExpertShape, dtype: torch.dtype) -> None:
        super().__init__()
        self.experts, self.top_k = experts.experts, experts.top_k
        self.router = nn.Linear(hidden, experts.experts, bias=False, dtype=dtype)
        # [experts, hidden, 2 ffn] and [experts, ffn, hidden], as transformers' Qwen3VLMoeTextExperts keeps them.
        self.gate_up = nn.Parameter(0.02 * torch.randn(experts.experts, hidden, 2 * experts.expert_ffn, dtype=dtype))
        self.down = nn.Parameter(0.02 * torch.randn(experts.experts, experts.expert_ffn, hidden, dtype=dtype))
        self.shared = None
        if experts.shared_expert_ffn:
            self.shared = nn.ModuleDict({
                "gate_up": nn.Linear(hidden, 2 * experts.shared_expert_ffn, bias=False, dtype=dtype),
                "down": nn.Linear(experts.shared_expert_ffn, hidden, bias=False, dtype=dtype)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t, hidden = x.shape
        probs = F.softmax(self.router(x).float(), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)           # [t, k]
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        flat = chosen.reshape(-1)                                          # [t * k] expert of each routed copy
        order = torch.argsort(flat, stable=True)
        rows = x[order // self.top_k]                                      # [t * k, hidden] copies grouped by expert
        counts = torch.bincount(flat, minlength=self.experts).tolist()
        outputs, start = [], 0
        for expert, count in enumerate(counts):
            if count:
                gate, up = (rows[start:start + count] @ self.gate_up[expert]).chunk(2, dim=-1)
                outputs.append((F.silu(gate) * up) @ self.down[expert])
                start += count
        permuted = torch.cat(outputs)                                      # [t * k, hidden] in expert order
        routed = torch.empty_like(permuted).index_copy(0, order, permuted).view(t, self.top_k, hidden)
        out = (routed * weights.unsqueeze(-1)).sum(dim=1)                  # [t, hidden]
        if self.shared is not None:
            gate, up = self.shared["gate_up"](x).chunk(2, dim=-1)
            out = out + self.shared["down"](F.silu(gate) * up)
        return out


class DecoderLayer(nn.Module):
    """Pre-norm transformer layer: RMSNorm, fused QKV, RoPE, attention core, output projection, SwiGLU."""

    def __init__(self, shape: ModelShape, dtype: torch.dtype) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = shape.heads, shape.kv_heads, shape.head_dim
        q_width, kv_width = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
        self.attention_norm = nn.RMSNorm(shape.hidden, dtype=dtype)
        self.qkv = nn.Linear(shape.hidden, q_width + 2 * kv_width, bias=False, dtype=dtype)
        self.out = nn.Linear(q_width, shape.hidden, bias=False, dtype=dtype)
        self.mlp_norm = nn.RMSNorm(shape.hidden, dtype=dtype)
        self.experts = None if shape.experts is None else ExpertMLP(shape.hidden, shape.experts, dtype)
        if self.experts is None:
            self.gate_up = nn.Linear(shape.hidden, 2 * shape.ffn, bias=False, dtype=dtype)
            self.down = nn.Linear(shape.ffn, shape.hidden, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, core: AttentionCore) -> torch.Tensor:
        t = x.shape[0]
        qkv = self.qkv(self.attention_norm(x))
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = torch.split(qkv, [q_width, kv_width, kv_width], dim=-1)
        q = _rotate(q.reshape(t, self.heads, self.head_dim), cos, sin)
        k = _rotate(k.reshape(t, self.kv_heads, self.head_dim), cos, sin)
        v = v.reshape(t, self.kv_heads, self.head_dim)
        attended = core(q, k, v).reshape(t, q_width)
        x = x + self.out(attended)
        if self.experts is not None:
            return x + self.experts(self.mlp_norm(x))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Decoder(nn.Module):
    """Embedding, ``shape.layers`` decoder layers, final norm, LM head; returns the summed token loss."""

    def __init__(self, shape: ModelShape, dtype: str = "fp32", seed: int = 0) -> None:
        super().__init__()
        torch_dtype = TORCH_DTYPES[dtype]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embedding = nn.Embedding(shape.vocab, shape.hidden, dtype=torch_dtype)
            self.layers = nn.ModuleList(DecoderLayer(shape, torch_dtype) for _ in range(shape.layers))
            self.final_norm = nn.RMSNorm(shape.hidden, dtype=torch_dtype)
            self.head = nn.Linear(shape.hidden, shape.vocab, bias=False, dtype=torch_dtype)
        exponents = torch.arange(0, shape.head_dim, 2, dtype=torch.float32) / shape.head_dim
        self.register_buffer("inv_freq", 1.0 / (ROTARY_BASE**exponents), persistent=False)

    def forward(self, inputs: ShardInputs, core: AttentionCore) -> torch.Tensor:
        x = self.embedding(inputs.tokens)
        # [t, 1, head_dim] angles broadcast over the heads of [t, heads, head_dim].
        angles = torch.outer(inputs.positions.to(torch.float32), self.inv_freq.to(x.device))
        angles = torch.cat((angles, angles), dim=-1).unsqueeze(1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, core)
        logits = self.head(self.final_norm(x))
        return F.cross_entropy(logits.float(), inputs.labels, reduction="sum")
