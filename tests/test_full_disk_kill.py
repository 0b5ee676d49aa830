"""Issue 25 item 2: ``kill SESSION`` when the runs directory's filesystem is full.

A real small tmpfs is the runs directory (``mount -t tmpfs``; where that is refused, the test runs itself again
inside ``unshare -rm`` and mounts there; each test prints which one ran). A real agent, supervisor and server
(``tests/helpers/sgl_like.py``, its output through the supervisor's capped-log pipe, which drops what a full disk
cannot take and never blocks the server), the real CLI as a subprocess. The disk is filled to its last block, then
killed from the CLI: the signal goes out, the kill is confirmed, the host is never called lost, the supervisor
(told by ``STOP_SIGNAL``, see ``console.host.watch``) writes exit.json into the space it set aside, and the session
reads STOPPED; no zero-byte ``stop-request.json`` is left behind. A zero-byte or torn ``stop-request.json`` never
makes a serving session read STOPPING.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.config import HostConfig
from console.link.link import HostLink
from console.link.ssh import HostSpec
from console.ops import lifecycle
from tests.conftest import free_port
from tests.helpers.rel_util import REPO, cleanup_runs, cli, req, write_config

INNER = "MTP_FULL_DISK_INNER"
"""Set when this test runs again inside ``unshare -rm``: the mount point to use there."""
TMPFS_SIZE = "4m"


def _mount(where: Path) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs", str(where)],
                       capture_output=True, text=True)
    return p.returncode == 0


@pytest.fixture
def small_fs(request, tmp_path):
    """(the runs directory on a small tmpfs of its own, which way it was made: "tmpfs" or "unshare -rm")."""
    inner = os.environ.get(INNER)
    if inner:  # the re-run inside the namespace: the outer test made the mount point
        assert _mount(Path(inner)), "mount refused inside unshare -rm"
        try:
            yield Path(inner), "unshare -rm"
        finally:
            cleanup_runs(Path(inner))
            subprocess.run(["umount", "-l", inner], capture_output=True)
        return
    where = tmp_path / "runs"
    if _mount(where):
        print("full disk made by: mount -t tmpfs (root)")
        try:
            yield where, "tmpfs"
        finally:
            cleanup_runs(where)
            subprocess.run(["umount", "-l", str(where)], capture_output=True)
        return
    # mount refused: run this very test again in a user and mount namespace of its own, and mount there
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("neither mount -t tmpfs nor unshare -rm is allowed here: no real full disk to test on "
                    "(the host file helpers have no fault-injection seam for this test)")
    where.mkdir()
    p = subprocess.run(["unshare", "-rm", sys.executable, "-m", "pytest", "-q", "-p", "no:warnings", "-p",
                        "no:cacheprovider", f"{__file__}::{request.node.name}"], cwd=REPO, capture_output=True,
                       text=True, timeout=300, env={**os.environ, INNER: str(where)})
    print("full disk made by: unshare -rm + mount -t tmpfs")
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    pytest.skip("ran inside unshare -rm (passed there)")


def fill(root: Path) -> int:
    """Fill the filesystem of ``root`` to its last block (one filler file, in ever smaller writes); returns bytes
    written."""
    total = 0
    fd = os.open(root / "filler", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for size in (1 << 20, 1 << 16, 4096, 512, 1):
            block = b"x" * size
            while True:
                try:
                    total += os.write(fd, block)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
    finally:
        os.close(fd)
    assert os.statvfs(root).f_bavail == 0
    fd = os.open(root / "probe", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:  # the disk is full: a new file's first byte does not fit
        with pytest.raises(OSError) as e:
            os.write(fd, b"{}")
        assert e.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
        os.unlink(root / "probe")
    return total


def local_link(runs: Path) -> HostLink:
    return HostLink(HostSpec(name="local", local=True),
                    HostConfig(python=sys.executable, runs_dir=str(runs), gpu_source="none", log_cap_mb=1),
                    interval=0.3)


def conf_for(tmp: Path, runs: Path) -> Path:
    return write_config(tmp / "config.toml", {"local": {"transport": "local", "python": sys.executable,
                                                        "runs_dir": str(runs), "gpu_source": "none",
                                                        "log_cap_mb": 1}})


async def test_kill_on_a_full_disk_stops_the_server_and_reads_stopped(small_fs, tmp_path):
    runs, how = small_fs
    print(f"runs dir on a {TMPFS_SIZE} tmpfs, made by {how}")
    port = free_port()
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    link = local_link(runs)
    await link.open()
    try:
        r = await lifecycle.launch(link, req(port, host="local"), None, timeout=60)
        assert r.ok and r.state == "ready", r
        sid = r.session_id
        d = runs / sid
        rec = json.loads((d / "record.json").read_text())
        assert (d / ".exit.json.reserve").stat().st_size > 0  # set aside while there was space
        fill(runs)

        k = await asyncio.to_thread(cli, "--config", str(conf_for(tmp_path, runs)), "kill", sid, "--host", "local",
                                    "--grace", "10", env=env, timeout=120)
        out = k.stdout + k.stderr
        print(out)
        assert k.returncode == 0, out
        assert f"kill on local: OK — session {sid} [STOPPED]" in k.stdout, out
        assert "the stop request could not be recorded on disk" in k.stdout, out
        assert "No space left on device" in k.stdout and "lost contact" not in out, out
        assert not (d / "stop-request.json").exists()  # no zero-byte file left to say STOPPING

        # the server is gone: its pid (same start) and port; the supervisor recorded a stop, not a failure
        assert not Path(f"/proc/{rec['pid']}").exists() or (
            Path(f"/proc/{rec['pid']}/stat").read_text().split(")")[1].split()[19] != str(rec["start_ticks"]))
        ex = json.loads((d / "exit.json").read_text())
        assert ex["stopped_by_operator"] is True and ex["signal"] == 15 and ex["error"] is None, ex
        assert os.statvfs(runs).f_bavail == 0  # still full: exit.json went into the reserve's own blocks
        assert not (d / ".exit.json.reserve").exists()

        s = await asyncio.to_thread(cli, "--config", str(conf_for(tmp_path, runs)), "sessions", "--host", "local",
                                    "--json", env=env, timeout=60)
        assert s.returncode == 0, s.stderr
        (v,) = [x for x in json.loads(s.stdout) if x["session_id"] == sid]
        assert v["state"] == "stopped" and v["stopped_by"] == "an operator", v
        snap = await link.refresh()
        (info,) = [x for x in snap.sessions if x.session_id == sid]
        assert info.exit is not None and info.exit.stopped_by_operator and not info.stop_requested
    finally:
        await link.close()
        cleanup_runs(runs)


@pytest.mark.parametrize("planted", [b"", b'{"at": 17', b"[]"], ids=["zero-byte", "torn", "not-an-object"])
async def test_a_broken_stop_request_never_reads_stopping_while_the_server_serves(planted, tmp_path):
    """Not a full disk: whatever a failed write (or anyone) leaves as stop-request.json, a serving session is no
    STOPPING session; a whole one is."""
    runs = tmp_path / "runs"
    runs.mkdir()
    port = free_port()
    link = local_link(runs)
    await link.open()
    try:
        r = await lifecycle.launch(link, req(port, host="local"), None, timeout=60)
        assert r.ok and r.state == "ready", r
        d = runs / r.session_id
        (d / "stop-request.json").write_bytes(planted)
        snap = await link.refresh()
        (info,) = [x for x in snap.sessions if x.session_id == r.session_id]
        assert info.server_alive and not info.stop_requested, info
        env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
        s = await asyncio.to_thread(cli, "--config", str(conf_for(tmp_path, runs)), "sessions", "--host", "local",
                                    "--json", env=env, timeout=60)
        (v,) = [x for x in json.loads(s.stdout) if x["session_id"] == r.session_id]
        assert v["state"] in ("ready", "loading"), v
        (d / "stop-request.json").unlink()
        (d / "stop-request.json").write_text('{"at": 1, "signal": 15}\n')
        snap = await link.refresh()
        (info,) = [x for x in snap.sessions if x.session_id == r.session_id]
        assert info.stop_requested
    finally:
        await link.close()
        cleanup_runs(runs)
