"""Round runner: one step's forward/backward passes on this rank, following the plan."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.executor.comm_errors import communication
from mindspeed_mm.core.fcp.executor.round_batch import build_shard_batch
from mindspeed_mm.core.fcp.executor.sampler import PlanAwareSampler, RankRound
from mindspeed_mm.core.fcp.parallel.device import synchronize
from mindspeed_mm.core.fcp.solver import Plan


class GroupProvider(Protocol):
    """Gives the process group of a set of ranks (e.g. a `CommGroupPool`)."""

    timeout_s: float | None
    """Longest wait of an exchange on the groups (None: torch's default), for error messages."""

    def get(self, ranks: Sequence[int]) -> dist.ProcessGroup:
        """The process group of exactly `ranks`."""
        ...


@dataclass(frozen=True)
class RoundRecord:
    """What this rank ran in one round."""

    round_index: int
    """Zero-based round of the step."""
    ranks: tuple[int, ...]
    """Ranks of this rank's group."""
    algo: str
    """Attention algorithm of the group ("local" when the group is this rank alone)."""
    sample_indices: tuple[int, ...]
    """Dataset indices the group trained."""
    shard_tokens: int
    """Tokens of the group's packed batch held by this rank."""
    predicted_ms: float
    """Planner's predicted time of the group."""
    forward_backward_ms: float
    """Measured wall time of this rank in the round: loading its samples, sharding, forward and backward."""
    vision_patches: int = 0
    """Vision-encoder patches this rank encoded in the round (0 for a text-only model)."""


@dataclass
class StepAccounting:
    """Per-sample counts of one rank's step, indexed by position in the global batch."""

    tokens: torch.Tensor
    """`[global_batch]` float64 tokens fed to the model, counted from the shards actually built."""
    loss_tokens: torch.Tensor
    """`[global_batch]` float64 tokens whose loss was counted."""
    groups: torch.Tensor
    """`[global_batch]` float64 number of groups that trained the sample (counted on each group's first rank)."""
    vision_patches: torch.Tensor
    """`[global_batch]` float64 vision-encoder patches of the sample that this rank encoded."""


@dataclass(frozen=True)
class RoundForward:
    """What one rank's forward pass of one round produced, for the loss and the accounting."""

    token_losses: torch.Tensor
    """`[1, t]` per-token losses of this rank's shard."""
    loss_mask: torch.Tensor
    """`[t]` float32, 1 where a token's loss counts."""
    sample_ids: torch.Tensor
    """`[t]` int64 dataset index of each shard token's sample (CPU)."""
    vision_patches: dict[int, int] = field(default_factory=dict)
    """Dataset index -> vision patches of that sample this rank encoded in the round."""


@dataclass
class StepOutput:
    """This rank's share of one step."""

    loss_sum: torch.Tensor
    """float64 sum of the token losses this rank computed (not normalised)."""
    accounting: StepAccounting
    """Token accounting of the step on this rank."""
    rounds: list[RoundRecord] = field(default_factory=list)
    """One record per round."""

    @property
    def forward_backward_ms(self) -> float:
        """Forward + backward time of all rounds."""
        return sum(r.forward_backward_ms for r in self.rounds)


class RoundRunner:
    """Runs every round of a plan on one rank and accumulates the gradients of the global batch."""

    def __init__(
        self, model: torch.nn.Module, sampler: PlanAwareSampler, groups: GroupProvider, rank: int, device: torch.device
    ) -> None:
        self.model = model
        self.sampler = sampler
        self.groups = groups
        self.rank = rank
        self.device = device

    def run_step(self, plan: Plan, step: int) -> StepOutput:
        """Forward and backward of all rounds; gradients are scaled by the step's total loss tokens."""
        batch = self.sampler.batch_indices(step)
        normaliser = self.sampler.batch_loss_tokens(step)
        size = len(batch)
        accounting = StepAccounting(
            tokens=torch.zeros(size, dtype=torch.float64),
            loss_tokens=torch.zeros(size, dtype=torch.float64),
            groups=torch.zeros(size, dtype=torch.float64),
            vision_patches=torch.zeros(size, dtype=torch.float64),
        )
        loss_sum = torch.zeros((), dtype=torch.float64)
        records = []
        for rank_round in self.sampler.rank_rounds(plan, step, self.rank):
            group = rank_round.group
            started = time.perf_counter()
            what = f"round {rank_round.round_index + 1} of the plan ({group.algo} attention, forward and backward)"
            with communication(f"step {step + 1}", what, group.ranks, self.groups.timeout_s):
                process_group = self.groups.get(group.ranks) if group.degree > 1 else None
                forward = self.forward_round(rank_round, process_group)
                round_loss = (forward.token_losses.reshape(-1) * forward.loss_mask).sum()
                (round_loss / normaliser).backward()
                synchronize(self.device)
            elapsed_ms = (time.perf_counter() - started) * 1e3

            loss_sum += round_loss.detach().to("cpu", torch.float64)
            mask = forward.loss_mask.detach().to("cpu", torch.float64)
            for sample_index in rank_round.sample_indices:
                on_sample = forward.sample_ids == sample_index
                position = sample_index - batch.start
                accounting.tokens[position] += float(on_sample.sum())
                accounting.loss_tokens[position] += float(mask[on_sample].sum())
                accounting.vision_patches[position] += float(forward.vision_patches.get(sample_index, 0))
                if rank_round.rank_in_group == 0:
                    accounting.groups[position] += 1.0
            records.append(
                RoundRecord(
                    round_index=rank_round.round_index,
                    ranks=group.ranks,
                    algo=group.algo if group.degree > 1 else "local",
                    sample_indices=rank_round.sample_indices,
                    shard_tokens=int(forward.sample_ids.numel()),
                    predicted_ms=group.predicted_ms,
                    forward_backward_ms=elapsed_ms,
                    vision_patches=sum(forward.vision_patches.values()),
                )
            )
        return StepOutput(loss_sum=loss_sum, accounting=accounting, rounds=records)

    def forward_round(self, rank_round: RankRound, process_group: dist.ProcessGroup | None) -> RoundForward:
        """Loads the round's samples, builds this rank's shard and runs the model forward."""
        group = rank_round.group
        shard = build_shard_batch(
            self.sampler.load(rank_round),
            rank_in_group=rank_round.rank_in_group,
            degree=group.degree,
            group=process_group,
            algo=group.algo,
        ).to(self.device)
        token_losses = self.model(
            shard.tokens,
            shard.position_ids,
            None,
            labels=shard.labels,
            packed_seq_params=shard.packed_seq_params,
        )
        return RoundForward(token_losses=token_losses, loss_mask=shard.loss_mask, sample_ids=shard.sample_ids)
