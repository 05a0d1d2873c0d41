"""Profile tables from known measurements: every figure, round trip, planner use, atomic writes, cost fields."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel, ProfileTable, ProfileTableError
from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.profiler.comm_timing import CommSamples
from mindspeed_mm.core.fcp.profiler.profile_config import ProfileConfig
from mindspeed_mm.core.fcp.profiler.measure import (
    MEMORY_PROBE_LENGTHS,
    RankFacts,
    RankMeasurements,
    composition_probes,
)
from mindspeed_mm.core.fcp.profiler.profiling import check_writable
from mindspeed_mm.core.fcp.profiler.table_builder import build_table
from mindspeed_mm.core.fcp.solver import SolverConfig, validate_plan
from mindspeed_mm.core.fcp.solver.planner import plan_batch

CONFIG = ProfileConfig(attention_lengths=(16, 32, 64, 128), linear_tokens=(64, 256, 1024),
                       message_bytes=(1024, 65536, 1048576), world_size=3)
LAYER_MS, OUTPUT_MS = 0.01, 0.004          # per token
LAUNCH_1, LAUNCH_2 = 1.5, 2.5              # decoder of 1 / 2 layers without attention work
BLOCK_MS = 2.0                             # reference block of the busy exchanges
ACTIVATION = 12000.0                       # bytes per token
STEP_MS = {"optimizer": 3.0, "all_reduce": 7.0, "all_gather": 2.0, "reduce_scatter": 4.0}
FSDP_TRAFFIC_MS, FSDP_OVERLAP = 6.0, 0.4       # FSDP2 rounds: max(pass, t) + (1 - w) min(pass, t)
VISION_CALL_MS, VISION_PATCH_MS = 1.2, 0.005   # encoder: per call, per patch
VISION_ACTIVATION = 9000.0                      # bytes per merged token
CALL_FLOOR_MS = 0.3                             # one document alone in an attention call: floor + 1 us per token


def attention_ms(kind: str, s: int) -> float:
    scale = {"causal": 1.0, "full": 0.9, "block": 0.6}[kind]
    return scale * (1e-4 * s * s + 2e-3 * s + 0.5)


def p2p_alone(nbytes: int) -> float:
    return 0.3 + nbytes * 1e-6


def _samples(value: float, jitter: float = 0.0) -> tuple[float, ...]:
    return (value * (1 - jitter), value, value * (1 + jitter))


def measurements(rank: int, p2p_busy: str, whole_ms: dict[tuple[int, ...], float] | None = None) -> RankMeasurements:
    """What one rank would measure on a host with the figures above (a little symmetric noise); the whole
    decoder takes `whole_ms` on the composition probes (default: the sum of its parts)."""
    m = RankMeasurements()
    for probe in composition_probes(CONFIG.attention_lengths):
        m.whole_decoder[probe] = _samples((whole_ms or PARTS_MS)[probe])
    for kind in ("causal", "full", "block"):
        for s in CONFIG.attention_lengths:
            m.attention[(kind, s)] = _samples(attention_ms(kind, s), 0.05)
            if kind == "causal":
                m.attention_forward[(kind, s)] = _samples(attention_ms(kind, s) / 3.5)   # backward = 2.5 x forward
                m.ulysses_attention[(2, s)] = _samples(0.7 * attention_ms(kind, s))    # half the heads, 0.7 x time
    for s in CONFIG.call_floor_lengths:
        m.attention_call[s] = _samples(CALL_FLOOR_MS + 1e-3 * s, 0.05)
    for layers, launch in ((1, LAUNCH_1), (2, LAUNCH_2)):
        for tokens in CONFIG.linear_tokens:
            both = launch + (layers * LAYER_MS + OUTPUT_MS) * tokens
            m.decoder[(layers, tokens)] = _samples(both)
            m.decoder_forward[(layers, tokens)] = _samples(both / 3.0)                  # backward = 2 x forward
    for size in (2, 3):
        if size == 2 and rank == 2:
            continue  # sat out: groups of 2 cover ranks 0-1 only
        for nbytes in CONFIG.message_bytes:
            alone = p2p_alone(nbytes)
            busy = max(BLOCK_MS, alone) if p2p_busy == "hidden" else BLOCK_MS + 2 * alone
            m.comm[("p2p", size, nbytes)] = CommSamples(_samples(alone), _samples(busy), _samples(BLOCK_MS))
            a2a = 0.5 + size * 0.1 + nbytes * 2e-6
            m.comm[("all_to_all", size, nbytes)] = CommSamples(_samples(a2a), _samples(BLOCK_MS + a2a),
                                                                _samples(BLOCK_MS))
    m.step.update({kind: _samples(ms * (1 + 0.1 * rank), 0.05) for kind, ms in STEP_MS.items()})
    for tokens in CONFIG.linear_tokens:
        whole = LAUNCH_2 + (2 * LAYER_MS + OUTPUT_MS) * tokens
        fsdp = max(whole, FSDP_TRAFFIC_MS) + (1 - FSDP_OVERLAP) * min(whole, FSDP_TRAFFIC_MS)
        m.whole_linear[tokens], m.fsdp_round[tokens] = _samples(whole), _samples(fsdp)
    window = CONFIG.encoder.attention_window
    m.vision.update({groups: _samples(VISION_CALL_MS + VISION_PATCH_MS * groups * window, 0.05)
                     for groups in CONFIG.vision_frame_groups})
    return m


def facts() -> RankFacts:
    low, high = (sum(lengths) for lengths in MEMORY_PROBE_LENGTHS)
    return RankFacts({low: int(5e5 + ACTIVATION * low), high: int(5e5 + ACTIVATION * high)}, 2_000_000,
                     300_000_000, 0.05, {"attention": 1.0}, VISION_ACTIVATION)


def table_of(p2p_busy: str = "added", whole_ms: dict[tuple[int, ...], float] | None = None) -> ProfileTable:
    return build_table(CONFIG, [measurements(r, p2p_busy, whole_ms) for r in range(3)], [facts()] * 3,
                       {"rank_memory_bytes": 2**31, "device_name": "test cpu", "profile_seconds": 1.0})


def _probe_name(probe: tuple[int, ...]) -> str:
    return "+".join(map(str, probe))


def _parts_ms() -> dict[tuple[int, ...], float]:
    """The cost model's time of each composition probe from the timed parts alone: a table whose whole
    decoder took 1 ms on every probe records 1 / parts as each probe's ratio."""
    probes = composition_probes(CONFIG.attention_lengths)
    table = table_of(whole_ms=dict.fromkeys(probes, 1.0))
    ratios = table.provenance["composition"]["measured_over_parts_by_probe"]
    return {probe: 1.0 / ratios[_probe_name(probe)] for probe in probes}


