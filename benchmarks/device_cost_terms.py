"""Every compute term of the `h200` preset against the H200 measurements: the analytic terms it had before,
and the measured fit in sample and held out.

"Before" is the analytic table (`cost.analytic.time_figures`: public peak FLOP/s and efficiency factors,
the figures the `h200` preset had before it was measured). The fit (`cost.measured_compute`, which the preset
carries) is scored on every measured row of its part three ways (`cost.term_validation`): in sample; each row
left out of the fit that predicts it; each part's largest size predicted by the fit of the smaller sizes. The
goal of every term is 10% mean and 25% worst held out. Printed as Markdown.

    python benchmarks/device_cost_terms.py [--device-data ../shared/device/h200-qwen3vl8b-compute.jsonl]
"""
from __future__ import annotations

import argparse
import dataclasses

from mindspeed_mm.core.fcp.cost.analytic import Setup, time_figures
from mindspeed_mm.core.fcp.cost.measured_compute import fit_measured_compute, load_rows, term_errors
from mindspeed_mm.core.fcp.cost.presets import HARDWARE, MODELS
from mindspeed_mm.core.fcp.cost.term_validation import (
    GOAL_MEAN, GOAL_WORST, device_held_out, lines, matmul_rate_tflops, vision_flop_rate_tflops,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device-data", help="measurement file (default: the packaged copy)")
    args = parser.parse_args()
    name, rows = load_rows(args.device_data)
    measured = fit_measured_compute(name, rows)
    model = MODELS["qwen3vl-8b"]
    depth = model.encoder.depth
    # The h200 preset before it was measured: analytic compute terms, 0.01 ms per attention call, 0.05 ms per layer.
    hw = dataclasses.replace(HARDWARE["h200"], attention_call_ms=0.01, launch_ms_per_layer=0.05,
                             vision_block_ms=None)
    before = {e.term: e for e in term_errors(time_figures(hw, model, Setup(1, 1, "bf16", "none", "fsdp", 8)),
                                             hw.launch_ms_per_layer, rows, vision_depth=depth)}
    scores = device_held_out(name, rows)
    print(f"Measurements: {name} ({len(rows)} lines). Errors are predicted / measured - 1; goal held out: "
          f"{100 * GOAL_MEAN:.0f}% mean, {100 * GOAL_WORST:.0f}% worst.\n")
    print("| term | analytic table before: mean / worst |")
    print("|---|---|")
    for term in (t.term for t in scores):
        print(f"| {term} | {100 * before[term].mean_abs_error:.1f}% / {100 * before[term].worst[2]:+.1f}% |")
    print("\nThe measured fit (what the preset carries):\n")
    print("\n".join(lines(scores)))
    missed = [t for t in scores if not t.meets_goal]
    if missed:
        print("\nShort of the goal held out: " + "; ".join(
            f"{t.term} {100 * t.held_out_mean:.1f}% mean, {100 * t.held_out_worst:.1f}% worst" for t in missed) + ".")
    print("\nEvery row held out (left out one at a time):\n")
    print("| term | row (line) | measured ms | predicted in sample | predicted left out |")
    print("|---|---|---|---|---|")
    for t in scores:
        fitted = {p[0]: p[3] for p in t.in_sample.points}
        for line, row, ms, predicted in t.leave_one_out.points:
            print(f"| {t.term} | {row} ({line}) | {ms:.3f} | {fitted[line] / ms - 1:+.1%} | {predicted / ms - 1:+.1%} |")
    alpha, beta, gamma = measured.attention
    intercept, slope = measured.vision_line
    enc = model.encoder
    rate = vision_flop_rate_tflops(measured, enc)
    print(f"\nFitted: layer floor {measured.layer_floor_ms:.3f} ms (kernels), real model's layer floor "
          f"{measured.model_layer_floor_ms:.3f} ms (attention call included; the additive equivalent the analytic "
          f"presets copy: {measured.additive_host_ms:.3f} ms); attention call floor {measured.attention_call_ms:.3f} "
          f"ms, causal document alpha {alpha:.4g} ms/token^2, beta {beta:.4g} ms/token, gamma {gamma:.4g} ms; a "
          f"Ulysses rank of degree d: (alpha s^2 + beta s) / d + gamma; vision block floor "
          f"{measured.vision_floor_ms:.3f} ms, then {intercept:.3f} ms + {1e3 * slope:.4f} us per patch "
          f"(that slope is {rate:.0f} TFLOP/s of the block's FLOPs, {rate / matmul_rate_tflops(rows):.0%} of the "
          f"{matmul_rate_tflops(rows):.0f} TFLOP/s the device's GEMM reached).")
    for term, where in measured.rows.items():
        print(f"- {term}: {where}")


if __name__ == "__main__":
    main()
