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

from dataclasses import dataclass

import numpy as np

from mindspeed_mm.core.fcp.cost.coefficients import StageCoefficients
from mindspeed_mm.core.fcp.cost.comm_costs import CommCurve
from mindspeed_mm.core.fcp.cost.workload import WorkloadColumns


def ulysses_degrees(heads: int, kv_heads: int) -> list[int]:
    """Degrees Ulysses supports for these per-TP-rank head counts."""
    return [d for d in range(1, heads + 1)
            if heads % d == 0 and (kv_heads % d == 0 or d % kv_heads == 0)]


@dataclass(frozen=True)
class _DegreeColumns:
    """The workload-independent arrays of some supported degrees (n of them): the first n message
    entries are the q/k/v all-to-all, the last n the output one."""

    inv: np.ndarray
    group_sizes: np.ndarray
    intra_per_token: np.ndarray
    inter_per_token: np.ndarray
    spans: np.ndarray
    single: np.ndarray
    affine: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None
    alpha: np.ndarray
    beta: np.ndarray
    gamma: np.ndarray

    def subset(self, slots: np.ndarray) -> "_DegreeColumns":
        """The columns of the degrees at `slots` (indices into these degrees)."""
        both = np.concatenate([slots, slots + self.inv.size])
        return _DegreeColumns(
            self.inv[slots], self.group_sizes[both], self.intra_per_token[both], self.inter_per_token[both],
            self.spans[both], self.single[both], None if self.affine is None else tuple(a[both] for a in self.affine),
            self.alpha[slots], self.beta[slots], self.gamma[slots])


class UlyssesTimer:
    """Ulysses group times of one stage, computed on its few supported degrees only (those a query
    asks for)."""

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
        rpn = c.ranks_per_node
        # Bytes each rank sends per token of the batch, for the q/k/v and the output all-to-alls:
        # its 1/d token share x the heads it ships x the share of peers inside / outside the node.
        per_token = np.concatenate([c.head_bytes * (c.heads + 2.0 * np.maximum(c.kv_heads, d)) / d,
                                    np.full(d.shape, c.head_bytes * c.heads) / d])
        d2 = np.concatenate([d, d])
        intra_per_token = per_token * (np.minimum(d2, rpn) - 1.0) / d2
        inter_per_token = per_token * np.maximum(d2 - rpn, 0.0) / d2
        spans = d2 > rpn
        single = d2 == 1   # no all-to-all on one rank
        # Each forward pass and the backward pass run both all-to-alls once.
        self._passes = c.forward_passes + 1
        affine = None
        if a2a.affine is not None:
            a_in, b_in, a_out, b_out = a2a.affine
            live = self._passes * (~single)
            # Far nodes: max(intra, inter) per message; inside a node the inter term never wins.
            inter_base = np.where(spans, live * a_out, -np.inf)
            affine = (live * a_in, live * b_in * intra_per_token, inter_base, live * b_out * inter_per_token)
        # Stage attention fit per supported degree: A(s) / d unless the degree has its own grid.
        fits = np.array([c.ulysses_fits.get(int(k), (c.alpha / k, c.beta / k, c.gamma)) for k in self.degrees])
        self._all = _DegreeColumns(1.0 / d, np.concatenate([self.degrees, self.degrees]), intra_per_token,
                                   inter_per_token, spans, single, affine, fits[:, 0], fits[:, 1], fits[:, 2])
        self._subsets: dict[bytes, _DegreeColumns] = {}

    def supported(self, degree: int) -> bool:
        """Whether Ulysses runs on `degree` ranks."""
        return 1 <= degree < len(self._slot) - 1 and self._slot[degree] >= 0

    def times(self, w: WorkloadColumns, d_int: np.ndarray) -> np.ndarray:
        """Forward + backward time (ms) [K, W] of workload k on d_int[k, w] ranks, inf where Ulysses
        does not run (memory not checked)."""
        slots = np.take(self._slot, d_int, mode="clip")
        unsupported = slots < 0
        slots[unsupported] = 0
        # Only the supported degrees asked for are computed (each column on its own: same values).
        asked = np.zeros(len(self.degrees), dtype=bool)
        asked[slots.ravel()] = True
        if asked.all():
            table = self._times(w, self._all)
        else:
            used = np.flatnonzero(asked)
            key = used.tobytes()
            columns = self._subsets.get(key)
            if columns is None:
                columns = self._subsets[key] = self._all.subset(used)
            table = self._times(w, columns)
            slots = (np.cumsum(asked) - 1)[slots]
        out = table[np.arange(d_int.shape[0])[:, None], slots]
        out[unsupported] = np.inf
        return out

    def _times(self, w: WorkloadColumns, cols: _DegreeColumns) -> np.ndarray:
        """Forward + backward time (ms) [K, n] of each workload at the n degrees of `cols`."""
        c = self._c
        tokens = w.total_tokens
        half = len(cols.inv)
        out = c.non_attention_ms(tokens, w.vision_patches, cols.inv)
        out += c.attention_passes_scale * np.maximum(cols.alpha * w.sum_sq_tokens + cols.beta * tokens
                                                     + cols.gamma * w.num_docs, c.attention_call_ms)
        # The two all-to-alls one after the other: [K, n] arrays broadcast faster than one [K, 2n].
        for part in (slice(None, half), slice(half, None)):
            if cols.affine is not None:
                a_in, b_in, a_out, b_out = (a[part] for a in cols.affine)
                out += np.maximum(a_in + b_in * tokens, a_out + b_out * tokens)
            else:
                intra = self._a2a.intra_for(cols.intra_per_token[part] * tokens, cols.group_sizes[part])
                inter = self._a2a.inter(cols.inter_per_token[part] * tokens)
                out += self._passes * np.where(cols.single[part], 0.0,
                                               np.where(cols.spans[part], np.maximum(intra, inter), intra))
        out += c.launch_ms
        return out
