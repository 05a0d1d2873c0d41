"""Where flexibility pays: FCP against every baseline and its own ablations, over workloads and scales.

For each workload (the three datasets, mixed image + video, bimodal) and each scale (FCP ranks),
every strategy plans the same batches: `--seeds` seeds x `--batches` global batches of
`--per-rank` samples per rank, on the Qwen3-VL-8B Atlas A3 preset with the state sharded over the
run's ranks. Per seed the strategy's total step time over the batches is divided by FCP's (by
`fcp_ddp`'s for `tuned_static_ddp`, the same gradient reduction); the table gives the mean and the
min-max over seeds (> 1: FCP faster).

Strategies: static ring / Ulysses at the default degree (smallest holding the run's longest sample),
tuned static (best (degree, algo) for the run) in lockstep rounds (FSDP) and with independent
replicas (DDP), Megatron-LM's hybrid / dynamic CP scheduler as it decides (`megatron_hybrid_cp`: its
buckets, early exit, trim and doubling, on its own seq^2/cp estimate), the project's older
Megatron-Core dynamic CP approximation, MindSpeed-MM's DP/CP switch. Ablations of FCP: powers of two
only, ring only, Ulysses only, idle ranks allowed; on request (`--strategies`), FCP with the thorough
search every batch (`fcp_thorough_search`, `SolverConfig.thorough_search`: how much the fast search
leaves). "One degree" is the tuned static lockstep layout
(the static packer balances its micro-batches like FCP does).

`tuned_static_fsdp_over_bound`: tuned static FSDP over the sum of FCP's per-batch lower bounds
(`Plan.lower_bound_ms` with the step terms, `step_time.step_lower_bound_ms`), the most any plan of
these batches could gain over tuned static on this cost model. Where it is below a target, no
planner can reach that target; where it is above, the bound may be loose.

Every step time includes the step's own costs of the preset (`solver.step_time`): FCP and the lockstep
strategies run under FSDP (each round lasts at least its parameter all-gathers and gradient
reduce-scatter), `fcp_ddp` and `tuned_static_ddp` reduce once per step (and their groups wait only
for their own members; `fcp_ddp` is planned for that, so it also weighs every static layout run as
independent replicas); all add the optimizer step.

    python benchmarks/flexibility_report.py                       # full: 5 workloads x 8..1024 ranks
    python benchmarks/flexibility_report.py --scales 8,64 --workloads openvid,bimodal
"""
from __future__ import annotations

import argparse
import logging
import time
from dataclasses import replace

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.model_error import model_error
from mindspeed_mm.core.fcp.simulate.mixes import WORKLOADS, draw_lengths
from mindspeed_mm.core.fcp.solver import SolverConfig, plan_batch
from mindspeed_mm.core.fcp.solver.baselines import (
    BaselineInfeasibleError,
    deepspeed_ulysses,
    mcore_dynamic_cp,
    megatron_hybrid_cp,
    megatron_static_cp,
    mindspeed_dp_cp_switch,
    static_cp_degree,
)
from mindspeed_mm.core.fcp.solver.step_time import fsdp_step_ms, step_lower_bound_ms, step_ms
from mindspeed_mm.core.fcp.solver.tuned_static import INDEPENDENT, LOCKSTEP, tune_static

PRESET = "a3-qwen3vl-8b"
BASELINES = ("fcp_ddp", "static_ring_default", "static_ulysses_default", "tuned_static_fsdp", "tuned_static_ddp",
             "megatron_hybrid_cp", "mcore_dynamic_cp_approx", "mindspeed_dp_cp_switch")
ABLATIONS = ("fcp_pow2_only", "fcp_ring_only", "fcp_ulysses_only", "fcp_idle_ranks")
# Not run unless named in --strategies: about half a minute per batch at 1024 ranks with 2 samples per rank.
SLOW_VARIANTS = ("fcp_thorough_search",)


def _fcp(batches, cost, config, semantics=LOCKSTEP):
    """FCP's step times: planned for and run under FSDP (LOCKSTEP) or reducing once per step (INDEPENDENT)."""
    return [step_ms(plan, cost, semantics) for plan in _fcp_plans(batches, cost, config, semantics)]


def _fcp_plans(batches, cost, config, semantics=LOCKSTEP):
    config = replace(config, step_semantics=semantics)
    return [plan_batch(lengths, cost, config, patches) for lengths, patches in batches]


def _fsdp(plans, cost):
    return [fsdp_step_ms(p, cost) for p in plans]


