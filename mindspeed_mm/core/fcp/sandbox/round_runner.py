"""Round runner of `fcp train`: one step's forward/backward passes on this rank, through the FCP runtime.

The runtime (`FCPRuntime`, the one Megatron's schedule drives under the MindSpeed feature) gives the
rounds, their process groups and their measured times; this runner loads each round's samples, shards
them with the shard function of every driver, runs the model and counts the tokens it trained.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.runtime.comm_errors import communication
from mindspeed_mm.core.fcp.sandbox.round_batch import build_shard_batch
from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRound, FCPRuntime
from mindspeed_mm.core.fcp.sandbox.sampler import PlanAwareSampler
from mindspeed_mm.core.fcp.parallel.device import synchronize
from mindspeed_mm.core.fcp.solver import Plan
from mindspeed_mm.core.fcp.solver.plan import IDLE


@dataclass(frozen=True)
class RoundRecord:
    """What this rank ran in one round."""

    round_index: int
    """Zero-based round of the step."""
    ranks: tuple[int, ...]
    """Ranks of this rank's group."""
    algo: str
    """Attention algorithm of the group ("local" when the group is this rank alone, "idle" when the
    rank sits the round out)."""
    sample_indices: tuple[int, ...]
    """Dataset indices the group trained."""
    shard_tokens: int
    """Tokens of the group's packed batch held by this rank."""
    predicted_ms: float
    """Planner's predicted time of the group."""
    forward_backward_ms: float
    """Measured wall time of this rank in the round (from the runtime's round boundaries): loading its
    samples, sharding, forward and backward, and waiting for the group."""
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
    rank_round_ms: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    """`[FCP rank, round]` measured time of every rank in every round, the same on every rank."""

    @property
    def forward_backward_ms(self) -> float:
        """Forward + backward time of all rounds."""
        return sum(r.forward_backward_ms for r in self.rounds)


class RoundRunner:
    """Runs every round of a plan on one rank and accumulates the gradients of the global batch."""

    def __init__(self, model: torch.nn.Module, sampler: PlanAwareSampler, runtime: FCPRuntime,
                 device: torch.device) -> None:
        self.model = model
        self.sampler = sampler
        self.runtime = runtime
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
        ran: list[tuple[FCPRound, tuple[int, ...], RoundForward | None]] = []
        with communication(f"step {step + 1}", "creation of the plan's groups (world group)",
                           range(dist.get_world_size()), self.runtime.settings.comm_timeout_s):
            rounds = self.runtime.begin_step(plan, measure=True)
        try:
            for _ in rounds:
                fcp_round = self.runtime.next_round()
                if fcp_round.algo == IDLE:
                    # Nothing spans all ranks before the step's gradient all-reduce, so an idle rank
                    # simply moves on: its groups of later rounds start when their members are ready.
                    ran.append((fcp_round, (), None))
                    continue
                sample_indices = self.sampler.round_sample_indices(step, fcp_round)
                what = f"round {fcp_round.round_index + 1} of the plan ({fcp_round.algo} attention, forward and backward)"
                with communication(f"step {step + 1}", what, fcp_round.group_ranks, self.runtime.settings.comm_timeout_s):
                    forward = self.forward_round(fcp_round, sample_indices)
                    round_loss = (forward.token_losses.reshape(-1) * forward.loss_mask).sum()
                    (round_loss / normaliser).backward()
                    synchronize(self.device)
                loss_sum += round_loss.detach().to("cpu", torch.float64)
                ran.append((fcp_round, sample_indices, forward))
        except BaseException:
            self.runtime.abort_step()
            raise
        rank_round_ms = self.runtime.end_step()
        assert rank_round_ms is not None, "a measured step returns its round times"

        fcp_rank = self.runtime.require_layout().fcp_rank
        groups_of_rank = plan.groups_of_rank(fcp_rank)
        records = []
        for fcp_round, sample_indices, forward in ran:
            if forward is None:
                records.append(RoundRecord(round_index=fcp_round.round_index, ranks=fcp_round.group_ranks, algo=IDLE,
                                           sample_indices=(), shard_tokens=0, predicted_ms=0.0,
                                           forward_backward_ms=float(rank_round_ms[fcp_rank, fcp_round.round_index])))
                continue
            mask = forward.loss_mask.detach().to("cpu", torch.float64)
            for sample_index in sample_indices:
                on_sample = forward.sample_ids == sample_index
                position = sample_index - batch.start
                accounting.tokens[position] += float(on_sample.sum())
                accounting.loss_tokens[position] += float(mask[on_sample].sum())
                accounting.vision_patches[position] += float(forward.vision_patches.get(sample_index, 0))
                if fcp_round.rank_in_group == 0:
                    accounting.groups[position] += 1.0
            records.append(
                RoundRecord(
                    round_index=fcp_round.round_index,
                    ranks=fcp_round.group_ranks,
                    algo=fcp_round.algo if fcp_round.degree > 1 else "local",
                    sample_indices=sample_indices,
                    shard_tokens=int(forward.sample_ids.numel()),
                    predicted_ms=groups_of_rank[fcp_round.round_index].predicted_ms,
                    forward_backward_ms=float(rank_round_ms[fcp_rank, fcp_round.round_index]),
                    vision_patches=sum(forward.vision_patches.values()),
                )
            )
        return StepOutput(loss_sum=loss_sum, accounting=accounting, rounds=records, rank_round_ms=rank_round_ms)

    def forward_round(self, fcp_round: FCPRound, sample_indices: tuple[int, ...]) -> RoundForward:
        """Loads the round's samples, builds this rank's shard and runs the model forward."""
        shard = build_shard_batch(
            self.sampler.load(sample_indices),
            rank_in_group=fcp_round.rank_in_group,
            degree=fcp_round.degree,
            group=self.runtime.attention_group(fcp_round),
            algo=fcp_round.algo,
            kernel=self.runtime.settings.attention_kernel,
        ).to(self.device)
        token_losses = self.model(
            shard.tokens,
            shard.position_ids,
            None,
            labels=shard.labels,
            packed_seq_params=shard.packed_seq_params,
        )
        return RoundForward(token_losses=token_losses, loss_mask=shard.loss_mask, sample_ids=shard.sample_ids)
