"""Log lines in Megatron-LM's format, plus FCP plan summaries."""
from __future__ import annotations

from datetime import datetime
from typing import Sequence

from mindspeed_mm.core.fcp.sandbox.memory_tracker import MemoryStats
from mindspeed_mm.core.fcp.solver import Plan
from mindspeed_mm.core.fcp.solver.plan import IDLE


def iteration_line(
    *,
    iteration: int,
    train_iters: int,
    consumed_samples: int,
    elapsed_ms: float,
    learning_rate: float,
    global_batch_size: int,
    loss: float,
    plan_wait_ms: float,
    forward_backward_ms: float,
    grad_sync_ms: float,
) -> str:
    """Megatron's training-log line for one iteration, with FCP's step-time split appended."""
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    return (
        f" [{stamp}] iteration {iteration:8d}/{train_iters:8d} |"
        f" consumed samples: {consumed_samples:12d} |"
        f" elapsed time per iteration (ms): {elapsed_ms:.1f} |"
        f" learning rate: {learning_rate:.6E} |"
        f" global batch size: {global_batch_size:5d} |"
        f" lm loss: {loss:.6E} |"
        f" plan wait (ms): {plan_wait_ms:.2f} |"
        f" forward-backward (ms): {forward_backward_ms:.1f} |"
        f" grad sync (ms): {grad_sync_ms:.2f} |"
        f" number of skipped iterations:   0 |"
        f" number of nan iterations:   0 |"
    )


def memory_line(rank: int, iterations: int, stats: MemoryStats) -> str:
    """Megatron's per-rank memory report."""
    return (
        f"[Rank {rank}] (after {iterations} iterations) memory (MB) |"
        f" allocated: {stats.allocated_mb:.2f} |"
        f" max allocated: {stats.max_allocated_mb:.2f} |"
        f" reserved: {stats.reserved_mb:.2f} |"
        f" max reserved: {stats.max_reserved_mb:.2f}"
    )


def plan_summary_line(iteration: int, plan: Plan, measured_round_ms: Sequence[float]) -> str:
    """Groups (degree and algo) of every round with the predicted and measured round time."""
    rounds = []
    for index, (round_plan, measured) in enumerate(zip(plan.rounds, measured_round_ms)):
        groups = " ".join(
            "idle" if g.algo == IDLE else f"{g.degree}x{g.algo if g.degree > 1 else 'local'}[{len(g.samples)}]"
            for g in round_plan.groups
        )
        rounds.append(
            f"round {index}: {groups} predicted {round_plan.predicted_ms:.2f} ms measured {measured:.1f} ms"
        )
    return (
        f"plan iteration {iteration} | rounds: {plan.num_rounds} | "
        + " | ".join(rounds)
        + f" | predicted step {plan.predicted_ms:.2f} ms (lower bound {plan.lower_bound_ms:.2f} ms,"
        f" solver {plan.solver_ms:.2f} ms)"
    )
