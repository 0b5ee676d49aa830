"""A real agent process bootstrapped exactly as the console does it, for the agent's own tests."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from console.link.protocol import BOOTSTRAP, shipped_payload

FAKE_NVML = Path(__file__).resolve().parents[1] / "gpu" / "fake_nvml"


class AgentProc:
    """``python -c BOOTSTRAP`` with the shipped modules and ``cfg``; messages read with a deadline."""

    def __init__(self, cfg: dict[str, Any], env: dict[str, str] | None = None, python: str = sys.executable):
        # These tests read what each sample holds: whole samples on the wire (the deltas between them are the
        # link's business, tested in tests/test_sample_deltas.py), unless a test asks for deltas itself.
        cfg = {"deltas": False, **cfg}
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.p = subprocess.Popen([python, "-u", "-c", BOOTSTRAP], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, env=full_env)
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write((json.dumps(shipped_payload()) + "\n" + json.dumps(cfg) + "\n").encode())
        self.p.stdin.flush()
        os.set_blocking(self.p.stdout.fileno(), False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.p.stdout, selectors.EVENT_READ)
        self.buf = b""
        self.seen: list[tuple[float, dict]] = []
        self.ids = 0

    def _lines(self, timeout: float) -> list[dict]:
        out = []
        if self.sel.select(max(0.0, timeout)):
            chunk = os.read(self.p.stdout.fileno(), 1 << 20)  # type: ignore[union-attr]
            if not chunk:
                raise AssertionError("the agent closed its stdout")
            self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            msg = json.loads(line)
            self.seen.append((time.monotonic(), msg))
            out.append(msg)
        return out

    def read_until(self, pred: Callable[[dict], bool], timeout: float = 5.0) -> tuple[dict, float]:
        """The first message matching ``pred`` (and when it was read); AssertionError at the deadline."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in self._lines(deadline - time.monotonic()):
                if pred(msg):
                    return msg, time.monotonic()
        raise AssertionError(f"message not seen within {timeout}s")

    def request(self, op: str, timeout: float = 10.0, **args: Any) -> dict:
        """Send one request and return its reply."""
        self.ids += 1
        rid = self.ids
        assert self.p.stdin is not None
        self.p.stdin.write((json.dumps({"id": rid, "op": op, "args": args}) + "\n").encode())
        self.p.stdin.flush()
        msg, _ = self.read_until(lambda m: m.get("type") == "reply" and m.get("id") == rid, timeout)
        return msg

    def close(self) -> None:
        try:
            assert self.p.stdin is not None
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(5)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait(5)


def oldest_python() -> str | None:
    """A Python 3.8 interpreter (the oldest the agent supports) when this machine has one:
    ``$MTPCONSOLE_PYTHON38``, ``python3.8`` on PATH, or a pyenv-installed 3.8."""
    import glob
    import shutil

    candidates = [os.environ.get("MTPCONSOLE_PYTHON38"), shutil.which("python3.8")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    for exe in candidates:
        if exe:
            try:
                r = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2] == (3, 8))"],
                                   capture_output=True, text=True, timeout=30)
            except OSError:
                continue
            if r.returncode == 0 and r.stdout.strip() == "True":
                return exe
    return None


def start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[19])
