"""What MindSpeed-MM's Qwen3-VL users run today, on the FCP cost model.

MindSpeed-MM's Qwen3-VL recipes (`examples/qwen3vl/qwen3vl_full_sft_8B.yaml`) train under FSDP2 with one
static context-parallel degree (`context_parallel_size`, `ulysses_cp_algo` by default) and
`micro_batch_size: 1`: the data sampler deals the shuffled global batch over the DP replicas, GBS / DP
samples each, and every replica runs one sample per micro-batch. FSDP2's per-layer all-gathers span every
rank, so the replicas run micro-batch k together: a round lasts as long as its slowest sample.

With `use_txt_dynamic_batching`, upstream's `DynamicBatchingDataLoader` fills each replica's micro-batches
from a buffer of its samples: in buffer order, it takes every sample that still fits a budget of
`max_seq_len` tokens (the first sample always), and the next micro-batch starts from what is left
(`TextBatchingStrategy`, `DynBszBuffer.get_samples`). Here the buffer holds all of the replica's samples
and the budget is what a group of the run's degree holds in memory, the most a careful user would set;
a replica with fewer micro-batches than the others sits the last rounds out.

Both take the run's CP degree and algo (`cp_degree`, `algo`); the simulator runs them at the default (the
smallest Ulysses degree holding the run's longest sample, as a user raising `context_parallel_size`
until it fits) and tuned (the best degree and algo for the run).
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.solver.baseline_common import (
    RING,
    ULYSSES,
    BaselineInfeasibleError,
    baseline_plan,
    checked_lengths,
    placed_group,
    round_of,
)
from mindspeed_mm.core.fcp.solver.baselines import static_cp_degree
from mindspeed_mm.core.fcp.solver.plan import IDLE, GroupPlan, Plan, SolverConfig
from mindspeed_mm.core.fcp.solver.static_layout import static_degrees
from mindspeed_mm.core.fcp.solver.step_time import LOCKSTEP
from mindspeed_mm.core.fcp.solver.tuned_static import TunedStatic, best_layout

UPSTREAM_ALGOS = (ULYSSES, RING)
"""MindSpeed-MM's context-parallel algos for Qwen3-VL (`ulysses_cp_algo`, the default; `megatron_cp_algo`)."""


def _checked_layout(values: np.ndarray, cost: CostModel, config: SolverConfig, degree: int, algo: str,
                    strategy: str) -> int:
    """The replicas of a (degree, algo) layout; BaselineInfeasibleError naming what does not fit."""
    if config.num_ranks % degree or degree > config.degree_limit:
        raise BaselineInfeasibleError(f"{strategy}: CP degree {degree} must divide {config.num_ranks} ranks and be "
                                      f"at most {config.degree_limit}")
    if not cost.runs_at(algo, degree):
        raise BaselineInfeasibleError(f"{strategy}: {algo.capitalize()} cannot split the attention heads over {degree} ranks")
    longest = int(np.argmax(values))
    if cost.min_degree(int(values[longest])) > degree:
        raise BaselineInfeasibleError(f"{strategy}: sample {longest} ({int(values[longest])} tokens) does not fit "
                                      f"CP degree {degree} at {cost.capacity_tokens} tokens per rank")
    return config.num_ranks // degree


def _replica_samples(n: int, replicas: int) -> list[list[int]]:
    """Sample i of the shuffled batch goes to replica i mod DP, as a distributed sampler deals it."""
    return [list(range(r, n, replicas)) for r in range(replicas)]


def _lockstep(micro_batches: list[list[tuple[int, ...]]], degree: int, algo: str, values: np.ndarray,
              patches: Sequence[int] | None, cost: CostModel, config: SolverConfig) -> list:
    """Round k: every replica's k-th micro-batch on its block of ranks; a replica without one sits it out."""
    rounds = []
    for k in range(max(len(m) for m in micro_batches)):
        groups: list[GroupPlan] = []
        for replica, batches in enumerate(micro_batches):
            first = replica * degree
            if k < len(batches):
                groups.append(placed_group(first, degree, algo, batches[k], values, patches, cost,
                                           config.ranks_per_node))
            else:
                groups.extend(GroupPlan((rank,), 1, IDLE, (), 0.0) for rank in range(first, first + degree))
        rounds.append(round_of(groups))
    return rounds


