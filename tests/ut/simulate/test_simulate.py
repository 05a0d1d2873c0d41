"""Strategy simulator, report table and plots on a small cluster of the Qwen3-VL-8B / A3 preset."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.gantt import draw_plan
from mindspeed_mm.core.fcp.simulate.speedup_plot import plot_report
from mindspeed_mm.core.fcp.simulate.simulator import (
    FCP,
    FCP_DDP,
    REFERENCE,
    STRATEGIES,
    SimulationConfig,
    draw_batches,
    simulate,
)
from mindspeed_mm.core.fcp.solver import SolverConfig
from mindspeed_mm.core.fcp.solver.planner import plan_batch
from mindspeed_mm.core.fcp.solver.baselines import megatron_static_cp, static_cp_degree
from mindspeed_mm.core.fcp.solver.step_time import fsdp_step_ms

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def cost() -> CostModel:
    return CostModel.from_preset("a3-qwen3vl-8b")


@pytest.fixture(scope="module")
def small_config(cost: CostModel) -> SimulationConfig:
    return SimulationConfig(
        solver=SolverConfig(num_ranks=16, ranks_per_node=cost.ranks_per_node),
        num_batches=2,
        global_batch_size=64,
        seed=3,
    )


@pytest.fixture(scope="module")
def report(small_config: SimulationConfig, cost: CostModel):
    return simulate(small_config, cost)


def test_every_dataset_and_strategy_is_reported(report, small_config: SimulationConfig) -> None:
    assert [(r.dataset, r.strategy) for r in report.results] == [
        (d, s) for d in small_config.datasets for s in small_config.strategies
    ]
    for r in report.results:
        assert r.ok, r.error
        assert len(r.iteration_ms) == len(r.lower_bound_ms) == len(r.solver_ms) == small_config.num_batches
        # The lower bound holds for every strategy's plan of the same batch.
        assert all(t >= lb * (1 - 1e-9) for t, lb in zip(r.iteration_ms, r.lower_bound_ms))
        assert r.ratio_to_lower_bound >= 1 - 1e-9


def test_all_strategies_see_the_same_batches_and_bound(report, small_config: SimulationConfig) -> None:
    # One bound per semantics: FSDP rounds, or replicas that add one reduction per step (a larger bound).
    replicas = {FCP_DDP, "tuned_static_ddp"}
    for dataset in small_config.datasets:
        fsdp = {report.result(dataset, s).lower_bound_ms for s in small_config.strategies if s not in replicas}
        ddp = {report.result(dataset, s).lower_bound_ms for s in small_config.strategies if s in replicas}
        assert len(fsdp) == 1 and len(ddp) == 1
        assert all(d > f for d, f in zip(ddp.pop(), fsdp.pop()))


def test_speedups_are_ratios_of_total_predicted_time(report, small_config: SimulationConfig, cost: CostModel) -> None:
    dataset = "internvid"
    fcp = report.result(dataset, FCP)
    reference = report.result(dataset, REFERENCE)
    assert report.speedup(dataset, FCP) == pytest.approx(sum(reference.iteration_ms) / sum(fcp.iteration_ms))
    assert report.speedup(dataset, REFERENCE) == pytest.approx(1.0)
    # The reference is Megatron static CP sized once for the longest sample of the run.
    batches = draw_batches(small_config, dataset)
    degree = static_cp_degree(max(int(b[0].max()) for b in batches), cost, small_config.solver, "ring")
    assert reference.extras["cp_degree"] == degree
    direct = [
        fsdp_step_ms(megatron_static_cp(lengths, cost, small_config.solver, patches, cp_degree=degree), cost)
        for lengths, patches in batches
    ]
    np.testing.assert_allclose(reference.iteration_ms, direct)
    first_fcp = plan_batch(batches[0][0], cost, small_config.solver, batches[0][1])
    assert fcp.iteration_ms[0] == pytest.approx(fsdp_step_ms(first_fcp, cost))
    assert fcp.iteration_ms[0] > first_fcp.predicted_ms  # the optimizer step at least


def test_simulation_is_deterministic(report, small_config: SimulationConfig, cost: CostModel) -> None:
    again = simulate(small_config, cost)
    assert [r.iteration_ms for r in again.results] == [r.iteration_ms for r in report.results]


def test_table_lists_every_strategy_with_speedups(report) -> None:
    table = report.table()
    for strategy in STRATEGIES:
        assert strategy in table
    for dataset in ("msrvtt", "internvid", "openvid"):
        assert dataset in table
    assert f"{report.speedup('openvid', FCP):.2f}x" in table


def test_infeasible_baseline_is_reported_not_raised(cost: CostModel, capsys: pytest.CaptureFixture[str]) -> None:
    # 12 ranks cannot be tiled by power-of-two aligned groups.
    config = SimulationConfig(
        solver=SolverConfig(num_ranks=12, ranks_per_node=cost.ranks_per_node),
        datasets=("msrvtt",),
        strategies=(FCP, REFERENCE, "mcore_dynamic_cp"),
        num_batches=1,
        global_batch_size=48,
    )
    report = simulate(config, cost, progress=True)
    # The progress bar counts the skipped strategy's batches too, and goes to stderr.
    captured = capsys.readouterr()
    assert "3/3" in captured.err and captured.out == ""
    mcore = report.result("msrvtt", "mcore_dynamic_cp")
    assert not mcore.ok and "cannot tile 12 ranks" in mcore.error
    assert math.isnan(report.speedup("msrvtt", "mcore_dynamic_cp"))
    assert report.result("msrvtt", FCP).ok
    assert "msrvtt / mcore_dynamic_cp: mcore_dynamic_cp: power-of-two" in report.table()


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"datasets": ("kinetics",)}, "datasets: unknown dataset 'kinetics'"),
        ({"strategies": ("fcp", "zero3")}, "strategies: unknown strategy 'zero3'"),
        ({"strategies": ("fcp", "fcp")}, "must not repeat"),
        ({"num_batches": 0}, "num_batches must be a positive integer"),
        ({"global_batch_size": -4}, "global_batch_size must be a positive integer"),
    ],
)
def test_config_rejects_bad_options(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimulationConfig(solver=SolverConfig(num_ranks=8), **changes)


def test_plot_and_gantt_write_png(report, small_config: SimulationConfig, cost: CostModel, tmp_path: Path) -> None:
    plot = plot_report(report, tmp_path / "speedups.png")
    assert plot.read_bytes()[:8] == PNG_MAGIC
    lengths, patches = draw_batches(small_config, "openvid")[0]
    plan = plan_batch(lengths, cost, small_config.solver, patches)
    gantt = draw_plan(plan, tmp_path / "plan.png", lengths=lengths)
    assert gantt.read_bytes()[:8] == PNG_MAGIC


@pytest.fixture(scope="module")
def sweep(small_config: SimulationConfig, cost: CostModel):
    from dataclasses import replace

    from mindspeed_mm.core.fcp.simulate.seeds import simulate_seeds

    config = replace(small_config, datasets=("internvid", "openvid"))
    return simulate_seeds(config, cost, (3, 5))


def test_seed_sweep_is_one_simulation_per_seed(sweep, report, small_config: SimulationConfig) -> None:
    assert sweep.seeds == (3, 5)
    # Seed 3 is the module's report (same batches, same plans); seed 5 draws other batches.
    for dataset in ("internvid", "openvid"):
        for strategy in small_config.strategies:
            first, second = sweep.runs(dataset, strategy)
            assert first.iteration_ms == report.result(dataset, strategy).iteration_ms
            assert len(second.iteration_ms) == small_config.num_batches
    assert sweep.runs("openvid", FCP)[1].lower_bound_ms != sweep.runs("openvid", FCP)[0].lower_bound_ms


def test_seed_sweep_spreads_are_over_seeds_times_batches(sweep) -> None:
    dataset, strategy = "internvid", REFERENCE
    ratios = [b / f for this, fcp in zip(sweep.runs(dataset, strategy), sweep.runs(dataset, FCP))
              for b, f in zip(this.iteration_ms, fcp.iteration_ms)]
    assert len(ratios) == 2 * 2
    spread = sweep.fcp_speedup(dataset, strategy)
    assert spread.mean == pytest.approx(float(np.mean(ratios)))
    assert (spread.low, spread.high) == (pytest.approx(min(ratios)), pytest.approx(max(ratios)))
    per_seed = [r.speedup(dataset, FCP, over=strategy) for r in sweep.reports]
    seeds = sweep.fcp_speedup_per_seed(dataset, strategy)
    assert (seeds.low, seeds.high) == (pytest.approx(min(per_seed)), pytest.approx(max(per_seed)))
    assert sweep.fcp_speedup(dataset, FCP).text() == "1.000 [1.000-1.000]"
    table = sweep.table()
    assert "seeds 3,5 x 2 batches" in table
    assert spread.text() in table and seeds.text() in table


def test_seed_sweep_rejects_repeated_or_no_seeds(small_config: SimulationConfig, cost: CostModel) -> None:
    from mindspeed_mm.core.fcp.simulate.seeds import simulate_seeds

    with pytest.raises(ValueError, match="repeated"):
        simulate_seeds(small_config, cost, (1, 1))
    with pytest.raises(ValueError, match="at least one seed"):
        simulate_seeds(small_config, cost, ())
