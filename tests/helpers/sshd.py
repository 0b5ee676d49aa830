"""A throwaway OpenSSH sshd on 127.0.0.1 (temporary host key, authorised key, known_hosts and an
SSH config alias ``testhost``), stopped by its pid. No pytest here: the test fixture in
``tests/conftest.py`` and the benchmarks in ``bench/`` share it; it raises :class:`SshdUnavailable`
and the fixture decides whether that fails (CI) or skips.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from console.host import ports


class SshdUnavailable(Exception):
    """OpenSSH's sshd is not installed or did not start."""


def free_port(block: int = 8) -> int:
    """A loopback port with the ``block - 1`` ports after it free too, below the ephemeral range: no outgoing
    connection of the suite takes it (or ``port + 1``, a second rank's port) before the server binds it."""
    p = ports.listen_port(range(block), host="127.0.0.1")
    assert p is not None, "no free block of loopback ports"
    return p


class Sshd:
    def __init__(self, root: Path, port: int, proc: subprocess.Popen):
        self.root, self.port, self.proc = root, port, proc
        self.ssh_config = root / "ssh_config"
        self.client_key = root / "client_key"
        self.known_hosts = root / "known_hosts"
        self.host_pub = root / "host_key.pub"
        self.alias = "testhost"
        self.user = os.environ.get("USER") or getpass.getuser()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def openssh_argv(self) -> list[str]:
        return ["ssh", "-F", str(self.ssh_config), "-o", "BatchMode=yes", self.alias]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:  # sshd runs in its own session: end its whole group (per-connection children too)
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)

    def restart(self) -> None:
        """Restart the listener like a service manager does (KillMode=process): open sessions survive."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = _spawn(self.root, self.port)


def _spawn(root: Path, port: int) -> subprocess.Popen:
    exe = shutil.which("sshd") or "/usr/sbin/sshd"
    proc = subprocess.Popen([exe, "-D", "-e", "-f", str(root / "sshd_config")],
                            stdout=open(root / "sshd.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 10
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
            raise SshdUnavailable("sshd did not start: " + (root / "sshd.log").read_text(errors="replace")[-500:])
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.05)


def start_sshd(root: Path) -> Sshd:
    """Keys, config and known_hosts in ``root``; sshd on a free 127.0.0.1 port; an alias in ssh_config."""
    exe = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if exe is None or shutil.which("ssh-keygen") is None or shutil.which("ssh") is None:
        raise SshdUnavailable("OpenSSH (ssh, sshd, ssh-keygen) is not installed (apt-get install openssh-server)")
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
    s = Sshd(root, port, _spawn(root, port))
    s.ssh_config.write_text(f"""Host {s.alias}
  HostName 127.0.0.1
  Port {port}
  User {s.user}
  IdentityFile {root / 'client_key'}
  UserKnownHostsFile {root / 'known_hosts'}
  ServerAliveInterval 1
  ServerAliveCountMax 3
""")
    return s