def _run_strategy(name, batches, cost, config):
    """Per-batch step times of one strategy (BaselineInfeasibleError / ValueError when it cannot run)."""
    longest = max(int(lengths.max()) for lengths, _ in batches)
    if name == "fcp_ddp":
        return _fcp(batches, cost, config, INDEPENDENT), ""
    if name == "fcp_pow2_only":
        pow2 = tuple(1 << k for k in range(config.num_ranks.bit_length()) if 1 << k <= config.num_ranks)
        return _fcp(batches, cost, replace(config, degrees=pow2)), ""
    if name in ("fcp_ring_only", "fcp_ulysses_only"):
        algo = "ring" if name == "fcp_ring_only" else "ulysses"
        return _fcp(batches, CostModel(cost.table, algos=(algo,)), config), ""
    if name == "fcp_idle_ranks":
        return _fcp(batches, cost, replace(config, allow_idle_ranks=True)), ""
    if name == "fcp_thorough_search":
        return _fcp(batches, cost, replace(config, thorough_search=True)), ""
    if name in ("static_ring_default", "static_ulysses_default"):
        algo = "ring" if name == "static_ring_default" else "ulysses"
        planner = megatron_static_cp if algo == "ring" else deepspeed_ulysses
        degree = static_cp_degree(longest, cost, config, algo)
        return _fsdp([planner(lengths, cost, config, patches, cp_degree=degree) for lengths, patches in batches],
                     cost), f"CP {degree}"
    if name in ("tuned_static_fsdp", "tuned_static_ddp"):
        tuned = tune_static(batches, cost, config, LOCKSTEP if name == "tuned_static_fsdp" else INDEPENDENT)
        return list(tuned.step_ms), f"{tuned.algo} {tuned.degree}"
    if name == "megatron_hybrid_cp":
        return _fsdp([megatron_hybrid_cp(lengths, cost, config, patches) for lengths, patches in batches], cost), ""
    if name == "mcore_dynamic_cp_approx":
        return _fsdp([mcore_dynamic_cp(lengths, cost, config, patches) for lengths, patches in batches], cost), ""
    if name == "mindspeed_dp_cp_switch":
        return _fsdp([mindspeed_dp_cp_switch(lengths, cost, config, patches) for lengths, patches in batches],
                     cost), ""
    raise ValueError(f"unknown strategy {name!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--scales", default="8,16,64,256,1024")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--per-rank", type=int, default=8, help="samples per rank in a global batch (default 8)")
    parser.add_argument("--strategies", default=",".join(BASELINES + ABLATIONS),
                        help="comma-separated, of " + ", ".join(BASELINES + ABLATIONS + SLOW_VARIANTS))
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    strategies = args.strategies.split(",")
    unknown = sorted(set(strategies) - set(BASELINES + ABLATIONS + SLOW_VARIANTS))
    if unknown:
        parser.error(f"--strategies: unknown {', '.join(unknown)}")
    print(f"preset {PRESET}, state sharded over the run's ranks; {args.seeds} seeds x {args.batches} batches of "
          f"{args.per_rank} samples per rank; cells: strategy time / FCP time (tuned_static_ddp: / fcp_ddp time), "
          f"mean [min-max] over seeds; {model_error(CostModel.from_preset(PRESET).table).describe()} "
          "(benchmarks/term_sensitivity.py: how the margins move when its unmeasured terms are off x0.5-x2)")
    columns = strategies + (["tuned_static_fsdp_over_bound"] if "tuned_static_fsdp" in strategies else [])
    print("| workload | ranks | FCP ms/step | " + " | ".join(columns) + " |")
    print("|---|---|---|" + "---|" * len(columns))
    for workload in args.workloads.split(","):
        for ranks in (int(s) for s in args.scales.split(",")):
            started = time.perf_counter()
            cost = CostModel.from_preset(PRESET, shard_ranks=ranks)
            config = SolverConfig(ranks, ranks_per_node=cost.ranks_per_node)
            gbs = max(64, args.per_rank * ranks)
            fcp_totals, headroom, ratios, labels = [], [], {s: [] for s in strategies}, {s: set() for s in strategies}
            for seed in range(args.seeds):
                lengths, patches = draw_lengths(workload, gbs * args.batches, 1000 * seed + 7)
                batches = [(lengths[k * gbs:(k + 1) * gbs], patches[k * gbs:(k + 1) * gbs])
                           for k in range(args.batches)]
                plans = _fcp_plans(batches, cost, config)
                fcp_total = sum(step_ms(plan, cost, LOCKSTEP) for plan in plans)
                # No plan of these batches runs faster than this (each plan's own lower bound, with the step terms).
                bound_total = sum(step_lower_bound_ms(plan.lower_bound_ms, cost, LOCKSTEP) for plan in plans)
                fcp_ddp_total = sum(_run_strategy("fcp_ddp", batches, cost, config)[0])
                fcp_totals.append(fcp_total)
                for s in strategies:
                    try:
                        times, label = _run_strategy(s, batches, cost, config)
                    except (BaselineInfeasibleError, ValueError) as err:
                        labels[s].add("n/a")
                        logging.info("%s %s %d: %s", workload, s, ranks, err)
                        continue
                    ratios[s].append(sum(times) / (fcp_ddp_total if s == "tuned_static_ddp" else fcp_total))
                    if s == "tuned_static_fsdp":
                        headroom.append(sum(times) / bound_total)
                    if label:
                        labels[s].add(label)
            cells = []
            for s in strategies:
                r = ratios[s]
                if len(r) < args.seeds:
                    cells.append("n/a")
                    continue
                tag = f" ({'/'.join(sorted(labels[s]))})" if labels[s] else ""
                cells.append(f"{np.mean(r):.3f} [{min(r):.3f}-{max(r):.3f}]{tag}")
            if "tuned_static_fsdp" in strategies:
                cells.append(f"{np.mean(headroom):.3f} [{min(headroom):.3f}-{max(headroom):.3f}]"
                             if len(headroom) == args.seeds else "n/a")
            print(f"| {workload} | {ranks} | {np.mean(fcp_totals) / args.batches:,.0f} | " + " | ".join(cells)
                  + f" |  <!-- {time.perf_counter() - started:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
