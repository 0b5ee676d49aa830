"""The CLI of multi-node group sessions (issue 30): ``launch`` over several hosts, and ``sessions``, ``status``,
``kill GROUP``, ``logs GROUP`` taking the group id. Every command opens the hosts given with ``--host`` (rank
order for a launch); the group is found on them by each member's spec (``console.ops.group.members``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, Callable

from console.commands._ops import step_printer, term
from console.commands.context import CliContext, open_hosts
from console.config import Config
from console.core.group import GroupMember, GroupResult, is_group_id
from console.core.redact import redact_obj
from console.errors import UserError
from console.model import LaunchRequest
from console.ops import group as grp


def is_group_launch(ctx: CliContext, args: argparse.Namespace) -> bool:
    """A launch is a group's when ``--nnodes`` is given or more than one ``--host``."""
    return bool(args.nnodes) or len(ctx.hosts) > 1


def from_profile(ctx: CliContext, args: argparse.Namespace) -> tuple[CliContext, argparse.Namespace]:
    """``launch --profile NAME`` of a multi-node profile (``hosts = [..]``, ``nnodes``): its hosts in rank order
    (unless ``--host`` names as many others) and its node count; any other launch unchanged."""
    prof = ctx.config.profiles.get(args.profile) if args.profile else None
    if prof is None or not prof.hosts:
        return ctx, args
    hosts = ctx.hosts or tuple(prof.hosts)
    if len(hosts) != len(prof.hosts):
        raise UserError(f"profile {args.profile!r} is {prof.group_note()}: give no --host (its hosts) or one --host "
                        f"per node ({len(prof.hosts)}), got {len(hosts)}")
    nnodes = args.nnodes or prof.nnodes or len(prof.hosts)
    return ctx.model_copy(update={"hosts": tuple(hosts)}), argparse.Namespace(**{**vars(args), "nnodes": nnodes})


def gpus_for(values: list[str] | str | None, host: str) -> str | None:
    """The ``--gpu`` text for ``host``: its own ``HOST:LIST`` when given, else the plain ``LIST`` (every host)."""
    if values is None:
        return None
    items = [values] if isinstance(values, str) else list(values)
    own = [v.split(":", 1)[1] for v in items if ":" in v and v.split(":", 1)[0] == host]
    plain = [v for v in items if ":" not in v]
    return own[-1] if own else plain[-1] if plain else None


def _member_line(m: GroupMember) -> str:
    extra = f" — {m.cause}" if m.cause else ""
    return (f"  rank {m.rank} on {term(m.host)}: {m.state.upper()} session {m.session_id} GPU "
            f"{','.join(map(str, m.gpus)) or '-'} port {m.port or '-'}{term(extra)}")


def emit_group(json_output: bool, r: GroupResult) -> int:
    """Print a group operation's result; 0 when it succeeded, else 1 (a refusal too: nothing was started)."""
    if json_output:
        print(json.dumps(redact_obj(r.model_dump(mode="json")), indent=2))
        return 0 if r.ok else 1
    hosts = ", ".join(m.host for m in r.members)
    if r.refused is not None:
        print(f"{r.op} of group {r.group} over {hosts}: REFUSED — nothing was started")
        for x in r.refusals:
            print(f"  refused: {term(x)}")
    else:
        print(f"{r.op} of group {r.group} over {hosts}: {'OK' if r.ok else 'FAILED'} [{r.state.upper()}]")
        if r.failed:
            print(f"  failed: {term(r.failed)}")
        if r.head_health is not None:
            print(f"  rank 0's GET /health answered {r.head_health} at the failure")
        for m in r.members:
            print(_member_line(m))
        for k in r.killed:
            print(f"  killed: {term(k)}")
    if r.dist_init_addr:
        print(f"  dist-init address: {r.dist_init_addr}")
    for n in r.notes:
        print(f"  note: {term(n)}")
    print(f"  start order: {r.start_order}")
    sys.stdout.flush()
    return 0 if r.ok else 1


async def launch(ctx: CliContext, args: argparse.Namespace,
                 build_request: Callable[[argparse.Namespace, Config, str], LaunchRequest]) -> int:
    """``launch`` over several hosts; ``build_request`` makes each host's request as a plain launch would."""
    if ctx.read_only:
        raise UserError("read-only: launch is disabled", kind="read_only")
    hosts = list(ctx.hosts)
    nnodes = args.nnodes or len(hosts)
    if nnodes < 2:
        raise UserError("a group needs --nnodes 2 or more, one --host each")
    if len(hosts) != nnodes:
        raise UserError(f"--nnodes {nnodes} needs {nnodes} --host values (one member per host), got {len(hosts)}")
    async with open_hosts(ctx) as opened:
        links = opened.links
        reqs = []
        for lk in links:
            one = argparse.Namespace(**{**vars(args), "gpu": gpus_for(args.gpu, lk.name)})
            reqs.append(build_request(one, opened.config, lk.name))
        greq = grp.GroupRequest(requests=reqs, nnodes=nnodes, dist_init_addr=args.dist_init_addr,
                                kill_on_failure=args.kill_on_failure)
        keepers = [asyncio.create_task(lk.run()) for lk in links]  # dropped connections are re-made
        try:
            r = await grp.launch_group(links, greq, step_printer(ctx.json_output), timeout=args.timeout,
                                       allow_busy=args.allow_busy, guard=args.watch and args.wait)
        finally:
            for k in keepers:
                k.cancel()
    return emit_group(ctx.json_output, r)


