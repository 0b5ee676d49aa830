"""Issue 18, items 4, 5, 8 and 9: session logs on the host. `logs -n N` is exact (read backwards, a stated cap);
a FIFO or a symlink planted as output.log, or a symlinked session directory, never blocks, redirects or
kills the agent; a followed log keeps up with a fast server. Real agent over the test sshd, CLI as a
subprocess, real files."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from tests.helpers.rel_util import agent_pids, cli, write_config
from tests.helpers.wait import await_until, wait_until

pytestmark = pytest.mark.sshd

SID = "20261130-111111-gpu0-10a5"


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    f = raw[raw.rfind(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def plant(runs_dir: Path, sid: str = SID) -> Path:
    d = runs_dir / sid
    d.mkdir()
    (d / "spec.json").write_text(json.dumps({"session_id": sid, "argv": ["python3", "-m", "x"], "gpus": [0]}))
    (d / "exit.json").write_text(json.dumps({"ended_at": time.time(), "exit_code": 0}))
    return d


@pytest.fixture
def common(sshd, tmp_path, runs_dir):
    conf = write_config(tmp_path / "config.toml", {"testhost": {"python": "python3", "runs_dir": str(runs_dir),
                                                                "gpu_source": "none"}})
    return ["--ssh-config", str(sshd.ssh_config), "--config", str(conf)]


@pytest.fixture
def env(tmp_path):
    return {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}


@pytest.mark.parametrize("n", [1, 1000, 5000, 20_000])
def test_logs_n_is_exact_on_a_big_log(common, env, runs_dir, n):
    """100,000 lines of uneven length: `-n 1000` printed lines 095170-096169 (the file ends at 099999)."""
    d = plant(runs_dir)
    with open(d / "output.log", "w") as f:
        for i in range(100_000):
            f.write(f"{i:06d} " + "x" * ((i * 7919) % 900) + "\n")
    p = cli(*common, "logs", SID, "--host", "testhost", "-n", str(n), env=env)
    assert p.returncode == 0, p.stderr
    got = p.stdout.split("\n")[:-1]
    assert [x[:6] for x in got] == [f"{i:06d}" for i in range(100_000 - n, 100_000)], (got[:1], got[-1:])
    assert "only" not in p.stderr


def test_logs_n_says_when_capped(common, env, runs_dir):
    d = plant(runs_dir)
    with open(d / "output.log", "w") as f:
        for i in range(40):
            f.write(f"{i:03d} " + "y" * (1 << 20) + "\n")  # 40 lines of 1 MiB: more than the agent's cap
    p = cli(*common, "logs", SID, "--host", "testhost", "-n", "30", "--json", env=env)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["capped"] and "only" in r["note"] and 0 < len(r["lines"]) < 30
    assert r["lines"][-1].startswith("039 ") and r["end"] == (d / "output.log").stat().st_size
    t = cli(*common, "logs", SID, "--host", "testhost", "-n", "30", env=env)
    assert t.returncode == 0 and "mtpconsole logs: only" in t.stderr


def test_fifo_output_log_never_freezes_the_agent(common, env, runs_dir, sshd):
    """A FIFO as output.log used to block the agent's open(): `sessions` took 34 s, `logs` died with a raw
    TimeoutError traceback and each attempt left an agent stuck on the host."""
    d = plant(runs_dir)
    os.mkfifo(d / "output.log")
    ok = plant(runs_dir, "20261130-111112-gpu1-0b0b")
    (ok / "output.log").write_text("fine\n")
    before = agent_pids()
    t0 = time.monotonic()
    s = cli(*common, "sessions", "--host", "testhost", "--json", env=env, timeout=60)
    assert s.returncode == 0 and time.monotonic() - t0 < 15, s.stderr
    assert {v["session_id"] for v in json.loads(s.stdout)} >= {SID, ok.name}
    lg = cli(*common, "logs", SID, "--host", "testhost", env=env, timeout=60)
    assert lg.returncode == 1 and "not a regular file" in lg.stderr and "Traceback" not in lg.stderr, lg.stderr
    good = cli(*common, "logs", ok.name, "--host", "testhost", env=env, timeout=60)
    assert good.returncode == 0 and good.stdout == "fine\n"
    assert wait_until(lambda: not agent_pids() - before, 10, step=0.1), "an agent was left behind on the host"


def test_symlinks_are_never_followed(common, env, runs_dir, tmp_path):
    """A symlinked output.log printed /etc/hostname; a symlinked session directory let `kill` write
    stop-request.json into the link's target."""
    d = plant(runs_dir)
    (d / "output.log").symlink_to("/etc/hostname")
    p = cli(*common, "logs", SID, "--host", "testhost", env=env)
    assert p.returncode == 1 and "symlink" in p.stderr and "Traceback" not in p.stderr, p.stdout + p.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "spec.json").write_text(json.dumps({"session_id": "x", "argv": ["a"]}))
    linked = "20261130-111113-gpu0-1111"
    (runs_dir / linked).symlink_to(elsewhere, target_is_directory=True)
    s = cli(*common, "sessions", "--host", "testhost", "--json", env=env)
    assert linked not in s.stdout
    # a symlinked directory is no session: killing or reading it is an unknown session id (bad input, rc 2)
    k = cli(*common, "kill", linked, "--host", "testhost", "--grace", "1", "--json", env=env)
    assert k.returncode == 2 and json.loads(k.stdout)["error"]["kind"], k.stdout + k.stderr
    assert not (elsewhere / "stop-request.json").exists()
    lg = cli(*common, "logs", linked, "--host", "testhost", env=env)
    assert lg.returncode == 2 and "Traceback" not in lg.stderr


