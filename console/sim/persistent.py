"""The persistent demo host: one demo per user that every ``--demo`` command shares between calls.

``mtpconsole launch --demo …`` followed by ``sessions --demo``, ``logs --demo``, ``ack --demo`` or ``report
--demo`` sees what the launch did: the first ``--demo`` command stages the demo (:func:`console.sim.demo.stage`,
~5 s) under a *keeper* process, the next ones reuse it (:func:`acquire`). It stays up until ``mtpconsole demo
down`` (:func:`stop`) or until no command has used it for its idle timeout (:data:`DEFAULT_IDLE_S`, 15 min;
``$MTPCONSOLE_DEMO_IDLE_S`` or ``demo up --idle S``); then the keeper kills what the demo started and removes its
files (:func:`console.sim.demo.teardown`). ``MTPCONSOLE_DEMO_IDLE_S=0`` turns it off: each ``--demo`` command
stages a demo of its own and removes it when it exits (the tests run so).

Its private directory (:func:`console.paths.demo_dir`, mode 0700, every file 0600)::

    lock          flock, exclusive: held by whoever stages, reuses, stops or idles out the demo (one at a time,
                  so two commands started together stage one demo: the second waits and reuses it)
    users         flock, shared: held by every command that uses the demo, for as long as it runs
                  (the keeper never idles out while one is held)
    used          its mtime: the start and the end of the last command that used the demo
    state.json    :class:`DemoState`: where the demo lives, its own processes (pid + start time), its config
    keeper.log    the keeper's own output (why a staging failed)
    mtpconsole-demo-XXXXXXXX/   the demo's files: sim/, runs/, models/, logs/

A demo is live when its keeper runs (pid, start time and boot id as recorded, not a zombie) and its files exist;
anything else in the directory is stale and is removed before a demo is staged again: the recorded keeper is
killed if it still runs, and each stale demo's own processes (console.sim.demo.own_processes: the environment
names its sim directory, or it is recorded with its start time) are killed — nothing else is ever signalled.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from console import paths
from console.config import Config
from console.errors import UserError
from console.host import hostlib
from console.sim import demo

IDLE_ENV = "MTPCONSOLE_DEMO_IDLE_S"
"""Seconds the persistent demo stays up with no command using it; 0 turns the persistent demo off."""
DEFAULT_IDLE_S = 900.0
"""15 minutes: long enough to read a result and type the next command, short enough that a forgotten demo (its
simulated servers and load generator use some CPU) goes on its own."""
MAX_IDLE_S = 86400.0
"""A day at most: nothing the demo starts runs unbounded."""
STAGE_TIMEOUT_S = 60.0
"""How long the keeper may take to stage the demo (about 5 s on a quiet 2-core machine)."""
LOCK_TIMEOUT_S = STAGE_TIMEOUT_S + 30.0
"""How long a command waits for another one's staging (or stop) before it gives up."""
STOP_TIMEOUT_S = 15.0
"""How long ``demo down`` waits for the keeper's own teardown before it kills the keeper and tears down itself."""
ROOT_PREFIX = "mtpconsole-demo-"
STATE, LOCK, USERS, USED, LOG = "state.json", "lock", "users", "used", "keeper.log"


class Proc(BaseModel):
    """A process by its identity: the pid and the start time it had (a reused pid is another process)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pid: int
    start_ticks: int

    @classmethod
    def of(cls, pid: int) -> Proc | None:
        """The process ``pid`` as it is now (None when it is gone)."""
        st = demo.process_state(pid)
        return None if st is None else cls(pid=pid, start_ticks=st[2])

    def alive(self) -> bool:
        """Still running, and still this process."""
        return demo.same_process(self.pid, self.start_ticks)


class DemoState(BaseModel):
    """``state.json``: written by the keeper (atomically) when it starts and again once the demo is ready."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal[1] = 1
    root: str
    """The demo's files (its sim/, runs/, models/ and logs/)."""
    boot_id: str
    """The machine's boot the processes below belong to (after a reboot every pid is another process)."""
    keeper: Proc
    """The process that owns the demo: it stages it, idles it out and tears it down."""
    idle_s: float
    """Seconds with no command using the demo before the keeper removes it."""
    created_at: float
    load: bool
    """Whether the hand-started server is kept busy by a load generator."""
    ready: bool = False
    """The hand-started server serves: commands may use the demo."""
    port: int | None = None
    """The hand-started server's port."""
    foreign: Proc | None = None
    """The server started "by hand" on GPU 0."""
    load_gen: Proc | None = None
    """The load generator keeping it busy."""
    config: Config | None = None
    """The demo's ``demo`` host and its two profiles."""


