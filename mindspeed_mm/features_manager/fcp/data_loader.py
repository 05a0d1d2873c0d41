"""FCP's data loader for MindSpeed-MM: `sampler_type: FCPBatchSampler` in the data YAML.

MindSpeed-MM builds its training loader with `prepare_sampler_dataloader(dataset, sampler_type=..., ...)`.
FCP wraps that function: with `FCPBatchSampler` it plans every global batch from the dataset's token lengths
and vision patches (the model adapter counts them in the preprocessed `input_ids`, vision tokens already
expanded, so no image is loaded to plan), registers the plans with FCP's runtime, and hands each rank, round
after round, its group's samples packed into one sequence (`seqlens` holds the documents' lengths, no padding
between them, no attention mask; a group too wide for its samples gets the padding document of
`solver.short_shards`), collated ahead by `num_workers` worker processes (`core/fcp/runtime/round_loader`).
"""
from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from mindspeed_mm.core.fcp.runtime.fcp_options import FCPOptions
from mindspeed_mm.core.fcp.runtime.round_loader import FCPRoundLoader
from mindspeed_mm.core.fcp.runtime.round_shard import SEQLENS_KEY
from mindspeed_mm.core.fcp.runtime.run_steps import RunSteps
from mindspeed_mm.core.fcp.runtime.step_plans import (
    FCPDataError, GlobalBatchOrder, RuntimePlanSource, StepPlans, check_budget_holds_the_longest,
)
from mindspeed_mm.core.fcp.solver.short_shards import padding_length

from .megatron.checkpoint import resumed_state
from .model_adapter import ModelAdapter, run_adapter
from .runtime import FCPRuntime, get_fcp_runtime
from .cost_source import run_expert_parallel

logger = logging.getLogger(__name__)

FCP_SAMPLER = "FCPBatchSampler"
"""The `data.dataloader_param.sampler_type` that selects FCP's batch sampler."""
SAMPLER_KEY = "data.dataloader_param.sampler_type"
LENGTH_COLUMN = "input_ids"
SEQUENCE_KEYS = ("input_ids", "labels")
"""Per-token keys of a collated sample (`[1, length]`), concatenated along the sequence."""
IGNORE_INDEX = -100
"""The label of a token without loss (MindSpeed-MM's)."""


def dataset_token_lengths(dataset: Any, adapter: ModelAdapter) -> list[int]:
    """Token length of every sample of a preprocessed Hugging Face dataset, read from its `input_ids` column."""
    column_names = getattr(dataset, "column_names", None)
    if column_names is None or LENGTH_COLUMN not in column_names:
        raise FCPDataError(
            f"{SAMPLER_KEY}: {FCP_SAMPLER} plans from the token lengths of a preprocessed dataset (column "
            f"{LENGTH_COLUMN!r} of data.dataset_param.dataset_type: huggingface, without preprocess_on_fly or "
            f"streaming); got {type(dataset).__name__} with columns {column_names}"
        )
    return adapter.sample_lengths(dataset, LENGTH_COLUMN)


def _without_padding(batch: dict[str, Any]) -> dict[str, Any]:
    """One collated sample without the collator's trailing padding (which its attention mask marks)."""
    batch = dict(batch)
    mask = batch.pop("attention_mask", None)
    if mask is None:
        return batch
    mask = mask.reshape(-1).bool()
    length = int(mask.sum())
    if not bool(mask[:length].all()):
        raise FCPDataError("FCP packs whole samples: the collator's attention mask has padding before the sample's end")
    for key in SEQUENCE_KEYS:
        if key in batch:
            batch[key] = batch[key][..., :length]
    return batch


