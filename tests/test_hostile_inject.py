"""Hostile input in every field that reaches the host, and secrets that must never leak.

Shell metacharacters and injection attempts in the model path, flag values, env values and the server
command arrive literally (argv lists, no shell) and a canary file is never created; bad session ids and host
names are refused. HF_TOKEN (passed by name through env_names) never appears in any /proc/*/cmdline, the
supervisor log, the audit log or --json output; --api-key values are masked in everything the console
writes (they are in the server's own argv because the operator put them there: `check` warns about that)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from console.errors import UserError
from console.link.link import RequestError
from console.link.ssh import parse_host_spec
from console.model import KillTarget, LaunchRequest
from console.ops import lifecycle
from tests.conftest import free_port
from tests.helpers import wait
from tests.helpers.rel_util import REPO, cleanup_runs, cli, ssh_link, write_config

pytestmark = pytest.mark.sshd
ECHO = str(Path(__file__).parent / "helpers" / "rel_echo.py")


def corpus(canary: Path) -> list[str]:
    c = str(canary)
    return [
        f"; touch {c} #", f"$(touch {c})", f"`touch {c}`", f"| touch {c}", f"&& touch {c}", f"\ntouch {c}\n",
        f"' ; touch {c} ; '", f'" ; touch {c} ; "', f"$(touch${{IFS}}{c})", "${PATH}", "$HOME", "*", "~", "?",
        "../../etc/passwd", "-rf", "a b\tc", "\\", "%s%n%x", "\u202eevil.txt", "\x1b[2J\x1b]0;t\x07", "é✓中",
        "x" * 20000, "", " lead and trail ", "--", "=", "a=b=c", f">{c}", f"<{c}", f"2>{c}", "!!", "#",
    ]


@pytest.fixture
async def link(sshd, runs_dir):
    lk = ssh_link(sshd, runs_dir)
    await lk.open()
    yield lk
    await lk.close()
    cleanup_runs(runs_dir)


async def test_every_field_arrives_literally_and_no_canary(link, runs_dir, tmp_path):
    canary = tmp_path / "CANARY"
    evil = corpus(canary)
    out = tmp_path / "echo.json"
    flags = ["--model-path", evil[0]]
    for i, v in enumerate(evil[1:]):
        flags += [f"--v{i}", v]
    env = {f"EVIL{i}": "ENVONLY" + v for i, v in enumerate(evil)}
    env["REL_ECHO_OUT"] = str(out)
    r = await lifecycle.launch(link, LaunchRequest(host="testhost", command=[sys.executable, ECHO], flags=flags,
                                                   gpus=[0], port=free_port(), env=env), wait=False)
    assert r.ok, r
    assert await wait.await_until(out.exists, 10)
    await wait.await_until(lambda: out.stat().st_size > 0, 5)
    got = json.loads(out.read_text())
    assert got["argv"][:-2] == flags and got["argv"][-2] == "--port"
    assert got["env"] == {k: v for k, v in env.items() if k.startswith("EVIL")}
    spec = json.loads((runs_dir / r.session_id / "spec.json").read_text())
    assert spec["argv"][2:-2] == flags and "EVIL0" in spec["env_names"]
    assert "ENVONLY" not in (runs_dir / r.session_id / "spec.json").read_text()  # env values: names only
    k = await lifecycle.kill(link, KillTarget(host="testhost", session_id=r.session_id), grace=3)
    assert k.ok, k
    for d in (tmp_path, runs_dir, runs_dir / r.session_id, Path.home(), REPO, Path("/")):
        assert not (d / "CANARY").exists()


def test_cli_command_and_flags_never_reach_a_shell(sshd, tmp_path, runs_dir):
    canary = tmp_path / "CANARY"
    out = tmp_path / "echo.json"
    conf = write_config(tmp_path / "config.toml", {"testhost": {
        "python": "python3", "runs_dir": str(runs_dir), "gpu_source": "none",
        "launch_env": {"REL_ECHO_OUT": str(out)}}})
    try:
        p = cli("--ssh-config", str(sshd.ssh_config), "--config", str(conf), "launch", "--host", "testhost",
                "--port", str(free_port()), "--json", "--command", f"{sys.executable} {ECHO} ; touch {canary}",
                "--env", f"EVIL=$(touch {canary})", "--", "--model-path", f"`touch {canary}`",
                env={"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")})
        assert p.returncode == 0, p.stdout + p.stderr
        got = wait.wait_until(lambda: _json(out), 10, step=0.05)
        assert got, "the server never wrote its argv"
        assert got["argv"][:4] == [";", "touch", str(canary), "--model-path"]
        assert got["argv"][4] == f"`touch {canary}`" and got["env"]["EVIL"] == f"$(touch {canary})"
        assert not canary.exists()
    finally:
        cleanup_runs(runs_dir)


def _json(path):
    """The file's JSON once it is completely written, else None."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@pytest.mark.parametrize("sid", ["../escape", "$(touch CANARY)", "a\nb", "ok\n", ".hidden", "a/b", "x" * 200, " a"])
