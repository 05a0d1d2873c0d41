"""Errors raised by the FCP planner, worded with the options a user can change.

The planner is reached from the `fcp` commands, `fcp train`'s YAML and the MindSpeed feature's
flags; a message names the setting in each, never an internal search constant.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.solver.communicators import GroupCatalogue

MAX_DEGREE_OPTION = ("the maximum group degree (fcp plan / simulate: --max-degree; fcp train YAML: fcp_max_degree; "
                     "MindSpeed-MM: --fcp-max-degree)")
"""Where users set SolverConfig.max_degree."""
RANKS_OPTION = "more FCP ranks (fcp plan / simulate: --ranks; a training run: more devices or a smaller TP x PP)"
"""How users give a step more ranks."""
MEMORY_OPTION = ("more memory per rank (a preset on a device with more memory, the state sharded over more ranks, "
                 "or a table measured by `fcp profile`; --max-tokens-per-rank / fcp_max_tokens_per_rank can only "
                 "lower the limit)")
"""How users give a rank room for more tokens."""
BATCH_OPTION = ("more samples per global batch (fcp plan: --batch-size; fcp simulate: --global-batch-size; "
                "a training run: global_batch_size)")
"""How users add samples to a global batch."""
BUDGET_OPTION = ("the communicator budget (fcp plan / simulate: --communicator-budget; fcp train YAML and MindSpeed-MM: "
                 "fcp_communicator_budget / --fcp-communicator-budget)")
"""Where users set SolverConfig.communicator_budget."""
MAX_ROUNDS_OPTION = ("SolverConfig.max_rounds (a Python API setting: the fcp commands, fcp train and the MindSpeed "
                     "feature set no round limit)")
"""The round limit, which only the Python API sets."""


class InfeasibleSampleError(ValueError):
    """A sample needs more ranks than any group may have, so no plan can hold it."""

    def __init__(self, index: int, length: int, capacity_tokens: int, max_degree: int,
                 num_ranks: int | None = None) -> None:
        self.index = index
        self.length = length
        self.capacity_tokens = capacity_tokens
        self.max_degree = max_degree
        needed = -(-length // capacity_tokens)
        if num_ranks is not None and max_degree < num_ranks:
            fix = (f"raise {MAX_DEGREE_OPTION} to at least {needed}" if needed <= num_ranks
                   else f"give the step {RANKS_OPTION}, at least {needed}")
        else:
            fix = f"give the step {RANKS_OPTION}, at least {needed}"
        super().__init__(
            f"sample {index} (length {length} tokens) needs at least {needed} ranks at "
            f"{capacity_tokens} tokens per rank, but the maximum group degree is {max_degree}: {fix}, "
            f"or give it {MEMORY_OPTION}"
        )


class CommunicatorBudgetError(InfeasibleSampleError):
    """A sample needs a group wider than any the communicator budget lets the run create."""

    def __init__(self, index: int, length: int, capacity_tokens: int, catalogue: "GroupCatalogue") -> None:
        needed = -(-length // capacity_tokens)
        ValueError.__init__(
            self,
            f"sample {index} (length {length} tokens) needs at least {needed} ranks at {capacity_tokens} tokens per "
            f"rank, but within {BUDGET_OPTION} of {catalogue.budget} communicators per rank the widest group is "
            f"{catalogue.top_degree} ranks ({catalogue.describe()}): raise the budget, or give the sample "
            f"{MEMORY_OPTION}",
        )
        self.index, self.length, self.capacity_tokens = index, length, capacity_tokens
        self.max_degree = catalogue.top_degree


class NoLayoutInBudgetError(ValueError):
    """No layout of a batch fits the groups the communicator budget allows (`communicators.GroupCatalogue`)."""

    def __init__(self, num_samples: int, needed: int, catalogue: "GroupCatalogue") -> None:
        widest = max(catalogue.static_degrees())
        super().__init__(
            f"no layout of the batch's {_samples(num_samples)} fits the groups {BUDGET_OPTION} of {catalogue.budget} "
            f"allows ({catalogue.describe()}): its longest sample needs {needed} ranks and the widest static layout of "
            f"those groups has groups of {widest}; raise the budget, or use a maximum degree that is a power of two "
            f"(or all FCP ranks): {MAX_DEGREE_OPTION}")


class NoAlgoForSampleError(InfeasibleSampleError):
    """A sample fits a group's memory, but no allowed attention algo runs on any degree it may get."""

    def __init__(self, index: int, length: int, capacity_tokens: int, max_degree: int, first_degree: int,
                 algos: tuple[str, ...]) -> None:
        ValueError.__init__(
            self,
            f"sample {index} (length {length} tokens) fits on {first_degree} or more ranks at {capacity_tokens} "
            f"tokens per rank, but no allowed attention algo ({', '.join(algos)}) runs on a degree from "
            f"{first_degree} to {max_degree} (Ulysses needs a degree that divides the attention heads): allow ring "
            f"attention (fcp train YAML: fcp_attention_algo; MindSpeed-MM: --fcp-attention-algo auto or ring) or "
            f"raise {MAX_DEGREE_OPTION}",
        )
        self.index, self.length, self.capacity_tokens, self.max_degree = index, length, capacity_tokens, max_degree


