"""FCP's loss weighting for MindSpeed-MM: a packed round reproduces upstream's per-sample loss of one device."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from mindspeed_mm.core.fcp.runtime.packed_lengths import cumulative_lengths
from mindspeed_mm.core.fcp.runtime.loss_weights import shifted_sample_labels, token_weights

IGNORE = -100


def upstream_sample_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """loss_type `default` on one unpacked sample: labels shifted by one, summed over the loss tokens, divided by
    their number."""
    shifted = F.pad(labels, (0, 1), value=IGNORE)[1:]
    token_loss = F.cross_entropy(logits, shifted, ignore_index=IGNORE, reduction="sum")
    return token_loss / (shifted > -1).sum()


def test_weighted_packed_loss_equals_the_mean_of_the_samples_losses() -> None:
    torch.manual_seed(0)
    lengths = [5, 9, 4]
    samples_per_step = 6  # the global batch holds other samples too; each weighs 1 / 6
    labels = [torch.randint(0, 11, (n,)) for n in lengths]
    labels[0][:2] = IGNORE
    labels[2][:] = IGNORE  # a sample without loss tokens weighs nothing
    logits = [torch.randn(n, 11, dtype=torch.float64) for n in lengths]
    cu_seqlens = tuple(cumulative_lengths(lengths).tolist())
    packed_labels = torch.cat(labels)
    shifted = shifted_sample_labels(packed_labels, cu_seqlens, IGNORE)
    assert shifted[cu_seqlens[1] - 1] == IGNORE  # a sample's last token predicts nothing, not the next sample
    weights = token_weights(shifted, cu_seqlens, IGNORE, samples_per_step)
    token_loss = F.cross_entropy(torch.cat(logits), shifted, ignore_index=IGNORE, reduction="none")
    packed = (token_loss * weights).sum()
    expected = sum(upstream_sample_loss(x, y) for x, y in zip(logits[:2], labels[:2])) / samples_per_step
    assert torch.allclose(packed, expected, rtol=1e-12)
    assert weights[cu_seqlens[2]:].abs().sum() == 0