async def test_agent_refuses_bad_session_ids(link, runs_dir, sid):
    spec = {"session_id": sid, "argv": [sys.executable, ECHO], "gpus": [0], "port": free_port()}
    with pytest.raises(RequestError, match="bad session id"):
        await link.request("launch", {"spec": spec, "env": {}, "preflight": {}})
    assert [p.name for p in runs_dir.iterdir() if not p.name.startswith(".")] == []
    assert not (runs_dir.parent / "escape").exists()


async def test_agent_refuses_bad_env_names(link, runs_dir):
    spec = {"session_id": "20260101-000000-gpu0-envs", "argv": [sys.executable, ECHO], "gpus": [0],
            "port": free_port()}
    for name in ("A=B", "1X", "X Y", "$(id)", ""):
        with pytest.raises(RequestError, match="bad environment variable"):
            await link.request("launch", {"spec": spec, "env": {name: "v"}, "preflight": {}})
    assert [p.name for p in runs_dir.iterdir() if not p.name.startswith(".")] == []


@pytest.mark.parametrize("host", ["a;b", "$(touch x)", "`id`", "-oProxyCommand=touch x", "a b", "a\nb", "a|b",
                                  "a&b", "'a'", '"a"', "a\\b", "", "  ", "u@h:99999", "[::1", "h:1:2", "@h",
                                  "u@@h", "h\x00"])
def test_host_names_refused(host):
    with pytest.raises(UserError, match="invalid host"):
        parse_host_spec(host)


