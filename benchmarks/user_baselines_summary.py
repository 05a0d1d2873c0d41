"""One Markdown table of FCP's speedup over each strategy, from the `fcp simulate` outputs that
`benchmarks/user_baselines.sh` writes (benchmarks/results/user_baselines/<preset>_<ranks>.txt).

Each cell is the strategy's step time / FCP's on the same batch, mean [min-max] over 3 seeds x 2 batches, as
`fcp simulate` prints it ("FCP speedup"); above 1, FCP is faster.

    python benchmarks/user_baselines_summary.py > benchmarks/results/user_baselines.md
"""
from __future__ import annotations

import re
from pathlib import Path

from mindspeed_mm.core.fcp.cost.model_error import margin_verdict, model_error
from mindspeed_mm.core.fcp.cost.presets import preset_table

RESULTS = Path(__file__).resolve().parent / "results" / "user_baselines"
COLUMNS = {
    "mindspeed_mm_sampler": "MindSpeed-MM sampler, default CP",
    "mindspeed_mm_sampler_tuned": "MindSpeed-MM sampler, tuned CP",
    "mindspeed_mm_dynamic_batching": "MindSpeed-MM dynamic batching, tuned CP",
    "tuned_static_fsdp": "packed tuned static CP",
    "megatron_hybrid_cp": "Megatron-LM hybrid CP",
    "hdp": "HDP (modelled), tuned CP",
}
ROW = re.compile(r"^(\S*)\s{2,}(\S+)(?: \(([^)]*)\))?\s{2,}([\d,.]+)\s+([\d.]+)\s+\S+\s+([\d.]+ \[[\d.]+-[\d.]+\])")


def parse(path: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """{dataset: {strategy: (speedup cell, layout label)}} of one simulate output."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    dataset = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if not match:
            continue
        dataset = match.group(1) or dataset
        out.setdefault(dataset, {})[match.group(2)] = (match.group(6), match.group(3) or "")
    return out


def main() -> None:
    files = sorted(RESULTS.glob("*.txt"), key=lambda p: (p.stem.rsplit("_", 1)[0], int(p.stem.rsplit("_", 1)[1])))
    print("| preset | ranks | workload | " + " | ".join(COLUMNS.values()) + " |")
    print("|---|---|---|" + "---|" * len(COLUMNS))
    margins: dict[str, list[float]] = {}
    for path in files:
        preset, ranks = path.stem.rsplit("_", 1)
        for dataset, strategies in parse(path).items():
            cells = []
            for name in COLUMNS:
                cell, label = strategies.get(name, ("n/a", ""))
                layout = label.replace(", tuned", "").replace(", default", "")
                cells.append(f"{cell} ({layout})" if layout else cell)
                if name == "tuned_static_fsdp" and cell != "n/a":
                    margins.setdefault(preset, []).append(float(cell.split()[0]) - 1.0)
            print(f"| {preset} | {ranks} | {dataset} | " + " | ".join(cells) + " |")
    print()
    for preset, values in margins.items():
        error = model_error(preset_table(preset))
        inside = sum(margin_verdict(m, error) == "inside the model's error" for m in values)
        print(f"- {preset}: FCP's margin over packed tuned static {100 * min(values):.1f}-{100 * max(values):.1f}% "
              f"(mean per workload and scale); {error.describe()}"
              + (f"; {inside} of {len(values)} margins are inside it" if error.held_out_mean is not None else "") + ".")


if __name__ == "__main__":
    main()
