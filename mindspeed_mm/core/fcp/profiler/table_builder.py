"""Turn the ranks' measurements into a validated ProfileTable (schema v1)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.cost.table import HardwareInfo, MemoryFigures, ProfileTable, TimeFigures
from mindspeed_mm.core.fcp.profiler.comm import COMM_KINDS
from mindspeed_mm.core.fcp.profiler.compute import ATTENTION_KINDS
from mindspeed_mm.core.fcp.profiler.config import ProfileConfig
from mindspeed_mm.core.fcp.profiler.fitting import fit_line, median_of, monotone
from mindspeed_mm.core.fcp.profiler.measure import MEMORY_PROBE_LENGTHS, RankMeasurements, probe_layers

USABLE_MEMORY_FRACTION = 0.9
"""Share of a rank's memory left to tensors (allocator slack, other processes): the presets' assumption."""


def _merged(ranks: Sequence[RankMeasurements], field: str) -> dict[Any, float]:
    """Median over the ranks that measured each key of a per-rank dict field."""
    values: dict[Any, list[float]] = {}
    for measured in ranks:
        for key, value in getattr(measured, field).items():
            values.setdefault(key, []).append(value)
    return {key: median_of(v) for key, v in values.items()}


def _grid(xs: Sequence[float], ys: Sequence[float], scale: str) -> Grid:
    return Grid(tuple(float(x) for x in xs), tuple(monotone(ys)), scale)


def _backward_ratio(both: dict[Any, float], forward: dict[Any, float], keys: Sequence[Any]) -> float:
    """Median of backward / forward over the points (backward = both - forward), kept above 0."""
    ratios = [max(both[k] - forward[k], 0.0) / forward[k] for k in keys if forward[k] > 0]
    return max(median_of(ratios), 1e-3)


def attention_grids(config: ProfileConfig, attention: dict[tuple[str, int], float]) -> dict[str, Grid]:
    """One loglog grid per attention kind over the document lengths."""
    lengths = config.attention_lengths
    return {kind: _grid(lengths, [attention[(kind, x)] for x in lengths], "loglog") for kind in ATTENTION_KINDS}


def linear_figures(config: ProfileConfig, decoder: dict[tuple[int, int], float]) -> tuple[float, float, float]:
    """(linear ms per token and layer, output ms per token, launch ms of the whole stage).

    A decoder of L layers without attention work takes a_L + b_L T for T tokens. With depths 1 and
    2, b_2 - b_1 is one layer and b_1 minus that the embedding / head / loss; the fixed cost of the
    whole model extrapolates a_1 + (layers - 1)(a_2 - a_1).
    """
    fits = {layers: fit_line(config.linear_tokens, [decoder[(layers, t)] for t in config.linear_tokens])
            for layers in probe_layers(config.model.layers)}
    a1, b1 = fits[1]
    if 2 not in fits:
        return b1, 0.0, a1
    a2, b2 = fits[2]
    per_layer = max(b2 - b1, 1e-9)
    output = max(b1 - per_layer, 0.0)
    launch = max(a1 + (config.model.layers - 1) * (a2 - a1), 0.0)
    return per_layer, output, launch


def comm_grids(config: ProfileConfig, comm: dict[tuple[str, int, int], float]) -> dict[str, dict[int, Grid]]:
    """Per kind and group size: time vs bytes each rank sends to other ranks (linear grids)."""
    out: dict[str, dict[int, Grid]] = {}
    for kind in COMM_KINDS:
        out[kind] = {}
        for size in range(2, config.world_size + 1):
            sent = [b if kind == "p2p" else b * (size - 1) / size for b in config.message_bytes]
            out[kind][size] = _grid(sent, [comm[(kind, size, b)] for b in config.message_bytes], "linear")
    return out


def build_table(config: ProfileConfig, ranks: Sequence[RankMeasurements], facts: dict[str, Any]) -> ProfileTable:
    """The table of one profiling run; `facts` (host, versions, load, duration) go to the provenance."""
    attention = _merged(ranks, "attention_ms")
    attention_forward = _merged(ranks, "attention_forward_ms")
    decoder = _merged(ranks, "decoder_ms")
    decoder_forward = _merged(ranks, "decoder_forward_ms")
    comm = _merged(ranks, "comm_ms")
    grids = attention_grids(config, attention)
    per_layer, output, launch = linear_figures(config, decoder)
    comms = comm_grids(config, comm)
    # A host is one node: the largest group measured stands for both link kinds.
    p2p = comms["p2p"][config.world_size]
    a2a = comms["all_to_all"][config.world_size]
    _, p2p_slope = fit_line(p2p.x, p2p.y)
    bandwidth = 1e3 / p2p_slope if p2p_slope > 0 else float(max(config.message_bytes)) * 1e3 / p2p.y[-1]

    low, high = (sum(lengths) for lengths in MEMORY_PROBE_LENGTHS)
    activation = median_of([(m.activation_bytes[high] - m.activation_bytes[low]) / (high - low) for m in ranks])
    causal_keys = [("causal", x) for x in config.attention_lengths]
    decoder_keys = list(decoder)
    time = TimeFigures(
        attention_causal_ms=grids["causal"],
        attention_full_ms=grids["full"],
        attention_backward_ratio=_backward_ratio(attention, attention_forward, causal_keys),
        linear_ms_per_token=per_layer,
        linear_backward_ratio=_backward_ratio(decoder, decoder_forward, decoder_keys),
        output_ms_per_token=output,
        vision_ms_per_patch=0.0,
        launch_ms=launch,
        p2p_intra_ms=p2p,
        p2p_inter_ms=p2p,
        all_to_all_intra_ms=a2a,
        all_to_all_inter_ms=a2a,
    )
    memory = MemoryFigures(
        static_bytes=float(median_of([m.training_state_bytes for m in ranks])),
        workspace_bytes=float(median_of([m.runtime_bytes for m in ranks])),
        activation_bytes_per_token=max(activation, 1.0),
        vision_activation_bytes_per_token=0.0,
    )
    hardware = HardwareInfo(
        name=config.device,
        device=config.device,
        ranks_per_node=config.ranks_per_node,
        memory_bytes=int(facts["rank_memory_bytes"]),
        usable_memory_fraction=USABLE_MEMORY_FRACTION,
        peak_tflops=max(median_of([m.matmul_tflops for m in ranks]), 1e-6),
        intra_node_bytes_per_s=bandwidth,
        inter_node_bytes_per_s=bandwidth,
    )
    provenance = {
        "source": "measured by fcp profile",
        **{k: v for k, v in facts.items() if k != "rank_memory_bytes"},
        "measurement": {
            "world_size": config.world_size, "backend": config.backend, "statistic": config.statistic,
            "warmup": config.warmup, "repeats": config.repeats, "seed": config.seed,
        },
        "attention_ms_block": grids["block"].to_dict(),
        "p2p_ms_by_group_size": {str(g): grid.to_dict() for g, grid in comms["p2p"].items()},
        "all_to_all_ms_by_group_size": {str(g): grid.to_dict() for g, grid in comms["all_to_all"].items()},
        "decoder_ms": {f"{layers} layers, {tokens} tokens": ms for (layers, tokens), ms in sorted(decoder.items())},
        "notes": [
            "Every rank of the measurement world ran each measurement at the same time, so the figures are "
            "those of one rank on a fully loaded host.",
            "Grids are made monotone (pool adjacent violators) where noise broke monotonicity.",
            "One host is one node: the inter-node grids repeat the intra-node measurements.",
            "static_bytes: parameters, gradients and Adam state after one step, without sharding.",
            "No vision encoder was profiled: vision_ms_per_patch is 0 and model.vision is null.",
        ],
    }
    table = ProfileTable(hardware=hardware, model=config.model, dtype=config.dtype, tp=1, pp=1, recompute="none",
                         time=time, memory=memory, provenance=provenance)
    table.validate(source="measured profile")
    return table
