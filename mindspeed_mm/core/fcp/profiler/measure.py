"""The measurements every rank of the profiling world runs, in sweeps, and the raw samples they keep."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.cost.table import ModelShape
from mindspeed_mm.core.fcp.cost.ulysses_costs import ulysses_degrees
from mindspeed_mm.core.fcp.parallel import CommGroupPool
from mindspeed_mm.core.fcp.parallel.ulysses import kv_repeat_factor
from mindspeed_mm.core.fcp.profiler.comm_timing import COMM_KINDS, CommSamples, comm_samples, prewarm_groups, reference_block
from mindspeed_mm.core.fcp.profiler.compute import (
    ATTENTION_KINDS,
    Repeats,
    attention_samples,
    decoder_samples,
    linear_samples,
    matmul_tflops,
    whole_decoder_samples,
)
from mindspeed_mm.core.fcp.profiler.profile_config import ProfileConfig
from mindspeed_mm.core.fcp.profiler.decoder import Decoder
from mindspeed_mm.core.fcp.profiler.memory import runtime_bytes, saved_activation_bytes, training_state_bytes
from mindspeed_mm.core.fcp.profiler.fsdp import sharded_decoder
from mindspeed_mm.core.fcp.profiler.hf_qwen3vl import HFProbes, text_samples, vision_samples
from mindspeed_mm.core.fcp.profiler.step_costs import step_samples
from mindspeed_mm.core.fcp.profiler.vision import encoder_probe

MEMORY_PROBE_LENGTHS = ((64, 32, 32), (256, 128, 128))
"""Two packed batches (document lengths) whose saved-activation difference gives bytes per token."""


def composition_probes(attention_lengths: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """Packed batches (document lengths) the whole decoder runs on, to check the sum of the timed parts:
    the longest document alone, a long and a short one, and the shortest few together."""
    lengths = sorted(attention_lengths)
    return ((lengths[-1],), (lengths[-2], lengths[0]), tuple(lengths[:3]))

Key = TypeVar("Key")
Value = TypeVar("Value")


@dataclass(frozen=True)
class RankFacts:
    """Figures of one rank besides the timing samples."""

    activation_bytes: dict[int, int]
    """Tokens of a probe batch -> bytes autograd saved for backward."""
    training_state_bytes: int
    """Parameters, gradients and Adam state of the whole decoder."""
    runtime_bytes: int
    """Memory held before any model tensor existed."""
    matmul_tflops: float
    """Achieved dense matmul throughput."""
    phase_seconds: dict[str, float]
    """Elapsed time of each measurement phase, all sweeps together."""
    vision_activation_bytes_per_token: float | None = None
    """Encoder activations kept for backward per merged token (None: no encoder profiled)."""


@dataclass(frozen=True)
class RankMeasurements:
    """Raw samples (milliseconds per run) one rank took; keys name the grid point."""

    attention: dict[tuple[str, int], tuple[float, ...]] = field(default_factory=dict)
    """(kind, document length) -> forward + backward of one layer's attention core, per document."""
    attention_call: dict[int, tuple[float, ...]] = field(default_factory=dict)
    """Document length -> forward + backward of one causal call holding that one document (the call floor)."""
    attention_forward: dict[tuple[str, int], tuple[float, ...]] = field(default_factory=dict)
    """(`causal`, document length) -> forward alone, per document (for the backward / forward ratio)."""
    ulysses_attention: dict[tuple[int, int], tuple[float, ...]] = field(default_factory=dict)
    """(Ulysses degree, document length) -> one rank's attention (its heads / degree), per document."""
    decoder: dict[tuple[int, int], tuple[float, ...]] = field(default_factory=dict)
    """(layers, tokens) -> forward + backward of a decoder of that many layers without attention work."""
    decoder_forward: dict[tuple[int, int], tuple[float, ...]] = field(default_factory=dict)
    """(layers, tokens) -> forward alone."""
    whole_decoder: dict[tuple[int, ...], tuple[float, ...]] = field(default_factory=dict)
    """Document lengths of a composition probe -> forward + backward of the whole decoder, local attention."""
    comm: dict[tuple[str, int, int], CommSamples] = field(default_factory=dict)
    """(kind, group size, bytes) -> one exchange, only for group sizes this rank took part in."""
    step: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """`step_costs.STEP_KINDS` -> the optimizer step and the whole-model collectives over the world."""
    whole_linear: dict[int, tuple[float, ...]] = field(default_factory=dict)
    """Tokens -> forward + backward of the whole decoder without attention work (the pass of an FSDP round)."""
    fsdp_round: dict[int, tuple[float, ...]] = field(default_factory=dict)
    """Tokens -> the same under FSDP2 over the world (`profiler.fsdp`)."""
    vision: dict[int, tuple[float, ...]] = field(default_factory=dict)
    """Frame groups of one encoder call -> its forward + backward (empty: no encoder profiled)."""
    hf_text: dict[tuple[int, int], tuple[float, ...]] = field(default_factory=dict)
    """(layers, tokens) -> Hugging Face's Qwen3-VL text model over one document (`--layers hf` only)."""
    hf_vision: dict[tuple[int, int], tuple[float, ...]] = field(default_factory=dict)
    """(blocks, frame groups) -> Hugging Face's Qwen3-VL vision model over one video (`--layers hf` only)."""

    def to_json(self) -> dict[str, dict[str, object]]:
        """The raw samples as JSON-ready dicts, keys as text (a tuple's parts joined by spaces)."""
        return {f.name: {_key_name(key): dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
                         for key, value in getattr(self, f.name).items()}
                for f in dataclasses.fields(self)}

    def __add__(self, other: "RankMeasurements") -> "RankMeasurements":
        """The samples of both (e.g. two sweeps) under each key."""
        return RankMeasurements(*(_joined(getattr(self, f.name), getattr(other, f.name))
                                  for f in dataclasses.fields(self)))


