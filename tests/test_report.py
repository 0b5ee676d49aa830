"""`mtpconsole report` on a real failed launch of the SGLang stand-in: golden Markdown (times normalised).

The launch runs through the real agent, supervisor and lifecycle on the ``local`` host with
simulated GPUs; the report is read back by a fresh process from the run directory, the audit log
and the host's GPU sample ring. Set ``MTPCONSOLE_UPDATE_GOLDEN=1`` to rewrite the golden file.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from console.commands.report import parse_age
from console.errors import UserError
from console.sim.demo import MODEL_CONFIG
from tests.helpers.sshd import free_port

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "data" / "golden" / "report-gpu-oom.md"
SECRET = "sk-report-SECRET-4242"
FLAGS = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.90", "--max-running-requests", "512",
         "--context-length", "32768", "--api-key", SECRET]


def mtp(tmp: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp / "cache"), XDG_CONFIG_HOME=str(tmp / "xdg"),
               MTPCONSOLE_AUDIT_LOG=str(tmp / "audit.jsonl"), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "console", "--config", str(tmp / "config.toml"), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def local_host(tmp_path):
    (tmp_path / "sim" / "alloc").mkdir(parents=True)
    (tmp_path / "runs").mkdir()
    (tmp_path / "model").mkdir()
    (tmp_path / "sim" / "gpus.json").write_text(json.dumps([
        {"index": i, "uuid": f"GPU-r{i}", "name": "Sim", "mem_total_mib": 97887, "power_limit_w": 600.0}
        for i in range(2)]))
    (tmp_path / "model" / "config.json").write_text(json.dumps(MODEL_CONFIG))
    (tmp_path / "config.toml").write_text(f"""[hosts.local]
transport = "local"
python = "{sys.executable}"
runs_dir = "{tmp_path}/runs"
gpu_source = "sim"
sim_dir = "{tmp_path}/sim"
server_command = ["{sys.executable}", "-m", "console.sim.sglang"]
launch_env = {{ MTPCONSOLE_SIM_DIR = "{tmp_path}/sim", MTPCONSOLE_SIM_SPEED = "20", PYTHONPATH = "{REPO}" }}
""")
    yield tmp_path
    for rec in (tmp_path / "runs").glob("*/record.json"):  # nothing outlives the test
        try:
            os.killpg(json.loads(rec.read_text())["pgid"], 9)
        except (OSError, ValueError, KeyError):
            pass


def normalise(md: str, tmp: Path) -> str:
    md = md.replace(str(tmp), "<tmp>").replace(sys.executable, "<python>")
    md = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{3}Z)?", "<time>", md)
    md = re.sub(r"\d{8}-\d{6}-gpu\d+-[0-9a-f]{4}", "<session>", md)
    md = re.sub(r"\b(pid|process group|port) \d+", r"\1 <n>", md)
    md = re.sub(r"\b(parent_pid|pid)=\d+", r"\1=<n>", md)
    md = re.sub(r"\b(pgid|start) \d+", r"\1 <n>", md)
    md = re.sub(r"\b\d+ (bytes|MiB free)", r"<n> \1", md)
    md = re.sub(r"--port \d+", "--port <port>", md)
    md = re.sub(r"\| Port \| \d+ \|", "| Port | <port> |", md)
    out, section, rows = [], "", []
    for line in md.splitlines():
        if line.startswith("## "):
            section = line
        if section in ("## Timeline", "## GPU around the failure") and line.startswith("| <time>"):
            # which workers the agent saw die before the launcher's teardown is a race: not compared
            if "worker (pid" not in line and "detokenizer (pid" not in line:
                rows.append(line if section == "## Timeline" else "| <time> | <gpu sample> |")
            continue
        if rows:
            out += sorted(set(rows))
            rows = []
        out.append(line)
    return "\n".join(out + sorted(set(rows))) + "\n"


@pytest.mark.slow
def test_report_of_a_failed_stand_in_launch(local_host):
    tmp = local_host
    r = mtp(tmp, "launch", "--host", "local", "--gpu", "0", "--port", str(free_port()), "--force", "--wait",
            "--json", "--", "--model-path", str(tmp / "model"), *FLAGS)
    launched = json.loads(r.stdout)
    assert r.returncode == 1 and launched["cause"] == "gpu_oom", r.stdout + r.stderr
    out = tmp / "report" / "incident.md"
    out.parent.mkdir()
    rep = mtp(tmp, "report", "--host", "local", launched["session_id"], "--out", str(out), "--json")
    assert rep.returncode == 0, rep.stderr
    assert json.loads(rep.stdout)["cause"] == "gpu_oom"
    md = out.read_text()
    svg = out.with_suffix(".svg").read_text()
    assert SECRET not in md and SECRET not in svg and "--api-key ***" in md
    assert "<svg" in svg and "FAILED" in svg
    for heading in ("## Summary", "## Timeline", "## Flags", "## GPU around the failure", "## Log excerpt"):
        assert heading in md
    assert "lower --max-running-requests to ≤" in md  # the planner's fix
    assert "step **spawned**: ok" in md and "step **listening**: failed" in md  # the steps, from the audit log
    got = normalise(md, tmp)
    if os.environ.get("MTPCONSOLE_UPDATE_GOLDEN") == "1" or not GOLDEN.exists():
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(got)
    want = GOLDEN.read_text()
    assert got == want, "report differs from the golden file:\n" + "".join(
        difflib.unified_diff(want.splitlines(True), got.splitlines(True), "golden", "got"))


def test_report_of_an_unknown_session_is_a_clear_error(local_host):
    r = mtp(local_host, "report", "--host", "local", "20260101-000000-gpu0-abcd", "--out",
            str(local_host / "x.md"))
    assert r.returncode == 2 and "no session '20260101-000000-gpu0-abcd'" in r.stderr + r.stdout  # bad input
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("15", 15)])
def test_ages(text, seconds):
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["soon", "-1h", "2w", ""])
def test_bad_ages(text):
    with pytest.raises(UserError):
        parse_age(text)
