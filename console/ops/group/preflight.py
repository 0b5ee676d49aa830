"""The group's preflight: every node checked before anything starts; every refusal names its node.

Per node: the member's flags against that node's own server (the launch preflight's flags check and memory
plan), the host's own launch checks run without launching (``check_only``: no live session or process on the
member's GPUs or its ``--port``, the GPUs free, the run directory's space, the server command), the model path, no
stale member of an earlier group alive there (named, with the command that kills it), the interface variables.
Across nodes: one server version and one flag-schema hash, the interface variables equal, the dist-init address
resolving on every node and reached from every node (the head listens on its port for a moment while each other
node connects: :func:`reachable`), its port and the ports SGLang derives from it (``+1 … +5``) free on the head,
and with ``--enable-dp-attention`` the port DP attention derives (``--port`` + 233,
:data:`console.core.group.DP_ATTENTION_PORT_DELTA`) free on the head and on every member sharing its address.

GPUs held, and the race: every member's GPUs are checked on every node here, before anything starts; each member's
start then asks its host's agent to launch, which runs the same checks again under the host's launch lock and
refuses when a GPU was taken since (a session of another console, a process of another runs directory). A member
refused at its start fails the group: the members already started are killed, confirmed
(:func:`console.ops.group.launch.launch_group`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from console.core.group import DERIVED_PORTS, IFNAME_VARS, dp_attention_port, member_session_id, schema_hash, split_addr
from console.core.sessions import flag_value
from console.link.client import HostClient
from console.link.link import HostLink
from console.model import HostSnapshot, LaunchRequest
from console.ops.group.probe import probe
from console.ops.lifecycle import Checked, build_spec, check_request, fresh_snapshot
from console.ops.lifecycle.preflight import host_refusals


@dataclass
class Preflight:
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checked: list[Checked | None] = field(default_factory=list)
    """Each member's launch checks, handed to its launch (made once)."""


def machine(link: HostLink) -> str:
    """Which machine a host is (its hostname and boot id from its latest sample), to tell members that share one
    apart: two "nodes" on one machine share its ports."""
    snap = link.snapshot()
    return f"{snap.hostname or link.name}/{getattr(snap, 'boot_id', None) or ''}"


def stale_members(snap: HostSnapshot, host: str, hosts: list[str], group: str) -> list[str]:
    """Members of another group still alive on this host: each named with the command that kills it.

    Two kinds, both on positive evidence: a session of ours whose spec names another group and whose server
    is alive; a process no console launched whose command line carries ``--node-rank`` (a hand-started rank)."""
    out = []
    for s in snap.sessions:
        sp = s.spec
        if sp is None or not sp.group or sp.group == group or not s.server_alive:
            continue
        where = " ".join(f"--host {h}" for h in (sp.group_hosts or [host]))
        out.append(f"{host}: stale member of group {sp.group} still alive (session {s.session_id}, rank "
                   f"{sp.node_rank}, pid {s.record.pid if s.record else '?'}): mtpconsole kill {where} {sp.group}")
    for p in snap.servers:
        if p.session_id is None and p.role == "launcher" and flag_value(p.argv, "--node-rank") is not None:
            out.append(f"{host}: a multi-node server no console launched is alive (pid {p.pid}, --node-rank "
                       f"{flag_value(p.argv, '--node-rank')}): mtpconsole kill --host {host} --pid {p.pid}")
    return out


async def _node(link: HostLink, req: LaunchRequest, hosts: list[str], group: str, head: bool, shares_head: bool,
                dist: tuple[str, int], opts: dict) -> tuple[list[str], list[str], Checked | None, dict, str | None]:
    """(refusals, notes, checks, probe answer, schema key) of one node. ``shares_head``: it runs on the head's
    machine (the head itself included); ``opts``: the launch's options for the host's checks (``allow_busy``)."""
    refusals: list[str] = []
    notes: list[str] = []
    name = link.name
    who = f"{name} (rank {req.node_rank})"
    try:
        snap = await fresh_snapshot(link)
    except Exception as e:  # no fresh look at the node: nothing may start
        return [f"{name}: no fresh snapshot: {e}"], [], None, {}, None
    checked = await check_request(link, req, snap)
    refusals += [f"{who}: {r}" for r in checked.refusals]
    # the host's own launch checks, nothing launched: its GPUs and --port not held (re-checked at its start)
    spec, env = build_spec(req, member_session_id(group, req.node_rank or 0), time.time())
    refusals += [f"{who}: the host's preflight: {r}" for r in await host_refusals(link, spec, env, opts)]
    refusals += stale_members(snap, name, hosts, group)
    model = flag_value(req.flags, "--model-path", "--model") or ""
    ans = await probe(link, {"env": list(IFNAME_VARS), "paths": [model] if model else [], "resolve": dist[0]})
    if "error" in ans:
        refusals.append(f"{name}: {ans['error']}")
    else:
        if model and not ans.get("paths", {}).get(model):
            refusals.append(f"{name} (rank {req.node_rank}): model path {model} is not there")
        if not ans.get("resolves"):
            refusals.append(f"{name}: the dist-init address {dist[0]} does not resolve there: "
                            f"{ans.get('resolve_error', '')}")
    client = HostClient.of(link)  # the member's own --port: the host's checks above
    ports: list[tuple[int, str]] = [(dist[1] + d, "dist-init port" if not d else
                                     f"dist-init port + {d} (SGLang derives it)") for d in (0, *DERIVED_PORTS)] \
        if head else []
    dp = dp_attention_port(req.flags, req.port)
    if dp is not None and shares_head:
        ports.append((dp, f"--port {req.port} + {dp - (req.port or 0)} (--enable-dp-attention: SGLang's DP attention "
                          "derives it)"))
    for port, what in ports:
        if await client.port_open(port):
            refusals.append(f"{who}: {what} {port} is in use")
    schema = checked.schema
    key = None
    if schema is not None:
        key = f"{schema.version or 'version unknown'} / flag schema {schema_hash(schema.flags)}"
    elif req.check_flags:
        notes.append(f"{name}: its server's flags could not be learned")
    return refusals, notes, checked, ans, key


