"""Colour scales: each mode's levels, diverging centring, exclusion, log, fixed validation, ticks and labels."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
import torch

from vitviz.render.colormaps import COLORMAPS, DEFAULT_COLORMAP
from vitviz.render.scales import ColourScale, format_tick, format_ticks, nice_ticks, scale_for


# ------------------------------------------------------------------ levels per mode
def test_per_map_is_min_max():
    v = np.array([[0.1, 0.5], [0.2, 0.9]])
    s = scale_for(v, mode="per_map")
    assert (s.lo, s.hi, s.mode, s.diverging, s.log) == (0.1, 0.9, "per_map", False, False)
    assert not s.clipped_low and not s.clipped_high and s.percentile is None
    assert s.cmap == DEFAULT_COLORMAP and np.allclose(s.normalise(v), [[0, 0.5], [0.125, 1]])


def test_robust_is_the_percentile_clip():
    v = np.arange(201, dtype=float)  # P0.5 = 1, P99.5 = 199 (linear interpolation at index 0.995 * 200)
    s = scale_for(v)
    assert (s.lo, s.hi, s.mode, s.percentile) == (1.0, 199.0, "robust", 99.5)
    assert s.clipped_low and s.clipped_high
    rng = np.random.default_rng(0)
    w = rng.gamma(0.3, size=(14, 14))
    s = scale_for(w, percentile=98)
    assert s.lo == pytest.approx(np.percentile(w, 2)) and s.hi == pytest.approx(np.percentile(w, 98))
    assert scale_for(w, percentile=100).hi == w.max()


def test_signed_robust_is_symmetric_and_centred():
    v = np.linspace(-1.0, 2.0, 301)
    s = scale_for(v, percentile=90)
    hi = np.percentile(np.abs(v), 90)
    assert s.diverging and s.cmap == "coolwarm" and (s.lo, s.hi) == (-hi, hi)
    assert s.normalise(0.0) == 0.5 and s.normalise(hi) == 1.0 and s.normalise(-hi) == 0.0
    assert s.clipped_high and not s.clipped_low  # -1 > -hi = -1.8
    pm = scale_for(v, mode="per_map")
    assert (pm.lo, pm.hi) == (-2.0, 2.0) and pm.normalise(0) == 0.5
    for mode in ("per_map", "robust"):  # cosine similarities: signed even without negatives in this map
        s = scale_for(np.array([0.2, 0.9]), mode=mode, signed=True)
        assert s.diverging and s.lo == -s.hi and s.normalise(0.0) == 0.5


def test_signed_detection():
    assert not scale_for(np.array([-1e-5, 0.3, 1.0])).diverging  # round-off below zero: not signed
    assert scale_for(np.array([-0.1, 0.3, 1.0])).diverging
    assert not scale_for(np.array([-0.1, 0.3, 1.0]), signed=False).diverging
    s = scale_for(np.array([-0.1, 0.3, 1.0]), signed=False, mode="per_map")
    assert (s.lo, s.hi) == (-0.1, 1.0)


def test_shared_levels_come_from_the_stack():
    rng = np.random.default_rng(1)
    stack = rng.gamma(0.5, size=(12, 4, 4)) * np.arange(1, 13)[:, None, None]  # later layers larger
    scales = [scale_for(stack[l], mode="shared", shared=stack) for l in range(12)]
    lo, hi = np.percentile(stack, 0.5), np.percentile(stack, 99.5)
    for s in scales:
        assert s.lo == pytest.approx(lo) and s.hi == pytest.approx(hi) and s.mode == "shared"
    assert not scales[0].clipped_high and scales[-1].clipped_high  # clipping refers to the displayed map
    full = scale_for(stack[3], mode="shared", shared=stack, percentile=100)
    assert (full.lo, full.hi) == (stack.min(), stack.max())
    heads = torch.from_numpy(stack[:3])  # shared across heads, torch input
    assert scale_for(heads[0], mode="shared", shared=heads).hi == pytest.approx(np.percentile(stack[:3], 99.5))
    with pytest.raises(ValueError, match="shared"):
        scale_for(stack[0], mode="shared")
    with pytest.raises(ValueError, match="shared"):
        scale_for(stack[0], mode="robust", shared=stack)


def test_exclude_ignores_entries_for_the_levels_only():
    v = np.array([[0.1, 0.2, 5.0], [0.3, 0.4, 0.5]])
    art = np.array([[False, False, True], [False, False, False]])
    s = scale_for(v, mode="per_map", exclude=art)
    assert (s.lo, s.hi) == (0.1, 0.5) and not s.clipped_high and not s.clipped_low  # the excluded one is drawn grey
    assert s.normalise(v)[0, 2] == 1.0
    assert scale_for(v, mode="per_map", exclude=art, percentile=100).clipped_high is False
    stack = np.stack([v, 2 * v])  # one [gh, gw] mask for every layer of the stack
    s = scale_for(v, mode="shared", shared=stack, exclude=art, percentile=100)
    assert (s.lo, s.hi) == (0.1, 1.0)
    assert scale_for(-v, mode="per_map", exclude=art).lo == -0.5  # signed: symmetric without the artefact
    everything = scale_for(v, exclude=np.ones_like(art))  # nothing left: a valid default range
    assert (everything.lo, everything.hi) == (0.0, 1.0) and not everything.clipped_high


def test_log_scale():
    v = 10.0 ** np.linspace(-3, 2, 11)
    s = scale_for(v, mode="per_map", log=True)
    assert s.log and s.lo == pytest.approx(1e-3) and s.hi == pytest.approx(100.0)
    assert s.normalise(1.0) == pytest.approx(0.6) and s.normalise(100.0) == pytest.approx(1.0)
    with_zero = np.append(v, [0.0, -1.0, np.nan])
    s = scale_for(with_zero, log=True, percentile=100)
    assert s.lo == pytest.approx(1e-3) and s.clipped_low and not s.diverging  # signed=None with log: unsigned
    n = s.normalise(with_zero)
    assert n[-3] == 0.0 and n[-2] == 0.0 and np.isnan(n[-1])
    r = scale_for(v, log=True)  # robust percentiles of log10 = log10 of the percentiles
    assert math.log10(r.hi) == pytest.approx(np.percentile(np.log10(v), 99.5))
    with pytest.raises(ValueError, match="log"):
        scale_for(v, log=True, signed=True)


def test_fixed_validation():
    s = scale_for(np.array([0.0, 2.0]), mode="fixed", fixed=(0.5, 1.5))
    assert (s.lo, s.hi, s.mode) == (0.5, 1.5, "fixed") and s.clipped_low and s.clipped_high
    signed = scale_for(np.array([-0.3, 0.9]), mode="fixed", fixed=(-0.5, 1.0))
    assert signed.diverging and (signed.lo, signed.hi) == (-0.5, 1.0)  # used as typed
    assert scale_for(np.array([1.0]), mode="fixed", fixed=(0.01, 10), log=True).lo == 0.01
    for fixed, log, msg in [((1.0, 1.0), False, "lo < hi"), ((2.0, 1.0), False, "lo < hi"),
                            ((0.0, math.inf), False, "finite"), ((math.nan, 1.0), False, "finite"),
                            ((0.0, 1.0), True, "lo > 0"), (("a", 1.0), False, "numbers"),
                            (None, False, "fixed=")]:
        with pytest.raises(ValueError, match=msg):
            scale_for(np.array([1.0]), mode="fixed", fixed=fixed, log=log)
    with pytest.raises(ValueError, match="mode"):
        scale_for(np.array([1.0]), mode="auto")
    with pytest.raises(ValueError, match="percentile"):
        scale_for(np.array([1.0]), percentile=40)


def test_degenerate_maps_give_valid_scales_without_warnings():
    cases = {
        "constant": (np.full((3, 3), 0.25), (0.125, 0.375)),
        "zeros": (np.zeros((3, 3)), (-0.5, 0.5)),
        "all nan": (np.full((3, 3), np.nan), (0.0, 1.0)),
        "empty": (np.zeros((0, 4)), (0.0, 1.0)),
        "negative constant": (np.full(4, -2.0), (-2.0, 2.0)),  # signed: symmetric
    }
    for name, (v, (lo, hi)) in cases.items():
        for mode in ("per_map", "robust"):
            s = scale_for(v, mode=mode)
            assert (s.lo, s.hi) == (lo, hi), (name, mode, s)
            assert not np.isnan(s.normalise(np.zeros(2))).any()
    sparse = np.zeros(401)
    sparse[7] = 0.4  # the 99.5th percentile is 0 (index 0.995 * 400 = 398): fall back to min..max
    assert (scale_for(sparse).lo, scale_for(sparse).hi) == (0.0, 0.4)
    c = scale_for(np.full(5, 0.01), log=True)
    assert c.lo == pytest.approx(0.01 / math.sqrt(10)) and c.hi == pytest.approx(0.01 * math.sqrt(10))
    assert (scale_for(np.zeros(3), log=True).lo, scale_for(np.zeros(3), log=True).hi) == (1.0, 10.0)


def test_normalise_and_colour_scale_validation():
    s = ColourScale(lo=-2.0, hi=2.0, diverging=True)
    assert s.normalise([-3.0, -2.0, 0.0, 1.0, 3.0, np.nan, np.inf]).tolist()[:5] == [0.0, 0.0, 0.5, 0.75, 1.0]
    assert np.isnan(s.normalise([np.nan]))[0] and s.normalise(np.ones((2, 3))).shape == (2, 3)
    with pytest.raises(ValueError):
        ColourScale(lo=1.0, hi=1.0)
    with pytest.raises(ValueError):
        ColourScale(lo=0.0, hi=1.0, log=True)
    assert {"coolwarm", DEFAULT_COLORMAP} <= set(COLORMAPS)


# ------------------------------------------------------------------ ticks
def _is_125_step(ticks):
    d = np.diff(ticks)
    assert np.allclose(d, d[0], rtol=1e-9)
    m = d[0] / 10.0 ** math.floor(math.log10(d[0]) + 1e-9)
    return any(math.isclose(m, x, rel_tol=1e-9) for x in (1, 2, 5))


@pytest.mark.parametrize("lo,hi,ticks,labels", [
    (0, 0.003, [0, 0.001, 0.002, 0.003], ["0", "0.001", "0.002", "0.003"]),
    (0, 0.19, [0, 0.05, 0.10, 0.15], ["0", "0.05", "0.10", "0.15"]),
    (-0.8, 1, [-0.5, 0, 0.5, 1.0], ["-0.5", "0", "0.5", "1.0"]),
    (0.000807, 0.0012, [0.0009, 0.001, 0.0011, 0.0012], ["0.9e-3", "1.0e-3", "1.1e-3", "1.2e-3"]),
    (-0.0042, 0.0042, [-0.004, -0.002, 0, 0.002, 0.004], ["-0.004", "-0.002", "0", "0.002", "0.004"]),
    (0, 2.5e5, [0, 1e5, 2e5], ["0", "1e5", "2e5"]),
    (3, 3.7, [3.0, 3.2, 3.4, 3.6], ["3.0", "3.2", "3.4", "3.6"]),
])
def test_linear_ticks_and_labels(lo, hi, ticks, labels):
    t = nice_ticks(lo, hi)
    assert np.allclose(t, ticks, rtol=0, atol=1e-15) and format_ticks(t) == labels
    assert _is_125_step(t)


def test_log_ticks_and_labels():
    t = nice_ticks(1e-5, 1e2, log=True)
    assert t == [1e-4, 1e-2, 1.0, 100.0] and format_ticks(t, log=True) == ["1e-4", "1e-2", "1", "1e2"]
    assert format_ticks(t) == ["1e-4", "1e-2", "1", "1e2"]  # log=None: unequal spacing means log ticks
    t = nice_ticks(0.02, 0.3, log=True)
    assert t == [0.02, 0.05, 0.1, 0.2] and format_ticks(t, log=True) == ["0.02", "0.05", "0.1", "0.2"]
    assert nice_ticks(1e-3, 1.0, log=True) == [1e-3, 1e-2, 0.1, 1.0]
    s = scale_for(10.0 ** np.linspace(-5, 2, 20), mode="per_map", log=True)
    assert [label for _, label in s.ticks()] == ["1e-4", "1e-2", "1", "1e2"]


def test_ticks_properties_on_random_ranges():
    rng = np.random.default_rng(0)
    for _ in range(3000):
        lo = float(rng.normal() * 10 ** rng.uniform(-6, 6))
        hi = lo + float(10 ** rng.uniform(-4, 1)) * max(abs(lo), 10 ** rng.uniform(-6, 6))
        n = int(rng.integers(3, 9))
        t = nice_ticks(lo, hi, n=n)
        eps = 1e-9 * (hi - lo)
        assert 2 <= len(t) <= n + 1 and all(lo - eps <= x <= hi + eps for x in t), (lo, hi, n, t)
        assert all(b > a for a, b in itertools.pairwise(t)) and _is_125_step(t)
        if lo < 0 < hi:
            assert 0.0 in t
        labels = format_ticks(t)
        assert len(set(labels)) == len(labels), (t, labels)  # distinct ticks read differently
        fixed = [lab for lab in labels if "e" not in lab and lab != "0"]
        assert len({len(lab.split(".")[1]) if "." in lab else 0 for lab in fixed}) <= 1, labels  # same decimals
        assert not any(re.fullmatch(r"-?0\.000\d*", lab) for lab in labels), labels  # never 0.000807
        for x, lab in zip(t, labels):
            assert float(lab) == pytest.approx(x, rel=1e-9, abs=1e-12 * (hi - lo)), (t, labels)


def test_format_tick():
    assert format_tick(0.000807, 1e-5) == "8.1e-4"
    assert format_tick(0.000807, 1e-4) == "8e-4"
    assert format_tick(0.0, 0.1) == "0"
    assert format_tick(0.25, 0.05) == "0.25" and format_tick(12.0, 2.0) == "12" and format_tick(-0.5, 0.5) == "-0.5"
    assert format_tick(123456.0, 1000.0) == "1.23e5"
    assert format_tick(0.0012, 1e-4, exponent=-3) == "1.2e-3"
    with pytest.raises(ValueError):
        nice_ticks(1.0, 1.0)
    with pytest.raises(ValueError):
        nice_ticks(0.0, 1.0, log=True)