def test_follow_keeps_up_with_a_fast_log(tmp_path):
    """Follow used to top out near 5 MB/s (256 KiB per 50 ms tick). 96 MB already written are pushed at
    50 MB/s or more (the agent reads until caught up within a time budget per loop turn), in order."""
    import sys

    from console.config import HostConfig
    from console.link.client import LinkListener
    from console.link.link import HostLink
    from console.link.ssh import HostSpec
    from console.model import LogChunk

    runs = tmp_path / "runs"
    runs.mkdir()
    d = plant(runs)
    line = b"x" * 199 + b"\n"
    with open(d / "output.log", "wb") as f:
        f.write(line * (96 * 5000))  # 96 MB
    size = (d / "output.log").stat().st_size

    async def go():
        lk = HostLink(HostSpec(name="local", local=True),
                      HostConfig(python=sys.executable, runs_dir=str(runs), gpu_source="none"), interval=5.0)
        await lk.open()
        agent = lk.hello["pid"]
        got = {"end": 0, "bytes": 0, "ordered": True}

        class Counting(LinkListener):
            def on_log(self, chunk: LogChunk) -> None:
                got["ordered"] &= chunk.offset == got["end"]
                got["end"], got["bytes"] = chunk.end, got["bytes"] + len(chunk.data)
        lk.listen(Counting())
        t0, cpu0 = time.monotonic(), cpu_s(agent)
        await lk.client.follow_log(SID, 0)
        await await_until(lambda: got["end"] >= size, 30)
        took, cpu = time.monotonic() - t0, cpu_s(agent) - cpu0
        await lk.close()
        return got, took, cpu
    rates = []
    for _ in range(3):
        got, took, cpu = asyncio.run(go())
        assert got["end"] == size and got["bytes"] == size and got["ordered"], got
        rates.append((size / took, size / max(cpu, 1e-3)))
        if rates[-1][0] >= 50e6:
            break
    wall, per_cpu = max(r[0] for r in rates), max(r[1] for r in rates)
    busy = os.getloadavg()[0] > (os.cpu_count() or 1)
    # on a machine busier than its cores, the wall-clock rate is the machine's: then the agent must still push
    # 50 MB per CPU-second it got, and far beyond the old fixed cap (256 KiB per 50 ms tick: 5 MB/s at most)
    assert wall >= 50e6 or (busy and per_cpu >= 50e6 and wall >= 15e6), [
        f"{a / 1e6:.0f} MB/s ({b / 1e6:.0f}/CPU-s)" for a, b in rates]


def test_exit_events_are_not_delayed_by_a_fast_follow(tmp_path):
    """While the agent pushes a 96 MB log as fast as it can, a watched process's end still arrives at once."""
    import subprocess
    import sys

    from console.config import HostConfig
    from console.link.client import LinkListener
    from console.link.link import HostLink
    from console.link.ssh import HostSpec
    from console.model import AgentEvent, ExitEvent, LogChunk

    runs = tmp_path / "runs"
    runs.mkdir()
    d = plant(runs)
    with open(d / "output.log", "wb") as f:
        f.write((b"z" * 199 + b"\n") * (96 * 5000))
    victim = subprocess.Popen(["sleep", "60"])
    raw = Path(f"/proc/{victim.pid}/stat").read_text()
    ticks = int(raw[raw.rfind(")") + 2:].split()[19])

    async def go():
        lk = HostLink(HostSpec(name="local", local=True),
                      HostConfig(python=sys.executable, runs_dir=str(runs), gpu_source="none"), interval=5.0)
        await lk.open()
        seen: dict[str, float] = {}

        class Timing(LinkListener):
            def on_log(self, chunk: LogChunk) -> None:
                seen.setdefault("log", time.monotonic())

            def on_event(self, event: AgentEvent) -> None:
                if isinstance(event, ExitEvent) and event.pid == victim.pid:
                    seen.setdefault("exit", time.monotonic())
        lk.listen(Timing())
        await lk.client.watch(victim.pid, ticks)
        await lk.client.follow_log(SID, 0)
        await await_until(lambda: "log" in seen, 10, step=0.005)
        killed = time.monotonic()
        victim.kill()
        await await_until(lambda: "exit" in seen, 10, step=0.005)
        await lk.close()
        return seen.get("exit", float("inf")) - killed
    try:
        late = asyncio.run(go())
    finally:
        victim.kill()
        victim.wait(5)
    assert late < 0.5, f"the exit event came {late:.2f} s after the kill"
