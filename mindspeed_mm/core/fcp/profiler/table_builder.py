"""Turn the ranks' measurements into a validated ProfileTable (schema v1)."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.cost.model import CostModel
from mindspeed_mm.core.fcp.cost.table import HardwareInfo, MemoryFigures, ProfileTable, StepFigures, TimeFigures
from mindspeed_mm.core.fcp.profiler.comm_timing import COMM_KINDS
from mindspeed_mm.core.fcp.profiler.compute import ATTENTION_KINDS
from mindspeed_mm.core.fcp.profiler.profile_config import ProfileConfig
from mindspeed_mm.core.fcp.profiler.fitting import fit_line, fit_overlapped, median_of, monotone
from mindspeed_mm.core.fcp.profiler.measure import MEMORY_PROBE_LENGTHS, RankFacts, RankMeasurements, probe_layers
from mindspeed_mm.core.fcp.profiler.timing import summarize
from mindspeed_mm.core.fcp.profiler.vision import VisionFigures, vision_figures

USABLE_MEMORY_FRACTION = 0.9
"""Share of a rank's memory left to tensors (allocator slack, other processes): the presets' assumption."""


def _transformers_version() -> str:
    import transformers

    return str(transformers.__version__)


def _merged(ranks: Sequence[RankMeasurements], field: str, statistic: str) -> dict[Any, float]:
    """Per key of a per-rank dict of samples: median over the ranks of each rank's statistic."""
    values: dict[Any, list[float]] = {}
    for measured in ranks:
        for key, samples in getattr(measured, field).items():
            values.setdefault(key, []).append(summarize(samples, statistic))
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


def ulysses_grids(config: ProfileConfig, causal: Grid, ulysses: dict[tuple[int, int], float]) -> dict[int, Grid] | None:
    """Per measured Ulysses degree, one rank's attention over the document lengths; a rank of a larger group
    never costs more than one of a smaller (each degree's times capped by the degree below, the first by the
    full heads' causal grid): noise must not make a larger degree look slower per rank."""
    lengths = config.attention_lengths
    grids, below = {}, causal
    for degree in sorted({d for d, _ in ulysses}):
        grid = _grid(lengths, [min(ulysses[(degree, x)], float(below(x))) for x in lengths], "loglog")
        grids[degree] = below = grid
    return grids or None


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


def linear_curve(config: ProfileConfig, decoder: dict[tuple[int, int], float]) -> Grid | None:
    """One layer's non-attention work above its fixed cost at each measured token count: the 2-layer
    decoder's time minus the 1-layer one's, less the fitted per-layer fixed cost (`linear_figures`),
    so that the curve and `launch_ms` together count that cost once. None without a 2-layer probe."""
    depths = probe_layers(config.model.layers)
    if 2 not in depths:
        return None
    tokens = config.linear_tokens
    (a1, _), (a2, _) = (fit_line(tokens, [decoder[(layers, t)] for t in tokens]) for layers in (1, 2))
    fixed = a2 - a1
    return _grid(tokens, [max(decoder[(2, t)] - decoder[(1, t)] - fixed, 0.0) for t in tokens], "linear")


@dataclass(frozen=True)
class CommTimes:
    """Summarised times of one exchange size, milliseconds (see `comm.CommSamples`)."""

    alone_ms: float
    """The exchange alone."""
    busy_ms: float
    """The exchange with the reference block."""
    block_ms: float
    """The reference block alone."""


@dataclass(frozen=True)
class CommCurve:
    """What the table keeps of one kind of exchange at one group size."""

    grid: Grid
    """Transfer time vs bytes each rank sends to other ranks, as the cost model should charge it."""
    overlap: float
    """Share of the transfer a compute block hides (0 for all-to-all, which nothing overlaps)."""


