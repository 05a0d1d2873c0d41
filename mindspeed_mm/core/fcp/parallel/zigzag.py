"""Per-document zigzag sharding of a packed varlen batch over the ranks of one CP group.

Every document is cut into ``2 * degree`` contiguous chunks whose sizes differ by at most one token
(the first ``length % (2 * degree)`` chunks are one token longer). Rank ``j`` keeps chunks ``j``
("front") and ``2 * degree - 1 - j`` ("back") of every document; its shard is, for each document
in order, the front chunk followed by the back chunk. Under a causal mask this gives every rank
the same amount of attention work, up to one token per chunk.

A layout can also merge blocks of ``block`` consecutive ranks of the zigzag over ``degree * block`` ranks
into ``degree`` shards (hybrid attention's ring over Ulysses blocks): shard ``i`` then holds the fine
chunks ``i * block .. (i + 1) * block - 1`` as its front and their mirror images as its back, which is
exactly what the fine ranks ``i * block .. (i + 1) * block - 1`` hold together. Front and back stay
contiguous runs of each document, front before back, so the ring's schedule applies unchanged. It is not
the plain zigzag over ``degree`` ranks: that one cuts each document into ``2 * degree`` chunks, whose
boundaries differ by a token or more wherever ``2 * degree * block`` does not divide a document.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch

CuSeqlens = torch.Tensor | Sequence[int]

_LAYOUT_CACHE_SIZE = 64


@dataclass(frozen=True)
class RankShard:
    """Where one rank's zigzag shard comes from and how it is laid out (all int64 CPU tensors)."""

    global_index: torch.Tensor
    """``[shard_len]`` index of each shard token in the packed batch, in shard order."""
    positions: torch.Tensor
    """``[shard_len]`` position of each shard token inside its own document."""
    front_lengths: torch.Tensor
    """``[num_docs]`` tokens of each document's front chunk (chunk ``rank``) held by this rank."""
    back_lengths: torch.Tensor
    """``[num_docs]`` tokens of each document's back chunk (chunk ``2 * degree - 1 - rank``)."""
    cu_seqlens: torch.Tensor
    """``[num_docs + 1]`` document boundaries inside the shard (front + back of each document)."""
    front_index: torch.Tensor
    """Shard-local indices of all front-chunk tokens, in document order."""
    back_index: torch.Tensor
    """Shard-local indices of all back-chunk tokens, in document order."""

    @property
    def length(self) -> int:
        """Number of tokens in the shard."""
        return int(self.global_index.numel())


@dataclass(frozen=True)
class ZigzagLayout:
    """Zigzag layout of one packed batch over ``degree`` ranks; build it with :func:`zigzag_layout`."""

    cu_seqlens: tuple[int, ...]
    """Document boundaries of the packed batch, starting at 0."""
    degree: int
    """Number of shards the batch is cut into (ranks of the group, or of its ring)."""
    block: int
    """Consecutive ranks of the zigzag over ``degree * block`` ranks merged into each shard (1: plain zigzag)."""
    shards: tuple[RankShard, ...]
    """One entry per rank of the group, in group-rank order."""
    shard_order: torch.Tensor
    """``[total_tokens]``: packed-batch index of each row of the concatenation of all shards."""
    unshard_index: torch.Tensor
    """``[total_tokens]``: for each packed-batch token, its row in the concatenation of all shards."""

    @property
    def num_docs(self) -> int:
        """Number of documents in the packed batch."""
        return len(self.cu_seqlens) - 1

    @property
    def total_tokens(self) -> int:
        """Number of tokens in the packed batch."""
        return self.cu_seqlens[-1]

    def shard(self, rank: int) -> RankShard:
        """Layout of group rank ``rank``'s shard."""
        if not 0 <= rank < self.degree:
            raise ValueError(f"rank {rank} is outside the group of degree {self.degree}")
        return self.shards[rank]


