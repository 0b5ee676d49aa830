"""Multi-node group sessions (issue 30), as pure data: ids, each member's flags, the group's state.

A group is one SGLang server spread over ``nnodes`` hosts: the same command on every node, ``--node-rank``
0..N-1, ``--nnodes N`` and one ``--dist-init-addr HOST:PORT`` (rank 0's address as the others reach it).
Each member is an ordinary session under its own host's supervisor; its ``spec.json`` carries the group id,
its node rank, ``nnodes`` and the group's hosts in rank order, so any console that opens the hosts finds
the whole group (and one that opens only some of them can say which member it does not see).

Start order: **all at once**. SGLang's schedulers rendezvous in torch.distributed at ``Init parallel``;
rank 0 cannot pass it (nor serve HTTP, nor print its ready line) before every rank joined, while the other
ranks retry the connection to rank 0's store until the distributed timeout. Waiting for rank 0's READY
first would therefore wait forever; starting the members together costs nothing (see console/sim/sglang_group).

The group's state is the worst of its members' (:func:`group_state`); a member that is missing (its host
not opened, or no run directory of it there) counts as UNREACHABLE, never as fine.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
import secrets
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from console.core.sessions import flag_value, has_flag
from console.model import SessionView, Step

GROUP_ID_RE = re.compile(r"^\d{8}-\d{6}-nodes\d{1,3}-[0-9a-f]{4}\Z")
"""A group id: ``20261202-031500-nodes2-7f3a`` (a member's session id adds ``-r<rank>``)."""
MEMBER_FLAGS = ("--nnodes", "--node-rank", "--dist-init-addr")
"""The flags the console sets on each member (the operator's flags must not give them)."""
DERIVED_PORTS = range(1, 6)
"""SGLang derives ports ``dist_init_port + 1 … + 5`` on the head (ZMQ, RPC, metrics, scheduler input)."""
DP_ATTENTION_FLAG = "--enable-dp-attention"
DP_ATTENTION_PORT_DELTA = 233
"""With ``--enable-dp-attention`` SGLang derives a TCP port ``--port + 233`` (its ``ZMQ_TCP_PORT_DELTA``, in
``server_args.PortArgs``): it must be free on the head and on every member sharing the head's address."""
IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
"""The interface variables every node must agree on (else NCCL/Gloo pick different networks and hang)."""
TP_FLAGS = ("--tp-size", "--tensor-parallel-size", "--tp")
START_ORDER = ("all at once: SGLang's ranks rendezvous at Init parallel, so rank 0 cannot become ready before "
               "every rank joined")

GUARD_LIVE = ("launching", "loading", "ready", "stopping")
"""A member in one of these states still runs: the failure policy kills it when another member died."""

POLICY_OFF = "launched with --no-kill-on-failure"
"""What the failure policy's refusal says of a group whose members' specs turn it off (never looked at again)."""

_WORST = ("failed", "unreachable", "stale", "stopping", "launching", "loading", "stopped", "ready", "idle", "foreign")
"""States from worst to best, as a group reads them: one failed member fails the group, one stopped member
stops being READY; READY only when every member is."""


def new_group_id(nnodes: int, now: float) -> str:
    """Sortable, readable, unique: ``20261202-031500-nodes2-7f3a``."""
    t = _dt.datetime.fromtimestamp(now).strftime("%Y%m%d-%H%M%S")
    return f"{t}-nodes{nnodes}-{secrets.token_hex(2)}"


def is_group_id(text: str | None) -> bool:
    return bool(text) and GROUP_ID_RE.match(text or "") is not None


def member_session_id(group_id: str, rank: int) -> str:
    """The session id of the group's rank ``rank`` (``<group>-r<rank>``): one run directory per member."""
    return f"{group_id}-r{rank}"


def group_state(states: Iterable[str]) -> str:
    """The worst of the members' states (see ``_WORST``); no member at all reads ``unreachable``."""
    got = list(states)
    if not got:
        return "unreachable"
    return min(got, key=lambda s: _WORST.index(s) if s in _WORST else 0)


def tp_for(flags: list[str], gpus_per_node: int, nnodes: int) -> tuple[int, bool]:
    """(tp size, whether the flags gave it). Raises ValueError when the given one does not fit the GPUs:
    SGLang runs ``tp / nnodes`` schedulers a node, one per GPU, and needs tp divisible by nnodes."""
    given = flag_value(flags, *TP_FLAGS)
    if given is None:
        return gpus_per_node * nnodes, False
    try:
        tp = int(given)
    except ValueError:
        raise ValueError(f"--tp-size {given!r} is no number") from None
    if tp % nnodes:
        raise ValueError(f"--tp-size {tp} is not divisible by --nnodes {nnodes} (SGLang refuses it)")
    if tp // nnodes != gpus_per_node:
        raise ValueError(f"--tp-size {tp} over {nnodes} nodes runs {tp // nnodes} GPU(s) a node, but each node is "
                         f"given {gpus_per_node}")
    return tp, True


def member_flags(flags: list[str], *, tp: int, tp_given: bool, nnodes: int, rank: int, dist_init_addr: str,
                 port: int | None) -> list[str]:
    """The flags of rank ``rank``: the operator's, ``--tp-size`` when derived, the member flags, its ``--port``."""
    for f in MEMBER_FLAGS:
        if has_flag(flags, f):
            raise ValueError(f"{f} is set by the console for each member: leave it out of the flags")
    out = list(flags)
    if not tp_given:
        out += ["--tp-size", str(tp)]
    out += ["--nnodes", str(nnodes), "--node-rank", str(rank), "--dist-init-addr", dist_init_addr]
    if port is not None and not has_flag(out, "--port"):
        out += ["--port", str(port)]
    return out


def member_ports(addresses: list[str], port: int) -> list[int]:
    """Each rank's ``--port``: the same on every node, except that members sharing an address (two "nodes" on one
    machine) each get their own (rank 0 keeps ``port``; SGLang's rank >= 1 serves its dummy health server there)."""
    seen: dict[str, int] = {}
    out = []
    for a in addresses:
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.append(port + n)
    return out


def dp_attention_port(flags: list[str], port: int | None) -> int | None:
    """The port SGLang's DP attention derives from ``port`` (``port + DP_ATTENTION_PORT_DELTA``) when ``flags`` enable
    it; None otherwise (or without a port)."""
    if port is None or not has_flag(flags, DP_ATTENTION_FLAG):
        return None
    return port + DP_ATTENTION_PORT_DELTA


def split_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--dist-init-addr {text!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def schema_hash(flags: Iterable[object]) -> str:
    """A short digest of a server's flag schema (its flags' option strings, choices, nargs), to compare builds."""
    h = hashlib.sha256()
    for f in flags:
        h.update(repr(f).encode())
    return h.hexdigest()[:12]


class GroupMember(BaseModel):
    """One member of a group as an operation or a listing reports it."""

    model_config = ConfigDict(frozen=True)

    host: str
    rank: int
    session_id: str
    state: str = "unreachable"
    """The member session's state (``console.model.SessionState``); ``unreachable`` when it is not seen."""
    port: int | None = None
    gpus: list[int] = Field(default_factory=list)
    cause: str | None = None
    """Why it failed or why it is not seen."""
    ok: bool | None = None
    """For an operation: whether this member's part succeeded (None: not reached)."""
    steps: list[Step] = Field(default_factory=list)


class GroupResult(BaseModel):
    """A group operation's outcome (``launch``/``kill`` of a group; ``session_id`` is the group id)."""

    model_config = ConfigDict(frozen=True)

    op: str
    session_id: str
    """The group id (``launch --json`` names the group by it, like a session)."""
    group: str
    ok: bool
    state: str
    nnodes: int
    dist_init_addr: str | None = None
    members: list[GroupMember] = Field(default_factory=list)
    refused: str | None = None
    refusals: list[str] = Field(default_factory=list)
    """Every reason nothing was started (one line each, naming its node)."""
    failed: str | None = None
    """The failure, naming node, rank and cause (``node1 (rank 1): ...``)."""
    failed_host: str | None = None
    failed_rank: int | None = None
    failed_at: float | None = None
    """When the console saw the failure (console clock)."""
    head_health: int | None = None
    """What rank 0's ``GET /health`` answered when the failure was seen (200: the head did not notice)."""
    killed: list[str] = Field(default_factory=list)
    """What the failure policy (or ``kill GROUP``) stopped, confirmed, one line a member."""
    notes: list[str] = Field(default_factory=list)
    start_order: str = START_ORDER


def group_report_md(group: str, state: str, hosts: list[str], members: list[GroupMember], files: dict[int, str],
                    lines: list[str], notes: list[str]) -> str:
    """A group's incident report index (Markdown): its state, each member (with its own report's file), the
    members' merged log tail. Text given here is already redacted by the caller."""
    out = [f"# Group {group}: {state.upper()}", "",
           f"{len(members)} nodes: {', '.join(hosts)}. The members started all at once; the group's state is the "
           "worst member's.", "", "| rank | host | state | session | cause | report |", "|---|---|---|---|---|---|"]
    for m in members:
        cause = (m.cause or "").replace("|", "\\|")
        out.append(f"| {m.rank} | {m.host} | {m.state.upper()} | `{m.session_id}` | {cause} | "
                   f"{files.get(m.rank, '-')} |")
    bad = [m for m in members if m.state == "failed"]
    if bad:
        out += ["", f"**First failed member**: {bad[0].host} (rank {bad[0].rank}): {bad[0].cause or 'failed'}"]
    out += ["", "## The members' logs, interleaved by time", ""]
    out += [f"- {n}" for n in notes]
    out += ["", "```", *lines, "```", ""]
    return "\n".join(out)


def group_lines(views: Iterable[SessionView]) -> list[str]:
    """One line per multi-node group among the sessions of every host (the TUI shows a group once, over its host
    sections): its state (the worst member's) and each member by rank, host and state; a rank not among the views
    reads ``not seen``. Ended groups (every member stopped or acknowledged) are left out."""
    by: dict[str, dict[int, SessionView]] = {}
    nn: dict[str, int] = {}
    for v in views:
        if v.group and v.session_id:
            by.setdefault(v.group, {})[v.node_rank or 0] = v
            nn[v.group] = max(nn.get(v.group, 0), v.nnodes or 0)
    out = []
    for gid in sorted(by):
        ranks = by[gid]
        if all(v.state == "stopped" or v.acknowledged for v in ranks.values()):
            continue
        n = max(nn[gid], max(ranks) + 1)
        states = [ranks[r].state if r in ranks else "unreachable" for r in range(n)]
        parts = [f"rank {r} {ranks[r].host} {ranks[r].state.upper()}" if r in ranks else f"rank {r} not seen"
                 for r in range(n)]
        out.append(f"GROUP {gid}: {group_state(states).upper()} — " + " · ".join(parts))
    return out


def guard_candidates(views: Iterable[SessionView]) -> list[str]:
    """The groups (ids, sorted) the failure policy should look at, from every host's session views: a member reads
    FAILED (not acknowledged) while another member still runs (:data:`GUARD_LIVE`). Only a hint: the policy acts on
    evidence re-checked on the hosts (:func:`console.ops.group.guard.guard_group`)."""
    by: dict[str, list[SessionView]] = {}
    for v in views:
        if v.group and v.session_id and not v.pending:
            by.setdefault(v.group, []).append(v)
    return sorted(g for g, ms in by.items() if any(m.state == "failed" and not m.acknowledged for m in ms)
                  and any(m.state in GUARD_LIVE for m in ms))