async def _find(ctx: CliContext, gid: str, links: list) -> grp.GroupView:
    views = await grp.find_groups(links, gid)
    if not views:
        raise UserError(f"no group {gid} on {', '.join(lk.name for lk in links)} (give every host of the group "
                        "with --host)", kind="unknown_session")
    return views[0]


def _view_obj(v: grp.GroupView) -> dict[str, Any]:
    return {"group": v.group, "session_id": v.group, "state": v.state, "nnodes": v.nnodes, "hosts": v.hosts,
            "members": [m.model_dump(mode="json") for m in v.members]}


async def kill(ctx: CliContext, args: argparse.Namespace) -> int:
    """``kill GROUP``: every member killed on its own host, concurrently, each confirmed there."""
    if ctx.read_only:
        raise UserError("read-only: kill is disabled", kind="read_only")
    async with open_hosts(ctx, require=False) as opened:
        v = await _find(ctx, args.session, opened.links)
        lines = await grp.kill_members(opened.links, v.members, grace=args.grace)
        after = await _find(ctx, args.session, opened.links)
    ok = all("stopped, confirmed" in ln for ln in lines)
    if ctx.json_output:
        print(json.dumps(redact_obj({"op": "kill", "ok": ok, **_view_obj(after), "killed": lines}), indent=2))
    else:
        print(f"kill of group {v.group}: {'OK' if ok else 'NOT CONFIRMED'} [{after.state.upper()}]")
        for ln in lines:
            print(f"  {term(ln)}")
    return 0 if ok else 1


async def logs(ctx: CliContext, args: argparse.Namespace) -> int:
    """``logs GROUP``: every member's log, interleaved by time (host clocks corrected), each line marked node/rank."""
    async with open_hosts(ctx, require=False) as opened:
        v = await _find(ctx, args.session, opened.links)
        lines, notes = await grp.group_logs(opened.links, v)
    lines = lines[-args.lines:] if args.lines else []
    if ctx.json_output:
        print(json.dumps(redact_obj({"group": v.group, "lines": lines, "notes": notes}), indent=2))
        return 0
    for n in notes:
        print(f"# {term(n)}", file=sys.stderr)
    for ln in lines:
        print(term(ln))
    return 0


async def sessions(ctx: CliContext, args: argparse.Namespace) -> int:
    """``sessions`` over several hosts: each group once (its state, its members)."""
    async with open_hosts(ctx, require=False) as opened:
        views = await grp.find_groups(opened.links)
    if ctx.json_output:
        print(json.dumps(redact_obj([_view_obj(v) for v in views]), indent=2))
        return 0
    if not views:
        print("no group sessions on " + ", ".join(ctx.hosts))
    for v in views:
        print(f"group {v.group}: {v.state.upper()} ({v.nnodes} nodes: {', '.join(v.hosts)})")
        for m in v.members:
            print(_member_line(m))
    return 0


async def status(ctx: CliContext, gid: str) -> int:
    """``status GROUP``: the group's state (the worst member's) and each member's."""
    if not is_group_id(gid):
        raise UserError(f"{gid!r} is no group id (like 20261202-031500-nodes2-7f3a)")
    async with open_hosts(ctx, require=False) as opened:
        v = await _find(ctx, gid, opened.links)
    if ctx.json_output:
        print(json.dumps(redact_obj(_view_obj(v)), indent=2))
    else:
        print(f"group {v.group}: {v.state.upper()} ({v.nnodes} nodes)")
        for m in v.members:
            print(_member_line(m))
    return 0 if v.state == "ready" else 1


