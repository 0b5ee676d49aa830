"""The command line's one contract (issue 26 item 5), every subcommand through its error paths, as real CLI
processes (``python -m console …``) against the ``local`` host on simulated GPUs with the SGLang stand-in:

- bad input — a bad option, an unknown subcommand, an unknown session id or pid, a bad port, an unknown host
  syntax, a broken config, invalid server flags, a change asked of a read-only console — is rc 2 and one line
  on stderr naming the input;
- under ``--json`` every error is also ``{"ok": false, "error": {"kind", "message"}}`` on stdout (the same
  message), a refused launch its whole result with that error object, a failed one (rc 1) its whole result
  with ``"ok": false``, the session id, the steps and the cause;
- what succeeds keeps its shape (``sessions``, ``classify-log`` and ``check`` print lists).

The processes of one test run four at a time (each is a fresh interpreter, most of them a fresh agent).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from console.cli import COMMANDS
from console.errors import KINDS
from console.sim.demo import FIXED_FLAGS
from tests.conftest import free_port
from tests.helpers.rel_util import cleanup_runs, cli, write_config
from tests.helpers.sim_files import make_sim, sim_env

UNKNOWN = "20990101-000000-gpu0-dead"
"""A well-formed session id no host has."""
NO_PID = "4000123"
"""A pid above any this machine's kernel hands out by default."""


@pytest.fixture
def host(tmp_path, runs_dir):
    """(config file, env) of the ``local`` host on one simulated GPU, the stand-in as its server."""
    d, model = make_sim(tmp_path, 1, tag="c")
    cfg = write_config(tmp_path / "config.toml", {"local": {
        "runs_dir": str(runs_dir), "python": sys.executable, "gpu_source": "sim", "sim_dir": str(d),
        "server_command": [sys.executable, "-m", "console.sim.sglang"], "launch_env": sim_env(d)}})
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "MTPCONSOLE_DEMO_IDLE_S": "0"}
    yield cfg, env, model
    cleanup_runs(runs_dir)


def run_all(calls: list[list[str]], env: dict | None = None, timeout: float = 90) -> list[subprocess.CompletedProcess]:
    """Each argv as its own ``python -m console`` process, four at a time; in order."""
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda a: cli(*a, env=env, timeout=timeout), calls))


def one_line(p: subprocess.CompletedProcess, rc: int = 2) -> str:
    """The one line on stderr of a command that ended with ``rc``."""
    lines = p.stderr.splitlines()
    assert p.returncode == rc, (p.args, p.returncode, p.stdout, p.stderr)
    assert len(lines) == 1 and lines[0].startswith("mtpconsole: "), (p.args, p.stderr)
    assert "Traceback" not in p.stderr
    return lines[0].removeprefix("mtpconsole: ")


def error_of(p: subprocess.CompletedProcess, rc: int = 2) -> dict:
    """The ``--json`` error object on stdout, checked against the contract and the line on stderr."""
    line = one_line(p, rc)
    obj = json.loads(p.stdout)
    assert obj["ok"] is False and set(obj) == {"ok", "error"}, obj
    assert set(obj["error"]) == {"kind", "message"} and obj["error"]["kind"] in KINDS, obj
    assert obj["error"]["message"] == line, (obj, line)
    return obj["error"]


def with_json(args: list[str]) -> list[str]:
    """``args`` with ``--json`` among the console's own options (before a ``--``)."""
    if "--" in args:
        i = args.index("--")
        return [*args[:i], "--json", *args[i:]]
    return [*args, "--json"]


POSITIONAL = {"trust-host": ["h"], "logs": [UNKNOWN], "ack": [UNKNOWN], "report": [UNKNOWN], "classify-log": ["f"],
              "load": ["--port", "1"], "plan": ["--model-config", "c.json", "--gpu-mem", "96GiB"]}
"""What a subcommand needs besides options, so that the bad option is the one thing wrong (others: :func:`needs`)."""


