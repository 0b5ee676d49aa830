"""Bad hosts and a dying console, through the real CLI and a real sshd: unreachable, stalling, auth failure,
changed host key (each clear, others unaffected, bounded time); no python3; no GPU information; a full or
read-only runs directory; the console SIGKILLed mid-launch; two consoles racing for one GPU."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.errors import HostError
from console.ops import lifecycle
from tests.conftest import free_port
from tests.helpers.rel_util import SERVER, StallServer, cleanup_runs, cli, popen_cli, req, ssh_link, write_config
from tests.helpers.wait import await_until, wait_until

pytestmark = pytest.mark.sshd


@pytest.fixture
def bad_hosts(sshd, tmp_path):
    """An SSH config with the good alias plus four broken ones, and a console config for all of them."""
    stall = StallServer()
    wrong_key = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong_key)], check=True)
    other_host = tmp_path / "other_host"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_host)], check=True)
    changed_kh = tmp_path / "changed_known_hosts"
    pub = other_host.with_suffix(".pub").read_text().split()
    changed_kh.write_text(f"[127.0.0.1]:{sshd.port} {pub[0]} {pub[1]}\n")
    base = sshd.ssh_config.read_text()
    common = f"  User {sshd.user}\n  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {sshd.known_hosts}\n"
    cfg = tmp_path / "ssh_config"
    cfg.write_text(base + f"""
Host deadhost
  HostName 127.0.0.1
  Port {free_port()}
{common}
Host stallhost
  HostName 127.0.0.1
  Port {stall.port}
  ConnectTimeout 2
{common}
Host badauth
  HostName 127.0.0.1
  Port {sshd.port}
  User {sshd.user}
  IdentityFile {wrong_key}
  IdentitiesOnly yes
  UserKnownHostsFile {sshd.known_hosts}
Host changedkey
  HostName 127.0.0.1
  Port {sshd.port}
  User {sshd.user}
  IdentityFile {sshd.client_key}
  UserKnownHostsFile {changed_kh}
