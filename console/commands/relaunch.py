"""`mtpconsole relaunch`: confirmed kill, then launch with the same or edited flags."""

from __future__ import annotations

import argparse

from console.commands._ops import emit_result, require_ports, require_session, step_printer
from console.commands.context import CliContext, open_hosts, single_host
from console.commands.kill import check_session_id
from console.commands.launch import parse_env, require_utf8
from console.core.flag_edit import edit_flags, masked_secret_flags, unmask_from_live
from console.errors import UnknownProcess, UserError
from console.model import KillTarget
from console.ops.lifecycle import relaunch, relaunch_env, request_from_argv


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", nargs="?", help="session id to relaunch")
    p.add_argument("--pid", type=int, default=None, help="relaunch a foreign server (by pid) as a managed session")
    p.add_argument("--set", action="append", default=[], metavar="--FLAG=VALUE",
                   help="change a flag (repeatable): --set --mem-fraction-static=0.85; --set --flag (boolean)")
    p.add_argument("--unset", action="append", default=[], metavar="--FLAG", help="remove a flag (repeatable)")
    p.add_argument("--env", action="append", default=[], metavar="K=V",
                   help="environment for the new server (repeatable); the host's env_names (from this console's "
                        "environment), the profile's env and launch_env are added as at launch: only a secret "
                        "that none of them holds must be given again")
    p.add_argument("--wait", action="store_true", help="return at READY or FAILED with every step and its timing")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for READY (default 900)")
    p.add_argument("--grace", type=float, default=20.0,
                   help="seconds between SIGTERM and SIGKILL of the old server (default 20)")
    p.add_argument("--force", action="store_true", help="relaunch even when the memory planner says it does not fit")


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from console.core.group import is_group_id

    if is_group_id(args.session):  # a multi-node group: kill every member, then launch the group again (issue 30)
        from console.commands import group

        return await group.relaunch(ctx, args, edit_flags, unmask_from_live, parse_env)
    single_host(ctx)
    if ctx.read_only:
        raise UserError("read-only: relaunch is disabled", kind="read_only")
    if (args.session is None) == (args.pid is None):
        raise UserError("give exactly one of SESSION or --pid PID")
    if args.session is not None:
        check_session_id(args.session)
    async with open_hosts(ctx) as opened:
        link = opened.links[0]
        snap = await link.refresh()
        given = parse_env(args.env)
        if args.session is not None:
            s = await require_session(link, args.session, snap)
            if s.spec is None:
                raise UserError(f"session {args.session} on {link.name} has no launch spec (spec.json"
                                f"{': ' + s.broken if s.broken else ''}): nothing to relaunch", exit_code=1)
            target = KillTarget(host=link.name, session_id=s.session_id)
            argv, gpus, port = unmask_from_live(s, snap), s.spec.gpus, s.spec.port
            env, missing = relaunch_env(opened.config, link.name, s.spec, given)  # the host's launch_env: not asked
            if missing:
                raise UserError("the session was launched with the secret env " + ", ".join(missing)
                                + ", which neither this console's environment nor the config holds: give their "
                                  "values again with --env NAME=VALUE (values are never stored)")
        else:
            env, _ = relaunch_env(opened.config, link.name, None, given)
            p = next((x for x in snap.servers if x.pid == args.pid), None)
            if p is None:
                raise UnknownProcess(f"--pid {args.pid}: no server process {args.pid} on {link.name} (see "
                                     f"'mtpconsole status --host {link.name}')")
            target = KillTarget(host=link.name, pid=p.pid, start_ticks=p.start_ticks)
            argv = p.argv
            gpus = sorted(p.gpu_mem_mib) or [int(x) for x in (p.cuda_visible_devices or "0").split(",") if x.isdigit()]
            port = None
        new_argv = edit_flags(argv, args.set, args.unset)
        hidden = masked_secret_flags(new_argv)
        if hidden:
            raise UserError("the session was launched with " + ", ".join(hidden) + ", whose values are never stored"
                            " and no live server shows: give them again with --set FLAG=VALUE")
        require_utf8(new_argv, "flag")
        require_ports(port, new_argv)
        req = request_from_argv(link.name, new_argv, list(gpus), port, env).model_copy(update={"force": args.force})
        r = await relaunch(link, target, req, step_printer(ctx.json_output), wait=args.wait, timeout=args.timeout,
                           grace=args.grace)
    return emit_result(ctx.json_output, r)
