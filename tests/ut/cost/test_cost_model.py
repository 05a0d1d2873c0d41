"""CostModel: times against step-by-step references, vectorised == scalar, memory, workloads, properties."""
from __future__ import annotations

import dataclasses

import copy
from typing import Any, Callable

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import (
    ALGOS, CostModel, GroupWorkload, ModelDoesNotFitError, ProfileTable, WorkloadColumns, build_preset_table,
)
from mindspeed_mm.core.fcp.cost.measured_compute import load_h200_qwen3vl8b
from mindspeed_mm.core.fcp.cost.presets import HARDWARE, MODELS

# A toy table with round numbers: 3 layers, 8 heads / 2 KV heads of 16, 4 ranks per node.
LAYERS, HEADS, KV_HEADS, HEAD_DIM, RPN = 3, 8, 2, 16, 4
ALPHA, BETA, GAMMA = 1e-6, 1e-4, 0.01                 # causal attention per layer: A(s), ms
ATTN_BWD, LIN_BWD = 2.5, 2.0
LINEAR_MS, OUTPUT_MS, VISION_MS, VISION_CALL_MS, LAUNCH_MS = 0.002, 0.001, 0.0005, 0.3, 0.5
P2P = {"intra": (0.01, 1e-6), "inter": (0.05, 1e-5)}  # (latency ms, ms per byte)
A2A = {"intra": (0.02, 2e-6), "inter": (0.08, 2e-5)}
STATIC, WORKSPACE, ACT = 1e8, 5e7, 1e4
MEMORY, USABLE = 10**9, 0.5                           # capacity = (5e8 - 1.5e8) / 1e4 = 35000


def _attention(s: float) -> float:
    return ALPHA * s * s + BETA * s + GAMMA


def _affine_grid(latency: float, per_byte: float) -> dict[str, Any]:
    xs = [float(4**k * 1024) for k in range(10)]
    return {"x": xs, "y": [latency + per_byte * x for x in xs], "scale": "linear"}


def toy_doc(recompute: str = "none") -> dict[str, Any]:
    lengths = [float(2**k) for k in range(4, 18)]
    return {
        "schema_version": 1,
        "hardware": {"name": "toy", "device": "cpu", "ranks_per_node": RPN, "memory_bytes": MEMORY,
                     "usable_memory_fraction": USABLE, "peak_tflops": 1.0, "intra_node_bytes_per_s": 1e9,
                     "inter_node_bytes_per_s": 1e8},
        "model": {"name": "toy", "layers": LAYERS, "hidden": 128, "heads": HEADS, "kv_heads": KV_HEADS,
                  "head_dim": HEAD_DIM, "ffn": 256, "vocab": 100, "attention_mask": "causal",
                  "vision": {"depth": 1, "hidden": 32, "heads": 2, "mlp": 64, "patch_size": 4,
                             "spatial_merge": 2, "temporal_patch": 1}},
        "dtype": "bf16", "tp": 1, "pp": 1, "recompute": recompute,
        "time": {
            "attention_ms": {"causal": {"x": lengths, "y": [_attention(s) for s in lengths], "scale": "loglog"},
                             "full": {"x": lengths, "y": [2 * _attention(s) for s in lengths], "scale": "loglog"}},
            "attention_backward_ratio": ATTN_BWD, "linear_ms_per_token": LINEAR_MS,
            "linear_backward_ratio": LIN_BWD, "output_ms_per_token": OUTPUT_MS,
            "vision_ms_per_patch": VISION_MS, "vision_ms_per_call": VISION_CALL_MS, "launch_ms": LAUNCH_MS,
            "p2p_ms": {k: _affine_grid(*v) for k, v in P2P.items()},
            "all_to_all_ms": {k: _affine_grid(*v) for k, v in A2A.items()},
        },
        "memory": {"static_bytes": STATIC, "workspace_bytes": WORKSPACE, "activation_bytes_per_token": ACT,
                   "vision_activation_bytes_per_token": 0.0},
        "provenance": {"source": "test"},
    }


def toy_model(recompute: str = "none", **kw: Any) -> CostModel:
    return CostModel(ProfileTable.from_dict(toy_doc(recompute)), **kw)


