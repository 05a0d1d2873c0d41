"""Qwen3-VL's mixture-of-experts models on the cost model: what their presets hold, and what expert parallelism
changes for FCP (cost-model predictions).

1. Per preset: parameters (total, active per token), where a document turns attention-bound (FLOPs: linear work's
   active weights against causal attention's 2 s heads head_dim per token; the preset: its attention grid against
   its linear work per token), tokens per rank, the FSDP round and the memory of a rank, at `--ranks` ranks.
2. Expert parallelism of 1 (MindSpeed-MM's default) against larger blocks, InternVid-like and OpenVid-like batches
   with a trainable tower: FCP's step time, the tuned static layout's over FCP's, and how much the coupling of the
   round's groups by the blocks' all-to-alls (`solver/expert_phases.py`) changes FCP's prediction against pricing
   each group alone (its experts' work and exchange on its own tokens).

    python benchmarks/moe_report.py [--ranks 64] [--seeds 3] [--batches 2] [--per-rank 8]
"""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.builder import build_cost_model
from mindspeed_mm.core.fcp.cost.coefficients import StageCoefficients
from mindspeed_mm.core.fcp.cost.presets import MODELS, preset_table
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import Plan, SolverConfig, plan_batch, validate_plan
from mindspeed_mm.core.fcp.solver.step_time import LOCKSTEP, step_ms
from mindspeed_mm.core.fcp.solver.tuned_static import tune_static

PRESETS = ("a3-qwen3vl-8b", "a3-qwen3vl-32b", "a3-qwen3vl-30b-a3b", "a3-qwen3vl-235b-a22b", "h200-qwen3vl-8b",
           "h200-qwen3vl-32b", "h200-qwen3vl-30b-a3b", "h200-qwen3vl-235b-a22b")


def _crossover(cost: CostModel) -> float:
    """Document length whose attention per token equals the linear work per token (one layer, the preset's grids)."""
    alpha, beta, gamma = StageCoefficients.from_table(cost.table).attention_fit
    per_token = cost.table.time.linear_ms_per_token
    if cost.table.time.linear_ms is not None:   # a measured curve: its slope at 32K tokens
        grid = cost.table.time.linear_ms
        per_token = float(grid(32768.0) - grid(16384.0)) / 16384.0
    return float(max(np.roots([alpha, beta - per_token, gamma]).real))


def presets_table(ranks: int) -> None:
    print(f"### Presets at {ranks} ranks (the 235B-A22B at 256: its state does not fit fewer)\n")
    print("| preset | params (B) | active / token (B) | attention-bound from (FLOPs / preset) | tokens per rank | "
          "FSDP round (ms) | static + workspace (GB) |")
    print("|---|---|---|---|---|---|---|")
    for name in PRESETS:
        shards = max(ranks, 256) if "235b" in name else ranks
        cost = CostModel(preset_table(name, shard_ranks=shards))
        model = MODELS[name.split("-", 1)[1]]
        table, dec, prov = cost.table, model.decoder, cost.table.provenance
        # A dense decoder's every weight is active: all but the encoder's.
        active = prov.get("active_params_per_token", prov["total_params"] - model.encoder.params())
        flops = dec.active_matmul_params() / (dec.heads * dec.head_dim)
        print(f"| {name} | {prov['total_params'] / 1e9:.2f} | {active / 1e9:.2f} | {flops / 1e3:.1f}K / "
              f"{_crossover(cost) / 1e3:.1f}K | {cost.capacity_tokens:,d} | {table.step.fsdp_round_ms:,.0f} | "
              f"{table.memory.static_bytes / 1e9:.1f} + {table.memory.workspace_bytes / 1e9:.1f} |")
    print()


def _alone(plan: Plan, lengths: np.ndarray, cost: CostModel) -> float:
    """The plan's step time with each group priced alone (its experts' work and exchange on its own tokens)."""
    rounds = []
    for r in plan.rounds:
        groups = tuple(dataclasses.replace(g, predicted_ms=float(cost.group_time_ms(
            cost.workload(lengths[list(g.samples)].tolist()), g.degree, g.algo))) for g in r.groups)
        rounds.append(dataclasses.replace(r, groups=groups, predicted_ms=max(g.predicted_ms for g in groups)))
    return step_ms(dataclasses.replace(plan, rounds=tuple(rounds)), cost, LOCKSTEP)


def expert_parallel_table(preset: str, ranks: int, seeds: int, batches: int, per_rank: int) -> None:
    print(f"### Expert parallelism, {preset}, {ranks} ranks, {seeds} seeds x {batches} batches of {per_rank} samples "
          "per rank (text tokens: the tower's work does not change with it)\n")
    print("| workload | expert parallel | FCP ms/step | tuned static / FCP (layout) | FCP priced group by group / "
          "coupled |")
    print("|---|---|---|---|---|")
    for workload in ("internvid", "openvid"):
        for ep in (1, 8, 16, 64):
            cost = build_cost_model(preset=preset, profile_table=None, max_tokens_per_rank=None, shard_ranks=ranks,
                                    expert_parallel=ep)
            config = SolverConfig(ranks, ranks_per_node=cost.ranks_per_node)
            gbs = per_rank * ranks
            totals, static, alone, layouts = [], [], [], set()
            for seed in range(seeds):
                lengths, _ = draw_lengths(workload, gbs * batches, 1000 * seed + 11)
                chunks = [lengths[k * gbs:(k + 1) * gbs] for k in range(batches)]
                plans = [plan_batch(chunk.tolist(), cost, config) for chunk in chunks]
                for plan, chunk in zip(plans, chunks):
                    validate_plan(plan, chunk.tolist(), cost, priced=True)
                total = sum(step_ms(p, cost, LOCKSTEP) for p in plans)
                tuned = tune_static([(chunk, None) for chunk in chunks], cost, config, LOCKSTEP)
                layouts.add(f"{tuned.algo} {tuned.degree}")
                totals.append(total)
                static.append(sum(tuned.step_ms) / total)
                alone.append(sum(_alone(p, c, cost) for p, c in zip(plans, chunks)) / total)
            cell = lambda r: f"{np.mean(r):.3f} [{min(r):.3f}-{max(r):.3f}]"  # noqa: E731
            print(f"| {workload} | {ep} | {np.mean(totals) / batches:,.0f} | {cell(static)} "
                  f"({'/'.join(sorted(layouts))}) | {cell(alone)} |", flush=True)
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--per-rank", type=int, default=8)
    args = parser.parse_args()
    presets_table(args.ranks)
    for preset in ("h200-qwen3vl-30b-a3b", "a3-qwen3vl-30b-a3b"):
        expert_parallel_table(preset, args.ranks, args.seeds, args.batches, args.per_rank)


if __name__ == "__main__":
    main()
