"""The tiny Qwen3-VL recipe, derived in code from upstream's `examples/qwen3vl/qwen3vl_full_sft_8B.yaml` (the MoE model:
`qwen3vl_full_sft_30B.yaml`, the same recipe with `model_id: qwen3_vl_moe`).

Only paths, sizes, iteration counts and parallel keys change; everything else (optimizer, schedule, template,
sampler, loss config, patches, attention implementation) is upstream's. Rules learned from the upstream reader:
- MindSpeed-MM turns a YAML `true` into `--flag` and any other value into `--flag VALUE`, so a `false` would
  become `--flag False`; a switched-off flag is therefore removed from `gpt_args`, never set to false.
- weights come from the saved HF folder (`init_from_hf_path`, upstream's `from_pretrained` branch):
  `init_model_with_meta_device` and the MindSpeed-MM checkpoint `load` are dropped, so no conversion is needed.
- the run saves nothing (`save` dropped); fp32 throughout (`fsdp2_config.param_dtype: fp32`) unless a test asks
  for upstream's bf16 parameters.
"""
from __future__ import annotations

import copy
from pathlib import Path

import yaml

UPSTREAM_RECIPE = "examples/qwen3vl/qwen3vl_full_sft_8B.yaml"
UPSTREAM_MOE_RECIPE = "examples/qwen3vl/qwen3vl_full_sft_30B.yaml"
"""The recipe of the MoE model (30B-A3B, `model_id: qwen3_vl_moe`)."""
UPSTREAM_FSDP2 = "examples/qwen3vl/fsdp2_config.yaml"


def load_upstream(mindspeed_mm: Path, upstream_recipe: str = UPSTREAM_RECIPE) -> tuple[dict, dict]:
    """Upstream's recipe (default the 8B one) and its FSDP2 config, as dicts (YAML anchors resolved)."""
    recipe = yaml.safe_load((mindspeed_mm / upstream_recipe).read_text())
    fsdp2 = yaml.safe_load((mindspeed_mm / UPSTREAM_FSDP2).read_text())
    return recipe, fsdp2


def _drop(section: dict, *keys: str) -> None:
    for key in keys:
        section.pop(key, None)


def tiny_recipe(mindspeed_mm: Path, hf_dir: Path, data_json: Path, workdir: Path, *, cp: int = 1,
                cp_algo: str = "ulysses_cp_algo", fsdp2: bool = True, train_iters: int = 5,
                global_batch_size: int = 4, seq_length: int = 1024, summary: dict | None = None,
                param_dtype: str = "fp32", upstream_recipe: str = UPSTREAM_RECIPE,
                fsdp2_overrides: dict | None = None) -> dict:
    """The recipe dict for the tiny model; `workdir` receives the FSDP2 config and the dataset cache.

    `param_dtype` is FSDP2's compute dtype of the parameters: fp32 (default), or upstream's bf16 (gradients
    reduced in fp32, as upstream's `fsdp2_config.yaml`); `fsdp2_overrides` changes other keys of that config
    (`expert_parallel_size`)."""
    recipe, fsdp2_config = load_upstream(mindspeed_mm, upstream_recipe)
    recipe = copy.deepcopy(recipe)
    summary = summary or {}
    gpt = recipe["gpt_args"]
    workdir.mkdir(parents=True, exist_ok=True)

    for anchor in ("HF_MODEL_LOAD_PATH", "MM_MODEL_LOAD_PATH", "DATASET_PATH", "FSDP2_PATH", "SAVE_PATH"):
        recipe.pop(anchor, None)
    # parallel keys
    gpt["context_parallel_size"] = cp
    gpt["context_parallel_algo"] = cp_algo
    if fsdp2:
        fsdp2_config = dict(fsdp2_config, param_dtype=param_dtype, reduce_dtype="fp32", **(fsdp2_overrides or {}))
        suffix = "".join(f"_{key}_{value}" for key, value in sorted((fsdp2_overrides or {}).items()))
        fsdp2_path = workdir / f"fsdp2_config_{param_dtype}{suffix}.yaml"
        fsdp2_path.write_text(yaml.safe_dump(fsdp2_config, sort_keys=False))
        gpt["fsdp2_config_path"] = str(fsdp2_path)
    else:
        _drop(gpt, "use_torch_fsdp2", "fsdp2_config_path", "ckpt_format")
    # sizes, iterations, paths
    gpt.update(global_batch_size=global_batch_size, train_iters=train_iters, seq_length=seq_length,
               vocab_size=summary.get("vocab_size", 320), num_workers=0)
    _drop(gpt, "save", "load", "init_model_with_meta_device")

    data = recipe["data"]["dataset_param"]
    data["preprocess_parameters"]["model_name_or_path"] = str(hf_dir)
    basic = data["basic_parameters"]
    basic.update(dataset_dir=str(data_json.parent), dataset=str(data_json), cache_dir=str(workdir / "cache"),
                 preprocessing_num_workers=1)
    data["attr"]["videos"] = "videos"

    model = recipe["model"]
    model["init_from_hf_path"] = str(hf_dir)
    vision = model["image_encoder"]["vision_encoder"]
    vision.update(num_layers=summary.get("vit_layers", 2), hidden_size=summary.get("vit_hidden", 32),
                  num_attention_heads=summary.get("vit_heads", 2))
    text = model["text_decoder"]
    text.update(num_layers=summary.get("llm_layers", 2), hidden_size=summary.get("llm_hidden", 64),
                num_attention_heads=summary.get("llm_heads", 4))
    return recipe


def write_recipe(recipe: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path
