"""Compares an ST result with its committed baseline.

Loss: every iteration within 1% (relative). Memory: each rank's allocated and max allocated within
10% (relative). Time is recorded but not compared: the ST runs on shared CPU cores, where step times
vary far more than any regression worth catching.
"""
from __future__ import annotations

from typing import Any

LOSS_RTOL = 0.01
MEMORY_RTOL = 0.10
MEMORY_KEYS = ("allocated memory", "max allocated memory")


def _relative_gap(value: float, expected: float) -> float:
    return abs(value - expected) / abs(expected) if expected else abs(value)


def compare_with_baseline(baseline: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """Every difference beyond tolerance, as readable messages (empty when the result passes)."""
    problems = []
    expected_loss, loss = baseline["loss"], result["loss"]
    if len(loss) != len(expected_loss):
        problems.append(f"loss: {len(loss)} iterations logged, baseline has {len(expected_loss)}")
    for iteration, (value, expected) in enumerate(zip(loss, expected_loss), start=1):
        if _relative_gap(value, expected) > LOSS_RTOL:
            problems.append(f"loss at iteration {iteration}: {value:.6g} vs baseline {expected:.6g} "
                            f"(more than {LOSS_RTOL:.0%} apart)")
    expected_memory = {m["rank"]: m for m in baseline["memo info"]}
    memory = {m["rank"]: m for m in result["memo info"]}
    if memory.keys() != expected_memory.keys():
        problems.append(f"memory: ranks {sorted(memory)} reported, baseline has {sorted(expected_memory)}")
    for rank in sorted(memory.keys() & expected_memory.keys()):
        for key in MEMORY_KEYS:
            value, expected = memory[rank][key], expected_memory[rank][key]
            if _relative_gap(value, expected) > MEMORY_RTOL:
                problems.append(f"memory of rank {rank}, {key}: {value:.2f} MB vs baseline {expected:.2f} MB "
                                f"(more than {MEMORY_RTOL:.0%} apart)")
    return problems
