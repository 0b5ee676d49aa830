"""Issue 25 items 6 and 8 (the host's share): faults and hostile input around the agent, each with real processes.

A real agent (the ``local`` transport), real files, real HTTP on 127.0.0.1 (hostile stand-in servers that trickle
a byte every 0.3 s, answer 302, or send ``+Inf``/``NaN``), the real CLI as a subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.helpers.rel_util import REPO, agent_pids, descendants_of, write_config
from tests.helpers.wait import holds_for, wait_until

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


# ------------------------------------------------------------------ item 8: the exporter under idle and trickling clients

def _serving(p: subprocess.Popen, timeout: float = 60) -> str:
    """The exporter's first stdout line (it says where it serves), read with a bound."""
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    try:
        return p.stdout.readline()
    finally:
        timer.cancel()


def test_exporter_threads_are_bounded_and_idle_or_trickling_clients_are_cut_off(tmp_path):
    from console.commands.export import EXPORT_WORKERS, REQUEST_DEADLINE_S

    runs = tmp_path / "runs"
    runs.mkdir()
    conf = local_conf(tmp_path, runs)
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "console", "--config", str(conf), "export", "--host", "local",
                          "--listen", f"127.0.0.1:{port}", "--duration", "60"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=REPO, env=cli_env(tmp_path))
    socks: list[socket.socket] = []
    try:
        assert f"127.0.0.1:{port}/metrics" in _serving(p)
        base = len(os.listdir(f"/proc/{p.pid}/task"))
        t0 = time.monotonic()
        for _ in range(200):  # 200 idle half-requests
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /metr")
            socks.append(s)
        threads = lambda: len(os.listdir(f"/proc/{p.pid}/task"))  # noqa: E731
        assert holds_for(lambda: threads() <= base + 2, 1.0), (base, threads())  # was: one per connection (201)
        for s in socks:  # each is cut off by its deadline (or closed at once: the backlog was full)
            s.settimeout(REQUEST_DEADLINE_S + 10)
            assert s.recv(100) == b""
        assert time.monotonic() - t0 < REQUEST_DEADLINE_S + 8
        trickle = socket.create_connection(("127.0.0.1", port), timeout=5)
        t1 = time.monotonic()
        with pytest.raises(OSError):  # a byte every 0.3 s: cut off at the whole request's deadline
            for c in b"GET /metrics HTTP/1.0\r\nX: " + b"y" * 100:
                trickle.sendall(bytes([c]))
                time.sleep(0.3)
        assert REQUEST_DEADLINE_S - 1 < time.monotonic() - t1 < REQUEST_DEADLINE_S + 3
        trickle.close()
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "mtpconsole_host_connected" in body  # a real scrape is served as before
        assert len(os.listdir(f"/proc/{p.pid}/task")) <= base + EXPORT_WORKERS
    finally:
        for s in socks:
            s.close()
        p.kill()
        p.communicate(timeout=20)


def test_exporter_on_every_address_says_it_exposes_the_metrics(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    conf = local_conf(tmp_path, runs)
    r = run_cli(tmp_path, conf, "export", "--host", "local", "--listen", f"0.0.0.0:{free_port()}", "--duration", "1")
    assert r.returncode == 0, r.stderr
    (warn,) = [x for x in r.stderr.splitlines() if "warning" in x]
    assert "0.0.0.0" in warn and "every network this machine is on" in warn and "127.0.0.1" in warn, warn
    quiet = run_cli(tmp_path, conf, "export", "--host", "local", "--listen", f"127.0.0.1:{free_port()}",
                    "--duration", "1", "--json")
    assert quiet.returncode == 0 and "warning:" not in quiet.stderr, quiet.stderr
    assert json.loads(quiet.stdout.splitlines()[0])["warning"] is None
