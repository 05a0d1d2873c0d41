"""Embedded synthetic dataset: realistic sample lengths, cheap deterministic token contents.

Lengths come from a workload generator (`simulate.workloads`, e.g. OpenVid-like video samples)
scaled down for CPU runs. The lengths are metadata known before any tensor is built; a sample's
tokens are generated only when it is loaded, from a generator seeded by (seed, sample index), so
every rank that loads the same sample gets the same tensors and a rank loads only what it needs.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from mindspeed_mm.core.fcp.sandbox.run_config import DataConfig, RunConfig
from mindspeed_mm.core.fcp.simulate.workloads import generate, scale_lengths

logger = logging.getLogger(__name__)

# Tokens follow a fixed affine recurrence most of the time so that the loss can go down.
_RECURRENCE_MULTIPLIER = 7
_RECURRENCE_INCREMENT = 3
RECURRENCE_PROBABILITY = 0.75
"""Share of the tokens that follow the recurrence (`affine_recurrence`)."""
_SEED_STRIDE = 1_000_003
LENGTH_BLOCK = 1024
"""Lengths are drawn in blocks of this many samples, each from its own seed, so that sample i's length
depends only on (seed, i) and not on how many samples the run needs."""


def block_seed(seed: int, block: int) -> int:
    """Generator seed of block `block` of the lengths of a dataset seeded with `seed`."""
    return int(np.random.SeedSequence([seed, block]).generate_state(1)[0])


@dataclass(frozen=True)
class Sample:
    """One training sequence: next-token inputs and labels of equal length."""

    index: int
    """Position of the sample in the dataset."""
    tokens: torch.Tensor
    """`[length]` int64 input token ids."""
    labels: torch.Tensor
    """`[length]` int64 target ids (the next token of each input)."""
    loss_mask: torch.Tensor
    """`[length]` float32, 1 where the label counts in the loss, 0 on the prompt-like prefix."""

    @property
    def length(self) -> int:
        """Tokens in the sample."""
        return int(self.tokens.numel())


def affine_recurrence(noise: list[int], follow: list[bool], modulus: int, offset: int = 0) -> list[int]:
    """Token ids that follow `offset + (7 x previous + 3) % modulus` where `follow` says, else the `noise` id (the
    first id is noise): contents a model can learn, so that the loss goes down."""
    ids = [noise[0]]
    for i in range(1, len(noise)):
        predicted = offset + (_RECURRENCE_MULTIPLIER * ids[-1] + _RECURRENCE_INCREMENT) % modulus
        ids.append(predicted if follow[i] else noise[i])
    return ids


class PlannedLengths:
    """What the planner and the loss normaliser read of a dataset before any sample is loaded."""

    _lengths: np.ndarray
    _loss_tokens: np.ndarray

    def __len__(self) -> int:
        return int(self._lengths.shape[0])

    @property
    def lengths(self) -> np.ndarray:
        """Read-only int64 LLM tokens of every sample."""
        return self._lengths

    @property
    def loss_tokens(self) -> np.ndarray:
        """Read-only int64 tokens of every sample that count in the loss (always >= 1)."""
        return self._loss_tokens


class SyntheticDataset(PlannedLengths):
    """`num_samples` samples whose lengths follow the configured workload generator."""

    def __init__(self, config: DataConfig, *, num_samples: int, seq_length: int, vocab_size: int, token_seed: int):
        if num_samples <= 0:
            raise ValueError(f"num_samples must be positive, got {num_samples}")
        blocks = -(-num_samples // LENGTH_BLOCK)
        raw = np.concatenate(
            [generate(config.dataset, LENGTH_BLOCK, block_seed(config.seed, b)) for b in range(blocks)]
        )[:num_samples]
        scaled = scale_lengths(raw, config.length_scale, config.min_length)
        truncated = int(np.count_nonzero(scaled > seq_length))
        if truncated:
            logger.info(
                "dataset %s: %d of %d samples truncated to seq_length=%d tokens",
                config.dataset,
                truncated,
                num_samples,
                seq_length,
            )
        self._lengths = np.minimum(scaled, seq_length).astype(np.int64)
        # The loss-free prefix is metadata too, so the loss normaliser of a global batch is known
        # without loading its samples.
        fractions = np.random.default_rng(config.seed).random(num_samples) * config.loss_free_prefix
        self._prefix_lengths = np.floor(fractions * self._lengths).astype(np.int64)
        self._loss_tokens = self._lengths - self._prefix_lengths
        for array in (self._lengths, self._prefix_lengths, self._loss_tokens):
            array.setflags(write=False)
        self._vocab_size = vocab_size
        self._token_seed = token_seed

    @property
    def vision_patches(self) -> None:
        """Text-only samples have no vision-encoder patches."""
        return None

    def __getitem__(self, index: int) -> Sample:
        if not 0 <= index < len(self):
            raise IndexError(f"sample index {index} is outside 0..{len(self) - 1}")
        length = int(self._lengths[index])
        generator = torch.Generator().manual_seed(self._token_seed * _SEED_STRIDE + index)
        noise = torch.randint(self._vocab_size, (length + 1,), generator=generator).tolist()
        follow = (torch.rand(length + 1, generator=generator) < RECURRENCE_PROBABILITY).tolist()
        sequence = torch.tensor(affine_recurrence(noise, follow, self._vocab_size), dtype=torch.int64)
        loss_mask = torch.ones(length, dtype=torch.float32)
        loss_mask[: int(self._prefix_lengths[index])] = 0.0
        return Sample(index=index, tokens=sequence[:-1].clone(), labels=sequence[1:].clone(), loss_mask=loss_mask)


def build_dataset(config: RunConfig) -> SyntheticDataset:
    """The run's synthetic dataset: exactly the samples of all its steps."""
    return SyntheticDataset(
        config.data,
        num_samples=config.training.train_iters * config.training.global_batch_size,
        seq_length=config.model.seq_length,
        vocab_size=config.model.vocab_size,
        token_seed=config.training.seed,
    )
