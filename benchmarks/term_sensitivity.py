"""How FCP's plans and its margin over tuned static move when a term the preset did not measure is off (x0.5, x2).

For a preset, every term its `provenance.terms` does not call measured (`cost.term_provenance`) is scaled by each
factor (`cost.term_scaling`), the batches planned again and tuned static tuned again on the scaled model:
FCP's step time, the tuned static layout and its step over FCP's, and the plans' shape (the mean group degree a
rank sits in, the share of ranks in Ulysses groups, rounds per step, rounds whose media are spread over all their
ranks). Trainable vision tower, FSDP lockstep rounds, `--seeds` seeds x `--batches` batches of `--per-rank`
samples per rank. Cost-model predictions, not measurements.

    python benchmarks/term_sensitivity.py [--preset a3-qwen3vl-8b] [--workloads internvid,imagevideo] [--ranks 64]
"""
from __future__ import annotations

import argparse
import dataclasses

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.builder import build_cost_model
from mindspeed_mm.core.fcp.cost.model_error import model_error
from mindspeed_mm.core.fcp.cost.term_provenance import not_measured
from mindspeed_mm.core.fcp.cost.term_scaling import TERM_GROUPS, scaled_terms
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import SolverConfig, plan_batch
from mindspeed_mm.core.fcp.solver.step_time import LOCKSTEP, step_ms
from mindspeed_mm.core.fcp.solver.tuned_static import tune_static

FACTORS = (0.5, 1.0, 2.0)


@dataclasses.dataclass
class Outcome:
    fcp_ms: float
    static_ms: float
    layout: str
    mean_degree: float
    ulysses_share: float
    rounds: float
    spread: float


def outcome(cost: CostModel, batches, config: SolverConfig) -> Outcome:
    fcp = degree = ulysses = ranks = rounds = spread = 0.0
    for lengths, patches in batches:
        plan = plan_batch(lengths.tolist(), cost, config, patches.tolist())
        fcp += step_ms(plan, cost, LOCKSTEP)
        for r in plan.rounds:
            for g in r.groups:
                degree += g.degree * g.degree
                ulysses += g.degree * (g.algo == "ulysses")
                ranks += g.degree
        rounds += plan.num_rounds
        spread += sum(r.vision_over_round for r in plan.rounds)
    tuned = tune_static(batches, cost, config, LOCKSTEP)
    n = len(batches)
    return Outcome(fcp / n, sum(tuned.step_ms) / n, f"{tuned.algo} {tuned.degree}", degree / ranks, ulysses / ranks,
                   rounds / n, spread / n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="a3-qwen3vl-8b")
    parser.add_argument("--workloads", default="internvid,imagevideo")
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=1)
    parser.add_argument("--per-rank", type=int, default=8)
    args = parser.parse_args()
    base = build_cost_model(preset=args.preset, profile_table=None, max_tokens_per_rank=None, shard_ranks=args.ranks)
    groups = [g for g in not_measured(base.table.provenance) if g in TERM_GROUPS]
    config = SolverConfig(args.ranks, ranks_per_node=base.ranks_per_node)
    print(f"preset {args.preset}, {args.ranks} ranks, {args.seeds} seeds x {args.batches} batches of {args.per_rank} "
          f"samples per rank; terms not measured: {', '.join(groups)}; {model_error(base.table).describe()}.\n")
    for workload in args.workloads.split(","):
        gbs = args.per_rank * args.ranks
        draws = [draw_lengths(workload, gbs * args.batches, 1000 * seed + 11) for seed in range(args.seeds)]
        batches = [(lengths[k * gbs:(k + 1) * gbs], patches[k * gbs:(k + 1) * gbs])
                   for lengths, patches in draws for k in range(args.batches)]
        print(f"### {workload}\n")
        print("| term scaled | factor | FCP ms/step | tuned static (layout) / FCP | mean degree of a rank's group | "
              "ranks in Ulysses groups | rounds | rounds spread |")
        print("|---|---|---|---|---|---|---|---|")
        baseline = outcome(CostModel(base.table, max_tokens_per_rank=None), batches, config)
        rows = [("(none)", 1.0, baseline)]
        for group in groups:
            for factor in FACTORS:
                if factor == 1.0:
                    continue
                cost = CostModel(scaled_terms(base.table, group, factor))
                rows.append((group, factor, outcome(cost, batches, config)))
        for group, factor, o in rows:
            print(f"| {TERM_GROUPS.get(group, group)} | x{factor:g} | {o.fcp_ms:,.0f} | {o.static_ms / o.fcp_ms:.3f} "
                  f"({o.layout}) | {o.mean_degree:.2f} | {o.ulysses_share:.0%} | {o.rounds:.1f} | {o.spread:.1f} |",
                  flush=True)
        margins = [o.static_ms / o.fcp_ms for _, _, o in rows]
        below = [f"{TERM_GROUPS.get(g, g)} x{f:g}" for g, f, o in rows if o.static_ms < o.fcp_ms * (1 - 1e-9)]
        print(f"\nTuned static / FCP over every term's range: {min(margins):.3f}-{max(margins):.3f} "
              f"(as the preset says: {baseline.static_ms / baseline.fcp_ms:.3f})"
              + (f"; tuned static faster where {', '.join(below)}" if below else "; FCP never slower") + ".\n")


if __name__ == "__main__":
    main()