def normalize_cu_seqlens(cu_seqlens: CuSeqlens) -> tuple[int, ...]:
    """Check ``cu_seqlens`` (1-D integers, starting at 0, strictly increasing) and return it as a tuple."""
    if isinstance(cu_seqlens, torch.Tensor):
        if cu_seqlens.dim() != 1:
            raise ValueError(f"cu_seqlens must be 1-D, got shape {tuple(cu_seqlens.shape)}")
        if cu_seqlens.dtype.is_floating_point or cu_seqlens.dtype.is_complex or cu_seqlens.dtype == torch.bool:
            raise ValueError(f"cu_seqlens must hold integers, got dtype {cu_seqlens.dtype}")
        values = tuple(int(x) for x in cu_seqlens.tolist())
    else:
        values = tuple(int(x) for x in cu_seqlens)
    if len(values) < 2:
        raise ValueError(f"cu_seqlens needs at least two entries (one document), got {list(values)}")
    if values[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, got {values[0]}")
    for doc, (start, end) in enumerate(zip(values[:-1], values[1:])):
        if end <= start:
            raise ValueError(
                f"cu_seqlens must be strictly increasing: document {doc} spans [{start}, {end}) "
                f"and has length {end - start}"
            )
    return values


def zigzag_layout(cu_seqlens: CuSeqlens, degree: int, block: int = 1) -> ZigzagLayout:
    """Zigzag layout of the packed batch ``cu_seqlens`` over ``degree`` ranks (cached); with ``block`` > 1,
    the zigzag over ``degree * block`` ranks with each block of ``block`` consecutive ranks merged into one shard."""
    for name, value in (("degree", degree), ("block", block)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return _build_layout(normalize_cu_seqlens(cu_seqlens), degree, block)


@lru_cache(maxsize=_LAYOUT_CACHE_SIZE)
def _build_layout(cu_seqlens: tuple[int, ...], degree: int, block: int) -> ZigzagLayout:
    num_chunks = 2 * degree * block
    cu = torch.tensor(cu_seqlens, dtype=torch.int64)
    doc_starts = cu[:-1]
    lengths = cu[1:] - doc_starts
    chunk_ids = torch.arange(num_chunks, dtype=torch.int64)
    # [num_docs, 2 * degree]: chunk sizes differ by at most one, longer chunks first.
    chunk_sizes = (lengths // num_chunks).unsqueeze(1) + (chunk_ids.unsqueeze(0) < (lengths % num_chunks).unsqueeze(1))
    chunk_starts = doc_starts.unsqueeze(1) + torch.cumsum(chunk_sizes, dim=1) - chunk_sizes

    # [num_docs, 2 * degree]: each shard's chunk is `block` consecutive fine chunks (one when block = 1).
    merged_starts = chunk_starts[:, ::block]
    merged_sizes = chunk_sizes.reshape(chunk_sizes.shape[0], 2 * degree, block).sum(dim=2)
    shards = tuple(
        _build_shard(merged_starts, merged_sizes, doc_starts, rank, 2 * degree - 1 - rank) for rank in range(degree)
    )
    shard_order = torch.cat([shard.global_index for shard in shards])
    unshard_index = torch.empty_like(shard_order)
    unshard_index[shard_order] = torch.arange(shard_order.numel(), dtype=torch.int64)
    return ZigzagLayout(cu_seqlens=cu_seqlens, degree=degree, block=block, shards=shards, shard_order=shard_order,
                        unshard_index=unshard_index)


def _build_shard(
    chunk_starts: torch.Tensor, chunk_sizes: torch.Tensor, doc_starts: torch.Tensor, front: int, back: int
) -> RankShard:
    num_docs = chunk_sizes.shape[0]
    # Piece 2*i is document i's front chunk, piece 2*i+1 its back chunk.
    piece_starts = torch.stack([chunk_starts[:, front], chunk_starts[:, back]], dim=1).reshape(-1)
    piece_sizes = torch.stack([chunk_sizes[:, front], chunk_sizes[:, back]], dim=1).reshape(-1)
    piece_offsets = torch.cumsum(piece_sizes, dim=0) - piece_sizes
    total = int(piece_sizes.sum())
    local = torch.arange(total, dtype=torch.int64)
    global_index = torch.repeat_interleave(piece_starts - piece_offsets, piece_sizes) + local
    piece_doc = torch.repeat_interleave(torch.arange(num_docs, dtype=torch.int64), 2)
    positions = global_index - torch.repeat_interleave(doc_starts[piece_doc], piece_sizes)
    is_back = torch.repeat_interleave(torch.arange(2 * num_docs) % 2 == 1, piece_sizes)
    doc_lengths = piece_sizes.view(num_docs, 2).sum(dim=1)
    cu_local = torch.zeros(num_docs + 1, dtype=torch.int64)
    torch.cumsum(doc_lengths, dim=0, out=cu_local[1:])
    return RankShard(
        global_index=global_index,
        positions=positions,
        front_lengths=chunk_sizes[:, front].clone(),
        back_lengths=chunk_sizes[:, back].clone(),
        cu_seqlens=cu_local,
        front_index=local[~is_back],
        back_index=local[is_back],
    )


def zigzag_shard(x: torch.Tensor, cu_seqlens: CuSeqlens, rank: int, degree: int) -> torch.Tensor:
    """Rank ``rank``'s zigzag shard of the packed batch ``x`` (``[total_tokens, ...]``); differentiable."""
    layout = zigzag_layout(cu_seqlens, degree)
    if x.dim() == 0 or x.shape[0] != layout.total_tokens:
        raise ValueError(
            f"x must have cu_seqlens[-1] = {layout.total_tokens} rows, got shape {tuple(x.shape)}"
        )
    return x.index_select(0, layout.shard(rank).global_index.to(x.device))


def zigzag_unshard(shards: Sequence[torch.Tensor], cu_seqlens: CuSeqlens, degree: int) -> torch.Tensor:
    """Packed batch rebuilt from all ``degree`` ranks' shards (inverse of :func:`zigzag_shard`)."""
    layout = zigzag_layout(cu_seqlens, degree)
    if len(shards) != degree:
        raise ValueError(f"zigzag_unshard needs one shard per rank: degree {degree}, got {len(shards)} shards")
    for rank, (tensor, shard) in enumerate(zip(shards, layout.shards)):
        if tensor.dim() == 0 or tensor.shape[0] != shard.length:
            raise ValueError(
                f"shard of rank {rank} must have {shard.length} rows, got shape {tuple(tensor.shape)}"
            )
    concatenated = torch.cat(list(shards), dim=0)
    return concatenated.index_select(0, layout.unshard_index.to(concatenated.device))


def zigzag_positions(cu_seqlens: CuSeqlens, rank: int, degree: int) -> torch.Tensor:
    """``[shard_len]`` int64 position, inside its own document, of each token of rank ``rank``'s shard."""
    return zigzag_layout(cu_seqlens, degree).shard(rank).positions.clone()