PARTS_MS = _parts_ms()


def test_every_figure_comes_from_the_measurements() -> None:
    table = table_of()
    t = table.time
    assert t.attention_causal_ms.x == (16.0, 32.0, 64.0, 128.0)
    np.testing.assert_allclose(t.attention_causal_ms.y, [attention_ms("causal", s) for s in (16, 32, 64, 128)])
    np.testing.assert_allclose(t.attention_full_ms.y, [attention_ms("full", s) for s in (16, 32, 64, 128)])
    assert t.attention_off_diagonal_ms is not None
    np.testing.assert_allclose(t.attention_off_diagonal_ms.y, [attention_ms("block", s) for s in (16, 32, 64, 128)])
    assert t.attention_ulysses_ms is not None and set(t.attention_ulysses_ms) == {2}
    np.testing.assert_allclose(t.attention_ulysses_ms[2].y,
                               [0.7 * attention_ms("causal", s) for s in (16, 32, 64, 128)])
    # The call floor: the fastest single-document call of the two shortest lengths.
    assert CONFIG.call_floor_lengths == (16, 32) and t.attention_call_ms == pytest.approx(CALL_FLOOR_MS + 16e-3)
    assert t.attention_backward_ratio == pytest.approx(2.5)
    assert t.linear_backward_ratio == pytest.approx(2.0)
    assert t.linear_ms_per_token == pytest.approx(LAYER_MS)
    assert t.output_ms_per_token == pytest.approx(OUTPUT_MS)
    assert t.launch_ms == pytest.approx(LAUNCH_2)      # tiny has 2 layers: a_1 + (2 - 1)(a_2 - a_1)
    # One layer's work above its fixed cost at each measured token count (affine here: slope x tokens).
    assert t.linear_ms is not None and t.linear_ms.x == (64.0, 256.0, 1024.0)
    np.testing.assert_allclose(t.linear_ms.y, [LAYER_MS * x for x in (64, 256, 1024)], rtol=1e-9)
    assert table.memory.activation_bytes_per_token == pytest.approx(ACTIVATION)
    assert table.memory.static_bytes == 2_000_000 and table.memory.workspace_bytes == 300_000_000
    assert table.hardware.device == "cpu" and table.hardware.ranks_per_node == 8
    assert table.model == CONFIG.table_model and table.dtype == "fp32" and table.recompute == "none"
    enc = CONFIG.encoder
    assert table.model.vision is not None and (table.model.vision.depth, table.model.vision.patch_size) == (
        enc.depth, enc.patch_size)
    # The encoder is timed whole: its line, not scaled by the decoder's composition factor.
    assert t.vision_ms_per_call == pytest.approx(VISION_CALL_MS)
    assert t.vision_ms_per_patch == pytest.approx(VISION_PATCH_MS)
    assert table.memory.vision_activation_bytes_per_token == pytest.approx(VISION_ACTIVATION)
    # Step figures: the median rank's (rank 1 measured 1.1 x), an FSDP round = 2 all-gathers + 1 reduce-scatter.
    assert table.step.optimizer_ms == pytest.approx(1.1 * 3.0)
    assert table.step.replica_reduction_ms == pytest.approx(1.1 * 7.0)
    # The FSDP round: the fit of FSDP2's rounds against the unsharded passes (grid steps: 1% overlap, 0.4% traffic).
    assert table.step.fsdp_round_ms == pytest.approx(FSDP_TRAFFIC_MS, rel=0.005)
    assert table.step.fsdp_overlap == pytest.approx(FSDP_OVERLAP, abs=0.011)
    assert table.provenance["bulk_collectives_ms"] == {"all_gather": pytest.approx(1.1 * 2.0),
                                                       "reduce_scatter": pytest.approx(1.1 * 4.0)}
    prov = table.provenance
    assert prov["source"] == "measured by fcp profile" and prov["device_name"] == "test cpu"
    assert prov["measurement"]["clock"] == "cpu" and prov["measurement"]["world_size"] == 3


