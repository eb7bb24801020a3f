"""Colour scales for maps and their colour bars: levels, normalisation, ticks and tick labels. No Qt, numpy only.

A view computes a map; :func:`scale_for` decides the value range the colours span (per map, robust percentile clip,
shared across a stack of maps, or typed by the user), whether the quantity is signed (then a diverging colormap
centred at 0), and whether data lie outside the range (the colour bar then draws an arrow at that end).
:func:`nice_ticks` and :func:`format_ticks` label the bar.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from vitviz.render.colormaps import DEFAULT_COLORMAP

__all__ = ["ColourScale", "ScaleMode", "format_tick", "format_ticks", "nice_ticks", "scale_for"]

ScaleMode = Literal["per_map", "robust", "shared", "fixed"]
MODES: tuple[str, ...] = ("per_map", "robust", "shared", "fixed")
DEFAULT_PERCENTILE = 99.5
SEQUENTIAL_CMAP = DEFAULT_COLORMAP
DIVERGING_CMAP = "coolwarm"  # in vitviz.render.colormaps.COLORMAPS
SIGNED_FRACTION = 1e-3  # negative part non-negligible: min < -SIGNED_FRACTION * max|v|


@dataclass(frozen=True)
class ColourScale:
    """How values map to colours.

    Attributes:
        lo, hi: the values at the bottom and top of the colour bar (``lo < hi``, finite; ``lo > 0`` for ``log``;
            ``lo = -hi`` for automatic diverging scales).
        mode: the :data:`ScaleMode` that chose them.
        diverging: a signed quantity: use ``cmap`` (diverging), 0 at the centre.
        log: normalise ``log10(v)`` instead of ``v``.
        clipped_low, clipped_high: some (finite) displayed values lie below ``lo`` / above ``hi``.
        cmap: the suggested colormap (a name of :data:`vitviz.render.colormaps.COLORMAPS`).
        percentile: the percentile of the robust rule (None for per-map and fixed levels).
    """

    lo: float
    hi: float
    mode: str = "per_map"
    diverging: bool = False
    log: bool = False
    clipped_low: bool = False
    clipped_high: bool = False
    cmap: str = SEQUENTIAL_CMAP
    percentile: float | None = None

    def __post_init__(self) -> None:
        _check_range(self.lo, self.hi, self.log)

    def normalise(self, values: Any) -> np.ndarray:
        """``(v - lo) / (hi - lo)`` (with ``log``: of ``log10``) clipped to [0, 1]; NaN stays NaN.

        With ``log``, values <= 0 map to 0 (they lie below any positive ``lo``).
        """
        v = np.asarray(values, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            if self.log:
                lv = np.log10(np.where(v > 0, v, self.lo))
                t = (lv - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
                t = np.where(v > 0, t, np.where(np.isnan(v), np.nan, 0.0))
            else:
                t = (v - self.lo) / (self.hi - self.lo)
        return np.clip(t, 0.0, 1.0)

    def ticks(self, n: int = 5) -> list[tuple[float, str]]:
        """``[(value, label)]`` for the colour bar: :func:`nice_ticks` labelled by :func:`format_ticks`."""
        t = nice_ticks(self.lo, self.hi, n=n, log=self.log)
        return list(zip(t, format_ticks(t, log=self.log)))


def _check_range(lo: Any, hi: Any, log: bool) -> None:
    try:
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError):
        raise ValueError(f"the colour range ({lo!r}, {hi!r}) must be two numbers") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"the colour range ({lo}, {hi}) must be finite")
    if not lo < hi:
        raise ValueError(f"the colour range needs lo < hi, got ({lo}, {hi})")
    if log and lo <= 0:
        raise ValueError(f"a log colour scale needs lo > 0, got ({lo}, {hi})")


def scale_for(
    values: Any,
    *,
    mode: ScaleMode = "robust",
    percentile: float = DEFAULT_PERCENTILE,
    signed: bool | None = None,
    log: bool = False,
    fixed: tuple[float, float] | None = None,
    shared: Any = None,
    exclude: Any = None,
    cmap: str = SEQUENTIAL_CMAP,
    diverging_cmap: str = DIVERGING_CMAP,
) -> ColourScale:
    """The colour scale for the map ``values``.

    Levels come from the *level data*: ``values`` (``shared`` in mode ``"shared"``) without the ``exclude``d, the
    non-finite and (with ``log``) the non-positive entries.

    * ``"per_map"``: ``lo, hi = min, max`` of the level data.
    * ``"robust"``: ``lo, hi = P_{100-q}, P_q`` (``np.percentile``, linear interpolation, ``q = percentile``).
    * ``"shared"``: the robust rule over the whole stack ``shared`` (e.g. ``[L, gh, gw]``: every layer; ``[H, gh,
      gw]``: every head), so all maps of the stack get the same levels; ``percentile=100`` gives its min..max.
    * ``"fixed"``: ``fixed = (lo, hi)`` as typed (finite, ``lo < hi``, ``lo > 0`` for log; else ``ValueError``).

    Signed quantities (``signed=True``, or ``None`` and the level data hold values below ``-1e-3 * max|v|``) get
    ``hi = max|v|`` (per map) or ``P_q(|v|)`` (robust, shared), ``lo = -hi``, ``diverging=True`` and
    ``diverging_cmap``: 0 maps to 0.5. A typed range is used as typed. ``log`` with ``signed=True`` is an error
    (``signed=None`` with ``log`` means unsigned).

    Degenerate level data give a valid range: none (empty, all NaN, all excluded) -> (0, 1) ((-1, 1) signed,
    (1, 10) log); a robust range of zero width falls back to min..max; a constant ``c`` -> ``c -+ |c|/2``
    (``c -+ 0.5`` for 0; log: ``c / sqrt(10) .. c * sqrt(10)``).

    Args:
        values: the displayed map (any shape), numpy array or anything ``np.asarray`` takes (CPU tensors).
        mode: :data:`ScaleMode`.
        percentile: q of the robust rule, in (50, 100].
        signed: whether the quantity is signed; None detects it.
        log: logarithmic scale (values <= 0 are shown at the bottom and count as clipped).
        fixed: ``(lo, hi)`` for ``mode="fixed"``.
        shared: the stack of maps for ``mode="shared"``.
        exclude: bool mask broadcastable to the level data: entries ignored for the levels (artefact tokens);
            where it has ``values``' shape they do not count as clipped either (they are drawn in a neutral colour).
        cmap: the user's sequential colormap; diverging_cmap: the one suggested for signed quantities.

    Returns:
        :class:`ColourScale`; ``clipped_low`` / ``clipped_high`` refer to the finite entries of ``values``.
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}; valid: " + ", ".join(repr(m) for m in MODES))
    if not 50.0 < float(percentile) <= 100.0:
        raise ValueError(f"percentile={percentile} must be in (50, 100]")
    if log and signed:
        raise ValueError("a log scale needs a non-negative quantity; signed quantities use a diverging linear scale")
    v = np.asarray(values, dtype=np.float64)
    if mode == "shared" and shared is None:
        raise ValueError("mode='shared' needs the stack of maps: shared=...")
    if mode != "shared" and shared is not None:
        raise ValueError(f"shared=... is only used with mode='shared' (mode={mode!r})")
    src = np.asarray(shared, dtype=np.float64) if mode == "shared" else v
    ok = np.isfinite(src)
    if exclude is not None:
        ok &= ~np.broadcast_to(np.asarray(exclude, dtype=bool), src.shape)
    data = src[ok]
    if signed is None:
        signed = (not log) and data.size > 0 and float(data.min()) < -SIGNED_FRACTION * float(np.abs(data).max())
    if log:
        data = data[data > 0]
    q = float(percentile)
    if mode == "fixed":
        if fixed is None or len(fixed) != 2:
            raise ValueError("mode='fixed' needs fixed=(lo, hi)")
        _check_range(fixed[0], fixed[1], log)
        lo, hi = float(fixed[0]), float(fixed[1])
    else:
        lo, hi = _levels(data, q if mode != "per_map" else 100.0, bool(signed), log)
    shown = np.isfinite(v)
    if exclude is not None and np.shape(exclude) == v.shape:  # excluded entries are drawn neutral, never clipped
        shown &= ~np.asarray(exclude, dtype=bool)
    finite = v[shown]
    clipped_low = bool(finite.size and (finite.min() < lo or (log and finite.min() <= 0)))
    clipped_high = bool(finite.size and finite.max() > hi)
    return ColourScale(lo=lo, hi=hi, mode=mode, diverging=bool(signed), log=log, clipped_low=clipped_low,
                       clipped_high=clipped_high, cmap=diverging_cmap if signed else cmap,
                       percentile=q if mode in ("robust", "shared") else None)


