"""What `fcp profile` measures and how: model shape, device, grids, repeats; checked on construction."""
from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mindspeed_mm.core.fcp.cost.analytic import ModelPreset
from mindspeed_mm.core.fcp.cost.model_config import ModelConfig
from mindspeed_mm.core.fcp.cost.presets import HARDWARE, MODELS
from mindspeed_mm.core.fcp.cost.shapes import EncoderShape
from mindspeed_mm.core.fcp.cost.table import DEVICES, DTYPES, ModelShape, VisionShape
from mindspeed_mm.core.fcp.profiler.timing import STATISTICS, check_clock
from mindspeed_mm.core.fcp.profiler.world import check_backend

DEFAULT_ATTENTION_LENGTHS = (16, 32, 64, 128, 256, 512)
DEFAULT_LINEAR_TOKENS = (64, 256, 1024, 2048)
DEFAULT_MESSAGE_BYTES = (1024, 65536, 1048576)
DEFAULT_BACKEND = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}
DEFAULT_VISION_FRAME_GROUPS = (1, 2, 4, 8)
LAYER_SOURCES = ("lean", "hf")
"""What the layers' compute terms are timed on: the profiler's lean decoder and the demo trainer's encoder, or
Hugging Face's Qwen3-VL text and vision models (`profiler.hf_qwen3vl`), which MindSpeed-MM's Qwen3-VL forks."""


def model_shape(name: str) -> ModelShape:
    """The decoder shape of a model preset (`tiny`, `qwen3vl-8b`, ...); its encoder is `encoder_shape`'s."""
    dec = _preset(name).decoder
    return ModelShape(name=name, layers=dec.layers, hidden=dec.hidden, heads=dec.heads, kv_heads=dec.kv_heads,
                      head_dim=dec.head_dim, ffn=dec.ffn, vocab=dec.vocab, attention_mask="causal", vision=None,
                      experts=dec.experts)


def encoder_shape(name: str) -> EncoderShape | None:
    """The vision encoder shape of a model preset (None for a text-only one)."""
    return _preset(name).encoder


def _preset(name: str):
    if name not in MODELS:
        raise ValueError(f"--model: unknown model {name!r}; valid: {sorted(MODELS)}")
    return MODELS[name]


def check_device(device: str) -> None:
    """Raise ValueError when ``device`` is not usable in this process."""
    if device not in DEVICES:
        raise ValueError(f"--device must be one of {list(DEVICES)}, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is visible to torch here")
    if device == "npu" and importlib.util.find_spec("torch_npu") is None:
        raise ValueError("--device npu: torch_npu is not installed")


def _check_sizes(option: str, values: tuple[int, ...], minimum: int = 1, at_least: int = 2) -> None:
    if len(values) < at_least:
        raise ValueError(f"{option} needs at least {at_least} values, got {list(values)}")
    for index, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{option}[{index}] must be an int >= {minimum}, got {value!r}")
    if list(values) != sorted(set(values)):
        raise ValueError(f"{option} must be strictly increasing, got {list(values)}")