def test_raw_samples_serialise_with_every_field() -> None:
    doc = json.loads(json.dumps(measurements(0, "added").to_json()))
    assert set(doc) == {f.name for f in dataclasses.fields(RankMeasurements)}
    assert doc["attention"]["causal 16"] == list(_samples(attention_ms("causal", 16), 0.05))
    assert doc["vision"]["8"] and doc["fsdp_round"]["64"] and doc["comm"]["p2p 3 1024"]["alone"]


def test_a_profile_without_the_encoder_is_a_text_only_table() -> None:
    config = dataclasses.replace(CONFIG, encoder=None)
    ranks = [measurements(r, "added") for r in range(3)]
    for m in ranks:
        m.vision.clear()
    text_facts = dataclasses.replace(facts(), vision_activation_bytes_per_token=None)
    table = build_table(config, ranks, [text_facts] * 3, {"rank_memory_bytes": 2**31})
    assert table.model.vision is None and table.model == CONFIG.model
    assert table.time.vision_ms_per_call == table.time.vision_ms_per_patch == 0.0
    assert table.memory.vision_activation_bytes_per_token == 0.0
    with pytest.raises(ValueError, match="has no vision encoder"):
        CostModel(table).workload([64], patches=[16])


def test_transfers_a_step_cannot_hide_are_charged_as_the_busy_step_shows() -> None:
    added = table_of("added").time
    assert added.comm_overlap == 0.0
    # What a transfer adds to a busy step (busy - block = 2 x alone here), not the transfer alone.
    np.testing.assert_allclose(added.p2p_intra_ms.y, [2 * p2p_alone(b) for b in CONFIG.message_bytes])
    assert added.p2p_inter_ms == added.p2p_intra_ms
    # All-to-all at the largest group: x is the bytes sent to the other ranks.
    np.testing.assert_allclose(added.all_to_all_intra_ms.x, [b * 2 / 3 for b in CONFIG.message_bytes])
    np.testing.assert_allclose(added.all_to_all_intra_ms.y, [0.8 + b * 2e-6 for b in CONFIG.message_bytes])
    # Every group size keeps its own curve; the Ulysses model picks the one of its degree.
    assert added.all_to_all_by_group_size_ms is not None and set(added.all_to_all_by_group_size_ms) == {2, 3}
    np.testing.assert_allclose(added.all_to_all_by_group_size_ms[2].y, [0.7 + b * 2e-6 for b in CONFIG.message_bytes])
    assert added.all_to_all_by_group_size_ms[3] == added.all_to_all_intra_ms
    hidden = table_of("hidden").time
    assert hidden.comm_overlap == 1.0
    np.testing.assert_allclose(hidden.p2p_intra_ms.y, [p2p_alone(b) for b in CONFIG.message_bytes])


