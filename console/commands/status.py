"""`mtpconsole status`: connect, take one snapshot per host, print it, exit.

The text names each GPU's state and session as the TUI's panel does (the one rule of ``console/core/current.py``:
READY, FAILED: cause, IDLE…, and the session or foreign pid on it); a failed session's cause is read from the tail
of its own log.

A host whose agent does not answer the snapshot request within ``--timeout`` (frozen, its channel still
open) is ``stale``: its line says so with the age of the last sample it sent, and the exit status is 1."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from console.commands.context import CliContext, connect_hosts
from console.core.flags.sources import bundled_schema
from console.core.redact import redact_obj
from console.core.text import no_gpus_text
from console.link.link import HostLink, LinkDown, RequestError
from console.model import Advice, GpuCurrent, HostSnapshot
from console.ops.advice_host import advise_link, schema_validator
from console.ops.server_facts import attach_facts, link_facts


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for each host (default 15)")
    p.add_argument("--brief", action="store_true",
                   help="one line per host (connection, sample age, GPUs as glyphs, worst session state, power), "
                        "trouble first: FAILED, UNREACHABLE, STALE, orphans, advice (issue 31)")
    p.add_argument("group", nargs="?", default=None,
                   help="a multi-node group id: its state (the worst member's) and each member's, over the --host values")


async def _one(link: HostLink, timeout: float) -> HostSnapshot:
    if link.chan is not None:
        try:
            return await link.refresh(timeout)
        except TimeoutError:
            link.mark_stale(f"{link.name}: no snapshot: timed out after {timeout:g} s (the agent does not answer)")
        except (LinkDown, RequestError) as e:
            link.mark_down(f"{link.name}: no snapshot: {str(e) or type(e).__name__}")
    return link.snapshot()


def snapshot_json(snap: HostSnapshot) -> dict:
    return redact_obj(snap.model_dump(mode="json"))


DEMO_SETTLE_S = 20.0
"""Under --demo, wait at most this long for the staged load to reach the hand-started server."""


def _serving(figures: list[dict]) -> bool:
    """Every live server reports requests in flight (its figures reflect traffic, not start-up)."""
    return bool(figures) and all(f["figures"].get("running", {}).get("value", 0) > 0 for f in figures)


Extra = tuple[HostSnapshot, list[Advice], list[dict]]


async def _advice(link: HostLink, snap: HostSnapshot, timeout: float, settle_s: float = 0.0) -> Extra:
    """The snapshot the advice was drawn from, the advisor's findings and the serving figures of a host.

    ``settle_s`` > 0 (the demo): re-read until every live server is serving, at most that long."""
    if snap.connection.state != "connected":
        return snap, [], []
    validate = schema_validator(bundled_schema())
    deadline = time.monotonic() + settle_s
    try:
        while True:
            advice, figures = await asyncio.wait_for(advise_link(link, snap, now=time.time(), validate=validate),
                                                     timeout)
            if _serving(figures) or time.monotonic() >= deadline:
                return snap, advice, figures
            await asyncio.sleep(0.5)
            snap = await link.refresh(timeout)
    except (TimeoutError, LinkDown, RequestError):
        return snap, [], []


LOG_TAIL = 256 << 10
"""A failed session's cause is classified from the last 256 KiB of its log (as ``sessions`` does)."""


async def current_sessions(link: HostLink, snap: HostSnapshot, now: float) -> list[GpuCurrent]:
    """Each GPU's current session by the TUI's rule (``current_by_gpu``), each classified from the tail of its
    own log as the TUI's are (READY needs its ready line; a failure reads with its cause)."""
    from console.core.current import current_by_gpu
    from console.core.sessions import derive_views

    if snap.connection.state != "connected" or not snap.gpus:
        return []
    indices = [g.index for g in snap.gpus]
    current = current_by_gpu(derive_views(snap, {}, now, interval=1e9), indices)
    shown = {c.session.session_id for c in current if c.session is not None and c.session.session_id}
    shown_info = [x for x in snap.sessions if x.session_id in shown]
    if not shown_info:
        return current
    from console.core.classify import classify

    classes = {}
    for x in shown_info:
        try:
            chunk = await link.client.read_log(x.session_id, tail_bytes=LOG_TAIL)
        except (TimeoutError, LinkDown, RequestError):
            continue
        classes[x.session_id] = classify(chunk.data, x.exit)
    return current_by_gpu(derive_views(snap, classes, now, interval=1e9), indices)


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    if args.group:  # status GROUP: a multi-node group's state and its members' (issue 30)
        from console.commands import group

        return await group.status(ctx, args.group)
    async with connect_hosts(ctx, require=False) as links:
        snaps = await asyncio.gather(*(_one(lk, args.timeout) for lk in links))
        settle = DEMO_SETTLE_S if ctx.demo else 0.0
        extra = await asyncio.gather(*(_advice(lk, s, args.timeout, settle) for lk, s in zip(links, snaps)))
        current = await asyncio.gather(*(current_sessions(lk, s, time.time()) for lk, (s, _, _) in zip(links, extra)))
        facts = [] if not ctx.json_output or args.brief else await asyncio.gather(
            *(link_facts(lk, cur) for lk, cur in zip(links, current)))
    ok = all(s.connection.state == "connected" for s in snaps)
    if args.brief:  # issue 31: the fleet overview's headless twin
        print_brief(extra, current, ctx)
        return 0 if ok else 1
    if ctx.json_output:
        now = time.time()
        for (_, _, figs), fs in zip(extra, facts):  # issue 28: /server_info + /model_info, each with its age
            attach_facts(figs, fs, now)
        hosts = [dict(snapshot_json(s), advice=redact_obj([a.model_dump(mode="json") for a in adv]),
                      figures=redact_obj(figs)) for s, adv, figs in extra]
        print(json.dumps({"hosts": hosts}, indent=2))
    else:
        for (s, adv, _), cur in zip(extra, current):
            print(render_text(s, current=cur, interval=ctx.interval))
            for a in adv:
                print(render_advice(a))
    return 0 if ok else 1


