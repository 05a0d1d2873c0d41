"""FCPFeature's patches (registered in its validate_args hook): the exact registrations, and the megatron-core patches applied for real.

Patched functions are exercised on one CPU process, then every patch is removed again so that the
other tests see stock megatron-core.
"""
from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.models.common.embeddings import rotary_pos_embedding
from megatron.core.models.gpt import gpt_layer_specs, gpt_model
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.pipeline_parallel import schedules
from megatron.core.transformer.dot_product_attention import DotProductAttention

import megatron.core.utils as mcore_utils
from mindspeed_mm.core.fcp.executor.attention import FCPCoreAttention
from mindspeed_mm.core.fcp.executor.config import ModelConfig
from mindspeed_mm.core.fcp.executor.model import build_gpt_model, transformer_config
from mindspeed_mm.core.fcp.executor.packed_seq import FCPPackedSeqParams
from mindspeed_mm.features_manager.fcp import FCPFeature
from mindspeed_mm.features_manager.fcp.adapters import batch as batch_adapter
from mindspeed_mm.features_manager.fcp.adapters import layer_spec, model_parallel, rotary, schedule
from mindspeed_mm_fcp.mindspeed_compat import USING_MINDSPEED, MindSpeedPatchesManager
from mindspeed_mm.features_manager.fcp.patches import FCP_PATCHES, active_patches
from mindspeed_mm.features_manager.fcp.runtime import get_fcp_runtime, reset_fcp_runtime
from mindspeed_mm.features_manager.fcp.validation import FCPArgumentError
from mindspeed_mm.core.fcp.solver import GroupPlan, Plan, RoundPlan

MODEL = ModelConfig(
    num_layers=2, hidden_size=32, ffn_hidden_size=48, num_attention_heads=4, num_query_groups=2,
    vocab_size=64, seq_length=64,
)

STOCK = {
    "local_spec": gpt_layer_specs.get_gpt_layer_local_spec,
    "rotary": rotary_pos_embedding.RotaryEmbedding,
    "initialize": parallel_state.initialize_model_parallel,
    "batch": mcore_utils.get_batch_on_this_cp_rank,
    "schedule": schedules.get_forward_backward_func,
}

EXPECTED_MEGATRON_CORE_PATCHES = {
    "megatron.core.models.gpt.gpt_layer_specs.get_gpt_layer_local_spec":
        layer_spec.get_gpt_layer_local_spec_wrapper,
    "megatron.core.models.gpt.gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec":
        layer_spec.get_gpt_layer_with_transformer_engine_spec_wrapper,
    "megatron.core.models.common.embeddings.rotary_pos_embedding.RotaryEmbedding": rotary.FCPRotaryEmbedding,
    "megatron.core.parallel_state.initialize_model_parallel": model_parallel.initialize_model_parallel_wrapper,
    "megatron.core.utils.get_batch_on_this_cp_rank": batch_adapter.get_batch_on_this_cp_rank,
    "megatron.core.pipeline_parallel.schedules.get_forward_backward_func":
        schedule.get_forward_backward_func_wrapper,
}


def make_plan(rounds: list[list[tuple[tuple[int, ...], str, tuple[int, ...]]]], num_ranks: int) -> Plan:
    """A plan from (ranks, algo, sample positions) per group per round; predicted times are dummies."""
    return Plan(
        rounds=tuple(
            RoundPlan(
                groups=tuple(
                    GroupPlan(ranks=r, degree=len(r), algo=a, samples=s, predicted_ms=1.0) for r, a, s in groups
                ),
                predicted_ms=1.0,
            )
            for groups in rounds
        ),
        predicted_ms=float(len(rounds)),
        lower_bound_ms=1.0,
        solver_ms=0.0,
        num_ranks=num_ranks,
    )


class RecordingPatchManager:
    """Records registrations instead of patching."""

    def __init__(self) -> None:
        self.registered: dict[str, Any] = {}

    def register_patch(self, target: str, new_obj: Any, force_patch: bool = False) -> None:
        assert target not in self.registered, f"{target} registered twice"
        self.registered[target] = new_obj

    def apply_patches(self) -> None:
        pass