def needs(name: str) -> list[str]:
    """What subcommand ``name`` requires (its required positionals, a choice's first value), read off its own
    parser: :data:`POSITIONAL`'s entry, else this, so that a subcommand added later is covered too."""
    import argparse
    import importlib

    if name in POSITIONAL:
        return POSITIONAL[name]
    p = argparse.ArgumentParser()
    importlib.import_module(COMMANDS[name].module).configure(p)
    out: list[str] = []
    for a in p._actions:  # noqa: SLF001 - argparse has no public list
        if a.option_strings and a.required:
            out += [a.option_strings[0], str(next(iter(a.choices))) if a.choices else "1"]
        elif not a.option_strings and a.nargs in (None, "+", 1):
            out.append(str(next(iter(a.choices))) if a.choices else UNKNOWN)
    return out


def test_a_bad_option_of_every_subcommand_is_one_usage_line(tmp_path):
    calls, names = [], []
    for name, cmd in COMMANDS.items():
        bad = "--warn-ok=3" if name == "check" else "--no-such-option"  # check: an unknown option is a server flag
        calls.append([name, *needs(name), bad])
        names.append((name, bad, False))
        if "json" in cmd.common:
            calls.append([name, *needs(name), bad, "--json"])
            names.append((name, bad, True))
    calls.append(["--no-such-option"])
    names.append(("", "--no-such-option", False))
    for (name, bad, js), p in zip(names, run_all(calls, env={"MTPCONSOLE_DEMO_IDLE_S": "0"})):
        if js:
            e = error_of(p)
            assert e["kind"] == "usage", (name, e)
            line = e["message"]
        else:
            line = one_line(p)
        assert bad.split("=")[0] in line and f"mtpconsole {name} --help".replace("  ", " ").strip() in line, line


def test_an_unknown_subcommand_says_which_one_was_meant():
    stauts, relauch, nothing, js = run_all([["stauts"], ["relauch", "x"], ["zzzzqq"], ["--json", "sesions"]])
    assert "unknown subcommand 'stauts': did you mean 'status'?" in one_line(stauts)
    assert "did you mean 'relaunch' or 'launch'?" in one_line(relauch)
    assert "did you mean" not in one_line(nothing) and "subcommands: status, " in one_line(nothing)
    e = error_of(js)
    assert e["kind"] == "usage" and "did you mean 'sessions'?" in e["message"]


def test_an_unknown_session_id_is_rc_2_and_said_one_way_by_every_command(host, tmp_path):
    cfg, env, _ = host
    base = ["--host", "local", "--config", str(cfg)]
    per = [["ack", UNKNOWN], ["kill", UNKNOWN], ["relaunch", UNKNOWN], ["logs", UNKNOWN],
           ["report", UNKNOWN, "--out", str(tmp_path / "r.md")]]
    if "--prune" in cli("sessions", "--help").stdout:
        per.append(["sessions", "--prune", UNKNOWN])
    calls = [[*a, *base] for a in per] + [with_json([*a, *base]) for a in per]
    out = run_all(calls, env)
    want = f"no session '{UNKNOWN}' on local (list them with 'mtpconsole sessions --host local --all')"
    for a, p in zip(calls[:len(per)], out[:len(per)]):
        assert one_line(p) == want, (a, p.stderr)
    for a, p in zip(calls[len(per):], out[len(per):]):
        assert error_of(p) == {"kind": "unknown_session", "message": want}, a
    assert not (tmp_path / "r.md").exists()


def test_an_unknown_pid_is_rc_2(host):
    cfg, env, _ = host
    base = ["--host", "local", "--config", str(cfg)]
    per = [["kill", "--pid", NO_PID], ["relaunch", "--pid", NO_PID], ["orphans", "--kill", NO_PID]]
    out = run_all([[*a, *base] for a in per] + [[*a, *base, "--json"] for a in per], env)
    for p in out[:3]:
        assert NO_PID in one_line(p)
    for p in out[3:]:
        e = error_of(p)
        assert e["kind"] == "unknown_process" and NO_PID in e["message"]


