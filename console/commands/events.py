"""`mtpconsole events`: what happened on a host, oldest first — launches, exits, OOM kills (exit records
and the kernel log where readable), READY, acknowledgements and actions sent by consoles on this machine."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from console.audit import read_entries
from console.commands._ops import term
from console.commands.context import CliContext, connect_hosts, single_host
from console.core.events import host_events, kernel_oom_events, parse_since, ready_event, stamp
from console.core.redact import redact_obj
from console.errors import UserError
from console.link.errors import LinkDown, RequestError
from console.model import AuditEntry, Classification, HostEvent

READY_SCAN = 20
"""At most this many sessions' logs are read for their READY time (and of the failed ones, for their cause)."""
LOG_HEAD = 1 << 20
LOG_TAIL = 256 << 10
"""A failed session's cause is classified from the last 256 KiB of its log (as ``sessions`` does)."""
AUDIT_TAIL = 8 << 20
"""Only the last 8 MiB of the audit log are read."""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", default="24h", help="how far back: 90s, 15m, 1h, 2d or an ISO time (default 24h)")


def read_audit(path: Path, since: float) -> tuple[list[AuditEntry], str | None]:
    """The audit entries from ``since`` on (the file's tail), or a note why there are none."""
    return read_entries(path, since, max_bytes=AUDIT_TAIL)


async def gather(link, since: float, audit_path: Path) -> tuple[list[HostEvent], list[str]]:
    """Every source for one host, built into one list by :func:`console.core.events.host_events` (the TUI's
    ``v`` builds its own there too); notes say which source could not be read, and what was left out."""
    from console.core.classify import classify

    notes: list[str] = []
    client = link.client
    sessions = await client.sessions()
    snap = await link.refresh()  # its processes: the proven orphans
    found: list[HostEvent] = []
    classes: dict[str, Classification] = {}
    recent = [s for s in sessions if s.record and (s.exit is None or not s.exit.ended_at < since)]
    for s in sorted(recent, key=lambda s: s.session_id, reverse=True)[:READY_SCAN]:
        try:
            head = await client.read_log(s.session_id, offset=0, max_bytes=LOG_HEAD)
            tail = await client.read_log(s.session_id, tail_bytes=LOG_TAIL) if s.exit is not None else None
        except (RequestError, LinkDown):
            continue
        ev = ready_event(link.name, s, head.data)
        if ev is not None:
            found.append(ev)
        if tail is not None:
            classes[s.session_id] = classify(tail.data, s.exit)
    try:
        r = await client.run(["dmesg", "--time-format=iso"], timeout=10, audit=False)
        if r.rc == 0:
            found += kernel_oom_events(link.name, r.stdout)
        else:
            why = r.stderr.strip().splitlines()
            notes.append(f"kernel log not readable: {why[0] if why else 'dmesg exit ' + str(r.rc)}")
    except (RequestError, LinkDown) as e:
        notes.append(f"kernel log not readable: {e}")
    entries, note = read_audit(audit_path, since)
    if note:
        notes.append(note)
    events, left_out = host_events(link.name, sessions, classes=classes, snap=snap, found=found, audit=entries,
                                   since=since)
    return events, notes + left_out


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    single_host(ctx)
    now = time.time()
    try:
        since = parse_since(args.since, now)
    except ValueError as e:
        raise UserError(str(e)) from None
    audit_path = Path(ctx.audit_log)
    async with connect_hosts(ctx) as links:
        link = links[0]
        events, notes = await gather(link, since, audit_path)
    if ctx.json_output:
        print(json.dumps(redact_obj({"host": link.name, "since": since, "events": [e.model_dump(mode="json")
                                                                              for e in events], "notes": notes}),
                         indent=2))
        return 0
    if not events:
        print(f"{term(link.name)}: no events since {stamp(since)}")
    for ev in events:
        print(f"{stamp(ev.at)}  {ev.kind:<14} {term(ev.text)}  [{ev.source}]")
    for n in notes:
        print(f"note: {term(n)}")
    return 0