def _levels(data: np.ndarray, q: float, signed: bool, log: bool) -> tuple[float, float]:
    """``(lo, hi)`` of the robust rule with percentile q (100: min..max) on the (finite) level data."""
    if data.size == 0:
        return (1.0, 10.0) if log else (-1.0, 1.0) if signed else (0.0, 1.0)
    if signed:
        a = np.abs(data)
        hi = float(np.percentile(a, q)) if q < 100 else float(a.max())
        if not hi > 0:
            hi = float(a.max())
        return (-hi, hi) if hi > 0 else (-1.0, 1.0)
    x = np.log10(data) if log else data
    lo, hi = (float(np.percentile(x, 100.0 - q)), float(np.percentile(x, q))) if q < 100 else (x.min(), x.max())
    if not hi > lo:
        lo, hi = float(x.min()), float(x.max())
    if not hi > lo + 1e-12 * max(abs(lo), abs(hi)):
        c = 0.5 * (lo + hi)
        d = 0.5 if log or c == 0 else 0.5 * abs(c)
        lo, hi = c - d, c + d
    return (10.0 ** lo, 10.0 ** hi) if log else (float(lo), float(hi))


# ----------------------------------------------------------------------------------------------- ticks
def _nice_step(raw: float) -> tuple[int, int]:
    """The smallest ``m * 10^e >= raw`` with ``m`` in (1, 2, 5): returns ``(m, e)``."""
    e = math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * 10.0 ** e >= raw * (1 - 1e-12):
            return (1, e + 1) if m == 10 else (m, e)
    return (1, e + 1)