@pytest.mark.parametrize("host", ["-oProxyCommand=touch CANARY", "a;touch CANARY", "$(touch CANARY)"])
def test_cli_refuses_hostile_host_in_one_line(tmp_path, host):
    (tmp_path / "empty.toml").write_text("")
    p = cli("status", "--host", host, "--config", str(tmp_path / "empty.toml"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "invalid host" in p.stderr, p.stderr
    assert not (REPO / "CANARY").exists()


SECRET_HF = "hf_RELsecretTOKEN0123456789abcdef"
SECRET_API = "sk-RELsecretAPIKEY0123456789abcdef"


def test_secrets_never_on_host_cmdline_in_logs_or_json(sshd, tmp_path, runs_dir):
    out = tmp_path / "echo.json"
    audit = tmp_path / "audit.jsonl"
    conf = write_config(tmp_path / "config.toml", {"testhost": {
        "python": "python3", "runs_dir": str(runs_dir), "gpu_source": "none", "env_names": ["HF_TOKEN"],
        "launch_env": {"REL_ECHO_OUT": str(out)}}})
    env = {"HF_TOKEN": SECRET_HF, "MTPCONSOLE_AUDIT_LOG": str(audit)}
    common = ["--ssh-config", str(sshd.ssh_config), "--config", str(conf)]
    try:
        p = cli(*common, "launch", "--host", "testhost", "--port", str(free_port()), "--json", "--command",
                f"{sys.executable} {ECHO}", "--", "--model-path", "/m", "--api-key", SECRET_API, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert wait.wait_until(lambda: out.exists() and out.stat().st_size > 0, 10, step=0.05)
        assert json.loads(out.read_text())["env"]["HF_TOKEN"] == SECRET_HF  # the server got it, by env
        sid = json.loads(p.stdout)["session_id"]
        outputs = [p.stdout, p.stderr]
        for sub in (["sessions", "--host", "testhost", "--json"], ["status", "--host", "testhost", "--json"],
                    ["status", "--host", "testhost"], ["sessions", "--host", "testhost"]):
            q = cli(*common, *sub, env=env)
            assert q.returncode == 0, q.stderr
            outputs += [q.stdout, q.stderr]
        sessions_json = outputs[2]
        # masked, not absent:
        assert sid in sessions_json and '"--api-key"' in sessions_json and '"***"' in sessions_json
        # argv of every process on the host
        api_key_in_argv = False
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    raw = Path(f"/proc/{name}/cmdline").read_bytes()
                except OSError:
                    continue
                assert SECRET_HF.encode() not in raw, f"HF_TOKEN value in /proc/{name}/cmdline"
                api_key_in_argv |= SECRET_API.encode() in raw
        # Known and documented (RELIABILITY.md): a key given as a server flag is in the server's own argv.
        assert api_key_in_argv
        files = [runs_dir / sid / "supervisor.log", runs_dir / sid / "spec.json", audit]
        for text in outputs + [f.read_text() for f in files]:
            assert SECRET_HF not in text
        for text in outputs + [audit.read_text(), (runs_dir / sid / "supervisor.log").read_text()]:
            assert SECRET_API not in text
        assert "HF_TOKEN" in (runs_dir / sid / "spec.json").read_text()  # the name is recorded, not the value
        k = cli(*common, "kill", sid, "--host", "testhost", "--grace", "3", "--json", env=env)
        assert k.returncode == 0 and SECRET_API not in k.stdout and SECRET_HF not in k.stdout
    finally:
        cleanup_runs(runs_dir)


def test_no_token_in_screenshots():
    token = re.compile(r"\b(hf_[A-Za-z0-9]{12,}|sk-[A-Za-z0-9_-]{16,})")
    svgs = list((REPO / "screenshots").glob("*.svg")) + list((REPO / "tests" / "__snapshots__").rglob("*.svg"))
    assert svgs
    for f in svgs:
        assert not token.search(f.read_text(errors="replace")), f


def test_cli_refuses_invalid_utf8_arguments(tmp_path):
    """argv bytes that are not UTF-8 would reach the host as other bytes than the console checks (its
    'spawned' check then failed a launch whose server was running): refused up front, nothing launched."""
    conf = write_config(tmp_path / "config.toml", {"local": {"python": sys.executable,
                                                             "runs_dir": str(tmp_path / "runs")}})
    for extra in (["--", "--model-path", b"/m\xff".decode("utf-8", "surrogateescape")],
                  ["--env", b"A=\xfe".decode("utf-8", "surrogateescape")]):
        p = subprocess.run([sys.executable, "-m", "console", "--config", str(conf), "launch", "--host", "local",
                            *[a.encode("utf-8", "surrogateescape") for a in extra]],
                           capture_output=True, cwd=REPO, timeout=60)
        err = p.stderr.decode(errors="replace")
        assert p.returncode == 2 and "is not valid UTF-8" in err and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists() or not [x for x in (tmp_path / "runs").iterdir()
                                                    if not x.name.startswith(".")]


async def test_argument_list_too_long_is_a_clear_failure(link, runs_dir):
    r = await lifecycle.launch(link, LaunchRequest(host="testhost", command=[sys.executable, ECHO],
                                                   flags=["--x", "y" * 200_000], gpus=[0], port=free_port()),
                               timeout=20)
    assert not r.ok and "Argument list too long" in r.error, r


async def test_host_config_values_never_reach_a_shell(sshd, tmp_path):
    """The host's python path is the one word of the bootstrap line the remote shell sees (quoted); the runs
    dir travels in JSON. Metacharacters in either stay literal."""
    from console.errors import HostError

    canary = tmp_path / "CANARY"
    lk = ssh_link(sshd, tmp_path / "runs", python=f"python3;touch {canary}")
    with pytest.raises(HostError, match="cannot start the agent|exited at start"):
        await lk.open()
    await lk.close()
    odd = tmp_path / f"runs;touch {canary};$(touch {canary})"
    lk = ssh_link(sshd, odd)
    await lk.open()
    try:
        r = await lifecycle.launch(lk, LaunchRequest(host="testhost", command=[sys.executable, ECHO],
                                                     flags=["--model-path", "/m"], gpus=[0], port=free_port()),
                                   wait=False)
        assert r.ok, r
        assert (odd / r.session_id / "spec.json").exists()
        k = await lifecycle.kill(lk, KillTarget(host="testhost", session_id=r.session_id), grace=3)
        assert k.ok, k
    finally:
        await lk.close()
        cleanup_runs(odd)
    assert not canary.exists()


def test_cli_text_output_masks_secrets_and_on_a_terminal_strips_escapes(monkeypatch):
    """`status`, `sessions`, launch/kill results print remote text (process argv, log lines, errors): a server
    started by hand with --api-key, or a process whose argv carries escape sequences, cannot leak the key or
    drive the operator's terminal."""
    import time as _t

    from console.commands import _ops
    from console.commands.status import render_text
    from console.model import ConnectionInfo, HostSnapshot, OperationResult, ServerProc

    snap = HostSnapshot(name="h", connection=ConnectionInfo(state="connected", since=_t.time()), servers=[
        ServerProc(pid=1, ppid=0, pgid=1, start_ticks=1, role="launcher",
                   argv=["python3", "-m", "sglang.launch_server", "--api-key", SECRET_API, "--port", "1"]),
        ServerProc(pid=2, ppid=0, pgid=2, start_ticks=1, role="worker", argv=["sglang::x\x1b]0;pwned\x07\x1b[2J"])])
    plain = render_text(snap)
    assert SECRET_API not in plain and "--api-key ***" in plain
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    tty = render_text(snap)
    assert "\x1b" not in tty and "\x07" not in tty and SECRET_API not in tty
    r = OperationResult(op="launch", host="h", ok=False, state="failed", cause="other",
                        line=f"\x1b]52;c;Zm9v\x07api_key='{SECRET_API}'", hint="\x1b[2Jhint",
                        log_tail=[f"--api-key {SECRET_API}\x1b[31m"], left=["\x1b[5mleft"])

    import contextlib
    import io
    buf = io.StringIO()
    buf.isatty = lambda: True
    with contextlib.redirect_stdout(buf):
        _ops.emit_result(False, r)  # text mode: what a terminal shows
    out = buf.getvalue()
    assert SECRET_API not in out and "\x1b" not in out and "\x07" not in out
