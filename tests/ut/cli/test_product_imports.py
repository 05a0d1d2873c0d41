"""The product runs where MindSpeed-MM users are: an interpreter without the megatron-core package.

MindSpeed-MM keeps Megatron in its checkout root, so its interpreter has no `megatron` package of its own.
In a fresh interpreter where every `megatron` import fails, the MindSpeed feature's modules (all but the
megatron-core adapters, which are loaded only where megatron is importable) must import, and every `fcp`
command must start; `fcp overlay`, `fcp plan` and `fcp simulate` must run to the end.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BLOCK_MEGATRON = """
import importlib.abc, sys
class _NoMegatron(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "megatron" or name.startswith("megatron."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, _NoMegatron())
"""
PRODUCT_PACKAGES = ("mindspeed_mm_fcp", "mindspeed_mm.features_manager.fcp", "mindspeed_mm.core.fcp.cost",
                    "mindspeed_mm.core.fcp.solver", "mindspeed_mm.core.fcp.parallel", "mindspeed_mm.core.fcp.commands")
MEGATRON_ADAPTERS = "mindspeed_mm.features_manager.fcp.megatron"


def run_without_megatron(code: str, tmp_path: Path) -> dict:
    script = tmp_path / "probe.py"
    script.write_text(BLOCK_MEGATRON + textwrap.dedent(code))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_product_modules_import_without_megatron(tmp_path: Path) -> None:
    result = run_without_megatron(f"""
        import importlib, json, pkgutil
        failed, imported = {{}}, []
        for package in {PRODUCT_PACKAGES!r}:
            module = importlib.import_module(package)
            names = [package] + [m.name for m in pkgutil.walk_packages(module.__path__, package + ".")]
            for name in names:
                if name.startswith({MEGATRON_ADAPTERS!r}):
                    continue
                try:
                    importlib.import_module(name)
                    imported.append(name)
                except Exception as error:
                    failed[name] = f"{{type(error).__name__}}: {{error}}"
        print(json.dumps({{"failed": failed, "imported": len(imported)}}))
    """, tmp_path)
    assert result["failed"] == {}
    assert result["imported"] > 50


def test_every_fcp_command_starts_and_overlay_plan_simulate_run_without_megatron(tmp_path: Path) -> None:
    checkout = tmp_path / "MindSpeed-MM"
    for folder in ("mindspeed_mm", "examples"):
        (checkout / folder).mkdir(parents=True)
    (checkout / "pretrain_transformers.py").write_text("import mindspeed.megatron_adaptor\n")
    result = run_without_megatron(f"""
        import contextlib, io, json
        from mindspeed_mm.core.fcp.cli import COMMAND_MODULES, main
        codes = {{}}
        for module in COMMAND_MODULES:
            command = module.rsplit(".fcp_", 1)[1]
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
    assert result == {**{f"{c} --help": 0 for c in ("plan", "simulate", "train", "demo", "overlay", "profile")},
                      "overlay": 0, "plan": 0, "simulate": 0}
    assert (checkout / "mindspeed_mm" / "features_manager" / "fcp" / "patches.py").is_file()
