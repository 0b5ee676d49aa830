"""Every process of a session has its end recorded (exits.jsonl, the session snapshot), and the earliest
abnormal one is exposed as first_abnormal_exit: 'the TP1 worker (pid N, GPU 1) was killed by SIGKILL'."""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from pathlib import Path

from console.host.watch import first_abnormal_exit, merge_exits
from console.model import SessionInfo
from tests.helpers.agent_proc import AgentProc

RETITLE = Path(__file__).resolve().parent / "helpers" / "retitle.py"


def test_merge_prefers_known_codes_and_first_sighting():
    lines = [
        {"pid": 20, "start_ticks": 5, "at": 10.0, "how": "gone", "exit_code": None, "signal": None, "role": "launcher",
         "gpus": [], "oom_kill_delta": 0, "source": "agent"},
        {"pid": 21, "start_ticks": 6, "at": 9.0, "how": "signal", "signal": 9, "role": "worker", "tp_rank": 1,
         "gpus": [1], "oom_kill_delta": 1, "source": "agent"},
        {"pid": 20, "start_ticks": 5, "at": 10.2, "how": "exited", "exit_code": 1, "signal": None,
         "role": "launcher", "source": "supervisor"},
        {"pid": 21, "start_ticks": 6, "at": 9.5, "how": "signal", "signal": 9, "source": "agent"},  # a second agent
        {"garbage": True},
    ]
    exits = merge_exits(lines)
    assert [(e["pid"], e["how"], e["at"]) for e in exits] == [(21, "signal", 9.0), (20, "exited", 10.0)]
    assert exits[1]["exit_code"] == 1 and exits[1]["source"] == "agent+supervisor"
    assert first_abnormal_exit(exits)["pid"] == 21
    stopped = [dict(e, after_stop_request=True) for e in exits]
    assert first_abnormal_exit(stopped) is None  # the operator's stop is not a failure


def test_killed_worker_is_the_first_abnormal_exit(tmp_path):
    go = tmp_path / "go"
    go.write_text("")  # retitle at once
    sid = "t-exits-" + uuid.uuid4().hex[:8]
    runs = tmp_path / "runs"
    agent = AgentProc({"interval": 0.1, "runs_dir": str(runs), "gpu_source": "none"})
    rec = None
    try:
        agent.read_until(lambda m: m.get("type") == "ready")
        r = agent.request("launch", timeout=30, spec={
            "session_id": sid, "gpus": [0, 1], "port": None,
            "argv": [sys.executable, str(RETITLE), "launcher", str(go), "0",
                     "sglang::scheduler_TP0", "sglang::scheduler_TP1"]})
        assert r["ok"], r
        rec = r["result"]["record"]

        def workers(m):
            return {p["tp_rank"]: p for p in m["data"]["servers"]
                    if p["session_id"] == sid and p["role"] == "worker" and p["argv"][0].startswith("sglang::")}

        msg, _ = agent.read_until(lambda m: m.get("type") == "sample" and len(workers(m)) == 2, timeout=10)
        victim = workers(msg)[1]
        agent.read_until(lambda m: m.get("type") == "sample")  # one more tick: its watch is in place
        os.kill(victim["pid"], signal.SIGKILL)
        ev, _ = agent.read_until(lambda m: m.get("kind") == "exit" and m.get("pid") == victim["pid"])
        assert ev["signal"] == signal.SIGKILL and ev["session_id"] == sid  # read from the zombie, not our child
        os.kill(rec["pid"], signal.SIGTERM)  # the launcher follows: later, so not the first death
        agent.read_until(lambda m: m.get("kind") == "session_ended" and m.get("session_id") == sid, timeout=10)

        lines = [json.loads(x) for x in (runs / sid / "exits.jsonl").read_text().splitlines()]
        mine = [e for e in lines if e["pid"] == victim["pid"]]
        assert mine and mine[0]["signal"] == 9 and mine[0]["role"] == "worker" and mine[0]["gpus"] == [1]
        assert any(e["pid"] == rec["pid"] and e["signal"] == signal.SIGTERM and e["source"] == "supervisor"
                   for e in lines)

        msg, _ = agent.read_until(lambda m: m.get("type") == "sample" and any(
            s["session_id"] == sid and s.get("exit") for s in m["data"]["sessions"]), timeout=10)
        (s,) = [SessionInfo.model_validate(s) for s in msg["data"]["sessions"] if s["session_id"] == sid]
        first = s.first_abnormal_exit
        assert first is not None and first.pid == victim["pid"]
        assert first.describe() == f"the TP1 worker (pid {victim['pid']}, GPU 1) was killed by SIGKILL"
        assert {e.pid for e in s.exits} >= {victim["pid"], rec["pid"]}
        launcher_exit = next(e for e in s.exits if e.pid == rec["pid"])
        assert launcher_exit.signal == signal.SIGTERM and launcher_exit.at >= first.at
        rec = None
    finally:
        if rec:
            agent.request("kill", pid=rec["pid"], pgid=rec["pgid"], start_ticks=rec["start_ticks"], signal=9,
                          session_id=sid)
            agent.read_until(lambda m: m.get("kind") == "session_ended", timeout=10)
        agent.close()


def test_stop_requested_session_has_no_abnormal_exit(tmp_path):
    go = tmp_path / "go"
    sid = "t-stop-" + uuid.uuid4().hex[:8]
    runs = tmp_path / "runs"
    agent = AgentProc({"interval": 0.1, "runs_dir": str(runs), "gpu_source": "none"})
    try:
        agent.read_until(lambda m: m.get("type") == "ready")
        r = agent.request("launch", timeout=30, spec={
            "session_id": sid, "gpus": [0], "port": None,
            "argv": [sys.executable, str(RETITLE), "launcher", str(go), "60", "sglang::scheduler"]})
        assert r["ok"], r
        rec = r["result"]["record"]
        agent.read_until(lambda m: m.get("type") == "sample" and any(
            p["session_id"] == sid and p["role"] == "worker" for p in m["data"]["servers"]), timeout=10)
        agent.read_until(lambda m: m.get("type") == "sample")
        assert agent.request("kill", pid=rec["pid"], pgid=rec["pgid"], start_ticks=rec["start_ticks"], signal=15,
                             session_id=sid)["ok"]
        agent.read_until(lambda m: m.get("kind") == "session_ended" and m.get("session_id") == sid, timeout=10)
        msg, _ = agent.read_until(lambda m: m.get("type") == "sample" and any(
            s["session_id"] == sid and s.get("exit") for s in m["data"]["sessions"]), timeout=10)
        (s,) = [SessionInfo.model_validate(s) for s in msg["data"]["sessions"] if s["session_id"] == sid]
        assert s.exits and all(e.after_stop_request for e in s.exits) and s.first_abnormal_exit is None
    finally:
        agent.close()
