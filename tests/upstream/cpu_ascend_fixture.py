"""Import the CPU Ascend surface into a test process and take it out again afterwards.

`import torch_npu` binds `torch.npu`, as the real package does; the project's own code probes for `torch_npu`,
so the surface must not stay importable (or bound) after these tests: `loaded()` restores `sys.path`,
`sys.modules` and `torch.npu`. `torch_npu.contrib.transfer_to_npu` patches torch globally and is therefore only
imported in subprocesses (`run_isolated`).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

CPU_ASCEND = Path(__file__).resolve().parent / "cpu_ascend"
_PREFIXES = ("torch_npu", "torchair", "cpu_ascend_hooks")


@contextlib.contextmanager
def loaded():
    """Yields the `torch_npu` module of the CPU surface; removes every trace of it on exit."""
    had_npu, old_npu = hasattr(torch, "npu"), getattr(torch, "npu", None)
    sys.path.insert(0, str(CPU_ASCEND))
    try:
        import torch_npu

        yield torch_npu
    finally:
        sys.path.remove(str(CPU_ASCEND))
        for name in [n for n in sys.modules if n.split(".")[0] in _PREFIXES]:
            del sys.modules[name]
        if had_npu:
            torch.npu = old_npu
        elif hasattr(torch, "npu"):
            del torch.npu


def run_isolated(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (this one) with the CPU surface on PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(CPU_ASCEND), os.environ.get("PYTHONPATH")))))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)