def test_noise_that_breaks_monotonicity_is_pooled() -> None:
    ranks = [measurements(r, "added") for r in range(3)]
    for m in ranks:
        m.attention[("causal", 32)] = _samples(attention_ms("causal", 16) * 0.8)
    table = build_table(CONFIG, ranks, [facts()] * 3, {"rank_memory_bytes": 2**31})
    y = table.time.attention_causal_ms.y
    assert all(b >= a for a, b in zip(y, y[1:]))
    # (The pooled grid also moved the parts' prediction of the probes, hence the composition factor.)
    factor = table.provenance["composition"]["factor"]
    assert y[0] == y[1] == pytest.approx(attention_ms("causal", 16) * 0.9 * factor)


def test_a_rank_of_a_larger_ulysses_group_is_never_slower() -> None:
    """Noise that makes degree 2's rank slower than the full heads at one length is capped there; elsewhere
    the measured grid stands."""
    ranks = [measurements(r, "added") for r in range(3)]
    for m in ranks:
        m.ulysses_attention[(2, 32)] = _samples(1.3 * attention_ms("causal", 32))
    t = build_table(CONFIG, ranks, [facts()] * 3, {"rank_memory_bytes": 2**31}).time
    factor = t.attention_causal_ms.y[0] / attention_ms("causal", 16)
    np.testing.assert_allclose(np.array(t.attention_ulysses_ms[2].y) / factor,
                               [0.7 * attention_ms("causal", 16), attention_ms("causal", 32),
                                0.7 * attention_ms("causal", 64), 0.7 * attention_ms("causal", 128)], rtol=1e-9)


def test_round_trip_and_the_planner_accepts_a_measured_table(tmp_path: Path) -> None:
    table = table_of()
    path = tmp_path / "table.json"
    table.save(path)
    loaded = ProfileTable.load(path)
    assert loaded.to_dict() == table.to_dict()
    doc = json.loads(path.read_text())
    assert doc["time"]["comm_overlap"] == 0.0 and "off_diagonal" in doc["time"]["attention_ms"]
    assert doc["time"]["linear_ms"]["x"] == [64.0, 256.0, 1024.0]
    doc["time"]["linear_ms"]["x"] = [256.0, 64.0, 1024.0]
    with pytest.raises(ProfileTableError, match="time.linear_ms"):
        ProfileTable.from_dict(doc)
    cost = CostModel(loaded, max_tokens_per_rank=256)
    lengths = [300, 40, 120, 33, 8, 700, 64, 15]
    config = SolverConfig(num_ranks=4, ranks_per_node=cost.ranks_per_node)
    plan = plan_batch(lengths, cost, config)
    validate_plan(plan, lengths, cost)
    assert plan.predicted_ms >= plan.lower_bound_ms > 0


