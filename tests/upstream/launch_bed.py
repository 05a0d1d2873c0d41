"""The CPU test bed for a shell launcher: `eval "$(python tests/upstream/launch_bed.py WORKDIR)"`.

Assembles (once) a MindSpeed-MM checkout in WORKDIR/checkout from the upstream sources (`bed.find_sources`), with
FCP overlaid and registered as a user does, builds the tiny Qwen3-VL and its long-video data in the checkout's
`tiny/` (the paths of `examples/qwen3vl/qwen3vl_tiny_cpu_fcp.yaml`), and prints the shell variables a launch
needs: CHECKOUT, UPSTREAM_PYTHON and the environment of `runner.launch_env` (the CPU Ascend surface on the
path). Exits 1, naming what is missing, when the upstream stack is not there.
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import bed as bed_sources  # noqa: E402
from harness import build_tiny_assets  # noqa: E402
from runner import launch_env  # noqa: E402

EXPORTED = ("PATH", "PYTHONPATH", "CUDA_DEVICE_MAX_CONNECTIONS", "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM",
            "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "PYTHONUNBUFFERED",
            "PYTHONDONTWRITEBYTECODE")


def prepare(workdir: Path) -> dict[str, str]:
    sources = bed_sources.find_sources()
    if not sources.available:
        raise SystemExit(sources.skip_reason())
    target = workdir / "checkout"
    if (target / bed_sources.ENTRY).is_file():
        checkout = bed_sources.Checkout(target, sources, True, "")
    else:
        checkout = bed_sources.assemble_checkout(sources, target, register_fcp=True)
    build_tiny_assets(sources, target / "tiny", long_videos=True)
    env = launch_env(checkout, {"gpt_args": {"use_torch_fsdp2": True}}, None)
    return {"CHECKOUT": str(target), "UPSTREAM_PYTHON": str(sources.python), **{k: env[k] for k in EXPORTED}}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: launch_bed.py WORKDIR\n")
        return 2
    for name, value in prepare(Path(argv[0]).resolve()).items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
