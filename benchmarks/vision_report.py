"""The vision tower on MindSpeed-MM's Qwen3-VL path: FCP now, FCP encoding each group's media on its own members,
FCP before it priced and split the tower, and a tuned static CP layout that splits the tower over its CP ranks as
upstream does (cost-model predictions).

Every strategy runs FSDP's lockstep rounds, priced as an encoder phase then a decoder phase (every vision block
and decoder layer all-gathers over all ranks: `solver/vision_phases.py`).
- `fcp`: plans as MindSpeed-MM's Qwen3-VL path makes them: a round's media spread over all its ranks where that
  shortens its encoder phase (long videos in frame-group ranges, pixels and rows exchanged), else each group's
  split over its members.
- `fcp_in_group`: every round's media split over each group's own members (`SolverConfig.vision_over_round` off).
- `fcp_before`: plans made from token lengths alone (the tower unpriced), each image or video encoded whole by
  one member: a group's busiest member encodes at least the larger of an even share and its largest medium (what
  the largest-first assignment gives at best; so this column favours the old path).
- `tuned_static`: the best static (degree, algo) for the run, its groups splitting the tower evenly over their
  ranks (upstream's `split_visual_seqs_with_cp`), packed by FCP's packer.
Trainable and frozen tower (`cost.builder.frozen_vision_table`), InternVid-like, OpenVid-like and image + video
batches, 16 / 64 / 256 ranks, 3 seeds x 2 batches of 8 samples per rank. Cells: the strategy's step time over
FCP's, mean [min-max] over seeds (> 1: FCP faster); the last column, tuned static over the batches' lower bound
(`solver/lower_bound.py`), is the most any plan could gain over it.

    python benchmarks/vision_report.py [--preset a3-qwen3vl-8b | h200-qwen3vl-8b | a3-qwen3vl-30b-a3b | ...]
                                       [--scales 16,64,256]
"""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.builder import build_cost_model
from mindspeed_mm.core.fcp.cost.model_error import margin_verdict, model_error
from mindspeed_mm.core.fcp.cost.presets import preset_table
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import Plan, SolverConfig, plan_batch, validate_plan
from mindspeed_mm.core.fcp.solver.placement import placed_node_part
from mindspeed_mm.core.fcp.solver.step_time import LOCKSTEP, step_lower_bound_ms, step_ms
from mindspeed_mm.core.fcp.solver.tuned_static import tune_static
from mindspeed_mm.core.fcp.solver.vision_phases import vision_rank_ms

WORKLOADS = ("internvid", "openvid", "imagevideo")


def _whole_media_plan(plan: Plan, lengths: np.ndarray, patches: np.ndarray, cost: CostModel, node: int) -> Plan:
    """`plan` priced in phases with each medium encoded whole by one member (its samples' media, one per sample):
    the round's encoder phase is its busiest member's call."""
    rounds = []
    for round_plan in plan.rounds:
        busiest = 0.0
        texts = []
        for g in round_plan.groups:
            ids = list(g.samples)
            part = placed_node_part(g.ranks[0], g.degree, node)
            texts.append(float(cost.group_time_ms(cost.workload(lengths[ids].tolist()), g.degree, g.algo,
                                                  node_part=part)))
            group_patches = patches[ids]
            if group_patches.any():
                busiest = max(busiest, float(group_patches.sum()) / g.degree, float(group_patches.max()))
        phase = vision_rank_ms(cost, busiest)
        groups = tuple(dataclasses.replace(g, predicted_ms=phase + text) for g, text in zip(round_plan.groups, texts))
        rounds.append(dataclasses.replace(round_plan, groups=groups, predicted_ms=max(g.predicted_ms for g in groups),
                                          vision_ms=phase))
    return dataclasses.replace(plan, rounds=tuple(rounds), predicted_ms=sum(r.predicted_ms for r in rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="a3-qwen3vl-8b")
    parser.add_argument("--scales", default="16,64,256")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--per-rank", type=int, default=8)
    args = parser.parse_args()
    error = model_error(preset_table(args.preset))
    print(f"preset {args.preset}; {args.seeds} seeds x {args.batches} batches of {args.per_rank} samples per rank; "
          f"cells: strategy step time / FCP step time, mean [min-max] over seeds; {error.describe()}; last column: "
          "FCP's margin over tuned static against that error")
    print("| vision tower | workload | ranks | FCP ms/step | rounds spread | fcp_in_group | fcp_before | "
          "tuned_static (layout) | tuned_static / bound | FCP's margin over tuned static |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for frozen in (False, True):
        for workload in WORKLOADS:
            for ranks in (int(s) for s in args.scales.split(",")):
                cost = build_cost_model(preset=args.preset, profile_table=None, max_tokens_per_rank=None,
                                        shard_ranks=ranks, vision_frozen=frozen)
                config = SolverConfig(ranks, ranks_per_node=cost.ranks_per_node)
                in_group = dataclasses.replace(config, vision_over_round=False)
                gbs = args.per_rank * ranks
                fcp_totals, local, before, static, ceiling, layouts = [], [], [], [], [], set()
                spread = total_rounds = 0
                for seed in range(args.seeds):
                    lengths, patches = draw_lengths(workload, gbs * args.batches, 1000 * seed + 11)
                    batches = [(lengths[k * gbs:(k + 1) * gbs], patches[k * gbs:(k + 1) * gbs])
                               for k in range(args.batches)]
                    fcp_total = local_total = before_total = bound_total = 0.0
                    for batch_lengths, batch_patches in batches:
                        plan = plan_batch(batch_lengths.tolist(), cost, config, batch_patches.tolist())
                        validate_plan(plan, batch_lengths.tolist(), cost, batch_patches.tolist(), priced=True)
                        fcp_total += step_ms(plan, cost, LOCKSTEP)
                        bound_total += step_lower_bound_ms(plan.lower_bound_ms, cost, LOCKSTEP)
                        spread += sum(r.vision_over_round for r in plan.rounds)
                        total_rounds += plan.num_rounds
                        local_total += step_ms(plan_batch(batch_lengths.tolist(), cost, in_group,
                                                          batch_patches.tolist()), cost, LOCKSTEP)
                        unpriced = plan_batch(batch_lengths.tolist(), cost, config)
                        old = _whole_media_plan(unpriced, batch_lengths, batch_patches, cost, config.ranks_per_node)
                        before_total += step_ms(old, cost, LOCKSTEP)
                    tuned = tune_static(batches, cost, config, LOCKSTEP)
                    layouts.add(f"{tuned.algo} {tuned.degree}")
                    fcp_totals.append(fcp_total)
                    local.append(local_total / fcp_total)
                    before.append(before_total / fcp_total)
                    static.append(sum(tuned.step_ms) / fcp_total)
                    ceiling.append(sum(tuned.step_ms) / bound_total)
                cell = lambda r: f"{np.mean(r):.3f} [{min(r):.3f}-{max(r):.3f}]"  # noqa: E731
                print(f"| {'frozen' if frozen else 'trainable'} | {workload} | {ranks} | "
                      f"{np.mean(fcp_totals) / args.batches:,.0f} | {spread}/{total_rounds} | {cell(local)} | "
                      f"{cell(before)} | {cell(static)} ({'/'.join(sorted(layouts))}) | {cell(ceiling)} | "
                      f"{100 * (np.mean(static) - 1):+.1f}%, {margin_verdict(np.mean(static) - 1, error)} |", flush=True)


if __name__ == "__main__":
    main()