def _key_name(key: object) -> str:
    return " ".join(str(part) for part in key) if isinstance(key, tuple) else str(key)


def _joined(a: dict[Key, Value], b: dict[Key, Value]) -> dict[Key, Value]:
    out = dict(a)
    for key, value in b.items():
        out[key] = out[key] + value if key in out else value  # type: ignore[operator]
    return out


def probe_layers(layers: int) -> tuple[int, ...]:
    """Decoder depths timed for the linear work: 1 and 2 layers (2 - 1 isolates one layer)."""
    return (1, 2) if layers >= 2 else (1,)


def rank_device(config: ProfileConfig, rank: int) -> torch.device:
    """The device of a rank: the CPU, or the accelerator with the rank's local index."""
    if config.device == "cpu":
        return torch.device("cpu")
    if config.device == "cuda":
        count = torch.cuda.device_count()
    else:
        count = torch.npu.device_count()  # type: ignore[attr-defined]
    device = torch.device(config.device, rank % count)
    if config.device == "cuda":
        torch.cuda.set_device(device)
    return device


class RankProfiler:
    """One rank's side of the profile: measurements in sweeps that every rank runs in step."""

    def __init__(self, rank: int, world_size: int, config: ProfileConfig) -> None:
        self.config = config
        self.device = rank_device(config, rank)
        self.runtime_bytes = runtime_bytes(self.device)
        self.world_size = world_size
        self.pool = CommGroupPool()
        prewarm_groups(self.pool, self.group_sizes, world_size)
        shape = config.model
        self.decoders = {layers: Decoder(dataclasses.replace(shape, layers=layers), config.dtype,
                                         config.seed).to(self.device) for layers in probe_layers(shape.layers)}
        self.whole_decoder = Decoder(shape, config.dtype, config.seed).to(self.device)
        self.sharded_decoder = sharded_decoder(shape, config.dtype, config.seed, self.device)
        self.block = reference_block(shape, config.dtype, config.busy_block_length, config.attention_docs_per_call,
                                     self.device, config.seed)
        self.encoder = None if config.encoder is None else encoder_probe(config.encoder, config.dtype, self.device,
                                                                          config.seed)
        self.hf = None if config.layers != "hf" else HFProbes.build(shape, config.encoder, config.dtype, self.device,
                                                                    config.seed)
        self.phase_seconds: dict[str, float] = {}
        """Elapsed seconds per measurement phase so far."""

    @property
    def ulysses_shapes(self) -> dict[int, ModelShape]:
        """Per Ulysses degree up to the world size, the head counts one rank of such a group attends with."""
        shape = self.config.model
        shapes = {}
        for degree in ulysses_degrees(shape.heads, shape.kv_heads):
            if 2 <= degree <= self.config.ulysses_degree_limit:
                kv = shape.kv_heads * kv_repeat_factor(shape.heads, shape.kv_heads, degree) // degree
                shapes[degree] = dataclasses.replace(shape, heads=shape.heads // degree, kv_heads=kv)
        return shapes

    @property
    def group_sizes(self) -> tuple[int, ...]:
        """Group sizes of the communication measurements."""
        return tuple(range(2, self.world_size + 1))

    def steps(self) -> int:
        """Measurements in one sweep (for progress bars)."""
        c = self.config
        return ((len(ATTENTION_KINDS) + len(self.ulysses_shapes)) * len(c.attention_lengths) + len(c.call_floor_lengths)
                + len(self.decoders) * len(c.linear_tokens) + len(composition_probes(c.attention_lengths))
                + len(COMM_KINDS) * len(self.group_sizes) * len(c.message_bytes) + 1 + len(c.linear_tokens)
                + (0 if self.encoder is None else len(c.vision_frame_groups))
                + (0 if self.hf is None else len(self.hf.text) * len(c.linear_tokens)
                   + len(self.hf.vision) * len(c.vision_frame_groups)))

    def sweep(self, repeats: int, on_step: Callable[[str], None]) -> RankMeasurements:
        """Every time measurement once, with `repeats` samples each."""
        c = self.config
        timing = Repeats(c.warmup, repeats, self.device, c.min_sample_ms, c.clock)
        out = RankMeasurements()
        started = time.perf_counter()
        for kind in ATTENTION_KINDS:
            for length in c.attention_lengths:
                docs = c.docs_per_call(length)
                both, forward = attention_samples(c.model, kind, length, docs, c.dtype, timing, c.seed,
                                                  forward_too=kind == "causal")
                out.attention[(kind, length)] = tuple(t / docs for t in both.times_ms)
                if forward is not None:
                    out.attention_forward[(kind, length)] = tuple(t / docs for t in forward.times_ms)
                on_step(f"attention {kind} {length}")
        for length in c.call_floor_lengths:
            alone, _ = attention_samples(c.model, "causal", length, 1, c.dtype, timing, c.seed, forward_too=False)
            out.attention_call[length] = alone.times_ms
            on_step(f"attention call {length}")
        mask = c.model.attention_mask
        for degree, shape in self.ulysses_shapes.items():
            for length in c.attention_lengths:
                docs = c.docs_per_call(length)
                both, _ = attention_samples(shape, mask, length, docs, c.dtype, timing, c.seed, forward_too=False)
                out.ulysses_attention[(degree, length)] = tuple(t / docs for t in both.times_ms)
                on_step(f"attention ulysses {degree} {length}")
        started = self._phase("attention", started)
        for layers, decoder in self.decoders.items():
            for tokens in c.linear_tokens:
                both, forward = decoder_samples(decoder, c.model, tokens, timing, c.seed)
                out.decoder[(layers, tokens)] = both.times_ms
                out.decoder_forward[(layers, tokens)] = forward.times_ms
                on_step(f"linear {layers} layer(s) {tokens} tokens")
        for lengths in composition_probes(c.attention_lengths):
            out.whole_decoder[lengths] = whole_decoder_samples(self.whole_decoder, c.model, lengths, timing,
                                                               c.seed).times_ms
            on_step(f"whole decoder {'+'.join(map(str, lengths))} tokens")
        started = self._phase("linear", started)
        for kind in COMM_KINDS:
            for size in self.group_sizes:
                for nbytes in c.message_bytes:
                    samples = comm_samples(kind, nbytes, size, self.pool, self.block, timing)
                    if samples is not None:
                        out.comm[(kind, size, nbytes)] = samples
                    on_step(f"{kind} {size} ranks {nbytes} B")
        started = self._phase("communication", started)
        # A decoder of its own: the optimizer steps change its weights and leave gradients behind.
        out.step.update(step_samples(Decoder(c.model, c.dtype, c.seed).to(self.device), c.dtype, timing, c.seed))
        on_step("optimizer step and gradient reduction")
        for tokens in c.linear_tokens:
            out.whole_linear[tokens] = linear_samples(self.whole_decoder, c.model, tokens, timing, c.seed).times_ms
            out.fsdp_round[tokens] = linear_samples(self.sharded_decoder, c.model, tokens, timing, c.seed).times_ms
            on_step(f"FSDP2 round {tokens} tokens")
        started = self._phase("step", started)
        if self.encoder is not None:
            for groups in c.vision_frame_groups:
                out.vision[groups] = self.encoder.samples(groups, timing).times_ms
                on_step(f"vision encoder {groups} frame group(s)")
            started = self._phase("vision", started)
        if self.hf is not None:
            for layers, model in self.hf.text.items():
                for tokens in c.linear_tokens:
                    out.hf_text[(layers, tokens)] = text_samples(model, c.model, tokens, timing, c.seed)
                    on_step(f"Hugging Face Qwen3-VL text, {layers} layer(s), {tokens} tokens")
            for blocks, model in self.hf.vision.items():
                for groups in c.vision_frame_groups:
                    out.hf_vision[(blocks, groups)] = vision_samples(model, c.encoder, groups, timing, c.seed)
                    on_step(f"Hugging Face Qwen3-VL vision, {blocks} block(s), {groups} frame group(s)")
            self._phase("hf_layers", started)
        return out

    def _phase(self, name: str, started: float) -> float:
        now = time.perf_counter()
        self.phase_seconds[name] = self.phase_seconds.get(name, 0.0) + now - started
        return now

    def facts(self) -> RankFacts:
        """Activation, training-state and runtime bytes, matmul throughput, phase durations."""
        c = self.config
        started = time.perf_counter()
        full = Decoder(c.model, c.dtype, c.seed).to(self.device)
        activation = {sum(lengths): saved_activation_bytes(full, c.model, list(lengths), self.device, c.seed)
                      for lengths in MEMORY_PROBE_LENGTHS}
        state = training_state_bytes(full, c.model, self.device, c.seed)
        tflops = matmul_tflops(c.dtype, Repeats(c.warmup, c.repeats, self.device, c.min_sample_ms, "wall"))
        vision = None
        if self.encoder is not None:
            groups = c.vision_frame_groups
            vision = self.encoder.activation_bytes_per_token(groups[0], groups[-1])
        dist.barrier()
        self._phase("memory", started)
        return RankFacts(activation, state, self.runtime_bytes, tflops, dict(self.phase_seconds), vision)
