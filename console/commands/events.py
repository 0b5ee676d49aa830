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
from console.core.events import (
    audit_events,
    kernel_oom_events,
    merge,
    parse_since,
    ready_event,
    session_events,
)
from console.core.redact import redact_obj
from console.errors import UserError
from console.link.errors import LinkDown, RequestError
from console.model import AuditEntry, HostEvent

READY_SCAN = 20
"""At most this many sessions' logs are read for their READY time."""
LOG_HEAD = 1 << 20
AUDIT_TAIL = 8 << 20
"""Only the last 8 MiB of the audit log are read."""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", default="24h", help="how far back: 90s, 15m, 1h, 2d or an ISO time (default 24h)")


def read_audit(path: Path, since: float) -> tuple[list[AuditEntry], str | None]:
    """The audit entries from ``since`` on (the file's tail), or a note why there are none."""
    return read_entries(path, since, max_bytes=AUDIT_TAIL)


async def gather(link, since: float, audit_path: Path) -> tuple[list[HostEvent], list[str]]:
    """Every source for one host, merged; notes say which source could not be read."""
    notes: list[str] = []
    client = link.client
    sessions = await client.sessions()
    lists: list[list[HostEvent]] = [session_events(link.name, s) for s in sessions]
    recent = [s for s in sessions if s.record and (s.exit is None or s.exit.ended_at >= since)]
    for s in sorted(recent, key=lambda s: s.session_id, reverse=True)[:READY_SCAN]:
        try:
            head = await client.read_log(s.session_id, offset=0, max_bytes=LOG_HEAD)
        except (RequestError, LinkDown):
            continue
        ev = ready_event(link.name, s, head.data)
        if ev is not None:
            lists.append([ev])
    try:
        r = await client.run(["dmesg", "--time-format=iso"], timeout=10, audit=False)
        if r.rc == 0:
            lists.append(kernel_oom_events(link.name, r.stdout))
        else:
            why = r.stderr.strip().splitlines()
            notes.append(f"kernel log not readable: {why[0] if why else 'dmesg exit ' + str(r.rc)}")
    except (RequestError, LinkDown) as e:
        notes.append(f"kernel log not readable: {e}")
    entries, note = read_audit(audit_path, since)
    if note:
        notes.append(note)
    lists.append(audit_events(link.name, entries))
    return merge(*lists, since=since), notes


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
        print(f"{term(link.name)}: no events since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}")
    for ev in events:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ev.at))
        print(f"{stamp}  {ev.kind:<13} {term(ev.text)}  [{ev.source}]")
    for n in notes:
        print(f"note: {term(n)}")
    return 0
