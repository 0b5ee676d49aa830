"""`mtpconsole deploy up|status|roll|down NAME`: replicas of ``[deployments.NAME]`` behind SGLang's gateway.

``up``, ``roll`` and ``down`` change the host: ``--read-only`` refuses them, and they go ahead only when the
operator confirms on a terminal (the question names the replicas and the traffic they carry) or gives ``--yes``.
``roll --set --FLAG=VALUE`` / ``--unset --FLAG`` edit each replica's flags as ``relaunch`` does."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from console.core.redact import redact_obj
from console.errors import UserError

if TYPE_CHECKING:
    from console.commands.context import CliContext
    from console.ops.deploy.models import DeploymentStatus, DeployResult

ACTIONS = ("up", "status", "roll", "down")
WRITES = ("up", "roll", "down")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=ACTIONS, help="up: start; status: show; roll: rolling relaunch; down: stop")
    p.add_argument("name", help="the deployment ([deployments.NAME] in the config)")
    p.add_argument("--set", action="append", default=[], metavar="--FLAG=VALUE",
                   help="roll: change a flag of every replica (repeatable): --set --max-running-requests=24")
    p.add_argument("--unset", action="append", default=[], metavar="--FLAG", help="roll: remove a flag (repeatable)")
    p.add_argument("--env", action="append", default=[], metavar="K=V",
                   help="roll: environment for the new servers (a secret the old ones were launched with)")
    p.add_argument("--rollback", action="store_true",
                   help="roll: roll back an interrupted roll (each old replica kept, its new one stopped)")
    p.add_argument("--no-validate", action="store_true",
                   help="roll: do not check the new flags against the host's server before launching")
    p.add_argument("--yes", action="store_true", help="do not ask (scripts): up, roll and down go ahead")
    p.add_argument("--settle", type=float, default=3.0, metavar="S",
                   help="roll: seconds a new replica must stay healthy before its old one is deregistered (default 3)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for each server's READY (default 900)")
    p.add_argument("--grace", type=float, default=20.0,
                   help="seconds between SIGTERM and SIGKILL of an old server (default 20)")


def traffic_line(status: DeploymentStatus) -> str:
    """The replicas and the traffic they carry, as the confirm question names them."""
    parts = []
    for r in status.replicas:
        load = f"{r.running} running, {r.queued} queued" if r.running is not None else "load unknown"
        parts.append(f"replica {r.replica} (session {r.session_id}, GPU {','.join(map(str, r.gpus))}, port {r.port}, "
                     f"{r.role}, {load})")
    return "; ".join(parts) or "no replica runs"


def print_status(s: DeploymentStatus) -> None:
    g = s.gateway
    print(f"deployment {s.name} on {s.host}: gateway 127.0.0.1:{g.port} "
          f"({'owned, session ' + str(g.session_id) if g.owned else 'existing'}) health {g.health or 'no answer'}, "
          f"{g.readiness or '?'}")
    if g.api:
        print(f"  {g.api}")
    if g.error:
        print(f"  gateway: {g.error}")
    ready = sum(1 for r in s.replicas if r.state == "ready" and r.worker_status == "ready")
    print(f"  requests/s through the gateway: {rps(s.requests_per_s)}")
    print(f"  replicas ready at the gateway: {ready}/{len(s.replicas)}"
          + ("  — a roll is in progress (or was interrupted): see the roles" if s.roll_in_progress else ""))
    for r in s.replicas:
        load = f"running {r.running} queued {r.queued}" if r.running is not None else "load unknown"
        print(f"  replica {r.replica} [{r.role}] session {r.session_id} {r.state.upper()} GPU "
              f"{','.join(map(str, r.gpus))} port {r.port} worker {r.worker_id or '(not registered)'} "
              f"{r.worker_status or ''} {load} requests/s {rps(r.requests_per_s)}"
              + (f" replaces {r.replaces}" if r.replaces else ""))
    for u in s.foreign_workers:
        print(f"  the gateway also routes to {u} (no replica session of this deployment)")
    if s.traffic_note:
        print(f"  {s.traffic_note}")


def rps(v: float | None) -> str:
    """A rate as ``deploy status`` prints it (``?``: unknown)."""
    return "?" if v is None else f"{v:.1f}"


def print_result(r: DeployResult) -> None:
    from console.commands._ops import term
    from console.core.text import STEP_MARKS

    print(f"{r.op} {r.name} on {r.host}: {'OK' if r.ok else 'ROLLED BACK' if r.rolled_back else 'FAILED'}")
    if not r.ok:
        bad = next((s for s in r.steps if s.state == "failed"), None)
        if bad is not None:
            print(f"  {STEP_MARKS['failed']} {bad.name}: {term(bad.evidence or '')}")
        print(f"  error: {term(r.error or '')}")
    for old, new in r.replaced.items():
        print(f"  replaced {old} -> {new}")


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from console.commands._ops import step_printer
    from console.commands.context import open_hosts
    from console.commands.kill import ask_on_terminal
    from console.commands.launch import parse_env
    from console.ops.deploy.ops import Deploy, edited_argv

    cfg = ctx.config
    if args.name not in cfg.deployments:
        raise UserError(f"no deployment {args.name!r} in the config ({', '.join(cfg.deployments) or 'none'}): add a "
                        f"[deployments.{args.name}] table")
    if args.action in WRITES and ctx.read_only:
        raise UserError(f"read-only: deploy {args.action} is disabled", kind="read_only")
    if args.action != "roll" and (args.set or args.unset or args.env or args.no_validate or args.rollback):
        raise UserError("--set, --unset, --env, --no-validate and --rollback apply to 'deploy roll' only")
    if args.rollback and (args.set or args.unset):
        raise UserError("--rollback keeps the old replicas: it takes no --set or --unset")
    if not 0 <= args.settle <= 3600:
        raise UserError("--settle: seconds from 0 to 3600")
    dep = cfg.deployments[args.name]
    given = parse_env(args.env)
    ctx = ctx.model_copy(update={"hosts": (dep.host,)})
    async with open_hosts(ctx) as opened:
        d = Deploy(opened.links[0], opened.config, args.name, settle_s=args.settle, timeout=args.timeout,
                   grace=args.grace)
        if args.action == "status":
            st = await d.status(rate_s=1.0)  # requests/s: the counters read at least a second apart
            if ctx.json_output:
                print(json.dumps(redact_obj(st.model_dump(mode="json")), indent=2))
            else:
                print_status(st)
            return 0 if st.gateway.health == 200 else 1
        if not args.yes:
            st = await d.status()
            what = {"up": f"start deployment {args.name} on {dep.host} ({len(dep.replica_gpus())} replicas)",
                    "roll": (f"roll back the interrupted roll of {args.name}" if args.rollback else
                             f"roll deployment {args.name} one replica at a time"
                             + (f" with {' '.join(args.set + ['--unset ' + u for u in args.unset])}"
                                if args.set or args.unset else " (same flags)")
                             + ("" if d.spare_gpus(opened.links[0].snapshot(), 1, set()) is not None else
                                "; no spare GPU: each old replica is drained first and the other replicas carry its "
                                "traffic")),
                    "down": f"stop deployment {args.name}: its traffic stops"}[args.action]
            if not ask_on_terminal(f"{what}; now: {traffic_line(st)}. Go ahead?"):
                raise UserError(f"deploy {args.action} {args.name}: not confirmed (answer y on a terminal, or give "
                                "--yes)", exit_code=1)
        printer = step_printer(ctx.json_output)
        if args.action == "up":
            r = await d.up(printer)
        elif args.action == "down":
            r = await d.down(printer)
        else:
            r = await d.roll(edited_argv(args.set, args.unset), given, printer, check_flags=not args.no_validate,
                             rollback=args.rollback)
    if ctx.json_output:
        print(json.dumps(redact_obj(r.model_dump(mode="json")), indent=2))
    else:
        print_result(r)
    return 0 if r.ok else 1
