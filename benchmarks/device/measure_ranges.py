"""Device check of the sizes the cost model extrapolates to: one run of a few minutes on one GPU; CI never runs it.

    OUT=/tmp python benchmarks/device/measure_ranges.py          # from the project root, on the GPU machine
    DRY=1 OUT=/tmp python benchmarks/device/measure_ranges.py    # the same logic on the CPU, tiny shapes

Qwen3-VL-8B shapes, bf16 (DRY: the `tiny` preset's shapes, fp32, the CPU's reference kernel). Rows in the format of
the project's device data (`../shared/device/README.md`; `cost.measured_compute.load_rows` reads them), each the
median of `REPEATS` forward + backward runs after `WARMUP` (synchronised wall clock):

- HV: Hugging Face's Qwen3-VL vision blocks (2 blocks, per block) over one call of 32K-256K patches as a rank
  receives them: several clips of `CLIP_FRAME_GROUPS` frame groups of the encoder's window (48 x 60 patches);
- H: Hugging Face's Qwen3-VL text layers (2 layers, per layer) over one document of 4K-128K tokens;
- L: one decoder layer without its attention core (the profiler's lean layer), 4K-128K tokens, forward too;
- U: a Ulysses rank's attention, 32 / d query and max(8 / d, 1) key-value heads, degrees 1-16 at three lengths;
- B: a ring's off-diagonal block (x query rows against x / 2 keys) to x = 32K; C and K: one causal document and
  32K tokens packed in documents, for the fit; A: an 8192^3 GEMM;
- F: the floor of one attention call (one document of 128 tokens) of `torch_varlen` and of `flash_attn`, where
  they are installed.

A size that does not fit in memory gives a row with its `error`. Then the rows are fitted as the H200 file is
(`fit_measured_compute`) and scored held out (`cost.term_validation`), and the packaged H200 fit is scored on them
(a check of how it extrapolates; meaningful only when this device is an H200): `$OUT/device_ranges.jsonl`,
`$OUT/device_ranges.md`. To fold the rows into a table, append them to a measurement file of the same device.
"""
from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mindspeed_mm.core.fcp.cost.measured_compute import (  # noqa: E402
    MeasuredRow, errors_of, load_h200_qwen3vl8b, load_rows,
)
from mindspeed_mm.core.fcp.cost.table import ModelShape  # noqa: E402
from mindspeed_mm.core.fcp.cost.term_validation import device_held_out, lines  # noqa: E402
from mindspeed_mm.core.fcp.parallel.kernels import (  # noqa: E402
    KernelUnavailableError, VarlenSegments, available_kernels, get_kernel,
)
from mindspeed_mm.core.fcp.profiler.compute import Repeats, attention_samples  # noqa: E402
from mindspeed_mm.core.fcp.profiler.decoder import TORCH_DTYPES, DecoderLayer, skip_core  # noqa: E402
from mindspeed_mm.core.fcp.profiler.profile_config import encoder_shape, model_shape  # noqa: E402

DRY = os.environ.get("DRY") == "1"
OUT = Path(os.environ.get("OUT", "."))
MODEL = "tiny" if DRY else "qwen3vl-8b"
DTYPE = "fp32" if DRY else "bf16"
WARMUP, REPEATS = (1, 2) if DRY else (2, 5)
K = 1 if DRY else 1024
VISION_PATCHES = (256, 1024) if DRY else (32 * K, 64 * K, 128 * K, 256 * K)
TEXT_TOKENS = (64, 128, 256) if DRY else (4 * K, 32 * K, 64 * K, 128 * K)
ULYSSES_LENGTHS = (32, 64, 128) if DRY else (4 * K, 16 * K, 64 * K)
ULYSSES_DEGREES = (1, 2, 4) if DRY else (1, 2, 4, 8, 16)
BLOCK_LENGTHS = (32, 128) if DRY else (4 * K, 16 * K, 32 * K)
CAUSAL_LENGTHS = (16, 64, 256) if DRY else (128, 1 * K, 4 * K, 16 * K, 32 * K, 64 * K)
PACKED = ((4, 64), (16, 16)) if DRY else ((1, 32 * K), (4, 8 * K), (64, 512), (256, 128))
GEMM = 256 if DRY else 8192
CLIP_FRAME_GROUPS = 2 if DRY else 8
"""Frame groups of one clip of a rank's vision call (InternVid-like clips of ~16 s at 2 fps)."""
ROWS: list[dict] = []


def emit(**row: object) -> None:
    ROWS.append(row)
    print(json.dumps(row), flush=True)


def device() -> torch.device:
    if DRY:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible (set DRY=1 to check the script on the CPU)")
    return torch.device("cuda")


