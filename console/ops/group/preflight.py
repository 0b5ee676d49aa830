"""The group's preflight: every node checked before anything starts; every refusal names its node.

Per node: the member's flags against that node's own server (the launch preflight's flags check and memory
plan), the model path, its ``--port`` free, no stale member of an earlier group alive there (named, with the
command that kills it), the interface variables. Across nodes: one server version and one flag-schema hash, the
interface variables equal, the dist-init address resolving on every node and reached from every node (the head
listens on its port for a moment while each other node connects: :func:`reachable`), and its port and the ports
SGLang derives from it (``+1 … +5``) free on the head.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from console.core.group import DERIVED_PORTS, IFNAME_VARS, schema_hash, split_addr
from console.core.sessions import flag_value
from console.link.client import HostClient
from console.link.link import HostLink
from console.model import HostSnapshot, LaunchRequest
from console.ops.group.probe import probe
from console.ops.lifecycle import Checked, check_request, fresh_snapshot


@dataclass
class Preflight:
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checked: list[Checked | None] = field(default_factory=list)
    """Each member's launch checks, handed to its launch (made once)."""


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


async def _node(link: HostLink, req: LaunchRequest, hosts: list[str], group: str, head: bool,
                dist: tuple[str, int]) -> tuple[list[str], list[str], Checked | None, dict, str | None]:
    """(refusals, notes, checks, probe answer, schema key) of one node."""
    refusals: list[str] = []
    notes: list[str] = []
    name = link.name
    try:
        snap = await fresh_snapshot(link)
    except Exception as e:  # no fresh look at the node: nothing may start
        return [f"{name}: no fresh snapshot: {e}"], [], None, {}, None
    checked = await check_request(link, req, snap)
    refusals += [f"{name} (rank {req.node_rank}): {r}" for r in checked.refusals]
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
    client = HostClient.of(link)
    ports = [req.port] + ([dist[1] + d for d in (0, *DERIVED_PORTS)] if head else [])
    for port in ports:
        if port is not None and await client.port_open(port):
            what = "--port" if port == req.port else "dist-init port" if port == dist[1] else \
                f"dist-init port + {port - dist[1]} (SGLang derives it)"
            refusals.append(f"{name} (rank {req.node_rank}): {what} {port} is in use")
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


async def preflight(links: list[HostLink], reqs: list[LaunchRequest], dist_init_addr: str, group: str) -> Preflight:
    """Every node's checks, concurrently; then the checks across nodes (see module doc)."""
    dist = split_addr(dist_init_addr)
    hosts = [lk.name for lk in links]
    got = await asyncio.gather(*(_node(lk, r, hosts, group, i == 0, dist)
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