def _times_pow10(k: int, e: int) -> float:
    """``k * 10^e`` rounded once (``3 * 0.1`` would give 0.30000000000000004)."""
    return k / 10.0 ** -e if e < 0 else float(k * 10 ** e)


def nice_ticks(lo: float, hi: float, *, n: int = 5, log: bool = False) -> list[float]:
    """About ``n`` round tick values in ``[lo, hi]`` (within round-off), at least 2.

    Linear: multiples of the smallest step ``m * 10^e >= (hi - lo) / (n - 1)`` with ``m`` in 1, 2, 5 (at most ``n``
    ticks), or of the next finer 1-2-5 steps while fewer than 2 multiples fit; so 0 is a tick whenever
    ``lo <= 0 <= hi``. Log: the decades ``10^k`` inside the range (every ``s``-th decade, ``k`` a multiple of
    ``s``, when there are more than ``n``); with fewer than 2 decades inside, ``1, 2, 5 x 10^k``.
    """
    lo, hi, n = float(lo), float(hi), max(int(n), 2)
    _check_range(lo, hi, log)
    if log:
        a, b = math.log10(lo), math.log10(hi)
        k0, k1 = math.ceil(a - 1e-9), math.floor(b + 1e-9)
        if k1 - k0 + 1 >= 2:
            s = math.ceil((k1 - k0 + 1) / n)
            return [_times_pow10(1, k) for k in range(k0, k1 + 1) if k % s == 0]
        for ms in ((1, 2, 5), (1, 5), (1, 3)):
            t = [x for x in (_times_pow10(m, k) for k in range(k0 - 1, k1 + 1) for m in ms)
                 if lo * (1 - 1e-9) <= x <= hi * (1 + 1e-9)]
            if 2 <= len(t) <= n:
                return t
        return nice_ticks(lo, hi, n=n)  # less than a factor 2 or so: linear ticks
    m, e = _nice_step((hi - lo) / (n - 1))
    while True:  # the largest step with at least 2 ticks (the first one has at most n)
        unit = _times_pow10(m, e)
        eps = 1e-9 * unit
        k0, k1 = math.ceil((lo - eps) / unit), math.floor((hi + eps) / unit)
        if k1 > k0:
            return [_times_pow10(k * m, e) for k in range(k0, k1 + 1)]
        m, e = {5: (2, e), 2: (1, e), 1: (5, e - 1)}[m]


