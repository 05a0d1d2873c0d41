"""Non-negative least squares in numpy (Lawson and Hanson's active-set method, "Solving Least Squares Problems",
1974, chapter 23; the method of scipy's `optimize.nnls`), so that the cost model's fits need no scipy: planning
(`fcp plan`) loads the presets, whose host floors are fitted when they are imported."""
from __future__ import annotations

import numpy as np


def nnls(matrix: np.ndarray, target: np.ndarray, max_iter: int | None = None) -> tuple[np.ndarray, float]:
    """`x >= 0` minimising `|matrix @ x - target|`, and that residual norm (scipy's `optimize.nnls` signature).

    Raises RuntimeError when the inner loop does not settle within `max_iter` (default 3 x columns) steps."""
    a = np.asarray(matrix, dtype=np.float64)
    b = np.asarray(target, dtype=np.float64)
    rows, columns = a.shape
    max_iter = 3 * columns if max_iter is None else max_iter
    tolerance = 10 * np.finfo(np.float64).eps * np.linalg.norm(a, 1) * max(rows, columns)
    x = np.zeros(columns)
    passive = np.zeros(columns, dtype=bool)
    gradient = a.T @ b
    steps = 0
    while (~passive).any() and (gradient[~passive] > tolerance).any():
        candidate = int(np.argmax(np.where(passive, -np.inf, gradient)))
        passive[candidate] = True
        trial = _least_squares_on(a, b, passive)
        if trial[candidate] <= 0:  # rounding made the column useless here: set it aside until x moves
            passive[candidate] = False
            gradient[candidate] = 0.0
            continue
        while (trial[passive] <= 0).any():
            steps += 1
            if steps > max_iter:
                raise RuntimeError(f"nnls did not converge within {max_iter} steps")
            # Step from x towards the trial as far as every passive coordinate stays >= 0; the one that reaches 0
            # first (and any other rounded to 0 or below) leaves the passive set.
            falling = np.flatnonzero(passive & (trial <= 0))
            ratios = x[falling] / (x[falling] - trial[falling])
            x = x + ratios.min() * (trial - x)
            x[falling[np.argmin(ratios)]] = 0.0
            passive &= x > 0
            x[~passive] = 0.0
            trial = _least_squares_on(a, b, passive)
        x = trial
        gradient = a.T @ (b - a @ x)
    return x, float(np.linalg.norm(a @ x - b))


def _least_squares_on(a: np.ndarray, b: np.ndarray, passive: np.ndarray) -> np.ndarray:
    """The least-squares solution over the passive columns, zero elsewhere."""
    solution = np.zeros(a.shape[1])
    if passive.any():
        solution[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
    return solution


__all__ = ["nnls"]
