"""Shapes every fit of device measurements must keep, whatever the noise of the rows (`cost.measured_compute`):
non-negative, monotone in size, per-rank time non-increasing in degree, and past the largest measured size
going on at the rate measured there. Checked on the packaged H200 rows and on copies with every time
scaled by seeded noise of up to 15%, over sizes far beyond those measured."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.measured_compute import MeasuredRow, fit_measured_compute, load_rows
from mindspeed_mm.core.fcp.cost.presets import MODELS, build_preset_table

TIME_FIELDS = ("fb_ms", "fwd_ms", "fb_ms_per_layer", "fwd_ms_per_layer", "fb_ms_per_block")
SIZES = np.geomspace(1.0, 4 * 2**20, 400)
DEGREES = (1, 2, 4, 8, 16, 32)


NOISE = 0.15


def _noisy(rows: list[MeasuredRow], seed: int) -> list[MeasuredRow]:
    """The rows with every time scaled by a factor drawn in [1 - NOISE, 1 + NOISE] (seed 0: as measured)."""
    if seed == 0:
        return rows
    rng = np.random.default_rng(seed)
    out = []
    for row in rows:
        scale = float(rng.uniform(1 - NOISE, 1 + NOISE))
        fields = {k: (v * scale if k in TIME_FIELDS else v) for k, v in row.fields.items()}
        out.append(dataclasses.replace(row, fields=fields))
    return out


@pytest.fixture(scope="module", params=range(6))
def fitted(request):
    name, rows = load_rows()
    noisy = _noisy(rows, request.param)
    return request.param, noisy, fit_measured_compute(name, noisy)


def _non_decreasing(values: np.ndarray) -> bool:
    return bool(np.all(values >= 0) and np.all(np.diff(values) >= -1e-9 * np.abs(values[1:])))


def test_every_curve_is_non_negative_and_monotone_in_size(fitted) -> None:
    _, _, fit = fitted
    assert _non_decreasing(np.array([fit.linear(s) for s in SIZES]))
    assert _non_decreasing(np.array([fit.real_layer(s) for s in SIZES]))
    assert _non_decreasing(np.array([fit.vision_block(p) for p in SIZES]))
    for degree in DEGREES:
        assert _non_decreasing(np.array([fit.attention_call(fit.document(s, degree=degree)) for s in SIZES]))
    assert fit.attention_call_ms >= 0 and min(fit.attention) >= 0 and fit.model_layer_floor_ms >= 0


def test_a_rank_does_no_more_work_in_a_larger_group(fitted) -> None:
    """Per rank: a Ulysses rank's attention, and the linear and vision work of a shard of 1 / d of the tokens
    and patches, never grow with the degree."""
    _, _, fit = fitted
    for s in (64.0, 4096.0, 65536.0, 1e6):
        ulysses = [fit.attention_call(fit.document(s, docs=3, degree=d)) for d in DEGREES]
        linear = [fit.linear(s / d) for d in DEGREES]
        vision = [fit.vision_block(8 * s / d) for d in DEGREES]
        for times in (ulysses, linear, vision):
            assert np.all(np.diff(times) <= 1e-12 * np.abs(times[0])), times


def test_past_the_largest_size_each_curve_goes_on_at_the_rate_measured_there(fitted) -> None:
    seed, rows, fit = fitted
    largest = max((r for r in rows if r.part == "L"), key=lambda r: r.fields["tokens"]).fields
    rate = (largest["fb_ms_per_layer"] - fit.layer_floor_ms) / largest["tokens"]
    for far in (2, 10, 50):
        s = far * largest["tokens"]
        assert (fit.linear(s) - fit.layer_floor_ms) / s == pytest.approx(rate, rel=1e-9)
    # Attention: time over s^2 tends to the fitted alpha, the rate of the longest measured document (within 2%
    # as measured; the fit weighs every long row, so with noisy rows within the noise).
    longest = max((r for r in rows if r.part == "C"), key=lambda r: r.fields["length"]).fields
    per_pair = longest["fb_ms"] / longest["length"] ** 2
    assert fit.document(1e7) / 1e14 == pytest.approx(fit.attention[0], rel=0.01)
    assert fit.attention[0] == pytest.approx(per_pair, rel=0.02 if seed == 0 else 2 * NOISE)
    # Vision: time per patch tends to the slope of the measured calls above the floor.
    big = max(fit.vision_patches)
    assert fit.vision_block(100 * big) / (100 * big) == pytest.approx(fit.vision_line[1], rel=0.01)


def test_the_real_layer_is_its_host_floor_or_its_kernels() -> None:
    """Hugging Face's layer: host-bound (its floor) where the kernels are quick, the kernels' work where the
    device is busy, never the sum of both."""
    name, rows = load_rows()
    fit = fit_measured_compute(name, rows)
    for s in (64.0, 256.0, 1024.0):
        assert fit.real_layer(s) == pytest.approx(max(fit.model_layer_floor_ms,
                                                      fit.linear(s) + fit.attention_call_ms), rel=1e-9)
    for s in (16384.0, 131072.0):
        kernels = fit.linear(s) + fit.attention_call(fit.document(s))
        assert fit.real_layer(s) == pytest.approx(kernels, rel=1e-9)


def test_the_preset_keeps_the_shapes_through_the_cost_model() -> None:
    """The H200 preset's cost model: a rank's non-attention and vision work is non-increasing in the degree and
    monotone in the tokens, up to a million tokens and ten million patches."""
    cost = CostModel(build_preset_table("h200", "qwen3vl-8b"), memory_limited=False)
    c = cost.coefficients
    tokens = np.geomspace(64, 2**20, 50)
    patches = 4 * tokens * MODELS["qwen3vl-8b"].encoder.patches_per_token
    per_degree = np.stack([c.non_attention_ms(tokens, patches, np.full(tokens.shape, 1.0 / d)) for d in DEGREES])
    assert np.all(np.diff(per_degree, axis=0) <= 1e-9 * per_degree[:-1])
    assert np.all(np.diff(per_degree, axis=1) >= 0)
