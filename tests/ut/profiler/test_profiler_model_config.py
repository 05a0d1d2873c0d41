"""`fcp profile --recipe / --model-config`: the table of the model a run trains, on the test bed's tiny Qwen3-VL
(dense, as `tests/upstream/tiny_qwen3vl.py` builds it) and a tiny Qwen3-VL MoE of the same sizes; the profiler's
mixture-of-experts MLP against transformers' own."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from mindspeed_mm.core.fcp.cli import main
from mindspeed_mm.core.fcp.cost import CostModel, ProfileTable
from mindspeed_mm.core.fcp.cost.model_config import read_model_config
from mindspeed_mm.core.fcp.cost.shapes import ExpertShape
from mindspeed_mm.core.fcp.profiler.decoder import ExpertMLP
from mindspeed_mm.core.fcp.solver import SolverConfig, validate_plan
from mindspeed_mm.core.fcp.solver.planner import plan_batch

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "upstream"))
from tiny_qwen3vl import TEXT_SHAPE, VISION_SHAPE, VOCAB_SIZE  # noqa: E402  (the bed's tiny shapes)

TINY_RECIPE = REPO / "examples" / "qwen3vl" / "qwen3vl_tiny_cpu_fcp.yaml"
TINY_EXPERTS = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1,
                    mlp_only_layers=[])
GRID = ["--vision-window", "16", "--vision-frame-groups", "1,2", "--attention-lengths", "8,16,32",
        "--linear-tokens", "32,96", "--message-bytes", "1024,8192", "--world-size", "2", "--repeats", "2",
        "--sweeps", "1", "--no-progress"]


def _save_config(folder: Path, moe: bool) -> Path:
    """The config.json of the bed's tiny Qwen3-VL (or of its MoE sibling), written by transformers."""
    transformers = pytest.importorskip("transformers")
    text = dict(vocab_size=VOCAB_SIZE, tie_word_embeddings=False, **TEXT_SHAPE, **(TINY_EXPERTS if moe else {}))
    config_class = transformers.Qwen3VLMoeConfig if moe else transformers.Qwen3VLConfig
    config_class(text_config=text, vision_config=VISION_SHAPE, tie_word_embeddings=False).save_pretrained(folder)
    return folder / "config.json"


def test_the_expert_mlp_is_transformers_sparse_moe_block() -> None:
    from transformers import Qwen3VLMoeTextConfig
    from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeTextSparseMoeBlock

    torch.manual_seed(0)
    config = Qwen3VLMoeTextConfig(hidden_size=64, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=24)
    reference = Qwen3VLMoeTextSparseMoeBlock(config).double()
    ours = ExpertMLP(64, ExpertShape(experts=6, top_k=2, expert_ffn=24), torch.float64)
    with torch.no_grad():
        ours.router.weight.copy_(reference.gate.weight)
        reference.experts.gate_up_proj.copy_(ours.gate_up)
        reference.experts.down_proj.copy_(ours.down)
    x = torch.randn(1, 37, 64, dtype=torch.float64, requires_grad=True)
    expected = reference(x)
    expected = expected[0] if isinstance(expected, tuple) else expected
    got = ours(x[0])
    torch.testing.assert_close(got, expected[0])
    grad = torch.randn_like(got)
    torch.testing.assert_close(torch.autograd.grad(got, x, grad)[0], torch.autograd.grad(expected[0], x, grad)[0])


def test_the_expert_activation_estimate_is_below_what_the_per_expert_loop_keeps() -> None:
    """`ExpertShape.activation_bytes` counts the grouped-GEMM path the presets price; transformers' training path
    (a loop over the experts hit, as MindSpeed-MM's unfused `Qwen3VLMoeTextExperts`) keeps index tensors, a dense
    [tokens, experts] weight matrix and its own copies beside them: measured here, 1.5-2x the estimate."""
    from transformers import Qwen3VLMoeTextConfig
    from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeTextSparseMoeBlock

    from mindspeed_mm.core.fcp.profiler.memory import saved_tensor_bytes

    torch.manual_seed(0)
    block = Qwen3VLMoeTextSparseMoeBlock(Qwen3VLMoeTextConfig(hidden_size=128, num_experts=16, num_experts_per_tok=4,
                                                              moe_intermediate_size=96)).to(torch.bfloat16)

    def kept(tokens: int) -> int:
        x = torch.randn(1, tokens, 128, dtype=torch.bfloat16, requires_grad=True)

        def loss() -> torch.Tensor:
            out = block(x)
            return (out[0] if isinstance(out, tuple) else out).float().square().sum()

        return saved_tensor_bytes(block, loss)

    per_token = (kept(1024) - kept(256)) / 768
    estimate = ExpertShape(experts=16, top_k=4, expert_ffn=96).activation_bytes(128)
    assert 1.2 * estimate < per_token < 2.2 * estimate, (per_token, estimate)


def test_profile_the_model_of_a_recipe_and_of_a_moe_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # The dense tiny model where the tiny CPU recipe (examples/qwen3vl) names it, from the folder runs start in.
    dense_config = _save_config(tmp_path / "tiny" / "hf", moe=False)
    moe_config = _save_config(tmp_path / "tiny_moe", moe=True)
    monkeypatch.chdir(tmp_path)
    runs = ((["--recipe", str(TINY_RECIPE)], dense_config), (["--model-config", "tiny_moe"], moe_config))
    for argv, config_path in runs:
        out = tmp_path / f"{config_path.parent.name}.json"
        assert main(["profile", *argv, "-o", str(out), *GRID]) == 0
        assert f"model shape    {config_path.resolve()}" in capsys.readouterr().out
        table = ProfileTable.load(out)
        expected = read_model_config(config_path, vision_window=16)
        assert table.model == expected.model_shape()
        source = table.provenance["model_shape_source"]
        assert source["path"] == str(config_path.resolve()) and source["sha256"] == expected.sha256
        assert ("recipe" in source) == (argv[0] == "--recipe")
        cost = CostModel(table, max_tokens_per_rank=64)
        lengths = [100, 12, 40, 9, 63, 30]
        validate_plan(plan_batch(lengths, cost, SolverConfig(num_ranks=2, ranks_per_node=2)), lengths, cost)
    moe = ProfileTable.load(tmp_path / "tiny_moe.json")
    assert moe.model.experts == ExpertShape(experts=4, top_k=2, expert_ffn=32) and moe.expert_parallel == 1
    dense = ProfileTable.load(tmp_path / "hf.json")
    assert dense.model.experts is None and dense.model.vocab == VOCAB_SIZE


@pytest.mark.parametrize("argv, message", [
    (["--recipe", "{tmp}/recipe.yaml"], r"model.init_from_hf_path='./missing': no config.json"),
    (["--model-config", "{tmp}/bad"], r"model_type is 'llava'"),
    (["--model", "tiny", "--vision-window", "16"], "--vision-window sets the window of a shape read with"),
    (["--model", "tiny", "--recipe", "{tmp}/recipe.yaml"], "not allowed with argument"),
])
def test_bad_model_sources_exit_2_naming_the_key(argv: list[str], message: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "recipe.yaml").write_text("model:\n  init_from_hf_path: ./missing\n")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text('{"model_type": "llava"}')
    monkeypatch.chdir(tmp_path)
    assert main(["profile", "-o", str(tmp_path / "t.json"), *[a.replace("{tmp}", str(tmp_path)) for a in argv]]) == 2
    assert re.search(message, capsys.readouterr().err)
