"""The agent's start loads its shipped modules' code from a per-digest cache (console/host/shipboot.py), and the
console parses an SSH config file once per host while it is unchanged and offers AES-GCM first unless the config
names ciphers (console/link/ssh.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from console.link import protocol, ssh
from console.link.ssh import parse_host_spec

# Runs the real bootstrap on a stdin holding only the payload: the agent then reads EOF as its config and exits,
# after the shipped modules were imported (which is when the cache is used or written).
PROBE = ("import sys,json;m=json.loads(sys.stdin.readline());g={'__name__':'mtpconsole_shipboot'};"
         "exec(compile(m['boot'],'shipboot.py','exec'),g);f=g['install'](m['modules']);d=g['sources_digest'](m['modules']);"
         "hit=g['load_code_cache'](f,d);g['save_code_cache'](f,d) if not hit else None;print(json.dumps({'hit':hit,"
         "'path':g['code_cache_path'](d)}))")


def _probe(cache: Path, payload: dict) -> dict:
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    out = subprocess.run([sys.executable, "-c", PROBE], input=json.dumps(payload) + "\n", env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out)


def test_second_start_loads_the_cached_code_and_a_changed_source_does_not(tmp_path):
    payload = protocol.shipped_payload()
    first = _probe(tmp_path, payload)
    assert first["hit"] is False and Path(first["path"]).is_file()
    assert (Path(first["path"]).stat().st_mode & 0o777) == 0o600
    assert _probe(tmp_path, payload)["hit"] is True
    changed = dict(payload, modules=dict(payload["modules"], hostlib=payload["modules"]["hostlib"] + "\nX = 1\n"))
    assert _probe(tmp_path, changed)["hit"] is False  # another digest, another file


def test_a_broken_cache_file_is_compiled_around(tmp_path):
    payload = protocol.shipped_payload()
    path = Path(_probe(tmp_path, payload)["path"])
    path.write_bytes(b"\x00garbage")
    assert _probe(tmp_path, payload)["hit"] is False  # and rewritten
    assert _probe(tmp_path, payload)["hit"] is True


def test_the_agent_starts_with_a_cache_and_says_hello(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    cfg = {"interval": 1.0, "runs_dir": str(tmp_path / "runs"), "gpu_source": "none", "sim_dir": None,
           "launch_env": {}, "log_cap_mb": None, "sim_src": ""}
    for _ in range(2):  # the first start writes the cache, the second reads it
        p = subprocess.run([sys.executable, "-u", "-c", protocol.BOOTSTRAP], env=env, capture_output=True, text=True,
                           input=json.dumps(protocol.shipped_payload()) + "\n" + json.dumps(cfg) + "\n", timeout=60)
        assert json.loads(p.stdout.splitlines()[0])["type"] == "ready", p.stderr
    assert list((tmp_path / "mtpconsole").glob("agent-code-*.marshal"))


def test_ssh_config_is_parsed_once_per_host_until_the_file_changes(tmp_path, monkeypatch):
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host h1\n  HostName 10.0.0.1\n  Port 2201\n")
    calls = []
    real = ssh._resolve
    monkeypatch.setattr(ssh, "_resolve", lambda *a: calls.append(a) or real(*a))
    spec = parse_host_spec("h1")
    assert ssh.resolve(spec, str(cfg))["port"] == 2201
    assert ssh.resolve(spec, str(cfg))["port"] == 2201
    assert len(calls) == 1
    cfg.write_text("Host h1\n  HostName 10.0.0.1\n  Port 2202\n")
    os.utime(cfg, ns=(1, 1))  # a different mtime even on a coarse clock
    assert ssh.resolve(spec, str(cfg))["port"] == 2202
    assert len(calls) == 2


def test_ciphers_are_ours_only_when_the_config_names_none(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host h1\n  HostName 10.0.0.1\nHost h2\n  HostName 10.0.0.2\n  Ciphers aes256-ctr\n")
    assert ssh.resolve(parse_host_spec("h1"), str(cfg))["ciphers_given"] is False
    assert ssh.resolve(parse_host_spec("h2"), str(cfg))["ciphers_given"] is True
    assert ssh.FAST_CIPHERS[0].endswith("-gcm@openssh.com")
