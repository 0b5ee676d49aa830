"""One rule for "who died first" (issue 24, item 2): the cause names the process whose abnormal end came first
among a session's processes, with its real role, and lists what followed it, the leftovers the supervisor killed
marked as such; no internal role name ("the other") reaches the operator.

The ordering evidence: every writer of ``exits.jsonl`` (the agent's pidfd watch, the supervisor's member watch
and reaper) records whether the session's launcher still ran when it saw a process end (``launcher_alive``);
the supervisor marks the leftovers it SIGKILLed itself (``killed_by_supervisor``)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest

from console.core.sessions import derive_views
from console.host.watch import first_abnormal_exit, merge_exits
from console.link.link import HostLink
from console.model import LaunchRequest, ProcessExit, SessionInfo
from console.ops import lifecycle
from console.sim.demo import FIXED_FLAGS
from tests.conftest import free_port
from tests.helpers.rel_util import cli, write_config
from tests.helpers.sim_files import make_sim, sim_link
from tests.helpers.wait import await_until

# ---------------------------------------------------------------- the rule, on exits.jsonl lines


def line(pid, at, **kw):
    base = {"pid": pid, "start_ticks": pid * 10, "at": at, "how": "gone", "exit_code": None, "signal": None,
            "role": "worker", "source": "agent", "oom_kill_delta": 0}
    base.update(kw)
    if base.get("signal"):
        base["how"] = "signal"
    return base


def test_a_member_seen_after_the_launcher_died_never_comes_first():
    # the agent handled the worker's pidfd a moment before the launcher's: the launcher was already gone then
    lines = [line(11, 10.000, signal=9, tp_rank=0, gpus=[0], launcher_alive=False),
             line(12, 10.001, signal=9, title="sglang::detokenizer", launcher_alive=False),
             line(10, 10.002, signal=9, role="launcher", server=True),
             line(13, 10.003, signal=9, role="other", launcher_alive=False),
             line(13, 10.004, signal=9, role="resource_tracker", source="supervisor", launcher_alive=False),
             line(10, 10.005, signal=9, role="launcher", server=True, source="supervisor")]
    exits = merge_exits(lines)
    assert [e["pid"] for e in exits] == [10, 11, 12, 13]  # the launcher first: it was seen dead by 10.000
    assert exits[0]["at"] == 10.000 and exits[3]["role"] == "resource_tracker"
    first = ProcessExit.model_validate(first_abnormal_exit(exits))
    assert first.pid == 10 and first.who() == "the launcher"
    assert first.cause_line() == ("the launcher (pid 10) was killed by SIGKILL; then the TP0 worker (pid 11, GPU 0) "
                                  "and the detokenizer (pid 12) were killed by SIGKILL")  # no helper, no "other"


def test_a_leftover_the_supervisor_killed_is_listed_as_such_and_never_first():
    lines = [line(10, 5.0, exit_code=0, role="launcher", server=True, source="supervisor"),
             line(11, 5.1, signal=9, tp_rank=1, gpus=[1], launcher_alive=False),
             line(11, 5.1, signal=9, source="supervisor", killed_by_supervisor=True, launcher_alive=False)]
    exits = merge_exits(lines)
    assert exits[1]["killed_by_supervisor"] is True
    assert first_abnormal_exit(exits) is None  # the launcher exited 0; its leftover's SIGKILL is no failure
    lines[0] = line(10, 5.0, signal=15, role="launcher", server=True, source="supervisor")
    first = ProcessExit.model_validate(first_abnormal_exit(merge_exits(lines)))
    assert first.pid == 10
    assert first.cause_line() == ("the launcher (pid 10) was killed by SIGTERM; killed by the supervisor as a "
                                  "leftover after the launcher died: the TP1 worker (pid 11)")
    assert ProcessExit.model_validate(merge_exits(lines)[1]).describe() == \
        "the TP1 worker (pid 11, GPU 1) was killed by the supervisor as a leftover after the launcher died"


def test_a_member_seen_dead_while_the_launcher_ran_is_first_even_when_seen_late():
    # the supervisor's poll saw the worker gone while the launcher still ran; the agent's own sighting came late
    lines = [line(11, 7.2, signal=9, tp_rank=1, gpus=[1], launcher_alive=False),
             line(11, 7.1, signal=9, tp_rank=1, source="supervisor", launcher_alive=True),
             line(10, 7.25, signal=9, role="launcher", server=True, source="supervisor")]
    first = ProcessExit.model_validate(first_abnormal_exit(merge_exits(lines)))
    assert first.pid == 11 and first.at == 7.1 and [f.pid for f in first.followers] == [10]
    assert first.cause_line() == ("the TP1 worker (pid 11, GPU 1) was killed by SIGKILL; "
                                  "then the launcher (pid 10) was killed by SIGKILL")


def test_a_launchers_tree_kill_blames_the_rank_not_the_helper_seen_first():
    # SGLang's kill_process_tree after a scheduler failed: children SIGKILLed by the live launcher, then itself
    lines = [line(13, 3.000, signal=9, role="resource_tracker", source="supervisor", launcher_alive=True),
             line(12, 3.001, signal=9, title="sglang::detokenizer", launcher_alive=True),
             line(11, 3.002, signal=9, tp_rank=0, gpus=[0], launcher_alive=True),
             line(10, 3.004, signal=9, role="launcher", server=True, source="supervisor")]
    first = ProcessExit.model_validate(first_abnormal_exit(merge_exits(lines)))
    assert first.pid == 11, first
    assert [f.pid for f in first.followers] == [12, 10]  # the helper is not named
    lines[2] = line(11, 3.002, exit_code=1, tp_rank=0, gpus=[0], launcher_alive=True)
    lines.insert(0, line(14, 3.0, signal=9, tp_rank=1, gpus=[1], launcher_alive=True))
    assert first_abnormal_exit(merge_exits(lines))["pid"] == 11  # it ended by itself: the others were killed
    later = [line(14, 2.0, signal=9, tp_rank=1, gpus=[1], launcher_alive=True)] + lines[1:]
    assert first_abnormal_exit(merge_exits(later))["pid"] == 14  # killed by hand well before the teardown


def test_a_helper_alone_ends_nothing_while_the_server_runs():
    lines = [line(13, 1.0, signal=9, role="resource_tracker", launcher_alive=True)]
    assert first_abnormal_exit(merge_exits(lines)) is None
    lines.append(line(10, 9.0, exit_code=0, role="launcher", server=True, source="supervisor"))
    first = ProcessExit.model_validate(first_abnormal_exit(merge_exits(lines)))
    assert first.pid == 13 and first.describe() == "multiprocessing's resource tracker (pid 13) was killed by SIGKILL"


def test_old_files_without_the_evidence_keep_the_order_seen():
    lines = [{"pid": 21, "start_ticks": 6, "at": 9.0, "how": "signal", "signal": 9, "role": "worker", "tp_rank": 1},
             {"pid": 20, "start_ticks": 5, "at": 10.0, "how": "signal", "signal": 9, "role": "launcher"}]
    first = ProcessExit.model_validate(first_abnormal_exit(merge_exits(lines)))
    assert first.pid == 21 and first.describe() == "the TP1 worker (pid 21) was killed by SIGKILL"
    helper = ProcessExit(pid=3, role="other", signal=9, how="signal")
    assert helper.describe() == "a helper process (pid 3) was killed by SIGKILL"  # never "the other"


# ---------------------------------------------------------------- real processes: kill -9 of the launcher


@pytest.fixture
def sim(tmp_path):
    return make_sim(tmp_path, 2, tag="f")


@pytest.fixture(autouse=True)
def _private_audit_log(tmp_path, monkeypatch):
    monkeypatch.setenv("MTPCONSOLE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))


@pytest.fixture
async def link(sim, runs_dir):
    async with sim_link(runs_dir, sim[0]) as lk:
        yield lk


def _ended(link: HostLink, sid: str) -> SessionInfo | None:
    s = next((s for s in link.snapshot().sessions if s.session_id == sid), None)
    return s if s is not None and s.exit is not None and s.first_abnormal_exit is not None else None


@pytest.mark.parametrize("fault", [None, "orphan"])
async def test_kill_9_of_the_launcher_names_the_launcher_first(link, sim, runs_dir, tmp_path, fault):
    """``orphan``: the scheduler left the launcher's group, so the supervisor kills it as a leftover."""
    d, model = sim
    r = await lifecycle.launch(link, LaunchRequest(
        host="local", command=[sys.executable, "-m", "console.sim.sglang"],
        flags=["--model-path", str(model), *FIXED_FLAGS, "--tp-size", "2"], gpus=[0, 1], port=free_port(),
        env={"MTPCONSOLE_SIM_FAULT": fault} if fault else {}), timeout=60)
    assert r.ok, r
    snap = await lifecycle.fresh_snapshot(link)
    members = {p.pid: p for p in snap.servers if p.session_id == r.session_id and p.role != "supervisor"}
    rec = json.loads((runs_dir / r.session_id / "record.json").read_text())
    await link.refresh()  # one more sample: every member's exit watch is in place
    os.kill(rec["pid"], signal.SIGKILL)
    s = await await_until(lambda: _ended(link, r.session_id), 20)
    assert s, "the session's end should be seen"
    first = s.first_abnormal_exit
    assert first.pid == rec["pid"] and first.role == "launcher", first
    line = first.cause_line()
    assert line.startswith(f"the launcher (pid {rec['pid']}) was killed by SIGKILL"), line
    assert "the other" not in line and "other" not in line.split(), line
    killed = json.loads((runs_dir / r.session_id / "exit.json").read_text())["leftovers_killed"]
    for pid in killed:  # each leftover the supervisor killed is listed as such
        f = next(f for f in first.followers if f.pid == pid)
        assert f.killed_by_supervisor and f"{f.who()} (pid {pid})" in line.split("killed by the supervisor as ")[1]
    if fault == "orphan":
        escaped = [p for p in members.values() if p.pgid != rec["pgid"] and p.role == "worker"]
        assert escaped and {p.pid for p in escaped} <= set(killed), (escaped, killed)
        assert "after the launcher died: " in line
    ranks = [f for f in first.followers if f.tp_rank is not None]
    assert ranks and all(f.pid in members for f in ranks)

    (v,) = [v for v in derive_views(link.snapshot(), {}, time.time()) if v.session_id == r.session_id]
    assert v.state == "failed" and v.cause == "signal_killed"
    assert f"the launcher (pid {rec['pid']}) was killed by SIGKILL" in v.line and "the other" not in v.line

    cfg = write_config(tmp_path / "config.toml", {"local": {"runs_dir": str(runs_dir), "python": sys.executable,
                                                            "gpu_source": "sim", "sim_dir": str(d)}})
    table = cli("sessions", "--host", "local", "--config", str(cfg), "--all", "--json")
    assert table.returncode == 0, table.stderr
    assert "the other" not in table.stdout and f"the launcher (pid {rec['pid']})" in table.stdout
    out = tmp_path / "report.md"
    rep = cli("report", "--host", "local", "--config", str(cfg), r.session_id, "--out", str(out))
    assert rep.returncode == 0, rep.stderr
    md = out.read_text()
    rows = [x for x in md.split("## Timeline")[1].split("## Flags")[0].splitlines() if x.endswith("| exit |")]
    assert rows and f"the launcher (pid {rec['pid']}) was killed by SIGKILL" in rows[0], rows
    assert "the other" not in md and "resource tracker" not in md.split("## Timeline")[1].split("## Flags")[0]
