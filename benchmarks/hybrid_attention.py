"""Hybrid Ulysses x ring groups against ring and Ulysses, as the cost model prices them (predictions).

Writes `benchmarks/results/hybrid_attention.md`:
1. Qwen3-VL-8B (32 query / 8 KV heads) on the A3 and H200 presets: the forward + backward time of one group at
   degrees 4-64 with ring, Ulysses and the degree's hybrid split (u x r, `HybridSplitRule`), on two packed batches,
   where the planner places a group (inside one node when it fits, else on whole nodes) and split evenly over two nodes;
2. which degrees the planner gives hybrid groups on the shipped mixes at 64 and 256 ranks (3 seeds, 8 samples
   per rank), and the step time of those plans against plans of ring and Ulysses alone;
3. why `auto` prices hybrid only where Ulysses cannot run inside a node: over 1,000 packs of the shipped mixes
   (200 per mix, 1-29 samples each) at degrees 1-64, how much faster than the better of ring and Ulysses the
   best split is where Ulysses runs inside a node, and where it does not, on every 2B / 4B / 8B preset.

    python benchmarks/hybrid_attention.py [--seeds 3] [--out benchmarks/results/hybrid_attention.md]
"""
from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel, WorkloadColumns, list_presets
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import SolverConfig, plan_batch

MIXES = ("openvid", "internvid", "msrvtt", "bimodal", "imagevideo")
DEGREES = (4, 6, 8, 12, 16, 24, 32, 48, 64)
BATCHES = {"one 120K-token video": [120_000], "16 samples of 6K": [6_000] * 16}
RING_AND_ULYSSES = ("ring", "ulysses")


def _cell(ms: float, best: float) -> str:
    if not np.isfinite(ms):
        return "-"
    return f"**{ms:,.0f}**" if ms == best else f"{ms:,.0f}"


