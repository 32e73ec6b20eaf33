"""Pareto fronts (maximise every objective)."""

from __future__ import annotations

import numpy as np


def pareto_mask(objectives: np.ndarray) -> np.ndarray:
    """Rows not dominated by any other row, for an (n, k) array of objectives to maximise."""
    n = len(objectives)
    keep = np.ones(n, dtype=bool)
    order = np.lexsort(tuple(-objectives[:, j] for j in reversed(range(objectives.shape[1]))))
    best_second = -np.inf
    if objectives.shape[1] == 2:
        # Two objectives: sweep by the first (descending), keep rows improving the second.
        keep[:] = False
        for i in order:
            if objectives[i, 1] > best_second:
                keep[i] = True
                best_second = objectives[i, 1]
        return keep
    for i in range(n):
        if keep[i]:
            dominated = np.all(objectives >= objectives[i], axis=1) & np.any(objectives > objectives[i], axis=1)
            if dominated.any():
                keep[i] = False
    return keep
