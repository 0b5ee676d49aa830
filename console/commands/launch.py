"""`mtpconsole launch`: a fresh session, confirmed step by step."""

from __future__ import annotations

import argparse
import asyncio

from console.commands._ops import emit_result, port_arg, require_ports, step_printer
from console.commands.context import CliContext, open_hosts, single_host
from console.commands.flags import command_of
from console.config import Config
from console.errors import UserError
from console.model import LaunchRequest
from console.ops.lifecycle import host_env, launch


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", default=None, action="append",
                   help="GPU index, list or range, e.g. 0, 0,1 or 0-7 (default 0); for a group HOST:LIST gives one "
                        "host its own GPUs (repeatable)")
    p.add_argument("--nnodes", type=int, default=None,
                   help="a multi-node group: one member per --host, in rank order (default: the number of hosts)")
    p.add_argument("--dist-init-addr", default=None, metavar="HOST:PORT",
                   help="a group's rendezvous address (default: the head's address with a free port)")
    p.add_argument("--watch", action="store_true",
                   help="a group with --wait: after READY keep guarding it until a member fails (then the policy)")
    p.add_argument("--no-kill-on-failure", dest="kill_on_failure", action="store_false",
                   help="a group: when a member fails, leave the others running (default: kill them, confirmed)")
    p.add_argument("--port", type=port_arg, default=None,
                   help="server port, 1-65535 (added as --port unless in the flags)")
    p.add_argument("--profile", default=None, help="a launch profile from the config")
    p.add_argument("--command", dest="server_command", default=None,
                   help="server command, split like a shell word list but never run by a shell "
                        "(default: the host's server_command)")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="environment for the server (repeatable)")
    p.add_argument("--wait", action="store_true", help="return at READY or FAILED with every step and its timing")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for READY (default 900)")
    p.add_argument("--allow-busy", action="store_true", help="launch even if the GPUs hold other compute processes")
    p.add_argument("--force", action="store_true", help="launch even when the memory planner says it does not fit")
    p.add_argument("--no-validate", dest="check_flags", action="store_false",
                   help="do not check the flags against the host's server before spawning it")
    p.add_argument("flags", nargs="*", help="server flags, after --")


def parse_gpus(text: str | list[str] | None) -> list[int] | None:
    if isinstance(text, list):  # --gpu repeats (a group's HOST:LIST): a plain launch takes the last one
        text = text[-1] if text else None
    if text is None:
        return None
    try:
        gpus = [g for x in text.split(",") if x.strip() for g in _gpu_range(x)]
    except ValueError:
        raise UserError(f"--gpu {text!r}: expected an index or a comma-separated list like 0,1") from None
    if not gpus or any(g < 0 for g in gpus):
        raise UserError(f"--gpu {text!r}: expected non-negative indices")
    return gpus


def _gpu_range(item: str) -> list[int]:
    """``3`` -> [3]; ``0-3`` -> [0, 1, 2, 3] (ValueError for anything else)."""
    a, sep, b = item.strip().partition("-")
    if not sep:
        return [int(a)]
    lo, hi = int(a), int(b)
    if hi < lo:
        raise ValueError(item)
    return list(range(lo, hi + 1))


def require_utf8(values, what: str) -> None:
    """Refuse text that is not valid UTF-8 (argv bytes Python decoded with surrogateescape): the host would
    run different bytes than the console shows and checks."""
    for v in values:
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"{what} {v.encode('utf-8', 'surrogateescape')!r} is not valid UTF-8") from None


def parse_env(items: list[str]) -> dict[str, str]:
    env = {}
    require_utf8(items, "--env")
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k.replace("_", "a").isalnum() or k[0].isdigit():
            raise UserError(f"--env {k!r}: expected NAME=VALUE with a valid variable name")
        if "\0" in v:
            raise UserError(f"--env {k}: NUL bytes are not allowed")
        env[k] = v
    return env


def build_request(args: argparse.Namespace, cfg: Config, host: str) -> LaunchRequest:
    """The launch request the options describe, with the host's server command and profile from ``cfg``."""
    hc = cfg.host(host)
    command = list(hc.server_command)
    flags: list[str] = []
    gpus, port, env, profile = [0], None, host_env(hc.env_names), None
    if args.profile:
        if args.profile not in cfg.profiles:
            raise UserError(f"no profile {args.profile!r} in the config")
        base = cfg.profile_request(args.profile, host)
        profile, command, flags, gpus, port = base.profile, base.command, base.flags, base.gpus, base.port
        env.update(base.env)  # the profile's env over the host's env_names, explicit --env over both
    command = command_of(args, command) or command
    require_utf8(list(args.flags), "flag")
    require_utf8(command, "--command")
    flags += list(args.flags)
    env.update(parse_env(args.env))
    if not flags:
        names = ", ".join(sorted(cfg.profiles))
        where = f" (profiles here: {names})" if names else ""
        raise UserError("nothing to launch: give --profile NAME or the server flags after '--' "
                        f"(e.g. -- --model-path M){where}")
    require_ports(args.port or port, flags)
    return LaunchRequest(host=host, command=command, flags=flags, gpus=parse_gpus(args.gpu) or gpus,
                         port=args.port or port, env=env, profile=profile, force=args.force,
                         check_flags=args.check_flags)


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from console.commands import group

    ctx, args = group.from_profile(ctx, args)  # a multi-node profile: its hosts and nnodes
    if group.is_group_launch(ctx, args):  # several hosts: one multi-node group (issue 30)
        return await group.launch(ctx, args, build_request)
    host = single_host(ctx)
    if ctx.read_only:
        raise UserError("read-only: launch is disabled", kind="read_only")
    async with open_hosts(ctx) as opened:
        link = opened.links[0]
        req = build_request(args, opened.config, link.name)
        keeper = asyncio.create_task(link.run())  # a dropped connection is re-made; the launch goes on
        try:
            r = await launch(link, req, step_printer(ctx.json_output), wait=args.wait, timeout=args.timeout,
                             allow_busy=args.allow_busy)
        finally:
            keeper.cancel()
    del host
    return emit_result(ctx.json_output, r)
