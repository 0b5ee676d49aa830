"""`mtpconsole kill`: stop a session (or a foreign server by pid) and confirm it is gone."""

from __future__ import annotations

from console.commands._ops import emit_result, single_host, step_printer
from console.errors import UserError
from console.hostctx import connect_hosts
from console.model import KillTarget
from console.ops.lifecycle import _fresh, kill
from console.ops.sessions import derive_views

HELP = "stop a session or a foreign server, confirmed"


def configure(p) -> None:
    p.add_argument("session", nargs="?", help="session id")
    p.add_argument("--gpu", type=int, default=None, help="the session or server on this GPU")
    p.add_argument("--pid", type=int, default=None, help="a foreign server's (or orphan's) pid")
    p.add_argument("--grace", type=float, default=20.0, help="seconds between SIGTERM and SIGKILL (default 20)")
    p.add_argument("--wait", action="store_true", help="(kill always waits for confirmation; accepted for symmetry)")


async def resolve_target(link, args) -> KillTarget:
    if sum(x is not None for x in (args.session, args.gpu, args.pid)) != 1:
        raise UserError("give exactly one of SESSION, --gpu N or --pid PID")
    if args.session:
        return KillTarget(host=link.name, session_id=args.session)
    snap = await _fresh(link)
    if args.pid is not None:
        p = next((x for x in snap.servers if x.pid == args.pid), None)
        if p is None:
            raise UserError(f"no server process {args.pid} on {link.name}", exit_code=1)
        return KillTarget(host=link.name, pid=p.pid, start_ticks=p.start_ticks)
    import time

    views = [v for v in derive_views(snap, {}, time.time()) if args.gpu in v.gpus
             and v.state not in ("stopped", "failed")]
    if not views:
        raise UserError(f"nothing runs on GPU {args.gpu} of {link.name}", exit_code=1)
    if len(views) > 1:
        raise UserError(f"GPU {args.gpu} has {len(views)} servers: name one (" + ", ".join(
            v.session_id or f"--pid {v.launcher_pid}" for v in views) + ")")
    v = views[0]
    if v.session_id:
        return KillTarget(host=link.name, session_id=v.session_id)
    return KillTarget(host=link.name, pid=v.launcher_pid, start_ticks=v.launcher_start_ticks)


async def run(args) -> int:
    single_host(args)
    if args.read_only:
        raise UserError("read-only: kill is disabled")
    async with connect_hosts(args) as links:
        target = await resolve_target(links[0], args)
        r = await kill(links[0], target, step_printer(args), grace=args.grace)
    return emit_result(args, r)