Comm = Callable[[str, float], float]


def _affine(kind: dict[str, tuple[float, float]]) -> Comm:
    def time_ms(link: str, nbytes: float) -> float:
        latency, per_byte = kind[link]
        return latency + per_byte * nbytes
    return time_ms


def _rest(lengths: list[int], patches: int, d: int, passes: int) -> float:
    """Linear, output, vision and launch terms: every rank of a group with patches calls the encoder once."""
    extra = (passes - 1) / (1 + LIN_BWD)
    tokens = sum(lengths)
    vision_call = VISION_CALL_MS * (1 + extra) if patches else 0.0
    return ((LAYERS * LINEAR_MS * (1 + extra) + OUTPUT_MS) * tokens + VISION_MS * (1 + extra) * patches) / d \
        + vision_call + LAUNCH_MS


def ring_reference(lengths: list[int], d: int, passes: int, patches: int = 0, p2p: Comm = _affine(P2P)) -> float:
    """Step by step: d blocks per pass, block i > 0 waits for max(its compute, its transfer)."""
    block = sum(_attention(s / d) for s in lengths)
    fwd, bwd = block / (1 + ATTN_BWD), block * ATTN_BWD / (1 + ATTN_BWD)
    kv_bytes = 2 * KV_HEADS * HEAD_DIM * 2 * sum(lengths) / d
    link = "inter" if d > RPN else "intra"
    layer = 0.0
    for pass_index in range(passes + 1):
        compute, nbytes = (fwd, kv_bytes) if pass_index < passes else (bwd, 2 * kv_bytes)
        layer += compute
        for _ in range(1, d):
            layer += max(compute, p2p(link, nbytes))
    return LAYERS * layer + _rest(lengths, patches, d, passes)