def patch_through_the_hooks(manager: Any, args: argparse.Namespace) -> None:
    """The adaptor hands the feature its patch manager; Megatron's validation makes it patch."""
    feature = FCPFeature()
    feature.register_patches(manager, args)
    feature.validate_args(args)


def fcp_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for flag in ("--context-parallel-size", "--tensor-model-parallel-size", "--pipeline-model-parallel-size"):
        parser.add_argument(flag, type=int, default=1)
    parser.add_argument("--num-attention-heads", type=int, default=4)
    FCPFeature().register_args(parser)
    args = parser.parse_args(["--context-parallel-algo", "fcp_cp_algo", *argv])
    args.world_size = 1
    return args


@pytest.fixture()
def one_process_world() -> Iterator[None]:
    """A one-process gloo world without megatron-core model-parallel state."""
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    parallel_state.destroy_model_parallel()
    yield
    parallel_state.destroy_model_parallel()
    if created:
        dist.destroy_process_group()


@pytest.fixture()
def applied_patches() -> Iterator[None]:
    """The FCP feature's patches applied through the patch manager; removed afterwards."""
    MindSpeedPatchesManager.patches_info.clear()
    try:
        patch_through_the_hooks(MindSpeedPatchesManager, fcp_args("--fcp-preset", "cpu-tiny"))
        yield
    finally:
        MindSpeedPatchesManager.remove_patches()
        MindSpeedPatchesManager.patches_info.clear()  # MindSpeed keeps emptied entries that remember originals
        reset_fcp_runtime()


def test_exact_registrations() -> None:
    manager = RecordingPatchManager()
    patch_through_the_hooks(manager, fcp_args("--fcp-preset", "cpu-tiny"))
    # megatron.training is not installed here (megatron-core only); mindspeed is in the upstream session
    expected = dict(EXPECTED_MEGATRON_CORE_PATCHES)
    if USING_MINDSPEED:
        expected["mindspeed.utils.get_batch_on_this_cp_rank"] = batch_adapter.get_batch_on_this_cp_rank
    assert {p.requires for p in active_patches()} == ({"megatron.core", "mindspeed"} if USING_MINDSPEED
                                                      else {"megatron.core"})
    assert manager.registered == expected
    assert [p.target for p in FCP_PATCHES if p.requires != "megatron.core"] == [
        "megatron.training.utils.get_batch_on_this_cp_rank",
        "mindspeed.utils.get_batch_on_this_cp_rank",
        "mindspeed_mm.data.dataloader.dataloader.prepare_sampler_dataloader",
        "mindspeed_mm.models.transformers.qwen3vl.modeling_qwen3_vl.Qwen3VLModel.forward",
        "mindspeed_mm.models.transformers.qwen3vl.modules.Qwen3VLTextAttention.forward",
        "mindspeed_mm.models.transformers_model.TransformersModel.build_loss_ctx",
    ]
    assert all(p.load_adapter() is batch_adapter.get_batch_on_this_cp_rank for p in FCP_PATCHES[6:8])
    # MindSpeed-MM's own modules are not importable without its checkout: those patches are not registered here
    assert all(p.requires.startswith("mindspeed_mm.") and p not in active_patches() for p in FCP_PATCHES[8:])


def test_registration_configures_the_runtime() -> None:
    patch_through_the_hooks(RecordingPatchManager(), fcp_args(
        "--fcp-preset", "cpu-tiny", "--fcp-group-pool", "prewarm", "--fcp-max-degree", "1",
        "--fcp-comm-timeout-s", "7.5"))
    settings = get_fcp_runtime().settings
    assert (settings.group_pool, settings.max_degree, settings.comm_timeout_s) == ("prewarm", 1, 7.5)
    reset_fcp_runtime()


