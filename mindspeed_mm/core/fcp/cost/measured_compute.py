"""Compute terms fitted to measurements taken on a device, and their errors against those measurements.

`measured/h200_qwen3vl8b_compute.jsonl` holds what one NVIDIA H200 measured with Qwen3-VL-8B shapes
(bf16, torch 2.11, CUDA 13.0; one JSON object per line, its `part` naming what was timed; times in ms,
forward + backward, the median of 10 CUDA-event-timed runs). The parts used here:

- L: one decoder layer without the attention core, per layer, at 64 ... 32,768 tokens;
- C: the causal attention core over one document; K: 32,768 tokens packed as n documents in one call;
- B: a ring's off-diagonal block (x query rows against x / 2 keys, no mask);
- U: Ulysses-local attention with 32 / d query heads over the whole document;
- HV: Hugging Face's Qwen3-VL vision block, one image or video per call;
- H: Hugging Face's Qwen3-VL text layer (attention included), the model MindSpeed-MM forks.

How each term is derived (`fit_measured_compute`); every fit minimises the mean relative error:
- the layer's fixed cost is L at its fewest tokens (the host-side floor, about 2 ms); the linear curve is
  L above that floor, made non-decreasing;
- one attention call costs the larger of `call` and the sum of `alpha s^2 + beta s + gamma` over the
  documents packed into it (the host's floor hides small work: part X); a ring's
  off-diagonal block (B) costs what a causal document of as many query rows does (the same query-key
  pairs); each measured Ulysses degree (U, at 4,096 and 32,768 tokens) has its own per-document constants
  and the same call cost; all fitted at once, non-negative, to C, K, B and U (K separates the call's
  fixed cost, which every document shares, from a document's own cost);
- the vision encoder's call is the HV blocks times the depth: a floor (the mean of the calls of at most
  `VISION_FLOOR_PATCHES` patches, which cost the same whatever their size), then the measured points;
  the patch embedding and the mergers are not in HV and are left out;
- the real model's host overhead per layer is the constant that brings L + C closest to H (least mean
  relative error). H is host-bound up to ~1K tokens and device-bound from ~4K (its own GPU-busy times): a
  constant added to every layer cannot follow both, which bounds how close this term gets.

`term_errors` evaluates a table's terms at every measured row, for the report and the test.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from mindspeed_mm.core.fcp.cost.grid import Grid, fit_quadratic
from mindspeed_mm.core.fcp.cost.nnls import nnls
from mindspeed_mm.core.fcp.cost.table_schema import TimeFigures

H200_QWEN3VL8B_FILE = "h200_qwen3vl8b_compute.jsonl"
"""The packaged measurements (a copy of the project's device data of one H200, Qwen3-VL-8B shapes)."""
VISION_FLOOR_PATCHES = 1024
"""HV calls of at most this many patches cost the same whatever their size: they set the call's floor."""
ATTENTION_GRID_LENGTHS = tuple(float(2 ** k) for k in range(6, 19))
"""Document lengths the fitted attention curves are written at (64 ... 262,144 tokens)."""


@dataclass(frozen=True)
class MeasuredRow:
    """One measurement: its line in the file (1-based) and its fields."""

    line: int
    """Line of the file, from 1."""
    fields: dict[str, Any]
    """The JSON object of the line."""

    @property
    def part(self) -> str:
        """What was timed (the file's part letter)."""
        return str(self.fields.get("part"))


def load_rows(path: str | Path | None = None) -> tuple[str, list[MeasuredRow]]:
    """(file name, rows) of a measurement file; None: the packaged H200 file."""
    if path is None:
        text = resources.files("mindspeed_mm.core.fcp.cost").joinpath("measured", H200_QWEN3VL8B_FILE).read_text(
            encoding="utf-8")
        name = H200_QWEN3VL8B_FILE
    else:
        text = Path(path).read_text(encoding="utf-8")
        name = Path(path).name
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(MeasuredRow(number, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{name} line {number}: not a JSON object: {exc}") from exc
    return name, rows


@dataclass(frozen=True)
class MeasuredCompute:
    """The per-layer compute terms of one model shape on one device, fitted to its measurements."""

    layer_floor_ms: float
    """Fixed cost of one layer's non-attention work, forward + backward (L at its fewest tokens)."""
    layer_floor_forward_ms: float
    """Forward share of that floor."""
    linear_ms: Grid
    """One layer's non-attention work above the floor vs tokens on the rank."""
    linear_backward_ratio: float
    """Backward / forward of the non-attention work, at the largest measured size."""
    attention_call_ms: float
    """The least one attention call costs, forward + backward, per layer."""
    attention: tuple[float, float, float]
    """(alpha, beta, gamma) of what one causal document adds to a call."""
    attention_backward_ratio: float
    """Backward / forward of the attention core, at the largest measured document."""
    ulysses: dict[int, tuple[float, float, float]]
    """Per measured Ulysses degree >= 2: (alpha, beta, gamma) of a document on one rank."""
    vision_ms_per_block: Grid | None
    """One vision block's call vs patches; None when HV was not measured."""
    model_overhead_ms: float
    """Host overhead of the real model's layer (H) beyond the measured kernels' layer, per layer."""
    rows: dict[str, str]
    """Per term, the file and the lines it was fitted to."""


def fit_measured_compute(name: str, rows: list[MeasuredRow]) -> MeasuredCompute:
    """The compute terms of a measurement file (see the module docstring for each derivation)."""
    parts: dict[str, list[MeasuredRow]] = {}
    for row in rows:
        parts.setdefault(row.part, []).append(row)
    for needed in ("L", "C", "K"):
        if needed not in parts:
            raise ValueError(f"{name}: no rows of part {needed!r}; the compute terms need parts L, C and K")

    linear = sorted(parts["L"], key=lambda r: r.fields["tokens"])
    tokens = np.array([r.fields["tokens"] for r in linear], dtype=np.float64)
    layer = np.array([r.fields["fb_ms_per_layer"] for r in linear])
    floor = float(layer[0])
    above = np.maximum.accumulate(np.maximum(layer - floor, 0.0))
    largest = linear[-1].fields
    linear_ratio = (largest["fb_ms_per_layer"] - largest["fwd_ms_per_layer"]) / largest["fwd_ms_per_layer"]

    call, attention, ulysses = _fit_attention_calls(parts)
    alpha, beta, gamma = attention
    longest = max(parts["C"], key=lambda r: r.fields["length"]).fields
    attention_ratio = (longest["fb_ms"] - longest["fwd_ms"]) / longest["fwd_ms"]

    vision = None
    if "HV" in parts:
        hv = sorted(parts["HV"], key=lambda r: r.fields["patches"])
        small = [r.fields["fb_ms_per_block"] for r in hv if r.fields["patches"] <= VISION_FLOOR_PATCHES]
        vision_floor = float(np.mean(small)) if small else 0.0
        xs = [float(r.fields["patches"]) for r in hv]
        ys = np.maximum.accumulate([vision_floor if r.fields["patches"] <= VISION_FLOOR_PATCHES
                                    else r.fields["fb_ms_per_block"] for r in hv])
        vision = Grid(tuple(xs), tuple(float(y) for y in ys), "linear")

    overhead = 0.0
    if "H" in parts:
        kernels = np.array([floor + float(Grid(tuple(tokens), tuple(above), "linear")(r.fields["tokens"]))
                            + max(call, alpha * r.fields["tokens"] ** 2 + beta * r.fields["tokens"] + gamma)
                            for r in parts["H"]])
        measured = np.array([r.fields["fb_ms_per_layer"] for r in parts["H"]])
        # The constant o minimising the mean of |(kernels + o) / measured - 1|: the median of the gaps
        # weighted by 1 / measured.
        gaps, weights = measured - kernels, 1.0 / measured
        order = np.argsort(gaps)
        middle = int(np.searchsorted(np.cumsum(weights[order]), 0.5 * weights.sum()))
        overhead = max(0.0, float(gaps[order][middle]))

    def lines(*names: str) -> str:
        return f"{name} lines " + ", ".join(str(r.line) for n in names for r in parts.get(n, []))

    return MeasuredCompute(
        layer_floor_ms=floor, layer_floor_forward_ms=float(linear[0].fields["fwd_ms_per_layer"]),
        linear_ms=Grid(tuple(float(t) for t in tokens), tuple(float(y) for y in above), "linear"),
        linear_backward_ratio=float(linear_ratio),
        attention_call_ms=call, attention=attention,
        attention_backward_ratio=float(attention_ratio),
        ulysses=ulysses, vision_ms_per_block=vision, model_overhead_ms=overhead,
        rows={"linear": lines("L"), "attention": lines("C", "K", "B", "U"), "vision": lines("HV"),
              "model_overhead": lines("H")},
    )


def quadratic_grid(fit: tuple[float, float, float]) -> Grid:
    """The curve alpha s^2 + beta s + gamma written at `ATTENTION_GRID_LENGTHS` (`fit_quadratic` returns it)."""
    alpha, beta, gamma = fit
    return Grid(ATTENTION_GRID_LENGTHS, tuple(alpha * s * s + beta * s + gamma for s in ATTENTION_GRID_LENGTHS),
                "loglog")


@dataclass(frozen=True)
class TermError:
    """A table's term against the measurements of that term."""

    term: str
    """What is compared."""
    points: list[tuple[int, str, float, float]]
    """(line, what the row measured, measured ms, predicted ms) per row."""

    @property
    def relative_errors(self) -> np.ndarray:
        """predicted / measured - 1, per row."""
        return np.array([p / m - 1.0 for _, _, m, p in self.points])

    @property
    def mean_abs_error(self) -> float:
        """Mean of |predicted / measured - 1|."""
        return float(np.mean(np.abs(self.relative_errors)))

    @property
    def worst(self) -> tuple[int, str, float]:
        """(line, row, relative error) of the row furthest off."""
        errors = self.relative_errors
        k = int(np.argmax(np.abs(errors)))
        return self.points[k][0], self.points[k][1], float(errors[k])


def term_errors(time: TimeFigures, layer_fixed_ms: float, rows: list[MeasuredRow], *, vision_depth: int,
                model_overhead_ms: float = 0.0) -> list[TermError]:
    """Each compute term of `time` (one layer's figures, no recompute) at every measured row of its part.

    `layer_fixed_ms`: the fixed cost of one layer's non-attention work the table carries in `launch_ms`
    (the kernels' floor); `model_overhead_ms`: what the real model's layer adds on top (in `launch_ms` too).
    """
    def linear(tokens: float) -> float:
        if time.linear_ms is not None:
            return layer_fixed_ms + float(time.linear_ms(tokens))
        return layer_fixed_ms + time.linear_ms_per_token * tokens

    def document(fit: tuple[float, float, float], s: float, docs: float = 1.0) -> float:
        alpha, beta, gamma = fit
        return max(time.attention_call_ms, docs * (alpha * s * s + beta * s + gamma))

    causal = fit_quadratic(time.attention_causal_ms)
    off = fit_quadratic(time.attention_off_diagonal_ms) if time.attention_off_diagonal_ms is not None else causal
    ulysses = {d: fit_quadratic(g) for d, g in (time.attention_ulysses_ms or {}).items()}
    out: dict[str, TermError] = {}

    def add(term: str, row: MeasuredRow, what: str, measured: float, predicted: float) -> None:
        out.setdefault(term, TermError(term, [])).points.append((row.line, what, measured, predicted))

    for row in rows:
        f = row.fields
        if row.part == "L":
            add("linear (L)", row, f"{f['tokens']} tokens", f["fb_ms_per_layer"], linear(f["tokens"]))
        elif row.part == "C":
            add("attention, one document (C)", row, f"{f['length']} tokens", f["fb_ms"], document(causal, f["length"]))
        elif row.part == "K":
            add("attention, packed documents (K)", row, f"{f['docs']} x {f['doc_len']}", f["fb_ms"],
                document(causal, f["doc_len"], f["docs"]))
        elif row.part == "B":
            add("ring off-diagonal block (B)", row, f"{f['q_len']} x {f['kv_len']}", f["fb_ms"],
                document(off, f["q_len"]))
        elif row.part == "U":
            d, s = f["degree"], f["length"]
            heads_fit = causal if d == 1 else ulysses.get(d, tuple(v / d for v in causal[:2]) + (causal[2],))
            add("Ulysses attention per degree (U)", row, f"{s} tokens, degree {d}", f["fb_ms"], document(heads_fit, s))
        elif row.part == "HV":
            per_call = (float(time.vision_ms(f["patches"])) if time.vision_ms is not None
                        else time.vision_ms_per_call + time.vision_ms_per_patch * f["patches"])
            add("vision block call (HV)", row, f"{f['patches']} patches", f["fb_ms_per_block"], per_call / vision_depth)
        elif row.part == "H":
            s = f["tokens"]
            add("real model's layer (H)", row, f"{s} tokens", f["fb_ms_per_layer"],
                linear(s) + document(causal, s) + model_overhead_ms)
    return list(out.values())


def _fit_attention_calls(parts: dict[str, list[MeasuredRow]]) -> tuple[
        float, tuple[float, float, float], dict[int, tuple[float, float, float]]]:
    """(call, causal fit, Ulysses fits per degree >= 2) of every attention call measured.

    One fit over the rows of C, K, B and U together, all constants >= 0, the per-document constants of least
    mean relative error for each candidate floor and the floor of least worst-part error: a
    call costs the larger of one floor (the same kernel pair launched by the same host) and the work of
    its documents, which the floor hides while it is smaller (as the GPU-busy times of X show). A causal document of s
    tokens adds alpha s^2 + beta s + gamma; an off-diagonal block of x query rows against x / 2 keys holds
    as many query-key pairs as a causal document of x tokens and is fitted as one (B measured within 1% of
    C at 16K); a rank of a Ulysses degree d adds 1 / d of the full heads' alpha s^2 + beta s plus its own
    non-negative excess (a rank of d never does less than its share of the work).
    """
    degrees = sorted({r.fields["degree"] for r in parts.get("U", []) if r.fields["degree"] >= 2})
    columns = ["alpha", "beta", "gamma"] + [f"{name}{d}" for d in degrees for name in ("u_alpha", "u_beta")]
    index = {name: k for k, name in enumerate(["call", *columns])}
    design, measured = [], []

    part_of_row: list[str] = []

    def call_row(times: float, **terms: float) -> None:
        row = np.zeros(len(columns))
        for name, value in terms.items():
            row[index[name] - 1] = value
        design.append(row)
        measured.append(times)
        part_of_row.append(part)

    part = "C"
    for r in parts["C"]:
        s = float(r.fields["length"])
        call_row(r.fields["fb_ms"], alpha=s * s, beta=s, gamma=1.0)
    part = "K"
    for r in parts["K"]:
        n, s = float(r.fields["docs"]), float(r.fields["doc_len"])
        call_row(r.fields["fb_ms"], alpha=n * s * s, beta=n * s, gamma=n)
    part = "B"
    for r in parts.get("B", []):
        s = float(r.fields["q_len"])
        call_row(r.fields["fb_ms"], alpha=s * s, beta=s, gamma=1.0)
    part = "U"
    for r in parts.get("U", []):
        s, d = float(r.fields["length"]), r.fields["degree"]
        if d == 1:
            call_row(r.fields["fb_ms"], alpha=s * s, beta=s, gamma=1.0)
        else:
            # A rank of d does 1 / d of the full heads' work plus what fewer heads per kernel lose.
            call_row(r.fields["fb_ms"], alpha=s * s / d, beta=s / d, **{f"u_alpha{d}": s * s, f"u_beta{d}": s})
    times, design_arr = np.asarray(measured), np.asarray(design)
    labels = np.asarray(part_of_row)
    best: tuple[float, np.ndarray] | None = None
    # The floor: candidates from 0 to twice the cheapest call measured; above it the work is fitted to the
    # rows the floor does not hide. The floor kept is the one whose worst part (C, K, B, U: each term is
    # judged on its own rows) has the least mean error.
    for floor in np.linspace(0.0, 2.0 * float(times.min()), 201):
        work = times > floor
        if work.sum() < design_arr.shape[1]:
            break
        coef = _least_mean_relative_error(design_arr[work], times[work])
        errors = np.abs(np.maximum(design_arr @ coef, floor) / times - 1.0)
        worst_part = max(float(errors[labels == name].mean()) for name in set(part_of_row))
        if best is None or worst_part < best[0]:
            best = (worst_part, np.concatenate([[floor], coef]))
    assert best is not None
    c = {name: float(best[1][k]) for name, k in index.items()}
    ulysses = {d: (c["alpha"] / d + c[f"u_alpha{d}"], c["beta"] / d + c[f"u_beta{d}"], 0.0) for d in degrees}
    return c["call"], (c["alpha"], c["beta"], c["gamma"]), ulysses


def _least_mean_relative_error(design: np.ndarray, times: np.ndarray, rounds: int = 20) -> np.ndarray:
    """Non-negative c minimising the mean of |design @ c / times - 1| (the error the terms are judged by):
    least squares reweighted by 1 / |error| (each round a non-negative least-squares fit)."""
    scaled = design / times[:, None]
    ones = np.ones(len(times))
    weights = ones
    for _ in range(rounds):
        root = np.sqrt(weights)
        coef, _ = nnls(scaled * root[:, None], root)
        weights = 1.0 / np.maximum(np.abs(scaled @ coef - 1.0), 1e-3)
    return coef


@functools.lru_cache(maxsize=1)
def load_h200_qwen3vl8b() -> tuple[str, list[MeasuredRow], MeasuredCompute]:
    """The packaged H200 measurements, their rows and their fitted terms (fitted once per process)."""
    name, rows = load_rows()
    return name, rows, fit_measured_compute(name, rows)
