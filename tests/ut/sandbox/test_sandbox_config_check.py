"""Start-up agreement of the ranks (whole effective config, rank 0's start-up problem) and communication
failures that name the step and the group."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from distributed_utils import run_distributed
from mindspeed_mm.core.fcp.cli import build_parser, main
from mindspeed_mm.core.fcp.sandbox.fcp_train import effective_run_config
from mindspeed_mm.core.fcp.runtime.comm_errors import CommunicationError, communication, is_communication_failure
from mindspeed_mm.core.fcp.sandbox.run_config import ConfigError, load_run_config, resolve_config_path
from mindspeed_mm.core.fcp.sandbox.config_check import (
    ConfigMismatchError,
    StartupError,
    check_run_agreement,
    config_digest,
    describe_mismatch,
    differing_keys,
    effective_config,
)
from mindspeed_mm.core.fcp.parallel import CommGroupPool

GLOO_TIMEOUT = "[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to complete"


def test_the_effective_config_covers_every_section_and_the_overrides() -> None:
    config = load_run_config("tiny_qwen3_fcp")
    items = effective_config(config, 4)
    assert items["world_size"] == 4 and items["optimizer.lr"] == 1e-3 and items["model.hidden_size"] == 64
    assert items["fcp.comm_timeout_s"] == 300.0 and items["data.seed"] == 7
    assert "source" not in items
    shorter = dataclasses.replace(config, fcp=dataclasses.replace(config.fcp, comm_timeout_s=5.0))
    assert differing_keys([items, effective_config(shorter, 4)]) == ["fcp.comm_timeout_s"]
    assert config_digest(items) != config_digest(effective_config(shorter, 4))
    assert config_digest(items) == config_digest(dict(reversed(list(items.items()))))


def test_a_profile_table_enters_by_its_contents(tmp_path: Path) -> None:
    config = load_run_config("tiny_qwen3_fcp")
    table = tmp_path / "table.json"
    table.write_text("{}")
    with_table = dataclasses.replace(config, fcp=dataclasses.replace(config.fcp, preset=None,
                                                                      profile_table=str(table)))
    before = effective_config(with_table, 2)
    table.write_text('{"other": 1}')
    assert differing_keys([before, effective_config(with_table, 2)]) == ["fcp.profile_table_sha256"]


def test_a_mismatch_is_described_by_key_and_ranks() -> None:
    base = {"optimizer.lr": 0.001, "training.seed": 1, "model.hidden_size": 64}
    other = {**base, "optimizer.lr": 0.1, "training.seed": 2}
    text = describe_mismatch([base, base, other])
    assert text == ("optimizer.lr (ranks [0, 1]: 0.001; ranks [2]: 0.1), "
                    "training.seed (ranks [0, 1]: 1; ranks [2]: 2)")
    assert describe_mismatch([base, {"optimizer.lr": 0.001, "model.hidden_size": 64}]) == (
        "training.seed (ranks [0]: 1; ranks [1]: <unset>)")


def test_comm_timeout_must_be_positive(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    shipped = resolve_config_path("tiny_qwen3_fcp").read_text(encoding="utf-8")
    path.write_text(shipped.replace("fcp_log_plan: true", "fcp_log_plan: true\n  fcp_comm_timeout_s: 0"))
    with pytest.raises(ConfigError, match="gpt_args.fcp_comm_timeout_s: must be a positive number of seconds"):
        load_run_config(path)


def test_only_communication_failures_are_renamed() -> None:
    with pytest.raises(CommunicationError) as err:
        with communication("step 3", "gradient all-reduce (world group)", [0, 1, 2], 5.0):
            raise RuntimeError(GLOO_TIMEOUT)
    assert str(err.value).startswith("step 3: gradient all-reduce (world group) over the group of ranks [0, 1, 2] "
                                     "failed within the 5 s communication timeout")
    assert GLOO_TIMEOUT in str(err.value)
    for other in (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), ValueError("bad plan")):
        assert not is_communication_failure(other)
        with pytest.raises(type(other), match=str(other)):
            with communication("step 1", "round 1", [0, 1]):
                raise other


def _agreement(rank: int, world_size: int) -> list[str]:
    """Three start-ups in one world: differing settings, a start-up problem of rank 0, agreement."""
    messages = []
    base = {"optimizer.lr": 0.001, "training.seed": 1}
    mine = {**base, "optimizer.lr": 0.1} if rank == 2 else base
    for items, problem in ((mine, None), (base, "--output-dir /x: exists and is not a folder" if rank == 0 else None),
                           (base, None)):
        try:
            check_run_agreement(items, problem)
            messages.append("agreed")
        except (ConfigMismatchError, StartupError) as err:
            messages.append(f"{type(err).__name__}: {err}")
    return messages


def test_every_rank_stops_with_the_same_error() -> None:
    per_rank = run_distributed(_agreement, 3)
    assert per_rank[0] == per_rank[1] == per_rank[2]
    mismatch, startup, agreed = per_rank[0]
    assert mismatch.startswith("ConfigMismatchError: ranks were started with different configurations")
    assert mismatch.endswith("optimizer.lr (ranks [0, 1]: 0.001; ranks [2]: 0.1)")
    assert startup == "StartupError: rank 0 cannot start the run: --output-dir /x: exists and is not a folder"
    assert agreed == "agreed"


def _pool_timeout(rank: int, world_size: int) -> str:
    pool = CommGroupPool(timeout_s=1.0)
    pool.prewarm([(0, 1)])
    message = ""
    if rank == 0:  # rank 1 never joins this all-reduce
        try:
            with communication("step 7", "round 2 (ring attention)", (0, 1), pool.timeout_s):
                dist.all_reduce(torch.ones(2), group=pool.get((0, 1)))
        except CommunicationError as err:
            message = str(err)
    dist.barrier()
    return message


def test_pool_groups_time_out_after_the_pool_timeout() -> None:
    message = run_distributed(_pool_timeout, 2)[0]
    assert message.startswith("step 7: round 2 (ring attention) over the group of ranks [0, 1] failed within the "
                              "1 s communication timeout")
    # The backend's own message shows which timeout applied: the pool's 1 s, not the world's.
    assert "1000ms" in message


def test_pool_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout_s must be a positive number of seconds, got 0"):
        CommGroupPool(timeout_s=0)


def test_the_command_line_timeout_overrides_the_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    config = effective_run_config(parser.parse_args(["train", "tiny_qwen3_fcp", "--comm-timeout-s", "7.5"]))
    assert config.fcp.comm_timeout_s == 7.5
    assert effective_run_config(parser.parse_args(["train", "tiny_qwen3_fcp"])).fcp.comm_timeout_s == 300.0
    assert main(["train", "tiny_qwen3_fcp", "--comm-timeout-s", "0"]) == 2
    assert "--comm-timeout-s: must be a positive number of seconds, got '0'" in capsys.readouterr().err