def idle_from_env() -> float:
    """``$MTPCONSOLE_DEMO_IDLE_S`` (default :data:`DEFAULT_IDLE_S`); 0 means the persistent demo is off."""
    raw = os.environ.get(IDLE_ENV, "").strip()
    if not raw:
        return DEFAULT_IDLE_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= MAX_IDLE_S:
        raise UserError(f"{IDLE_ENV}={raw!r}: expected seconds from 0 (off) to {MAX_IDLE_S:g}")
    return value


def enabled() -> bool:
    """``--demo`` commands share the persistent demo (``$MTPCONSOLE_DEMO_IDLE_S`` is not 0)."""
    return idle_from_env() > 0


def check_idle(value: float, what: str = "--idle") -> float:
    """An idle timeout given by the operator: above 0, at most :data:`MAX_IDLE_S`."""
    if not 0 < value <= MAX_IDLE_S:
        raise UserError(f"{what} {value:g}: expected seconds above 0 (at most {MAX_IDLE_S:g})")
    return value


def _boot() -> str:
    """This boot's id ('' when unknown), by the agent's own reader (:func:`console.host.hostlib.boot_id`)."""
    return hostlib.boot_id() or ""


def private_dir(d: Path) -> Path:
    """``d`` created if needed, a directory of this user only (0700); a symlink or another user's is refused."""
    d.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(d, 0o700)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{d}: not a directory (the persistent demo's own directory): refusing to use it")
    if st.st_uid != os.getuid():
        raise UserError(f"{d}: owned by uid {st.st_uid}, not by you: refusing to use it for the demo")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(d, 0o700)
    return d


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


@contextlib.contextmanager
def _locked(d: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold ``d/lock`` exclusively (waiting at most ``timeout`` s for whoever holds it)."""
    fd = _open(d / LOCK)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise UserError(f"the demo host is busy: another mtpconsole has held {d / LOCK} for "
                                    f"{timeout:g} s (staging or stopping it)", exit_code=1) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _try_lock(path: Path, how: int) -> int | None:
    """``path`` locked (``fcntl.LOCK_EX``/``LOCK_SH``) without waiting: its fd, or None when it is held."""
    fd = _open(path)
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        os.close(fd)
        return None


def _in_use(d: Path) -> bool:
    """Some command holds ``d/users`` (it uses the demo now)."""
    fd = _try_lock(d / USERS, fcntl.LOCK_EX)
    if fd is None:
        return True
    os.close(fd)
    return False


def _touch(d: Path) -> None:
    os.close(_open(d / USED))
    os.utime(d / USED)


def last_used(d: Path) -> float | None:
    """When a command last started or ended using the demo (None: never)."""
    try:
        return (d / USED).stat().st_mtime
    except OSError:
        return None


def read_state(d: Path) -> DemoState | None:
    """``d/state.json``, or None when it is missing or unreadable (then nothing in it can be trusted)."""
    try:
        return DemoState.model_validate_json((d / STATE).read_bytes())
    except (OSError, ValidationError, ValueError):
        return None


def write_state(d: Path, st: DemoState) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".state-", dir=d)
    with os.fdopen(fd, "w") as f:
        f.write(st.model_dump_json(indent=1))
    os.replace(tmp, d / STATE)


def _remove_state(d: Path, keeper: Proc | None = None) -> None:
    """Remove ``state.json`` (only if ``keeper`` still is the recorded keeper, when given)."""
    if keeper is not None:
        st = read_state(d)
        if st is None or st.keeper != keeper:
            return
    with contextlib.suppress(FileNotFoundError):
        (d / STATE).unlink()


def live(st: DemoState) -> bool:
    """The recorded keeper runs (same pid, start time and boot) and the demo's files exist."""
    return st.boot_id == _boot() and st.keeper.alive() and (Path(st.root) / "sim" / "gpus.json").is_file()


def _roots(d: Path) -> list[Path]:
    return sorted(p for p in d.glob(ROOT_PREFIX + "*") if p.is_dir() and not p.is_symlink())


def _clean(d: Path, st: DemoState | None) -> list[int]:
    """Remove a stale (or stopped) demo: its recorded keeper if it still runs, every demo directory's own
    processes, the files and the state; the pids signalled. Called with the lock held and no live demo."""
    signalled = []
    if st is not None and st.boot_id == _boot() and st.keeper.alive():
        with contextlib.suppress(OSError):
            os.kill(st.keeper.pid, signal.SIGKILL)
            signalled.append(st.keeper.pid)
    roots = set(_roots(d))
    if st is not None and Path(st.root).parent == d:
        roots.add(Path(st.root))
    for root in sorted(roots):
        signalled += demo.teardown(root, None)
    _remove_state(d)
    return sorted(set(signalled))


class Lease:
    """A command's use of the persistent demo: the demo stays up (never idles out) until :meth:`release`."""

    def __init__(self, d: Path, state: DemoState, fd: int, staged: bool) -> None:
        self.dir, self.state, self._fd, self.staged = d, state, fd, staged

    @property
    def config(self) -> Config:
        assert self.state.config is not None  # a ready state has it
        return self.state.config

    def release(self) -> None:
        """The command is done with the demo: its idle timeout counts from now."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                _touch(self.dir)
            os.close(self._fd)
            self._fd = -1


def _wait_ready(d: Path, keeper: Proc, child: subprocess.Popen | None, timeout: float) -> DemoState | None:
    """The state once ``keeper`` says the demo is ready; None when the keeper died or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = read_state(d)
        if st is not None and st.keeper == keeper and st.ready:
            return st
        if (child is not None and child.poll() is not None) or not keeper.alive():
            return None
        time.sleep(0.1)
    return None


def _current(d: Path) -> DemoState | None:
    """The live, ready demo (waiting for one still staging); a stale one is removed first. Lock held."""
    st = read_state(d)
    if st is not None and live(st):
        if st.ready:
            return st
        ready = _wait_ready(d, st.keeper, None, STAGE_TIMEOUT_S)  # its stager died: the keeper goes on alone
        if ready is not None:
            return ready
    if st is not None or _roots(d):
        _clean(d, st)
    return None


def _log_tail(d: Path, n: int = 3) -> str:
    try:
        lines = [ln for ln in (d / LOG).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no keeper log"
    return " | ".join(lines[-n:]) or "the keeper wrote nothing"


def _stage(d: Path, *, load: bool, idle_s: float) -> DemoState:
    """Start a keeper for a fresh demo under ``d`` and wait until it is ready. Lock held."""
    root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=d))
    with os.fdopen(os.open(d / LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "wb") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "console.sim.persistent", "--root", str(root), "--idle", repr(idle_s),
             "--load" if load else "--no-load"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(root),
            env={**os.environ, "PYTHONPATH": demo.python_path(), "MTPCONSOLE_SIM_DIR": str(root / "sim")})
    threading.Thread(target=child.wait, name="demo-keeper-reaper", daemon=True).start()
    keeper = Proc.of(child.pid)
    st = _wait_ready(d, keeper, child, STAGE_TIMEOUT_S) if keeper is not None else None
    if st is None:
        why = _log_tail(d) if child.poll() is not None else f"not ready after {STAGE_TIMEOUT_S:g} s"
        _clean(d, read_state(d))
        if keeper is not None and keeper.alive():
            with contextlib.suppress(OSError):
                os.kill(keeper.pid, signal.SIGKILL)
        demo.teardown(root, None)
        raise UserError(f"the demo host could not be staged: {why} (see {d / LOG})", exit_code=1)
    return st


def acquire(*, load: bool = True, idle_s: float | None = None, stage: bool = True,
            notice: Callable[[str], None] | None = None) -> Lease | None:
    """Use the persistent demo: the running one, else (``stage``) a freshly staged one; None when none runs and
    ``stage`` is off. ``load`` and ``idle_s`` (default :func:`idle_from_env`) apply to a demo staged here;
    ``idle_s`` given also changes a running demo's timeout. ``notice`` is told when a demo is being staged."""
    d = private_dir(paths.demo_dir())
    with _locked(d):
        st = _current(d)
        staged = False
        if st is None:
            if not stage:
                return None
            idle = idle_s if idle_s is not None else idle_from_env()
            if notice is not None:
                notice(f"staging the demo host in {d} (it stays up for the next --demo commands until "
                       f"'mtpconsole demo down' or {_duration(idle)} unused)…")
            st, staged = _stage(d, load=load, idle_s=idle), True
        elif idle_s is not None and idle_s != st.idle_s:
            st = st.model_copy(update={"idle_s": idle_s})
            write_state(d, st)
        fd = _open(d / USERS)
        fcntl.flock(fd, fcntl.LOCK_SH)  # never waits: the keeper locks it only while holding d/lock
        _touch(d)
        return Lease(d, st, fd, staged)


def stop() -> dict:
    """``demo down``: stop the keeper (it tears the demo down), make sure nothing of the demo is left, remove its
    state. The report: what was there (``up``, ``stale`` or ``down``), where, and the pids signalled."""
    d = paths.demo_dir()
    if not d.is_dir():
        return {"ok": True, "was": "down", "dir": str(d), "root": None, "signalled": []}
    d = private_dir(d)
    with _locked(d):
        st = read_state(d)
        was = "up" if st is not None and live(st) else "stale" if st is not None or _roots(d) else "down"
        signalled: list[int] = []
        if st is not None and was == "up":
            with contextlib.suppress(OSError):
                os.kill(st.keeper.pid, signal.SIGTERM)
                signalled.append(st.keeper.pid)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while st.keeper.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
        signalled += _clean(d, st)  # the keeper's own teardown done, or (it hung, it was stale) done here
        return {"ok": True, "was": was, "dir": str(d), "root": st.root if st else None,
                "signalled": sorted(set(signalled))}


def status() -> dict:
    """``demo status``: where the demo lives, its processes and its idle deadline; reading it uses nothing (the
    deadline does not move)."""
    d = paths.demo_dir()
    out: dict = {"state": "down", "dir": str(d), "root": None}
    if not d.is_dir():
        return out
    st = read_state(d)
    if st is None:
        return {**out, "state": "stale" if _roots(d) else "down"}
    now = time.time()
    is_live = live(st)
    in_use = is_live and _in_use(d)
    used = last_used(d) or st.created_at
    root = Path(st.root)
    own = demo.own_processes(root) if root.is_dir() else {}

    def proc(p: Proc | None) -> dict | None:
        return None if p is None else {"pid": p.pid, "start_ticks": p.start_ticks, "alive": p.alive()}

    return {
        **out, "state": ("up" if st.ready else "staging") if is_live else "stale", "root": st.root,
        "keeper": proc(st.keeper), "foreign": proc(st.foreign), "load_gen": proc(st.load_gen), "port": st.port,
        "pids": sorted(set(own) | ({st.keeper.pid} if st.keeper.alive() else set())),
        "created_at": st.created_at, "idle_s": st.idle_s, "in_use": in_use, "last_used_at": used,
        "idle_deadline": ((now if in_use else used) + st.idle_s) if is_live else None,
    }


def _duration(s: float) -> str:
    if s >= 120:
        return f"{s / 60:g} min"
    return f"{s:g} s"


# --- the keeper: ``python -m console.sim.persistent --root ROOT --idle S [--no-load]`` -----------------------


class Keeper:
    """The demo's owner process: stages it under ``root``, records it, stays until stopped or idle, tears it down."""

    def __init__(self, root: Path, idle_s: float, load: bool) -> None:
        self.root, self.dir, self.idle_s, self.load = root, root.parent, idle_s, load
        self.stopping = False
        self.foreign: subprocess.Popen | None = None
        self.load_gen: subprocess.Popen | None = None
        me = Proc.of(os.getpid())
        assert me is not None
        self.me = me

    def _stop(self, signum: int, frame: object) -> None:
        self.stopping = True

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, self._stop)
        st = DemoState(root=str(self.root), boot_id=_boot(), keeper=self.me, idle_s=self.idle_s,
                       created_at=time.time(), load=self.load)
        write_state(self.dir, st)
        try:
            ready = self._stage(st)
            if ready is None:
                return 1
            write_state(self.dir, ready)
            _touch(self.dir)
            print(f"demo ready: hand-started server pid {ready.foreign and ready.foreign.pid} on port {ready.port}",
                  flush=True)
            check = min(1.0, max(0.1, self.idle_s / 4))
            next_check = time.monotonic() + check
            while not self.stopping:
                time.sleep(0.1)
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + check
                    if self._idle_out():
                        return 0
            print("stopped (SIGTERM): tearing the demo down", flush=True)
            return 0
        finally:
            self._teardown()
            _remove_state(self.dir, self.me)

    def _stage(self, st: DemoState) -> DemoState | None:
        port = 30000 if demo.port_free(30000) else demo.free_port()
        cfg, self.foreign = demo.stage(self.root, port=port)
        threading.Thread(target=self.foreign.wait, name="demo-reaper", daemon=True).start()
        deadline = time.monotonic() + STAGE_TIMEOUT_S - 5
        while not demo.serving(port):
            if self.stopping or self.foreign.poll() is not None or time.monotonic() >= deadline:
                print(f"the hand-started server did not serve on port {port} (exit {self.foreign.poll()}; "
                      f"its log: {self.root / 'logs' / 'sglang_gpu0.log'})", flush=True)
                return None
            time.sleep(0.2)
        if self.load:
            self.load_gen = demo.start_load(self.root, port)
            threading.Thread(target=self.load_gen.wait, name="demo-load-reaper", daemon=True).start()
        return st.model_copy(update={
            "ready": True, "port": port, "config": cfg, "foreign": Proc.of(self.foreign.pid),
            "load_gen": Proc.of(self.load_gen.pid) if self.load_gen is not None else None})

    def _idle_out(self) -> bool:
        """With the lock (if free now): the demo is no longer this keeper's, or no command used it for its idle
        timeout and none uses it now — then tear it down (still holding the lock) and say so."""
        fd = _try_lock(self.dir / LOCK, fcntl.LOCK_EX)
        if fd is None:
            return False  # someone stages, reuses or stops it right now
        try:
            st = read_state(self.dir)
            if st is None or st.keeper != self.me:
                print("the demo's state no longer names this keeper: leaving", flush=True)
                return True
            used = last_used(self.dir) or st.created_at
            if time.time() - used < st.idle_s:
                return False
            users = _try_lock(self.dir / USERS, fcntl.LOCK_EX)
            if users is None:
                return False  # a command uses it (a followed log, an export, a TUI)
            try:
                print(f"idle for {st.idle_s:g} s: tearing the demo down", flush=True)
                self._teardown()
                _remove_state(self.dir, self.me)
            finally:
                os.close(users)
            return True
        finally:
            os.close(fd)

    def _teardown(self) -> None:
        if self.load_gen is not None and self.load_gen.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.load_gen.pid, signal.SIGKILL)
        demo.teardown(self.root, self.foreign)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m console.sim.persistent",
                                description="the persistent demo host's keeper (started by mtpconsole --demo)")
    p.add_argument("--root", required=True, help="the demo's directory (inside the private demo directory)")
    p.add_argument("--idle", type=float, required=True, help="seconds unused before it removes the demo")
    p.add_argument("--load", action=argparse.BooleanOptionalAction, default=True)
    args = p.parse_args(argv)
    root = Path(args.root)
    if not root.name.startswith(ROOT_PREFIX) or not root.is_dir():
        p.error(f"--root {root}: not a demo directory made by mtpconsole")
    return Keeper(root, check_idle(args.idle), args.load).run()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
