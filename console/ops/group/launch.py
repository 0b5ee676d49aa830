"""A group launch: plan the members, preflight every node, start all members at once, READY, then guard.

READY needs every member's own launch confirmed (spawned, logging, listening, healthy, on GPU; rank 0 also
its ready line) and a one-token ``POST /generate`` answered by rank 0. See :mod:`console.core.group` for why
the members start together, and :mod:`console.ops.group.watch` for what happens after READY.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, get_args

from console.config import Config
from console.core.group import (
    DERIVED_PORTS,
    GroupMember,
    GroupResult,
    member_flags,
    member_ports,
    member_session_id,
    new_group_id,
    split_addr,
    tp_for,
)
from console.core.sessions import flag_value
from console.link.link import HostLink
from console.model import DEFAULT_PORT, LaunchRequest, OperationResult, SessionState, Step
from console.ops.group.preflight import machine, preflight
from console.ops.group.probe import probe
from console.ops.lifecycle import MoreChecks, launch
from console.ops.lifecycle.steps import OnSteps

GENERATE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class GroupRequest:
    """What the operator asked for: one request per host (rank order = host order) and the group's options."""

    requests: list[LaunchRequest]
    """Each host's request as a plain launch would make it (command, flags, GPUs, port, env)."""
    nnodes: int
    dist_init_addr: str | None = None
    kill_on_failure: bool = True
    notes: list[str] = field(default_factory=list)


def head_address(links: list[HostLink]) -> str | None:
    """The head's address as the other nodes reach it: 127.0.0.1 when every member runs on the head's machine,
    else the head's SSH host name; None when it cannot be told (the head is ``local`` or an SSH alias)."""
    head = links[0]
    if all(machine(lk) == machine(head) for lk in links):
        return "127.0.0.1"
    if head.spec.local:
        return None
    return head.spec.host or None


@dataclass
class Planned:
    group: str
    requests: list[LaunchRequest]
    dist_init_addr: str
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


async def plan(links: list[HostLink], greq: GroupRequest, now: float) -> Planned:
    """Each member's request: its flags (derived ``--tp-size``, the member flags, its port) and membership."""
    gid = new_group_id(greq.nnodes, now)
    refusals: list[str] = []
    notes = list(greq.notes)
    reqs = greq.requests
    if greq.nnodes != len(links):
        refusals.append(f"--nnodes {greq.nnodes} but {len(links)} host(s) given: one member per host")
    counts = {len(r.gpus) for r in reqs}
    if len(counts) > 1:
        refusals.append("every node needs the same number of GPUs: " + ", ".join(
            f"{r.host} {len(r.gpus)}" for r in reqs))
    tp, given = 0, False
    try:
        tp, given = tp_for(reqs[0].flags, len(reqs[0].gpus), greq.nnodes)
    except ValueError as e:
        refusals.append(str(e))
    if not given and tp:
        notes.append(f"--tp-size {tp} derived ({len(reqs[0].gpus)} GPU(s) a node × {greq.nnodes} nodes)")
    addr = greq.dist_init_addr
    if addr is None:
        host = head_address(links)
        if host is None:
            refusals.append(f"{links[0].name}: cannot tell the head's address as the other nodes reach it (the "
                            "local host or an SSH alias): give --dist-init-addr HOST:PORT")
        else:
            got = await probe(links[0], {"free_port": True, "derived": list(DERIVED_PORTS)})
            if "free_port" not in got:
                refusals.append(f"{links[0].name}: no free dist-init port: {got.get('error', 'none found')}")
            else:
                addr = f"{host}:{got['free_port']}"
                notes.append(f"--dist-init-addr {addr} (the head's address, a free port with +1…+5 free)")
    else:
        try:
            split_addr(addr)
        except ValueError as e:
            refusals.append(str(e))
    base = reqs[0].port or _flag_port(reqs[0].flags) or DEFAULT_PORT
    ports = member_ports([machine(lk) for lk in links], base)
    if len(set(ports)) > 1:
        notes.append("members share an address: each rank >= 1 gets its own --port (" + ", ".join(
            f"rank {i}: {p}" for i, p in enumerate(ports)) + ")")
    out: list[LaunchRequest] = []
    hosts = [lk.name for lk in links]
    for rank, (lk, r) in enumerate(zip(links, reqs)):
        try:
            flags = member_flags([f for f in _without_port(r.flags)], tp=tp, tp_given=given, nnodes=greq.nnodes,
                                 rank=rank, dist_init_addr=addr or "unset:0", port=None)
        except ValueError as e:
            refusals.append(str(e))
            flags = list(r.flags)
        out.append(r.model_copy(update={"host": lk.name, "flags": flags, "port": ports[rank] if rank < len(ports)
                                        else base, "group": gid, "node_rank": rank, "nnodes": greq.nnodes,
                                        "group_hosts": hosts, "group_kill_on_failure": greq.kill_on_failure}))
    return Planned(group=gid, requests=out, dist_init_addr=addr or "", refusals=list(dict.fromkeys(refusals)),
                   notes=notes)