REACH_S = 8.0
"""How long the head listens (and the others retry) for the dist-init reachability check."""


async def reachable(links: list[HostLink], dist: tuple[str, int]) -> list[str]:
    """The dist-init address reached from every other node: the head listens on its port (for a moment, before
    anything starts) and each node connects to ``HOST:PORT`` as its rank will; a refusal per node that cannot."""
    head, others = links[0], links[1:]
    if not others:
        return []
    listening = asyncio.ensure_future(probe(head, {"listen": dist[1], "expect": len(others), "for": REACH_S},
                                            timeout=REACH_S + 20))
    tries = [probe(lk, {"connect": [dist[0], dist[1]], "say": lk.name, "for": REACH_S - 1}, timeout=REACH_S + 20)
             for lk in others]
    answers = await asyncio.gather(*tries)
    heard = await listening
    out = []
    if heard.get("listened") is False:
        return [f"{head.name} (rank 0): cannot listen on the dist-init port {dist[1]}: {heard.get('listen_error')}"]
    for lk, a in zip(others, answers):
        if not a.get("connected"):
            out.append(f"{lk.name}: cannot reach the dist-init address {dist[0]}:{dist[1]}: "
                       f"{a.get('connect_error') or a.get('error') or 'no connection'}")
    return out


def _ifname(link: HostLink, req: LaunchRequest, ans: dict, var: str) -> str | None:
    """The value a member's server will see: the request's env, the host's launch_env, else the agent's own."""
    if var in req.env:
        return req.env[var]
    if var in link.cfg.launch_env:
        return link.cfg.launch_env[var]
    v = (ans.get("env") or {}).get(var)
    return v if isinstance(v, str) else None


async def preflight(links: list[HostLink], reqs: list[LaunchRequest], dist_init_addr: str, group: str, *,
                    allow_busy: bool = False) -> Preflight:
    """Every node's checks, concurrently; then the checks across nodes (see module doc)."""
    dist = split_addr(dist_init_addr)
    hosts = [lk.name for lk in links]
    head = machine(links[0])
    opts = {"allow_busy": allow_busy}
    got = await asyncio.gather(*(_node(lk, r, hosts, group, i == 0, machine(lk) == head, dist, opts)
                                 for i, (lk, r) in enumerate(zip(links, reqs))))
    out = Preflight(checked=[g[2] for g in got])
    for refusals, notes, _, _, _ in got:
        out.refusals += refusals
        out.notes += notes
    keys = {lk.name: g[4] for lk, g in zip(links, got) if g[4] is not None}
    if len(set(keys.values())) > 1:
        out.refusals.append("the nodes run different server builds: " + "; ".join(
            f"{h}: {k}" for h, k in keys.items()))
    elif keys:
        out.notes.append(f"every node runs {next(iter(keys.values()))}")
    if not out.refusals:  # only then: the head listens on the dist-init port while every other node connects
        out.refusals += await reachable(links, dist)
    for var in IFNAME_VARS:
        vals = {lk.name: _ifname(lk, r, g[3], var) for lk, r, g in zip(links, reqs, got) if "error" not in g[3]}
        if len(set(vals.values())) > 1:
            out.refusals.append(f"{var} differs between the nodes: " + ", ".join(
                f"{h}={v if v is not None else '(unset)'}" for h, v in vals.items()))
        elif vals and next(iter(vals.values())) is None:
            out.notes.append(f"{var} is unset on every node (NCCL/Gloo pick an interface themselves)")
    return out
