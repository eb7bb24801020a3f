"""The numbers the faithfulness measures report: the area under a perturbation curve and the Spearman rank
correlation of two maps (average ranks for ties). numpy only."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def curve_auc(fractions: Any, scores: Any) -> float:
    """Trapezoid area ``sum_k (f_{k+1} - f_k) (s_k + s_{k+1}) / 2`` (0 for a single point)."""
    f = np.asarray(fractions, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    if f.shape != s.shape or f.ndim != 1:
        raise ValueError(f"fractions and scores must be 1-D of the same length, got {f.shape} and {s.shape}")
    return float(np.sum(np.diff(f) * (s[1:] + s[:-1]) / 2.0))


def rank_average(a: Any) -> np.ndarray:
    """Ranks 1..n of the values of ``a`` (flattened), ties given the average of their ranks (float64 ``[n]``)."""
    v = np.asarray(a, dtype=np.float64).reshape(-1)
    n = v.size
    order = np.argsort(v, kind="stable")
    sv = v[order]
    # runs of equal values: [start, end) in sorted order get the mean of ranks start+1 .. end
    starts = np.flatnonzero(np.concatenate(([True], sv[1:] != sv[:-1])))
    ends = np.concatenate((starts[1:], [n]))
    avg = (starts + 1 + ends) / 2.0
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def spearman(a: Any, b: Any) -> float:
    """Spearman rank correlation: the Pearson correlation of :func:`rank_average` ranks; NaN when either input is
    constant (the correlation is undefined)."""
    ra, rb = rank_average(a), rank_average(b)
    if ra.shape != rb.shape:
        raise ValueError(f"spearman needs two maps of the same size, got {ra.size} and {rb.size} values")
    da, db = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float(da @ da) * float(db @ db))
    return float(da @ db) / den if den > 0 else math.nan
