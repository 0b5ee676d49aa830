"""Summaries of measured samples: median, p95, spread, formatted for the report."""

from __future__ import annotations

import math
from dataclasses import dataclass


def percentile(xs: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass(frozen=True)
class Summary:
    """Median, p95, min, max and IQR of n samples (all in the caller's unit)."""

    n: int
    median: float
    p95: float
    lo: float
    hi: float
    q1: float
    q3: float
    mean: float

    def cell(self, unit: str = "ms", digits: int | None = None) -> str:
        """``median (p95 x; min–max a–b)`` for a table cell."""
        f = _fmt(digits)
        return (f"{f(self.median)} {unit} (p95 {f(self.p95)}; {f(self.lo)}–{f(self.hi)}; n={self.n})").replace("  ", " ")

    def as_dict(self) -> dict:
        return self.__dict__.copy()


def summarize(xs: list[float]) -> Summary | None:
    """None for an empty list (the report then says 'no samples')."""
    xs = [float(x) for x in xs if x is not None]
    if not xs:
        return None
    return Summary(n=len(xs), median=percentile(xs, 50), p95=percentile(xs, 95), lo=min(xs), hi=max(xs),
                   q1=percentile(xs, 25), q3=percentile(xs, 75), mean=sum(xs) / len(xs))


def _fmt(digits: int | None):
    def f(v: float) -> str:
        if digits is not None:
            return f"{v:.{digits}f}"
        a = abs(v)
        if a >= 100:
            return f"{v:.0f}"
        if a >= 10:
            return f"{v:.1f}"
        if a >= 1:
            return f"{v:.2f}"
        return f"{v:.3f}"
    return f


def cell(s: Summary | None, unit: str = "ms", digits: int | None = None) -> str:
    return "no samples" if s is None else s.cell(unit, digits)


def num(v: float | None, digits: int | None = None) -> str:
    return "n/a" if v is None else _fmt(digits)(v)


def ratio(naive: float | None, ours: float | None) -> str:
    """``N×`` how many times ``ours`` is cheaper/faster than ``naive``."""
    if naive is None or ours is None or ours <= 0:
        return "n/a"
    r = naive / ours
    return f"{r:.0f}×" if r >= 10 else f"{r:.1f}×"
