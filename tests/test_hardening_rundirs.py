"""Issue 18, items 3 and 8: every run directory is read on its own and trusted in nothing. A malformed one is
listed as broken with its reason and never hides the host's other sessions or kills the agent; a planted copy
of the shipped modules is never executed. The real agent over the test sshd, real files, real launches."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from console.link.link import sessions_each
from console.link.protocol import shipped_sources
from tests.conftest import free_port
from tests.helpers.rel_util import cleanup_runs, cli, ssh_link, write_config
from tests.helpers.wait import holds_for

pytestmark = pytest.mark.sshd

IDLE = "import time\nprint('up', flush=True)\nt = time.time() + 60\nwhile time.time() < t:\n    time.sleep(0.1)\n"


def bad_dirs(runs_dir: Path) -> dict[str, str]:
    """Malformed run directories, each with (part of) the reason it must be listed with."""
    cases = {
        "spec-list": ("spec.json", b"[1, 2]", "spec.json must hold a JSON object"),
        "exit-types": ("exit.json", json.dumps({"ended_at": "yesterday", "exit_code": "1"}).encode(),
                       "exit.json: '"),
        "record-list": ("record.json", b"[1]", "record.json must hold a JSON object"),
        "deep": ("spec.json", b"[" * 200_000 + b"]" * 200_000, "spec.json nests deeper than"),
        "huge": ("spec.json", None, "spec.json is too large"),
        "fifo": ("record.json", "fifo", "record.json is not a regular file"),
        "link": ("spec.json", "symlink", "spec.json is a symlink"),
    }
    out = {}
    for i, (name, (fname, content, reason)) in enumerate(cases.items()):
        sid = f"20261130-12000{i}-gpu0-{name}"
        d = runs_dir / sid
        d.mkdir()
        if fname != "spec.json":
            (d / "spec.json").write_text(json.dumps({"session_id": sid, "argv": ["x"], "gpus": [0]}))
        if content is None:
            with open(d / fname, "wb") as f:
                f.truncate(100 << 20)  # 100 MB (sparse: cheap to make, as costly to read as a real one)
        elif content == "fifo":
            os.mkfifo(d / fname)
        elif content == "symlink":
            (d / fname).symlink_to("/etc/hostname")
        else:
            (d / fname).write_bytes(content)
        out[sid] = reason
    return out


def test_each_bad_run_directory_is_listed_broken_and_hides_nothing(sshd, runs_dir, tmp_path):
    """A spec.json that is a list, an exit.json with wrong types, record.json ``[1]``, JSON nested 200,000 deep,
    a 100 MB spec.json, a FIFO record.json and a symlinked spec.json: before, the whole sample was replaced by
    an empty one ("agent sent an invalid sample") or the agent died on every tick (host "unreachable")."""
    server = tmp_path / "idle.py"
    server.write_text(IDLE)
    reasons: dict[str, str] = {}

    async def go():
        lk = ssh_link(sshd, runs_dir)
        await lk.open()
        try:
            r = await lk.request("launch", {"spec": {
                "session_id": "20261130-115959-gpu0-900d", "argv": [sys.executable, str(server)], "gpus": [0],
                "port": free_port()}, "env": {}, "preflight": {}})
            assert r["session_id"] == "20261130-115959-gpu0-900d"
            reasons.update(bad_dirs(runs_dir))
            agent = lk.hello["pid"]
            for _ in range(3):  # several ticks: the agent survives every one
                snap = await lk.refresh(timeout=20)
                assert snap.connection.state == "connected" and snap.connection.error is None, snap.connection
                by_id = {s.session_id: s for s in snap.sessions}
                assert by_id["20261130-115959-gpu0-900d"].server_alive
                assert by_id["20261130-115959-gpu0-900d"].broken is None
                for sid, reason in reasons.items():
                    assert by_id[sid].broken and reason in by_id[sid].broken, (sid, by_id[sid].broken)
                assert any(p.session_id == "20261130-115959-gpu0-900d" for p in snap.servers)
            assert lk.hello["pid"] == agent and lk.state == "connected"
        finally:
            await lk.close()
    try:
        asyncio.run(go())
        conf = write_config(tmp_path / "config.toml", {"testhost": {"python": "python3", "runs_dir": str(runs_dir),
                                                                    "gpu_source": "none"}})
        p = cli("--ssh-config", str(sshd.ssh_config), "--config", str(conf), "status", "--host", "testhost",
                env={"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "a.jsonl")})
        assert p.returncode == 0, p.stderr
        assert "gpu0-spec-list: broken: spec.json must hold a JSON object" in p.stdout, p.stdout
        assert "session 20261130-115959-gpu0-900d: alive" in p.stdout
        v = cli("--ssh-config", str(sshd.ssh_config), "--config", str(conf), "sessions", "--host", "testhost",
                "--json", env={"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "a.jsonl")})
        views = {x["session_id"]: x for x in json.loads(v.stdout)}
        assert views["20261130-120000-gpu0-spec-list"]["state"] == "failed"
        assert "broken run directory" in views["20261130-120000-gpu0-spec-list"]["hint"]
    finally:
        for sid in reasons:  # the test helper's cleanup reads record.json files: not these
            shutil.rmtree(runs_dir / sid)
        cleanup_runs(runs_dir)


def test_console_validates_each_session_on_its_own():
    """What the agent sends is checked per session too: one malformed entry is listed broken, not the sample."""
    good = {"session_id": "a", "run_dir": "/r/a", "spec": {"session_id": "a", "argv": ["x"]}}
    bad = {"session_id": "b", "run_dir": "/r/b", "spec": ["not", "an", "object"]}
    out = sessions_each([good, bad, "junk"])
    assert out[0].broken is None and out[0].spec.argv == ["x"]
    assert out[1].session_id == "b" and "invalid run directory: spec" in out[1].broken
    assert out[2].session_id == "?" and out[2].broken


def test_planted_supervisor_package_is_never_executed(sshd, runs_dir, tmp_path):
    """A hand-written copy of the shipped modules where the agent writes them (``.lib-<digest>``) used to be run
    by the next launch. It is verified (owner, mode, exact contents) and, failing that, moved aside."""
    canary = tmp_path / "CANARY"
    sources = shipped_sources()
    digest = hashlib.sha256(json.dumps(sorted(sources.items())).encode("utf-8")).hexdigest()[:16]
    pkg = runs_dir / f".lib-{digest}" / "mtpconsole_remote"
    pkg.mkdir(parents=True)
    for name, src in sources.items():
        (pkg / f"{name}.py").write_text(src)
    (pkg / "__init__.py").write_text(f"open({str(canary)!r}, 'w').write('pwned')\n")
    for p in (pkg.parent, pkg, *pkg.iterdir()):
        p.chmod(0o700 if p.is_dir() else 0o600)
    server = tmp_path / "idle.py"
    server.write_text(IDLE)
    conf = write_config(tmp_path / "config.toml", {"testhost": {"python": "python3", "runs_dir": str(runs_dir),
                                                                "gpu_source": "none"}})
    try:
        p = cli("--ssh-config", str(sshd.ssh_config), "--config", str(conf), "launch", "--no-validate", "--host", "testhost",
                "--port", str(free_port()), "--json", "--command", f"{sys.executable} {server}", "--",
                "--model-path", "/m", env={"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "a.jsonl")})
        assert p.returncode == 0, p.stdout + p.stderr
        assert holds_for(lambda: not canary.exists(), 5, step=0.1), "the planted package was executed"
        assert "pwned" not in (pkg / "__init__.py").read_text() and list(runs_dir.glob(".lib-*.untrusted.*"))
    finally:
        cleanup_runs(runs_dir)