def print_brief(extra: list[Extra], current: list[list[GpuCurrent]], ctx: CliContext) -> None:
    """``status --brief``: one line per host, trouble first (``console/core/fleet.py``), or its rows as JSON."""
    from console.commands._ops import term
    from console.core.fleet import brief_line, fleet_row, legend, sort_rows
    from console.core.sessions import derive_views
    from console.model import HostView

    now = time.time()
    rows = sort_rows(fleet_row(HostView(snapshot=s, sessions=derive_views(s, {}, now, interval=1e9), current=cur,
                                        advice=adv), now, ctx.interval) for (s, adv, _), cur in zip(extra, current))
    if ctx.json_output:
        print(json.dumps({"hosts": [redact_obj(dict(r.model_dump(mode="json"), glyphs=r.glyphs)) for r in rows]},
                         indent=2))
        return
    width = max((len(r.host) for r in rows), default=0)
    for r in rows:
        print(term(brief_line(r, width)))
    print(f"({legend()})")


def render_advice(a: Advice) -> str:
    from console.commands._ops import term

    who = f"session {a.session_id}" if a.session_id else f"pid {a.pid}" if a.pid else "host"
    where = f"GPU {a.gpu} " if a.gpu is not None else ""
    line = f"  advice: {where}{who}: {term(a.message)}"
    if a.evidence:
        line += f" [{term('; '.join(a.evidence))}]"
    return line


def gpu_state(cur: GpuCurrent | None, snap: HostSnapshot, now: float, interval: float) -> str:
    """A GPU's state and session as its panel names them: ``READY session S (port 30000)``, ``FAILED: gpu_oom
    session S``, ``FOREIGN pid 4242``, ``IDLE``."""
    from console.commands._ops import term
    from console.core.current import badge_for

    s = cur.session if cur is not None else None
    label, _kind = badge_for(s, snap, now, interval)
    if s is None:
        return label
    who = f"session {term(s.session_id)}" if s.session_id else f"pid {s.launcher_pid}"
    return f"{label} {who}" + (f" (port {s.port})" if s.port else "")


def render_text(s: HostSnapshot, now: float | None = None, *, current: list[GpuCurrent] | None = None,
                interval: float = 1.0) -> str:
    """One host as text: its link, then each GPU with its state and session (``current``: each GPU's current
    session; without it, derived here from the snapshot alone, with no log read), its figures and processes,
    its servers and sessions."""
    c = s.connection
    from console.commands._ops import term
    from console.core.redact import redact_argv

    now = time.time() if now is None else now
    age = s.age_s(now)
    when = ("no sample received" if age is None else f"last sample {age:.0f} s ago") if c.state == "stale" else ""
    lines = [f"{term(s.name)}: {c.state}" + (f" ({c.rtt_ms:.0f} ms)" if c.rtt_ms is not None else "")
             + (f" ({when})" if when else "") + (f" — {term(c.error)}" if c.error else "")]
    if c.state != "connected":
        return lines[0]
    if not s.gpus:
        lines.append(f"  GPUs: none ({term(no_gpus_text(s))})")
    if current is None and s.gpus:
        from console.core.current import current_by_gpu
        from console.core.sessions import derive_views

        current = current_by_gpu(derive_views(s, {}, now, interval=1e9), [g.index for g in s.gpus])
    by_gpu = {x.index: x for x in current or []}
    for g in s.gpus:
        def f(v, unit, fmt="{:.0f}"):
            return "N/A" if v is None else fmt.format(v) + unit
        lines.append(f"  GPU {g.index} {term(g.name or '')}: {gpu_state(by_gpu.get(g.index), s, now, interval)} · "
                     f"{f(g.power_w, ' W')}/{f(g.power_limit_w, ' W')}  "
                     f"util {f(g.util_pct, '%')}  mem {f(g.mem_used_mib, '')}/{f(g.mem_total_mib, ' MiB')}  "
                     f"{f(g.temp_c, '°C')}  procs {', '.join(str(p.pid) for p in g.procs) or '-'}")
    for p in s.servers:
        lines.append(f"  pid {p.pid} [{p.role}] {term(' '.join(redact_argv(p.argv)))[:100]}")
    for ss in s.sessions:
        state = (("foreign (another user's run directory): " if ss.untrusted else "broken: ") + term(ss.broken)
                 if ss.broken else
                 "ended (host rebooted / record stale)" if ss.record_stale else
                 "ended" if ss.exit else ("alive" if ss.server_alive else "starting"))
        lines.append(f"  session {term(ss.session_id)}: {state}")
    return "\n".join(lines)