""")
    runs = tmp_path / "runs"
    hosts = {h: {"python": "python3", "runs_dir": str(runs), "gpu_source": "none", "connect_timeout": 2.0}
             for h in ("testhost", "deadhost", "stallhost", "badauth", "changedkey")}
    conf = write_config(tmp_path / "config.toml", hosts)
    env = {"SSH_AUTH_SOCK": "", "MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    yield cfg, conf, env
    stall.close()


def test_status_five_hosts_four_broken_each_clear_bounded(bad_hosts):
    cfg, conf, env = bad_hosts
    t0 = time.monotonic()
    p = cli("--ssh-config", str(cfg), "--config", str(conf), "status", "--json", "--timeout", "5",
            *[a for h in ("testhost", "deadhost", "stallhost", "badauth", "changedkey") for a in ("--host", h)],
            env=env, timeout=60)
    elapsed = time.monotonic() - t0
    assert p.returncode == 1, p.stderr
    hosts = {h["name"]: h["connection"] for h in json.loads(p.stdout)["hosts"]}
    assert hosts["testhost"]["state"] == "connected" and hosts["testhost"]["error"] is None
    assert hosts["deadhost"]["state"] == "unreachable" and "cannot connect" in hosts["deadhost"]["error"]
    assert hosts["stallhost"]["state"] == "unreachable" and "timed out" in hosts["stallhost"]["error"].lower()
    assert hosts["badauth"]["state"] == "unreachable" and "authentication failed" in hosts["badauth"]["error"]
    assert "HOST KEY CHANGED" in hosts["changedkey"]["error"] and "trust-host" in hosts["changedkey"]["error"]
    assert elapsed < 25, elapsed  # every host in parallel: bounded by the 2 s connect timeout, not the sum


def test_text_status_names_each_failure_on_one_line(bad_hosts):
    cfg, conf, env = bad_hosts
    p = cli("--ssh-config", str(cfg), "--config", str(conf), "status", "--timeout", "5",
            "--host", "testhost", "--host", "badauth", env=env, timeout=60)
    assert p.returncode == 1
    lines = p.stdout.splitlines()
    assert any(x.startswith("testhost: connected") for x in lines)
    assert any(x.startswith("badauth: unreachable") and "authentication failed" in x for x in lines)
    assert "Traceback" not in p.stderr


async def test_host_without_python3_clear_error(sshd, runs_dir):
    lk = ssh_link(sshd, runs_dir, python="/nonexistent/python3")
    with pytest.raises(HostError) as e:
        await asyncio.wait_for(lk.open(), 30)
    assert "/nonexistent/python3" in str(e.value) and "cannot start the agent" in str(e.value)
    await lk.close()
    assert list(runs_dir.iterdir()) == []


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
async def test_host_without_gpu_tools_says_no_gpu_information(sshd, runs_dir):
    lk = ssh_link(sshd, runs_dir, gpu_source="auto")
    await lk.open()
    try:
        snap = await lifecycle.fresh_snapshot(lk)
        assert snap.gpu_source == "none" and snap.gpus == []
        assert "no GPU information" in snap.gpu_error and "nvidia-smi not found" in snap.gpu_error
        r = await lifecycle.launch(lk, req(free_port()), timeout=30)
        assert r.ok
        gpu = next(s for s in r.steps if s.name == "on GPU")
        assert gpu.state == "skipped" and "no GPU information" in gpu.evidence
        k = await lifecycle.kill(lk, lifecycle.KillTarget(host="testhost", session_id=r.session_id), grace=5)
        assert k.ok and next(s for s in k.steps if s.name == "GPU released").state == "skipped"
    finally:
        await lk.close()
        cleanup_runs(runs_dir)


def _mount_tmpfs(path: Path, opts: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True).returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.mark.parametrize("kind", ["full", "read-only"])
async def test_runs_dir_full_or_read_only_clear_error_nothing_half_created(sshd, tmp_path, kind):
    d = tmp_path / "smallfs"
    if kind == "full":
        if not _mount_tmpfs(d, "size=64k"):
            pytest.skip("cannot mount a tmpfs here (needs root)")
        # fill it, leaving less than a run directory needs
        try:
            with open(d / "filler", "wb") as f:
                f.write(b"\0" * (1 << 20))
        except OSError:
            pass
    else:
        if not _mount_tmpfs(d, "size=64k,ro"):
            d.mkdir(exist_ok=True)
            os.chmod(d, 0o555)
            if os.geteuid() == 0:
                pytest.skip("root ignores 0555 and tmpfs cannot be mounted")
    before = sorted(p.name for p in d.iterdir())
    lk = ssh_link(sshd, d / "runs" if kind == "read-only" else d)
    await lk.open()
    try:
        r = await lifecycle.launch(lk, req(free_port()), timeout=20)
        assert not r.ok and r.session_id is None, r
        assert ("no space left on" in r.error or "Read-only" in r.error or "Permission denied" in r.error), r.error
        if kind == "full":  # refused by the host's preflight, before anything is made (issue 25 item 1)
            assert f"no space left on {d}" in r.error, r.error
        assert "Traceback" not in r.error
        left = sorted(p.name for p in d.iterdir() if p.name != ".launch.lock")
        assert left == before, left  # no half-made session dir, no partial supervisor copy
        snap = await lifecycle.fresh_snapshot(lk)
        assert snap.sessions == []
    finally:
        await lk.close()
        _umount(d)


def _launch_args(sshd, conf, port, *extra):
    return ["--ssh-config", str(sshd.ssh_config), "--config", str(conf), "launch", "--host", "testhost",
            "--gpu", "0", "--port", str(port), "--command", f"{sys.executable} {SERVER}", *extra, "--",
            "--model-path", "/m", "--delay", "1.2"]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_console_sigkilled_mid_launch_sessions_finds_true_state(sshd, tmp_path, runs_dir, sig):
    conf = write_config(tmp_path / "config.toml", {"testhost": {"python": "python3", "runs_dir": str(runs_dir),
                                                               "gpu_source": "none"}})
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    p = popen_cli(*_launch_args(sshd, conf, free_port(), "--wait"), env=env)
    try:
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if "spawned" in line or not line:
                break
        assert "spawned" in line, (line, p.stderr.read() if p.poll() is not None else "")
        p.send_signal(sig)
        p.wait(10)
        if sig == signal.SIGINT:  # Ctrl-C: a clean exit that leaves the server running
            assert p.returncode == 130 and "Traceback" not in p.stderr.read()
        s = cli("--ssh-config", str(sshd.ssh_config), "--config", str(conf), "sessions", "--host", "testhost",
                "--json", env=env)
        assert s.returncode == 0, s.stderr
        # (the host may run other servers: the foreign ones are listed too; ours is the one in our runs dir)
        views = [v for v in json.loads(s.stdout) if v["session_id"] and (runs_dir / v["session_id"]).is_dir()]
        assert len(views) == 1 and views[0]["state"] in ("launching", "loading", "ready"), views
        sid = views[0]["session_id"]
        def state() -> str:  # the server finishes starting with nobody watching
            out = cli("--ssh-config", str(sshd.ssh_config), "--config", str(conf), "sessions", "--host", "testhost",
                      "--json", env=env)
            return next(v for v in json.loads(out.stdout) if v["session_id"] == sid)["state"]
        assert wait_until(lambda: state() == "ready", 15, step=0.3), state()
        k = cli("--ssh-config", str(sshd.ssh_config), "--config", str(conf), "kill", sid, "--host", "testhost",
                "--grace", "5", "--json", env=env)
        assert k.returncode == 0 and json.loads(k.stdout)["ok"], k.stdout + k.stderr
        audit = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
        assert [e["op"] for e in audit].count("launch") == 1
    finally:
        if p.poll() is None:
            p.kill()
        cleanup_runs(runs_dir)


def test_two_cli_consoles_same_gpu_and_port_exactly_one_wins(sshd, tmp_path, runs_dir):
    conf = write_config(tmp_path / "config.toml", {"testhost": {"python": "python3", "runs_dir": str(runs_dir),
                                                               "gpu_source": "none"}})
    port = free_port()
    procs = [popen_cli(*_launch_args(sshd, conf, port, "--json"), env={"MTPCONSOLE_AUDIT_LOG": str(tmp_path / f"a{i}")})
             for i in range(2)]
    try:
        outs = [p.communicate(timeout=60) for p in procs]
        codes = sorted(p.returncode for p in procs)
        assert codes == [0, 1], outs
        results = [json.loads(o) for o, _ in outs]
        winner = next(r for r in results if r["ok"])
        loser = next(r for r in results if not r["ok"])
        assert loser["error"]["kind"] == "refused", loser  # the CLI contract: a refusal is an error object
        assert f"is held by session {winner['session_id']}" in loser["error"]["message"], loser
        assert loser["session_id"] is None
        dirs = [p.name for p in runs_dir.iterdir() if not p.name.startswith(".")]
        assert dirs == [winner["session_id"]]  # the loser left nothing behind
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        cleanup_runs(runs_dir)


NOISY = str(Path(__file__).parent / "helpers" / "rel_noisy_python.sh")
HUNG = str(Path(__file__).parent / "helpers" / "rel_hung_python.sh")


async def test_host_printing_banner_before_agent_still_connects(sshd, runs_dir):
    """Regression: a line on stdout before the agent's hello (rc file echo, MOTD) failed the connection with
    a bare JSON decode error. The noise is skipped."""
    lk = ssh_link(sshd, runs_dir, python=NOISY)
    try:
        await asyncio.wait_for(lk.open(), 30)
        assert lk.state == "connected" and await lk.request("ping", timeout=5)
    finally:
        await lk.close()


async def test_host_whose_python_hangs_is_bounded_and_says_what_it_printed(sshd, runs_dir, monkeypatch):
    from console.link import link as link_mod

    monkeypatch.setattr(link_mod, "AGENT_START_TIMEOUT_S", 2.0)
    lk = ssh_link(sshd, runs_dir, python=HUNG)
    t0 = time.monotonic()
    with pytest.raises(HostError) as e:
        await asyncio.wait_for(lk.open(), 30)
    assert time.monotonic() - t0 < 6
    assert "did not answer within 2 s" in str(e.value) and "loading site environment" in str(e.value)
    await lk.close()


async def test_long_outage_retries_leak_no_descriptors(bad_hosts, sshd, monkeypatch):
    """Hours of an unreachable or stalling host, compressed: many reconnect attempts (backoff shortened),
    each failing clearly; the console's open file descriptors do not grow."""
    from console.config import HostConfig
    from console.link import link as link_mod
    from console.link.link import HostLink
    from console.link.ssh import parse_host_spec

    monkeypatch.setattr(link_mod, "BACKOFF_BASE_S", 0.01)
    monkeypatch.setattr(link_mod, "BACKOFF_CAP_S", 0.05)
    cfg, _, _ = bad_hosts
    links = [HostLink(parse_host_spec(h), HostConfig(python="python3", connect_timeout=0.3), ssh_config=str(cfg))
             for h in ("deadhost", "stallhost", "badauth")]
    fds0 = len(os.listdir("/proc/self/fd"))
    tasks = [asyncio.create_task(lk.run()) for lk in links]
    try:
        assert await await_until(lambda: all(lk.attempts >= 1 for lk in links), 10)
        mid = len(os.listdir("/proc/self/fd"))

        def tried_enough() -> bool:  # the stalling host's ssh_config ConnectTimeout of 2 s bounds its attempts
            return all(lk.attempts >= (1 if lk.name == "stallhost" else 4) and lk.snapshot().connection.error
                       for lk in links)
        await await_until(tried_enough, 15)
        for lk in links:
            snap = lk.snapshot()
            assert snap.connection.state in ("unreachable", "reconnecting") and snap.connection.error, snap
            # (the stalling host's ssh_config ConnectTimeout of 2 s bounds each of its attempts)
            assert lk.attempts >= (1 if lk.name == "stallhost" else 4), (lk.name, lk.attempts)
        fds = len(os.listdir("/proc/self/fd"))
        assert fds <= max(mid, fds0) + 3, (fds0, mid, fds)
    finally:
        for lk in links:
            await lk.close()
        for t in tasks:
            t.cancel()


