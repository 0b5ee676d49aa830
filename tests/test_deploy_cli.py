"""Issue 29 item 3: ``mtpconsole deploy``'s refusals, before anything starts (no gateway needed): --read-only
refuses up/roll/down (status still reads), an unknown deployment names the known ones, roll-only options are
refused elsewhere, and without a terminal to confirm on (no --yes) nothing is started. Real CLI processes and a real
local agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.sim_files import REPO, make_sim


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    sim, model = make_sim(tmp_path, 2, tag="dcli")
    p = tmp_path / "config.toml"
    p.write_text(f"""
[hosts.local]
python = {json.dumps(sys.executable)}
runs_dir = {json.dumps(str(tmp_path / "runs"))}
gpu_source = "sim"
sim_dir = {json.dumps(str(sim))}
transport = "local"

[deployments.web]
host = "local"
gpus = [0, 1]
model_path = {json.dumps(str(model))}
ports = 1
router = {{ port = 9 }}
""")
    return p


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "console", "--config", str(config), "--audit-log",
                           str(config.parent / "audit.jsonl"), *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=subprocess.DEVNULL)


def test_read_only_refuses_up_roll_down_and_status_still_reads(config: Path) -> None:
    for action in ("up", "roll", "down"):
        p = cli(config, "deploy", action, "web", "--read-only", "--yes", "--json")
        assert p.returncode == 2, (action, p.stderr)
        assert json.loads(p.stdout)["error"]["kind"] == "read_only"
        assert f"read-only: deploy {action} is disabled" in p.stderr
    p = cli(config, "deploy", "status", "web", "--read-only", "--json")
    st = json.loads(p.stdout)
    assert p.returncode == 1 and st["gateway"]["health"] == 0 and st["replicas"] == []  # nothing answers on port 9
    assert "does not answer on 127.0.0.1:9" in st["gateway"]["error"]
    assert not (config.parent / "runs").exists() or not any((config.parent / "runs").glob("*/spec.json"))


def test_unknown_deployment_and_misplaced_options_are_one_line_rc_2(config: Path) -> None:
    p = cli(config, "deploy", "status", "api")
    assert p.returncode == 2 and "no deployment 'api' in the config (web)" in p.stderr
    p = cli(config, "deploy", "status", "web", "--set", "--max-running-requests=24")
    assert p.returncode == 2 and "apply to 'deploy roll' only" in p.stderr
    p = cli(config, "deploy", "roll", "web", "--rollback", "--set", "--x=1")
    assert p.returncode == 2 and "--rollback keeps the old replicas" in p.stderr


def test_without_a_terminal_or_yes_nothing_starts(config: Path) -> None:
    p = cli(config, "deploy", "up", "web")
    assert p.returncode == 1 and "not confirmed" in p.stderr and "--yes" in p.stderr
    assert not any((config.parent / "runs").glob("*/spec.json"))


def test_a_busy_gateway_metrics_port_refuses_up_before_anything_starts(config: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        metrics = busy.getsockname()[1]
        text = config.read_text().replace("router = { port = 9 }", f"router = {{ port = 9, metrics_port = {metrics} }}")
        config.write_text(text)
        p = cli(config, "deploy", "up", "web", "--yes", "--json")
    r = json.loads(p.stdout)
    assert p.returncode == 1 and not r["ok"] and f"metrics port 127.0.0.1:{metrics} is in use" in r["error"]
    assert not any((config.parent / "runs").glob("*/spec.json"))