def test_a_port_outside_1_65535_is_refused_at_once(host, runs_dir):
    cfg, env, model = host
    sid = "20260101-000000-gpu0-beef"  # an ended session to relaunch with an edited port: refused before its kill
    d = runs_dir / sid
    d.mkdir()
    (d / "spec.json").write_text(json.dumps({"session_id": sid, "argv": [sys.executable, "-m", "console.sim.sglang",
                                             "--model-path", str(model)], "gpus": [0], "port": 30000}))
    (d / "record.json").write_text(json.dumps({"supervisor_pid": 4_000_001, "pid": 4_000_002, "pgid": 4_000_002,
                                               "start_ticks": 5, "started_at": 1.0, "boot_id": "x"}))
    (d / "exit.json").write_text(json.dumps({"ended_at": 2.0, "exit_code": 0}))
    (d / "output.log").write_text("done\n")
    base = ["--host", "local", "--config", str(cfg)]
    flags = ["--", "--model-path", str(model)]
    calls = [["launch", *base, "--port", "99999", *flags], ["launch", *base, "--port", "0", *flags],
             ["launch", *base, *flags, "--port", "99999"], ["relaunch", *base, sid, "--set", "--port=70000"],
             ["load", "--port", "65536"], ["export", *base, "--listen", "127.0.0.1:99999", "--duration", "1"]]
    t0 = time.monotonic()
    out = run_all(calls + [with_json(a) for a in calls], env)
    assert time.monotonic() - t0 < 60
    for a, p in zip(calls, out[:len(calls)]):
        line = one_line(p)
        assert "1-65535" in line or "1..65535" in line, (a, line)
        assert "OverflowError" not in p.stdout + p.stderr
    kinds = [error_of(p)["kind"] for p in out[len(calls):]]
    assert kinds == ["usage", "usage", "bad_input", "bad_input", "usage", "bad_input"], kinds
    assert not [x for x in runs_dir.iterdir() if x.name != sid and not x.name.startswith(".")]  # nothing launched
    assert not (d / "stop-request.json").exists()  # nothing was stopped


def test_an_unknown_host_syntax_is_rc_2_for_every_host_command(tmp_path):
    minimal = {"launch": ["--", "--model-path", "/m"], "kill": [UNKNOWN], "relaunch": [UNKNOWN], "logs": [UNKNOWN],
               "ack": [UNKNOWN], "report": [UNKNOWN, "--out", str(tmp_path / "r.md")], "check": ["--", "--port", "1"],
               "export": ["--listen", f"127.0.0.1:{free_port()}", "--duration", "1"]}
    names = [n for n, c in COMMANDS.items() if "hosts" in c.common]
    assert {"status", "sessions", "events", "orphans", "flags"} <= set(names), names
    calls = [[n, "--host", "bad host", *minimal.get(n, needs(n))] for n in names]
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    out = run_all(calls + [with_json(a) for a in calls], env)
    known = {*minimal, "status", "sessions", "events", "orphans", "flags"}
    for a, p in zip(calls, out[:len(calls)]):  # a subcommand added later may refuse another input first: one line
        line = one_line(p)
        assert line.startswith("invalid host 'bad host'") or a[0] not in known, a
    for a, p in zip(calls, out[len(calls):]):
        assert error_of(p)["kind"] == "bad_input" or a[0] not in known, a