class PackedGroupCollator:
    """Collates each sample with MindSpeed-MM's own collator, then packs the group's samples into one sequence;
    a group of more ranks than its samples fill gets a padding document (`solver.short_shards`)."""

    def __init__(self, collate_sample: Callable[[list[dict]], dict], lengths: Sequence[int],
                 media_keys: Sequence[str], padding_token_id: int) -> None:
        self.collate_sample = collate_sample
        self.lengths = list(lengths)
        self.media_keys = tuple(media_keys)
        """Per-medium keys (the model adapter's), concatenated along their first dimension."""
        self.padding_token_id = padding_token_id

    def __call__(self, samples: list[dict], degree: int) -> dict[str, Any]:
        collated = [_without_padding(self.collate_sample([sample])) for sample in samples]
        seqlens = [int(batch["input_ids"].shape[-1]) for batch in collated]
        padding = padding_length(seqlens, degree)
        if padding:  # loss-free text: no vision token, every label ignored
            first = collated[0]
            collated.append({"input_ids": first["input_ids"].new_full((1, padding), self.padding_token_id),
                             "labels": first["labels"].new_full((1, padding), IGNORE_INDEX)})
            seqlens.append(padding)
        packed: dict[str, Any] = {}
        for key in sorted({key for batch in collated for key in batch}):
            values = [batch[key] for batch in collated if batch.get(key) is not None]
            if key in SEQUENCE_KEYS:
                packed[key] = torch.cat(values, dim=1)
            elif key in self.media_keys:
                packed[key] = torch.cat(values, dim=0) if values else None
            elif all(isinstance(value, list) for value in values):
                packed[key] = [item for value in values for item in value]  # per-image / per-video metadata
            else:
                raise FCPDataError(
                    f"FCP cannot pack the collated key {key!r} (it packs "
                    f"{', '.join(SEQUENCE_KEYS + self.media_keys)} and per-sample lists)")
        packed[SEQLENS_KEY] = torch.tensor(seqlens, dtype=torch.int32)
        return packed


def check_collated_lengths(batch: dict[str, Any], indices: Sequence[int], lengths: Sequence[int]) -> None:
    """Raises naming the sample when a collated sample is not as long as the length it was planned with (a
    padding document after the samples is not checked)."""
    for index, got in zip(indices, batch[SEQLENS_KEY].tolist()):
        if got != lengths[index]:
            raise FCPDataError(
                f"training sample {index}: planned with {lengths[index]} tokens but collated to {got}")


class _CheckedCollator:
    """The packing collator, checking every sample against its planned length (the sampler passes indices)."""

    def __init__(self, packer: PackedGroupCollator, dataset: Any) -> None:
        self.packer = packer
        self.dataset = dataset

    def __call__(self, indices: list[int], degree: int) -> dict[str, Any]:
        batch = self.packer([self.dataset[i] for i in indices], degree)
        check_collated_lengths(batch, indices, self.packer.lengths)
        return batch


def register_training_plans(runtime: FCPRuntime, plans: StepPlans) -> None:
    """Makes `plans` the runtime's plan source; only one FCP data loader (the training one) per run."""
    if runtime.plan_source is not None:
        raise FCPDataError(
            f"a second {FCP_SAMPLER} data loader (a validation set: data.dataset_param.basic_parameters.val_dataset "
            "or val_rate) is not supported under fcp_cp_algo yet: FCP plans the training steps only")
    runtime.set_plan_source(RuntimePlanSource(plans, runtime.settings.comm_timeout_s), plans.steps.first)