def test_cli_missing_server_binary_clear_error_nothing_left(sshd, tmp_path, runs_dir):
    conf = write_config(tmp_path / "config.toml", {"testhost": {"python": "python3", "runs_dir": str(runs_dir),
                                                               "gpu_source": "none"}})
    for command, why in (("/nonexistent/sglang serve", "does not exist or is not executable"),
                         ("no-such-sglang-binary serve", "not found on the host's PATH")):
        p = cli("--ssh-config", str(sshd.ssh_config), "--config", str(conf), "launch", "--host", "testhost",
                "--port", str(free_port()), "--command", command, "--", "--model-path", "/m",
                env={"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")})
        assert p.returncode == 1 and why in p.stdout and "Traceback" not in p.stderr, p.stdout + p.stderr
    assert [x for x in runs_dir.iterdir() if not x.name.startswith(".")] == []


def _lines(p, n: int, timeout: float = 20.0) -> list[str]:
    """n lines of a child's stdout, or fewer if the deadline passes (never blocks for ever)."""
    import queue
    import threading

    if not hasattr(p, "_rel_q"):
        p._rel_q = queue.Queue()
        threading.Thread(target=lambda: [p._rel_q.put(x) for x in iter(p.stdout.readline, "")],
                         daemon=True).start()
    out, deadline = [], time.monotonic() + timeout
    while len(out) < n:
        try:
            out.append(p._rel_q.get(timeout=max(0.01, deadline - time.monotonic())))
        except queue.Empty:
            break
    return out


