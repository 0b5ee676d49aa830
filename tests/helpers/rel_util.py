"""Shared helpers of the reliability tests: links over the test sshd, bounded waits, cleanup, a stalling
TCP listener, the console CLI as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from console.config import HostConfig
from console.link.link import HostLink
from console.link.ssh import parse_host_spec
from console.model import LaunchRequest

REPO = Path(__file__).resolve().parents[2]
SERVER = str(REPO / "tests" / "helpers" / "sgl_like.py")


def ssh_link(sshd, runs_dir, **cfg) -> HostLink:
    hc = HostConfig(runs_dir=str(runs_dir), python=cfg.pop("python", "python3"),
                    gpu_source=cfg.pop("gpu_source", "none"), **cfg)
    return HostLink(parse_host_spec(sshd.alias), hc, ssh_config=str(sshd.ssh_config), interval=0.3)


def req(port: int, *extra: str, mode: str = "ready", host: str = "testhost", gpus=(0,), **kw) -> LaunchRequest:
    return LaunchRequest(host=host, command=[sys.executable, SERVER],
                         flags=["--model-path", "/m", "--mode", mode, *extra], gpus=list(gpus), port=port, **kw)


def cleanup_runs(runs_dir: Path) -> None:
    """SIGKILL whatever a test left (recorded process groups and pids), bounded."""
    for rec in Path(runs_dir).glob("*/record.json"):
        try:
            r = json.loads(rec.read_text())
        except (OSError, ValueError):
            continue
        for fn, arg in ((os.killpg, r.get("pgid")), (os.kill, r.get("pid"))):
            if arg:
                try:
                    fn(arg, signal.SIGKILL)
                except OSError:
                    pass


def agent_pids() -> set[int]:
    """Pids of every running mtpconsole agent on this machine (cmdline holds the bootstrap)."""
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if b"mtpconsole-agent" in raw and b"-c" in raw:
                out.add(int(name))
    return out


class StallServer:
    """A TCP listener on 127.0.0.1 that accepts connections and never says a word."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                continue

    def close(self):
        self._stop = True
        self.thread.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


def cli(*args: str, env: dict | None = None, timeout: float = 60.0, **kw) -> subprocess.CompletedProcess:
    """Run ``python -m console ARGS`` and return the completed process (text)."""
    return subprocess.run([sys.executable, "-m", "console", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **(env or {})}, timeout=timeout, **kw)


def popen_cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "console", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO, env={**os.environ, **(env or {})})


def write_config(path: Path, hosts: dict[str, dict]) -> Path:
    """A console config with one [hosts."NAME"] table per host (values: str, float, list of str)."""
    lines = []
    for name, kv in hosts.items():
        lines.append(f'[hosts."{name}"]')
        for k, v in kv.items():
            if isinstance(v, dict):
                v = "{ " + ", ".join(f"{json.dumps(a)} = {json.dumps(b)}" for a, b in v.items()) + " }"
            else:
                v = json.dumps(v)
            lines.append(f"{k} = {v}")
    path.write_text("\n".join(lines) + "\n")
    return path


def descendants_of(root: int) -> set[int]:
    """Every live process below ``root`` in the process tree."""
    parent = {}
    for n in os.listdir("/proc"):
        if n.isdigit():
            try:
                raw = Path(f"/proc/{n}/stat").read_text()
                parent[int(n)] = int(raw[raw.rfind(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out = set()
    for p in parent:
        cur, k = p, 0
        while cur and k < 64:
            cur, k = parent.get(cur), k + 1
            if cur == root:
                out.add(p)
                break
    return out


def kill_quietly(pids=(), groups=()) -> None:
    """Teardown: SIGKILL these processes and process groups; ones already gone are fine."""
    for fn, targets in ((os.kill, pids), (os.killpg, groups)):
        for t in targets:
            try:
                fn(t, signal.SIGKILL)
            except OSError:
                pass
