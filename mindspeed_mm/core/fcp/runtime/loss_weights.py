"""The loss weights of a round's packed samples: each token weighed as on one device, over the whole global batch."""
from __future__ import annotations

import torch


def shifted_sample_labels(labels: torch.Tensor, cu_seqlens: tuple[int, ...], ignore_index: int) -> torch.Tensor:
    """`[tokens]` next-token labels of a packed sequence, shifted inside each document (a document's last token
    predicts nothing, as in an unpacked batch)."""
    flat = labels.reshape(-1)
    shifted = torch.full_like(flat, ignore_index)
    for start, end in zip(cu_seqlens, cu_seqlens[1:]):
        shifted[start:end - 1] = flat[start + 1:end]
    return shifted


def token_weights(shifted: torch.Tensor, cu_seqlens: tuple[int, ...], ignore_index: int,
                  samples_per_step: int) -> torch.Tensor:
    """`[tokens]` float64 weights of MindSpeed-MM's loss_type `default` on one device with one sample per
    micro-batch: each sample's mean token loss, averaged over the global batch's samples. A document without loss
    tokens (the padding document of a short group, `solver.short_shards`, included) weighs nothing."""
    weights = torch.zeros(shifted.shape, dtype=torch.float64)
    for start, end in zip(cu_seqlens, cu_seqlens[1:]):
        valid = shifted[start:end] != ignore_index
        count = int(valid.sum())
        if count:
            weights[start:end][valid.cpu()] = 1.0 / (count * samples_per_step)
    return weights


__all__ = ["shifted_sample_labels", "token_weights"]