class InvalidPlanError(ValueError):
    """A plan breaks one of the invariants every executable plan must satisfy."""


def too_few_rounds_error(max_rounds: int, needed: int, tokens: int, num_ranks: int, capacity_tokens: int) -> ValueError:
    """The round limit is below the rounds the batch's tokens need for memory."""
    return ValueError(
        f"the {max_rounds} rounds allowed by {MAX_ROUNDS_OPTION} are too few: the batch's {tokens} tokens need at "
        f"least {needed} rounds of {num_ranks} ranks x {capacity_tokens} tokens; raise or unset max_rounds, or give "
        f"the step {RANKS_OPTION} or {MEMORY_OPTION}"
    )


def no_plan_error(num_samples: int, min_rounds: int, num_ranks: int, widest: int, capacity_tokens: int,
                  max_rounds: int | None) -> ValueError:
    """Why the planner found no plan for a batch whose every sample fits a group, with what to change.

    Every rank of a round runs in a group holding at least one sample (the executor runs every rank
    in every round), and a group has at most `widest` ranks: a round needs ceil(num_ranks / widest)
    samples, and the batch needs `min_rounds` rounds for memory."""
    per_round = -(-num_ranks // widest)
    if max_rounds is not None and max_rounds < num_samples:
        return ValueError(
            f"no plan fits the batch in the {max_rounds} rounds allowed by {MAX_ROUNDS_OPTION} on {num_ranks} ranks "
            f"at {capacity_tokens} tokens per rank: raise or unset max_rounds, or give the step {RANKS_OPTION} or "
            f"{MEMORY_OPTION}"
        )
    if num_samples < min_rounds * per_round:
        rounds = f"each of the {min_rounds} rounds its memory needs" if min_rounds > 1 else "one round"
        # Groups wide enough for the samples each round can have.
        wide_enough = -(-num_ranks // max(1, num_samples // min_rounds))
        return ValueError(
            f"the batch's {_samples(num_samples)} cannot occupy all {num_ranks} ranks in {rounds}: every rank runs "
            f"in a group holding at least one sample and a group has at most {widest} ranks, so a round needs at "
            f"least {per_round} samples; raise {MAX_DEGREE_OPTION} to at least {wide_enough}, "
            f"give the batch {BATCH_OPTION}, or plan it on fewer ranks"
        )
    return ValueError(
        f"the planner found no plan for the batch's {_samples(num_samples)} on {num_ranks} ranks at {capacity_tokens} "
        f"tokens per rank (groups of at most {widest} ranks): raise {MAX_DEGREE_OPTION}, give the batch "
        f"{BATCH_OPTION}, or give the step {MEMORY_OPTION}; if none of these should be needed, please report the "
        f"batch's lengths (a planner miss)"
    )


def _samples(count: int) -> str:
    return f"{count} sample" if count == 1 else f"{count} samples"
