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

How each term is derived (`fit_measured_compute`); every fit is non-negative, monotone in size, and beyond
the largest measured size continues at the rate measured there:
- the layer's fixed cost is L at its fewest tokens (the kernels' host-side floor, about 2 ms); the linear
  curve is L above that floor, made non-decreasing, continued past the largest size at that size's
  time per token;
- one attention call costs the larger of `call` and the sum of `alpha s^2 + beta s + gamma` over the
  documents packed into it (the host's floor hides small work: part X); a ring's off-diagonal block (B)
  costs what a causal document of as many query rows does (the same query-key pairs); a rank of a Ulysses
  group of degree d runs the full heads' work / d under the same floor (its exchange is the table's
  all-to-all, priced apart); all fitted at once, non-negative, to C, K, B and U (K separates the call's
  fixed cost, which every document shares, from a document's own cost);
- the vision block's call: a floor (the mean of the calls of at most `VISION_FLOOR_PATCHES` patches,
  which cost the same whatever their size), then the line through the larger calls (its slope, the
  large-size rate, continues it past the measured patches; `vision_flop_rate` checks that slope against
  the block's FLOP count); the patch embedding and the mergers are not in HV and are left out;
- the real model's layer (H) runs the same kernels under its own host floor: a layer costs the larger of
  that floor and its kernels' work (H is host-bound up to ~1K tokens and device-bound from ~4K, its own
  GPU-busy times say), the floor fitted to H (least mean relative error). The floor is carried by the
  layer's non-attention term (`real_layer_linear_ms`). `additive_host_ms` is the constant that, added to
  every layer instead, comes closest to H: what a table whose layer cost is a plain sum (the analytic
  presets) copies.

`MeasuredCompute.predict` gives the fit's time of any measured row; `term_validation` scores it on the rows
(in sample and held out). `term_errors` evaluates a table's terms at every measured row, for the analytic
table the measurements replaced and for `fcp profile`'s tables.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable

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


ROW_SIZE = {"L": "tokens", "C": "length", "K": "doc_len", "B": "q_len", "U": "length", "HV": "patches", "H": "tokens"}
"""The field that sizes a row of each fitted part."""
TERM_NAMES = {"L": "linear (L)", "C": "attention, one document (C)", "K": "attention, packed documents (K)",
              "B": "ring off-diagonal block (B)", "U": "Ulysses attention per degree (U)",
              "HV": "vision block call (HV)", "H": "real model's layer (H)"}
"""The term each fitted part measures."""
TAIL_SPAN = 64.0
"""The linear curve gets a last point this many times past its largest size, at the time per token measured there."""


def row_size(row: MeasuredRow) -> float:
    """The size of a fitted row (tokens, document length or patches: `ROW_SIZE`)."""
    return float(row.fields[ROW_SIZE[row.part]])


def rate_tail(grid: Grid, span: float = TAIL_SPAN) -> Grid:
    """`grid` (linear scale) continued past its largest point at the time per unit measured there: one more
    point `span` times further on the line through the origin and that point, so the time per unit tends to
    the rate of the largest measurement however far the curve is read."""
    x, y = grid.x[-1], grid.y[-1]
    return Grid((*grid.x, span * x), (*grid.y, span * y), "linear")


