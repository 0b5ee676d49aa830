"""Gathering a report's inputs for one session: run directory, log, audit log, GPU ring, planner.

Everything is read through the host's link (the agent's ops) and the console's own audit log;
nothing here formats text (that is :mod:`console.core.report`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from console.audit import read_entries
from console.core.classify import classify_last_run
from console.core.flags.launcher import split_launch_command
from console.core.report import ReportInputs, TimelineEvent, exit_events, gpu_window, plausible_time
from console.link.client import HostClient
from console.link.errors import LinkDown, RequestError
from console.link.link import HostLink
from console.model import AuditEntry, GpuPoint, HostSnapshot, LaunchRequest, SessionInfo, Step
from console.ops.lifecycle import memory_verdict
from console.ops.server_facts import probe

LOG_TAIL_BYTES = 2 << 20
"""The report's excerpt and classification read at most the last 2 MiB of the session's log."""
AFTER_END_S = 300.0
"""Audit entries up to 5 minutes after the session ended belong to its story (the GPU table has its own window:
:func:`console.core.report.gpu_window`)."""
MAX_AUDIT_BYTES = 32 << 20


class ReportError(RuntimeError):
    """The report cannot be written (unknown session, host gone); the message says which."""


def find_session(snap: HostSnapshot, session_id: str) -> SessionInfo:
    s = next((x for x in snap.sessions if x.session_id == session_id), None)
    if s is None:
        raise ReportError(f"{snap.name}: no session {session_id!r} in its runs directory")
    return s


def previous_on_gpu(snap: HostSnapshot, s: SessionInfo) -> SessionInfo | None:
    """The newest session launched on one of ``s``'s GPUs before it."""
    if s.spec is None or s.spec.created_at is None:
        return None
    mine, at = set(s.spec.gpus), s.spec.created_at
    older = [(x.spec.created_at, x) for x in snap.sessions if x.spec is not None and x.spec.created_at is not None
             and x.spec.created_at < at and set(x.spec.gpus) & mine and x.session_id != s.session_id]
    return max(older, key=lambda pair: pair[0], default=(0.0, None))[1]


def read_audit(path: str | Path, host: str, session_id: str, since: float, until: float) -> list[AuditEntry]:
    """Audit entries for ``host`` in [since, until] that concern this session (or launch/kill on the host)."""
    entries, _ = read_entries(path, since, until=until, max_bytes=MAX_AUDIT_BYTES)
    return [e for e in entries if e.host == host
            and (session_id in json.dumps(e.args) + (e.result or "") or e.op in ("launch", "kill", "ack"))]


def split_steps(entries: list[AuditEntry], session_id: str) -> tuple[list[AuditEntry], list[Step]]:
    """The audit rows, and the confirmed steps that ``result:<op>`` records carry for this session."""
    rows, steps = [], []
    for e in entries:
        if not e.op.startswith("result:"):
            rows.append(e)
            continue
        if e.args.get("session_id") != session_id:
            continue
        op = e.op.split(":", 1)[1]
        for raw in e.args.get("steps") or []:
            try:
                st = Step.model_validate(raw)
            except ValueError:
                continue
            steps.append(st.model_copy(update={"name": f"{op}: {st.name}"}) if op != "launch" else st)
    return rows, steps


async def _samples(client: HostClient, gpus: list[int], since: float, until: float) -> list[GpuPoint]:
    try:
        r = await client.gpu_samples(since, until)
    except (RequestError, LinkDown, TimeoutError):
        return []
    return [p for p in r.points if not gpus or p.gpu in gpus]


async def _log(client: HostClient, session_id: str) -> str:
    try:
        return (await client.read_log(session_id, tail_bytes=LOG_TAIL_BYTES)).data
    except (RequestError, LinkDown, TimeoutError):
        return ""


async def gather(link: HostLink, session_id: str, *, audit_path: str, since_s: float,
                 now: float | None = None) -> ReportInputs:
    """Everything a report on ``session_id`` says, read from the host and the audit log."""
    now = time.time() if now is None else now
    client = HostClient.of(link)
    snap = await client.snapshot()
    s = find_session(snap, session_id)
    # a hand-edited or corrupt record may hold NaN or 1e300: such a time is unknown, never the window's edge
    started = (plausible_time(s.record.started_at if s.record else None)
               or plausible_time(s.spec.created_at if s.spec else None) or now)
    ended = (plausible_time(s.exit.ended_at) if s.exit else None) or now
    window = (min(started, now - since_s), min(now, ended + AFTER_END_S))
    text = await _log(client, session_id)
    cls, run = classify_last_run(text, s.exit, s.first_abnormal_exit) if text or s.exit else (None, text)
    # the first death decides; a log holding several server runs is read (and excerpted) from the last one
    prev = previous_on_gpu(snap, s)
    planner = None
    if s.spec is not None:
        req = LaunchRequest(host=snap.name, command=[], flags=split_launch_command(s.spec.argv).flags,
                            gpus=s.spec.gpus or [0], port=s.spec.port)
        try:
            verdict, why = await memory_verdict(link, req)
            planner = f"{verdict.replace('_', ' ')}: {why}" if verdict else why
        except (RequestError, LinkDown, TimeoutError) as e:
            planner = f"not planned: {e}"
    events = exit_events(s.exits, s.first_abnormal_exit)
    if s.record is not None:
        events.append(TimelineEvent(at=s.record.started_at, what=f"server spawned: pid {s.record.pid}, "
                                    f"process group {s.record.pgid}", source="record"))
    if s.acknowledged_at is not None:
        events.append(TimelineEvent(at=s.acknowledged_at, what="failure acknowledged", source="record"))
    state = None
    if s.exit is not None:
        state = "stopped" if s.exit.stopped_by_operator else (cls.state if cls else "failed")
        if state == "ready":  # a server that was serving and then died is a failure
            state = "failed"
    elif cls is not None:
        state = cls.state
    audit, steps = split_steps(read_audit(audit_path, snap.name, session_id, *window), session_id)
    inp = ReportInputs(
        host=snap.name, session_id=session_id, spec=s.spec, started_at=started, exit=s.exit, classification=cls,
        state=state, previous=prev.spec if prev else None, planner=planner, steps=steps,
        audit=audit, events=events, log_lines=run.splitlines(), generated_at=now, broken=s.broken)
    # the GPU table shows the samples around the failure (its own window), not the ring since --since
    samples = await _samples(client, s.spec.gpus if s.spec else [], *gpu_window(inp))
    facts = None
    if state == "ready" and s.exit is None and s.spec is not None and s.spec.port:  # issue 28: never a condition
        facts = await probe(client, s.spec.port)
    return inp.model_copy(update={"samples": samples, "server_facts": facts})
