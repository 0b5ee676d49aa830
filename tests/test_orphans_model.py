"""Model-based test of the orphan rule over generated process trees (hypothesis).

Each generated host has pid 1 (a known init, or an unknown program that may itself have started a server),
and launch trees of every shape: managed sessions in this console's runs directory, in another runs directory
(findable or not), of another user; hand-started servers recognised by their title, behind a wrapper script,
behind a router, inside an Engine-API application. Each tree's starter is alive or dead; when dead its workers
were adopted (by pid 1 or a supervisor), seen dying by the agent or not, in their starter's session or their own.
The generator knows the truth the snapshot only hints at, and the invariants are checked against it:

* never an orphan: a process with a live starter (recognised or not), of a live session in any runs directory,
  or of another user;
* always found: every process of an ended session of this user whose run directory is findable, and every
  server process whose starter's death the snapshot proves (the agent saw it, pid 1 is a known init, or its
  session is neither its own nor its parent's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.core.orphans import hunt_snapshot
from console.model import (
    ConnectionInfo,
    ExitRecord,
    HostSnapshot,
    ProcRef,
    ServerProc,
    SessionInfo,
    SupervisorRecord,
)

ME, OTHER = 1000, 65534
SHAPES = ["managed", "managed_other_runs", "managed_other_user", "hand", "wrapper", "router", "engine_app",
          "pid1_wrapper"]
STARTER_ARGV = {
    "managed": ["python", "-m", "sglang.launch_server", "--port", "30000"],
    "managed_other_runs": ["python", "-m", "sglang.launch_server", "--port", "30001"],
    "managed_other_user": ["python", "-m", "sglang.launch_server", "--port", "30002"],
    "hand": ["python", "-m", "sglang.launch_server", "--port", "30003"],
    "wrapper": ["python3", "myserve.py", "--model", "m"],
    "router": ["python", "-m", "sglang_router.launch_server", "--dp", "2"],
    "engine_app": ["python", "app.py"],
}
RECOGNISED = {"managed", "managed_other_runs", "managed_other_user", "hand", "router"}


@dataclass
class Tree:
    shape: str
    starter_alive: bool
    workers: int
    agent_saw_death: bool
    own_session: bool  # the workers called setsid themselves
    findable: bool  # another runs directory's session can be found (env or the user's list)
    supervisor_alive: bool
    gpu: bool


@dataclass
class World:
    init_known: bool
    trees: list[Tree]
    truth: dict[int, str] = field(default_factory=dict)  # pid -> "protected" | "orphan" | "free"


trees = st.builds(Tree, shape=st.sampled_from(SHAPES), starter_alive=st.booleans(), workers=st.integers(1, 3),
                  agent_saw_death=st.booleans(), own_session=st.booleans(), findable=st.booleans(),
                  supervisor_alive=st.booleans(), gpu=st.booleans())


def build(init_known: bool, ts: list[Tree]) -> tuple[HostSnapshot, dict[int, str]]:
    """The snapshot an agent would report for these trees, and the truth for each worker pid."""
    pid1_wrapper = any(t.shape == "pid1_wrapper" for t in ts)  # pid 1 is a program that started a server itself
    init_known = init_known and not pid1_wrapper
    init = ProcRef(pid=1, sid=1, pgid=1, state="S", uid=0,
                   argv=["python3", "entry.py"] if pid1_wrapper else
                   ["/sbin/init"] if init_known else ["/process_api", "--firecracker-init"])
    servers: list[ServerProc] = []
    relatives = [init]
    sessions: list[SessionInfo] = []
    others: list[SessionInfo] = []
    truth: dict[int, str] = {}
    for n, t in enumerate(ts):
        base = 1000 + 100 * n
        shell = base + 1  # the shell (or tmux pane) that started a hand-started server: its session leader
        sup, starter = base + 2, base + 3
        managed = t.shape.startswith("managed")
        uid = OTHER if t.shape == "managed_other_user" else ME
        sid_of_tree = sup if managed else shell
        starter_ppid = sup if managed else (1 if t.shape == "pid1_wrapper" else shell)
        relatives.append(ProcRef(pid=shell, ppid=1, pgid=shell, sid=shell, state="S", uid=uid, argv=["bash"]))
        sup_alive = managed and (t.starter_alive or t.supervisor_alive)
        sid_name = f"s{n}"
        run_dir = f"/runs{'' if t.shape == 'managed' else n}/{sid_name}"
        if managed:
            if sup_alive:
                servers.append(ServerProc(pid=sup, ppid=1, pgid=sup, sid=sup, start_ticks=sup, state="S", uid=uid,
                                          argv=["python", "-c", "supervisor", run_dir], role="supervisor",
                                          session_id=sid_name))
            ended = not t.starter_alive
            info = SessionInfo(
                session_id=sid_name, run_dir=run_dir, owner_uid=uid, server_alive=t.starter_alive,
                supervisor_alive=sup_alive,
                record=SupervisorRecord(supervisor_pid=sup, pid=starter, pgid=starter, start_ticks=starter,
                                        started_at=1.0),
                exit=ExitRecord(ended_at=5.0, signal=9) if ended and not t.supervisor_alive else None)
            if t.shape == "managed":
                sessions.append(info)
            elif t.findable:
                others.append(info)
        if t.starter_alive:
            argv = STARTER_ARGV.get(t.shape, ["python3", "entry.py"])
            ref = dict(pid=starter, ppid=starter_ppid, pgid=starter, sid=sid_of_tree, start_ticks=starter, state="S",
                       uid=uid, argv=argv)
            if t.shape in RECOGNISED:
                servers.append(ServerProc(**ref, role="launcher", framework="sglang",
                                          session_id=sid_name if managed else None))
            elif t.shape != "pid1_wrapper":
                relatives.append(ProcRef(**ref))
        for w in range(t.workers):
            pid = base + 10 + w
            parent = starter if t.starter_alive else (sup if sup_alive else 1)
            if t.shape == "pid1_wrapper":
                parent = 1  # pid 1 itself started the server: alive by construction
            wsid = pid if t.own_session else (1 if t.shape == "pid1_wrapper" else sid_of_tree)
            seen = (ProcRef(pid=starter, start_ticks=starter, state="X", argv=STARTER_ARGV.get(t.shape, ["x"]))
                    if not t.starter_alive and t.agent_saw_death and t.shape != "pid1_wrapper" else None)
            servers.append(ServerProc(
                pid=pid, ppid=parent, pgid=starter if not t.own_session else pid, sid=wsid, start_ticks=pid,
                state="S", uid=uid, argv=[f"sglang::scheduler_TP{w}"], role="worker", framework="sglang",
                session_id=sid_name if managed else None, run_dir=run_dir if managed else None,
                gpu_mem_mib={w: 1000} if t.gpu else {}, reparented_from=seen))
            truth[pid] = _truth(t, init_known, parent, wsid)
    snap = HostSnapshot(name="h", connection=ConnectionInfo(state="connected"), servers=servers, sessions=sessions,
                        other_sessions=others, relatives=relatives, agent_uid=ME)
    return snap, truth


def _truth(t: Tree, init_known: bool, parent: int, wsid: int) -> str:
    """What the worker really is: protected (must never be an orphan), orphan (must be found), or free."""
    if t.shape == "pid1_wrapper" or t.starter_alive or t.shape == "managed_other_user":
        return "protected"
    managed = t.shape.startswith("managed")
    if managed and t.supervisor_alive:
        return "protected"  # a live session: its supervisor is still cleaning up (no exit record yet)
    if managed and (t.shape == "managed" or t.findable):
        return "orphan"  # an ended session of this user, found
    provable = t.agent_saw_death or (parent == 1 and (init_known or (wsid != 1 and not t.own_session)))
    return "orphan" if provable else "free"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(init_known=st.booleans(), ts=st.lists(trees, min_size=1, max_size=5))
def test_no_protected_process_is_an_orphan_and_every_proven_one_is_found(init_known, ts):
    snap, truth = build(init_known, ts)
    rep = hunt_snapshot(snap)
    orphans = {o.pid for o in rep.orphans}
    foreign = {f.pid: f.why for f in rep.foreign}
    for pid, what in truth.items():
        if what == "protected":
            assert pid not in orphans, (pid, ts, [o for o in rep.orphans if o.pid == pid])
        elif what == "orphan":
            assert pid in orphans, (pid, ts, foreign.get(pid))
    assert not orphans & set(foreign)
    for o in rep.orphans:  # every claim names its proof
        assert o.evidence and not any("no server launcher" in e or "proves nothing" == e for e in o.evidence)
    by_pid = {p.pid: p for p in snap.servers}
    for pid in foreign:
        if pid in by_pid and by_pid[pid].uid == OTHER:
            assert "uid 65534" in foreign[pid]
