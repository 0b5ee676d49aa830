"""Worker processes of the SGLang stand-in: ``sglang::scheduler[_TP<n>]``, ``sglang::detokenizer``, the resource tracker.

Started by :mod:`console.sim.sglang` the way SGLang's start: a multiprocessing 'spawn' command
line (``python -c 'from multiprocessing.spawn import spawn_main; ...' --multiprocessing-fork``),
retitled after ``retitle_s`` by overwriting the argv area like setproctitle (argv then reads
``['sglang::scheduler', '', '', ...]``); plus a ``multiprocessing.resource_tracker`` child. Stdlib only.

The launcher computes everything (memory plan, log lines) and hands each scheduler a *script*
in ``$MTPCONSOLE_SIM_WORKER`` (JSON): steps ``{"delay": s, "log": str|None, "mem_mib": int|None}``
played in order (a ``{"gate": true}`` step, for a ``--nnodes`` group member, blocks until the launcher
sends ``{"go": true}``: every node joined), then ``"outcome"``: ``"ready"`` (tell the launcher, then serve) or ``"fail"``
(print ``"failure"``, SIGQUIT the launcher, exit 1) — SGLang's "Scheduler hit an exception" path.

While serving, the launcher sends JSON lines on ``cmd_fd``: ``{"busy": 0.7, "log": "..."}``
(update the alloc file; print the line) or ``{"exit": true}`` (clean exit: remove the alloc file).

Parent death: ``PR_SET_PDEATHSIG=SIGKILL`` (so the alloc file stays behind, like a real killed
process) plus a getppid poll. Fault ``orphan``: the scheduler calls ``setsid()``, skips the death
signal and keeps running (holding its memory) after the launcher is gone, for at most an hour.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import sys
import threading
import time

from console.sim import simgpu

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
ORPHAN_MAX_S = 3600.0


def _set_pdeathsig() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the getppid poll still ends us


def _log(line: str) -> None:
    try:
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def _ts(prefix: str) -> str:
    return "[%s%s]" % (time.strftime("%Y-%m-%d %H:%M:%S"), prefix)


def _parent_gone(parent: int) -> bool:
    return os.getppid() != parent


def _sleep_watch(seconds: float, parent: int, orphan: bool) -> None:
    """Sleep, but end at once if the launcher died (unless this is an escaping orphan)."""
    end = time.monotonic() + max(0.0, seconds)
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        if not orphan and _parent_gone(parent):
            os._exit(0)
        time.sleep(min(0.05, left))


def run_detokenizer(cfg: dict) -> int:
    parent = cfg["parent_pid"]
    _set_pdeathsig()
    if cfg.get("fault") == "ignore_sigterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    deadline = time.monotonic() + 7 * 24 * 3600.0
    while time.monotonic() < deadline:
        if _parent_gone(parent):
            return 0
        time.sleep(0.2)
    return 0


def run_scheduler(cfg: dict) -> int:
    parent = cfg["parent_pid"]
    fault = cfg.get("fault") or ""
    orphan = fault == "orphan" and cfg.get("rank", 0) == 0
    prefix = cfg.get("prefix", "")
    sim_dir = cfg.get("sim_dir")
    gpu = cfg.get("gpu")
    spec = bool(cfg.get("spec"))
    pid = os.getpid()
    events_fd = cfg["events_fd"]
    cmd_fd = cfg["cmd_fd"]
    if orphan:
        os.setsid()  # escape the launcher's process group: a group kill misses us
    else:
        _set_pdeathsig()
        if _parent_gone(parent):
            return 0
    if fault == "ignore_sigterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    mem = 0

    def alloc(mib: int | None = None, busy: float = 0.0) -> None:
        nonlocal mem
        if mib is not None:
            mem = mib
        if sim_dir and gpu is not None:
            try:
                simgpu.write_alloc(sim_dir, pid, gpu, mem, busy, spec)
            except OSError:
                pass

    def clean_exit(code: int = 0) -> None:
        if sim_dir:
            simgpu.remove_alloc(sim_dir, pid)
        os._exit(code)

    pending = b""  # commands read past a gate's "go"
    for step in cfg.get("steps", []):
        _sleep_watch(float(step.get("delay", 0.0)), parent, orphan)
        if step.get("gate"):
            pending = _gate(cmd_fd, parent)
        if step.get("mem_mib") is not None:
            alloc(int(step["mem_mib"]))
        if step.get("log"):
            _log("%s %s" % (_ts(prefix), step["log"]))

    if cfg.get("outcome") == "fail":
        for line in cfg.get("failure", []):
            _log(line.replace("%TS%", _ts(prefix)))
        if not orphan:
            try:
                os.kill(parent, signal.SIGQUIT)
            except OSError:
                pass
        if sim_dir:
            simgpu.remove_alloc(sim_dir, pid)
        if orphan:
            # an orphaned scheduler that failed still lingers holding its context
            _linger(parent, alloc)
        return 1

    try:
        os.write(events_fd, (json.dumps({"event": "ready", "rank": cfg.get("rank", 0), "pid": pid}) + "\n").encode())
    except OSError:
        pass

    # serve: follow the launcher's commands
    buf = pending
    while True:
        if _parent_gone(parent):
            if orphan:
                alloc(busy=0.0)
                _linger(parent, alloc)
            return 0
        try:
            r, _, _ = select.select([cmd_fd], [], [], 0.2)
        except InterruptedError:
            continue
        if not r:
            continue
        try:
            chunk = os.read(cmd_fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            # launcher closed the pipe: it is gone or exiting
            if orphan:
                alloc(busy=0.0)
                _linger(parent, alloc)
            clean_exit(0)
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                msg = json.loads(line.decode("utf-8"))
            except ValueError:
                continue
            if msg.get("exit"):
                if orphan:
                    alloc(busy=0.0)
                    _linger(parent, alloc)
                clean_exit(0)
            if msg.get("front"):
                _open_front(msg["front"], events_fd)
            if "busy" in msg:
                alloc(busy=float(msg["busy"]))
            if msg.get("log"):
                _log("%s %s" % (_ts(prefix), msg["log"]))


def _gate(cmd_fd: int, parent: int) -> bytes:
    """A group member's rendezvous (``--nnodes``): block until the launcher says ``go`` (every node joined).

    Returns what was read after the ``go`` line; ends the process when the launcher is gone.
    """
    buf = b""
    while True:
        if _parent_gone(parent):
            os._exit(0)
        try:
            r, _, _ = select.select([cmd_fd], [], [], 0.2)
        except InterruptedError:
            continue
        if not r:
            continue
        chunk = os.read(cmd_fd, 65536)
        if not chunk:
            os._exit(0)
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if b'"go"' in line:
                return buf


def _open_front(front: dict, events_fd: int) -> None:
    """SGLang's Rust front end, as seen from outside: this scheduler listens on the server's port (relaying each
    connection to the launcher's private HTTP port) and reports whether it could bind."""
    try:
        srv = socket.create_server((str(front["host"]), int(front["port"])), reuse_port=False)
    except OSError as e:
        ev = {"event": "front", "ok": False, "errno": e.errno, "error": e.strerror or str(e)}
    else:
        ev = {"event": "front", "ok": True}
        threading.Thread(target=_relay_accept, args=(srv, int(front["backend"])), daemon=True).start()
    try:
        os.write(events_fd, (json.dumps(ev) + "\n").encode())
    except OSError:
        pass


def _relay_accept(srv: socket.socket, backend: int) -> None:
    while True:
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        threading.Thread(target=_relay, args=(conn, backend), daemon=True).start()


def _relay(conn: socket.socket, backend: int) -> None:
    """Pump bytes both ways between a client and the launcher's HTTP port until either side closes."""
    try:
        up = socket.create_connection(("127.0.0.1", backend), timeout=10)
    except OSError:
        conn.close()
        return
    up.settimeout(None)

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s_ in (src, dst):
                try:
                    s_.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    t = threading.Thread(target=pump, args=(up, conn), daemon=True)
    t.start()
    pump(conn, up)
    t.join(timeout=30)
    conn.close()
    up.close()


def _linger(parent: int, alloc: object) -> None:
    """The orphan fault: keep holding GPU memory, idle, until killed (bounded to an hour)."""
    deadline = time.monotonic() + ORPHAN_MAX_S
    while time.monotonic() < deadline:
        time.sleep(0.5)
    os._exit(0)


def set_title(title: str) -> None:
    """Retitle like setproctitle: overwrite this process's argv area in place (via /proc/self/mem) and its comm.

    Afterwards ``/proc/<pid>/cmdline`` reads ``title`` then NUL padding: argv
    ``[title, '', '', ...]``, as a real ``sglang::scheduler``'s does.
    """
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (stat(5) fields 48, 49)
        data = title.encode()[: max(0, end - start - 1)]
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            mem.write(data + b"\0" * (end - start - len(data)))
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_NAME, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)
    except (OSError, ValueError, IndexError, AttributeError):
        pass  # no /proc/self/mem write access: keep the spawn command line