def comm_curve(kind: str, size: int, config: ProfileConfig, times: dict[tuple[str, int, int], CommTimes]) -> CommCurve:
    """The grid and overlap of one kind and group size from the ranks' merged times.

    A busy step with compute c and transfer p takes max(c, p) + (1 - w) min(c, p), so
    w = (c + p - busy) / min(c, p). Where the host hides part of the transfer (w > 0) the grid
    holds the transfer alone; where it hides nothing, the grid holds what the transfer really
    adds to a busy step, busy - c, which on a host whose ranks share cores exceeds p alone.
    """
    points = [times[(kind, size, b)] for b in config.message_bytes]
    sent = [b if kind == "p2p" else b * (size - 1) / size for b in config.message_bytes]
    overlap = 0.0
    if kind == "p2p":
        ratios = [(t.block_ms + t.alone_ms - t.busy_ms) / min(t.block_ms, t.alone_ms) for t in points]
        overlap = min(max(median_of(ratios), 0.0), 1.0)
    if overlap > 0:
        ys = [t.alone_ms for t in points]
    else:
        ys = [max(t.alone_ms, t.busy_ms - t.block_ms) for t in points]
    return CommCurve(_grid(sent, ys, "linear"), overlap)


@dataclass(frozen=True)
class Links:
    """The communication terms of a table and where they come from."""

    p2p_intra: Grid
    p2p_inter: Grid
    a2a_intra: Grid
    a2a_inter: Grid
    p2p_by_size: dict[int, Grid] | None
    a2a_by_size: dict[int, Grid] | None
    overlap: float
    intra_bytes_per_s: float
    inter_bytes_per_s: float
    step: StepFigures | None
    """The source's step figures (a one-process profile takes its FSDP round and reduction); None when measured."""
    source: str
    """Where the terms come from, for the provenance."""
    provenance: dict[str, Any]
    """The raw figures behind the terms."""


def measured_links(config: ProfileConfig, comm: dict[tuple[str, int, int], "CommTimes"]) -> Links:
    """The communication terms the world measured. A host is one node: the largest group measured, every rank
    busy, stands for both link kinds (and for group sizes beyond the ones measured)."""
    sizes = range(2, config.world_size + 1)
    curves = {(kind, size): comm_curve(kind, size, config, comm) for kind in COMM_KINDS for size in sizes}
    p2p_curve = curves[("p2p", config.world_size)]
    p2p, a2a = p2p_curve.grid, curves[("all_to_all", config.world_size)].grid
    _, p2p_slope = fit_line(p2p.x, p2p.y)
    bandwidth = 1e3 / p2p_slope if p2p_slope > 0 else float(max(config.message_bytes)) * 1e3 / p2p.y[-1]
    return Links(
        p2p, p2p, a2a, a2a, {size: curves[("p2p", size)].grid for size in sizes},
        {size: curves[("all_to_all", size)].grid for size in sizes}, p2p_curve.overlap, bandwidth, bandwidth, None,
        f"measured by {config.world_size} processes ({config.backend})",
        {"busy_block_ms": median_of([t.block_ms for t in comm.values()]),
         "comm_ms_by_group_size": {
             f"{kind} {size} ranks": {
                 "bytes": list(config.message_bytes),
                 "alone": [comm[(kind, size, b)].alone_ms for b in config.message_bytes],
                 "busy": [comm[(kind, size, b)].busy_ms for b in config.message_bytes],
                 "block": [comm[(kind, size, b)].block_ms for b in config.message_bytes],
                 "overlap": curve.overlap,
             } for (kind, size), curve in curves.items()}})


def links_from(config: ProfileConfig) -> Links:
    """The communication terms of a one-process profile: those of a hardware preset (built for the profiled
    model shape and dtype) or of a profile table measured with several processes on the real node."""
    from mindspeed_mm.core.fcp.cost.presets import HARDWARE, build_preset_table

    source = config.comm_from
    assert source is not None
    if source in HARDWARE:
        table = build_preset_table(source, config.model.name, dtype=config.dtype, recompute="none",
                                   ranks_per_node=config.ranks_per_node,
                                   model_preset=None if config.model_config is None else config.model_preset)
        described = f"hardware preset {source}"
    else:
        table = ProfileTable.load(source)
        described = f"profile table {source}"
    tm, hw = table.time, table.hardware
    return Links(tm.p2p_intra_ms, tm.p2p_inter_ms, tm.all_to_all_intra_ms, tm.all_to_all_inter_ms,
                 tm.p2p_by_group_size_ms, tm.all_to_all_by_group_size_ms, tm.comm_overlap,
                 hw.intra_node_bytes_per_s, hw.inter_node_bytes_per_s, table.step, described,
                 {"comm_source_provenance": {k: table.provenance.get(k) for k in ("source", "preset", "hardware")
                                             if k in table.provenance}})


