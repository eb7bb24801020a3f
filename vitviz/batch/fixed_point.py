"""Exact running sums of float64 arrays, so that sums over shards equal the sum over all images bit for bit.

Floating-point addition is not associative: ``(a + b) + c`` and ``a + (b + c)`` may differ in the last bit, so the
sum of shard sums is not the single run's sum. :class:`FixedSum` adds in integers instead: each value is split into
its integer part (``hi``, exact in int64) and its fraction in units of 2^-52 (``lo``; a value below 1 in magnitude is
rounded to that grid, at most 2^-53 ≈ 1.1e-16 away: a value's own rounding, made once, so the same in every run),
and integer sums do not depend on the order. :meth:`FixedSum.total` gives each cell's sum as an exact
:class:`fractions.Fraction`; the statistics are computed from those and rounded once (:func:`mean_and_sd`).
A non-finite value makes its cell's statistics NaN.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

FRACTION_BITS = 52
_ONE = 1 << FRACTION_BITS


class FixedSum:
    """The exact sum of float64 arrays of one shape (see the module's docstring)."""

    def __init__(self, shape: tuple[int, ...]):
        self.hi = np.zeros(shape, np.int64)
        self.lo = np.zeros(shape, np.int64)
        self.bad = np.zeros(shape, bool)  # a NaN or an infinity was added here

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.hi.shape)

    def add(self, values: np.ndarray) -> None:
        """Add ``values`` (float64, this shape; magnitudes below 2^52)."""
        v = np.asarray(values, np.float64)
        if v.shape != self.shape:
            raise ValueError(f"shape {v.shape}, but the sums have {self.shape}")
        finite = np.isfinite(v) & (np.abs(v) < 2.0 ** 52)
        self.bad |= ~finite
        v = np.where(finite, v, 0.0)
        whole = np.floor(v)
        self.hi += whole.astype(np.int64)
        self.lo += np.rint(np.ldexp(v - whole, FRACTION_BITS)).astype(np.int64)  # v - floor(v) is exact
        self._carry()

    def add_sum(self, other: FixedSum) -> None:
        """Add another sum (a shard's) of the same shape: exact, so the order of shards does not matter."""
        if other.shape != self.shape:
            raise ValueError(f"shape {other.shape}, but the sums have {self.shape}")
        if (np.abs(self.hi.astype(np.float64) + other.hi.astype(np.float64)) >= 2.0 ** 62).any():
            raise ValueError("the sums overflow (a damaged part: no dataset adds up to 2^62)")
        self.hi += other.hi
        self.lo += other.lo
        self.bad |= other.bad
        self._carry()

    def _carry(self) -> None:
        carry = self.lo >> FRACTION_BITS  # floor division: lo stays in [0, 2^52)
        self.hi += carry
        self.lo -= carry << FRACTION_BITS

    def total(self) -> list[Fraction | None]:
        """Each cell's sum (flattened, C order) as an exact fraction; None where a non-finite value was added."""
        return [None if b else Fraction(h * _ONE + lo, _ONE)
                for h, lo, b in zip(self.hi.ravel().tolist(), self.lo.ravel().tolist(), self.bad.ravel().tolist())]

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The sum as named arrays (for a shard's part file): ``<prefix>_hi``, ``_lo``, ``_bad``."""
        return {f"{prefix}_hi": self.hi, f"{prefix}_lo": self.lo, f"{prefix}_bad": self.bad}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], prefix: str) -> FixedSum:
        """The sum :meth:`arrays` saved (KeyError or ValueError when they are not one)."""
        hi, lo, bad = (np.asarray(arrays[f"{prefix}_{k}"]) for k in ("hi", "lo", "bad"))
        if not (hi.shape == lo.shape == bad.shape) or hi.dtype != np.int64 or lo.dtype != np.int64 \
                or bad.dtype != bool or (lo < 0).any() or (lo >= _ONE).any():
            raise ValueError(f"{prefix}: not the arrays of an exact sum")
        out = cls(tuple(hi.shape))
        out.hi, out.lo, out.bad = hi.copy(), lo.copy(), bad.copy()
        return out


def mean_and_sd(sums: FixedSum, squares: FixedSum, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The mean and the sample standard deviation (ddof 1; 0 for one value) of ``n`` values per cell from the exact
    sums of the values and of their squares, each rounded once from the exact result (NaN where a value was not
    finite)."""
    mean, sd = [], []
    for s, q in zip(sums.total(), squares.total()):
        if s is None or q is None:
            mean.append(float("nan"))
            sd.append(float("nan"))
            continue
        m = s / n
        var = (q - s * m) / (n - 1) if n > 1 else Fraction(0)
        mean.append(float(m))
        sd.append(float(np.sqrt(max(float(var), 0.0))))
    shape = sums.shape
    return np.array(mean, np.float64).reshape(shape), np.array(sd, np.float64).reshape(shape)