async def relaunch(ctx: CliContext, args: argparse.Namespace, edit: Callable[[list[str], list[str], list[str]],
                   list[str]], unmask: Callable[[Any, Any], list[str]],
                   parse_env: Callable[[list[str]], dict[str, str]]) -> int:
    """``relaunch GROUP``: every member killed (confirmed on its host), then the group launched again on the same
    hosts and GPUs with each member's flags (``--set``/``--unset`` applied; the member flags and ports set anew).

    The kill comes first: the old members hold the ports and GPUs the new group's preflight must find free (and
    the preflight refuses a live member of another group). A refused preflight then leaves nothing running, and
    says so. ``edit`` and ``unmask`` are the single-session relaunch's own flag edits and secret unmasking."""
    from console.core.group import MEMBER_FLAGS
    from console.ops.lifecycle import fresh_snapshot, relaunch_env, request_from_argv

    if ctx.read_only:
        raise UserError("read-only: relaunch is disabled", kind="read_only")
    async with open_hosts(ctx) as opened:
        v = await _find(ctx, args.session, opened.links)
        by = {lk.name: lk for lk in opened.links}
        missing = [h for h in v.hosts if h not in by]
        if missing:
            raise UserError(f"group {v.group} spans {', '.join(v.hosts)}: give every host with --host (missing: "
                            f"{', '.join(missing)})")
        links = [by[h] for h in v.hosts]
        given = parse_env(args.env)
        reqs: list[LaunchRequest] = []
        for lk, m in zip(links, v.members):
            snap = await fresh_snapshot(lk)
            every = await lk.client.sessions()
            s = next((x for x in every if x.session_id == m.session_id), None)
            if s is None or s.spec is None:
                raise UserError(f"{lk.name} (rank {m.rank}): no launch spec of {m.session_id}: nothing to relaunch",
                                exit_code=1)
            env, lacking = relaunch_env(opened.config, lk.name, s.spec, given)
            if lacking:
                raise UserError(f"{lk.name} (rank {m.rank}) was launched with the secret env {', '.join(lacking)}: "
                                "give their values again with --env NAME=VALUE")
            argv = edit(unmask(s, snap), [], [f for f in (*MEMBER_FLAGS, "--port")])
            argv = edit(argv, args.set, args.unset)
            reqs.append(request_from_argv(lk.name, argv, list(s.spec.gpus), s.spec.port if m.rank == 0 else
                                          v.members[0].port, env).model_copy(update={"force": args.force}))
        killed = await grp.kill_members(links, v.members, grace=args.grace)
        if not all("stopped, confirmed" in k or "already ended" in k for k in killed):
            r = GroupResult(op="relaunch", session_id=v.group, group=v.group, ok=False, state="failed", nnodes=v.nnodes,
                            failed="the old group's kill was not confirmed: nothing was started", killed=killed,
                            members=v.members)
            return emit_group(ctx.json_output, r)
        greq = grp.GroupRequest(requests=reqs, nnodes=v.nnodes, notes=[f"relaunch of group {v.group}"],
                                kill_on_failure=v.kill_on_failure)
        keepers = [asyncio.create_task(lk.run()) for lk in links]
        try:
            r = await grp.launch_group(links, greq, step_printer(ctx.json_output), timeout=args.timeout)
        finally:
            for k in keepers:
                k.cancel()
    r = r.model_copy(update={"op": "relaunch", "killed": killed + r.killed,
                             "notes": [*r.notes, f"replaces group {v.group} (stopped, confirmed)"]})
    return emit_group(ctx.json_output, r)


async def report(ctx: CliContext, args: argparse.Namespace, since_s: float) -> int:
    """``report GROUP``: each member's own incident report (``FILE-r<rank>.md`` + SVG) and an index ``FILE`` with
    the group's state, its members and their logs interleaved by time."""
    import time
    from pathlib import Path

    from console.core.group import group_report_md
    from console.core.redact import redact_text
    from console.ops.backend import safe_name
    from console.ops.report_files import check_targets, write_files, write_report
    from console.ops.report_gather import ReportError, gather

    out = Path(args.out or f"report-{safe_name(args.session)}.md")
    stem = out.with_suffix("")
    check_targets(out, overwrite=args.overwrite)
    async with open_hosts(ctx, require=False) as opened:
        v = await _find(ctx, args.session, opened.links)
        by = {lk.name: lk for lk in opened.links}
        files: dict[int, str] = {}
        written: list[str] = []
        for m in v.members:
            lk = by.get(m.host)
            if lk is None or m.state == "unreachable":
                continue
            target = Path(f"{stem}-r{m.rank}.md")
            check_targets(target, overwrite=args.overwrite)
            try:
                inp = await gather(lk, m.session_id, audit_path=ctx.audit_log, since_s=since_s, now=time.time())
            except ReportError as e:
                raise UserError(f"{m.host} (rank {m.rank}): {e}", exit_code=1) from None
            md, svg = write_report(inp, target, overwrite=args.overwrite)
            files[m.rank] = md.name
            written += [str(md), str(svg)]
        lines, notes = await grp.group_logs(opened.links, v)
    text = group_report_md(v.group, v.state, v.hosts, v.members, files, [redact_text(x) for x in lines[-200:]],
                           [redact_text(n) for n in notes])
    write_files([(out, text)], overwrite=args.overwrite)
    if ctx.json_output:
        print(json.dumps({"report": str(out), "members": written, "session_id": v.group, "state": v.state}))
    else:
        print(f"wrote {out} and " + ", ".join(written))
    return 0