@dataclass(frozen=True)
class RealLayerTerms:
    """The layer terms of a table timed on Hugging Face's Qwen3-VL (`--layers hf`)."""

    linear_ms: Grid
    """One layer's work besides its attention core, above its fixed cost, vs tokens."""
    linear_ms_per_token: float
    """The slope of that work."""
    launch_ms: float
    """Fixed cost of a round of the whole stage."""
    vision_ms: Grid | None
    """One encoder call vs patches (None: no encoder profiled)."""
    vision_line: tuple[float, float] | None
    """(per call, per patch) of the line through those calls."""
    provenance: dict[str, Any]
    """The per-layer and per-call times behind them."""


def real_layer_terms(config: ProfileConfig, hf_text: dict[tuple[int, int], float],
                     hf_vision: dict[tuple[int, int], float], causal: Grid, call_floor: float,
                     lean_decoder: dict[tuple[int, int], float]) -> RealLayerTerms:
    """One Hugging Face layer at x tokens, R(x) = T(2 layers, x) - T(1 layer, x), fitted as r0 + r1 x: r0 is
    the layer's fixed cost (the round's `launch_ms` takes it once per layer, with the lean decoder's fixed cost
    outside the layers), and the linear curve is what R adds above r0 besides the attention core the table
    charges apart (one call of one document: the larger of the call floor and the causal grid). A call of the
    encoder of `depth` blocks: the 1-block model plus depth - 1 times the 2-block model's extra block."""
    tokens = config.linear_tokens
    per_layer = [hf_text[(2, x)] - hf_text[(1, x)] for x in tokens]
    r0, _ = fit_line(tokens, [max(y, 1e-9) for y in per_layer])
    above = [max(y - r0 - max(call_floor, float(causal(x))), 0.0) for x, y in zip(tokens, per_layer)]
    _, slope = fit_line(tokens, [max(y, 1e-9) for y in above]) if any(above) else (0.0, 1e-9)
    a1, _ = fit_line(tokens, [lean_decoder[(1, x)] for x in tokens])
    a2, _ = fit_line(tokens, [lean_decoder[(2, x)] for x in tokens])
    outside_layers = max(a1 - (a2 - a1), 0.0)
    launch = outside_layers + config.model.layers * r0
    vision_grid, line, calls = None, None, {}
    enc = config.encoder
    if enc is not None and hf_vision:
        groups = config.vision_frame_groups
        calls = {g: hf_vision[(1, g)] + (enc.depth - 1) * max(hf_vision[(2, g)] - hf_vision[(1, g)], 0.0)
                 for g in groups}
        patches = [g * enc.attention_window for g in groups]
        vision_grid = _grid(patches, [calls[g] for g in groups], "linear")
        line = fit_line(patches, [calls[g] for g in groups])
    return RealLayerTerms(
        _grid(tokens, above, "linear"), max(slope, 1e-9), launch, vision_grid, line,
        {"hf_layer_ms_by_tokens": {str(x): y for x, y in zip(tokens, per_layer)}, "hf_layer_fixed_ms": r0,
         "hf_vision_call_ms_by_frame_groups": {str(g): ms for g, ms in calls.items()}})


def composition_factor(table: ProfileTable, whole: dict[tuple[int, ...], float]) -> tuple[float, dict[str, float]]:
    """Measured / predicted time of the whole decoder on the composition probes (local attention).

    The table's compute terms are timed piece by piece (attention cores, layers without attention);
    the whole model runs them in one graph, with its own memory traffic and allocations. The
    median ratio over the probes is the factor the compute terms are scaled by; the per-probe
    ratios go to the provenance.
    """
    cost = CostModel(table)
    ratios = {"+".join(map(str, lengths)): measured / float(cost.group_time_ms(cost.workload(list(lengths)), 1, "ring"))
              for lengths, measured in sorted(whole.items())}
    return median_of(list(ratios.values())), ratios


