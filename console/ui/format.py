"""Pure text helpers for the UI: N/A sentinels, ages and times; :func:`clean` and :func:`short` (remote text made
safe to draw) have their home in ``console/core/text.py``."""

from __future__ import annotations

import time

from console.core.text import MAX_LINE, clean, short

__all__ = ["MAX_LINE", "NA", "age_text", "clean", "clock_text", "gpu_list", "hms", "na", "short"]

NA = "N/A"


def na(value: object, fmt: str = "{}") -> str:
    """``fmt`` applied to ``value``, or N/A when the value is unknown."""
    return NA if value is None else fmt.format(value)


def age_text(age: float | None) -> str:
    if age is None:
        return NA
    if age < 10:
        return f"{age:.1f} s"
    if age < 120:
        return f"{age:.0f} s"
    if age < 7200:
        return f"{int(age // 60)} min"
    return f"{age / 3600:.0f} h"


def clock_text(ts: float | None) -> str:
    """Local wall-clock time of an epoch timestamp."""
    return NA if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def hms(ts: float | None) -> str:
    return NA if ts is None else time.strftime("%H:%M:%S", time.localtime(ts))


def gpu_list(gpus: list[int]) -> str:
    return ",".join(str(g) for g in gpus) or NA