@dataclass(frozen=True)
class MeasuredCompute:
    """The per-layer compute terms of one model shape on one device, fitted to its measurements."""

    layer_floor_ms: float
    """Fixed cost of one layer's non-attention kernels, forward + backward (L at its fewest tokens)."""
    layer_floor_forward_ms: float
    """Forward share of that floor."""
    linear_ms: Grid
    """One layer's non-attention kernels above the floor vs tokens on the rank (`rate_tail` past the last row)."""
    linear_backward_ratio: float
    """Backward / forward of the non-attention work, at the largest measured size."""
    attention_call_ms: float
    """The least one attention call costs, forward + backward, per layer."""
    attention: tuple[float, float, float]
    """(alpha, beta, gamma) of what one causal document adds to a call (a Ulysses rank: the work / d)."""
    attention_backward_ratio: float
    """Backward / forward of the attention core, at the largest measured document."""
    vision_floor_ms: float | None
    """The least one vision block's call costs (HV calls of few patches); None when HV was not measured."""
    vision_line: tuple[float, float] | None
    """(ms, ms per patch) of one vision block's call above the floor; None when HV was not measured."""
    vision_patches: tuple[float, ...]
    """Patch counts of the measured HV calls."""
    model_layer_floor_ms: float
    """The real model's layer (H): the least one layer costs, attention call included (its host floor); 0
    without H rows."""
    additive_host_ms: float
    """The constant which, added to every layer's kernels, comes closest to H (for tables whose layer cost
    is a plain sum); 0 without H rows."""
    rows: dict[str, str]
    """Per term, the file and the lines it was fitted to."""

    def linear(self, tokens: float) -> float:
        """One layer's non-attention kernels at `tokens` tokens (floor included)."""
        return self.layer_floor_ms + float(self.linear_ms(tokens))

    def attention_call(self, work_ms: float) -> float:
        """One attention call whose documents' work is `work_ms`."""
        return max(self.attention_call_ms, work_ms)

    def document(self, length: float, docs: float = 1.0, degree: int = 1) -> float:
        """The work of `docs` causal documents of `length` tokens on one rank of a Ulysses group of `degree`
        (1: the full heads), without the call's floor."""
        alpha, beta, gamma = self.attention
        return docs * ((alpha * length * length + beta * length) / degree + gamma)

    def vision_block(self, patches: float) -> float:
        """One vision block's call over `patches` patches (HV must have been measured)."""
        if self.vision_floor_ms is None or self.vision_line is None:
            raise ValueError("no vision block calls (part HV) were measured")
        intercept, slope = self.vision_line
        return max(self.vision_floor_ms, intercept + slope * patches)

    def vision_grid(self, depth: int) -> Grid:
        """A call of `depth` vision blocks vs patches, written at the measured patch counts (and 0 and the
        line's tail beyond them: a linear grid extends its last segment)."""
        xs = sorted({1.0, *self.vision_patches, 2.0 * max(self.vision_patches)})
        return Grid(tuple(xs), tuple(depth * self.vision_block(x) for x in xs), "linear")

    def real_layer(self, tokens: float) -> float:
        """The real model's layer over one document of `tokens` tokens: its host floor or its kernels' work."""
        return self.layer_floor_ms + float(self.real_layer_linear_ms()(tokens)) + self.attention_call(
            self.document(tokens))

    def real_layer_linear_ms(self) -> Grid:
        """The layer's non-attention term above the kernels' floor, raised to the real model's host floor (less
        the kernels' floor and one attention call, which the table charges apart): max(F - call - floor, L(s) -
        floor) at L's sizes, so that a layer costs max(F, its kernels) wherever the attention call is at its
        floor, and its kernels where the device is busy."""
        raised = max(0.0, self.model_layer_floor_ms - self.attention_call_ms - self.layer_floor_ms)
        grid = self.linear_ms
        return Grid(grid.x, tuple(max(raised, y) for y in grid.y), "linear")

    def predict(self, row: MeasuredRow) -> float:
        """The fit's forward + backward time of a measured row of a fitted part (`TERM_NAMES`), in ms."""
        f = row.fields
        if row.part == "L":
            return self.linear(f["tokens"])
        if row.part == "C":
            return self.attention_call(self.document(f["length"]))
        if row.part == "K":
            return self.attention_call(self.document(f["doc_len"], f["docs"]))
        if row.part == "B":
            return self.attention_call(self.document(f["q_len"]))
        if row.part == "U":
            return self.attention_call(self.document(f["length"], degree=f["degree"]))
        if row.part == "HV":
            return self.vision_block(f["patches"])
        if row.part == "H":
            return self.real_layer(f["tokens"])
        raise ValueError(f"part {row.part!r} is not fitted; fitted parts: {sorted(TERM_NAMES)}")


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
    if len(tokens) > 1:
        linear_curve = rate_tail(Grid(tuple(float(t) for t in tokens), tuple(float(y) for y in above), "linear"))
    else:   # one size: its floor, nothing above it to carry on
        linear_curve = Grid((float(tokens[0]), TAIL_SPAN * float(tokens[0])), (0.0, 0.0), "linear")

    call, attention = _fit_attention_calls(parts)
    longest = max(parts["C"], key=lambda r: r.fields["length"]).fields
    attention_ratio = (longest["fb_ms"] - longest["fwd_ms"]) / longest["fwd_ms"]

    vision_floor, vision_line, vision_patches = _fit_vision(parts.get("HV", []))
    fitted = MeasuredCompute(
        layer_floor_ms=floor, layer_floor_forward_ms=float(linear[0].fields["fwd_ms_per_layer"]),
        linear_ms=linear_curve, linear_backward_ratio=float(linear_ratio),
        attention_call_ms=call, attention=attention, attention_backward_ratio=float(attention_ratio),
        vision_floor_ms=vision_floor, vision_line=vision_line, vision_patches=vision_patches,
        model_layer_floor_ms=0.0, additive_host_ms=0.0, rows={})

    real = parts.get("H", [])
    model_floor = additive = 0.0
    if real:
        measured = np.array([r.fields["fb_ms_per_layer"] for r in real])
        kernels = np.array([fitted.linear(r.fields["tokens"]) + fitted.attention_call(fitted.document(r.fields["tokens"]))
                            for r in real])
        additive = _least_mean_relative_offset(kernels, measured)
        model_floor = _least_mean_relative_floor(fitted, real, measured)

    def lines(*names: str) -> str:
        return f"{name} lines " + ", ".join(str(r.line) for n in names for r in parts.get(n, []))

    return dataclasses.replace(
        fitted, model_layer_floor_ms=model_floor, additive_host_ms=additive,
        rows={"linear": lines("L"), "attention": lines("C", "K", "B", "U"), "vision": lines("HV"),
              "model_layer": lines("H")})