def test_a_broken_config_is_rc_2_for_every_command_that_reads_one(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text("[hosts.local\nrun_dir = 3\n")
    neon = tmp_path / "neon.toml"
    neon.write_text('[ui]\ntheme = "neon"\n')
    nosuch = tmp_path / "nosuch.toml"
    nosuch.write_text('[hosts.local]\n[profiles.x]\nhost = "nosuch"\nflags = ["--model-path", "/m"]\n')
    names = [n for n, c in COMMANDS.items() if "config" in c.common]
    assert len(names) >= 10, names
    minimal = {"kill": [UNKNOWN], "relaunch": [UNKNOWN], "logs": [UNKNOWN], "ack": [UNKNOWN],
               "report": [UNKNOWN, "--out", str(tmp_path / "r.md")]}
    calls = [[n, "--host", "local", "--config", str(broken), *minimal.get(n, needs(n))] for n in names]
    calls.append(["--config", str(broken)])  # the TUI reads it before anything starts
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    bad_values = [["status", "--host", "local", "--config", str(neon)],
                  ["status", "--host", "local", "--config", str(nosuch)]]
    out = run_all(calls + [with_json(a) for a in calls] + bad_values + [with_json(a) for a in bad_values], env,
                  timeout=60)
    n = len(calls)
    for a, p in zip(calls, out[:n]):
        assert one_line(p).startswith(f"{broken}: invalid TOML"), a
    for a, p in zip(calls, out[n:2 * n]):
        assert error_of(p)["kind"] == "config", a
    theme, prof, theme_j, prof_j = out[2 * n:]
    assert "ui.theme" in one_line(theme) and "'dark', 'light' or 'high-contrast'" in one_line(theme)
    assert "profiles.x.host" in one_line(prof) and "'nosuch'" in one_line(prof) and "local" in one_line(prof)
    assert error_of(theme_j)["kind"] == error_of(prof_j)["kind"] == "config"


def test_invalid_flags_are_rc_2_from_check_and_launch(host, runs_dir):
    cfg, env, model = host
    base = ["--host", "local", "--config", str(cfg)]
    flags = ["--", "--model-path", str(model), "--no-such-flag", "1"]
    check, check_j, launch, launch_j = run_all([["check", *base, *flags], with_json(["check", *base, *flags]),
                                                ["launch", *base, *flags], with_json(["launch", *base, *flags])], env)
    assert check.returncode == 2 and "--no-such-flag" in check.stdout, check.stdout + check.stderr
    assert check_j.returncode == 2 and any(p["kind"] == "unknown" for p in json.loads(check_j.stdout))  # a list
    assert launch.returncode == 2 and "REFUSED — nothing was started" in launch.stdout, launch.stdout
    r = json.loads(launch_j.stdout)
    assert launch_j.returncode == 2 and r["ok"] is False and r["session_id"] is None, r
    assert r["error"]["kind"] == "invalid_flags" and "--no-such-flag" in r["error"]["message"], r
    assert [s["name"] for s in r["steps"] if s["state"] == "failed"] == ["preflight"] and r["refusals"], r
    assert not [x for x in runs_dir.iterdir() if not x.name.startswith(".")]


def test_read_only_refuses_every_change_as_bad_input(host):
    cfg, env, model = host
    base = ["--host", "local", "--config", str(cfg), "--read-only", "--json"]
    out = run_all([["kill", UNKNOWN, *base], ["relaunch", UNKNOWN, *base], ["orphans", "--kill", NO_PID, *base],
                   ["launch", *base, "--", "--model-path", str(model)]], env)
    for p in out:
        e = error_of(p)
        assert e["kind"] == "read_only" and e["message"].startswith("read-only: "), e


def test_successful_outputs_keep_their_shapes_and_a_failure_its_whole_result(host, tmp_path):
    cfg, env, model = host
    base = ["--host", "local", "--config", str(cfg), "--json"]
    log = tmp_path / "output.log"
    log.write_text("[2026-10-30 12:02:00] The server is fired up and ready to roll!\n")
    fail = [sys.executable, "-c", "import sys; print('boom', flush=True); sys.exit(3)"]
    sessions, classify, check, events, status, failed = run_all([
        ["sessions", *base], ["classify-log", str(log), "--json"], ["check", *base, "--", "--model-path", str(model),
                                                                     *FIXED_FLAGS],
        ["events", *base], ["status", *base],
        ["launch", *base, "--no-validate", "--port", str(free_port()), "--wait", "--timeout", "60", "--command",
         " ".join(fail), "--", "--model-path", str(model)]], env)
    assert sessions.returncode == 0 and json.loads(sessions.stdout) == [], sessions.stdout + sessions.stderr
    assert classify.returncode == 0 and json.loads(classify.stdout)[0]["state"] == "ready", classify.stdout
    assert check.returncode == 0 and json.loads(check.stdout) == [], check.stdout + check.stderr
    assert events.returncode == 0 and isinstance(json.loads(events.stdout)["events"], list), events.stderr
    assert status.returncode == 0 and [h["name"] for h in json.loads(status.stdout)["hosts"]] == ["local"]
    r = json.loads(failed.stdout)
    assert failed.returncode == 1 and r["ok"] is False and r["session_id"] and r["steps"], r  # the whole result
    assert r["refused"] is None and isinstance(r["error"], str), r  # a failure's error stays its text
    assert Path(cfg).exists()
