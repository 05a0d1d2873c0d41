"""Workload generators, the Qwen3-VL video token rule, length files and CPU scaling."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mindspeed_mm.core.fcp.simulate.workloads import (
    DATASETS,
    VIDEO_TOKEN_BUDGET,
    generate,
    generate_samples,
    load_lengths,
    resize_to_token_grid,
    sampled_frame_count,
    scale_lengths,
    text_token_count,
    video_token_counts,
)

# p50 / p90 / p99 of 200K draws as published for the fitted generators.
EXPECTED_PERCENTILES = {
    "msrvtt": (1970, 2860, 4500),
    "internvid": (2950, 17500, 87500),
    "openvid": (3870, 8940, 16970),
}


@pytest.mark.parametrize(
    "duration, frames",
    [(0.5, 4), (1.0, 4), (2.0, 4), (2.6, 4), (3.0, 6), (10.0, 20), (10.7, 20), (383.0, 766), (600.0, 768)],
)
def test_sampled_frame_count(duration: float, frames: int) -> None:
    assert int(sampled_frame_count(duration)) == frames


def test_sampled_frame_count_never_exceeds_source_frames() -> None:
    # A 0.1 s clip at 30 fps has 3 frames: the 4-frame minimum cannot be met, the count stays even.
    assert int(sampled_frame_count(0.1)) == 2


@pytest.mark.parametrize(
    "height, width, rows, cols",
    [
        (720, 1280, 20, 36),  # 23 x 40 = 920 > 768: scaled down
        (1080, 1920, 20, 36),
        (540, 960, 17, 30),  # rounded to the nearest multiple of 32, within budget
        (480, 854, 15, 27),
        (360, 640, 11, 20),
        (240, 320, 10, 14),  # 8 x 10 = 80 < 128: scaled up
    ],
)
def test_resize_to_token_grid(height: int, width: int, rows: int, cols: int) -> None:
    r, c = resize_to_token_grid(height, width, 768)
    assert (int(r), int(c)) == (rows, cols)
    assert 128 <= int(r) * int(c) <= 768


def test_video_tokens_per_second_match_published_rates() -> None:
    hd = video_token_counts(10.0, 720, 1280)
    low = video_token_counts(10.0, 240, 320)
    assert int(hd.vision_tokens) == 720 * 10
    assert int(low.vision_tokens) == 140 * 10
    assert int(hd.timestamp_tokens) == 8 * 10
    assert int(hd.vision_patches) == 4 * int(hd.vision_tokens)


def test_long_video_stays_within_token_budget() -> None:
    counts = video_token_counts(np.array([150.0, 200.0, 300.0]), 1080, 1920)
    assert np.all(counts.vision_tokens <= VIDEO_TOKEN_BUDGET)
    # The budget is shared out, not cut off: 300 s keeps all 600 frames at a smaller resolution.
    assert int(counts.frames[2]) == 600
    assert int(counts.vision_tokens[2]) > 100_000


def test_text_token_count() -> None:
    np.testing.assert_array_equal(text_token_count(np.array([0, 1, 10, 126])), [25, 27, 38, 189])


@pytest.mark.parametrize("name", DATASETS)
def test_generator_percentiles_match_published_fit(name: str) -> None:
    lengths = generate(name, 200_000, seed=1)
    p50, p90, p99 = np.percentile(lengths, [50, 90, 99])
    want50, want90, want99 = EXPECTED_PERCENTILES[name]
    assert p50 == pytest.approx(want50, rel=0.03)
    assert p90 == pytest.approx(want90, rel=0.03)
    assert p99 == pytest.approx(want99, rel=0.05)


def test_internvid_has_heavy_tail() -> None:
    lengths = generate("internvid", 100_000, seed=2)
    assert np.mean(lengths > 32_768) == pytest.approx(0.05, abs=0.01)
    assert lengths.max() < VIDEO_TOKEN_BUDGET + 3_000


def test_generate_is_seeded_and_typed() -> None:
    a = generate("openvid", 512, seed=7)
    b = generate("openvid", 512, seed=7)
    c = generate("openvid", 512, seed=8)
    assert a.dtype == np.int64 and a.shape == (512,)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert np.all(a > 0)


@pytest.mark.parametrize("name", DATASETS)
def test_sample_metadata_is_consistent(name: str) -> None:
    batch = generate_samples(name, 2_000, seed=3)
    assert len(batch) == 2_000
    np.testing.assert_array_equal(batch.lengths, batch.vision_tokens + batch.timestamp_tokens + batch.text_tokens)
    np.testing.assert_array_equal(batch.vision_patches, 4 * batch.vision_tokens)
    np.testing.assert_array_equal(
        batch.vision_tokens, (batch.frames // 2) * (batch.resized_height // 32) * (batch.resized_width // 32)
    )
    assert np.all(batch.resized_height % 32 == 0) and np.all(batch.resized_width % 32 == 0)
    np.testing.assert_array_equal(batch.text_tokens, text_token_count(batch.caption_words))


def test_generate_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown dataset 'kinetics'"):
        generate("kinetics", 10, 0)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        generate("msrvtt", 0, 0)
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got 1.5"):
        generate("msrvtt", 4, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got -2"):
        generate("msrvtt", 4, -2)


def test_load_lengths_lines_and_json(tmp_path: Path) -> None:
    lines = tmp_path / "lengths.txt"
    lines.write_text("12\n 7 \n\n300\n")
    np.testing.assert_array_equal(load_lengths(lines), [12, 7, 300])
    as_json = tmp_path / "lengths.json"
    as_json.write_text(json.dumps([5, 6, 7]))
    result = load_lengths(as_json)
    assert result.dtype == np.int64
    np.testing.assert_array_equal(result, [5, 6, 7])


@pytest.mark.parametrize(
    "content, message",
    [
        ("10\nabc\n", r"lengths.txt:2: expected a positive integer sample length, got 'abc'"),
        ("10\n20\n-3\n", r"lengths.txt:3: sample length must be positive, got -3"),
        ("4.5\n", r"lengths.txt:1: expected a positive integer"),
        ("\n\n", r"lengths.txt: no sample lengths found"),
        ("[1, 2, 0]", r"lengths.txt: item 2: sample length must be positive"),
        ("[1, true]", r"lengths.txt: item 1: expected a positive integer"),
        ("[1, 2.0]", r"lengths.txt: item 1: expected a positive integer"),
        ("[1, 2", r"lengths.txt:1: invalid JSON"),
        ("[]", r"lengths.txt: no sample lengths found"),
    ],
)
def test_load_lengths_errors_name_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_lengths(path)


def test_load_lengths_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="missing.txt: cannot read lengths file"):
        load_lengths(tmp_path / "missing.txt")


def test_scale_lengths_keeps_shape_and_floor() -> None:
    scaled = scale_lengths(np.array([2560, 256, 10, 100_000]), 256, min_tokens=4)
    np.testing.assert_array_equal(scaled, [10, 4, 4, 391])
    assert scaled.dtype == np.int64


@pytest.mark.parametrize(
    "lengths, factor, min_tokens, message",
    [
        ([10], 0, 1, "scale factor"),
        ([10], float("nan"), 1, "scale factor"),
        ([10], 2, 0, "min_tokens"),
        ([], 2, 1, "lengths is empty"),
        ([10, -1], 2, 1, "sample 1: length must be a positive integer"),
        ([1.5], 2, 1, "must be an integer"),
    ],
)
def test_scale_lengths_rejects_bad_input(lengths: list, factor: float, min_tokens: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        scale_lengths(lengths, factor, min_tokens)