def _fit_vision(rows: list[MeasuredRow]) -> tuple[float | None, tuple[float, float] | None, tuple[float, ...]]:
    """(floor, (intercept, slope), patch counts) of the HV calls: the floor is the mean of the calls of at most
    `VISION_FLOOR_PATCHES` patches, the line the least-relative-error fit of the larger ones (non-negative)."""
    if not rows:
        return None, None, ()
    patches = [float(r.fields["patches"]) for r in rows]
    times = [float(r.fields["fb_ms_per_block"]) for r in rows]
    small = [t for p, t in zip(patches, times) if p <= VISION_FLOOR_PATCHES]
    large = [(p, t) for p, t in zip(patches, times) if p > VISION_FLOOR_PATCHES]
    floor = float(np.mean(small)) if small else 0.0
    if len(large) >= 2:
        design = np.array([[1.0, p] for p, _ in large])
        line = _least_mean_relative_error(design, np.array([t for _, t in large]))
        intercept, slope = float(line[0]), float(line[1])
    elif large:   # one call above the floor: the line from the floor's end through it
        (p, t), = large
        slope = max(t - floor, 0.0) / max(p - VISION_FLOOR_PATCHES, 1.0)
        intercept = t - slope * p
    else:
        intercept, slope = floor, 0.0
    return floor, (intercept, slope), tuple(sorted(patches))


def _least_mean_relative_offset(kernels: np.ndarray, measured: np.ndarray) -> float:
    """The constant o >= 0 minimising the mean of |(kernels + o) / measured - 1|: the median of the gaps
    weighted by 1 / measured."""
    gaps, weights = measured - kernels, 1.0 / measured
    order = np.argsort(gaps)
    middle = int(np.searchsorted(np.cumsum(weights[order]), 0.5 * weights.sum()))
    return max(0.0, float(gaps[order][min(middle, len(gaps) - 1)]))


def _least_mean_relative_floor(fitted: MeasuredCompute, rows: list[MeasuredRow], measured: np.ndarray) -> float:
    """The real layer's host floor F of least mean relative error over the H rows. A row's time is
    max(F - call, L) + its attention call, piecewise linear in F: the mean error is least at a kink, where a
    row's floor takes over from its kernels (F = L + call) or where a row is met exactly."""
    candidates = {0.0}
    for r, m in zip(rows, measured):
        s = r.fields["tokens"]
        attention = fitted.attention_call(fitted.document(s))
        candidates.update((fitted.linear(s) + fitted.attention_call_ms, m - attention + fitted.attention_call_ms))
    candidates = sorted(c for c in candidates if c >= 0.0)
    best, best_error = 0.0, np.inf
    for floor in candidates:
        trial = dataclasses.replace(fitted, model_layer_floor_ms=floor)
        error = float(np.mean([abs(trial.real_layer(r.fields["tokens"]) / m - 1.0) for r, m in zip(rows, measured)]))
        if error < best_error - 1e-12:
            best, best_error = floor, error
    return best


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


def row_label(row: MeasuredRow) -> str:
    """What a fitted row measured, in words (`4096 tokens, degree 8`)."""
    f = row.fields
    if row.part == "K":
        return f"{f['docs']} x {f['doc_len']}"
    if row.part == "B":
        return f"{f['q_len']} x {f['kv_len']}"
    if row.part == "U":
        return f"{f['length']} tokens, degree {f['degree']}"
    if row.part == "HV":
        return f"{f['patches']} patches"
    return f"{int(row_size(row))} tokens"


def measured_ms(row: MeasuredRow) -> float:
    """The forward + backward time a fitted row measured (per layer or block for L, H and HV)."""
    f = row.fields
    return float(f["fb_ms_per_layer"] if row.part in ("L", "H") else f["fb_ms_per_block"] if row.part == "HV"
                 else f["fb_ms"])