def median_ms(fn, repeats: Repeats) -> float:
    samples = repeats.time(fn).times_ms
    return float(sorted(samples)[len(samples) // 2])


def guarded(part: str, **key: object):
    """Run one measurement; an out-of-memory or other failure becomes a row with its error."""
    def wrap(measure):
        try:
            measure()
        except (torch.OutOfMemoryError, RuntimeError, KernelUnavailableError) as exc:
            emit(part=part, **key, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            if not DRY:
                torch.cuda.empty_cache()
        return measure
    return wrap


def gemm(repeats: Repeats, dev: torch.device) -> None:
    a = torch.randn(GEMM, GEMM, dtype=TORCH_DTYPES[DTYPE], device=dev)
    b = torch.randn(GEMM, GEMM, dtype=TORCH_DTYPES[DTYPE], device=dev)
    ms = median_ms(lambda: a @ b, repeats)
    emit(part="A", n=GEMM, ms=ms, tflops=2.0 * GEMM**3 / (ms * 1e-3) / 1e12)


def lean_layer(shape: ModelShape, tokens: int, repeats: Repeats, dev: torch.device) -> None:
    layer = DecoderLayer(shape, TORCH_DTYPES[DTYPE]).to(dev)
    x = torch.randn(tokens, shape.hidden, dtype=TORCH_DTYPES[DTYPE], device=dev, requires_grad=True)
    angles = torch.outer(torch.arange(tokens, device=dev, dtype=torch.float32),
                         torch.ones(shape.head_dim // 2, device=dev))
    angles = torch.cat((angles, angles), dim=-1).unsqueeze(1)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    def both() -> None:
        layer(x, cos, sin, skip_core).float().square().mean().backward()

    def forward() -> None:
        with torch.no_grad():
            layer(x, cos, sin, skip_core)

    emit(part="L", tokens=tokens, fb_ms_per_layer=median_ms(both, repeats), fwd_ms_per_layer=median_ms(forward, repeats))


def hf_text(shape: ModelShape, tokens: int, repeats: Repeats, dev: torch.device) -> None:
    from mindspeed_mm.core.fcp.profiler.hf_qwen3vl import text_model, text_samples

    model = text_model(shape, 2, DTYPE, dev, seed=0)
    samples = text_samples(model, shape, tokens, repeats, seed=0)
    emit(part="H", tokens=tokens, fb_ms_per_layer=sorted(samples)[len(samples) // 2] / 2)


def hf_vision(patches: int, repeats: Repeats, dev: torch.device) -> None:
    from mindspeed_mm.core.fcp.profiler.hf_qwen3vl import vision_model, window_grid

    encoder = encoder_shape(MODEL)
    model = vision_model(encoder, 2, DTYPE, dev, seed=0)
    h, w = window_grid(encoder)
    groups = max(1, round(patches / (h * w)))
    clips = [CLIP_FRAME_GROUPS] * (groups // CLIP_FRAME_GROUPS) + ([groups % CLIP_FRAME_GROUPS] if groups %
                                                                    CLIP_FRAME_GROUPS else [])
    grid = torch.tensor([[t, h, w] for t in clips], device=dev)
    width = 3 * encoder.temporal_patch * encoder.patch_size ** 2
    pixels = torch.randn(groups * h * w, width, dtype=TORCH_DTYPES[DTYPE], device=dev)

    def both() -> None:
        model.zero_grad(set_to_none=True)
        out = model(pixels, grid_thw=grid)
        (out[0] if isinstance(out, tuple) else out).float().square().mean().backward()

    emit(part="HV", patches=groups * h * w, grid=[len(clips), CLIP_FRAME_GROUPS, h, w],
         fb_ms_per_block=median_ms(both, repeats) / 2)


def heads_shape(shape: ModelShape, degree: int) -> ModelShape:
    """One Ulysses rank's heads: 1 / d of the query heads, the key-value heads split or replicated to one."""
    return ModelShape(name=shape.name, layers=1, hidden=shape.hidden, heads=shape.heads // degree,
                      kv_heads=max(shape.kv_heads // degree, 1), head_dim=shape.head_dim, ffn=shape.ffn,
                      vocab=shape.vocab, attention_mask="causal", vision=None)


def attention(shape: ModelShape, part: str, repeats: Repeats, *, length: int, docs: int = 1, degree: int = 1,
              kind: str = "causal") -> None:
    both, forward = attention_samples(heads_shape(shape, degree), kind, length, docs, DTYPE, repeats, seed=0)
    fb, fwd = both.summary("median"), forward.summary("median")
    if part == "C":
        emit(part="C", length=length, fb_ms=fb, fwd_ms=fwd)
    elif part == "K":
        emit(part="K", docs=docs, doc_len=length, fb_ms=fb, fwd_ms=fwd)
    elif part == "U":
        emit(part="U", length=length, degree=degree, q_heads=shape.heads // degree,
             kv_heads=max(shape.kv_heads // degree, 1), fb_ms=fb, fwd_ms=fwd)
    else:
        emit(part="B", q_len=length, kv_len=math.ceil(length / 2), fb_ms=fb, fwd_ms=fwd)


def call_floor(shape: ModelShape, kernel_name: str, repeats: Repeats, dev: torch.device) -> None:
    kernel = get_kernel(kernel_name)
    dtype = TORCH_DTYPES[DTYPE]
    q = torch.randn(128, shape.heads, shape.head_dim, dtype=dtype, device=dev, requires_grad=True)
    k = torch.randn(128, shape.kv_heads, shape.head_dim, dtype=dtype, device=dev, requires_grad=True)
    v = torch.randn(128, shape.kv_heads, shape.head_dim, dtype=dtype, device=dev, requires_grad=True)
    segments = VarlenSegments((0, 128), (0, 128))
    scale = 1.0 / math.sqrt(shape.head_dim)
    dout = torch.randn_like(q)

    def both() -> None:
        out, lse = kernel.forward(q, k, v, segments, causal=True, softmax_scale=scale)
        kernel.backward(dout, q, k, v, out, lse, segments, causal=True, softmax_scale=scale)

    emit(part="F", kernel=kernel_name, length=128, fb_ms=median_ms(both, repeats))


def measure(dev: torch.device) -> None:
    repeats = Repeats(warmup=WARMUP, repeats=REPEATS, device=dev)
    shape = model_shape(MODEL)
    emit(part="env", torch=torch.__version__, device=torch.cuda.get_device_name() if dev.type == "cuda"
         else platform.processor() or "cpu", dtype=DTYPE, model=MODEL, kernels=available_kernels(),
         dry=DRY)
    guarded("A")(lambda: gemm(repeats, dev))
    for kernel in ("torch_varlen", "flash_attn") if dev.type == "cuda" else ("torch",):
        guarded("F", kernel=kernel)(lambda kernel=kernel: call_floor(shape, kernel, repeats, dev))
    for tokens in TEXT_TOKENS:
        guarded("L", tokens=tokens)(lambda tokens=tokens: lean_layer(shape, tokens, repeats, dev))
    for length in CAUSAL_LENGTHS:
        guarded("C", length=length)(lambda length=length: attention(shape, "C", repeats, length=length))
    for docs, length in PACKED:
        guarded("K", docs=docs, doc_len=length)(
            lambda docs=docs, length=length: attention(shape, "K", repeats, length=length, docs=docs))
    for length in ULYSSES_LENGTHS:
        for degree in ULYSSES_DEGREES:
            guarded("U", length=length, degree=degree)(
                lambda length=length, degree=degree: attention(shape, "U", repeats, length=length, degree=degree))
    for length in BLOCK_LENGTHS:
        guarded("B", q_len=length)(lambda length=length: attention(shape, "B", repeats, length=length, kind="block"))
    for tokens in TEXT_TOKENS:
        guarded("H", tokens=tokens)(lambda tokens=tokens: hf_text(shape, tokens, repeats, dev))
    for patches in VISION_PATCHES:
        guarded("HV", patches=patches)(lambda patches=patches: hf_vision(patches, repeats, dev))


def report() -> list[str]:
    """The rows fitted and scored held out, and the packaged H200 fit scored on them."""
    rows = [MeasuredRow(k + 1, row) for k, row in enumerate(ROWS) if "error" not in row]
    env = ROWS[0] if ROWS and ROWS[0]["part"] == "env" else {"device": "?", "torch": torch.__version__}
    out = [f"Rows: {len(ROWS)} ({sum('error' in row for row in ROWS)} failed) on {env['device']} ({env['torch']}, "
           f"{DTYPE}, {MODEL}{', DRY: a check of the script, not of a device' if DRY else ''}).", ""]
    try:
        out += ["The rows' own fit, held out:", "", *lines(device_held_out("device_ranges.jsonl", rows)), ""]
    except ValueError as exc:
        out += [f"No fit of these rows: {exc}", ""]
    _, _, h200 = load_h200_qwen3vl8b()
    out += ["The packaged H200 fit on these rows (how it extrapolates; meaningful only on an H200):", "",
            "| term | rows | mean error | worst (row) |", "|---|---|---|---|"]
    for error in errors_of(h200.predict, rows):
        _, row, worst = error.worst
        out.append(f"| {error.term} | {len(error.points)} | {100 * error.mean_abs_error:.1f}% | {100 * worst:+.1f}% "
                   f"({row}) |")
    return out


def main() -> int:
    started = time.perf_counter()
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        measure(device())
    except Exception:   # keep what was measured
        traceback.print_exc()
    (OUT / "device_ranges.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    load_rows(OUT / "device_ranges.jsonl")   # the rows read back as the device data is read
    text = report() + ["", f"{time.perf_counter() - started:.0f} s"]
    (OUT / "device_ranges.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
