"""Pure text helpers for the UI: N/A sentinels, sanitising remote text, ages and times."""

from __future__ import annotations

import re
import time

from console.core.redact import redact_text

NA = "N/A"
MAX_LINE = 2000

# CSI, OSC (BEL or ST terminated), DCS/SOS/PM/APC strings, and two-byte escapes.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -/]*[0-~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)
_CTRL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: str, limit: int = MAX_LINE) -> str:
    """Make remote text safe to draw: no escapes or control characters, one line, bounded."""
    if "\r" in text:
        text = text.rstrip("\r").rsplit("\r", 1)[-1]  # progress bars: keep the last redraw
    text = redact_text(_CTRL.sub("", _ANSI.sub("", text.replace("\t", "    ").replace("\n", " "))))
    if len(text) > limit:
        text = f"{text[:limit]}… [+{len(text) - limit} chars]"
    return text


def short(text: str, n: int) -> str:
    """``text`` cut to ``n`` characters with an ellipsis."""
    return text if len(text) <= n else text[: max(0, n - 1)] + "…"


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