def ulysses_reference(lengths: list[int], d: int, passes: int, a2a: Comm = _affine(A2A)) -> float:
    """Rank 0 of ranks 0..d-1 (node = rank // RPN) sends buffer / d to every peer, twice per pass."""
    tokens = sum(lengths) / d
    buffers = [tokens * (HEADS + 2 * max(KV_HEADS, d)) * HEAD_DIM * 2, tokens * HEADS * HEAD_DIM * 2]
    comm = 0.0
    for buffer in buffers:
        near = sum(buffer / d for peer in range(1, d) if peer // RPN == 0)
        far = sum(buffer / d for peer in range(1, d) if peer // RPN != 0)
        if d > 1:
            comm += max(a2a("intra", near), a2a("inter", far) if far else 0.0)
    compute = sum((_attention(s) - GAMMA) / d + GAMMA for s in lengths)
    fwd = compute / (1 + ATTN_BWD)
    layer = passes * (fwd + comm) + (compute - fwd) + comm
    return LAYERS * layer + _rest(lengths, 0, d, passes)


BATCHES = [[3000], [100, 200, 50], [20000, 3000, 7], [512] * 12]


@pytest.mark.parametrize("recompute, passes", [("none", 1), ("full", 2)])
@pytest.mark.parametrize("lengths", BATCHES)
def test_ring_matches_step_reference(lengths: list[int], recompute: str, passes: int) -> None:
    model = toy_model(recompute)
    work = model.workload(lengths, [5] * len(lengths))
    for d in (1, 2, 3, 4, 5, 7, 8):
        expected = ring_reference(lengths, d, passes, patches=5 * len(lengths))
        assert model.group_time_ms(work, d, "ring") == pytest.approx(expected, rel=1e-9), d


@pytest.mark.parametrize("recompute, passes", [("none", 1), ("full", 2)])
@pytest.mark.parametrize("lengths", BATCHES)
def test_ulysses_matches_peer_reference(lengths: list[int], recompute: str, passes: int) -> None:
    model = toy_model(recompute)
    work = model.workload(lengths)
    for d in (1, 2, 4, 8):   # 8 > RPN spans two nodes
        expected = ulysses_reference(lengths, d, passes)
        assert model.group_time_ms(work, d, "ulysses") == pytest.approx(expected, rel=1e-9), d


def test_measured_comm_grids_are_interpolated() -> None:
    doc = toy_doc("full")
    for kind in ("p2p_ms", "all_to_all_ms"):
        for grid in doc["time"][kind].values():
            # Bend the line: small messages pay relatively more (not affine any more).
            grid["y"] = [y * (1.0 + 0.5 / (1 + i)) for i, y in enumerate(grid["y"])]
            grid["y"] = [max(grid["y"][: i + 1]) for i in range(len(grid["y"]))]
    table = ProfileTable.from_dict(doc)
    assert table.time.p2p_intra_ms.affine() is None
    model = CostModel(table)
    grids = {"p2p": {"intra": table.time.p2p_intra_ms, "inter": table.time.p2p_inter_ms},
             "a2a": {"intra": table.time.all_to_all_intra_ms, "inter": table.time.all_to_all_inter_ms}}

    def p2p(link: str, n: float) -> float:
        return float(grids["p2p"][link](n))

    def a2a(link: str, n: float) -> float:
        return float(grids["a2a"][link](n))

    for lengths in BATCHES:
        work = model.workload(lengths)
        for d in (1, 2, 3, 5, 8):
            assert model.group_time_ms(work, d, "ring") == pytest.approx(
                ring_reference(lengths, d, 2, p2p=p2p), rel=1e-9)
        for d in (1, 2, 4, 8):
            assert model.group_time_ms(work, d, "ulysses") == pytest.approx(
                ulysses_reference(lengths, d, 2, a2a=a2a), rel=1e-9)


def test_one_rank_has_no_communication_so_algos_agree() -> None:
    model = toy_model("full")
    work = model.workload([3000, 40, 900])
    assert model.group_time_ms(work, 1, "ring") == pytest.approx(model.group_time_ms(work, 1, "ulysses"), rel=1e-12)


def test_ulysses_needs_head_divisibility() -> None:
    model = toy_model()
    work = model.workload([1000])
    supported = [d for d in range(1, 12) if model.ulysses_supported(d)]
    assert supported == [1, 2, 4, 8]   # 8 heads; 2 KV heads replicated for d = 4, 8
    times = model.group_time_ms(work, np.arange(1, 12), "ulysses")
    assert np.isfinite(times[[0, 1, 3, 7]]).all()
    assert np.isinf(np.delete(times, [0, 1, 3, 7])).all()
    assert not model.ulysses_supported(0)


def test_ulysses_kv_head_adjustment() -> None:
    table = CostModel.from_preset("a3-qwen3vl-8b").table

    def heads(query: int, kv: int) -> CostModel:
        return CostModel(dataclasses.replace(table, model=dataclasses.replace(table.model, heads=query, kv_heads=kv)))

    # 12 query heads, 2 KV heads: d=3 divides 12 but neither divides nor is a multiple of 2.
    assert [d for d in range(1, 13) if heads(12, 2).ulysses_supported(d)] == [1, 2, 4, 6, 12]
    # 14 heads and 2 KV heads (28 and 4 at TP 2).
    assert [d for d in range(1, 15) if heads(14, 2).ulysses_supported(d)] == [1, 2, 14]


@pytest.mark.parametrize("algo", ALGOS)
def test_vectorised_equals_scalar(algo: str) -> None:
    model = CostModel.from_preset("a3-qwen3vl-8b")
    rng = np.random.default_rng(0)
    degrees = rng.integers(1, 70, size=50)   # unsorted, repeated, across nodes
    for _ in range(5):
        lengths = [int(x) for x in rng.integers(1, 40000, size=int(rng.integers(1, 8)))]
        work = model.workload(lengths)
        vector = model.group_time_ms(work, degrees, algo)
        scalar = np.array([model.group_time_ms(work, int(d), algo) for d in degrees])
        np.testing.assert_array_equal(np.isinf(vector), np.isinf(scalar))
        finite = np.isfinite(scalar)
        np.testing.assert_allclose(vector[finite], scalar[finite], rtol=1e-12)


def test_best_time_is_min_over_algos() -> None:
    model = CostModel.from_preset("a3-qwen3vl-8b")
    degrees = np.arange(1, 65)
    for lengths in ([500], [3000] * 6, [30000, 20000], [100000]):
        work = model.workload(lengths)
        best, index = model.best_time_ms(work, degrees)
        each = np.stack([model.group_time_ms(work, degrees, a) for a in model.algos])
        np.testing.assert_allclose(best, each.min(axis=0))
        finite = np.isfinite(best)
        np.testing.assert_allclose(each[index[finite], np.flatnonzero(finite)], best[finite])


def test_best_time_with_one_algo() -> None:
    work = GroupWorkload(4000, 2, 8_000_000)
    ring_only = CostModel.from_preset("a3-qwen3vl-8b", algos=["ring"])
    best, index = ring_only.best_time_ms(work, np.arange(1, 9))
    np.testing.assert_allclose(best, ring_only.group_time_ms(work, np.arange(1, 9), "ring"))
    assert not index.any()
    uly_only = CostModel.from_preset("a3-qwen3vl-8b", algos=["ulysses"])
    best, index = uly_only.best_time_ms(work, np.arange(1, 9))
    assert np.isinf(best[[2, 4, 5, 6]]).all() and np.isfinite(best[[0, 1, 3, 7]]).all()
    assert not index.any()


def _random_workloads(model: CostModel, rng: np.random.Generator, count: int) -> list[GroupWorkload]:
    out = []
    for _ in range(count):
        size = int(rng.integers(1, 6))
        lengths = [int(x) for x in rng.integers(1, 90000, size=size)]
        out.append(model.workload(lengths, [int(x) for x in rng.integers(0, 4 * 90000, size=size)]))
    return out


@pytest.mark.parametrize("algos", [ALGOS, ("ulysses", "ring"), ("ring",), ("ulysses",)])
def test_best_time_table_equals_best_time_ms_row_by_row(algos: tuple[str, ...]) -> None:
    model = CostModel.from_preset("a3-qwen3vl-8b", algos=algos)
    rng = np.random.default_rng(1)
    workloads = _random_workloads(model, rng, 40)
    degrees = rng.integers(1, 80, size=(40, 23))   # unsorted rows, repeats, across nodes, memory-infeasible ones
    times, index = model.best_time_table(workloads, degrees)
    assert times.shape == index.shape == degrees.shape
    assert np.isinf(times).any() and np.isfinite(times).any()
    for k, work in enumerate(workloads):
        row_times, row_index = model.best_time_ms(work, degrees[k])
        np.testing.assert_array_equal(times[k], row_times)
        np.testing.assert_array_equal(index[k], row_index)
        each = np.stack([np.broadcast_to(model.group_time_ms(work, degrees[k], a), degrees[k].shape)
                         for a in algos])
        np.testing.assert_array_equal(times[k], each.min(axis=0))
        finite = np.isfinite(row_times)
        np.testing.assert_array_equal(row_index[finite], each.argmin(axis=0)[finite])


def test_best_time_table_with_measured_grids() -> None:
    doc = toy_doc("full")
    for kind in ("p2p_ms", "all_to_all_ms"):
        for grid in doc["time"][kind].values():
            grid["y"] = [y * (1.0 + 0.5 / (1 + i)) for i, y in enumerate(grid["y"])]
            grid["y"] = [max(grid["y"][: i + 1]) for i in range(len(grid["y"]))]
    model = CostModel(ProfileTable.from_dict(doc))
    workloads = [model.workload(lengths) for lengths in BATCHES]
    degrees = np.array([[1, 2, 3, 4, 5, 8, 9]] * len(workloads))
    times, index = model.best_time_table(workloads, degrees)
    for k, lengths in enumerate(BATCHES):
        for j, d in enumerate(degrees[k]):
            expected = min(model.group_time_ms(workloads[k], int(d), a) for a in ALGOS)
            assert times[k, j] == pytest.approx(expected, rel=1e-12)
            assert model.group_time_ms(workloads[k], int(d), ALGOS[index[k, j]]) == pytest.approx(expected, rel=1e-12)


def test_best_time_table_bad_input() -> None:
    model = toy_model()
    work = [model.workload([10]), model.workload([20])]
    with pytest.raises(ValueError, match="degrees must be a 2-D int array"):
        model.best_time_table(work, np.array([1, 2]))
    with pytest.raises(ValueError, match="degrees must be a 2-D int array"):
        model.best_time_table(work, np.ones((2, 2)))
    with pytest.raises(ValueError, match="degrees has 3 rows for 2 workloads"):
        model.best_time_table(work, np.ones((3, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="degrees must be >= 1, got 0"):
        model.best_time_table(work, np.array([[1, 0], [1, 1]]))


def test_mutating_the_callers_degree_array_is_safe() -> None:
    model = CostModel.from_preset("a3-qwen3vl-8b")
    work = model.workload([5000, 6000])
    degrees = np.arange(1, 9)
    first = model.group_time_ms(work, degrees, "ring").copy()
    degrees[:] = 8
    np.testing.assert_allclose(model.group_time_ms(work, degrees, "ring"), np.full(8, first[7]))
    degrees[:] = np.arange(1, 9)
    np.testing.assert_allclose(model.group_time_ms(work, degrees, "ring"), first)


def test_bad_degrees_and_algos() -> None:
    model = toy_model()
    work = model.workload([10])
    with pytest.raises(ValueError, match="degrees must be >= 1, got 0"):
        model.group_time_ms(work, np.array([2, 0]), "ring")
    with pytest.raises(ValueError, match="degrees must be an int or a 1-D int array"):
        model.group_time_ms(work, np.array([1.5]), "ring")
    with pytest.raises(ValueError, match=r"unknown algo 'zigzag'; valid: \['ring', 'ulysses', 'hybrid'\]"):
        model.group_time_ms(work, 2, "zigzag")
    with pytest.raises(ValueError, match="ulysses_degree prices a hybrid split; algo 'ring' has none"):
        model.group_time_ms(work, 2, "ring", ulysses_degree=2)
    with pytest.raises(ValueError, match="algos must be a non-empty list"):
        toy_model(algos=["ring", "ring"])
    with pytest.raises(ValueError, match="algos must be a non-empty list"):
        toy_model(algos=["zigzag"])


# ---------------------------------------------------------------- memory


def test_capacity_and_min_degree() -> None:
    model = toy_model()
    assert model.capacity_tokens == 35000
    assert model.min_degree(1) == 1 and model.min_degree(35000) == 1
    assert model.min_degree(35001) == 2 and model.min_degree(70001) == 3
    work = model.workload([70001])
    times = model.group_time_ms(work, np.arange(1, 6), "ring")
    assert np.isinf(times[:2]).all() and np.isfinite(times[2:]).all()
    assert model.rank_memory_bytes(0) == STATIC + WORKSPACE
    assert model.rank_memory_bytes(35000) <= MEMORY * USABLE < model.rank_memory_bytes(35001)


def test_max_tokens_per_rank_only_lowers_the_memory_limit(caplog) -> None:
    model = toy_model(max_tokens_per_rank=1000)
    assert model.capacity_tokens == 1000 and model.min_degree(2500) == 3
    limit = toy_model().capacity_tokens
    with caplog.at_level("WARNING"):
        capped = toy_model(max_tokens_per_rank=5_000_000)
    assert capped.capacity_tokens == limit < 5_000_000
    assert "--max-tokens-per-rank" in caplog.text and "capped" in caplog.text
    for bad in (0, -4, 2.5, True):
        with pytest.raises(ValueError, match="max_tokens_per_rank must be a positive int"):
            toy_model(max_tokens_per_rank=bad)


def test_model_that_does_not_fit() -> None:
    doc = toy_doc()
    doc["memory"]["static_bytes"] = 6e8
    with pytest.raises(ModelDoesNotFitError, match="model 'toy' does not fit on 'toy'"):
        CostModel(ProfileTable.from_dict(doc))
    with pytest.raises(ModelDoesNotFitError):
        CostModel(ProfileTable.from_dict(doc), max_tokens_per_rank=10)   # the option cannot add memory


def test_memory_free_copy_holds_any_batch() -> None:
    model = toy_model()
    free = model.without_memory_limit()
    assert free is model.without_memory_limit() and free.without_memory_limit() is free
    work = model.workload([10 * model.capacity_tokens])
    assert np.isinf(model.group_time_ms(work, 1, "ring"))
    assert np.isfinite(free.group_time_ms(work, 1, "ring"))
    small = model.workload([1000])
    assert free.group_time_ms(small, 2, "ring") == model.group_time_ms(small, 2, "ring")


# ---------------------------------------------------------------- workloads


def test_workloads_are_additive() -> None:
    model = toy_model()
    rng = np.random.default_rng(1)
    lengths = [int(x) for x in rng.integers(1, 5000, size=40)]
    patches = [int(x) for x in rng.integers(0, 300, size=40)]
    whole = model.workload(lengths, patches)
    total = GroupWorkload.empty()
    for start in range(0, 40, 7):
        total = total + model.workload(lengths[start:start + 7], patches[start:start + 7])
    assert total == whole
    assert whole == GroupWorkload(sum(lengths), 40, sum(x * x for x in lengths), sum(patches))
    assert whole + GroupWorkload.empty() == whole
    # Packing incrementally gives the same times as packing at once.
    np.testing.assert_allclose(model.group_time_ms(total, np.arange(1, 9), "ring"),
                               model.group_time_ms(whole, np.arange(1, 9), "ring"))


def test_workload_errors_name_the_sample() -> None:
    model = toy_model()
    with pytest.raises(ValueError, match="sample 2: length must be a positive int, got 0"):
        model.workload([5, 6, 0])
    with pytest.raises(ValueError, match="sample 0: length must be a positive int, got 1.5"):
        model.workload([1.5])
    with pytest.raises(ValueError, match="patches has 1 entries for 2 samples"):
        model.workload([5, 6], [1])
    with pytest.raises(ValueError, match="sample 1: patches must be an int >= 0, got -1"):
        model.workload([5, 6], [0, -1])
    text_only = toy_doc()
    text_only["model"]["vision"] = None
    text_only["time"]["vision_ms_per_patch"] = 0.0
    text_only["time"]["vision_ms_per_call"] = 0.0
    with pytest.raises(ValueError, match="model 'toy' has no vision encoder, but the samples carry 3 patches"):
        CostModel(ProfileTable.from_dict(text_only)).workload([5], [3])
    for call in (model.workload, model.workload_columns):
        with pytest.raises(ValueError, match="sample 1: length must be a positive int, got True"):
            call([5, True])
        with pytest.raises(ValueError, match="sample 0: patches must be an int >= 0, got np.True_"):
            call([5, 6], np.array([True, False]))
        with pytest.raises(ValueError, match=r"sample 2: length must be a positive int, got np.int64\(-3\)"):
            call(np.array([5, 6, -3]))


def test_workload_columns_and_group_sums_match_workloads() -> None:
    model = toy_model()
    rng = np.random.default_rng(3)
    lengths = [int(x) for x in rng.integers(1, 5000, size=30)]
    patches = [int(x) for x in rng.integers(0, 300, size=30)]
    columns = model.workload_columns(lengths, patches)
    assert len(columns) == 30
    for i in (0, 7, 29):
        assert columns.workload(i) == model.workload([lengths[i]], [patches[i]])
    groups = [[3, 1, 4], [15, 9], [2, 6, 5, 0], [29]]
    members = np.array([i for g in groups for i in g])
    owners = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    sums = columns.group_sums(members, owners, len(groups))
    stacked = WorkloadColumns.stack([model.workload([lengths[i] for i in g], [patches[i] for i in g])
                                     for g in groups])
    np.testing.assert_array_equal(sums.values, stacked.values)
    degrees = np.tile(np.arange(1, 7), (len(groups), 1))
    np.testing.assert_array_equal(model.best_time_table(sums, degrees)[0],
                                  model.best_time_table([sums.workload(k) for k in range(len(groups))], degrees)[0])
    assert len(model.workload_columns([])) == 0


# ---------------------------------------------------------------- properties on a real preset


@pytest.fixture(scope="module")
def a3_8b() -> CostModel:
    return CostModel.from_preset("a3-qwen3vl-8b")


@pytest.mark.parametrize("algo", ALGOS)
def test_more_tokens_take_longer(a3_8b: CostModel, algo: str) -> None:
    degrees = np.array([1, 2, 4, 8, 16, 32])
    previous = np.zeros(len(degrees))
    for length in (100, 1000, 5000, 20000, 30000):
        times = a3_8b.group_time_ms(a3_8b.workload([length]), degrees, algo)
        # Degrees an algo does not price (hybrid beside Ulysses inside a node) stay inf.
        assert np.all((times > previous) | np.isinf(previous))
        previous = times
    more_docs = a3_8b.group_time_ms(a3_8b.workload([30000, 10]), degrees, algo)
    assert np.all((more_docs > previous) | np.isinf(previous))
    assert np.isfinite(previous).any()


def test_ring_gets_faster_with_degree_for_long_documents(a3_8b: CostModel) -> None:
    times = a3_8b.group_time_ms(a3_8b.workload([30000]), np.arange(1, a3_8b.ranks_per_node + 1), "ring")
    assert np.all(np.diff(times[:8]) < 0)
    # Each of d ring steps is one attention call, which costs at least the call floor: once a step's block
    # (30K^2 / d^2 pairs) falls below it, more ranks only add steps at the floor.
    call = a3_8b.coefficients.attention_call_ms / a3_8b.table.layers_per_stage
    alpha = a3_8b.coefficients.attention_fit[0]
    floor_bound = np.flatnonzero(alpha * 30000**2 / np.arange(1, 17) ** 2 < call) + 1
    assert floor_bound.size and times[-1] > times.min()


def test_short_documents_gain_little_from_more_ranks(a3_8b: CostModel) -> None:
    def efficiency(lengths: list[int], d: int) -> float:
        work = a3_8b.workload(lengths)
        return a3_8b.group_time_ms(work, 1, "ring") / (d * a3_8b.group_time_ms(work, d, "ring"))

    assert efficiency([30000], 8) > 0.8
    assert efficiency([256], 8) < 0.5
    assert efficiency([256], 8) < efficiency([4096], 8) < efficiency([30000], 8)


def test_crossing_nodes_is_slower_for_communication_bound_groups(a3_8b: CostModel) -> None:
    rpn = a3_8b.ranks_per_node
    work = a3_8b.workload([2000])
    inside, across = a3_8b.group_time_ms(work, np.array([rpn, rpn + 1]), "ring")
    assert across > inside


@pytest.mark.parametrize("algo", ["ring", "ulysses"])
def test_group_placed_across_nodes_pays_the_inter_node_cost(algo) -> None:
    model = CostModel.from_preset("910b-qwen3vl-8b")   # 8 ranks per node
    work = model.workload([12000, 3000])
    compact = float(model.group_time_ms(work, 4, algo))
    assert float(model.group_time_ms(work, 4, algo, node_part=4)) == compact   # inside one node
    split = [float(model.group_time_ms(work, 4, algo, node_part=m)) for m in (2, 1)]
    assert compact < split[0] <= split[1]
    best, chosen = model.best_placed_time_ms(work, 4, 2)
    assert chosen in model.algos and best == min(float(model.group_time_ms(work, 4, a, node_part=2))
                                                 for a in model.algos)
    with pytest.raises(ValueError, match="node_part must be a positive int"):
        model.group_time_ms(work, 4, algo, node_part=0)


def test_full_recompute_costs_time_and_saves_memory() -> None:
    full = CostModel.from_preset("a3-qwen3vl-8b", recompute="full")
    none = CostModel.from_preset("a3-qwen3vl-8b", recompute="none")
    assert full.capacity_tokens > 2 * none.capacity_tokens
    roomy_full = full.without_memory_limit()
    roomy_none = none.without_memory_limit()
    work = full.workload([8000, 2000])
    for algo in ALGOS:
        # Hybrid beside Ulysses prices the degrees Ulysses cannot serve inside a node.
        degrees = np.array([6, 12, 24]) if algo == "hybrid" else np.array([1, 2, 4, 8])
        assert np.all(roomy_full.group_time_ms(work, degrees, algo) > roomy_none.group_time_ms(work, degrees, algo))


def test_vision_patches_cost_time() -> None:
    model = CostModel.from_preset("a3-qwen3vl-8b")
    plain = model.group_time_ms(model.workload([8000]), 4, "ring")
    vision = model.group_time_ms(model.workload([8000], [32000]), 4, "ring")
    assert vision > plain


@pytest.mark.parametrize("algo", ALGOS)
def test_vision_call_cost_is_paid_once_per_rank_and_only_with_patches(algo: str) -> None:
    model = toy_model(algos=(algo,))
    degrees = np.array([1, 2, 4])
    text = model.group_time_ms(model.workload([4000]), degrees, algo)
    one_patch = model.group_time_ms(model.workload([4000], [1]), degrees, algo)
    many = model.group_time_ms(model.workload([2000, 2000], [400, 400]), degrees, algo)
    split = model.group_time_ms(model.workload([4000], [800]), degrees, algo)
    np.testing.assert_allclose(one_patch - text, VISION_CALL_MS + VISION_MS / degrees, rtol=1e-9)
    # One call per rank and round, whatever the number of samples that bring the patches.
    np.testing.assert_allclose(many - model.group_time_ms(model.workload([2000, 2000]), degrees, algo),
                               split - text, rtol=1e-9)
    np.testing.assert_allclose(split - text, VISION_CALL_MS + 800 * VISION_MS / degrees, rtol=1e-9)


def test_preset_vision_call_cost_counts_the_encoder_blocks() -> None:
    """Each block pays the vision block's own floor (the H200's Hugging Face vision block, copied), not the text
    layer's host work."""
    hardware, encoder = HARDWARE["a3"], MODELS["qwen3vl-8b"].encoder
    table = CostModel.from_preset("a3-qwen3vl-8b").table
    measured = load_h200_qwen3vl8b()[2]
    assert hardware.vision_block_ms == measured.vision_floor_ms
    assert table.time.vision_ms_per_call == pytest.approx(encoder.depth * measured.vision_floor_ms)
    assert table.time.vision_ms_per_call < encoder.depth * (hardware.launch_ms_per_layer + hardware.attention_call_ms)
    assert CostModel.from_preset("a3-qwen3vl-8b").table.model.vision is not None
    # Floors given for the target replace all three; two keep the hardware's vision block.
    given = build_preset_table("a3", "qwen3vl-8b", host_floors=(0.5, 2.0, 3.0)).time
    assert (given.attention_call_ms, given.launch_ms / 36, given.vision_ms_per_call) == pytest.approx(
        (0.5, 2.0, 3.0 * encoder.depth))
    two = build_preset_table("a3", "qwen3vl-8b", host_floors=(0.5, 2.0)).time
    assert two.vision_ms_per_call == pytest.approx(table.time.vision_ms_per_call)
    with pytest.raises(ValueError, match="host_floors must be two or three times >= 0"):
        build_preset_table("a3", "qwen3vl-8b", host_floors=(0.5,))


def test_preset_table_copy_is_independent() -> None:
    table = build_preset_table("h100", "qwen3vl-2b")
    doc = copy.deepcopy(table.to_dict())
    doc["time"]["launch_ms"] = 100.0
    slower = CostModel(ProfileTable.from_dict(doc))
    base = CostModel(table)
    work = base.workload([1000])
    assert slower.group_time_ms(work, 2, "ring") == pytest.approx(base.group_time_ms(work, 2, "ring")
                                                                   + 100.0 - table.time.launch_ms)


def test_placed_times_of_many_groups_at_once_equal_each_group_placed_alone() -> None:
    cost = CostModel.from_preset("a3-qwen3vl-8b", shard_ranks=64)
    rng = np.random.default_rng(0)
    groups = [([int(x) for x in rng.integers(200, 30000, size=int(rng.integers(1, 6)))], degree, part, algo)
              for degree, part, algo in [(1, 1, "ring"), (2, 2, "ulysses"), (4, 4, "ring"), (4, 2, "ring"),
                                         (8, 8, "ulysses"), (8, 3, "ulysses"), (16, 16, "ring"), (2, 1, "ulysses")]]
    together = cost.placed_time_table([cost.workload(lengths) for lengths, *_ in groups], [g[1] for g in groups],
                                      [g[2] for g in groups], [g[3] for g in groups])
    alone = [cost.group_time_ms(cost.workload(lengths), degree, algo, node_part=part)
             for lengths, degree, part, algo in groups]
    assert together.tolist() == pytest.approx(alone, rel=1e-12)
    with pytest.raises(ValueError, match="unknown algo 'rings'"):
        cost.placed_time_table([cost.workload([100])], [1], [1], ["rings"])
