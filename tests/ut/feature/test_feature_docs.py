"""The FCP docs and examples agree with the real options, presets and patch targets."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from mindspeed_mm.core.fcp.commands.fcp_overlay import ENTRY_LINE
from mindspeed_mm.core.fcp.cost import list_presets
from mindspeed_mm.features_manager.fcp import FCPFeature
from mindspeed_mm.features_manager.fcp.model_adapter import adapter_for
from mindspeed_mm.features_manager.fcp.patches import FCP_PATCHES

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "zh" / "features" / "parallel" / "fcp.md"
README = ROOT / "README.md"
EXAMPLES = ROOT / "examples" / "qwen3vl"
FLAG = re.compile(r"--fcp-[a-z0-9-]*[a-z0-9]")


def parser_flags() -> dict[str, argparse.Action]:
    parser = argparse.ArgumentParser()
    FCPFeature().register_args(parser)
    return {o: a for a in parser._actions for o in a.option_strings if o.startswith("--fcp-")}


def example_files() -> list[Path]:
    files = sorted(p for p in EXAMPLES.iterdir() if "fcp" in p.name)
    assert {p.suffix for p in files} == {".sh", ".yaml"}
    return files


def yaml_fcp_flags(path: Path) -> set[str]:
    gpt_args = yaml.safe_load(path.read_text(encoding="utf-8"))["gpt_args"]
    return {"--" + key.replace("_", "-") for key in gpt_args if key.startswith("fcp_")}


def doc_table_rows() -> dict[str, str]:
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `(--fcp-[a-z-]+)` \|", line)
        if match:
            rows[match.group(1)] = line
    return rows


@pytest.mark.parametrize("path", [DOC, README, *example_files()], ids=lambda p: p.name)
def test_every_fcp_flag_mentioned_exists_in_the_parser(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    mentioned = set(FLAG.findall(text))
    if path.suffix == ".yaml":
        mentioned |= yaml_fcp_flags(path)
    assert mentioned - parser_flags().keys() == set()


def test_every_parser_flag_is_in_the_docs_table_once() -> None:
    rows = doc_table_rows()
    assert sorted(rows) == sorted(parser_flags())
    table = DOC.read_text(encoding="utf-8")
    assert table.count("| 参数 | 说明 | 是否必选 | 默认值 |") == 1


@pytest.mark.parametrize("flag, documented", [
    ("--fcp-attention-algo", "`auto`"),
    ("--fcp-attention-kernel", "`auto`"),
    ("--fcp-group-pool", "`lazy`"),
    ("--fcp-async-planning", "`true`"),
    ("--fcp-log-plan", "`false`"),
    ("--fcp-recalibrate", "`true`"),
    ("--fcp-recalibration-smoothing", "`0.3`"),
    ("--fcp-comm-timeout-s", "`300.0`"),
])
def test_documented_defaults_and_choices(flag: str, documented: str) -> None:
    action = parser_flags()[flag]
    row = doc_table_rows()[flag]
    assert row.rstrip(" |").endswith(documented)
    assert str(action.default).lower() == documented.strip("`")
    for choice in action.choices or ():
        assert f"`{choice}`" in row


def test_every_preset_is_covered_by_the_docs() -> None:
    row = doc_table_rows()["--fcp-preset"]
    for name in list_presets():
        hardware, _, model = name.partition("-")
        assert f"`{name}`" in row or (f"`{hardware}`" in row and f"`{model}`" in row), name


def test_every_patch_target_is_listed_with_its_reason() -> None:
    text = DOC.read_text(encoding="utf-8")
    listed = re.findall(r"^\| `([a-z_.A-Z0-9]+)` \| ", text, flags=re.MULTILINE)
    assert listed == [p.target for p in FCP_PATCHES] + [p.target for p in adapter_for("qwen3_vl").patches]


def test_entry_line_is_the_documented_one() -> None:
    for path in (DOC, README, EXAMPLES / "finetune_qwen3vl_8B_fcp.sh"):
        assert ENTRY_LINE.split("  #")[0] in path.read_text(encoding="utf-8"), path
    assert (ROOT / "mindspeed_mm_fcp" / "register.py").is_file()


def test_doc_has_the_house_sections() -> None:
    text = DOC.read_text(encoding="utf-8")
    headings = re.findall(r"^(#+) (.+)$", text, flags=re.MULTILINE)
    assert headings[0][0] == "#"
    sections = [h for level, h in headings if level == "##"]
    assert sections == ["问题分析", "解决方案", "使用场景", "使用方法", "使用效果"]
    assert "> [!NOTE]" in text
    image = re.search(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert image and (DOC.parent / image.group(1)).is_file()


def test_npu_example_selects_fcp_with_the_required_megatron_options() -> None:
    gpt_args = yaml.safe_load((EXAMPLES / "qwen3vl_full_sft_8B_fcp.yaml").read_text(encoding="utf-8"))["gpt_args"]
    assert gpt_args["context_parallel_algo"] == "fcp_cp_algo"
    assert gpt_args["micro_batch_size"] == 1 and gpt_args["context_parallel_size"] == 1
    assert gpt_args["fcp_preset"] in list_presets()
    assert all(not isinstance(v, (list, dict)) for k, v in gpt_args.items() if k.startswith("fcp_"))
    script = (EXAMPLES / "finetune_qwen3vl_8B_fcp.sh").read_text(encoding="utf-8")
    assert "examples/qwen3vl/qwen3vl_full_sft_8B_fcp.yaml" in script


def test_npu_example_preset_fits_its_model_and_passes_validation() -> None:
    """MindSpeed-MM fills --num-layers / --hidden-size / --num-attention-heads from `model.text_decoder`."""
    from mindspeed_mm.features_manager.fcp.validation import validate_fcp_args

    recipe = yaml.safe_load((EXAMPLES / "qwen3vl_full_sft_8B_fcp.yaml").read_text(encoding="utf-8"))
    decoder = recipe["model"]["text_decoder"]
    args = argparse.Namespace(**recipe["gpt_args"])
    args.num_layers, args.hidden_size = decoder["num_layers"], decoder["hidden_size"]
    args.num_attention_heads = decoder["num_attention_heads"]
    args.world_size = 8  # finetune_qwen3vl_8B_fcp.sh: one node of 8 NPUs
    validate_fcp_args(args)
