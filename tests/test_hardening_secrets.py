"""Issue 18, item 2: secrets. Abbreviated secret flags that argparse accepts are masked everywhere (the
bundled schema resolves them), argv dumped as JSON in a request's result is masked in the audit log, the
audit log is 0600 in a 0700 directory, run directories are 0700 with 0600 files, spec.json holds the
masked argv (the supervisor gets the real one on stdin), and the local transport passes only the configured
environment to a server."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from console.audit import SUMMARY_CHARS, Audit, summarize
from console.core.redact import redact_argv, redact_obj, redact_text
from tests.conftest import free_port
from tests.helpers.rel_util import cleanup_runs, cli, write_config
from tests.helpers.wait import wait_until

KEY = "sk-H3secretAPIKEY0123456789abcdef"
ADMIN = "adm1nH3secretVALUE"
PW = "pemH3secretPASS"
DUMPER = """import json, os, sys, time
with open(os.environ["H3_OUT"], "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, f)
print("dumper started", flush=True)
t = time.time() + 30
while time.time() < t:
    time.sleep(0.1)
"""


@pytest.mark.parametrize("argv,shown", [
    (["--ap", KEY], ["--ap", "***"]),
    (["--api-ke", KEY], ["--api-ke", "***"]),
    (["--api-ke=" + KEY], ["--api-ke=***"]),
    (["--admin", ADMIN], ["--admin", "***"]),
    (["--ssl-keyfile-p", PW, "--ssl-keyfile", "/k.pem"], ["--ssl-keyfile-p", "***", "--ssl-keyfile", "/k.pem"]),
    (["--hf", "tmpl", "--hf-t", KEY], ["--hf", "tmpl", "--hf-t", "***"]),  # --hf is --hf-chat-template-name
])
def test_abbreviated_secret_flags_are_masked_in_argv_text_and_json(argv, shown):
    full = ["python3", "-m", "sglang.launch_server", *argv, "--port", "30000"]
    assert redact_argv(full)[3:-2] == shown
    for text in (" ".join(full), json.dumps(full), json.dumps({"argv": full}), repr(full)):
        out = redact_text(text)
        for secret in (KEY, ADMIN, PW):
            assert secret not in out, out
        assert "30000" in out and ("tmpl" in out or "--hf" not in argv)
    assert KEY not in json.dumps(redact_obj({"servers": [{"argv": full}]}))


@pytest.mark.parametrize("line", ["hf_config = AutoConfig.from_pretrained(p)", "--hf tmpl --port 1",
                                  "--ssl-keyfile /etc/k.pem", '["--tokenizer-path", "/t"]', "--tp 2 --host h"])
def test_no_over_masking(line):
    assert redact_text(line) == line


def test_audit_result_with_argv_is_masked_before_it_is_cut():
    """The link hands the audit the raw result: it is masked as an object first, then cut, so a secret
    that sits where the summary is cut can never survive in a half-masked tail."""
    full = {"session": {"spec": {"argv": ["x", "--api-key", KEY, "--ap", KEY]}}}
    assert KEY not in summarize(full) and KEY not in summarize(json.dumps(full))
    for pad in range(SUMMARY_CHARS - 60, SUMMARY_CHARS + 5):
        long = {"session": {"spec": {"argv": ["x", "--model-path", "/m" + "x" * pad, "--ap", KEY]}}}
        out = summarize(long)
        assert len(out) <= SUMMARY_CHARS and KEY[:6] not in out, out


def test_audit_log_is_private(tmp_path):
    path = tmp_path / "state" / "mtpconsole" / "audit.jsonl"
    a = Audit(path)
    a("h", "launch", {"spec": {"argv": ["x", "--api-ke", KEY]}}, True,
      json.dumps({"argv": ["x", "--api-ke", KEY]}), 1.0)
    a.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert KEY not in path.read_text() and '"--api-ke"' in path.read_text()
    old = tmp_path / "old.jsonl"
    old.write_text("")
    old.chmod(0o644)
    Audit(old).close()
    assert stat.S_IMODE(old.stat().st_mode) == 0o600


def test_abbreviated_key_never_in_audit_json_or_text_output_over_ssh(sshd, tmp_path, runs_dir):
    """A real launch over the test sshd with ``--api-ke KEY``: the audit log (0600), ``launch/sessions/status
    --json`` and their text output never show KEY; the server itself got it (it asked for it)."""
    out = tmp_path / "dump.json"
    server = tmp_path / "dumper.py"
    server.write_text(DUMPER)
    audit = tmp_path / "audit" / "audit.jsonl"
    conf = write_config(tmp_path / "config.toml", {"testhost": {
        "python": "python3", "runs_dir": str(runs_dir), "gpu_source": "none", "launch_env": {"H3_OUT": str(out)}}})
    common = ["--ssh-config", str(sshd.ssh_config), "--config", str(conf)]
    env = {"MTPCONSOLE_AUDIT_LOG": str(audit)}
    try:
        p = cli(*common, "launch", "--no-validate", "--host", "testhost", "--port", str(free_port()), "--json", "--command",
                f"{sys.executable} {server}", "--", "--model-path", "/m", "--api-ke", KEY, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        sid = json.loads(p.stdout)["session_id"]
        outputs = [p.stdout, p.stderr]
        for sub in (["sessions", "--json"], ["status", "--json"], ["status"], ["sessions"]):
            q = cli(*common, *sub, "--host", "testhost", env=env)
            assert q.returncode == 0, q.stderr
            outputs += [q.stdout, q.stderr]
        assert sid in outputs[2] and '"--api-ke"' in outputs[2]
        for text in outputs + [audit.read_text()]:
            assert KEY not in text
        assert stat.S_IMODE(audit.stat().st_mode) == 0o600
        assert stat.S_IMODE(audit.parent.stat().st_mode) == 0o700
        assert wait_until(lambda: out.exists() and out.stat().st_size > 0, 10, step=0.05)
        assert KEY in json.loads(out.read_text())["argv"]  # the server got the real value
    finally:
        cleanup_runs(runs_dir)


def test_run_dir_private_and_spec_holds_masked_argv_over_ssh(sshd, tmp_path, runs_dir):
    """Run directories 0700 and their files 0600 (other users on the host read nothing); spec.json holds
    the masked argv while the server gets the real one (the supervisor reads it on stdin)."""
    out = tmp_path / "dump.json"
    server = tmp_path / "dumper.py"
    server.write_text(DUMPER)
    conf = write_config(tmp_path / "config.toml", {"testhost": {
        "python": "python3", "runs_dir": str(runs_dir), "gpu_source": "none", "launch_env": {"H3_OUT": str(out)}}})
    common = ["--ssh-config", str(sshd.ssh_config), "--config", str(conf)]
    try:
        p = cli(*common, "launch", "--no-validate", "--host", "testhost", "--port", str(free_port()), "--json",
                "--command", f"{sys.executable} {server}", "--", "--model-path", "/m", "--api-key", KEY,
                "--admin-api-key=" + ADMIN, env={"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "a.jsonl")})
        sid = json.loads(p.stdout)["session_id"]
        assert wait_until(lambda: out.exists() and out.stat().st_size > 0, 10, step=0.05)
        run = runs_dir / sid
        spec = (run / "spec.json").read_text()
        assert KEY not in spec and ADMIN not in spec and '"--api-key", "***"' in spec, spec
        got = json.loads(out.read_text())["argv"]
        assert KEY in got and "--admin-api-key=" + ADMIN in got
        assert stat.S_IMODE(run.stat().st_mode) == 0o700
        for f in run.iterdir():
            if f.is_file():
                assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
        for text in (run / "supervisor.log").read_text(), p.stdout:
            assert KEY not in text and ADMIN not in text
    finally:
        cleanup_runs(runs_dir)


def test_local_transport_passes_only_configured_environment(tmp_path):
    """With the local transport the console's whole environment used to reach the server (``FOO_SECRET``
    although ``env_names`` was empty). Now only a login-like base (PATH, HOME, LANG…) and the configured
    ``launch_env``/``env_names`` do."""
    out = tmp_path / "dump.json"
    server = tmp_path / "dumper.py"
    server.write_text(DUMPER)
    runs = tmp_path / "runs"
    conf = write_config(tmp_path / "config.toml", {"local": {
        "python": sys.executable, "runs_dir": str(runs), "gpu_source": "none", "env_names": ["H3_PASSED"],
        "launch_env": {"H3_OUT": str(out)}}})
    env = {"FOO_SECRET": "s3cr3t-from-console", "H3_PASSED": "passed-by-name",
           "MTPCONSOLE_AUDIT_LOG": str(tmp_path / "a.jsonl")}
    try:
        p = cli("--config", str(conf), "launch", "--no-validate", "--host", "local", "--port", str(free_port()), "--json",
                "--command", f"{sys.executable} {server}", "--", "--model-path", "/m", env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert wait_until(lambda: out.exists() and out.stat().st_size > 0, 10, step=0.05)
        got = json.loads(out.read_text())["env"]
        assert "FOO_SECRET" not in got and "s3cr3t-from-console" not in json.dumps(got)
        assert got["H3_PASSED"] == "passed-by-name" and got["PATH"] == os.environ["PATH"]
        assert Path(got["HOME"]) == Path(os.environ["HOME"])
    finally:
        cleanup_runs(runs)
