"""A feature that loses on a machine stops being chosen once the planner prices that machine's own table.

On the CPU bed, spreading a round's media over all its ranks made the long-video step slower (its two all-gathers
and the pixel all-to-all cost gloo about 1 ms each there, which the `cpu-tiny` preset prices at 0.1-0.2 ms).
`data/bed_cpu_profile.json` is `fcp profile --recipe` of the bed's own model on 4 gloo processes of this host, wall
clock (`benchmarks/upstream_qwen3vl_step_time.py --quick`, 2026-12-06, load average about 30): its all-to-all costs
3.9 ms. The batch is the bed's long-video one: every fourth sample a 738-token video of 2,952 patches."""
from __future__ import annotations

from pathlib import Path

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.presets import preset_table
from mindspeed_mm.core.fcp.cost.table import ProfileTable
from mindspeed_mm.core.fcp.solver import SolverConfig, plan_batch, validate_plan

BED_TABLE = Path(__file__).resolve().parent / "data" / "bed_cpu_profile.json"
LENGTHS = [60, 72, 66, 738, 58, 70, 64, 738]
PATCHES = [64, 64, 64, 2952, 64, 64, 64, 2952]


def _spread_rounds(table: ProfileTable) -> list[bool]:
    cost = CostModel(table, max_tokens_per_rank=256)
    plan = plan_batch(LENGTHS, cost, SolverConfig(4, ranks_per_node=8, max_degree=3), PATCHES)
    validate_plan(plan, LENGTHS, cost, PATCHES, priced=True)
    return [r.vision_over_round for r in plan.rounds]


def test_the_preset_spreads_the_long_videos_and_the_measured_table_does_not() -> None:
    measured = ProfileTable.load(BED_TABLE)
    assert measured.provenance["source"] == "measured by fcp profile"
    assert min(measured.time.all_to_all_intra_ms.y) > 5 * max(preset_table("cpu-tiny").time.all_to_all_intra_ms.y[:3])
    assert any(_spread_rounds(preset_table("cpu-tiny", shard_ranks=4)))
    assert not any(_spread_rounds(measured))
