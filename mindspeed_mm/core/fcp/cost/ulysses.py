"""Time of a group running Ulysses (all-to-all over heads), for the degrees it supports.

Forward: an all-to-all turns sequence shards of q, k, v into head shards, attention runs over
whole documents with heads / d heads per rank, a second all-to-all brings the output back;
backward mirrors both. Nothing overlaps. KV heads are replicated up to one per rank when d
exceeds their count, so d must divide the query heads and either divide or be a multiple of the
KV heads (per TP rank). An all-to-all of a group spanning nodes sends its intra-node and
inter-node shares at once; the slower one sets its time. The attention on d ranks is the table's
Ulysses grid of that degree when profiled, else the full heads' attention divided by d.
"""
from __future__ import annotations

import numpy as np

from mindspeed_mm.core.fcp.cost.coefficients import StageCoefficients
from mindspeed_mm.core.fcp.cost.comm import CommCurve
from mindspeed_mm.core.fcp.cost.workload import WorkloadColumns


def ulysses_degrees(heads: int, kv_heads: int) -> list[int]:
    """Degrees Ulysses supports for these per-TP-rank head counts."""
    return [d for d in range(1, heads + 1)
            if heads % d == 0 and (kv_heads % d == 0 or d % kv_heads == 0)]


class UlyssesTimer:
    """Ulysses group times of one stage, computed on its few supported degrees only."""

    def __init__(self, coefficients: StageCoefficients, a2a: CommCurve) -> None:
        c = coefficients
        self._c = c
        self._a2a = a2a
        self.degrees = np.asarray(ulysses_degrees(c.heads, c.kv_heads), dtype=np.int64)
        """Supported degrees, ascending."""
        # _slot[d] = index of d in self.degrees, -1 if unsupported; the last slot stands for all larger d.
        self._slot = np.full(c.heads + 2, -1, dtype=np.int64)
        self._slot[self.degrees] = np.arange(len(self.degrees))
        d = self.degrees.astype(np.float64)
        self._inv = 1.0 / d
        rpn = c.ranks_per_node
        # Bytes each rank sends per token of the batch, for the q/k/v and the output all-to-alls:
        # its 1/d token share x the heads it ships x the share of peers inside / outside the node.
        per_token = np.concatenate([c.head_bytes * (c.heads + 2.0 * np.maximum(c.kv_heads, d)) / d,
                                    np.full(d.shape, c.head_bytes * c.heads) / d])
        d2 = np.concatenate([d, d])
        self._group_sizes = np.concatenate([self.degrees, self.degrees])
        self._intra_per_token = per_token * (np.minimum(d2, rpn) - 1.0) / d2
        self._inter_per_token = per_token * np.maximum(d2 - rpn, 0.0) / d2
        self._spans = d2 > rpn
        self._single = d2 == 1   # no all-to-all on one rank
        # Each forward pass and the backward pass run both all-to-alls once.
        passes = c.forward_passes + 1
        self._affine: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        if a2a.affine is not None:
            a_in, b_in, a_out, b_out = a2a.affine
            live = passes * (~self._single)
            # Far nodes: max(intra, inter) per message; inside a node the inter term never wins.
            inter_base = np.where(self._spans, live * a_out, -np.inf)
            self._affine = (live * a_in, live * b_in * self._intra_per_token,
                            inter_base, live * b_out * self._inter_per_token)
        self._passes = passes
        # Stage attention fit per supported degree: A(s) / d unless the degree has its own grid.
        fits = np.array([c.ulysses_fits.get(int(k), (c.alpha / k, c.beta / k, c.gamma)) for k in self.degrees])
        self._alpha, self._beta, self._gamma = fits[:, 0], fits[:, 1], fits[:, 2]

    def supported(self, degree: int) -> bool:
        """Whether Ulysses runs on `degree` ranks."""
        return 1 <= degree < len(self._slot) - 1 and self._slot[degree] >= 0

    def times(self, w: WorkloadColumns, d_int: np.ndarray) -> np.ndarray:
        """Forward + backward time (ms) [K, W] of workload k on d_int[k, w] ranks, inf where Ulysses
        does not run (memory not checked)."""
        slots = np.take(self._slot, d_int, mode="clip")
        unsupported = slots < 0
        rows = np.arange(d_int.shape[0])[:, None]
        out = self.supported_times(w)[rows, np.maximum(slots, 0)]
        out[unsupported] = np.inf
        return out

    def supported_times(self, w: WorkloadColumns) -> np.ndarray:
        """Forward + backward time (ms) [K, len(self.degrees)] of each workload at every supported
        degree (memory not checked)."""
        c = self._c
        tokens = w.total_tokens
        if self._affine is not None:
            a_in, b_in, a_out, b_out = self._affine
            msgs = np.maximum(a_in + b_in * tokens, a_out + b_out * tokens)
        else:
            intra = self._a2a.intra_for(self._intra_per_token * tokens, self._group_sizes)
            inter = self._a2a.inter(self._inter_per_token * tokens)
            msgs = self._passes * np.where(self._single, 0.0, np.where(self._spans, np.maximum(intra, inter), intra))
        half = len(self._inv)
        out = c.non_attention_ms(tokens, w.vision_patches, self._inv)
        out += c.attention_passes_scale * (self._alpha * w.sum_sq_tokens + self._beta * tokens
                                           + self._gamma * w.num_docs)
        out += msgs[:, :half]
        out += msgs[:, half:]
        out += c.launch_ms
        return out
