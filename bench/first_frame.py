"""Time to first frame of a TUI command in a pseudo-terminal, leaving no process behind.

    python -m bench.first_frame MARKER [DATA_REGEX] -- CMD [ARG...]

Runs CMD on a 200×50 pty, reports when its first output arrived, when MARKER (plain text the
first frame contains, e.g. the header title) first appeared on the app's screen (after its switch
to the alternate screen: a line printed before it, such as the demo's "staging…" line naming the
program, is not a frame) and, with DATA_REGEX, when the first frame *with data* did (the regex
matched the screen text, e.g. a GPU panel's power reading ``612/700 W``; placeholders never match
it), with the app's own CPU time and its children's at that moment, then types ``q``, waits for it to
quit (SIGTERM, then SIGKILL if it will not), and — being a child subreaper — waits for or kills
every process it left behind, naming them. Prints one JSON object.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time

PR_SET_CHILD_SUBREAPER = 36
ALT_SCREEN = b"\x1b[?1049h"
"""The app switching to the alternate screen: its frames come after it."""
ANSI = re.compile(rb"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


def _descendants(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    raw = f.read().decode("utf-8", "replace")
                fields = raw[raw.rfind(")") + 2:].split()
                if fields[0] != "Z":
                    kids.setdefault(int(fields[1]), []).append(int(name))
            except (OSError, IndexError, ValueError):
                continue
    out, stack = [], list(kids.get(root, []))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(kids.get(p, []))
    return out


def _cpu_ms(pid: int) -> float | None:
    """User + system CPU of one process so far (all its threads), in ms."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
        fields = raw[raw.rfind(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _drain(fd: int, buf: bytearray, timeout: float) -> bool:
    r, _, _ = select.select([fd], [], [], timeout)
    if not r:
        return True
    try:
        data = os.read(fd, 65536)
    except OSError:
        return False
    if not data:
        return False
    buf += data
    return True


def main() -> int:
    marker = sys.argv[1].encode()
    dash = sys.argv.index("--")
    data = re.compile(sys.argv[2].encode()) if dash > 2 else None
    cmd = sys.argv[dash + 1:]
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    t0 = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor")
        try:
            os.execvpe(cmd[0], cmd, env)
        finally:
            os._exit(127)
    buf = bytearray()
    first_out = first_frame = first_data = None
    cpu_app = cpu_rest = None
    deadline = time.monotonic() + 30
    alive = True
    seen = 0
    while alive and (first_frame is None or (data is not None and first_data is None)) \
            and time.monotonic() < deadline:
        alive = _drain(fd, buf, 0.05)
        now = time.perf_counter()
        if buf and first_out is None:
            first_out = now
        if len(buf) == seen:
            continue
        seen = len(buf)
        alt = buf.find(ALT_SCREEN)
        text = ANSI.sub(b"", bytes(buf[alt:])) if alt >= 0 else b""
        if first_frame is None and marker in text:
            first_frame = now
        if data is not None and first_data is None and data.search(text):
            first_data = now
            cpu_app = _cpu_ms(pid)  # where the time to the first frame with data went: the app's own CPU,
            cpu_rest = sum(c for c in map(_cpu_ms, _descendants(pid)) if c)  # its children's (agent, demo)
    t_quit = time.perf_counter()
    exited_by = None
    if alive:
        os.write(fd, b"q")
        end = time.monotonic() + 20
        while time.monotonic() < end:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                exited_by = "q"
                break
            if not _drain(fd, buf, 0.05):
                pass
        if exited_by is None:
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
                os.kill(pid, sig)
                end = time.monotonic() + wait
                while time.monotonic() < end:
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        exited_by = sig.name
                        break
                    _drain(fd, buf, 0.05)
                if exited_by:
                    break
    else:
        os.waitpid(pid, 0)
        exited_by = "itself"
    t_exit = time.perf_counter()
    # orphans were reparented to us: give them time to finish, then name and kill the rest
    end = time.monotonic() + 10
    me = os.getpid()
    while _descendants(me) and time.monotonic() < end:
        _reap()
        time.sleep(0.1)
    left = []
    for p in _descendants(me):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                left.append(f.read().replace(b"\0", b" ").decode("utf-8", "replace")[:200])
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.2)
    _reap()
    try:
        os.close(fd)
    except OSError:
        pass
    ms = lambda t: None if t is None else round((t - t0) * 1000, 1)  # noqa: E731
    print(json.dumps({"first_output_ms": ms(first_out), "first_frame_ms": ms(first_frame),
                      "first_data_ms": ms(first_data),
                      "cpu_app_ms": cpu_app, "cpu_children_ms": cpu_rest,
                      "quit_ms": round((t_exit - t_quit) * 1000, 1), "exited_by": exited_by,
                      "leftovers": left, "output_bytes": len(buf),
                      "tail": ANSI.sub(b"", bytes(buf[-400:])).decode("utf-8", "replace") if first_frame is None else ""}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