def scaled_compute(time: TimeFigures, factor: float) -> TimeFigures:
    """`time` with every compute term (attention grids and call floor, linear, output, launch) times `factor`;
    links unchanged."""

    def scaled(grid: Grid) -> Grid:
        return Grid(grid.x, tuple(y * factor for y in grid.y), grid.scale)

    return dataclasses.replace(
        time,
        attention_causal_ms=scaled(time.attention_causal_ms),
        attention_full_ms=scaled(time.attention_full_ms),
        attention_off_diagonal_ms=None if time.attention_off_diagonal_ms is None
        else scaled(time.attention_off_diagonal_ms),
        attention_ulysses_ms=None if time.attention_ulysses_ms is None
        else {degree: scaled(grid) for degree, grid in time.attention_ulysses_ms.items()},
        linear_ms_per_token=time.linear_ms_per_token * factor,
        linear_ms=None if time.linear_ms is None else scaled(time.linear_ms),
        output_ms_per_token=time.output_ms_per_token * factor,
        launch_ms=time.launch_ms * factor,
        attention_call_ms=time.attention_call_ms * factor,
    )


def _merged_comm(ranks: Sequence[RankMeasurements], statistic: str) -> dict[tuple[str, int, int], CommTimes]:
    """Per exchange: median over the ranks that took part of each rank's statistic, field by field."""
    keys = {key for measured in ranks for key in measured.comm}
    merged = {}
    for key in keys:
        got = [m.comm[key] for m in ranks if key in m.comm]
        merged[key] = CommTimes(*(median_of([summarize(getattr(t, name), statistic) for t in got])
                                  for name in ("alone", "busy", "block")))
    return merged


def step_figures(step: dict[str, float], whole_linear: dict[int, float], fsdp_round: dict[int, float]) -> StepFigures:
    """The step section from the merged step samples and FSDP2 rounds (the all-reduce is absent on a world
    of one rank: 0). The FSDP round is the fit of FSDP2's rounds against the unsharded passes."""
    tokens = sorted(fsdp_round)
    traffic, overlap = fit_overlapped([whole_linear[t] for t in tokens], [fsdp_round[t] for t in tokens])
    return StepFigures(
        optimizer_ms=step["optimizer"],
        fsdp_round_ms=traffic,
        replica_reduction_ms=step.get("all_reduce", 0.0),
        fsdp_overlap=overlap,
    )


def _vision(config: ProfileConfig, ranks: Sequence[RankMeasurements],
            rank_facts: Sequence[RankFacts]) -> tuple[VisionFigures, list[str]]:
    """The encoder's figures and provenance notes (zeros and a note when none was profiled)."""
    enc = config.encoder
    if enc is None:
        return VisionFigures(0.0, 0.0, 0.0), ["No vision encoder was profiled: the vision figures are 0 and "
                                              "model.vision is null."]
    activation = median_of([f.vision_activation_bytes_per_token for f in rank_facts
                            if f.vision_activation_bytes_per_token is not None])
    figures = vision_figures(enc, config.vision_frame_groups, _merged(ranks, "vision", config.statistic), activation)
    notes = [f"vision: the encoder FCP trains (patch embedding, {enc.depth} windowed ViT blocks, one merger) on calls "
             f"of {', '.join(map(str, config.vision_frame_groups))} frame groups of {enc.attention_window} patches; "
             "vision_ms_per_call and vision_ms_per_patch are the line through them (not scaled by the composition "
             "factor: the encoder is timed whole)."]
    if enc.mergers > 1:
        notes.append(f"vision: the preset's encoder has {enc.mergers} mergers (DeepStack); only one was built and "
                     "timed, so the figures leave out the others.")
    return figures, notes


