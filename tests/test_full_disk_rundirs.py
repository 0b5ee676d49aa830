"""Issue 25 item 1: a nearly full runs_dir never wedges a GPU. Real full filesystems, the real agent, supervisor
and CLI.

A launch on a full runs_dir says ``no space left on <runs_dir>`` (the host's preflight with too little space;
each later write that fails for space: the run directory's files, the supervisor's log and output.log, the
record) and leaves nothing: no run directory, no process. A run directory that never got a record (a full disk
under an older console, an agent killed right after ``mkdir``) is LAUNCHING only while its launch may still be
under way (its supervisor runs, another console holds the launch lock, within ``RECORD_TIMEOUT_S``), then
BROKEN: it blocks no GPU or port, ``kill`` and ``ack`` refuse it, and ``sessions --prune SESSION`` removes it.

The full disk: a small tmpfs mounted here (``mount -t tmpfs``), else one mounted in a user and mount namespace
(``unshare -rm``) and reached through its holder's ``/proc/PID/root``; each test prints and records
(``record_property("full_disk", ...)``) which of them ran, and is skipped when neither can be made (this module
has no fault-injection seam: a full disk is always a real one).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from console.config import HostConfig
from console.host.hostlib import RECORD_TIMEOUT_S, SUPERVISOR_NO_SPACE
from console.host.launch import materialize, supervisor_argv
from console.link.link import HostLink
from console.link.protocol import shipped_sources
from console.link.ssh import HostSpec
from console.ops import lifecycle
from tests.conftest import free_port
from tests.helpers.rel_util import cleanup_runs, cli, kill_quietly, req, write_config
from tests.helpers.wait import wait_until

IDLE = "import time\nprint('up', flush=True)\nt = time.time() + 60\nwhile time.time() < t:\n    time.sleep(0.1)\n"


# ------------------------------------------------------------------ a real full filesystem

@dataclass
class SmallFs:
    """A small tmpfs at ``path``; ``how`` says which way it was made."""

    path: Path
    how: str
    holder: subprocess.Popen | None = None
    mountpoint: Path | None = None

    def close(self) -> None:
        if self.holder is not None:
            kill_quietly([self.holder.pid])
            self.holder.wait(5)
        elif self.mountpoint is not None:
            subprocess.run(["umount", "-l", str(self.mountpoint)], capture_output=True)


def small_fs(tmp_path: Path, opts: str, record_property) -> SmallFs:
    """A tmpfs mounted with ``opts``: here when ``mount`` is allowed, else inside ``unshare -rm`` (reached through
    the namespace holder's /proc/PID/root); the test is skipped when neither works."""
    mnt = tmp_path / "smallfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode == 0:
        fs = SmallFs(mnt, f"mount -t tmpfs -o {opts}", mountpoint=mnt)
    else:
        holder = subprocess.Popen(["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o {opts} tmpfs "$0" && echo ok '
                                   "&& exec sleep 600", str(mnt)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        assert holder.stdout is not None
        if holder.stdout.readline().strip() != "ok":
            holder.kill()
            holder.wait(5)
            pytest.skip(f"no small filesystem can be made here: mount said {r.stderr.strip()!r}, "
                        f"unshare -rm + mount failed too")
        fs = SmallFs(Path(f"/proc/{holder.pid}/root{mnt}"), f"unshare -rm + mount -t tmpfs -o {opts}", holder)
    print(f"full disk made by: {fs.how}")
    record_property("full_disk", fs.how)
    return fs


def fill_bytes(d: Path, leave: int) -> Path:
    """Fill the filesystem of ``d`` until at most ``leave`` bytes are free; the filler file."""
    filler = d / ".filler"
    st = os.statvfs(d)
    with open(filler, "wb") as f:
        try:
            f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
            f.flush()
            os.fsync(f.fileno())
        except OSError:
            pass
    assert os.statvfs(d).f_bavail * os.statvfs(d).f_frsize <= leave
    return filler


def leave_inodes(d: Path, k: int) -> None:
    """Use every free inode of the filesystem of ``d`` but ``k`` (empty files under ``d/.inodes``)."""
    fill = d / ".inodes"
    shutil.rmtree(fill, ignore_errors=True)
    fill.mkdir()
    n = 0
    while True:
        try:
            (fill / str(n)).touch()
        except OSError:
            break
        n += 1
    for i in range(1, k + 1):
        (fill / str(n - i)).unlink()
    assert os.statvfs(d).f_favail == k


def session_entries(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if not p.name.startswith("."))


def procs_of_runs_dir(d: Path) -> list[int]:
    """Live processes whose environment names a run directory under ``d`` (a launched server), or whose command
    line does (a supervisor)."""
    out = []
    mark = str(d).encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            if stat[stat.rindex(")") + 2] in "ZX":
                continue
            env = Path(f"/proc/{name}/environ").read_bytes()
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if any(v.startswith(b"MTPCONSOLE_RUN_DIR=" + mark) for v in env.split(b"\0")) or \
                any(a.startswith(mark) for a in cmd.split(b"\0")[1:]) and b"mtpconsole_remote.supervisor" in cmd:
            out.append(int(name))
    return out


def local_config(tmp_path: Path, runs: Path) -> Path:
    return write_config(tmp_path / "config.toml", {"local": {"python": sys.executable, "runs_dir": str(runs),
                                                             "gpu_source": "none"}})


def run_cli(conf: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return cli("--config", str(conf), *args, env={"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")})


def launch_args(port: int, idle: Path, *opts: str) -> list[str]:
    return ["launch", "--no-validate", "--host", "local", "--gpu", "0", "--port", str(port),
            "--command", f"{sys.executable} {idle}", *opts, "--", "--model-path", "/m"]


def our_views(conf: Path, tmp_path: Path) -> dict[str, dict]:
    """``sessions --json`` of the local host, the sessions of the runs directory only (servers other tests run on
    this machine are FOREIGN pids: not ours to look at)."""
    p = run_cli(conf, tmp_path, "sessions", "--host", "local", "--all", "--json")
    assert p.returncode == 0, p.stderr
    return {v["session_id"]: v for v in json.loads(p.stdout) if v["session_id"]}


# ------------------------------------------------------------------ the launch on a full disk

def test_nearly_full_runs_dir_launch_says_no_space_and_leaves_nothing(tmp_path, record_property):
    """The issue's case: 4 KiB free. Was "the supervisor exited (1) without starting the server: no output" and a
    run directory reading LAUNCHING for good, blocking GPU 0 and the port after space was freed."""
    fs = small_fs(tmp_path, "size=1m", record_property)
    runs = fs.path
    idle = tmp_path / "idle.py"
    idle.write_text(IDLE)
    conf = local_config(tmp_path, runs)
    port = free_port()
    try:
        filler = fill_bytes(runs, 4096)
        before = sorted(p.name for p in runs.iterdir())
        p = run_cli(conf, tmp_path, *launch_args(port, idle))
        out = p.stdout + p.stderr
        assert p.returncode == 1, out
        assert f"no space left on {runs}" in p.stdout, out
        assert "without starting the server" not in out and "Traceback" not in out, out
        assert sorted(p.name for p in runs.iterdir() if p.name != ".launch.lock") == \
            [n for n in before if n != ".launch.lock"], "the refused launch left something behind"
        assert our_views(conf, tmp_path) == {}
        filler.unlink()  # space freed: the same GPU and port launch at once
        p = run_cli(conf, tmp_path, *launch_args(port, idle, "--json"))
        assert p.returncode == 0, p.stdout + p.stderr
        sid = json.loads(p.stdout)["session_id"]
        assert session_entries(runs) == [sid]
        k = run_cli(conf, tmp_path, "kill", "--host", "local", sid)
        assert k.returncode == 0, k.stdout + k.stderr
    finally:
        cleanup_runs(runs)
        fs.close()


async def test_every_launch_write_that_fails_for_space_says_so_and_leaves_nothing(tmp_path, record_property):
    """Inodes run out one write later each time (``nr_inodes``): the preflight (none free), the run directory's
    spec, the supervisor's own log and output.log, the record. Every refusal says ``no space left on <runs_dir>``,
    leaves no run directory, no temp file and no process; with room the same GPU and port launch."""
    fs = small_fs(tmp_path, "size=16m,nr_inodes=200", record_property)
    runs = fs.path
    lk = HostLink(HostSpec(name="local", local=True),
                  HostConfig(python=sys.executable, runs_dir=str(runs), gpu_source="none"), interval=0.3)
    await lk.open()
    port = free_port()
    try:
        warm = await lifecycle.launch(lk, req(free_port(), host="local"), wait=False, timeout=20)
        assert warm.ok, warm  # the supervisor's package and its bytecode are written once, as on any host
        cleanup_runs(runs)
        assert await asyncio.to_thread(wait_until, lambda: not procs_of_runs_dir(runs), 10)
        shutil.rmtree(runs / warm.session_id)
        kinds: dict[str, int] = {}
        for k in range(0, 12):
            leave_inodes(runs, k)
            r = await lifecycle.launch(lk, req(port, host="local"), wait=False, timeout=20)
            if r.ok:
                break
            assert f"no space left on {runs}" in (r.error or ""), (k, r)
            assert "without starting the server" not in r.error and r.session_id is None, (k, r)
            kinds.setdefault(next((w for w in ("no free inodes", "cannot write the run directory",
                                               "could not record the launch") if w in r.error), r.error), k)
            assert session_entries(runs) == [], (k, session_entries(runs))
            assert procs_of_runs_dir(runs) == [], (k, "a process of the refused launch still runs")
            assert not [p for p in runs.rglob("*.tmp.*")], (k, list(runs.rglob("*.tmp.*")))
        assert r.ok, f"no launch succeeded with {k} inodes free: {r}"
        print("refused with", k, "inodes free at most:", kinds)
        assert len(kinds) == 3, kinds  # the preflight, the agent's writes and the supervisor's each said it
        snap = await lifecycle.fresh_snapshot(lk)
        assert [s.session_id for s in snap.sessions] == [r.session_id] and snap.sessions[0].broken is None
    finally:
        await lk.close()
        cleanup_runs(runs)
        fs.close()


def test_supervisor_that_cannot_write_its_record_exits_no_space_and_leaves_nothing_running(tmp_path,
                                                                                          record_property):
    """The supervisor itself, on a disk filled after spec.json: the server starts, record.json cannot be written.
    It exits SUPERVISOR_NO_SPACE (3), says so, kills the server it started and leaves no temp file."""
    fs = small_fs(tmp_path, "size=256k", record_property)
    runs = fs.path
    lib = materialize(shipped_sources(), str(tmp_path / "lib"))  # the package lives elsewhere: only runs is full
    sid = "20261202-000000-gpu0-full"
    d = runs / sid
    d.mkdir()
    (d / "spec.json").write_text(json.dumps({"session_id": sid, "argv": [sys.executable, "-c", IDLE], "gpus": [0]}))
    fill_bytes(runs, 0)
    try:
        p = subprocess.run(supervisor_argv(lib, str(d)), input=json.dumps({"env": {}}).encode() + b"\n",
                           capture_output=True, timeout=30)
        assert p.returncode == SUPERVISOR_NO_SPACE, (p.returncode, p.stderr)
        assert wait_until(lambda: not procs_of_runs_dir(runs), 5), "the server the supervisor started still runs"
        assert sorted(x.name for x in d.iterdir()) == ["output.log", "spec.json", "supervisor.log"]
    finally:
        cleanup_runs(runs)
        fs.close()


# ------------------------------------------------------------------ run directories that never got a record

def _leftover(runs: Path, sid: str, port: int) -> Path:
    """What the issue found after the failed launch: spec.json (GPU 0, the port), an empty output.log and the
    supervisor's temp record."""
    d = runs / sid
    d.mkdir(mode=0o700)
    (d / "spec.json").write_text(json.dumps({"session_id": sid, "argv": [sys.executable, "x"], "gpus": [0],
                                             "port": port}))
    (d / "output.log").touch()
    (d / ".record.json.tmp.4242").touch()
    return d


def _supervisor_waiting(runs: Path, sid: str, port: int) -> tuple[Path, subprocess.Popen]:
    """A launch under way: its run directory with spec.json, and the real supervisor started on it, still waiting
    for its launch line (so it has written no record yet)."""
    d = runs / sid
    d.mkdir(mode=0o700)
    (d / "spec.json").write_text(json.dumps({"session_id": sid, "argv": [sys.executable, "-c", IDLE], "gpus": [0],
                                             "port": port}))
    lib = materialize(shipped_sources(), str(runs))
    sup = subprocess.Popen(supervisor_argv(lib, str(d)), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    assert wait_until(lambda: (d / "supervisor.log").exists(), 10)
    return d, sup


def test_run_dir_without_record_is_broken_blocks_nothing_and_is_pruned(tmp_path, runs_dir):
    """The issue's leftover and an agent killed right after ``mkdir`` (a lone ``.spec.json.tmp.PID``): BROKEN with
    why, never LAUNCHING; GPU 0 and the port launch; ``kill`` and ``ack`` refuse them; ``sessions --prune``
    removes each and names what it removed; bad input is rc 2 with one line (and a JSON error object)."""
    idle = tmp_path / "idle.py"
    idle.write_text(IDLE)
    conf = local_config(tmp_path, runs_dir)
    port = free_port()
    left = _leftover(runs_dir, "20261201-101010-gpu0-dead", port)
    killed = runs_dir / "20261201-101011-gpu0-kild"
    killed.mkdir(mode=0o700)
    (killed / f".spec.json.tmp.{2 ** 22 + 17}").touch()
    try:
        views = our_views(conf, tmp_path)
        for sid, why in ((left.name, "(spec.json: GPU 0, port %d)" % port), (killed.name, "no spec.json either")):
            v = views[sid]
            assert v["state"] == "failed" and v["gpus"] == [] and v["port"] is None, v
            assert "no record.json" in v["broken"] and "supervisor is gone" in v["broken"] and why in v["broken"], v
            assert f"mtpconsole sessions --host local --prune {sid}" in v["hint"], v
        text = run_cli(conf, tmp_path, "sessions", "--host", "local").stdout
        assert f"{left.name:<36} BROKEN" in text and "LAUNCHING" not in text, text
        p = run_cli(conf, tmp_path, *launch_args(port, idle, "--json"))  # GPU 0 and the port: not held
        assert p.returncode == 0, p.stdout + p.stderr
        live = json.loads(p.stdout)["session_id"]
        k = run_cli(conf, tmp_path, "kill", "--host", "local", left.name)
        assert k.returncode != 0 and "broken" in k.stdout + k.stderr, k.stdout + k.stderr
        a = run_cli(conf, tmp_path, "ack", "--host", "local", left.name)
        assert a.returncode == 2 and "prune" in a.stderr, a.stderr
        p = run_cli(conf, tmp_path, "sessions", "--host", "local", "--prune", left.name, "--json")
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout)
        assert got["run_dir"] == str(left) and got["removed"] == [".record.json.tmp.4242", "output.log", "spec.json"]
        assert not left.exists()
        p = run_cli(conf, tmp_path, "sessions", "--host", "local", "--prune", killed.name)
        assert p.returncode == 0 and f"removed the broken run directory {killed}" in p.stdout, p.stdout + p.stderr
        assert ".spec.json.tmp." in p.stdout and not killed.exists()
        for sid, kind, words in ((live, "bad_input", "is not broken"), ("../etc", "bad_input", "not a session id"),
                                 ("20261201-000000-gpu9-none", "unknown_session", "no session")):
            p = run_cli(conf, tmp_path, "sessions", "--host", "local", "--prune", sid, "--json")
            assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and words in p.stderr, p.stderr
            assert json.loads(p.stdout)["error"]["kind"] == kind, p.stdout
        assert (runs_dir / live).is_dir()
        assert run_cli(conf, tmp_path, "kill", "--host", "local", live).returncode == 0
    finally:
        cleanup_runs(runs_dir)


def test_launch_under_way_reads_launching_until_its_supervisor_is_gone(tmp_path, runs_dir):
    """A record-less run directory whose real supervisor runs is a launch under way: LAUNCHING, and it holds GPU 0
    and its port. Its supervisor SIGKILLed: BROKEN, and the GPU and port are free. Past RECORD_TIMEOUT_S with its
    supervisor alive it is BROKEN too, and ``--prune`` refuses it while that supervisor runs (rc 1)."""
    idle = tmp_path / "idle.py"
    idle.write_text(IDLE)
    conf = local_config(tmp_path, runs_dir)
    port = free_port()
    d, sup = _supervisor_waiting(runs_dir, "20261201-121212-gpu0-wait", port)
    hung = None
    try:
        v = our_views(conf, tmp_path)[d.name]
        assert v["state"] == "launching" and v["broken"] is None and v["gpus"] == [0], v
        p = run_cli(conf, tmp_path, *launch_args(port, idle))
        assert p.returncode == 1 and f"held by session {d.name}" in p.stdout, p.stdout + p.stderr
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait(5)
        v = our_views(conf, tmp_path)[d.name]
        assert v["state"] == "failed" and "supervisor is gone" in v["broken"], v
        p = run_cli(conf, tmp_path, *launch_args(port, idle, "--json"))
        assert p.returncode == 0, p.stdout + p.stderr
        assert run_cli(conf, tmp_path, "kill", "--host", "local", json.loads(p.stdout)["session_id"]).returncode == 0
        h, hung = _supervisor_waiting(runs_dir, "20261201-121213-gpu0-hung", free_port())
        old = time.time() - RECORD_TIMEOUT_S - 30
        os.utime(h, (old, old))  # its launch began before the timeout: a supervisor that never records
        v = our_views(conf, tmp_path)[h.name]
        assert v["state"] == "failed" and f"its supervisor (pid {hung.pid}) runs" in v["broken"], v
        p = run_cli(conf, tmp_path, "sessions", "--host", "local", "--prune", h.name)
        assert p.returncode == 1 and "still run" in p.stderr and h.is_dir(), p.stderr
        os.kill(hung.pid, signal.SIGKILL)
        hung.wait(5)
        p = run_cli(conf, tmp_path, "sessions", "--host", "local", "--prune", h.name)
        assert p.returncode == 0 and not h.exists(), p.stderr
    finally:
        kill_quietly([sup.pid] + ([hung.pid] if hung else []))
        cleanup_runs(runs_dir)


def test_record_less_run_dir_reads_launching_while_another_console_holds_the_launch_lock(tmp_path, runs_dir):
    """Another console's launch holds the runs directory's lock from its preflight until its supervisor starts:
    a record-less run directory with no supervisor may be that launch, so it reads LAUNCHING while the lock is
    held, and BROKEN once it is released."""
    conf = local_config(tmp_path, runs_dir)
    d = _leftover(runs_dir, "20261201-131313-gpu0-lock", free_port())
    fd = os.open(runs_dir / ".launch.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        v = our_views(conf, tmp_path)[d.name]
        assert v["state"] == "launching" and v["broken"] is None, v
        fcntl.flock(fd, fcntl.LOCK_UN)
        v = our_views(conf, tmp_path)[d.name]
        assert v["state"] == "failed" and "no record.json" in v["broken"], v
    finally:
        os.close(fd)
