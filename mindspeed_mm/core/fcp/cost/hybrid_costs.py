"""Time of a group running hybrid attention: Ulysses over blocks of u consecutive ranks inside a node, ring
attention over the r = d / u blocks; each (u, r) priced, the fastest kept.

A rank of a group of d = u x r ranks holding T / d of the batch's T tokens, per round:
- the block's all-to-alls, as Ulysses' on u ranks (`ulysses_costs`): q/k/v in (with max(kv_heads, u) K/V
  heads, repeated as Ulysses repeats them) and the output back, each forward pass and the backward pass;
  the rank keeps 1 / u of its T / d tokens' heads and sends the rest to the block's other members, inside
  its node (the all-to-all curve of a group of u);
- ring attention over the r blocks (`ring_costs`) with heads / u query heads and max(kv_heads, u) / u K/V
  heads per rank: r steps per pass of (s / r) x (s / r) blocks of every document costing the Ulysses degree-u
  attention of a rank (the table's grid for degree u, else the full heads' fit over u, as Ulysses prices
  it), off-diagonal blocks as the ring prices them with the same head share (no device measures an
  off-diagonal block of a head share: a table whose off-diagonal grid is its causal one keeps them equal,
  a profiled off-diagonal grid is divided by u); each step's K/V of T / r
  tokens travels to the next block, across nodes when the group spans nodes (the slowest hop paces the
  ring), the group's d ranks sending at once;
- the non-attention work on T / d tokens and the launch cost, as every algo.
At u = 1 this is the ring on d ranks and at r = 1 Ulysses on d ranks inside a node, term for term.

Which u a group may use: u divides d and Ulysses splits the heads over u (`ulysses_degrees`); every block
sits inside one node: the group is inside one node, or u divides the node size and the group's ranks on each
node it touches (its node part: the group is then cut at block boundaries). Beside the ring, u = 1 is the
ring's. Beside Ulysses, the degrees Ulysses runs inside one node are Ulysses' (u = d among them): hybrid is for
the degrees Ulysses cannot serve there (the degree does not split the heads, exceeds them, or spans nodes).
Where Ulysses runs inside a node, the best split was at most 0.12% faster than the better of ring and Ulysses
on 1,000 packs of the shipped mixes on each 8B / 4B / 2B preset (`benchmarks/hybrid_attention.py`), which does
not repay pricing it there.

Which proper split (1 < u < d) a group may use is fixed per degree (`HybridSplitRule`): the largest power of two
that divides d, is below d and fits the block limit (the largest power-of-two Ulysses degree of the heads inside a
node); u = 1 (the ring) and u = d (Ulysses) need no communicator beyond the group's and stay open. Every u of a degree
is one more ring communicator per member (`solver.communicators`), so one u per degree keeps the rings a rank joins
to one per hybrid degree; the planner's hybrid groups used that u on every shipped mix
(`benchmarks/results/hybrid_attention.md`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mindspeed_mm.core.fcp.cost.coefficients import StageCoefficients
from mindspeed_mm.core.fcp.cost.comm_costs import CommCurve
from mindspeed_mm.core.fcp.cost.ring_costs import RingBlocks, RingTimer
from mindspeed_mm.core.fcp.cost.ulysses_costs import ulysses_degrees
from mindspeed_mm.core.fcp.cost.workload import WorkloadColumns


def rank_blocks(c: StageCoefficients, ulysses_degree: int) -> RingBlocks:
    """A ring step's blocks on one rank of a block of `ulysses_degree` ranks: its share of the heads, attended
    with the Ulysses fit of that share (the table's grid of that degree, else the full heads' fit over u), and
    its share of the (repeated) K/V heads."""
    u = ulysses_degree
    fit = c.ulysses_fits.get(u, (c.alpha / u, c.beta / u, c.gamma))
    stage = RingBlocks.of_stage(c)
    off = None if stage.off_diagonal is None else (c.off_diagonal[0] / u, c.off_diagonal[1] / u, c.off_diagonal[2])
    return RingBlocks(fit, off, 2 * (max(c.kv_heads, u) // u) * c.head_bytes)


@dataclass(frozen=True)
class HybridSplitRule:
    """The one Ulysses x ring split each degree may use."""

    block: int
    """The largest block u: the largest power of two among the Ulysses degrees of the heads that fit in a node
    (0 or 1: no hybrid group)."""
    degrees: frozenset[int] | None = None
    """The degrees hybrid groups may have (a run's communicator catalogue); None: every degree with a split."""

    def ulysses_of(self, degree: int) -> int:
        """u of a hybrid group of `degree` ranks: the largest power of two dividing it, below it and at most
        `block`; 0 where there is none or the degree is not allowed."""
        if self.degrees is not None and degree not in self.degrees:
            return 0
        u = 1
        while u * 2 <= self.block and degree % (u * 2) == 0 and u * 2 < degree:
            u *= 2
        return u if u >= 2 else 0


def largest_power_of_two(values: "tuple[int, ...] | list[int]") -> int:
    """The largest power of two among `values` (0 when none is above 1)."""
    return max((v for v in values if v > 1 and v & (v - 1) == 0), default=0)


_ONE_PASS_ENTRIES = 4096
"""Up to this many priced entries, all splits go through the arithmetic in one pass (fewer numpy calls); above,
one pass per split (less copying): about where the two cost the same on a 2-core host (1,000 to 60,000 entries)."""


class HybridTimer:
    """Hybrid group times of one stage: every split priced on the entries where it runs, the fastest kept."""

    def __init__(self, coefficients: StageCoefficients, p2p: CommCurve, a2a: CommCurve, node_ranks: int,
                 allowed: frozenset[int] | None = None) -> None:
        """`coefficients.ranks_per_node`: where a group is taken to span nodes (the node part of a placed group);
        `node_ranks`: the ranks of a node, which block boundaries must respect; `allowed`: the degrees hybrid
        groups may have (None: every degree with a split); each degree's u is the rule's (`HybridSplitRule`)."""
        c = coefficients
        self._c = c
        self._a2a = a2a
        self._ring = RingTimer(c, p2p)
        self.node_ranks = int(node_ranks)
        self.ulysses_degrees: tuple[int, ...] = tuple(
            u for u in ulysses_degrees(c.heads, c.kv_heads) if u <= self.node_ranks)
        """The block sizes a group may use: Ulysses degrees of the heads that fit in a node."""
        self.rule = HybridSplitRule(largest_power_of_two(self.ulysses_degrees), allowed)
        """The split each degree uses."""
        self._u = np.asarray(self.ulysses_degrees, dtype=np.int64)
        u = self._u.astype(np.float64)
        blocks = [rank_blocks(c, k) for k in self.ulysses_degrees]
        self._split_offdiagonal = blocks[0].off_diagonal is not None
        # Bytes a rank sends per token it holds to the other u - 1 members: q/k/v in, the output back.
        a2a_bytes = np.stack([c.head_bytes * (c.heads + 2.0 * np.maximum(c.kv_heads, u)) * (u - 1) / u,
                              c.head_bytes * c.heads * (u - 1) / u], axis=1)
        # Each forward pass and the backward pass run both all-to-alls once; none on one rank.
        passes = (c.forward_passes + 1) * (self._u > 1)
        # Per u, one column: the blocks' constants (rows 0-6); the all-to-alls (7-8): on affine curves their time in
        # ms as intercept + slope x the tokens a rank holds, else the bytes per token of each; their passes (9); u.
        rows = [(*b.diagonal, *(b.off_diagonal or b.diagonal), b.kv_bytes_per_token) for b in blocks]
        if a2a.affine is not None:
            exchange = np.stack([passes * 2.0 * a2a.affine[0], passes * a2a.affine[1] * a2a_bytes.sum(axis=1)], axis=1)
        else:
            exchange = a2a_bytes
        self._constants = np.ascontiguousarray(np.concatenate(
            [np.asarray(rows, dtype=np.float64), exchange, passes[:, None], u[:, None]], axis=1).T)
        self._aligned = (self.node_ranks % self._u == 0) & (c.ranks_per_node % self._u == 0)
        self._runs_tables: dict[tuple[bool, bool], tuple[np.ndarray, np.ndarray]] = {}
        self._rule: np.ndarray | None = None

    def times(self, w: WorkloadColumns, d_int: np.ndarray, *, beside_ring: bool = False,
              beside_ulysses: bool = False, only: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(times, u) [K, W]: the fastest split of workload k on d_int[k, w] ranks and its u (inf and 0 where no
        split runs; memory not checked). `beside_ring` / `beside_ulysses`: the model offers that algo too, which
        keeps its own splits (module docstring); `only`: price that u alone."""
        if only is None:
            slots, table = self._runs_table(beside_ring, beside_ulysses, int(d_int.max(initial=1)))
            entries = [np.flatnonzero(table[k][d_int]) for k in range(slots.size)]
        else:
            slots = np.flatnonzero(self._u == only)
            ruled = (self._rule_table(int(d_int.max(initial=1)))[d_int] == only) | (only == 1) | (d_int == only)
            entries = [np.flatnonzero(ruled & (d_int % only == 0)
                                      & ((d_int <= self._c.ranks_per_node) | self._aligned[slot]))
                       for slot in slots]
        out = self._c.non_attention_ms(w.total_tokens, w.vision_patches, 1.0 / d_int)
        out += self._c.launch_ms
        best = np.full(d_int.size, np.inf)
        split = np.zeros(d_int.size, dtype=np.int64)
        # The (split, workload, degree) entries that run, priced in passes of many entries: one pass for all the
        # splits when they are few (each pass costs its numpy calls), else one per split (the constants stay
        # scalars broadcast, not copied per entry).
        counts = [e.size for e in entries]
        passes = [range(slots.size)] if sum(counts) <= _ONE_PASS_ENTRIES else [[k] for k in range(slots.size)]
        for ks in passes:
            if not sum(counts[k] for k in ks):
                continue
            at = np.concatenate([entries[k] for k in ks])
            if len(ks) == 1:
                constants = np.broadcast_to(self._constants[:, slots[ks[0]], None], (self._constants.shape[0], at.size))
            else:
                constants = np.repeat(self._constants[:, slots], counts, axis=1)   # [columns, E]
            priced = self._attention_ms(WorkloadColumns(w.values[at // d_int.shape[1]]), d_int.ravel()[at][:, None],
                                        constants)[:, 0]
            start = 0
            for k in ks:
                where, times = at[start:start + counts[k]], priced[start:start + counts[k]]
                better = times < best[where]
                best[where[better]] = times[better]
                split[where[better]] = self._u[slots[k]]
                start += counts[k]
        out += best.reshape(d_int.shape)
        return out, split.reshape(d_int.shape)

    def priced(self, degree: int, *, beside_ring: bool = False, beside_ulysses: bool = False) -> bool:
        """Whether some split of `degree` ranks is priced (`times` is finite, memory aside)."""
        return bool(self._runs_table(beside_ring, beside_ulysses, degree)[1][:, degree].any())

    def _runs_table(self, beside_ring: bool, beside_ulysses: bool, top: int) -> tuple[np.ndarray, np.ndarray]:
        """(slots, [slots, degrees]): the candidate u that are priced on some degree, and on which degrees d (u
        divides d, its blocks sit inside nodes: the group is inside one node, or blocks align with the node
        boundaries; minus the splits of the algos beside it), for d up to at least `top`."""
        key = (beside_ring, beside_ulysses)
        known = self._runs_tables.get(key)
        if known is None or top >= known[1].shape[1]:
            d = np.arange(max(top + 1, 2 * (0 if known is None else known[1].shape[1]), 65))[None, :]
            u = self._u[:, None]
            inside = d <= self._c.ranks_per_node
            table = (d % u == 0) & (d >= 1) & (inside | self._aligned[:, None]) & ((u == self._rule_table(d.size)[d]) | (u == 1) | (u == d))
            if beside_ring:
                table &= u != 1
            if beside_ulysses:
                table &= ~(inside & np.isin(d, ulysses_degrees(self._c.heads, self._c.kv_heads)))
            slots = np.flatnonzero(table.any(axis=1))
            known = self._runs_tables[key] = (slots, table[slots])
        return known

    def _rule_table(self, top: int) -> np.ndarray:
        """rule[d]: the u of degree d (`HybridSplitRule.ulysses_of`), for d up to at least `top`."""
        known = self._rule
        if known is None or top >= known.size:
            size = max(top + 1, 65, 2 * (0 if known is None else known.size))
            known = self._rule = np.array([self.rule.ulysses_of(d) for d in range(size)], dtype=np.int64)
        return known

    def _attention_ms(self, w: WorkloadColumns, d_int: np.ndarray, constants: np.ndarray) -> np.ndarray:
        """[E, 1] attention of workload e on d_int[e] ranks in the split whose constants are column e."""
        def row(index: int) -> np.ndarray:   # [E, 1]
            return constants[index][:, None]

        u = row(10)
        blocks = RingBlocks((row(0), row(1), row(2)), (row(3), row(4), row(5)) if self._split_offdiagonal else None,
                            row(6))
        first, hops = self._ring.attention_parts(w, self._ring.terms(d_int, d_int // u.astype(np.int64)), blocks)
        first += hops
        tokens = w.total_tokens / d_int
        if self._a2a.affine is not None:
            tokens *= row(8)
            first += tokens
            first += row(7)
        else:
            sizes = np.broadcast_to(u.astype(np.int64), d_int.shape)
            first += row(9) * (self._a2a.intra_for(row(7) * tokens, sizes) + self._a2a.intra_for(row(8) * tokens, sizes))
        return first
