"""The CLI context: one immutable object built once, per-subcommand options, config errors, kill --gpu."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from console import cli
from console.commands.context import CliContext, host_names, make_context, server_command, single_host, with_demo
from console.config import Config, HostConfig, Profile, UiConfig, load_config
from console.errors import ConfigError, UserError

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": "/nonexistent-mtpconsole-test"}


def mtp(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", *argv], capture_output=True, text=True,
                          timeout=timeout, env=ENV, cwd=REPO)


def test_context_is_immutable_and_resolves_defaults(monkeypatch):
    monkeypatch.setenv("MTPCONSOLE_AUDIT_LOG", "/tmp/audit-from-env.jsonl")
    cfg = Config(ui=UiConfig(interval=2.5, read_only=True, theme="light"), hosts={"b200": HostConfig()})
    ctx = make_context(config=cfg, hosts=["a", "b", "a"])
    assert ctx.hosts == ("a", "b") and ctx.interval == 2.5 and ctx.read_only and ctx.theme == "light"
    assert ctx.audit_log == "/tmp/audit-from-env.jsonl"
    with pytest.raises(ValidationError):
        ctx.read_only = False  # type: ignore[misc]
    assert make_context(config=cfg, interval=0.5, theme="dark").interval == 0.5
    assert host_names(make_context(config=cfg)) == ["b200"]
    with pytest.raises(UserError, match="no host given"):
        host_names(make_context(config=Config()))
    assert single_host(make_context(config=Config(), demo=True)) == "demo"
    with pytest.raises(UserError, match="exactly one --host"):
        single_host(ctx)


def test_demo_keeps_the_operators_ui_settings_and_profiles():
    mine = Config(ui=UiConfig(theme="light"), profiles={"mine": Profile(host="demo")})
    demo = Config(hosts={"demo": HostConfig(transport="local", server_command=["python3", "-m", "stand.in"])},
                  profiles={"fixed": Profile(host="demo")})
    merged = with_demo(mine, demo)
    assert merged.ui.theme == "light" and set(merged.profiles) == {"mine", "fixed"}
    assert server_command(merged, "demo") == ["python3", "-m", "stand.in"]
    assert server_command(merged, "elsewhere") == ["python3", "-m", "sglang.launch_server"]


def subparser(name: str) -> argparse.ArgumentParser:
    c = cli.COMMANDS[name]
    p = argparse.ArgumentParser(prog=f"mtpconsole {name}")
    cli.add_common(p, c.common, suppress=True)
    importlib.import_module(c.module).configure(p)
    return p


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_option_has_help_and_applies(name):
    p = subparser(name)
    for a in p._actions:
        assert a.help and a.help != argparse.SUPPRESS or a.dest == "help", (name, a.option_strings or a.dest)
        assert a.dest not in ("command", "subcommand"), (name, a.dest)  # --command is server_command
    opts = {o for a in p._actions for o in a.option_strings}
    if name in ("plan", "classify-log", "load"):
        # plan --demo reads the demo's model and GPU (it opens no host)
        assert not opts & {"--host", "--ssh-config", "--config", "--read-only", "--audit-log"}
        assert "--demo" not in opts or name == "plan"
    # sessions --prune removes a broken run directory: --read-only refuses it
    if name in ("status", "logs", "flags", "check", "plan", "classify-log", "load", "events"):
        assert "--read-only" not in opts
    assert "--theme" not in opts  # the TUI's only
    assert "--interval" not in opts or name == "export"  # a sampling interval matters to the TUI and the exporter


def test_options_that_do_not_apply_are_refused_with_exit_2():
    r = mtp("--host", "x", "plan", "--model-config", "c.json", "--gpu-mem", "96GB")
    assert r.returncode == 2 and "--host: not an option of 'plan'" in r.stderr, r.stderr
    r = mtp("classify-log", "--host", "x", "output.log")
    assert r.returncode == 2 and "unrecognized arguments: --host" in r.stderr, r.stderr
    r = mtp("--interval", "0", "--demo")  # the TUI: refused before anything is staged
    assert r.returncode == 2 and "--interval 0.0: expected a number of seconds above 0" in r.stderr, r.stderr
    r = mtp("status", "--help")
    assert r.returncode == 0 and "--host" in r.stdout and "--read-only" not in r.stdout


def test_config_errors_are_listed_all_at_once(tmp_path):
    p = tmp_path / "config.toml"
    p.write_text('[ui]\ninterval = -1\nbogus = 1\n[hosts.a]\npython = ""\ngpu_source = "cuda"\n'
                 "[profiles.p]\nport = 70000\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: 5 problems: ") and "\n" not in msg
    for key in ("ui.interval", "ui.bogus': unknown key", "hosts.a.python", "hosts.a.gpu_source", "profiles.p.port"):
        assert f"key '{key}" in msg, (key, msg)
    assert "more problem" not in msg


def test_status_demo_honours_config(tmp_path):
    """A broken or missing --config is exit 2 under --demo too (before anything is staged)."""
    r = mtp("status", "--demo", "--config", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "does not exist" in r.stderr, r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[ui]\ninterval = 0\n")
    r = mtp("status", "--demo", "--config", str(bad), "--json")
    assert r.returncode == 2 and "ui.interval" in r.stderr, r.stderr


def test_the_context_travels_as_one_object():
    """Commands get (ctx, their own options); nothing else of argparse crosses into console.commands.context."""
    import ast
    import inspect

    from console.commands import context

    tree = ast.parse(inspect.getsource(context))
    names = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert "argparse" not in names and "getattr(args" not in inspect.getsource(context)
    assert CliContext.model_config.get("frozen") is True


# ---- kill --gpu

from console.commands.kill import on_gpu  # noqa: E402
from console.model import GpuProc  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from ui_fakes import ARGV, gpu, proc, snapshot  # noqa: E402


def _snap(session: str | None, *, gpus: bool = True):
    p = proc(4242, ARGV, session, {0: 80000})
    samples = [gpu(0, used=81000, procs=[GpuProc(pid=4242, used_mib=80000)]), gpu(1)] if gpus else []
    return snapshot(gpus=samples, servers=[p], **({} if gpus else {"gpu_error": "nvidia-smi: not found"}))


def test_kill_gpu_refuses_a_server_no_console_launched_unless_confirmed():
    asked = []

    def no(question: str) -> bool:
        asked.append(question)
        return False
    with pytest.raises(UserError, match="no console launched .*--pid 4242"):
        on_gpu(_snap(None), "host-a", 0, no)
    assert asked and "pid 4242 of user op" in asked[0]
    t = on_gpu(_snap(None), "host-a", 0, lambda q: True)
    assert t.pid == 4242 and t.start_ticks == 1000 + 4242 and t.session_id is None


def test_kill_gpu_names_a_managed_session_without_asking():
    from console.model import LaunchSpec, SessionInfo

    def never(question: str) -> bool:
        raise AssertionError(f"asked: {question}")
    sid = "20261130-120000-gpu0-abcd"
    info = SessionInfo(session_id=sid, run_dir=f"/runs/{sid}", spec=LaunchSpec(session_id=sid, argv=ARGV, gpus=[0]),
                       server_alive=True, supervisor_alive=True)
    snap = _snap(sid).model_copy(update={"sessions": [info]})
    t = on_gpu(snap, "host-a", 0, never)
    assert t.session_id == sid and t.pid is None


def test_kill_gpu_without_gpu_information_is_refused():
    with pytest.raises(UserError, match="no GPU information: nvidia-smi: not found"):
        on_gpu(_snap(None, gpus=False), "host-a", 0, lambda q: True)
    with pytest.raises(UserError, match="has no GPU 7"):
        on_gpu(_snap(None), "host-a", 7, lambda q: True)


def test_flags_and_check_use_the_hosts_configured_server_command(tmp_path):
    """Not `python3 -m sglang.launch_server`: the host's server_command from the config (here the stand-in)."""
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[hosts.local]\ntransport = "local"\npython = "{sys.executable}"\n'
                   f'runs_dir = "{tmp_path / "runs"}"\ngpu_source = "none"\n'
                   f'server_command = ["{sys.executable}", "-m", "console.sim.sglang"]\n')
    env = {**ENV, "XDG_CACHE_HOME": str(tmp_path / "cache"), "MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    r = subprocess.run([sys.executable, "-m", "console", "flags", "--host", "local", "--config", str(cfg), "--search",
                        "speculative"], capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert r.returncode == 0 and "--speculative-algorithm" in r.stdout, r.stdout + r.stderr
    assert "No module named" not in r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "console", "check", "--host", "local", "--config", str(cfg), "--",
                        "--cuda-graph-max-bs", "512"], capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert "No module named" not in r.stdout + r.stderr and "cuda-graph-max-bs" in r.stdout, r.stdout + r.stderr
