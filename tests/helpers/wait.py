"""Bounded waits for tests: wait for a condition, never sleep and then assert.

``wait_until``/``await_until`` poll a condition until it holds or the bound passes and return its
last value (assert on it). ``holds_for``/``aholds_for`` check that something does NOT happen: the
condition must stay true for the whole window (a dead process, a refused signal).
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(cond: Callable[[], T], timeout: float, step: float = 0.02) -> T:
    """Poll ``cond()`` until truthy or ``timeout`` seconds pass; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


async def await_until(cond: Callable[[], T], timeout: float, step: float = 0.02) -> T:
    """:func:`wait_until` inside an event loop (the loop keeps running between polls)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(step)


def holds_for(cond: Callable[[], object], seconds: float, step: float = 0.02) -> bool:
    """True when ``cond()`` is truthy at every poll during ``seconds`` (False at the first miss)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not cond():
            return False
        time.sleep(step)
    return bool(cond())
