"""The product stands alone: it runs where MindSpeed-MM users are, without megatron-core and without the demo trainer.

MindSpeed-MM keeps Megatron in its checkout root, so its interpreter has no `megatron` package of its own, and
`fcp overlay` copies the product only (not `mindspeed_mm.core.fcp.sandbox`, the demo trainer). In a fresh
interpreter where every import of either fails, every product module (but the megatron adapters of the feature,
loaded only where Megatron is importable) must import, every product `fcp` command must start, and `fcp overlay`,
`fcp plan` and `fcp simulate` must run to the end. No product module names the sandbox in an import, but for the
one documented place where `fcp profile` times the demo trainer's vision encoder.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SANDBOX = "mindspeed_mm.core.fcp.sandbox"
BLOCKED = ("megatron", SANDBOX)
BLOCK = f"""
import importlib.abc, sys
class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in {BLOCKED!r}):
            raise ModuleNotFoundError(f"No module named {{name!r}}")
sys.meta_path.insert(0, _Blocked())
"""
PRODUCT_ROOTS = ("mindspeed_mm_fcp", "mindspeed_mm/features_manager/fcp", "mindspeed_mm/core/fcp")
MEGATRON_ADAPTERS = "mindspeed_mm.features_manager.fcp.megatron"
SANDBOX_HOOKS = {("mindspeed_mm.core.fcp.profiler.vision", "mindspeed_mm.core.fcp.sandbox.vision.encoder_probe")}
"""(product module, sandbox module) imports allowed inside a function: `fcp profile` times the demo trainer's
vision encoder when asked to measure a vision term (`--no-vision` does without)."""


def product_modules() -> list[str]:
    modules = []
    for root in PRODUCT_ROOTS:
        for path in sorted((ROOT / root).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            if not name.startswith(SANDBOX):
                modules.append(name)
    return modules


def run_blocked(code: str, tmp_path: Path) -> dict:
    script = tmp_path / "probe.py"
    script.write_text(BLOCK + textwrap.dedent(code))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_no_product_module_imports_the_sandbox() -> None:
    found = set()
    for module in product_modules():
        path = ROOT / (module.replace(".", "/") + ".py")
        if not path.is_file():
            path = ROOT / module.replace(".", "/") / "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found |= {(module, name) for name in names if name.startswith(SANDBOX)}
    assert found == SANDBOX_HOOKS


def test_product_modules_import_without_megatron_and_the_sandbox(tmp_path: Path) -> None:
    modules = [m for m in product_modules() if not m.startswith(MEGATRON_ADAPTERS)]
    result = run_blocked(f"""
        import importlib, json
        failed = {{}}
        for name in {modules!r}:
            try:
                importlib.import_module(name)
            except Exception as error:
                failed[name] = f"{{type(error).__name__}}: {{error}}"
        print(json.dumps({{"failed": failed}}))
    """, tmp_path)
    assert result["failed"] == {}
    assert len(modules) > 80


def test_every_product_command_starts_and_overlay_plan_simulate_run(tmp_path: Path) -> None:
    checkout = tmp_path / "MindSpeed-MM"
    for folder in ("mindspeed_mm", "examples"):
        (checkout / folder).mkdir(parents=True)
    (checkout / "pretrain_transformers.py").write_text("import mindspeed.megatron_adaptor\n")
    result = run_blocked(f"""
        import contextlib, io, json
        from mindspeed_mm.core.fcp.cli import build_parser, main
        codes = {{}}
        commands = list(build_parser()._subparsers._group_actions[0].choices)
        for command in commands:
            with contextlib.redirect_stdout(io.StringIO()):
                codes[command + " --help"] = main([command, "--help"])
        with contextlib.redirect_stdout(io.StringIO()):
            codes["overlay"] = main(["overlay", {str(checkout)!r}])
            codes["plan"] = main(["plan", "--dataset", "openvid", "--batch-size", "32", "--ranks", "8",
                                  "--preset", "a3-qwen3vl-8b"])
            codes["simulate"] = main(["simulate", "--datasets", "msrvtt", "--batches", "1", "--global-batch-size", "32",
                                      "--ranks", "8", "--seeds", "0", "--preset", "a3-qwen3vl-8b"])
        print(json.dumps(codes))
    """, tmp_path)
    assert result == {**{f"{c} --help": 0 for c in ("plan", "simulate", "overlay", "profile")},
                      "overlay": 0, "plan": 0, "simulate": 0}
    overlaid = {p.relative_to(checkout).as_posix() for p in checkout.rglob("*.py")}
    assert "mindspeed_mm/features_manager/fcp/patches.py" in overlaid
    assert "mindspeed_mm/core/fcp/runtime/step_runtime.py" in overlaid
    assert not [p for p in overlaid if p.startswith("mindspeed_mm/core/fcp/sandbox")]