def errors_of(predict: Callable[[MeasuredRow], float], rows: list[MeasuredRow]) -> list[TermError]:
    """Per fitted part, `predict` against every row of it (other parts are skipped), in `TERM_NAMES` order."""
    out: dict[str, TermError] = {}
    for row in rows:
        if row.part in TERM_NAMES:
            term = TERM_NAMES[row.part]
            out.setdefault(term, TermError(term, [])).points.append(
                (row.line, row_label(row), measured_ms(row), float(predict(row))))
    return [out[term] for term in TERM_NAMES.values() if term in out]


def fit_errors(fitted: MeasuredCompute, rows: list[MeasuredRow]) -> list[TermError]:
    """Each term of a fit at every measured row of its part."""
    return errors_of(fitted.predict, rows)


def term_errors(time: TimeFigures, layer_fixed_ms: float, rows: list[MeasuredRow], *,
                vision_depth: int) -> list[TermError]:
    """Each compute term of a table's `time` (one layer's figures, no recompute) at every measured row of its
    part, as the cost model reads the table: a layer is `layer_fixed_ms` (its share of `launch_ms`) plus its
    linear term plus one attention call.
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

    def predict(row: MeasuredRow) -> float:
        f = row.fields
        if row.part == "L":
            return linear(f["tokens"])
        if row.part == "C":
            return document(causal, f["length"])
        if row.part == "K":
            return document(causal, f["doc_len"], f["docs"])
        if row.part == "B":
            return document(off, f["q_len"])
        if row.part == "U":
            d = f["degree"]
            heads_fit = causal if d == 1 else ulysses.get(d, tuple(v / d for v in causal[:2]) + (causal[2],))
            return document(heads_fit, f["length"])
        if row.part == "HV":
            per_call = (float(time.vision_ms(f["patches"])) if time.vision_ms is not None
                        else time.vision_ms_per_call + time.vision_ms_per_patch * f["patches"])
            return per_call / vision_depth
        return linear(f["tokens"]) + document(causal, f["tokens"])

    return errors_of(predict, rows)


def _fit_attention_calls(parts: dict[str, list[MeasuredRow]]) -> tuple[float, tuple[float, float, float]]:
    """(call, causal fit) of every attention call measured.

    One fit over the rows of C, K, B and U together, all constants >= 0, the per-document constants of least
    mean relative error for each candidate floor and the floor of least worst-part error: a call costs the
    larger of one floor (the same kernel pair launched by the same host) and the work of its documents,
    which the floor hides while it is smaller (as the GPU-busy times of X show). A causal document of s
    tokens adds alpha s^2 + beta s + gamma; an off-diagonal block of x query rows against x / 2 keys holds
    as many query-key pairs as a causal document of x tokens and is fitted as one (B measured within 1% of
    C at 16K); a rank of a Ulysses degree d runs every document with 1 / d of the heads: (alpha s^2 + beta
    s) / d + gamma, no constant of its own.
    """
    design, measured, labels = [], [], []

    def call_row(part: str, times: float, quadratic: float, linear: float, documents: float) -> None:
        design.append((quadratic, linear, documents))
        measured.append(times)
        labels.append(part)

    for r in parts["C"]:
        s = float(r.fields["length"])
        call_row("C", r.fields["fb_ms"], s * s, s, 1.0)
    for r in parts["K"]:
        n, s = float(r.fields["docs"]), float(r.fields["doc_len"])
        call_row("K", r.fields["fb_ms"], n * s * s, n * s, n)
    for r in parts.get("B", []):
        s = float(r.fields["q_len"])
        call_row("B", r.fields["fb_ms"], s * s, s, 1.0)
    for r in parts.get("U", []):
        s, d = float(r.fields["length"]), float(r.fields["degree"])
        call_row("U", r.fields["fb_ms"], s * s / d, s / d, 1.0)
    times, design_arr, label_arr = np.asarray(measured), np.asarray(design), np.asarray(labels)
    best: tuple[float, float, np.ndarray] | None = None
    # The floor: candidates from 0 to twice the cheapest call measured; above it the work is fitted to the
    # rows the floor does not hide. The floor kept is the one whose worst part (C, K, B, U: each term is
    # judged on its own rows) has the least mean error.
    for floor in np.linspace(0.0, 2.0 * float(times.min()), 201):
        work = times > floor
        if work.sum() < design_arr.shape[1]:
            break
        coef = _least_mean_relative_error(design_arr[work], times[work])
        errors = np.abs(np.maximum(design_arr @ coef, floor) / times - 1.0)
        worst_part = max(float(errors[label_arr == name].mean()) for name in set(labels))
        if best is None or worst_part < best[0]:
            best = (worst_part, float(floor), coef)
    assert best is not None
    _, call, (alpha, beta, gamma) = best
    return call, (float(alpha), float(beta), float(gamma))


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
