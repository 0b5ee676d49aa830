"""Issue 31 item 3: ``mtpconsole status --brief``: one line per host (connection, sample age, GPUs as glyphs with
their state, the worst session state, power), trouble first (FAILED, UNREACHABLE, STALE, orphans, advice); the
rows as JSON with ``--json``. The rows are ``console/core/fleet.py``'s, shared with the TUI's fleet screen."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from console.core.fleet import RowCache, brief_line, fleet_row, matches, sort_rows
from console.model import Advice, ConnectionInfo, GpuSample, HostSnapshot, HostView, SessionView
from tests.conftest import free_port
from tests.helpers.sim_files import make_sim

NOW = 1_800_000_000.0


def _view(name, state="connected", age=0.5, sessions=(), advice=(), gpus=4):
    snap = HostSnapshot(name=name, connection=ConnectionInfo(state=state), sampled_at=NOW - age,
                        received_at=NOW - age, gpu_source="sim",
                        gpus=[GpuSample(index=i, power_w=100.0, power_limit_w=600.0) for i in range(gpus)])
    return HostView(snapshot=snap, sessions=list(sessions), advice=list(advice))


def test_rows_sort_trouble_first_and_say_each_gpu():
    views = [
        _view("a-ok", sessions=[SessionView(host="a-ok", session_id="s1", state="ready", gpus=[0, 1], port=30000)]),
        _view("b-advice", advice=[Advice(host="b-advice", kind="x", message="raise --mem-fraction-static")]),
        _view("c-failed", sessions=[SessionView(host="c-failed", session_id="s2", state="failed", gpus=[2],
                                                cause="gpu_oom")]),
        _view("d-stale", age=60.0, sessions=[SessionView(host="d-stale", session_id="s3", state="ready", gpus=[0])]),
        _view("e-down", state="unreachable"),
    ]
    rows = sort_rows(fleet_row(v, NOW, 1.0) for v in views)
    assert [r.host for r in rows] == ["c-failed", "e-down", "d-stale", "b-advice", "a-ok"]
    by = {r.host: r for r in rows}
    assert by["a-ok"].glyphs == "●●··" and by["a-ok"].worst_label == "READY" and by["a-ok"].trouble is None
    assert by["c-failed"].glyphs == "··✗·" and by["c-failed"].worst_label == "FAILED: gpu_oom"
    assert by["e-down"].glyphs == "××××" and by["e-down"].trouble == "UNREACHABLE"
    assert by["d-stale"].trouble == "STALE" and by["b-advice"].trouble == "ADVICE" and by["b-advice"].advice == 1
    assert by["a-ok"].power_w == 400.0 and by["a-ok"].power_limit_w == 2400.0
    line = brief_line(by["c-failed"], 10)
    assert line.startswith("c-failed    connected") and "··✗·" in line and "FAILED: gpu_oom" in line
    assert "400/2400 W" in line and line.endswith("[FAILED]")
    assert matches(by["c-failed"], "oom") and matches(by["e-down"], "unreach") and not matches(by["a-ok"], "fail")


ENV = {**os.environ, "MTPCONSOLE_AUDIT_LOG": os.devnull}


def test_the_row_cache_gives_fleet_rows_rows_and_computes_only_a_changed_view():
    """Issue 31: the overview's rows at 512 hosts: a host whose view is the same object is not computed again; as
    the time passes its row is what ``fleet_row`` says then (the age; STALE once the sample is old)."""
    views = {v.snapshot.name: v for v in [
        _view("a-ok", sessions=[SessionView(host="a-ok", session_id="s1", state="ready", gpus=[0, 1], port=30000)]),
        _view("b-down", state="unreachable"), _view("c-idle")]}
    cache = RowCache()
    first = cache.rows(views, NOW, 1.0)
    assert first == [fleet_row(v, NOW, 1.0) for v in views.values()]
    assert all(a is b for a, b in zip(cache.rows(views, NOW, 1.0), first))  # nothing changed: the same rows
    for later in (NOW + 0.2, NOW + 2.6, NOW + 30.0):  # fresh, then amber (STALE badges), then red
        assert cache.rows(views, later, 1.0) == [fleet_row(v, later, 1.0) for v in views.values()]
    views["c-idle"] = _view("c-idle", sessions=[SessionView(host="c-idle", session_id="s9", state="failed",
                                                            gpus=[1], cause="gpu_oom")])
    rows = cache.rows(views, NOW, 1.0)
    assert rows == [fleet_row(v, NOW, 1.0) for v in views.values()] and rows[2].trouble == "FAILED"
    del views["b-down"]
    assert [r.host for r in cache.rows(views, NOW, 1.0)] == ["a-ok", "c-idle"]


def test_status_brief_local_and_a_dead_host(tmp_path, runs_dir):
    """The real CLI: a host that cannot be reached comes first, the local simulated host's line says its GPUs."""
    d, _ = make_sim(tmp_path, 3)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[hosts."local"]\nruns_dir = "{runs_dir}"\npython = "{sys.executable}"\ngpu_source = "sim"\n'
                   f'sim_dir = "{d}"\n')
    ssh = tmp_path / "ssh_config"
    ssh.write_text(f"Host dead\n  HostName 127.0.0.1\n  Port {free_port()}\n  ConnectTimeout 3\n")
    base = [sys.executable, "-m", "console", "status", "--brief", "--host", "local", "--host", "dead",
            "--config", str(cfg), "--ssh-config", str(ssh), "--timeout", "10"]
    r = subprocess.run(base, capture_output=True, text=True, timeout=90, env=ENV)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("dead ") and "unreachable" in lines[0] and lines[0].endswith("[UNREACHABLE]")
    assert lines[1].startswith("local") and "connected" in lines[1] and "···" in lines[1] and "IDLE" in lines[1]
    assert lines[2].startswith("(● ready")
    r = subprocess.run(base + ["--json"], capture_output=True, text=True, timeout=90, env=ENV)
    hosts = json.loads(r.stdout)["hosts"]
    assert [h["host"] for h in hosts] == ["dead", "local"]
    assert hosts[1]["glyphs"] == "···" and [g["kind"] for g in hosts[1]["gpus"]] == ["idle"] * 3
    assert hosts[0]["trouble"] == "UNREACHABLE" and hosts[1]["trouble"] is None