def build_table(config: ProfileConfig, ranks: Sequence[RankMeasurements], rank_facts: Sequence[RankFacts],
                facts: dict[str, Any]) -> ProfileTable:
    """The table of one profiling run; `facts` (host, versions, load, duration) go to the provenance."""
    statistic = config.statistic
    attention = _merged(ranks, "attention", statistic)
    attention_forward = _merged(ranks, "attention_forward", statistic)
    ulysses = _merged(ranks, "ulysses_attention", statistic)
    decoder = _merged(ranks, "decoder", statistic)
    decoder_forward = _merged(ranks, "decoder_forward", statistic)
    comm = _merged_comm(ranks, statistic)
    grids = attention_grids(config, attention)
    per_layer, output, launch = linear_figures(config, decoder)
    call_floor = min(_merged(ranks, "attention_call", statistic).values())
    step, whole_linear, fsdp = (_merged(ranks, name, statistic) for name in ("step", "whole_linear", "fsdp_round"))
    if config.world_size > 1:
        links = measured_links(config, comm)
        step_section = step_figures(step, whole_linear, fsdp)
    else:
        links = links_from(config)
        step_section = dataclasses.replace(links.step, optimizer_ms=step["optimizer"]) if links.step is not None \
            else None

    low, high = (sum(lengths) for lengths in MEMORY_PROBE_LENGTHS)
    activation = median_of([(m.activation_bytes[high] - m.activation_bytes[low]) / (high - low)
                            for m in rank_facts])
    vision, vision_notes = _vision(config, ranks, rank_facts)
    causal_keys = [("causal", x) for x in config.attention_lengths]
    decoder_keys = list(decoder)
    time = TimeFigures(
        attention_causal_ms=grids["causal"],
        attention_full_ms=grids["full"],
        attention_backward_ratio=_backward_ratio(attention, attention_forward, causal_keys),
        linear_ms_per_token=per_layer,
        linear_backward_ratio=_backward_ratio(decoder, decoder_forward, decoder_keys),
        output_ms_per_token=output,
        vision_ms_per_patch=vision.ms_per_patch,
        vision_ms_per_call=vision.ms_per_call,
        launch_ms=launch,
        p2p_intra_ms=links.p2p_intra,
        p2p_inter_ms=links.p2p_inter,
        all_to_all_intra_ms=links.a2a_intra,
        all_to_all_inter_ms=links.a2a_inter,
        attention_off_diagonal_ms=grids["block"],
        attention_ulysses_ms=ulysses_grids(config, grids["causal"], ulysses),
        comm_overlap=links.overlap,
        linear_ms=linear_curve(config, decoder),
        p2p_by_group_size_ms=links.p2p_by_size,
        all_to_all_by_group_size_ms=links.a2a_by_size,
        attention_call_ms=call_floor,
    )
    memory = MemoryFigures(
        static_bytes=float(median_of([m.training_state_bytes for m in rank_facts])),
        workspace_bytes=float(median_of([m.runtime_bytes for m in rank_facts])),
        activation_bytes_per_token=max(activation, 1.0),
        vision_activation_bytes_per_token=vision.activation_bytes_per_token,
    )
    hardware = HardwareInfo(
        name=config.device,
        device=config.device,
        ranks_per_node=config.ranks_per_node,
        memory_bytes=int(facts["rank_memory_bytes"]),
        usable_memory_fraction=USABLE_MEMORY_FRACTION,
        peak_tflops=max(median_of([m.matmul_tflops for m in rank_facts]), 1e-6),
        intra_node_bytes_per_s=links.intra_bytes_per_s,
        inter_node_bytes_per_s=links.inter_bytes_per_s,
    )
    provenance = {
        "source": "measured by fcp profile",
        "model_shape_source": config.model_provenance(),
        **{k: v for k, v in facts.items() if k != "rank_memory_bytes"},
        "measurement": {
            "world_size": config.world_size, "backend": config.backend, "statistic": config.statistic,
            "clock": config.clock,
            "warmup": config.warmup, "repeats": config.repeats, "sweeps": config.sweeps,
            "min_sample_ms": config.min_sample_ms, "attention_docs_per_call": config.attention_docs_per_call,
            "attention_tokens_per_call": config.attention_tokens_per_call,
            "busy_block_length": config.busy_block_length, "nice": config.nice, "seed": config.seed,
            "vision_frame_groups": None if config.encoder is None else list(config.vision_frame_groups),
            "vision_window_patches": None if config.encoder is None else config.encoder.attention_window,
        },
        "phase_seconds": {k: round(v, 1) for k, v in rank_facts[0].phase_seconds.items()},
        "term_sources": {
            "compute": f"measured by {config.world_size} process(es) on {config.device}",
            "communication": links.source,
            "step": "optimizer measured; " + ("FSDP round and gradient reduction measured" if config.world_size > 1
                                              else f"FSDP round and gradient reduction from {links.source}"),
        },
        **links.provenance,
        "attention_call_ms_by_length": {str(k): v for k, v in
                                        sorted(_merged(ranks, "attention_call", statistic).items())},
        "fsdp2_round_ms_by_tokens": {str(t): {"unsharded": whole_linear[t], "fsdp2": fsdp[t]} for t in sorted(fsdp)},
        "bulk_collectives_ms": {kind: step[kind] for kind in ("all_gather", "reduce_scatter") if kind in step},
        "vision_ms_by_frame_groups": {str(groups): ms for groups, ms in
                                      sorted(_merged(ranks, "vision", statistic).items())},
        "decoder_ms": {f"{layers} layers, {tokens} tokens": ms for (layers, tokens), ms in sorted(decoder.items())},
        "notes": [
            "Every rank of the measurement world ran each measurement at the same time, so the figures are "
            "those of one rank on a fully loaded host.",
            "Grids are made monotone (pool adjacent violators) where noise broke monotonicity.",
            *(["One host is one node: the inter-node grids repeat the intra-node measurements.",
               "Communication grids: the transfer alone where a compute block hides part of it, else what it adds "
               "to a busy step (see comm_ms_by_group_size: alone, busy = with the reference block, block alone)."]
              if config.world_size > 1 else
              [f"One process measured the compute terms; the links, the FSDP round and the gradient reduction are "
               f"those of the {links.source}."]),
            "attention_call_ms: the least one call costs, the fastest of one document of the shortest profiled "
            "lengths alone in a call (attention_call_ms_by_length); the grids hold a document's share of calls of "
            "several documents, which on devices whose calls have a large floor must hold enough tokens to "
            "exceed it (--attention-tokens-per-call).",
            "static_bytes: parameters, gradients and Adam state after one step, without sharding.",
            f"step: Adam over the whole decoder on each rank; the gradient reduction is one fp32 all-reduce over the "
            f"{config.world_size} measuring ranks. fsdp_round_ms and fsdp_overlap fit round = max(pass, traffic) + "
            "(1 - overlap) min(pass, traffic) to the whole decoder without attention work under FSDP2 (one unit per "
            "layer and one for the rest, resharded after forward) against the same decoder unsharded "
            "(fsdp2_round_ms_by_tokens); bulk_collectives_ms: one flat all-gather of the parameters and one "
            "reduce-scatter of the fp32 gradients, for comparison.",
            *vision_notes,
        ],
    }
    if config.layers == "hf":
        real = real_layer_terms(config, _merged(ranks, "hf_text", statistic), _merged(ranks, "hf_vision", statistic),
                                grids["causal"], call_floor, decoder)
        time = dataclasses.replace(time, linear_ms=real.linear_ms, linear_ms_per_token=real.linear_ms_per_token,
                                   launch_ms=real.launch_ms)
        if real.vision_ms is not None and real.vision_line is not None:
            time = dataclasses.replace(time, vision_ms=real.vision_ms, vision_ms_per_call=real.vision_line[0],
                                       vision_ms_per_patch=real.vision_line[1])
        provenance.update(real.provenance)
        provenance["layers"] = f"Hugging Face Qwen3-VL (transformers {_transformers_version()})"
        provenance["notes"].append(
            "--layers hf: the linear curve, the layers' fixed cost and the vision calls come from Hugging Face's "
            "Qwen3-VL text and vision models (real_layer_terms); the attention core stays the profiled kernel's. "
            "No composition factor: the timed layers are the real ones.")
        table = ProfileTable(hardware=hardware, model=config.table_model, dtype=config.dtype, tp=1, pp=1,
                             recompute="none", time=time, memory=memory, step=step_section, provenance=provenance)
        table.validate(source="measured profile")
        return table
    parts = ProfileTable(hardware=hardware, model=config.table_model, dtype=config.dtype, tp=1, pp=1, recompute="none",
                         time=time, memory=memory, step=step_section, provenance=provenance)
    factor, ratios = composition_factor(parts, _merged(ranks, "whole_decoder", statistic))
    provenance["composition"] = {"factor": factor, "measured_over_parts_by_probe": ratios}
    provenance["notes"].append(
        "Compute terms (attention grids, linear, output, launch) are the timed parts times the composition "
        "factor: the median of whole-decoder time / sum of the parts over the probes in composition.")
    table = dataclasses.replace(parts, time=scaled_compute(time, factor), provenance=provenance)
    table.validate(source="measured profile")
    return table
