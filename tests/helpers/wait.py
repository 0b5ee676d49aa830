"""Bounded waits for tests: wait for a condition, never sleep and then assert.

``wait_until``/``await_until`` poll a condition until it holds or the bound passes and return its
last value (assert on it). ``holds_for``/``aholds_for`` check that something does NOT happen: the
condition must stay true for the whole window (a dead process, a refused signal).

``until(pilot, cond)`` is the one wait of the Textual Pilot tests: it lets the app run until the condition
it names holds (a screen is pushed, a widget shows a text, a view was applied) and fails with that condition,
never after a fixed number of frames.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Awaitable, Callable, TypeVar

T = TypeVar("T")


def wait_until(cond: Callable[[], T], timeout: float, step: float = 0.02) -> T:
    """Poll ``cond()`` until truthy or ``timeout`` seconds pass; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


async def await_until(cond: Callable[[], T | Awaitable[T]], timeout: float, step: float = 0.02) -> T:
    """:func:`wait_until` inside an event loop (the loop keeps running between polls); ``cond`` may be a
    coroutine function (a request to the host each poll)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if inspect.isawaitable(value):
            value = await value
        if value or time.monotonic() > deadline:
            return value  # type: ignore[return-value]
        await asyncio.sleep(step)


def holds_for(cond: Callable[[], object], seconds: float, step: float = 0.02) -> bool:
    """True when ``cond()`` is truthy at every poll during ``seconds`` (False at the first miss)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not cond():
            return False
        time.sleep(step)
    return bool(cond())


async def aholds_for(cond: Callable[[], object], seconds: float, step: float = 0.02) -> bool:
    """:func:`holds_for` inside an event loop (the loop keeps running between polls)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not cond():
            return False
        await asyncio.sleep(step)
    return bool(cond())


def _describe(cond: Callable[[], object]) -> str:
    """The condition's own text (a lambda's source from ``lambda`` on), for the failure message."""
    try:
        src = inspect.getsource(cond).strip()
    except (OSError, TypeError):
        return getattr(cond, "__qualname__", repr(cond))
    i = src.find("lambda")
    text = " ".join((src[i:] if i >= 0 else src).split())
    depth = 0
    for j, ch in enumerate(text):  # the lambda ends where its enclosing call's parenthesis closes
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth < 0 or (depth == 0 and text.startswith(", what=", j)):
            text = text[:j]
            break
    return text[:300]


UI_TIMEOUT = 10.0
"""How long a Pilot test waits for a condition (generous: two shared cores, several test sessions)."""


async def until(pilot: Any, cond: Callable[[], T], timeout: float = UI_TIMEOUT, *,
                what: str | Callable[[], object] = "", step: float = 0.02) -> T:
    """Let the app under ``pilot`` run until ``cond()`` is truthy; return that value.

    The app processes its pending messages before each look (``pilot.pause()``), and the clock runs between
    looks, so timers fire. A condition that raises (a widget not mounted yet, ``next()`` on nothing) counts as
    not yet true. Past ``timeout`` seconds it raises AssertionError naming the condition (``what``, else its
    source; a callable ``what`` is called then, to say what the app showed) with its last value or the
    exception it last raised.
    """
    deadline = time.monotonic() + timeout
    while True:
        await pilot.pause()
        error: Exception | None = None
        try:
            value = cond()
        except Exception as e:  # noqa: BLE001  (not yet: reported if it never holds)
            value, error = None, e  # type: ignore[assignment]
        if value:
            return value
        if time.monotonic() > deadline:
            last = f"raised {type(error).__name__}: {error}" if error is not None else f"was {value!r}"
            said = what() if callable(what) else what
            raise AssertionError(f"not true after {timeout:g} s: {said or _describe(cond)} (it {last})")
        await pilot.pause(step)


async def stays(pilot: Any, cond: Callable[[], object], seconds: float, step: float = 0.02) -> bool:
    """:func:`holds_for` for a Pilot test: the app runs for ``seconds`` and ``cond()`` must hold at every look
    (something does NOT happen: a view not applied before its timer). False at the first miss."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await pilot.pause()
        if not cond():
            return False
        await pilot.pause(step)
    return bool(cond())
