"""Time of a group running ring attention, vectorised over degrees.

Per-document zigzag sharding (each document cut into 2d chunks, rank j holding chunks j and
2d-1-j) balances causal work, so each of the d steps of a pass computes an (s/d) x (s/d) block of
every document: c(d) = max(call, alpha sum(s^2)/d^2 + beta T/d + gamma n), one attention call per step,
which costs at least the table's `attention_call_ms`. While a block computes, the next
KV block travels (forward: K and V; backward: K and V plus the dK, dV accumulators, twice the
bytes), so a pass costs c + (d - 1) max(c', p2p(bytes)), c' being an off-diagonal step (c'
= c unless the table profiles that block). A group of more than ranks_per_node ranks spans nodes
and every step runs at the inter-node speed: the slowest hop paces a synchronous ring.

Where transfers only partly overlap compute (`comm_overlap` w < 1, e.g. on a CPU host, where
every message costs the host time of its own), a step costs max(c', p) + (1 - w) min(c', p) and
the messages are counted as the implementation sends them: a backward step sends two (K/V on,
the K/V gradients home), and after the last backward step the gradients make one more hop home.
On hosts that hide transfers (w = 1) the backward step's two messages count as one of twice the
bytes, and the last hop is left out: it is one message among d compute steps.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mindspeed_mm.core.fcp.cost.coefficients import StageCoefficients
from mindspeed_mm.core.fcp.cost.comm_costs import CommCurve
from mindspeed_mm.core.fcp.cost.workload import WorkloadColumns


@dataclass(frozen=True)
class RingDegreeTerms:
    """Workload-independent arrays of a degree array (any shape)."""

    inv: np.ndarray
    """1 / d."""
    hops: np.ndarray
    """d - 1: steps whose transfer overlaps compute."""
    spans: np.ndarray
    """d > ranks_per_node."""
    p2p_base: np.ndarray | None
    """Scaled p2p intercept per degree (affine p2p curves only)."""
    p2p_slope_inv: np.ndarray | None
    """Scaled p2p slope per degree over d, to multiply by the K, V bytes of all tokens (affine only)."""
    degrees: np.ndarray
    """The degrees of the groups (ints): the ranks that send at once (p2p curves by group size)."""


@dataclass(frozen=True)
class RingBlocks:
    """What a ring step computes and sends on one rank: the stage fits of its diagonal and off-diagonal blocks
    and the K/V bytes per token. Scalars, or [K, 1] columns to price several head shares in one pass (hybrid
    attention's splits)."""

    diagonal: tuple[float | np.ndarray, float | np.ndarray, float | np.ndarray]
    """(alpha, beta, gamma) of the diagonal block."""
    off_diagonal: tuple[float | np.ndarray, float | np.ndarray, float | np.ndarray] | None
    """(alpha', beta', gamma') of an off-diagonal block; None: the diagonal's."""
    kv_bytes_per_token: float | np.ndarray
    """K and V bytes of one token of the rank's heads."""

    @classmethod
    def of_stage(cls, c: StageCoefficients) -> "RingBlocks":
        """The blocks of a rank holding all the stage's heads."""
        diagonal = (c.alpha, c.beta, c.gamma)
        return cls(diagonal, None if c.off_diagonal == diagonal else c.off_diagonal, c.kv_bytes_per_token)


class RingTimer:
    """Ring-attention group times of one stage."""

    def __init__(self, coefficients: StageCoefficients, p2p: CommCurve) -> None:
        self._c = coefficients
        self._p2p = p2p
        self.blocks = RingBlocks.of_stage(coefficients)
        """The blocks of a rank holding all heads."""

    def terms(self, d_int: np.ndarray, ring_degrees: np.ndarray | None = None) -> RingDegreeTerms:
        """The workload-independent arrays of a degree array; `ring_degrees` (same shape): rings of that many
        ranks inside groups of `d_int` ranks (hybrid attention: spanning nodes and sending at once as the whole
        group does), default the groups themselves."""
        r = (d_int if ring_degrees is None else ring_degrees).astype(np.float64)
        inv = 1.0 / r
        spans = d_int > self._c.ranks_per_node
        base = slope = None
        if self._p2p.affine is not None:
            a_in, b_in, a_out, b_out = self._p2p.affine
            base = np.where(spans, a_out, a_in)
            slope = np.where(spans, b_out, b_in) * inv
        return RingDegreeTerms(inv, r - 1.0, spans, base, slope, d_int)

    def times(self, w: WorkloadColumns, t: RingDegreeTerms) -> np.ndarray:
        """Forward + backward time (ms) [K, W] of workload k at degree [k, w] of `t` (memory not
        checked)."""
        c = self._c
        first, hops = self.attention_parts(w, t)
        # The first step of each pass, the linear work, the launch cost and the later steps.
        first += c.non_attention_ms(w.total_tokens, w.vision_patches, t.inv)
        first += c.launch_ms
        first += hops
        return first

    def attention_parts(self, w: WorkloadColumns, t: RingDegreeTerms,
                        blocks: RingBlocks | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(first step of every pass, the later steps with their transfers) in ms [K, W]: the attention of `times`
        (`blocks`: a rank's share of the heads, default all of them)."""
        c = self._c
        b = self.blocks if blocks is None else blocks
        alpha, beta, gamma = b.diagonal
        # One step's block compute (forward + backward): max(call, alpha sum(s^2)/d^2 + beta T/d + gamma n).
        step = t.inv * (alpha * w.sum_sq_tokens)
        step += beta * w.total_tokens
        step *= t.inv
        step += gamma * w.num_docs
        np.maximum(step, c.attention_call_ms, out=step)
        kv = b.kv_bytes_per_token * w.total_tokens
        if t.p2p_base is not None and t.p2p_slope_inv is not None:
            p_fwd = t.p2p_slope_inv * kv
            p_bwd = p_fwd * 2.0
            p_fwd += t.p2p_base
            p_bwd += t.p2p_base
        else:
            msg = kv * t.inv
            p_fwd, p_bwd = self._p2p(msg, t.spans, t.degrees), self._p2p(2.0 * msg, t.spans, t.degrees)
        last_hop = None
        if c.comm_overlap < 1.0:
            # Every message counts: two per backward step, and the gradients' last hop home.
            p_bwd = 2.0 * p_fwd
            last_hop = np.where(t.hops > 0, p_fwd, 0.0)
        # Steps 2..d of each pass: compute and transfer overlap.
        block = step if b.off_diagonal is None else self._block(w, t, b.off_diagonal)
        p_fwd = self._hop(block * c.attention_forward_fraction, p_fwd)
        p_fwd *= c.forward_passes
        p_fwd += self._hop(block * (1.0 - c.attention_forward_fraction), p_bwd)
        p_fwd *= t.hops
        if last_hop is not None:
            p_fwd += last_hop
        step *= c.attention_passes_scale
        return step, p_fwd

    def _block(self, w: WorkloadColumns, t: RingDegreeTerms, fit: tuple) -> np.ndarray:
        """Compute (forward + backward) of one off-diagonal step: max(call, alpha' sum(s^2)/d^2 + beta' T/d + gamma' n)."""
        alpha, beta, gamma = fit
        block = t.inv * (alpha * w.sum_sq_tokens)
        block += beta * w.total_tokens
        block *= t.inv
        block += gamma * w.num_docs
        np.maximum(block, self._c.attention_call_ms, out=block)
        return block

    def _hop(self, compute: np.ndarray, transfer: np.ndarray) -> np.ndarray:
        """One step after the first: transfer hidden behind compute up to the overlap share (in `transfer`)."""
        overlap = self._c.comm_overlap
        if overlap >= 1.0:
            return np.maximum(compute, transfer, out=transfer)
        hidden = np.minimum(compute, transfer)
        np.maximum(compute, transfer, out=transfer)
        transfer += (1.0 - overlap) * hidden
        return transfer