def group_table(preset: str) -> list[str]:
    cost = CostModel.from_preset(preset, shard_ranks=64)
    node = cost.ranks_per_node
    lines = [f"### `{preset}` ({node} ranks per node, {cost.capacity_tokens:,} tokens per rank)", "",
             "ms per round of one group, forward + backward; bold: the fastest; `-`: does not run (heads, memory, "
             "or a block across nodes).", "",
             "| batch | placement | degree | ring | Ulysses | hybrid (u x r) | hybrid / best other |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for name, lengths in BATCHES.items():
        work = cost.workload(lengths)
        for placement in ("planner's", "two nodes"):
            for degree in DEGREES:
                if placement == "two nodes" and (degree % 2 or degree // 2 > node):
                    continue
                part = None if placement == "planner's" else degree // 2
                times = {algo: float(cost.group_time_ms(work, degree, algo, node_part=part))
                         for algo in ("ring", "ulysses", "hybrid")}
                u = int(cost.hybrid_splits([work], [degree], [part])[0])
                best = min(times.values())
                other = min(times["ring"], times["ulysses"])
                split = f"{_cell(times['hybrid'], best)} ({u} x {degree // u})" if u else "-"
                ratio = f"{times['hybrid'] / other:.2f}" if u and np.isfinite(other) else "-"
                where = "inside a node" if part is None and degree <= node else (
                    "whole nodes" if part is None else "split over two nodes")
                lines.append(f"| {name} | {where} | {degree} | {_cell(times['ring'], best)} | "
                             f"{_cell(times['ulysses'], best)} | {split} | {ratio} |")
    return lines + [""]


def plan_table(presets: list[str], seeds: int) -> list[str]:
    lines = ["| preset | ranks | mix | hybrid groups (degree: u x r, count) | groups of 2+ ranks | "
             "step, with hybrid / without | planner CPU ms, with / without |", "|---|---:|---|---|---:|---:|---:|"]
    for preset in presets:
        for ranks in (64, 256):
            models = {algos: CostModel.from_preset(preset, shard_ranks=ranks, algos=algos)
                      for algos in (("ring", "ulysses", "hybrid"), RING_AND_ULYSSES)}
            config = SolverConfig(ranks, ranks_per_node=models[RING_AND_ULYSSES].ranks_per_node)
            for mix in MIXES:
                counts: collections.Counter = collections.Counter()
                groups = 0
                ratios, cpu = [], {algos: [] for algos in models}
                for seed in range(seeds):
                    lengths, patches = draw_lengths(mix, 8 * ranks, seed)
                    plans = {}
                    for algos, cost in models.items():
                        started = time.process_time()
                        plans[algos] = plan_batch(lengths, cost, config, patches)
                        cpu[algos].append((time.process_time() - started) * 1e3)
                    with_hybrid = plans[("ring", "ulysses", "hybrid")]
                    ratios.append(with_hybrid.predicted_ms / plans[RING_AND_ULYSSES].predicted_ms)
                    for r in with_hybrid.rounds:
                        for g in r.groups:
                            groups += g.degree > 1
                            if g.hybrid is not None:
                                counts[(g.degree, g.hybrid.ulysses_degree, g.hybrid.ring_degree)] += 1
                used = ", ".join(f"{d}: {u} x {r}, {n}" for (d, u, r), n in sorted(counts.items())) or "none"
                lines.append(f"| `{preset}` | {ranks} | {mix} | {used} | {groups} | "
                             f"{min(ratios):.3f}-{max(ratios):.3f} | "
                             f"{np.median(cpu[('ring', 'ulysses', 'hybrid')]):.1f} / "
                             f"{np.median(cpu[RING_AND_ULYSSES]):.1f} |")
    return lines + [""]


def pruning_table(packs_per_mix: int = 200) -> list[str]:
    lines = ["| preset | ranks per node | where Ulysses runs inside a node: packs x degrees hybrid wins, its best gain | "
             "elsewhere: packs x degrees hybrid wins, its best gain |", "|---|---:|---|---|"]
    degrees = np.arange(1, 65)
    for preset in (p for p in list_presets() if p.endswith(("qwen3vl-2b", "qwen3vl-4b", "qwen3vl-8b"))):
        both = CostModel.from_preset(preset, shard_ranks=64)
        every_split = CostModel.from_preset(preset, shard_ranks=64, algos=("hybrid",))
        rng = np.random.default_rng(0)
        workloads = []
        for mix in MIXES:
            lengths, _ = draw_lengths(mix, 512, 0)
            for _ in range(packs_per_mix):
                chosen = rng.choice(len(lengths), int(rng.integers(1, 30)), replace=False)
                workloads.append(both.workload([int(lengths[i]) for i in chosen]))
        columns = WorkloadColumns.stack(workloads)
        d = np.tile(degrees, (len(workloads), 1))
        other = np.minimum(both.group_time_table(columns, d, "ring"), both.group_time_table(columns, d, "ulysses"))
        # Every proper split (1 < u < d), also where `auto` leaves the degree to Ulysses.
        hybrid = np.full(d.shape, np.inf)
        for u in every_split.hybrid_ulysses_degrees[1:]:
            proper = (degrees % u == 0) & (degrees != u)
            for k, work in enumerate(workloads):
                at_u = every_split.group_time_ms(work, degrees[proper], "hybrid", ulysses_degree=u)
                hybrid[k, proper] = np.minimum(hybrid[k, proper], at_u)
        inside = np.array([both.ulysses_supported(int(k)) and k <= both.ranks_per_node for k in degrees])[None, :]
        with np.errstate(invalid="ignore"):
            gain = np.where(np.isfinite(hybrid) & np.isfinite(other), other / hybrid - 1, 0.0)
        cells = []
        for where in (inside, ~inside):
            mask = np.broadcast_to(where, gain.shape)
            wins = (gain > 0) & mask
            cells.append(f"{int(wins.sum()):,} of {int((mask & np.isfinite(hybrid)).sum()):,}, "
                         f"{100 * float(gain[mask].max(initial=0.0)):.2f}%")
        lines.append(f"| `{preset}` | {both.ranks_per_node} | {cells[0]} | {cells[1]} |")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "hybrid_attention.md")
    args = parser.parse_args()
    presets = ["a3-qwen3vl-8b", "h200-qwen3vl-8b"]
    out = ["# Hybrid Ulysses x ring groups (cost-model predictions)", "",
           f"`python benchmarks/hybrid_attention.py --seeds {args.seeds}`. Predictions of the named presets "
           "(`h200-qwen3vl-8b`: compute terms fitted to one H200's measurements; `a3-qwen3vl-8b`: analytic, with "
           "the H200's host floors), not device measurements. A hybrid group of d = u x r ranks runs Ulysses over "
           "blocks of u consecutive ranks inside a node and ring attention across its r blocks; each degree has one "
           "proper split (`cost.hybrid_costs.HybridSplitRule`: the largest power of two below d that divides it and "
           "fits a node's Ulysses).", "",
           "## One group at each degree", ""]
    for preset in presets:
        out += group_table(preset)
    out += ["## Where the planner uses hybrid groups (shipped mixes, 8 samples per rank)", "",
            f"{args.seeds} seeds per row, the default communicator budget (hybrid degrees as its catalogue admits them); "
            "step times are the plans' predicted step times (min-max of the per-seed ratios); planner CPU time is the "
            "median process time of one `plan_batch` (on a shared 2-core host, under load).",
            ""]
    out += plan_table(presets, args.seeds)
    out += ["## Where `auto` prices hybrid", "",
            "1,000 packs (200 per shipped mix, 1-29 samples each) at every degree 1-64: how often the degree's proper "
            "split (1 < u < d, blocks inside nodes) is faster than the better of ring and Ulysses, and its largest "
            "gain, where Ulysses runs inside one node and elsewhere. `auto` leaves the first to ring and Ulysses.", ""]
    out += pruning_table()
    args.out.write_text("\n".join(out))
    print("\n".join(out))


if __name__ == "__main__":
    main()
