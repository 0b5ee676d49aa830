"""`mtpconsole demo up|down|status`: the persistent demo host that every ``--demo`` command shares.

    mtpconsole demo up [--idle S] [--no-load] [--json]   # stage it now (or reuse the running one); --idle sets its timeout
    mtpconsole demo status [--json]                      # where it lives, its processes, its idle deadline
    mtpconsole demo down [--json]                        # kill everything it started, remove its files

The first ``--demo`` command stages the demo if none runs; it stays up until ``demo down`` or until no command has
used it for its idle timeout (15 min; ``$MTPCONSOLE_DEMO_IDLE_S``, ``demo up --idle S``). ``demo status`` uses
nothing (its deadline does not move). Exit codes: ``up`` and ``down`` 0 when done; ``status`` 0 when the demo is
up, 1 when none runs (``down``) or what is recorded no longer runs (``stale``: the next ``--demo`` command
re-stages it); 2 on bad input. See console/sim/persistent.py for how it is kept.
"""

from __future__ import annotations

import argparse
import json
import time

from console.commands.context import CliContext
from console.errors import UserError

ACTIONS = ("up", "down", "status")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=ACTIONS, help="up: stage (or reuse) it; down: remove it; status: show it")
    p.add_argument("--idle", type=float, default=None, metavar="S",
                   help="with 'up': seconds unused before the demo removes itself (default $MTPCONSOLE_DEMO_IDLE_S, "
                        "else 900); changes a running demo's too")
    p.add_argument("--no-load", action="store_true",
                   help="with 'up': stage the hand-started server without its load generator")


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def _in(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")


def render_status(st: dict, now: float | None = None) -> str:
    """The text of ``demo status`` (and of ``demo up``)."""
    now = time.time() if now is None else now
    if st["state"] == "down":
        return f"demo host: down (none runs; the next --demo command stages one in {st['dir']})"
    if st["state"] == "stale" and not st.get("keeper"):
        return f"demo host: stale (files in {st['dir']} without a running keeper: the next --demo command removes them)"
    keeper = st["keeper"]
    lines = [f"demo host: {st['state']} since {_clock(st['created_at'])} (keeper pid {keeper['pid']}"
             + ("" if keeper["alive"] else ", gone") + ")",
             f"  lives in {st['root']}"]
    if st["state"] == "stale":
        lines.append("  its keeper is gone: the next --demo command removes what is left and stages a new one")
        return "\n".join(lines)
    procs = [f"{keeper['pid']} (keeper)"]
    if st.get("foreign"):
        f = st["foreign"]
        procs.append(f"{f['pid']} (hand-started server, port {st['port']}" + ("" if f["alive"] else ", gone") + ")")
    if st.get("load_gen"):
        g = st["load_gen"]
        procs.append(f"{g['pid']} (load generator" + ("" if g["alive"] else ", done") + ")")
    named = {keeper["pid"]} | {st[k]["pid"] for k in ("foreign", "load_gen") if st.get(k)}
    others = [p for p in st["pids"] if p not in named]
    lines.append(f"  processes: {', '.join(procs)}" + (f" and {len(others)} more of its own" if others else ""))
    if st["idle_deadline"] is not None:
        use = "in use now; " if st["in_use"] else ""
        lines.append(f"  idle deadline: {_clock(st['idle_deadline'])} (in {_in(st['idle_deadline'] - now)}; {use}"
                     f"{_in(st['idle_s'])} after the last --demo command)")
    lines.append("  'mtpconsole demo down' removes it now")
    return "\n".join(lines)


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from console.sim import persistent

    if args.action != "up" and (args.idle is not None or args.no_load):
        raise UserError(f"--idle and --no-load apply to 'demo up' only, not 'demo {args.action}'")
    if args.action == "up":
        if not persistent.enabled():
            raise UserError(f"the persistent demo is off ({persistent.IDLE_ENV}=0: each --demo command stages its "
                            "own): unset it to share one")
        if args.idle is not None:
            persistent.check_idle(args.idle)
        lease = persistent.acquire(load=not args.no_load, idle_s=args.idle)
        assert lease is not None  # staging allowed
        lease.release()
        st = dict(persistent.status(), staged=lease.staged)
        print(json.dumps(st, indent=1) if ctx.json_output else
              ("staged " if lease.staged else "reused ") + render_status(st))
        return 0
    if args.action == "down":
        res = persistent.stop()
        if ctx.json_output:
            print(json.dumps(res, indent=1))
        elif res["was"] == "down":
            print(f"demo host: none ran (in {res['dir']}): nothing to do")
        else:
            pids = ", ".join(map(str, res["signalled"])) or "none left"
            print(f"demo host: {res['was']}, now down: processes signalled: {pids}; removed {res['root'] or res['dir']}")
        return 0
    st = persistent.status()
    print(json.dumps(st, indent=1) if ctx.json_output else render_status(st))
    return 0 if st["state"] == "up" else 1
