"""`mtpconsole kill`: stop a session (or a foreign server by pid) and confirm it is gone.

``--gpu N`` names the session on that GPU. A server on it that no console launched (FOREIGN:
no session) is stopped only when the operator confirms it on a terminal, or names it with
``--pid``; without GPU information (no NVML, no nvidia-smi) ``--gpu`` is refused outright,
because which server "is on GPU N" would be a guess.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable

from console.commands._ops import emit_result, require_session, step_printer, term
from console.commands.context import CliContext, connect_hosts, single_host
from console.core.redact import redact_argv
from console.core.sessions import derive_views
from console.core.text import no_gpus_text
from console.errors import UnknownProcess, UserError
from console.host.hostlib import SESSION_ID_RE
from console.link.link import HostLink
from console.model import HostSnapshot, KillTarget, SessionView
from console.ops.lifecycle import kill


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", nargs="?", help="session id")
    p.add_argument("--gpu", type=int, default=None,
                   help="the session on this GPU (a server no console launched needs a terminal's confirmation)")
    p.add_argument("--pid", type=int, default=None, help="a foreign server's (or orphan's) pid")
    p.add_argument("--grace", type=float, default=20.0, help="seconds between SIGTERM and SIGKILL (default 20)")
    p.add_argument("--wait", action="store_true", help="(kill always waits for confirmation; accepted for symmetry)")


Confirm = Callable[[str], bool]
"""Asks the operator a yes/no question; False when nobody can answer."""


def ask_on_terminal(question: str) -> bool:
    """The operator's answer on a terminal (stderr prompt, stdin answer); False without a terminal."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return False
    sys.stderr.write(question + " [y/N] ")
    sys.stderr.flush()
    try:
        return sys.stdin.readline().strip().lower() in ("y", "yes")
    except (OSError, EOFError):
        return False


def on_gpu(snap: HostSnapshot, host: str, gpu: int, confirm: Confirm) -> KillTarget:
    """The kill target for ``--gpu``: the one live server on it, a foreign one only when confirmed."""
    if not snap.gpus:
        raise UserError(f"--gpu {gpu}: {host}: {no_gpus_text(snap)} — --gpu cannot tell which server is on a GPU; "
                        "name the SESSION or the --pid")
    if gpu not in {g.index for g in snap.gpus}:
        raise UserError(f"{host} has no GPU {gpu} (GPUs: {', '.join(str(g.index) for g in snap.gpus)})")
    views: list[SessionView] = [v for v in derive_views(snap, {}, time.time()) if gpu in v.gpus
                                and v.state not in ("stopped", "failed")]
    if not views:
        raise UserError(f"nothing runs on GPU {gpu} of {host}", exit_code=1)
    if len(views) > 1:
        raise UserError(f"GPU {gpu} has {len(views)} servers: name one (" + ", ".join(
            v.session_id or f"--pid {v.launcher_pid}" for v in views) + ")")
    v = views[0]
    if v.session_id:
        return KillTarget(host=host, session_id=v.session_id)
    proc = next((p for p in snap.servers if p.pid == v.launcher_pid), None)
    who = f"pid {v.launcher_pid}" + (f" of user {proc.user}" if proc and proc.user else "")
    what = term(" ".join(redact_argv(proc.argv if proc else v.argv)))[:160]
    if not confirm(f"GPU {gpu} of {host} runs a server no console launched ({who}: {what}). Kill it?"):
        raise UserError(f"GPU {gpu} of {host} runs a server no console launched ({who}): not killed. "
                        f"Kill it by name with --pid {v.launcher_pid}, or confirm on a terminal")
    return KillTarget(host=host, pid=v.launcher_pid, start_ticks=v.launcher_start_ticks)


def check_session_id(session: str) -> str:
    """``session`` when it can be a session id (the host's own rule), else the operator's one clear line (rc 2)."""
    if not SESSION_ID_RE.match(session):
        shown = term(session)[:80]
        raise UserError(f"bad session id {shown!r}: expected a session id such as 20261129-201530-gpu0-7f3a "
                        "(see `mtpconsole sessions`)" if session else "the SESSION id is empty: name a session "
                        "(see `mtpconsole sessions`), or give --gpu N or --pid PID")
    return session


async def resolve_target(link: HostLink, session: str | None, gpu: int | None, pid: int | None,
                         confirm: Confirm = ask_on_terminal) -> KillTarget:
    """What ``kill`` stops: a session by id, a server process by pid, or the one server on a GPU."""
    if sum(x is not None for x in (session, gpu, pid)) != 1:
        raise UserError("give exactly one of SESSION, --gpu N or --pid PID")
    if session is not None:
        await require_session(link, check_session_id(session))  # an unknown id is bad input (rc 2)
        return KillTarget(host=link.name, session_id=session)
    snap = await link.refresh()
    if pid is not None:
        p = next((x for x in snap.servers if x.pid == pid), None)
        if p is None:
            raise UnknownProcess(f"--pid {pid}: no server process {pid} on {link.name} (see 'mtpconsole status "
                                 f"--host {link.name}')")
        return KillTarget(host=link.name, pid=p.pid, start_ticks=p.start_ticks)
    assert gpu is not None
    return on_gpu(snap, link.name, gpu, confirm)


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from console.core.group import is_group_id

    if is_group_id(args.session):  # a multi-node group: every member, on its own host (issue 30)
        from console.commands import group

        return await group.kill(ctx, args)
    single_host(ctx)
    if ctx.read_only:
        raise UserError("read-only: kill is disabled", kind="read_only")
    if args.session is not None:
        check_session_id(args.session)  # before any host is asked
    async with connect_hosts(ctx) as links:
        target = await resolve_target(links[0], args.session, args.gpu, args.pid)
        r = await kill(links[0], target, step_printer(ctx.json_output), grace=args.grace)
    return emit_result(ctx.json_output, r)