def test_invalid_arguments_register_nothing() -> None:
    manager = RecordingPatchManager()
    with pytest.raises(FCPArgumentError, match="--fcp-preset"):
        patch_through_the_hooks(manager, fcp_args("--fcp-preset", "no-such-preset"))
    assert manager.registered == {}


def test_layer_spec_patch_puts_fcp_core_attention_in(applied_patches: None) -> None:
    spec = gpt_layer_specs.get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm")
    assert spec.submodules.self_attention.submodules.core_attention is FCPCoreAttention
    assert spec.submodules.mlp is not None


def test_patches_are_removed_again(applied_patches: None) -> None:
    MindSpeedPatchesManager.remove_patches()
    spec = gpt_layer_specs.get_gpt_layer_local_spec()
    assert spec.submodules.self_attention.submodules.core_attention is DotProductAttention
    assert gpt_layer_specs.get_gpt_layer_local_spec is STOCK["local_spec"]
    assert rotary_pos_embedding.RotaryEmbedding is gpt_model.RotaryEmbedding is STOCK["rotary"]
    assert parallel_state.initialize_model_parallel is STOCK["initialize"]
    assert mcore_utils.get_batch_on_this_cp_rank is STOCK["batch"]
    assert schedules.get_forward_backward_func is STOCK["schedule"]


def test_transformer_engine_spec_wrapper_swaps_core_attention() -> None:
    # Transformer Engine is not installed here, so the stock spec cannot be built: wrap the local one.
    wrapped = layer_spec.get_gpt_layer_with_transformer_engine_spec_wrapper(
        lambda **kwargs: gpt_layer_specs.get_gpt_layer_local_spec(**kwargs))
    assert wrapped(qk_layernorm=True).submodules.self_attention.submodules.core_attention is FCPCoreAttention


def test_rotary_forward_on_cpu_matches_megatron_at_shard_positions(applied_patches: None) -> None:
    assert gpt_model.RotaryEmbedding is rotary.FCPRotaryEmbedding, "GPTModel must construct the FCP rotary"
    fcp_rope = rotary_pos_embedding.RotaryEmbedding(kv_channels=16, rotary_percent=1.0, rotary_base=500)
    MindSpeedPatchesManager.remove_patches()
    stock = rotary_pos_embedding.RotaryEmbedding(
        kv_channels=16, rotary_percent=1.0, rotary_base=500, use_cpu_initialization=True)
    freqs = stock.get_freqs_non_repeated(48)
    positions = torch.tensor([0, 1, 46, 47, 5, 3, 3])  # a zigzag shard: two chunks of several documents
    got = fcp_rope(positions)
    torch.testing.assert_close(got[:, 0], torch.cat((freqs, freqs), dim=-1)[positions], rtol=0, atol=0)


@pytest.mark.parametrize("bad", [{"rotary_percent": 0.5}, {"rotary_interleaved": True},
                                 {"seq_len_interpolation_factor": 2.0}, {"rope_scaling": True}])
def test_rotary_rejects_variants_shards_cannot_use(bad: dict[str, Any]) -> None:
    kwargs = {"kv_channels": 16, "rotary_percent": 1.0, **bad}
    with pytest.raises(ValueError, match=next(iter(bad))):
        rotary.FCPRotaryEmbedding(**kwargs)


def test_model_parallel_patch_records_layout_and_refuses_static_cp(
    one_process_world: None, applied_patches: None
) -> None:
    with pytest.raises(ValueError, match="context_parallel_size=2"):
        parallel_state.initialize_model_parallel(context_parallel_size=2)
    assert not parallel_state.model_parallel_is_initialized()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1)
    layout = get_fcp_runtime().require_layout()
    assert (layout.planes, layout.fcp_rank, layout.num_fcp_ranks) == (((0,),), 0, 1)


