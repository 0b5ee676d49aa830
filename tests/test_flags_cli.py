"""`mtpconsole flags` and `mtpconsole check` as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HELP_0523 = REPO / "console" / "data" / "sglang-0.5.23-launch-server-help.txt"
OLD_HELP = REPO / "tests" / "data" / "help" / "sglang-old-style-help.txt"

INCIDENT = (
    "--model-path /models/Qwen3.6-27B --speculative-algorithm EAGLE --speculative-num-steps 3 "
    "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --mem-fraction-static 0.90 "
    "--enable-hierarchical-cache --hicache-size 200 --max-running-requests 512 "
    "--cuda-graph-max-bs 512 --mamba-scheduler-strategy extra_buffer"
).split()


def mtp(*args: str, tmp_path: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               MTPCONSOLE_AUDIT_LOG=str(tmp_path / "audit.jsonl"), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "console", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_check_incident_flags(tmp_path):
    r = mtp("check", "--help-file", str(HELP_0523), "--server-version", "0.5.23", "--", *INCIDENT, tmp_path=tmp_path)
    assert r.returncode == 2, r.stderr  # invalid flags are bad input
    out = r.stdout
    assert "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill" in out
    assert "--mamba-scheduler-strategy was renamed --mamba-radix-cache-strategy" in out
    assert "fix: --mamba-radix-cache-strategy" in out
    assert "2 error(s), 0 warning(s) (sglang serve 0.5.23)" in out
    assert "Traceback" not in r.stderr


def test_check_json_and_clean_exit(tmp_path):
    r = mtp("check", "--help-file", str(HELP_0523), "--json", "--", "--model", "m", "--tp", "2", "--host", "0.0.0.0",
            tmp_path=tmp_path)
    assert r.returncode == 1
    problems = json.loads(r.stdout)
    assert [(p["kind"], p["severity"]) for p in problems] == [("ambiguous", "warning"), ("security", "warning")]
    r = mtp("check", "--help-file", str(HELP_0523), "--warn-ok", "--", "--model", "m", "--tp", "2", tmp_path=tmp_path)
    assert r.returncode == 0 and "1 warning(s)" in r.stdout
    # a whole pasted command line; and '--' right after the subcommand
    r = mtp("check", "--help-file", str(HELP_0523), "--", "python3", "-m", "sglang.launch_server",
            "--model-path", "m", "--port", "30001", tmp_path=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("ok: 4 arguments"), r.stdout + r.stderr
    r = mtp("check", "--", "--model-path", "m", "--help-file", str(HELP_0523), tmp_path=tmp_path)
    assert r.returncode == 2 and "--help-file" in r.stderr  # after '--' it is a server flag


def test_check_against_old_style_help(tmp_path):
    r = mtp("check", "--help-file", str(OLD_HELP), "--json", "--", *INCIDENT, tmp_path=tmp_path)
    kinds = [p["kind"] for p in json.loads(r.stdout)]
    assert "renamed" not in kinds and "ambiguous" not in kinds and "unknown" not in kinds


def test_flags_json_and_text(tmp_path):
    r = mtp("flags", "--help-file", str(HELP_0523), "--json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["prog"] == "sglang serve" and len(data["flags"]) == 530
    mp = next(f for f in data["flags"] if f["name"] == "--model-path")
    assert mp["aliases"] == ["--model"] and mp["required"] is True
    r = mtp("flags", "--help-file", str(HELP_0523), tmp_path=tmp_path)
    assert r.returncode == 0 and "key flags:" in r.stdout and "--mamba-radix-cache-strategy" in r.stdout
    r = mtp("flags", "--help-file", str(HELP_0523), "--search", "hicache size", tmp_path=tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines()[1].strip().startswith("--hicache-size")


@pytest.mark.parametrize("content", [b"", b"\xff\xfe\x00garbage\x80", b"just some text\n" * 1000],
                         ids=["empty", "binary", "15kB-of-text"])
def test_bad_help_files_are_one_clear_line(tmp_path, content):
    bad = tmp_path / "help.txt"
    bad.write_bytes(content)
    r = mtp("flags", "--help-file", str(bad), tmp_path=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("mtpconsole: ") and len(r.stderr.strip().splitlines()) == 1
    r = mtp("check", "--help-file", str(tmp_path / "missing.txt"), "--", "--port", "1", tmp_path=tmp_path)
    assert r.returncode == 2 and "missing.txt" in r.stderr


def test_no_source_is_a_user_error(tmp_path):
    r = mtp("check", "--", "--port", "1", tmp_path=tmp_path)
    assert r.returncode == 2 and "--help-file" in r.stderr and "Traceback" not in r.stderr


FAKE_SERVER = (
    "import argparse; p = argparse.ArgumentParser(prog='fake serve'); "
    "p.add_argument('--model-path', '--model', required=True); p.add_argument('--port', type=int); "
    "p.add_argument('--cuda-graph-max-bs-decode'); p.add_argument('--cuda-graph-max-bs-prefill'); p.parse_args()"
)


def test_online_against_the_local_host(tmp_path):
    """End to end through the real agent on 'local': learns a fake server's --help."""
    cmd = f'{sys.executable} -c "{FAKE_SERVER}"'
    r = mtp("--host", "local", "check", "--command", cmd, "--", "--model", "m", "--cuda-graph-max-bs", "8",
            tmp_path=tmp_path, timeout=90)
    assert r.returncode == 2, r.stdout + r.stderr  # an error listed: invalid flags
    assert "ambiguous option: --cuda-graph-max-bs could match" in r.stdout
    assert "(fake serve)" in r.stdout


def test_launch_demo_without_profile_or_flags_says_so(tmp_path):
    r = mtp("--demo", "launch", tmp_path=tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "nothing to launch: give --profile NAME or the server flags after '--'" in r.stderr
    assert "incident" in r.stderr and "Traceback" not in r.stderr


def test_launch_refuses_bad_flags_before_spawning(tmp_path):
    """The preflight checks flags against the host's server: nothing is started, argparse's own line is shown."""
    r = mtp("--demo", "launch", "--json", "--", "--model-path", "/m", "--cuda-graph-max-bs", "8",
            tmp_path=tmp_path, timeout=120)
    assert r.returncode != 0, r.stdout
    out = json.loads(r.stdout)
    assert out["cause"] is None and out["refused"] and out["session_id"] is None  # refused: nothing ran
    assert "ambiguous option: --cuda-graph-max-bs could match" in out["line"]
    assert [s["name"] for s in out["steps"] if s["state"] == "failed"] == ["preflight"]