def _flag_port(flags: list[str]) -> int | None:
    v = flag_value(flags, "--port")
    return int(v) if v and v.isdigit() else None


def _without_port(flags: list[str]) -> list[str]:
    """The flags without ``--port`` (each member's port is set by the plan)."""
    out, skip = [], False
    for f in flags:
        if skip:
            skip = False
            continue
        if f == "--port":
            skip = True
            continue
        if f.startswith("--port="):
            continue
        out.append(f)
    return out


def _member(req: LaunchRequest, r: OperationResult | None, state: str | None = None) -> GroupMember:
    return GroupMember(host=req.host, rank=req.node_rank or 0, session_id=member_session_id(req.group or "",
                       req.node_rank or 0), port=req.port, gpus=list(req.gpus),
                       state=state or (r.state if r is not None and r.state else "launching"),
                       ok=None if r is None else r.ok,
                       cause=None if r is None or r.ok else (r.cause or r.error or r.refused or r.aborted),
                       steps=list(r.steps) if r is not None else [])


async def launch_group(links: list[HostLink], greq: GroupRequest, on_steps: OnSteps | None = None, *,
                       timeout: float = 900.0, allow_busy: bool = False, guard: bool = False,
                       kill_grace: float | None = None) -> GroupResult:
    """Preflight every node, start every member at once, confirm the group READY (see module doc).

    A member that fails while the group starts fails the group at once (the others would hang at the
    rendezvous): the rest are killed and confirmed when ``greq.kill_on_failure``. ``guard``: after READY,
    watch the group (:func:`console.ops.group.watch.guard`) until it fails or ends, and return that."""
    from console.ops.group.watch import GroupWatch, kill_members

    now = time.time()
    p = await plan(links, greq, now)
    res: dict[str, Any] = dict(op="launch", session_id=p.group, group=p.group, nnodes=greq.nnodes,
                               dist_init_addr=p.dist_init_addr, notes=p.notes)
    if p.refusals:
        return GroupResult(**res, ok=False, state="idle", refused=p.refusals[0], refusals=p.refusals,
                           members=[_member(r, None, "idle") for r in p.requests])
    pre = await preflight(links, p.requests, p.dist_init_addr, p.group, allow_busy=allow_busy)
    res["notes"] = p.notes + pre.notes
    if pre.refusals:
        return GroupResult(**res, ok=False, state="idle", refused=pre.refusals[0], refusals=pre.refusals,
                           members=[_member(r, None, "idle") for r in p.requests])
    steps: dict[int, list[Step]] = {}

    def member_steps(rank: int) -> OnSteps:
        def on(s: list[Step]) -> None:
            steps[rank] = [x.model_copy(update={"name": f"{links[rank].name} r{rank}: {x.name}"}) for x in s]
            if on_steps is not None:
                on_steps([x for k in sorted(steps) for x in steps[k]])
        return on

    tasks = {asyncio.ensure_future(launch(
        lk, r, member_steps(i), wait=True, timeout=timeout, allow_busy=allow_busy, checked=pre.checked[i],
        session_id=member_session_id(p.group, i), more=MoreChecks(skip=("ready",)) if i else None)): i
        for i, (lk, r) in enumerate(zip(links, p.requests))}
    results: dict[int, OperationResult] = {}
    pending = set(tasks)
    first_bad: int | None = None
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            results[tasks[t]] = t.result()
        bad = [i for i, r in sorted(results.items()) if not r.ok]
        if bad:
            first_bad = bad[0]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            break
    members = [_member(r, results.get(i)) for i, r in enumerate(p.requests)]
    if first_bad is not None:
        r = results[first_bad]
        what = r.cause or r.error or r.refused or r.aborted or "failed"
        if r.refused and not r.session_id:  # its host's checks, run again under the launch lock, refused its start
            what = f"refused at its start (its host's checks again, under the host's launch lock): {r.refused}"
        why = f"{links[first_bad].name} (rank {first_bad}): {what}"
        killed: list[str] = []
        if greq.kill_on_failure:
            killed = await kill_members(links, members, grace=kill_grace)
        return GroupResult(**res, ok=False, state="failed", failed=why, failed_host=links[first_bad].name,
                           failed_rank=first_bad, failed_at=time.time(), members=members, killed=killed)
    gen = await probe(links[0], {"generate": {"port": p.requests[0].port, "timeout": GENERATE_TIMEOUT_S}},
                      timeout=GENERATE_TIMEOUT_S + 10, env=_generate_env(p.requests[0]))
    g = gen.get("generate") or {}
    if g.get("status") != 200:
        why = f"{links[0].name} (rank 0): a one-token generate failed: {g.get('body') or gen.get('error')}"
        killed = await kill_members(links, members, grace=kill_grace) if greq.kill_on_failure else []
        return GroupResult(**res, ok=False, state="failed", failed=why, failed_host=links[0].name, failed_rank=0,
                           failed_at=time.time(), members=members, killed=killed)
    res["notes"] = [*p.notes, *pre.notes, f"{links[0].name} (rank 0): a one-token generate answered 200"]
    ready = GroupResult(**res, ok=True, state="ready", members=members)
    if not guard:
        return ready
    watch = GroupWatch(links, ready, kill_on_failure=greq.kill_on_failure, kill_grace=kill_grace)
    return await watch.run()