def test_ring_steps_use_the_off_diagonal_block_and_add_unhidden_transfers() -> None:
    cost = CostModel(table_of(), max_tokens_per_rank=10_000)
    c = cost.coefficients
    lengths = [96, 40, 200]
    w = cost.workload(lengths)
    d = 4
    sq, tokens, docs = sum(s * s for s in lengths), sum(lengths), len(lengths)

    def stage_fit(alpha: float, beta: float, gamma: float) -> float:
        return alpha * sq / d**2 + beta * tokens / d + gamma * docs

    diag, block = stage_fit(c.alpha, c.beta, c.gamma), stage_fit(*c.off_diagonal)
    assert block < diag   # the table's off-diagonal block is cheaper than a causal step here
    kv = c.kv_bytes_per_token * tokens / d
    p2p = cost.table.time.p2p_intra_ms
    one = cost.table.layers_per_stage * p2p(kv)
    f = c.attention_forward_fraction
    # Nothing hidden: a forward step sends K, V; a backward step K, V and the gradients; then the
    # gradients' last hop home.
    expected = (diag + (d - 1) * ((block * f + one) + (block * (1 - f) + 2 * one)) + one
                + c.per_token_ms * tokens / d + c.launch_ms)
    assert cost.group_time_ms(w, d, "ring") == pytest.approx(expected)


def test_ulysses_charges_the_all_to_all_of_its_own_group_size() -> None:
    table = table_of()
    cost = CostModel(table, max_tokens_per_rank=10_000)
    w = cost.workload([96, 40, 200])
    per_size = {size: CostModel(_with_a2a_everywhere(table, grid), max_tokens_per_rank=10_000)
                for size, grid in table.time.all_to_all_by_group_size_ms.items()}
    # Tiny's 4 heads allow Ulysses on 2 ranks; its time equals a table whose only a2a curve is size 2's.
    assert cost.group_time_ms(w, 2, "ulysses") == pytest.approx(per_size[2].group_time_ms(w, 2, "ulysses"))
    assert cost.group_time_ms(w, 2, "ulysses") < per_size[3].group_time_ms(w, 2, "ulysses")


def test_ulysses_attention_of_a_degree_uses_its_own_grid() -> None:
    table = table_of()
    with_grid = CostModel(table, max_tokens_per_rank=10_000)
    time = dataclasses.replace(table.time, attention_ulysses_ms=None)
    without = CostModel(dataclasses.replace(table, time=time), max_tokens_per_rank=10_000)
    lengths = [96, 40, 200]
    w = with_grid.workload(lengths)
    quadratic = 1e-4 * sum(s * s for s in lengths) + 2e-3 * sum(lengths)   # attention_ms("causal", .) per layer
    docs = 0.5 * len(lengths)
    scale = with_grid.coefficients.attention_passes_scale * table.layers_per_stage
    # Its own grid: 0.7 x the full heads' attention; without: the quadratic part halved on 2 ranks.
    expected = scale * (0.7 * (quadratic + docs) - (0.5 * quadratic + docs))
    difference = float(with_grid.group_time_ms(w, 2, "ulysses")) - float(without.group_time_ms(w, 2, "ulysses"))
    assert difference == pytest.approx(expected)


def _with_a2a_everywhere(table: ProfileTable, grid) -> ProfileTable:  # type: ignore[no-untyped-def]
    time = dataclasses.replace(table.time, all_to_all_intra_ms=grid, all_to_all_inter_ms=grid,
                               all_to_all_by_group_size_ms=None)
    return dataclasses.replace(table, time=time)


def test_comm_overlap_and_off_diagonal_fields_are_checked() -> None:
    doc = table_of().to_dict()
    doc["time"]["comm_overlap"] = 1.5
    with pytest.raises(ProfileTableError, match=r"field 'time.comm_overlap' must be a number in \[0, 1\], got 1.5"):
        ProfileTable.from_dict(doc)
    doc = table_of().to_dict()
    doc["time"]["attention_ms"]["off_diagonal"]["y"][2] = 0.0
    with pytest.raises(ProfileTableError, match=r"'time.attention_ms.off_diagonal.y\[2\]'"):
        ProfileTable.from_dict(doc)
    doc = table_of().to_dict()
    doc["time"]["all_to_all_ms"]["by_group_size"]["1"] = doc["time"]["all_to_all_ms"]["intra"]
    with pytest.raises(ProfileTableError, match=r"'time.all_to_all_ms.by_group_size' must be keyed by group sizes"):
        ProfileTable.from_dict(doc)
    # Tables without the optional fields (the presets) read as before.
    preset = CostModel.from_preset("cpu-tiny").table.to_dict()
    assert "comm_overlap" not in preset["time"] and "off_diagonal" not in preset["time"]["attention_ms"]
    assert "by_group_size" not in preset["time"]["p2p_ms"]


