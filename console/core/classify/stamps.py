"""When a log line was written, on the log's own clock: how long a log went on after a given line.

SGLang (``[2025-10-22 10:29:28 TP0]``), vLLM (``INFO 09-28 15:47:24``), Python logging and container
wrappers print a timestamp at the start of each line, in the server's local time. The time zone is not
known here, so a timestamp says nothing about *now*; two timestamps of the same log say how far apart two
lines were written. That is what :func:`lag_after` gives: the seconds between a line and the newest
timestamped line after it - positive evidence that a figure read from that line is at least that old.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence

from console.core.classify.lines import read_line
from console.core.classify.patterns import SGLANG, VLLM

STAMP = re.compile(r"(?:(\d{4})-)?(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?")
"""A date and time near a line's start (the year is optional: vLLM prints ``MM-DD HH:MM:SS``)."""

SEARCH_CHARS = 160
"""A line's timestamp is looked for in its first characters only (wrappers included)."""

NO_YEAR = 2000
"""The year given to a timestamp without one (a leap year, so 02-29 parses)."""


def stamp_of(raw: str) -> float | None:
    """Seconds of the line's first timestamp on the log's own clock (UTC arithmetic, time zone unknown)."""
    m = STAMP.search(raw, 0, SEARCH_CHARS)
    if m is None:
        return None
    year, mon, day, hh, mm, ss, frac = m.groups()
    try:
        t = calendar.timegm((int(year or NO_YEAR), int(mon), int(day), int(hh), int(mm), int(ss), 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    if not (1 <= int(mon) <= 12 and 1 <= int(day) <= 31):
        return None
    return t + (float("0." + frac) if frac else 0.0)


def lag_after(lines: Sequence[str], index: int) -> float | None:
    """Seconds between ``lines[index]`` and the newest timestamped line after it (0.0 when it is the last
    non-empty line). None when that cannot be shown: the line has no timestamp but lines follow it, or
    nothing after it is timestamped."""
    later = [x for x in lines[index + 1:] if x.strip()]
    if not later:
        return 0.0
    at = stamp_of(lines[index])
    if at is None:
        return None
    newest = max((t for t in map(stamp_of, later) if t is not None), default=None)
    if newest is None:
        return None
    return max(0.0, newest - at)


def is_metrics_line(raw: str) -> bool:
    """A serving line that carries figures (SGLang's ``Decode batch``, vLLM's throughput and acceptance)."""
    body = read_line(raw).body
    if "Mean acceptance length" in body:
        return True
    return any(fw.serving.search(body) is not None and fw.metrics_line.search(body) is not None
               for fw in (SGLANG, VLLM))


def metrics_lag(lines: Sequence[str]) -> float | None:
    """How long the log went on after its last metrics line (:func:`lag_after`); None when it has none or the
    lag cannot be shown."""
    for i in range(len(lines) - 1, -1, -1):
        if is_metrics_line(lines[i]):
            return lag_after(lines, i)
    return None
