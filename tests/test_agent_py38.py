"""The shipped agent and supervisor really run on Python 3.8 (the oldest host Python supported):
bootstrap, hello, a launch through the supervisor, retitled workers, exit records, a server's stdout file
(``foreign_output``), an error reply's kind."""

from __future__ import annotations

import signal
import sys
import uuid
from pathlib import Path

import pytest

from tests.helpers.agent_proc import AgentProc, oldest_python

PY38 = oldest_python()
RETITLE = Path(__file__).resolve().parent / "helpers" / "retitle.py"


@pytest.mark.skipif(PY38 is None, reason="no python3.8 on this machine (pyenv install 3.8 to run it)")
def test_agent_and_supervisor_on_python38(tmp_path):
    go = tmp_path / "go"
    go.write_text("")
    sid = "t-py38-" + uuid.uuid4().hex[:8]
    agent = AgentProc({"interval": 0.1, "runs_dir": str(tmp_path / "runs"), "gpu_source": "none"}, python=str(PY38))
    try:
        ready, _ = agent.read_until(lambda m: m.get("type") == "ready", timeout=15)
        assert ready["hello"]["python"].startswith("3.8.") and ready["hello"]["pidfd"] is False
        r = agent.request("launch", timeout=30, spec={
            "session_id": sid, "gpus": [0], "port": None,
            "argv": [sys.executable, str(RETITLE), "launcher", str(go), "0", "sglang::scheduler"]})
        assert r["ok"], r
        rec = r["result"]["record"]
        fo = agent.request("foreign_output", pid=rec["pid"], start_ticks=rec["start_ticks"], tail_bytes=4096)
        assert fo["ok"] and fo["result"]["path"].endswith("/output.log"), fo  # its stdout: the session's log
        assert agent.request("read_log", session_id=sid, tail_bytes=4096)["result"]["mtime"] > 0
        msg, _ = agent.read_until(lambda m: m.get("type") == "sample" and any(
            p["argv"] == ["sglang::scheduler"] and p["session_id"] == sid for p in m["data"]["servers"]), timeout=10)
        (w,) = [p for p in msg["data"]["servers"] if p["argv"] == ["sglang::scheduler"] and p["session_id"] == sid]
        assert w["role"] == "worker" and w["tp_rank"] == 0
        agent.read_until(lambda m: m.get("type") == "sample")
        import os
        os.kill(w["pid"], signal.SIGKILL)
        agent.read_until(lambda m: m.get("kind") == "exit" and m.get("pid") == w["pid"])  # polled: no pidfd in 3.8
        assert agent.request("kill", pid=rec["pid"], pgid=rec["pgid"], start_ticks=rec["start_ticks"], signal=9,
                             session_id=sid)["ok"]
        agent.read_until(lambda m: m.get("kind") == "session_ended" and m.get("session_id") == sid, timeout=10)
        gone = agent.request("kill", pid=rec["pid"], start_ticks=rec["start_ticks"], signal=9)
        assert (gone["ok"], gone["kind"]) == (False, "no_such_process"), gone
        exits = (tmp_path / "runs" / sid / "exits.jsonl").read_text()
        assert '"pid": %d' % w["pid"] in exits
    finally:
        agent.close()
