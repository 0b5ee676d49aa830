"""An operation's steps, the confirmation each step waits for, and the one loop that waits.

A :class:`Stepper` holds the :class:`~console.model.Step` list of one operation (launch, kill) and reports the
whole list on every change. A :class:`Check` is one confirmation as data: the step it proves, the probe that
returns evidence (None: not yet), how long it may take and how often it asks. :func:`wait_for` is the only
loop that asks: every confirmation of a launch, a kill and a relaunch goes through it.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Literal, Protocol

from console.link.link import HostLink, LinkDown
from console.model import HostSnapshot, OperationResult, Step

Phase = Literal["kill", "launch"]
"""Which part of an operation a step belongs to (a relaunch has both)."""
OnSteps = Callable[[list[Step]], None]
"""Told an operation's whole step list on every change."""
Probe = Callable[[], Awaitable[str | None]]
"""Asks the host (or reads the log) once: the evidence that the step holds, or None while it does not yet."""


@dataclass(frozen=True)
class Check:
    """One confirmation: ``probe`` is asked until it returns evidence, at most ``timeout`` s, ``poll`` s apart.

    ``wake_on_change``: a local condition (the log's contents) is asked again as soon as the session's log or
    state changes; a remote probe (port, /health, GPU) waits ``poll`` between tries, so a chatty log cannot
    turn it into a flood of requests. ``failure``: the evidence recorded when the check is not confirmed in
    time (the step fails and the operation goes on); without it an unconfirmed check raises :class:`StepFailed`.
    """

    name: str
    probe: Probe
    timeout: float = math.inf
    poll: float = 0.1
    wake_on_change: bool = False
    failure: Callable[[], str] | None = None
    watched: bool = True
    """Asked under the operation's watch (the server's exit fails it at once, a dropped link is waited out);
    False: the probe itself judges a server that is gone (a launch's ``spawned``)."""


class Skip(Exception):
    """Raised by a probe whose check does not apply here (no GPU information, no port known): the step is
    skipped with this message as its evidence."""


class StepFailed(Exception):
    """A step could not be confirmed (``step``: its name): the operation fails there."""

    def __init__(self, step: str, message: str):
        super().__init__(message)
        self.step = step


class Watch(Protocol):
    """What a confirmation watches besides its probe: the server's end and any change of its session."""

    exited: asyncio.Event
    changed: asyncio.Event

    async def reattach(self, deadline: float) -> bool:
        """After the link dropped: wait for it to come back (before ``deadline``); False when it will not."""
        ...


def effective_timeout(check: Check, deadline: float | None) -> float:
    """The check's own timeout, cut to what is left of the operation's ``deadline`` (at least 1 s)."""
    if deadline is None:
        return check.timeout
    return min(check.timeout, max(1.0, deadline - time.monotonic()))


async def wait_for(check: Check, watch: Watch | None = None, deadline: float | None = None) -> str | None:
    """Ask ``check.probe`` until it returns evidence (returned) or its time is up (None).

    With a ``watch``: the server's exit fails the step at once (:class:`StepFailed`), and a dropped link is
    waited out when it is being kept up (then the probe is asked again). Without one a dropped link raises.
    """
    timeout = effective_timeout(check, deadline)
    until = time.monotonic() + timeout
    while True:
        if watch is not None and watch.exited.is_set():
            raise StepFailed(check.name, "the server exited")
        try:
            ev = await check.probe()
        except LinkDown:
            if watch is None or not await watch.reattach(until):
                raise
            continue
        if ev:
            return ev
        if time.monotonic() > until:
            return None
        await _pause(check, watch)


async def _pause(check: Check, watch: Watch | None) -> None:
    """``check.poll`` seconds, or less: until the server exits, or (``wake_on_change``) its session changes."""
    if watch is None:
        await asyncio.sleep(check.poll)
        return
    wake = watch.changed if check.wake_on_change else watch.exited
    watch.changed.clear()
    try:
        await asyncio.wait_for(wake.wait(), check.poll)
    except asyncio.TimeoutError:
        pass


class Stepper:
    """Tracks a list of Steps (of one ``phase``) and reports the whole list on every change."""

    def __init__(self, names: list[str], on_steps: OnSteps | None, phase: Phase | None = None):
        self.phase = phase
        self.steps = [self._step(n) for n in names]
        self.on_steps = on_steps or (lambda steps: None)
        self._t0: dict[str, float] = {}

    def _step(self, name: str, **fields: Any) -> Step:
        return Step(name=name, phase=self.phase, **fields)

    def _i(self, name: str) -> int:
        return next(i for i, s in enumerate(self.steps) if s.name == name)

    def _emit(self) -> None:
        self.on_steps(list(self.steps))

    def add(self, name: str) -> None:
        if all(s.name != name for s in self.steps):
            self.steps.append(self._step(name))

    def start(self, name: str, evidence: str | None = None) -> None:
        self._t0[name] = time.monotonic()
        i = self._i(name)
        self.steps[i] = self._step(name, state="running", started_at=time.time(), evidence=evidence)
        self._emit()

    def finish(self, name: str, state: str, evidence: str | None = None) -> None:
        i = self._i(name)
        t0 = self._t0.get(name, time.monotonic())
        self.steps[i] = self.steps[i].model_copy(update={
            "state": state, "elapsed_s": round(time.monotonic() - t0, 3), "evidence": evidence})
        self._emit()

    def passed(self) -> int:
        return sum(1 for s in self.steps if s.state in ("ok", "skipped"))

    def running(self) -> str | None:
        """The step in progress (the one a lost contact or an exit fails), if any."""
        return next((s.name for s in self.steps if s.state == "running"), None)

    def skip_pending(self) -> None:
        """The operation ended early: the steps it never reached read skipped."""
        for i, s in enumerate(self.steps):
            if s.state == "pending":
                self.steps[i] = s.model_copy(update={"state": "skipped"})

    async def confirm(self, check: Check, watch: Watch | None = None, deadline: float | None = None) -> bool:
        """Run ``check`` as its step: ok with the probe's evidence, skipped (:class:`Skip`), or not confirmed in
        time: failed with ``check.failure()`` (False), else :class:`StepFailed` is raised."""
        self.start(check.name)
        timeout = effective_timeout(check, deadline)
        try:
            ev = await wait_for(check, watch if check.watched else None, deadline)
        except Skip as e:
            self.finish(check.name, "skipped", str(e))
            return True
        if ev:
            self.finish(check.name, "ok", ev)
            return True
        if check.failure is None:
            raise StepFailed(check.name, f"not confirmed within {timeout:.0f} s")
        self.finish(check.name, "failed", check.failure())
        return False


async def fresh_snapshot(link: HostLink) -> HostSnapshot:
    """A snapshot the agent takes now (not the link's last sample)."""
    return await link.refresh()


def record_result(link: HostLink, result: OperationResult) -> OperationResult:
    """Write an operation's confirmed steps into the audit log (op ``result:<op>``), so a later
    report can put every step of a launch or kill on its timeline. Returns ``result``."""
    if link.audit is not None and result.steps:
        steps = [s.model_dump(mode="json", include={"name", "state", "started_at", "elapsed_s", "evidence"})
                 for s in result.steps]
        link.audit(link.name, "result:" + result.op, {"session_id": result.session_id, "steps": steps},
                   result.ok, result.state or result.error, None)
    return result
