"""Communication time curves (one link kind, inside a node and across nodes) for the time model."""
from __future__ import annotations

import numpy as np

from mindspeed_mm.core.fcp.cost.grid import Grid


class CommCurve:
    """Time of a message of n bytes, inside a node or across nodes, multiplied by `scale`.

    A pair of grids that each lie on one line (latency + bytes / bandwidth, as analytic presets
    do) is evaluated in closed form, several times faster than interpolation; measured grids are
    interpolated.
    """

    def __init__(self, intra: Grid, inter: Grid, scale: float) -> None:
        self.scale = scale
        """Factor applied to every time (e.g. the layers of a stage)."""
        self._intra, self._inter = intra, inter
        a_in, a_out = intra.affine(), inter.affine()
        self.affine: tuple[float, float, float, float] | None = None if a_in is None or a_out is None else (
            scale * a_in[0], scale * a_in[1], scale * a_out[0], scale * a_out[1])
        """Scaled (intra intercept, intra slope, inter intercept, inter slope), or None."""

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

    def __call__(self, nbytes: np.ndarray, spans: np.ndarray) -> np.ndarray:
        """Scaled time of each message; `spans` marks messages that cross nodes."""
        t = self.intra(nbytes)
        if spans.any():
            t = np.where(spans, self.inter(nbytes), t)
        return t
