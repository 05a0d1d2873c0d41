"""A run that freezes the vision tower (the recipe's `image_encoder.*.freeze`) runs the encoder forward only and keeps
none of its activations: its cost model prices that, and holds more tokens per rank."""
import dataclasses

import pytest

from mindspeed_mm.core.fcp.cost.builder import build_cost_model, frozen_vision_table
from mindspeed_mm.core.fcp.cost.presets import preset_table


@pytest.mark.parametrize("preset", ["h200-qwen3vl-8b", "a3-qwen3vl-8b"])
def test_a_frozen_encoder_costs_its_forward_pass_and_keeps_no_activations(preset: str) -> None:
    trained = build_cost_model(preset=preset, profile_table=None, max_tokens_per_rank=None, shard_ranks=64)
    frozen = build_cost_model(preset=preset, profile_table=None, max_tokens_per_rank=None, shard_ranks=64,
                              vision_frozen=True)
    assert frozen.table.memory.vision_activation_bytes_per_token == 0.0
    assert frozen.capacity_tokens > trained.capacity_tokens
    forward = 1.0 / (1.0 + trained.table.time.linear_backward_ratio)
    images = trained.workload([1000, 2000], [4000, 0])
    text = trained.workload([1000, 2000])
    for degree in (1, 2, 4):
        vision_trained = trained.group_time_ms(images, degree, "ring") - trained.group_time_ms(text, degree, "ring")
        vision_frozen = frozen.group_time_ms(images, degree, "ring") - frozen.group_time_ms(text, degree, "ring")
        assert vision_frozen == pytest.approx(forward * vision_trained, rel=1e-9)
        assert frozen.group_time_ms(text, degree, "ring") == pytest.approx(trained.group_time_ms(text, degree, "ring"))


def test_a_text_only_table_is_left_as_it_is() -> None:
    table = preset_table("cpu-tiny")
    text_only = dataclasses.replace(
        table, model=dataclasses.replace(table.model, vision=None),
        time=dataclasses.replace(table.time, vision_ms_per_patch=0.0, vision_ms_per_call=0.0),
        memory=dataclasses.replace(table.memory, vision_activation_bytes_per_token=0.0))
    text_only.validate()
    assert frozen_vision_table(text_only) is text_only
