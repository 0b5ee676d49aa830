"""`mtpconsole status` end to end: local, over a real sshd (alias), unreachable, bad host key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import free_port

ENV = {**os.environ, "MTPCONSOLE_AUDIT_LOG": os.devnull}


def mtp(*args, timeout=60, env=None):
    return subprocess.run([sys.executable, "-m", "console", *args], capture_output=True, text=True,
                          timeout=timeout, env=env or ENV)


def test_version_and_help():
    r = mtp("--version")
    assert r.returncode == 0 and r.stdout.startswith("mtpconsole ")
    r = mtp("--help")
    assert r.returncode == 0 and "status" in r.stdout and "launch" in r.stdout


def test_status_local_json(console_config):
    cfg = console_config(hosts=("local",))
    r = mtp("status", "--host", "local", "--config", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    (h,) = data["hosts"]
    assert h["name"] == "local" and h["connection"]["state"] == "connected"
    assert h["sampled_at"] and isinstance(h["gpus"], list) and isinstance(h["servers"], list)
    assert h["connection"]["rtt_ms"] is not None
    if not h["gpus"]:
        assert h["gpu_error"]  # no GPU information is explicit, with the reason


@pytest.mark.sshd
def test_status_over_sshd_alias(sshd, console_config):
    cfg = console_config(hosts=("testhost",))
    r = mtp("status", "--host", "testhost", "--ssh-config", str(sshd.ssh_config), "--config", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    (h,) = json.loads(r.stdout)["hosts"]
    assert h["connection"]["state"] == "connected", h
    assert h["hostname"]


@pytest.mark.sshd
def test_status_user_at_host_port(sshd, console_config, tmp_path):
    # user@host:port without an alias: the identity and known_hosts come from a Host * block
    cfg_file = tmp_path / "ssh_config_star"
    cfg_file.write_text(f"Host *\n  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {sshd.known_hosts}\n")
    spec = f"{sshd.user}@127.0.0.1:{sshd.port}"
    r = mtp("status", "--host", spec, "--ssh-config", str(cfg_file), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hosts"][0]["connection"]["state"] == "connected"


def test_status_unreachable_port_is_clear_and_bounded(tmp_path):
    port = free_port()
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host dead\n  HostName 127.0.0.1\n  Port {port}\n  ConnectTimeout 3\n")
    t0 = time.monotonic()
    r = mtp("status", "--host", "dead", "--ssh-config", str(cfg), "--json")
    assert time.monotonic() - t0 < 20
    assert r.returncode == 1
    (h,) = json.loads(r.stdout)["hosts"]
    assert h["connection"]["state"] == "unreachable"
    assert "cannot connect" in h["connection"]["error"] and str(port) in h["connection"]["error"]


@pytest.mark.sshd
def test_one_unreachable_host_does_not_block_another(sshd, console_config, tmp_path):
    cfg = console_config(hosts=("testhost",))
    r = mtp("status", "--host", "testhost", "--host", f"127.0.0.1:{free_port()}",
            "--ssh-config", str(sshd.ssh_config), "--config", str(cfg), "--json")
    assert r.returncode == 1
    hosts = {h["name"]: h for h in json.loads(r.stdout)["hosts"]}
    assert hosts["testhost"]["connection"]["state"] == "connected"
    assert len(hosts) == 2


@pytest.mark.sshd
def test_host_key_mismatch_refused_with_fingerprint(sshd, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    pub = (tmp_path / "other_key.pub").read_text().split()
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {pub[0]} {pub[1]}\n")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(sshd.ssh_config.read_text().replace(str(sshd.known_hosts), str(kh)))
    r = mtp("status", "--host", "testhost", "--ssh-config", str(cfg), "--json")
    assert r.returncode == 1
    err = json.loads(r.stdout)["hosts"][0]["connection"]["error"]
    real_fp = subprocess.run(["ssh-keygen", "-lf", str(sshd.host_pub)], capture_output=True, text=True).stdout.split()[1]
    assert "HOST KEY CHANGED" in err and real_fp in err
    assert json.loads(r.stdout)["hosts"][0]["connection"]["state"] == "failed"  # not retried like a network fault


@pytest.mark.sshd
def test_unknown_host_key_then_trust_host(sshd, tmp_path):
    kh = tmp_path / "known_hosts"
    cfg = tmp_path / "ssh_config"
    cfg.write_text(sshd.ssh_config.read_text().replace(str(sshd.known_hosts), str(kh)))
    r = mtp("status", "--host", "testhost", "--ssh-config", str(cfg), "--json")
    err = json.loads(r.stdout)["hosts"][0]["connection"]["error"]
    assert "unknown host key" in err and "mtpconsole trust-host testhost" in err and "SHA256:" in err
    r = mtp("trust-host", "testhost", "--ssh-config", str(cfg), "--yes")
    assert r.returncode == 0, r.stderr
    assert "SHA256:" in r.stdout
    r = mtp("status", "--host", "testhost", "--ssh-config", str(cfg), "--json")
    assert r.returncode == 0, r.stdout + r.stderr


def test_bad_host_spec_and_broken_config(tmp_path):
    r = mtp("status", "--host", "a;rm -rf /")
    assert r.returncode == 2 and "invalid host" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "c.toml"
    bad.write_text("[ui]\ninterval = -3\n")
    r = mtp("status", "--host", "local", "--config", str(bad))
    assert r.returncode == 2 and str(bad) in r.stderr and "ui.interval" in r.stderr
    bad.write_text("[hosts.local\n")
    r = mtp("status", "--host", "local", "--config", str(bad))
    assert r.returncode == 2 and "invalid TOML" in r.stderr
