"""megatron-core integration on one process: shard RoPE, FCP core attention on packed batches, layer spec."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

from mindspeed_mm.core.fcp.sandbox.core_attention import FCPCoreAttention
from mindspeed_mm.core.fcp.sandbox.run_config import DataConfig, ModelConfig
from mindspeed_mm.core.fcp.sandbox.text_dataset import SyntheticDataset
from mindspeed_mm.core.fcp.sandbox.distributed import init_distributed, shutdown_distributed
from mindspeed_mm.core.fcp.sandbox.gpt_model import build_gpt_model, get_fcp_gpt_layer_spec
from mindspeed_mm.core.fcp.sandbox.packed_seq import FCPPackedSeqParams
from mindspeed_mm.core.fcp.sandbox.reference_training import ReferenceCoreAttention, text_sample_token_losses
from mindspeed_mm.core.fcp.sandbox.round_batch import build_shard_batch

MODEL = ModelConfig(
    num_layers=2,
    hidden_size=32,
    ffn_hidden_size=48,
    num_attention_heads=4,
    num_query_groups=2,
    vocab_size=64,
    seq_length=80,
)


@pytest.fixture(scope="module")
def one_rank() -> Iterator[None]:
    """A one-process gloo world with megatron-core's TP = PP = 1 state."""
    init_distributed(force_cpu=True)
    yield
    shutdown_distributed()


def test_shard_rotary_matches_megatron_rotary_at_any_positions() -> None:
    from mindspeed_mm.core.fcp.sandbox.shard_rotary import ShardRotaryEmbedding

    stock = RotaryEmbedding(kv_channels=16, rotary_percent=1.0, rotary_base=500, use_cpu_initialization=True)
    freqs = stock.get_freqs_non_repeated(40)
    expected = torch.cat((freqs, freqs), dim=-1)
    positions = torch.tensor([0, 7, 3, 39, 12, 12])
    got = ShardRotaryEmbedding(16, 500)(positions)
    assert got.shape == (6, 1, 16)
    torch.testing.assert_close(got[:, 0], expected[positions], rtol=0, atol=0)


def test_layer_spec_swaps_only_the_core_attention() -> None:
    spec = get_fcp_gpt_layer_spec()
    assert spec.submodules.self_attention.submodules.core_attention is FCPCoreAttention
    other = get_fcp_gpt_layer_spec(ReferenceCoreAttention)
    assert other.submodules.self_attention.submodules.core_attention is ReferenceCoreAttention
    assert spec.submodules.mlp == other.submodules.mlp


def test_packed_forward_backward_matches_documents_one_by_one(one_rank: None) -> None:
    dataset = SyntheticDataset(
        DataConfig(dataset="internvid", length_scale=40.0, min_length=3, seed=5),
        num_samples=4,
        seq_length=MODEL.seq_length,
        vocab_size=MODEL.vocab_size,
        token_seed=2,
    )
    samples = [dataset[i] for i in range(4)]
    packed_model = build_gpt_model(MODEL, seed=9)
    reference_model = build_gpt_model(MODEL, seed=9, core_attention=ReferenceCoreAttention)
    for (name, a), (_, b) in zip(packed_model.named_parameters(), reference_model.named_parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)

    batch = build_shard_batch(samples, rank_in_group=0, degree=1, group=None, algo="ring")
    packed_losses = packed_model(
        batch.tokens, batch.position_ids, None, labels=batch.labels, packed_seq_params=batch.packed_seq_params
    ).reshape(-1)
    (packed_losses * batch.loss_mask).sum().backward()

    reference_losses = []
    for sample in samples:
        losses = text_sample_token_losses(reference_model, sample)
        (losses * sample.loss_mask).sum().backward()
        reference_losses.append(losses)
    torch.testing.assert_close(packed_losses, torch.cat(reference_losses))
    for (name, a), (_, b) in zip(packed_model.named_parameters(), reference_model.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, msg=name)


def test_core_attention_needs_fcp_params(one_rank: None) -> None:
    model = build_gpt_model(MODEL, seed=1)
    tokens = torch.zeros(1, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match="ShardRotaryEmbedding needs FCPPackedSeqParams"):
        model(tokens, None, None)
    attention = model.decoder.layers[0].self_attention.core_attention
    q = torch.zeros(4, 4, 8)
    with pytest.raises(ValueError, match="FCPCoreAttention needs FCPPackedSeqParams"):
        attention(q, q[:, :2], q[:, :2], None)