def test_stock_gpt_model_built_after_patching_trains_like_the_fcp_executor(
    one_process_world: None, applied_patches: None
) -> None:
    """GPTModel from megatron-core's own layer spec, patched, equals the executor's FCP model on a packed batch
    sharded by the patched batch function and driven round by round by the patched schedule."""
    parallel_state.initialize_model_parallel()
    runtime = get_fcp_runtime()
    lengths = [9, 4, 13]
    plan = make_plan([[((0,), "ring", (0, 2))], [((0,), "ring", (1,))]], num_ranks=1)
    runtime.set_plan_source(lambda: plan)

    torch.manual_seed(3)
    tokens = torch.randint(0, MODEL.vocab_size, (sum(lengths) + len(lengths),))
    documents, start = [], 0
    for length in lengths:
        documents.append(tokens[start : start + length + 1])
        start += length + 1

    def round_batch(positions: tuple[int, ...]) -> dict[str, Any]:
        docs = [documents[p] for p in positions]
        cu = torch.tensor([0] + [len(d) - 1 for d in docs]).cumsum(0)
        return {
            "tokens": torch.cat([d[:-1] for d in docs]).unsqueeze(0),
            "labels": torch.cat([d[1:] for d in docs]).unsqueeze(0),
            "loss_mask": torch.ones(1, int(cu[-1])),
            "attention_mask": None,
            "cu_seqlens": cu,
        }

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        patched_model = GPTModel(
            config=transformer_config(MODEL),
            transformer_layer_spec=gpt_layer_specs.get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm"),
            vocab_size=MODEL.vocab_size,
            max_sequence_length=MODEL.seq_length,
            position_embedding_type="rope",
            rotary_base=MODEL.rotary_base,
            share_embeddings_and_output_weights=False,
        )
    assert isinstance(patched_model.rotary_pos_emb, rotary.FCPRotaryEmbedding)

    def forward_step(data_iterator: Iterator[None], model: GPTModel) -> torch.Tensor:
        next(data_iterator)
        fcp_round = runtime.current_round
        batch = mcore_utils.get_batch_on_this_cp_rank(round_batch(fcp_round.batch_positions))
        assert isinstance(batch["packed_seq_params"], FCPPackedSeqParams)
        losses = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"],
                       packed_seq_params=batch["packed_seq_params"])
        return (losses.reshape(-1) * batch["loss_mask"].reshape(-1)).sum()

    def plain_schedule(*, forward_step_func: Any, data_iterator: Any, model: Any, num_microbatches: int,
                       **_: Any) -> list[float]:
        """megatron-core's no-pipelining loop without its CUDA token counter."""
        losses = []
        for _ in range(num_microbatches):
            loss = forward_step_func(data_iterator, model)
            loss.backward()
            losses.append(float(loss.detach()))
        return losses

    driver = schedule.fcp_forward_backward(plain_schedule)
    round_losses = driver(forward_step_func=forward_step, data_iterator=iter(range(10)), model=patched_model,
                          num_microbatches=7, seq_length=MODEL.seq_length, micro_batch_size=1)
    assert len(round_losses) == 2, "one micro-batch per planned round, whatever Megatron asked for"
    MindSpeedPatchesManager.remove_patches()

    reference = build_gpt_model(MODEL, seed=11)
    whole = round_batch((0, 1, 2))
    cu = whole.pop("cu_seqlens")
    positions = torch.cat([torch.arange(n) for n in (cu[1:] - cu[:-1]).tolist()])
    params = FCPPackedSeqParams(cu_seqlens=cu, position_ids=positions, group=None, degree=1, algo="ring")
    reference_loss = (reference(whole["tokens"], positions.unsqueeze(0), None, labels=whole["labels"],
                                packed_seq_params=params).reshape(-1)).sum()
    reference_loss.backward()
    torch.testing.assert_close(torch.tensor(sum(round_losses)), reference_loss.detach(), rtol=1e-5, atol=1e-5)
    for (name, got), (_, expected) in zip(patched_model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(got.grad, expected.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_schedule_patch_returns_the_fcp_driver(one_process_world: None, applied_patches: None) -> None:
    parallel_state.initialize_model_parallel()
    driver = schedules.get_forward_backward_func()
    assert driver.__wrapped__ is schedules.forward_backward_no_pipelining
    assert driver is not schedules.forward_backward_no_pipelining