def format_tick(v: float, step: float, *, exponent: int | None = None) -> str:
    """``v`` with the digits the resolution ``step`` needs: fixed point while that is at most 3 decimals and
    ``|v| < 1e5`` (``"0.05"``, ``"-0.5"``, ``"120"``), else scientific with ``exponent`` (default: ``v``'s own):
    ``format_tick(0.000807, 1e-5) == "8.1e-4"``, never ``"0.000807"``. 0 is ``"0"``."""
    v, step = float(v), abs(float(step))
    if not math.isfinite(v):
        return str(v)
    if v == 0:
        return "0"
    s = _place(step) if step > 0 and math.isfinite(step) else _place(abs(v))
    if exponent is None and -s <= 3 and abs(v) < 1e5:
        return f"{v:.{max(0, -s)}f}"
    e = _place(abs(v)) if exponent is None else int(exponent)
    text = f"{v / 10.0 ** e:.{max(0, e - s)}f}"
    return f"{text}e{e}" if e else text


def format_ticks(ticks: Sequence[float], *, log: bool | None = None) -> list[str]:
    """Labels for one colour bar, with the same number of decimals on every tick.

    Linear ticks (equally spaced): :func:`format_tick` with their step; when that needs scientific notation, one
    exponent for the whole bar (that of the largest ``|tick|``): ``0.8e-3, 1.0e-3, 1.2e-3``. Log ticks: each as
    its own value (``"0.01"``, ``"1"``, ``"100"``) when all lie in [1e-3, 1e5), else all scientific (``"1e-5"``).
    ``log=None`` takes positive ticks that are not equally spaced for log ticks.
    """
    t = [float(x) for x in ticks]
    if not t:
        return []
    if log is None:
        d = np.diff(t)
        log = min(t) > 0 and d.size > 1 and not np.allclose(d, d[0], rtol=1e-6, atol=0)
    if log:
        if all(1e-3 <= x < 1e5 for x in t):
            return [format_tick(x, _own_step(x)) for x in t]
        return [format_tick(x, _own_step(x), exponent=_place(x)) for x in t]
    step = min((abs(b - a) for a, b in itertools.pairwise(t) if b != a), default=abs(t[0]) or 1.0)
    s = _place(step)
    big = max(abs(x) for x in t)
    if -s <= 3 and big < 1e5:
        return [format_tick(x, step) for x in t]
    e = _place(big)
    return [format_tick(x, step, exponent=e) for x in t]


def _place(x: float) -> int:
    """The decimal place of ``x``'s leading digit, ``floor(log10(x))``, tolerant of round-off (a tick difference
    of 9.999999999999998e-05 is a step of 1e-4)."""
    return math.floor(math.log10(x) + 1e-9)


def _own_step(x: float) -> float:
    """The resolution of a 1-2-5 log tick: its leading digit's place."""
    return 10.0 ** _place(x)
