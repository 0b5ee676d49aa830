"""`mtpconsole sessions`: every session on a host with its true state (classified from its own log); each GPU's
current READY session with the facts its server offers (``/server_info`` + ``/model_info``, with their age).

``--prune SESSION`` removes a BROKEN run directory (one that never got a record: a full disk, an agent killed
mid-launch; or a malformed one) once nothing of it runs, re-checked on the host by the agent's ``prune`` op;
anything else is refused (rc 2) and nothing is removed.
"""

from __future__ import annotations

import argparse
import json
import time

from console.commands._ops import term
from console.commands.context import CliContext, connect_hosts, single_host
from console.core.current import current_by_gpu
from console.core.redact import redact_obj
from console.core.server_info import facts_line
from console.core.sessions import derive_views
from console.errors import UnknownSession, UserError
from console.host.hostlib import SESSION_ID_RE
from console.link.errors import NotFound, Refused, RequestError
from console.ops.server_facts import attach_facts, link_facts


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--all", action="store_true", help="include every ended session (default: live + recent)")
    p.add_argument("--state", choices=["live", "failed", "stopped", "ended", "ready", "foreign"], default=None,
                   help="only these sessions (live: still running; ended: failed or stopped)")
    p.add_argument("--prune", metavar="SESSION", default=None,
                   help="remove this BROKEN run directory (never recorded, malformed) of which nothing runs; "
                        "anything else is refused")


LIVE = ("launching", "loading", "ready", "stopping", "foreign", "stale", "unreachable")


def wanted(state: str, flt: str | None) -> bool:
    """Whether a session in ``state`` passes ``--state``."""
    if flt is None:
        return True
    if flt == "live":
        return state in LIVE
    if flt == "ended":
        return state in ("failed", "stopped")
    return state == flt


def age(started: float | None, now: float) -> str:
    """Since when the session exists, short (``42s``, ``17m``, ``3h``, ``2d``)."""
    if started is None:
        return "-"
    d = max(0.0, now - started)
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if d >= n:
            return f"{d / n:.0f}{unit}"
    return f"{d:.0f}s"


async def classify_sessions(link, snap) -> dict:
    """Classify each session from the tail of its own log plus its exit record."""
    from console.core.classify import classify

    out = {}
    for s in snap.sessions:
        try:
            chunk = await link.client.read_log(s.session_id, tail_bytes=256 * 1024)
            out[s.session_id] = classify(chunk.data, s.exit)
        except Exception:
            continue
    return out


async def prune(ctx: CliContext, session_id: str) -> int:
    """``--prune SESSION``: the agent removes the broken run directory (its own checks decide); prints what went."""
    if not SESSION_ID_RE.match(session_id):
        raise UserError(f"--prune {session_id!r}: not a session id")
    if ctx.read_only:
        raise UserError("read-only: --prune is disabled", kind="read_only")
    async with connect_hosts(ctx) as links:
        link = links[0]
        try:
            r = await link.client.prune(session_id)
        except NotFound:
            raise UnknownSession(session_id, link.name) from None
        except Refused as e:  # not broken, another user's, or something of it still runs: nothing removed
            alive = "still run" in str(e)
            raise UserError(f"{link.name}: {e}", exit_code=1 if alive else 2,
                            kind="refused" if alive else "bad_input") from None
        except RequestError as e:
            raise UserError(f"{link.name}: prune {session_id}: {e}", exit_code=1, kind="failed") from None
    if ctx.json_output:
        print(json.dumps(redact_obj({"host": link.name, **r.model_dump(mode="json")}), indent=2))
    else:
        print(f"{term(link.name)}: removed the broken run directory {term(r.run_dir)} ({term(r.reason)}): "
              + (", ".join(term(n) for n in r.removed) or "it was empty"))
    return 0


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    if len(ctx.hosts) > 1 and args.prune is None:  # several hosts: the multi-node groups they hold (issue 30)
        from console.commands import group

        return await group.sessions(ctx, args)
    single_host(ctx)
    if args.prune is not None:
        if args.all or args.state:
            raise UserError("--prune takes no --all or --state")
        return await prune(ctx, args.prune)
    async with connect_hosts(ctx) as links:
        link = links[0]
        snap = await link.refresh()
        if args.all:  # the history: every run directory, not only the recent ones a sample carries
            every = await link.client.sessions()  # a bad one is listed broken
            snap = snap.model_copy(update={"sessions": every})
        classes = await classify_sessions(link, snap)
        now = time.time()
        derived = derive_views(snap, classes, now, interval=1e9)
        views = [v for v in derived if wanted(v.state, args.state)]
        # issue 28: each READY current session's /server_info + /model_info, read now (status's code path)
        facts = await link_facts(link, current_by_gpu(derived, [g.index for g in snap.gpus]))
    now = time.time()
    if ctx.json_output:
        rows = [v.model_dump(mode="json") for v in views]
        attach_facts(rows, facts, now)
        print(json.dumps(redact_obj(rows), indent=2))
        return 0
    if not views:
        print(f"{term(link.name)}: no sessions")
    else:
        print(f"{'SESSION / PID':<36} {'STATE':<10} {'GPU':<9} {'PORT':<10} {'AGE':<5} {'ACK':<3} "
              "CAUSE / FLAGS")
    for v in views:
        what = term(v.session_id or f"foreign pid {v.launcher_pid}")
        extra = f" {v.cause}" + (f": {v.line}" if v.line else "") if v.state == "failed" and v.cause else ""
        state = "BROKEN" if v.broken and v.state == "failed" else v.state.upper()
        if v.broken:
            extra = f" {v.hint}"
        ack = "✓" if v.acknowledged else "-"
        print(f"{what:<36} {state:<10} GPU {','.join(map(str, v.gpus)) or '-':<5} "
              f"port {v.port or '-':<6} {age(v.up_since, now):<5} {ack:<3} {term(v.flags_summary + extra)}")
        line = facts_line(facts.get(v.session_id or ""), now)
        if line:
            print(f"{'':<36} {term(line)}")
    return 0
