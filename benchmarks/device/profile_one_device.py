"""Device check of `fcp profile` on one device: profile Qwen3-VL-8B on one GPU with one process (the links from the
`h200` preset), on Hugging Face's Qwen3-VL layers and on the lean decoder, and compare each table's compute
terms with the H200 measurements the `h200` preset is fitted to (`cost.measured_compute.term_errors`). CI never
runs it; on an H200 it takes a few minutes.

    OUT=/tmp python benchmarks/device/profile_one_device.py       # from the project root, on the GPU machine

Writes $OUT/profile_<layers>.json (the tables) and $OUT/profile_one_device.jsonl (one JSON object per term and
table: mean and worst relative error against the measurements). `DRY=1` runs it on the CPU with the tiny
shape and a tiny grid (a check of the script, not of a device: the errors are then meaningless).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mindspeed_mm.core.fcp.cost import ProfileTable  # noqa: E402
from mindspeed_mm.core.fcp.cost.measured_compute import load_rows, term_errors  # noqa: E402
from mindspeed_mm.core.fcp.cost.presets import MODELS  # noqa: E402

DRY = os.environ.get("DRY") == "1"
OUT = Path(os.environ.get("OUT", "."))
if DRY:
    GRID = ["--device", "cpu", "--dtype", "fp32", "--model", "tiny", "--comm-from", "cpu",
            "--attention-lengths", "8,16,32", "--linear-tokens", "32,96", "--repeats", "2", "--sweeps", "1"]
else:
    # The measured sizes of ../shared/device (parts L, C, U, HV), one call of up to 32K tokens so that the
    # documents' work exceeds the call's floor.
    GRID = ["--device", "cuda", "--dtype", "bf16", "--model", "qwen3vl-8b", "--comm-from", "h200",
            "--attention-lengths", "128,512,1024,2048,4096,8192,16384,32768",
            "--linear-tokens", "64,256,1024,4096,16384", "--attention-tokens-per-call", "32768",
            "--attention-docs-per-call", "256", "--vision-frame-groups", "1,2,8", "--repeats", "5", "--sweeps", "2"]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    _, rows = load_rows()
    model = "tiny" if DRY else "qwen3vl-8b"
    depth = MODELS[model].encoder.depth
    with open(OUT / "profile_one_device.jsonl", "w", encoding="utf-8") as report:
        for layers in ("hf", "lean"):
            path = OUT / f"profile_{layers}.json"
            command = [sys.executable, "-m", "mindspeed_mm.core.fcp.cli", "profile", "-o", str(path),
                       "--world-size", "1", "--layers", layers, "--no-progress", *GRID]
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
            print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
            if done.returncode != 0:
                record = {"layers": layers, "error": done.stderr[-2000:]}
                print(json.dumps(record))
                report.write(json.dumps(record) + "\n")
                continue
            table = ProfileTable.load(path)
            fixed = table.time.launch_ms / table.model.layers
            for error in term_errors(table.time, fixed, rows, vision_depth=depth):
                line, what, worst = error.worst
                record = {"layers": layers, "term": error.term, "rows": len(error.points),
                          "mean_abs_error": error.mean_abs_error, "worst": worst, "worst_row": what, "line": line}
                print(json.dumps(record))
                report.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
