"""One object that owns a test bed: assembled checkouts, the tiny model and dataset, recipes and launches.

Reuse it for FCP runs, e.g.::

    bed = UpstreamBed.create(tmp_path)                       # raises BedUnavailable when upstream is missing
    recipe = bed.recipe(cp=1, cp_algo="fcp_cp_algo", extra_gpt={"fcp_preset": "cpu"})
    log = bed.run(recipe, nproc=2, register_fcp=True, name="fcp2")
    log.losses, log.grad_norms, log.step_times_ms, log.text

Checkouts (with and without the FCP registration line) are built once per bed and reused; the dataset cache
is shared by all launches of a bed (same data, same tokenizer).
"""
from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import bed as bed_sources
from recipe import UPSTREAM_MOE_RECIPE, UPSTREAM_RECIPE, tiny_recipe
from runner import DEFAULT_TIMEOUT_S, RunLog, run_pretrain

TINY_BUILDER = Path(__file__).resolve().parent / "tiny_qwen3vl.py"


class BedUnavailable(RuntimeError):
    """The upstream stack (sources or interpreter) is not there; the message names the env vars."""


@dataclass
class UpstreamBed:
    sources: bed_sources.UpstreamSources
    root: Path
    hf_dir: Path
    data_json: Path
    summary: dict
    upstream_recipe: str = UPSTREAM_RECIPE
    """The upstream recipe the bed's recipes derive from (`examples/qwen3vl/...yaml`)."""
    _checkouts: dict = field(default_factory=dict)

    @classmethod
    def create(cls, root: Path, *, long_videos: bool = False, workload: str | None = None,
               moe: bool = False) -> "UpstreamBed":
        """The bed in `root`; `long_videos`: every fourth sample of its dataset a long video; `workload`: one of
        `tiny_qwen3vl.WORKLOADS` (images, short videos, ...; `long_videos` the same as `long_videos=True`); `moe`:
        the MoE model (`tiny_qwen3vl.py`), trained from upstream's 30B-A3B recipe."""
        sources = bed_sources.find_sources()
        if not sources.available:
            raise BedUnavailable(sources.skip_reason())
        root.mkdir(parents=True, exist_ok=True)
        assets = root / "tiny"
        build_tiny_assets(sources, assets, long_videos=long_videos, workload=workload, moe=moe)
        summary = json.loads((assets / "hf" / "tiny_summary.json").read_text())
        return cls(sources, root, assets / "hf", assets / "data" / "data.json", summary,
                   UPSTREAM_MOE_RECIPE if moe else UPSTREAM_RECIPE)

    def checkout(self, register_fcp: bool = False) -> bed_sources.Checkout:
        """The assembled checkout (FCP overlaid; with the registration line when `register_fcp`)."""
        if register_fcp not in self._checkouts:
            target = self.root / ("checkout_fcp_registered" if register_fcp else "checkout")
            self._checkouts[register_fcp] = bed_sources.assemble_checkout(self.sources, target,
                                                                          register_fcp=register_fcp)
        return self._checkouts[register_fcp]

    def recipe(self, *, cp: int = 1, cp_algo: str = "ulysses_cp_algo", fsdp2: bool = True, train_iters: int = 5,
               global_batch_size: int = 4, extra_gpt: dict | None = None, param_dtype: str = "fp32",
               fsdp2_overrides: dict | None = None) -> dict:
        """The tiny recipe; `extra_gpt` adds or replaces `gpt_args` keys (a value None removes the key);
        `fsdp2_overrides` changes keys of its FSDP2 config."""
        recipe = tiny_recipe(self.sources.mindspeed_mm, self.hf_dir, self.data_json, self.root / "shared",
                             cp=cp, cp_algo=cp_algo, fsdp2=fsdp2, train_iters=train_iters,
                             global_batch_size=global_batch_size, summary=self.summary, param_dtype=param_dtype,
                             upstream_recipe=self.upstream_recipe, fsdp2_overrides=fsdp2_overrides)
        for key, value in (extra_gpt or {}).items():
            if value is None:
                recipe["gpt_args"].pop(key, None)
            else:
                recipe["gpt_args"][key] = value
        return recipe

    def run(self, recipe: dict, nproc: int, *, name: str, register_fcp: bool = False, extra_env: dict | None = None,
            extra_args: tuple[str, ...] = (), timeout_s: float = DEFAULT_TIMEOUT_S,
            expect_steps: int | None = None) -> RunLog:
        """Launch upstream training on the (cached) checkout; call counts of the Ascend ops land in
        `<root>/runs/<name>/calls` (see `op_calls`)."""
        workdir = self.root / "runs" / name
        env = {"CPU_ASCEND_CALLS_DIR": str(workdir / "calls"), **(extra_env or {})}
        return run_pretrain(self.checkout(register_fcp), recipe, nproc, workdir, name=name, extra_env=env,
                            extra_args=extra_args, timeout_s=timeout_s, expect_steps=expect_steps)

    def run_many(self, launches: list[dict]) -> dict[str, RunLog]:
        """Several launches at once (each a dict of `run` keywords with `recipe`, `nproc`, `name`); for single-process
        runs that would leave cores idle. Returns name -> RunLog; the first failure is raised after all end."""
        for launch in launches:  # assemble the checkouts first, one at a time
            self.checkout(launch.get("register_fcp", False))
        with ThreadPoolExecutor(max_workers=len(launches)) as pool:
            futures = {launch["name"]: pool.submit(self.run, **launch) for launch in launches}
        return {name: future.result() for name, future in futures.items()}

    def op_calls(self, name: str) -> list[dict]:
        """Per process of run `name`: how often each CPU Ascend operator was called."""
        folder = self.root / "runs" / name / "calls"
        return [json.loads(p.read_text()) for p in sorted(folder.glob("calls_*.json"))]


def build_tiny_assets(sources: bed_sources.UpstreamSources, out: Path, timeout_s: float = 300, *,
                      long_videos: bool = False, workload: str | None = None, moe: bool = False) -> None:
    """Run `tiny_qwen3vl.py` in the upstream interpreter (transformers, tokenizers, PIL, av live there)."""
    if (out / "hf" / "tiny_summary.json").is_file() and (out / "data" / "data.json").is_file():
        return
    env = dict(os.environ, PYTHONPATH=str(bed_sources.CPU_ASCEND), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               OMP_NUM_THREADS="1")
    command = ([str(sources.python), str(TINY_BUILDER), str(out)] + (["--long-videos"] if long_videos else [])
               + (["--workload", workload] if workload else []) + (["--moe"] if moe else []))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building the tiny Qwen3-VL failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