@dataclass(frozen=True)
class ProfileConfig:
    """Everything one profiling run needs; invalid values raise ValueError naming the option."""

    model: ModelShape = field(default_factory=lambda: model_shape("tiny"))
    """Decoder shape to profile (one rank's shard: TP = PP = 1)."""
    encoder: EncoderShape | None = field(default_factory=lambda: encoder_shape("tiny"))
    """Vision encoder shape to profile (None: a text-only table, `model.vision` null)."""
    vision_frame_groups: tuple[int, ...] = DEFAULT_VISION_FRAME_GROUPS
    """Frame groups of the encoder's attention window per timed encoder call."""
    dtype: str = "fp32"
    """Activation / parameter dtype: one of DTYPES."""
    device: str = "cpu"
    """Device kind: one of DEVICES."""
    backend: str = "gloo"
    """torch.distributed backend of the communication measurements."""
    world_size: int = 4
    """Processes measuring at once; also the largest group size of the communication grids."""
    ranks_per_node: int = 8
    """Ranks sharing a node's fast links (recorded in the table; a CPU host is one node)."""
    attention_lengths: tuple[int, ...] = DEFAULT_ATTENTION_LENGTHS
    """Document lengths (tokens) of the attention grids."""
    attention_docs_per_call: int = 8
    """Most documents packed into one timed attention call; the grids hold the time per document."""
    attention_tokens_per_call: int = 2048
    """Fewer documents per call for long lengths, so a call holds at most this many tokens (at least one document)."""
    linear_tokens: tuple[int, ...] = DEFAULT_LINEAR_TOKENS
    """Batch sizes (tokens) of the linear-layer measurements."""
    message_bytes: tuple[int, ...] = DEFAULT_MESSAGE_BYTES
    """Message sizes of the point-to-point and all-to-all grids (bytes each rank sends)."""
    busy_block_length: int = 32
    """Shard tokens per document of the reference block the exchanges are timed next to (see `comm`)."""
    warmup: int = 1
    """Untimed runs before each measurement."""
    repeats: int = 3
    """Timed samples per measurement and sweep."""
    sweeps: int = 3
    """Passes over every measurement; samples of all sweeps are pooled."""
    min_sample_ms: float = 25.0
    """Each sample repeats the operation back to back for at least this long (steady host sharing)."""
    statistic: str = "median"
    """How repeats are summarised: one of STATISTICS."""
    clock: str = "auto"
    """`wall`, `cpu` (process CPU time, see `timing`) or `auto`: cpu on the CPU device, else wall."""
    seed: int = 0
    """Seed of weights and synthetic inputs."""
    timeout_s: float = 600.0
    """Limit on one measurement world (seconds)."""
    nice: int | None = None
    """Scheduling priority of the measuring processes, -20..19 (None: unchanged); see `world.raise_priority`."""
    layers: str = "lean"
    """Models the layers are timed on: one of LAYER_SOURCES."""
    model_config: ModelConfig | None = None
    """The Hugging Face `config.json` the shape was read from (`fcp profile --model-config / --recipe`), named in
    the table's provenance; None: a model preset's shape (`--model`)."""
    recipe: Path | None = None
    """The MindSpeed-MM recipe that named `model_config` (`--recipe`), recorded beside it."""
    comm_from: str | None = None
    """Where a one-process profile (`world_size` 1, one device) takes its communication terms from: a hardware
    preset (`h200`, `a3`, ...) or a profile table measured with several processes on the real node. None
    with several processes, which measure them."""

    def __post_init__(self) -> None:
        check_device(self.device)
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype must be one of {list(DTYPES)}, got {self.dtype!r}")
        if self.device == "cpu" and self.dtype != "fp32":
            raise ValueError(f"--dtype {self.dtype}: the CPU profile runs fp32 only")
        check_backend(self.backend, self.device)
        for option, value in (("--world-size", self.world_size), ("--ranks-per-node", self.ranks_per_node),
                              ("--repeats", self.repeats), ("--sweeps", self.sweeps),
                              ("--attention-docs-per-call", self.attention_docs_per_call),
                              ("--attention-tokens-per-call", self.attention_tokens_per_call),
                              ("--busy-block-length", self.busy_block_length)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{option} must be a positive int, got {value!r}")
        if self.layers not in LAYER_SOURCES:
            raise ValueError(f"--layers must be one of {list(LAYER_SOURCES)}, got {self.layers!r}")
        if self.layers == "hf":
            from mindspeed_mm.core.fcp.profiler.hf_qwen3vl import require_transformers

            require_transformers()
        if self.world_size == 1 and self.comm_from is None:
            raise ValueError("--world-size 1 measures no communication: name where its terms come from with "
                             f"--comm-from (a hardware preset of {sorted(HARDWARE)} or a profile table file)")
        if self.world_size > 1 and self.comm_from is not None:
            raise ValueError(f"--comm-from is for a one-process profile (--world-size 1); {self.world_size} "
                             "processes measure the communication themselves")
        if self.comm_from is not None and self.comm_from not in HARDWARE and not Path(self.comm_from).is_file():
            raise ValueError(f"--comm-from {self.comm_from!r}: neither a hardware preset ({', '.join(sorted(HARDWARE))}) "
                             "nor a profile table file")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"--warmup must be an int >= 0, got {self.warmup!r}")
        if self.clock == "auto":
            object.__setattr__(self, "clock", "cpu" if self.device == "cpu" else "wall")
        check_clock(self.clock, self.device)
        if self.statistic not in STATISTICS:
            raise ValueError(f"--statistic must be one of {list(STATISTICS)}, got {self.statistic!r}")
        if self.nice is not None and (isinstance(self.nice, bool) or not isinstance(self.nice, int)
                                      or not -20 <= self.nice <= 19):
            raise ValueError(f"--nice must be an int in -20..19, got {self.nice!r}")
        if isinstance(self.min_sample_ms, bool) or not isinstance(self.min_sample_ms, (int, float)) \
                or not 0 <= self.min_sample_ms < 10_000:
            raise ValueError(f"--min-sample-ms must be a number in [0, 10000), got {self.min_sample_ms!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s!r}")
        _check_sizes("--attention-lengths", self.attention_lengths, minimum=2, at_least=3)
        _check_sizes("--linear-tokens", self.linear_tokens, at_least=2)
        _check_sizes("--message-bytes", self.message_bytes, at_least=2)
        if self.encoder is not None:
            _check_sizes("--vision-frame-groups", self.vision_frame_groups, at_least=2)

    @property
    def model_preset(self) -> ModelPreset:
        """The profiled model as a preset model (for terms a one-process profile takes from a hardware preset)."""
        if self.model_config is not None:
            return ModelPreset(self.model_config.decoder, self.encoder, "none", "model config")
        return MODELS[self.model.name]

    def model_provenance(self) -> dict[str, Any]:
        """Where the profiled shape comes from, for the table's provenance."""
        if self.model_config is None:
            return {"preset": self.model.name}
        return self.model_config.provenance(self.recipe)

    @property
    def table_model(self) -> ModelShape:
        """The table's model: the decoder shape and, when profiled, the encoder's."""
        enc = self.encoder
        if enc is None:
            return self.model
        vision = VisionShape(depth=enc.depth, hidden=enc.hidden, heads=enc.heads, mlp=enc.mlp,
                             patch_size=enc.patch_size, spatial_merge=enc.spatial_merge,
                             temporal_patch=enc.temporal_patch, mergers=enc.mergers)
        return dataclasses.replace(self.model, vision=vision)

    @property
    def ulysses_degree_limit(self) -> int:
        """Largest Ulysses degree whose one-rank attention is timed: the world's size, or on one process the
        ranks of a node (the attention of heads / d heads is compute alone)."""
        return self.world_size if self.world_size > 1 else self.ranks_per_node

    @property
    def call_floor_lengths(self) -> tuple[int, ...]:
        """Document lengths timed alone in one call, for the attention call's floor: the two shortest."""
        return tuple(sorted(self.attention_lengths)[:2])

    def docs_per_call(self, length: int) -> int:
        """Documents of `length` tokens packed into one timed attention call."""
        return max(1, min(self.attention_docs_per_call, self.attention_tokens_per_call // length))

    @property
    def torch_device(self) -> torch.device:
        """The device every rank measures on (a CUDA / NPU rank uses its local index)."""
        return torch.device(self.device)
