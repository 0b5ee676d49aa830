"""Shared fixtures: a real OpenSSH sshd on 127.0.0.1, temporary keys, an SSH config alias.

Under CI=true a missing or broken sshd FAILS the run (it never skips there).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Import hypothesis now, not lazily at the terminal summary: rewriting it late trips CPython
# 3.11.7's "AST constructor recursion depth mismatch" bug and crashes pytest after the tests passed.
import hypothesis  # noqa: F401,E402

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "reference" / "data"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _missing(msg: str):
    if IN_CI:
        pytest.fail(f"sshd fixture unavailable under CI=true: {msg}", pytrace=False)
    pytest.skip(f"sshd fixture unavailable: {msg}")


def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class Sshd:
    """A running sshd and everything a client needs to reach it."""

    def __init__(self, root: Path, port: int, proc: subprocess.Popen):
        self.root, self.port, self.proc = root, port, proc
        self.client_key = root / "client_key"
        self.known_hosts = root / "known_hosts"
        self.ssh_config = root / "ssh_config"
        self.host_pub = root / "host_key.pub"
        self.alias = "testhost"
        self.user = os.environ.get("USER") or __import__("getpass").getuser()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def restart(self) -> None:
        self.stop()
        self.proc = _spawn_sshd(self.root, self.port)

    def openssh_argv(self) -> list[str]:
        return ["ssh", "-F", str(self.ssh_config), "-o", "BatchMode=yes", self.alias]


def _spawn_sshd(root: Path, port: int) -> subprocess.Popen:
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(root / "sshd_config")],
                            stdout=open(root / "sshd.log", "ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    if not _wait_port(port, proc):
        proc.kill()
        log = (root / "sshd.log").read_text(errors="replace")[-2000:]
        _missing(f"sshd did not start on port {port}: {log}")
    return proc


def make_sshd(root: Path) -> Sshd:
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if sshd is None or shutil.which("ssh-keygen") is None:
        _missing("OpenSSH server not installed (apt-get install openssh-server)")
    os.makedirs("/run/sshd", exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)], check=True)
    (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
    os.chmod(root / "authorized_keys", 0o600)
    port = free_port()
    (root / "sshd_config").write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {root / 'host_key'}
PidFile {root / 'sshd.pid'}
AuthorizedKeysFile {root / 'authorized_keys'}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin yes
StrictModes no
UsePAM no
MaxStartups 100:30:200
MaxSessions 50
LogLevel ERROR
""")
    pub = (root / "host_key.pub").read_text().split()
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
    s = Sshd(root, port, _spawn_sshd(root, port))
    s.ssh_config.write_text(f"""Host {s.alias}
  HostName 127.0.0.1
  Port {port}
  User {s.user}
  IdentityFile {s.client_key}
  UserKnownHostsFile {s.known_hosts}
  ServerAliveInterval 1
  ServerAliveCountMax 3
""")
    return s


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    s = make_sshd(tmp_path_factory.mktemp("sshd"))
    yield s
    s.stop()


@pytest.fixture
def runs_dir(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    return d


@pytest.fixture
def console_config(tmp_path, runs_dir, sshd_alias_or_none=None):
    """Write a config whose hosts (local and the sshd alias) use a temporary runs dir."""
    def write(hosts=("local", "testhost"), **host_extra):
        lines = []
        for h in hosts:
            lines.append(f'[hosts."{h}"]')
            lines.append(f'runs_dir = "{runs_dir}"')
            lines.append(f'python = "{sys.executable if h == "local" else "python3"}"')
            for k, v in host_extra.items():
                lines.append(f"{k} = {v!r}".replace("'", '"'))
        p = tmp_path / "config.toml"
        p.write_text("\n".join(lines) + "\n")
        return p
    return write
