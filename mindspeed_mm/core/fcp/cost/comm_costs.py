"""Communication time curves (one link kind, inside a node and across nodes) for the time model."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mindspeed_mm.core.fcp.cost.grid import Grid


class CommCurve:
    """Time of a message of n bytes, inside a node or across nodes, multiplied by `scale`.

    A pair of grids that each lie on one line (latency + bytes / bandwidth, as analytic presets
    do) is evaluated in closed form, several times faster than interpolation; measured grids are
    interpolated. With curves per group size (`by_size`), a group inside a node uses the curve of
    the listed size closest to its own (the larger one on a tie).
    """

    def __init__(self, intra: Grid, inter: Grid, scale: float, by_size: Mapping[int, Grid] | None = None) -> None:
        self.scale = scale
        """Factor applied to every time (e.g. the layers of a stage)."""
        self._intra, self._inter = intra, inter
        self._by_size = dict(sorted((by_size or {}).items()))
        a_in, a_out = intra.affine(), inter.affine()
        self.affine: tuple[float, float, float, float] | None = None
        """Scaled (intra intercept, intra slope, inter intercept, inter slope), or None."""
        if a_in is not None and a_out is not None and not self._by_size:
            self.affine = (scale * a_in[0], scale * a_in[1], scale * a_out[0], scale * a_out[1])
        if self._by_size:
            sizes = np.asarray(list(self._by_size))
            top = int(sizes[-1])
            # _nearest[d] = listed size closest to d (larger on ties), for d up to the largest size.
            candidates = np.arange(top + 1)[:, None]
            distance = np.abs(candidates - sizes[None, :]) * 2 - (sizes[None, :] > candidates)
            self._nearest = sizes[np.argmin(distance, axis=1)]

    def intra(self, nbytes: np.ndarray) -> np.ndarray:
        """Scaled time inside a node."""
        if self.affine is not None:
            return self.affine[0] + self.affine[1] * nbytes
        return self.scale * self._intra(nbytes)

    def inter(self, nbytes: np.ndarray) -> np.ndarray:
        """Scaled time across nodes."""
        if self.affine is not None:
            return self.affine[2] + self.affine[3] * nbytes
        return self.scale * self._inter(nbytes)

    def intra_for(self, nbytes: np.ndarray, degrees: np.ndarray) -> np.ndarray:
        """Scaled time inside a node of messages within groups of `degrees` ranks (same shape)."""
        if not self._by_size:
            return self.intra(nbytes)
        nbytes = np.asarray(nbytes, dtype=np.float64)
        sizes = self._nearest[np.minimum(degrees, self._nearest.size - 1)]
        out = np.empty(np.broadcast(nbytes, sizes).shape)
        nbytes = np.broadcast_to(nbytes, out.shape)
        sizes = np.broadcast_to(sizes, out.shape)
        for size, grid in self._by_size.items():
            mask = sizes == size
            if mask.any():
                out[mask] = self.scale * grid(nbytes[mask])
        return out

    def __call__(self, nbytes: np.ndarray, spans: np.ndarray, degrees: np.ndarray | None = None) -> np.ndarray:
        """Scaled time of each message; `spans` marks messages that cross nodes, `degrees` the group sizes."""
        t = self.intra(nbytes) if degrees is None else self.intra_for(nbytes, degrees)
        if spans.any():
            t = np.where(spans, self.inter(nbytes), t)
        return t