def test_logs_follow_survives_agent_death_masks_secrets_and_escapes(sshd, tmp_path, runs_dir):
    """`logs -f` across a dead agent: it reconnects and resumes from the byte offset (every line once);
    secrets in the server's own start-up dump are masked; on a terminal, escape sequences are removed."""
    from console.commands.logs import _printer
    from tests.helpers.rel_util import agent_pids, descendants_of

    sid = "20260101-000000-gpu0-logsf"
    (runs_dir / sid).mkdir()
    log = runs_dir / sid / "output.log"
    log.write_text("line 0\n")
    conf = write_config(tmp_path / "config.toml", {"testhost": {"python": "python3", "runs_dir": str(runs_dir),
                                                               "gpu_source": "none"}})
    p = popen_cli("--ssh-config", str(sshd.ssh_config), "--config", str(conf), "logs", "--host", "testhost", sid,
                  "-f", env={"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")})
    try:
        assert _lines(p, 1) == ["line 0\n"]
        agents = [a for a in agent_pids() if a in descendants_of(sshd.proc.pid)]
        assert agents
        with open(log, "a") as f:
            f.write("line 1 server_args=ServerArgs(api_key='sk-RELdumpKEY0123456789', port=1)\n")
        assert "api_key='***'" in _lines(p, 1)[0]
        for a in agents:  # this console's agent (and any other of this sshd) dies
            os.kill(a, signal.SIGKILL)
        with open(log, "a") as f:
            f.write("".join(f"line {i}\n" for i in range(2, 50)))
        got = _lines(p, 48)
        assert got == [f"line {i}\n" for i in range(2, 50)]
    finally:
        p.kill()
        p.wait(5)
    assert _printer(True)("\x1b]52;c;SGVsbG8=\x07\x1b[2Jhello \x1b[31mred") == "hello red"
    assert _printer(False)("api_key='abc'") == "api_key='***'"
