"""Issue 25 items 6 and 8 (the host's share): faults and hostile input around the agent, each with real processes.

A real agent (the ``local`` transport), real files, real HTTP on 127.0.0.1 (hostile stand-in servers that trickle
a byte every 0.3 s, answer 302, or send ``+Inf``/``NaN``), the real CLI as a subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.rel_util import REPO, agent_pids, descendants_of, write_config
from tests.helpers.wait import wait_until

SID = "20261203-000000-gpu0-f1f0"


def local_conf(tmp_path: Path, runs: Path, **extra) -> Path:
    return write_config(tmp_path / "config.toml", {"local": {"transport": "local", "python": sys.executable,
                                                             "runs_dir": str(runs), "gpu_source": "none", **extra}})


def cli_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}


def run_cli(tmp_path: Path, conf: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", "--config", str(conf), *args], capture_output=True,
                          text=True, cwd=REPO, env=cli_env(tmp_path), timeout=timeout)


def hand_session(runs: Path, sid: str = SID, log: bytes = b"") -> Path:
    """A run directory as a launch leaves it (spec.json, output.log); no server runs."""
    d = runs / sid
    d.mkdir(parents=True)
    os.chmod(d, 0o700)
    (d / "spec.json").write_text(json.dumps({"session_id": sid, "argv": ["sglang"], "gpus": [0], "port": 1,
                                             "created_at": time.time()}))
    (d / "output.log").write_bytes(log)
    return d


def rotate(d: Path, new: bytes) -> None:
    """As the supervisor rotates a capped log: the next segment exists before the oldest is dropped."""
    (d / ".next").write_bytes(new)
    os.replace(d / "output.log", d / "output.log.1")
    os.replace(d / ".next", d / "output.log")


# ------------------------------------------------------------------ item 6: logs -f more than one rotation behind

@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_logs_follow_says_when_lines_were_rotated_away(tmp_path, as_json):
    runs = tmp_path / "runs"
    d = hand_session(runs, log=b"a1\na2\n")
    conf = local_conf(tmp_path, runs)
    args = [sys.executable, "-m", "console", "--config", str(conf), "logs", SID, "--host", "local", "-f"]
    p = subprocess.Popen(args + (["--json"] if as_json else []), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=REPO, env=cli_env(tmp_path))
    watchdog = threading.Timer(60, p.kill)  # every readline below is bounded: a hung CLI is killed, and fails
    watchdog.start()
    try:
        first = p.stdout.readline()
        if as_json:
            assert json.loads(first)["lines"] == ["a1", "a2"]
        else:
            assert first == "a1\n" and p.stdout.readline() == "a2\n"
        agent = wait_until(lambda: descendants_of(p.pid) & agent_pids(), 20)
        (apid,) = agent
        with open(d / "output.log", "ab") as f:  # followed: the agent has pushed it, the follow is in place
            f.write(b"a3\n")
        got = p.stdout.readline()
        assert (json.loads(got)["lines"] == ["a3"]) if as_json else got == "a3\n", got
        os.kill(apid, signal.SIGSTOP)  # the follower falls behind: two rotations before it reads again
        try:
            rotate(d, b"b1\n")
            rotate(d, b"c1\nc2\n")
        finally:
            os.kill(apid, signal.SIGCONT)
        out = [p.stdout.readline() for _ in range(2)]
    finally:
        watchdog.cancel()
        p.send_signal(signal.SIGINT)
        try:
            _, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
    lost = [x for x in err.splitlines() if "lines lost" in x]
    assert len(lost) == 1 and SID in lost[0] and "rotated more than once" in lost[0], err
    if as_json:
        ev, chunk = (json.loads(x) for x in out)
        assert ev["type"] == "event" and ev["kind"] == "log_rotated" and ev["dropped"] is True, ev
        assert "lines lost" in ev["message"]
        assert chunk["type"] == "lines" and chunk["lines"] == ["c1", "c2"] and chunk["offset"] == 0, chunk
    else:
        assert out == ["c1\n", "c2\n"], out  # the newest segment from its start; b1 is gone, and said so
