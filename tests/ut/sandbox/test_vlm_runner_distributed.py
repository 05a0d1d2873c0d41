"""VLM round runner on 4 gloo ranks with a hand-made plan (groups of 3 + 1, then 2 + 2, ring and
Ulysses): the step's loss and all-reduced gradients (vision encoder and decoder) equal the
single-process reference; each rank encodes exactly the frame groups the product's split assigns it (patches
counted at the encoder's input) and no frame group is encoded twice; a rank with nothing to encode still
takes part in the exchange."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from distributed_utils import run_distributed, whole_world_runtime
from mindspeed_mm.core.fcp.sandbox.run_config import parse_run_config
from mindspeed_mm.core.fcp.sandbox.grad_sync import allreduce_gradients
from mindspeed_mm.core.fcp.sandbox.reference_training import ReferenceCoreAttention, backward_batch
from mindspeed_mm.core.fcp.sandbox.sampler import PlanAwareSampler
from mindspeed_mm.core.fcp.sandbox.vision.video_dataset import build_video_dataset
from mindspeed_mm.core.fcp.runtime.media_pieces import assign_media, media_pieces
from mindspeed_mm.core.fcp.sandbox.vision.group_media import group_media
from mindspeed_mm.core.fcp.sandbox.vision.vlm_model import build_vlm_model
from mindspeed_mm.core.fcp.sandbox.vision.vlm_reference import sample_token_losses
from mindspeed_mm.core.fcp.sandbox.vision.vlm_round_runner import VLMRoundRunner
from mindspeed_mm.core.fcp.solver import GroupPlan, Plan, RoundPlan

WORLD_SIZE = 4
CONFIG = {
    "gpt_args": {
        "global_batch_size": 6,
        "train_iters": 1,
        "seq_length": 96,
        "num_layers": 2,
        "hidden_size": 32,
        "ffn_hidden_size": 48,
        "num_attention_heads": 4,
        "num_query_groups": 2,
        "vocab_size": 64,
        "seed": 8,
        "fcp_preset": "cpu-tiny",
    },
    "vision": {
        "num_layers": 1,
        "hidden_size": 16,
        "ffn_hidden_size": 32,
        "num_attention_heads": 2,
        "frame_scale": 3,
        "grid_scale": 10,
        "text_scale": 20,
    },
    "data": {"dataset": "openvid", "seed": 2},
}
# Frame groups of batch samples 0..5 with these options: 5, 2, 3, 2, 1, 1.
FRAME_GROUPS = (5, 2, 3, 2, 1, 1)
# (ranks, algo, batch positions) per group, per round. Round 1's Ulysses pair gets a one-frame-group
# sample, so one of its ranks encodes nothing.
LAYOUT = (
    (((0, 1, 2), "ring", (0, 2)), ((3,), "ring", (1,))),
    (((0, 1), "ulysses", (4,)), ((2, 3), "ring", (3, 5))),
)


def _plan() -> Plan:
    rounds = tuple(
        RoundPlan(
            groups=tuple(
                GroupPlan(ranks=ranks, degree=len(ranks), algo=algo, samples=samples, predicted_ms=1.0)
                for ranks, algo, samples in groups
            ),
            predicted_ms=1.0,
        )
        for groups in LAYOUT
    )
    return Plan(rounds=rounds, predicted_ms=2.0, lower_bound_ms=1.0, solver_ms=0.0, num_ranks=WORLD_SIZE)


def _worker(rank: int, world_size: int) -> dict:
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(1, 1)
    config = parse_run_config(CONFIG)
    assert config.vision is not None
    dataset = build_video_dataset(config)
    loaded: list[tuple[int, int]] = []
    load_frame_group = dataset.frame_group

    def recording_frame_group(index: int, group: int) -> torch.Tensor:
        loaded.append((index, group))
        return load_frame_group(index, group)

    dataset.frame_group = recording_frame_group  # type: ignore[method-assign]
    sampler = PlanAwareSampler(dataset, global_batch_size=6, num_steps=1)
    model = build_vlm_model(config.model, config.vision, config.training.seed)
    encoded_patches = []
    model.vision.patch_embed.register_forward_hook(lambda _m, args, _out: encoded_patches.append(args[0].shape[0]))
    plan = _plan()
    runner = VLMRoundRunner(model, sampler, whole_world_runtime(rank, world_size), torch.device("cpu"))
    output = runner.run_step(plan, step=0)
    allreduce_gradients(list(model.parameters()))
    loss_sum = output.loss_sum.clone()
    torch.distributed.all_reduce(loss_sum)
    result = {
        "loss": float(loss_sum) / sampler.batch_loss_tokens(0),
        "grads": {name: p.grad.clone() for name, p in model.named_parameters()},
        "loaded": list(loaded),
        "encoder_input_patches": sum(encoded_patches),
        "round_patches": [r.vision_patches for r in output.rounds],
        "accounted_patches": output.accounting.vision_patches,
        "tokens": output.accounting.tokens,
    }
    if rank == 0:
        reference = build_vlm_model(config.model, config.vision, config.training.seed,
                                    core_attention=ReferenceCoreAttention)
        result["reference_loss"] = backward_batch(lambda index: sample_token_losses(reference, dataset, index).sum(),
                                                  sampler.batch_indices(0), sampler.batch_loss_tokens(0))
        result["reference_grads"] = {name: p.grad.clone() for name, p in reference.named_parameters()}
        result["layouts"] = [dataset.layout(i) for i in range(6)]
    parallel_state.destroy_model_parallel()
    return result


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return run_distributed(_worker, WORLD_SIZE, timeout_s=240.0)


def test_step_matches_single_process_reference(results: list[dict]) -> None:
    reference = results[0]
    names = list(reference["reference_grads"])
    assert any(n.startswith("vision.") for n in names) and any(n.startswith("decoder.") for n in names)
    for rank, result in enumerate(results):
        assert result["loss"] == pytest.approx(reference["reference_loss"], rel=1e-5)
        for name, grad in result["grads"].items():
            torch.testing.assert_close(grad, reference["reference_grads"][name], msg=f"rank {rank} {name}")
    tokens = sum(r["tokens"] for r in results)
    assert tokens.tolist() == [layout.length for layout in reference["layouts"]]


def test_each_rank_encodes_exactly_its_share(results: list[dict]) -> None:
    layouts = results[0]["layouts"]
    assert tuple(layout.frame_groups for layout in layouts) == FRAME_GROUPS
    plan = _plan()
    for rank, result in enumerate(results):
        expected_units: list[tuple[int, int]] = []
        expected_round_patches = []
        for round_plan in plan.rounds:
            group = next(g for g in round_plan.groups if rank in g.ranks)
            media = group_media([layouts[s] for s in group.samples], list(group.samples), group.degree)
            pieces = media_pieces(media.items, group.degree)
            owners = assign_media([piece.patches for piece in pieces], group.degree)
            mine = group.ranks.index(rank)
            expected_units += [unit for piece, owner in zip(pieces, owners) if owner == mine
                               for unit in media.frame_groups(*piece.pixel_rows)]
            expected_round_patches.append(media.member_patches[mine])
        assert result["loaded"] == expected_units, f"rank {rank}"
        assert result["round_patches"] == expected_round_patches, f"rank {rank}"
        # patches counted where they enter the encoder
        assert result["encoder_input_patches"] == sum(expected_round_patches), f"rank {rank}"
    # round 0's group of 3 splits its 8 frame groups over all three ranks; in round 1 one rank of the
    # Ulysses pair has nothing to encode
    assert all(results[r]["round_patches"][0] > 0 for r in range(3))
    assert sorted(results[r]["round_patches"][1] for r in range(2))[0] == 0


def test_no_frame_group_is_encoded_twice(results: list[dict]) -> None:
    layouts = results[0]["layouts"]
    counts = Counter(unit for result in results for unit in result["loaded"])
    assert counts == Counter({(i, g): 1 for i, layout in enumerate(layouts) for g in range(layout.frame_groups)})
    accounted = sum(r["accounted_patches"] for r in results)
    assert accounted.tolist() == [float(layout.vision_patches) for layout in layouts]