def run_resource_tracker(cfg: dict) -> int:
    """multiprocessing's resource tracker: idle until the launcher is gone (bounded)."""
    _set_pdeathsig()
    parent = int(cfg.get("parent_pid") or os.getppid())
    deadline = time.monotonic() + ORPHAN_MAX_S
    while time.monotonic() < deadline and not _parent_gone(parent):
        time.sleep(0.2)
    return 0


def main() -> int:
    try:
        cfg = json.loads(os.environ.get("MTPCONSOLE_SIM_WORKER", ""))
    except ValueError:
        print("sglang worker: MTPCONSOLE_SIM_WORKER is not valid JSON", file=sys.stderr)
        return 2
    if cfg.get("role") == "resource_tracker":
        return run_resource_tracker(cfg)
    if cfg.get("title"):  # start as a multiprocessing spawn child, retitle once "imported", as SGLang's do
        parent = int(cfg.get("parent_pid") or os.getppid())
        deadline = time.monotonic() + float(cfg.get("retitle_s") or 0.0)
        while time.monotonic() < deadline and not _parent_gone(parent):
            time.sleep(0.02)
        if _parent_gone(parent):
            return 0
        set_title(str(cfg["title"]))
    if cfg.get("role") == "detokenizer":
        return run_detokenizer(cfg)
    return run_scheduler(cfg)


if __name__ == "__main__":
    sys.exit(main())