def requests_over(cfg: Config, req: LaunchRequest, hosts: list[str], env_of: Callable[[str], dict[str, str]]) -> \
        list[LaunchRequest]:
    """One request per host (rank order) from one request made on one of them (the TUI's launch form): its flags,
    GPUs, port and env on every host; each host's own server command unless the request's profile names one (the
    form's host keeps the form's command). ``env_of(host)``: that host's environment from the console's (its
    ``env_names``), under the request's own."""
    prof = cfg.profiles.get(req.profile or "")
    out = []
    for h in hosts:
        command = list(req.command) if h == req.host else list((prof.command if prof else None)
                                                                 or cfg.host(h).server_command)
        out.append(req.model_copy(update={"host": h, "command": command, "env": {**env_of(h), **req.env}}))
    return out


def as_operation(r: GroupResult, op: Literal["launch", "kill"], host: str, steps: list[Step]) -> OperationResult:
    """A group operation's result as the TUI's operations show one (``session_id``: the group id; ``host``: where
    it was begun): its state, its steps, why it failed or was refused."""
    state = r.state if r.state in get_args(SessionState) else None
    why = r.failed or r.refused
    if r.killed:
        why = (why + " — " if why else "") + "; ".join(r.killed)
    return OperationResult(op=op, host=host, ok=r.ok, session_id=None if r.refused else r.group or None, state=state,
                           steps=steps, error=None if r.ok else why, refused=r.refused, refusals=r.refusals,
                           hint="; ".join(r.notes[-2:]) or None)


def _generate_env(req: LaunchRequest) -> dict[str, str] | None:
    """The server's API key for the probe's generate, by environment (never on a command line)."""
    key = flag_value(req.flags, "--api-key")
    return {"MTPCONSOLE_GENERATE_KEY": key} if key else None