def test_a_failed_write_leaves_the_old_table_and_no_partial_file(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "table.json"
    path.write_text("old contents\n")

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        table_of().save(path)
    assert path.read_text() == "old contents\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.json"]


def test_unwritable_destinations_are_refused_before_profiling(tmp_path: Path) -> None:
    with pytest.raises(OSError, match=r"folder .*missing does not exist"):
        check_writable(tmp_path / "missing" / "table.json")
    with pytest.raises(OSError, match="is a directory"):
        check_writable(tmp_path)
    check_writable(tmp_path / "fine.json")


def test_compute_terms_follow_the_whole_decoder_and_links_do_not() -> None:
    parts = table_of()
    assert parts.provenance["composition"]["factor"] == pytest.approx(1.0)
    # The whole model is 20% slower than its parts on two probes, 10% on the third: the median wins.
    slower = dict(zip(PARTS_MS, (1.2, 1.1, 1.2)))
    table = table_of(whole_ms={probe: slower[probe] * ms for probe, ms in PARTS_MS.items()})
    assert table.provenance["composition"]["factor"] == pytest.approx(1.2)
    t, p = table.time, parts.time
    for scaled, unscaled in ((t.attention_causal_ms, p.attention_causal_ms), (t.attention_full_ms, p.attention_full_ms),
                             (t.attention_off_diagonal_ms, p.attention_off_diagonal_ms),
                             (t.attention_ulysses_ms[2], p.attention_ulysses_ms[2])):
        np.testing.assert_allclose(scaled.y, [1.2 * y for y in unscaled.y])
    for name in ("linear_ms_per_token", "output_ms_per_token", "launch_ms"):
        assert getattr(t, name) == pytest.approx(1.2 * getattr(p, name)), name
    assert (t.p2p_intra_ms, t.all_to_all_intra_ms, t.comm_overlap) == (p.p2p_intra_ms, p.all_to_all_intra_ms,
                                                                      p.comm_overlap)
    # The scaled table predicts the probes as the whole decoder ran them (the median's probes exactly).
    cost = CostModel(table)
    for probe, ms in PARTS_MS.items():
        if slower[probe] == 1.2:
            assert float(cost.group_time_ms(cost.workload(list(probe)), 1, "ring")) == pytest.approx(1.2 * ms)


def test_the_measured_linear_curve_prices_small_shards_as_measured() -> None:
    """An affine curve prices every group as the per-token slope does; a curve measured slower at small
    token counts makes groups whose ranks hold few tokens slower, and leaves large shards as they were."""
    table = table_of()
    curved, sloped = CostModel(table), CostModel(dataclasses.replace(table, time=dataclasses.replace(table.time,
                                                                                                      linear_ms=None)))
    small_slow = CostModel(dataclasses.replace(table, time=dataclasses.replace(
        table.time, linear_ms=Grid((64.0, 256.0, 1024.0), (2 * LAYER_MS * 64, LAYER_MS * 256, LAYER_MS * 1024)))))
    layers = table.model.layers
    for lengths, degree in (([192], 3), ([100, 92], 3), ([2048], 1), ([64, 64], 2), ([900], 2)):
        workload = curved.workload(lengths)
        for algo in ("ring", "ulysses"):
            base = float(sloped.group_time_ms(workload, degree, algo))
            if not np.isfinite(base):
                continue
            assert float(curved.group_time_ms(workload, degree, algo)) == pytest.approx(base, rel=1e-12)
            per_rank = sum(lengths) / degree
            extra = layers * (LAYER_MS * 64 * (256 - per_rank) / 192 if per_rank < 256 else 0.0)
            assert float(small_slow.group_time_ms(workload, degree, algo)) == pytest.approx(base + extra, rel=1e-9)
