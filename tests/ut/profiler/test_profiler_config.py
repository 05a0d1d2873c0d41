"""ProfileConfig and world checks: every bad option raises a ValueError naming it."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from mindspeed_mm.core.fcp.profiler.profile_config import ProfileConfig, model_shape
from mindspeed_mm.core.fcp.profiler.world import check_backend


def test_defaults_profile_the_tiny_decoder_on_the_cpu_clock() -> None:
    config = ProfileConfig()
    assert config.model.name == "tiny" and config.model.vision is None
    assert config.device == "cpu" and config.backend == "gloo" and config.clock == "cpu"
    assert ProfileConfig(clock="wall").clock == "wall"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attention_lengths": (16, 0, 64)}, r"--attention-lengths\[1\] must be an int >= 2, got 0"),
        ({"attention_lengths": (16, 32)}, r"--attention-lengths needs at least 3 values"),
        ({"attention_lengths": (64, 32, 128)}, r"--attention-lengths must be strictly increasing"),
        ({"linear_tokens": (64, -1)}, r"--linear-tokens\[1\] must be an int >= 1, got -1"),
        ({"message_bytes": (1024, 1024)}, r"--message-bytes must be strictly increasing"),
        ({"message_bytes": (0, 1024)}, r"--message-bytes\[0\] must be an int >= 1, got 0"),
        ({"world_size": 1}, r"--world-size 1 measures no communication"),
        ({"world_size": 0}, r"--world-size must be a positive int, got 0"),
        ({"repeats": 0}, r"--repeats must be a positive int, got 0"),
        ({"sweeps": 2.5}, r"--sweeps must be a positive int, got 2.5"),
        ({"warmup": -1}, r"--warmup must be an int >= 0"),
        ({"statistic": "mean"}, r"--statistic must be one of"),
        ({"clock": "tsc"}, r"--clock must be one of"),
        ({"nice": 25}, r"--nice must be an int in -20..19, got 25"),
        ({"min_sample_ms": -1.0}, r"--min-sample-ms must be a number"),
        ({"device": "tpu"}, r"--device must be one of"),
        ({"dtype": "bf16"}, r"--dtype bf16: the CPU profile runs fp32 only"),
        ({"backend": "nccl"}, r"--backend nccl needs --device cuda"),
        ({"backend": "mpi"}, r"--backend must be one of"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProfileConfig(**options)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a host without CUDA")
def test_a_device_that_is_not_there_is_refused() -> None:
    with pytest.raises(ValueError, match="--device cuda: no CUDA device is visible"):
        ProfileConfig(device="cuda", backend="nccl")


def test_cpu_clock_cannot_time_an_accelerator() -> None:
    from mindspeed_mm.core.fcp.profiler.timing import check_clock

    with pytest.raises(ValueError, match="--clock cpu measures host CPU time"):
        check_clock("cpu", "cuda")


def test_hccl_needs_an_npu() -> None:
    with pytest.raises(ValueError, match="--backend hccl needs --device npu"):
        check_backend("hccl", "cpu")


def test_unknown_model_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"--model: unknown model 'gpt5'; valid: \["):
        model_shape("gpt5")


def test_long_attention_lengths_pack_fewer_documents_per_call() -> None:
    config = ProfileConfig()
    assert [config.docs_per_call(n) for n in (16, 256, 512, 4096)] == [8, 8, 4, 1]
