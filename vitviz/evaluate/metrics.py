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


def t_quantile_975(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom: exact for 1 and 2, else the Cornish-Fisher
    expansion of Abramowitz & Stegun 26.7.5 around the normal quantile (within 4e-3 of the exact value at 3, 1e-3
    from 4 on)."""
    if df < 1:
        return math.nan
    if df == 1:
        return math.tan(math.pi * 0.475)
    if df == 2:
        return 0.95 / math.sqrt(2 * 0.975 * 0.025)
    z, v = 1.959963984540054, float(df)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4))


def mean_ci95(values: Any) -> tuple[float, float, int]:
    """``(mean, half-width of the 95 % confidence interval, n)`` of the finite values (NaN ones are left out): the
    half-width is ``t_{0.975, n-1} s / sqrt(n)`` (``s``: the sample standard deviation); NaN for fewer than 2."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = v[np.isfinite(v)]
    n = int(v.size)
    if n == 0:
        return math.nan, math.nan, 0
    if n == 1:
        return float(v[0]), math.nan, 1
    return float(v.mean()), t_quantile_975(n - 1) * float(v.std(ddof=1)) / math.sqrt(n), n