def build_fcp_dataloader(dataset: Any, params: dict[str, Any], runtime: FCPRuntime | None = None) -> FCPRoundLoader:
    """The FCP data loader of `prepare_sampler_dataloader`'s bound parameters `params`; registers the plans."""
    from megatron.training import get_args

    from mindspeed_mm.data.dataloader.data_collator import DATA_COLLATOR

    args = get_args()
    adapter = run_adapter(args)
    runtime = runtime or get_fcp_runtime()
    layout = runtime.require_layout()
    if params.get("batch_size", 1) != 1:
        raise FCPDataError(f"{FCP_SAMPLER} packs the samples of a group itself: micro_batch_size must be 1")
    collate_param = dict(params.get("collate_param") or {})
    if "model_name" not in collate_param:
        raise FCPDataError(f"{FCP_SAMPLER} needs data.dataloader_param.collate_param.model_name (the sample collator)")
    collate_sample = DATA_COLLATOR[collate_param.pop("model_name")](**collate_param,
                                                                     dataset_param=params.get("dataset_param"))
    lengths = dataset_token_lengths(dataset, adapter)
    global_batch = args.global_batch_size
    consumed = int(params.get("consumed_samples") or 0)
    if consumed % global_batch:
        raise FCPDataError(f"consumed samples {consumed} is not a whole number of global batches of {global_batch}")
    order = GlobalBatchOrder(len(lengths), global_batch, bool(params.get("shuffle", False)))
    first_step = consumed // global_batch
    num_steps = max(1, args.train_iters - first_step)
    options = FCPOptions.from_namespace(args)
    planner = options.batch_planner(num_ranks=layout.num_fcp_ranks, tp=getattr(args, "tensor_model_parallel_size", 1),
                                    vision_frozen=adapter.vision_frozen(args), expert_parallel=run_expert_parallel(args))
    check_budget_holds_the_longest(lengths, planner)
    resumed = resumed_state(getattr(args, "load", None), int(getattr(args, "iteration", 0) or 0))
    if resumed is not None and resumed["steps_done"] != first_step:
        raise FCPDataError(
            f"the checkpoint's FCP state is of step {resumed['steps_done']}, but the data resume at step "
            f"{first_step} ({consumed} consumed samples in global batches of {global_batch})")
    calibration = None if resumed is None else resumed["calibration"]
    # The vision tower is priced where the cost model has one (a text-only table plans tokens alone).
    patches = None
    if planner.cost.table.model.vision is not None:
        patches = adapter.sample_patches(dataset, params.get("dataset_param"), LENGTH_COLUMN)
    steps = RunSteps(first_step, num_steps)
    plans = StepPlans(order, lengths, lambda batch_lengths, batch_patches: options.plan_source(
        planner, batch_lengths, steps, batch_patches=batch_patches, log=logger, calibration=calibration),
        steps, patches=patches)
    register_training_plans(runtime, plans)
    logger.info("FCP: %s plans %d samples (%d-%d tokens, %s vision patches) in global batches of %d from step %d",
                FCP_SAMPLER, len(lengths), min(lengths), max(lengths),
                "no" if patches is None else f"{min(patches)}-{max(patches)}", global_batch, first_step + 1)
    packer = PackedGroupCollator(collate_sample, lengths, adapter.media_keys,
                                 adapter.padding_token_id(params.get("dataset_param")))
    return FCPRoundLoader(plans, layout, _CheckedCollator(packer, dataset),
                          num_workers=int(params.get("num_workers") or 0), prefetch_factor=params.get("prefetch_factor"),
                          pin_memory=bool(params.get("pin_memory", False)))


def prepare_sampler_dataloader_wrapper(prepare: Callable[..., Any]) -> Callable[..., Any]:
    """MindSpeed-MM's sampler data loader builder; under fcp_cp_algo only `sampler_type: FCPBatchSampler` is accepted."""
    signature = inspect.signature(prepare)

    @functools.wraps(prepare)
    def wrapper(*args: Any, **kwargs: Any) -> FCPRoundLoader:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        params = dict(bound.arguments)
        sampler_type = params.get("sampler_type")
        if sampler_type != FCP_SAMPLER:
            raise FCPDataError(
                f"context_parallel_algo fcp_cp_algo plans every step from its data: set {SAMPLER_KEY}: {FCP_SAMPLER} "
                f"(got {sampler_type!r})"
            )
        return build_fcp_dataloader(params.pop("dataset"), params)

    return wrapper
