"""Launch upstream's `pretrain_transformers.py` under `torch.distributed.run` and parse its Megatron log.

`run_pretrain(checkout, recipe, nproc, workdir, ...)` writes the recipe YAML, launches from the checkout root
(upstream reads `mindspeed_mm/configs/...` and `MM_TOOL_PATH` relative to it) on a free local port with a
timeout, keeps the whole log in `workdir/<name>.log`, and returns a `RunLog` with the per-step loss, grad norm
and step time parsed from the `iteration N/ M | ... | loss: X | ... | grad norm: Y |` lines of rank output.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bed import ENTRY, Checkout
from cpu_ascend.cpu_ascend_hooks import EXACT_GRAD_NORM_PREFIX
from recipe import write_recipe

DEFAULT_TIMEOUT_S = 420
_ITERATION = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_FIELD = re.compile(r"\|\s*([A-Za-z][A-Za-z ()/_-]*?)\s*:\s*([-+0-9.eE]+|nan|inf)\s*(?=\|)")
# The value right after the prefix, wherever the line ends (another rank's output may follow it).
_EXACT_GRAD_NORM = re.compile(re.escape(EXACT_GRAD_NORM_PREFIX) + r"\s*([-+]?(?:nan|inf|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?))")


class LaunchError(RuntimeError):
    """A launch that failed, timed out or logged no step; the message carries the log's tail."""


@dataclass
class RunLog:
    """What one launch logged."""

    losses: list[float]
    """Per-step `loss` (or `lm loss`), iteration 1 first."""
    grad_norms: list[float]
    """Per-step grad norm in full precision (the bed's observer line), else Megatron's 3-decimal figure."""
    step_times_ms: list[float]
    """`elapsed time per iteration (ms)` per step."""
    text: str
    """The whole log (all ranks)."""
    log_path: Path
    wall_s: float
    command: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parse_log(text: str) -> tuple[list[float], list[float], list[float]]:
    """(losses, grad norms, step times) from Megatron's training-log lines, one entry per iteration."""
    steps: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        match = _ITERATION.search(line)
        if not match:
            continue
        fields = {name.strip(): float(value) for name, value in _FIELD.findall(line[match.start():] + "|")}
        steps.setdefault(int(match.group(1)), fields)
    ordered = [steps[i] for i in sorted(steps)]
    losses = [s.get("loss", s.get("lm loss", float("nan"))) for s in ordered]
    grads = [s.get("grad norm", float("nan")) for s in ordered]
    exact = [float(value) for value in _EXACT_GRAD_NORM.findall(text)]
    if len(exact) == len(grads):
        grads = exact
    times = [s.get("elapsed time per iteration (ms)", float("nan")) for s in ordered]
    return losses, grads, times


def launch_env(checkout: Checkout, recipe: dict, extra_env: dict | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "WORLD_SIZE", "RANK", "LOCAL_"))}
    fsdp2 = bool(recipe["gpt_args"].get("use_torch_fsdp2"))
    # The upstream interpreter's bin first, as an activated venv has it (Megatron's dataset helper build runs
    # `python3 -m pybind11`).
    bin_dir = str(checkout.sources.python.parent)
    env.update(
        PATH=os.pathsep.join((bin_dir, env.get("PATH", ""))),
        PYTHONPATH=checkout.pythonpath(),
        # upstream: FSDP2 must not run with 1 connection; Megatron DDP with CP needs exactly 1.
        CUDA_DEVICE_MAX_CONNECTIONS="2" if fsdp2 else "1",
        OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
    )
    env.update(extra_env or {})
    return env


def run_pretrain(checkout: Checkout, recipe: dict, nproc: int, workdir: Path, *, name: str = "run",
                 extra_env: dict | None = None, extra_args: tuple[str, ...] = (), backend: str = "nccl",
                 timeout_s: float = DEFAULT_TIMEOUT_S, expect_steps: int | None = None) -> RunLog:
    """Run upstream training; raises LaunchError (with the log tail) when it fails or logs too few steps.

    `backend` is passed as upstream's launch script does (`--distributed-backend nccl`); the CPU Ascend
    surface's transfer_to_npu maps it to gloo.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    recipe_path = write_recipe(recipe, workdir / f"{name}.yaml")
    log_path = workdir / f"{name}.log"
    command = [str(checkout.sources.python), "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()), ENTRY, str(recipe_path),
               "--distributed-backend", backend, *extra_args]
    start = time.monotonic()
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=checkout.root, env=launch_env(checkout, recipe, extra_env),
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            returncode = None
    wall = time.monotonic() - start
    text = log_path.read_text(errors="replace")
    losses, grads, times = parse_log(text)
    result = RunLog(losses, grads, times, text, log_path, wall, command)
    expected = expect_steps if expect_steps is not None else int(recipe["gpt_args"]["train_iters"])
    if returncode != 0 or len(losses) < expected:
        status = "timed out" if returncode is None else f"exit code {returncode}"
        raise LaunchError(f"{name}: {status}, {len(losses)}/{expected} steps logged after {wall:.0f}s; "
                          f"log {log_path}:\n{tail(text)}")
    return result


def logged_argument(text: str, name: str) -> str | None:
    """The value Megatron printed for argument `name` in its `------ arguments ------` block."""
    match = re.search(rf"^\s+{re.escape(name)} \.+ (.*)$", text, flags=re.MULTILINE)
    return match.group(1).strip() if match else None


def tail(text: str, lines: int = 80) -> str:
    return "\n".join(text.splitlines()[-lines:])
