"""Every compute term of the `h200` preset against the H200 measurements, before and after the measured fit.

"Before" is the analytic table (`cost.analytic.time_figures`: public peak FLOP/s and efficiency factors,
the figures the `h200` preset had before it was measured); "after" is the preset as shipped, whose
compute terms are fitted to the packaged measurements (`cost.measured_compute`). Each term is evaluated
at every measured row of its part; the mean and worst relative errors are printed as a Markdown table.

    python benchmarks/device_cost_terms.py [--device-data ../shared/device/h200-qwen3vl8b-compute.jsonl]
"""
from __future__ import annotations

import argparse
import dataclasses

from mindspeed_mm.core.fcp.cost.analytic import Setup, time_figures
from mindspeed_mm.core.fcp.cost.measured_compute import fit_measured_compute, load_rows, term_errors
from mindspeed_mm.core.fcp.cost.presets import HARDWARE, MODELS, build_preset_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device-data", help="measurement file (default: the packaged copy)")
    args = parser.parse_args()
    name, rows = load_rows(args.device_data)
    measured = fit_measured_compute(name, rows)
    depth = MODELS["qwen3vl-8b"].encoder.depth
    # The h200 preset before it was measured: analytic compute terms, 0.01 ms per attention call, 0.05 ms per layer.
    hw = dataclasses.replace(HARDWARE["h200"], attention_call_ms=0.01, launch_ms_per_layer=0.05)
    before = term_errors(time_figures(hw, MODELS["qwen3vl-8b"], Setup(1, 1, "bf16", "none", "fsdp", 8)),
                         hw.launch_ms_per_layer, rows, vision_depth=depth)
    after = term_errors(build_preset_table("h200", "qwen3vl-8b", recompute="none").time, measured.layer_floor_ms,
                        rows, vision_depth=depth, model_overhead_ms=measured.model_overhead_ms)
    by_term = {e.term: e for e in before}
    print(f"Measurements: {name} ({len(rows)} lines). Errors are predicted / measured - 1.\n")
    print("| term (part) | rows | before: mean abs | before: worst | after: mean abs | after: worst (row) |")
    print("|---|---|---|---|---|---|")
    for error in after:
        old = by_term[error.term]
        _, _, old_worst = old.worst
        line, row, worst = error.worst
        print(f"| {error.term} | {len(error.points)} | {100 * old.mean_abs_error:.1f}% | {100 * old_worst:+.1f}% | "
              f"{100 * error.mean_abs_error:.1f}% | {100 * worst:+.1f}% ({row}, line {line}) |")
    alpha, beta, gamma = measured.attention
    print(f"\nFitted: layer floor {measured.layer_floor_ms:.3f} ms, attention call floor "
          f"{measured.attention_call_ms:.3f} ms, causal document alpha {alpha:.4g} ms/token^2, beta {beta:.4g} "
          f"ms/token, gamma {gamma:.4g} ms; Ulysses degrees {sorted(measured.ulysses)}; real model's host overhead "
          f"{measured.model_overhead_ms:.3f} ms per layer.")
    for term, lines in measured.rows.items():
        print(f"- {term}: {lines}")


if __name__ == "__main__":
    main()