def upstream_sampler_cp(lengths: Sequence[int], cost: CostModel, config: SolverConfig,
                        patches: Sequence[int] | None = None, *, cp_degree: int, algo: str = ULYSSES) -> Plan:
    """One sample per micro-batch, GBS / DP samples per replica, static CP `cp_degree` with `algo`."""
    started = time.perf_counter()
    values = checked_lengths(lengths, cost, config, patches)
    replicas = _checked_layout(values, cost, config, cp_degree, algo, "mindspeed_mm_sampler")
    if values.size % replicas:
        raise BaselineInfeasibleError(f"mindspeed_mm_sampler: a global batch of {values.size} samples is not a "
                                      f"multiple of DP = {replicas} (micro_batch_size 1)")
    per_replica = [[(i,) for i in samples] for samples in _replica_samples(values.size, replicas)]
    rounds = _lockstep(per_replica, cp_degree, algo, values, patches, cost, config)
    return baseline_plan(rounds, values, cost, config, patches, started,
                         {"strategy": "mindspeed_mm_sampler", "cp_degree": cp_degree, "algo": algo})


def token_budget_micro_batches(samples: Sequence[int], lengths: np.ndarray, budget: int) -> list[tuple[int, ...]]:
    """Upstream's dynamic batching of one replica's buffer: each micro-batch takes, in buffer order, every
    sample that still fits `budget` tokens (the first one whatever its length)."""
    left = list(samples)
    batches = []
    while left:
        taken, used, rest = [], 0, []
        for i in left:
            if not taken or int(lengths[i]) <= budget - used:
                taken.append(i)
                used += int(lengths[i])
            else:
                rest.append(i)
            if used >= budget:
                rest.extend(left[left.index(i) + 1:])
                break
        batches.append(tuple(sorted(taken)))
        left = rest
    return batches


def upstream_dynamic_batching(lengths: Sequence[int], cost: CostModel, config: SolverConfig,
                              patches: Sequence[int] | None = None, *, cp_degree: int,
                              algo: str = ULYSSES) -> Plan:
    """Token-budget micro-batches per replica (`use_txt_dynamic_batching`), static CP `cp_degree` with `algo`."""
    started = time.perf_counter()
    values = checked_lengths(lengths, cost, config, patches)
    replicas = _checked_layout(values, cost, config, cp_degree, algo, "mindspeed_mm_dynamic_batching")
    budget = cp_degree * cost.capacity_tokens
    per_replica = [token_budget_micro_batches(samples, values, budget)
                   for samples in _replica_samples(values.size, replicas)]
    rounds = _lockstep(per_replica, cp_degree, algo, values, patches, cost, config)
    return baseline_plan(rounds, values, cost, config, patches, started,
                         {"strategy": "mindspeed_mm_dynamic_batching", "cp_degree": cp_degree, "algo": algo,
                          "max_seq_len": budget})


UPSTREAM_RUNS = {"mindspeed_mm_sampler": upstream_sampler_cp, "mindspeed_mm_dynamic_batching": upstream_dynamic_batching}
"""The upstream runs by name."""


def upstream_run(batches: Sequence[tuple[np.ndarray, np.ndarray | None]], cost: CostModel, config: SolverConfig,
                 run: str, *, tuned: bool) -> TunedStatic:
    """The plans of `run` for a whole run's batches under FSDP, at the default layout (the smallest Ulysses
    degree holding the run's longest sample) or, `tuned`, at the (degree, algo) with the lowest total step
    time; BaselineInfeasibleError when no layout holds the run."""
    planner = UPSTREAM_RUNS[run]
    longest = max(int(lengths.max()) for lengths, _ in batches)
    if tuned:
        layouts = [(d, algo) for algo in UPSTREAM_ALGOS for d in static_degrees(longest, cost, config, algo)]
    else:
        layouts = [(static_cp_degree(longest, cost, config, ULYSSES), ULYSSES)]
    best = best_layout(batches, cost, layouts, lambda lengths, patches, degree, algo: planner(
        lengths, cost, config, patches, cp_degree=degree, algo=algo), LOCKSTEP)
    if best is None:
        raise BaselineInfeasibleError(f"{run}: no CP layout among {layouts} holds the run's longest sample "
                                      f"({longest} tokens) on {config.num_ranks} ranks")
    return best
