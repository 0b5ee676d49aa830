"""Per-launch supervisor: one detached process that starts, watches and records a server.

Shipped to the remote host with the agent's modules (it imports ``hostlib``, ``hostsecrets``,
``watch`` and ``logcap`` beside it) and run by the agent from the package it wrote (see
``launch.supervisor_argv``) as::

    python3 -c SUPERVISOR_BOOT LIB_ROOT RUN_DIR   # stdin: ONE JSON line {"env": {"K": "V", ...}} then EOF

Stdlib only, Python >= 3.8, no import from ``console``. Importing this module has no side effects.
Longer than the ~400 lines a module should have, for a reason: it is the whole life of one detached
process (validate, detach, spawn, reap, clean up, record) whose steps share the fork/fd/signal state
described here; the facts it shares with the agent live in ``hostlib``/``hostsecrets``.

``RUN_DIR/spec.json`` (a LaunchSpec: ``argv``, ``gpus``, ``cwd``, ``session_id``...) already
exists. Env *values* (tokens included) travel only on stdin, never on a command line or in a log.

What happens:

1. The env line and the spec are read and validated; ``output.log`` is created with
   ``O_CREAT|O_EXCL`` (an existing log is refused: a launch never reuses or appends to one).
   Any problem: ``exit.json`` with ``error``, exit status 2.
2. Double fork + ``setsid``. The daemon ignores SIGHUP/SIGINT/SIGTERM, has stdin from
   /dev/null, stdout/stderr appended to ``supervisor.log``, no other inherited fd, becomes a
   child subreaper (``prctl``) so orphaned workers stay its children, and chdirs to the cwd.
3. The server is forked into its own process group and ``execvpe``'d (no shell, ever) with
   stdout+stderr on ``output.log``; a close-on-exec pipe tells exec success from failure. With a
   ``log_cap_mb`` in the spec they are a pipe instead, which a thread drains into ``output.log``
   and rotates (see ``logcap``).
4. ``record.json`` (pid, pgid, start ticks, boot id) is written atomically. Only then does the
   first process (the one the caller waits for) exit: 0 when the server runs, 1 when it could
   not be executed (``exit.json`` says why), so the caller's channel closes promptly.
5. The daemon reaps every child until the server itself exits, then SIGKILLs what is left
   (the server's group, every descendant, anything carrying this session's
   ``MTPCONSOLE_SESSION``), reaps it, drains a capped log's pipe to its end, and writes
   ``exit.json`` atomically.
"""

import ctypes
import json
import os
import select
import signal
import socket
import sys
import time
from typing import Any, Dict, List, Tuple

from .hostlib import (
    RUN_DIR_ENV,
    RUN_EXIT,
    RUN_EXITS,
    RUN_LOG,
    RUN_RECORD,
    RUN_SPEC,
    RUN_STOP_REQUEST,
    RUN_SUPERVISOR_LOG,
    SESSION_ENV,
    SUPERVISOR_NO_SPACE,
    append_json_line,
    atomic_write_json,
    boot_id,
    decode_wait_status,
    disk_full,
    fsync_dir,
    proc_stat,
    read_oom_kill,
    start_ticks_of,
)
from .hostsecrets import mask_argv
from .logcap import DRAIN_TIMEOUT_S, LogPump, cap_bytes, widen_pipe
from .watch import STOP_SIGNAL, MemberWatch, alive, stop_requested

PR_SET_CHILD_SUBREAPER = 36
MAX_ENV_LINE = 4 * 1024 * 1024
MAX_SPEC_BYTES = 4 * 1024 * 1024
SETUP_TIMEOUT_S = 60.0
"""How long the first process waits for the daemon to report the server started (or not)."""
CLEANUP_TIMEOUT_S = 5.0
"""How long the daemon keeps killing and reaping leftovers after the server exited."""

MEMBER_POLL_S = 0.05
"""How often the supervisor checks its session's processes for an end (SIGCHLD wakes it sooner)."""

EXIT_STARTED = 0
EXIT_NOT_STARTED = 1
EXIT_BAD_INPUT = 2
EXIT_NO_SPACE = SUPERVISOR_NO_SPACE
"""Not started because the run directory's disk is full (nothing could be recorded, nothing is left running)."""

_log_fd = -1
_stop_signalled = False
"""Set by ``STOP_SIGNAL``: a kill asked this session to stop (told by signal, so a full disk cannot lose it)."""
_exit_reserve = None
"""The :class:`ExitReserve` set aside for exit.json once the server runs (None: none could be made)."""
EXIT_RESERVE = ".exit.json.reserve"
EXIT_RESERVE_BYTES = 4096


class LaunchError(Exception):
    """A problem with the launch request, reported in exit.json ``error``."""


# ------------------------------------------------------------------ small helpers

def log(message):
    """Append one timestamped line to supervisor.log (never raises)."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%03dZ" % int((now % 1) * 1000)
    line = "%s [%d] %s\n" % (stamp, os.getpid(), str(message).replace("\n", "\\n"))
    try:
        if _log_fd >= 0:
            os.write(_log_fd, line.encode("utf-8", "replace"))
        else:
            sys.stderr.write(line)
    except Exception:
        pass


def exit_record(exit_code=None, sig=None, error=None, oom_before=None, oom_after=None,
                leftovers=(), stopped=False):
    """An ExitRecord as a plain dict (see console.model.ExitRecord)."""
    return {
        "exit_code": exit_code,
        "signal": sig,
        "ended_at": time.time(),
        "stopped_by_operator": bool(stopped),
        "oom_kill_before": oom_before,
        "oom_kill_after": oom_after,
        "leftovers_killed": sorted(set(leftovers)),
        "error": error,
    }


def write_error_exit(run_dir, error, exit_code=None):
    """Record a launch that never ran; never overwrites an existing exit.json. Never raises."""
    log("error: %s" % error)
    path = os.path.join(run_dir, RUN_EXIT)
    if os.path.lexists(path):
        log("exit.json already exists: not overwritten")
        return False
    try:
        atomic_write_json(path, exit_record(exit_code=exit_code, error=error))
        return True
    except Exception as e:  # pragma: no cover - unwritable run dir
        log("cannot write exit.json: %r" % (e,))
        return False


# ------------------------------------------------------------------ input validation

def _clean_str(value, what, allow_empty=False):
    if not isinstance(value, str):
        raise LaunchError("%s must be a string" % what)
    if not allow_empty and not value:
        raise LaunchError("%s must not be empty" % what)
    if "\x00" in value:
        raise LaunchError("%s contains a NUL byte" % what)
    return value


def read_env_line(stream, keep=None):
    """Parse the single ``{"env": {...}}`` line from ``stream`` (a binary file); ``keep["obj"]`` gets the
    whole object when ``keep`` is given."""
    raw = stream.readline(MAX_ENV_LINE + 1)
    if len(raw) > MAX_ENV_LINE:
        raise LaunchError("env line on stdin is longer than %d bytes" % MAX_ENV_LINE)
    if not raw.strip():
        raise LaunchError('no env line on stdin (expected one JSON line {"env": {...}})')
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LaunchError("env line on stdin is not valid UTF-8")
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise LaunchError("env line on stdin is not valid JSON: %s" % e)
    if not isinstance(obj, dict):
        raise LaunchError('env line on stdin must be a JSON object {"env": {...}}')
    if keep is not None:
        keep["obj"] = obj
    env = obj.get("env", {})
    if env is None:
        env = {}
    if not isinstance(env, dict):
        raise LaunchError("env must be an object of name -> string value")
    for key, value in env.items():
        _clean_str(key, "env name")
        if "=" in key:
            raise LaunchError("env name %r contains '='" % key)
        if not isinstance(value, str):
            raise LaunchError("env value of %s must be a string" % key)
        if "\x00" in value:
            raise LaunchError("env value of %s contains a NUL byte" % key)
    return env


def read_launch_line(stream):
    """(env, argv) from the stdin line ``{"env": {...}, "argv": [...]}``: ``argv`` is the real argv (secret
    flag values included), which spec.json holds masked; None when the line has none (an older agent)."""
    seen: Dict[str, Any] = {}
    env = read_env_line(stream, keep=seen)
    argv = seen.get("obj", {}).get("argv")
    if argv is None:
        return env, None
    if not isinstance(argv, list) or not argv:
        raise LaunchError("argv on stdin must be a non-empty list of strings")
    for i, arg in enumerate(argv):
        _clean_str(arg, "argv[%d] on stdin" % i, allow_empty=(i > 0))
    return env, list(argv)



def real_argv(argv, spec_argv):
    """The argv to execute: the one from stdin, which must be spec.json's once its secrets are masked."""
    if mask_argv(argv) != mask_argv(spec_argv):
        raise LaunchError("argv on stdin does not match %s" % RUN_SPEC)
    return argv


def load_spec(run_dir):
    """Read and validate ``RUN_DIR/spec.json``; returns the spec dict with normalised fields."""
    path = os.path.join(run_dir, RUN_SPEC)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except OSError as e:
        raise LaunchError("cannot read %s: %s" % (RUN_SPEC, e.strerror or e))
    if len(raw) > MAX_SPEC_BYTES:
        raise LaunchError("%s is larger than %d bytes" % (RUN_SPEC, MAX_SPEC_BYTES))
    try:
        spec = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise LaunchError("%s is not valid UTF-8" % RUN_SPEC)
    except ValueError as e:
        raise LaunchError("%s is not valid JSON: %s" % (RUN_SPEC, e))
    if not isinstance(spec, dict):
        raise LaunchError("%s must hold a JSON object" % RUN_SPEC)
    argv = spec.get("argv")
    if not isinstance(argv, list) or not argv:
        raise LaunchError("spec argv must be a non-empty list of strings")
    for i, arg in enumerate(argv):
        _clean_str(arg, "spec argv[%d]" % i, allow_empty=(i > 0))
    session_id = _clean_str(spec.get("session_id"), "spec session_id")
    gpus = spec.get("gpus") or []
    if not isinstance(gpus, list):
        raise LaunchError("spec gpus must be a list")
    gpu_names = []
    for g in gpus:
        if isinstance(g, bool) or not isinstance(g, (int, str)):
            raise LaunchError("spec gpus must hold GPU indexes, got %r" % (g,))
        name = str(g)
        if not name or "," in name or "\x00" in name or (isinstance(g, int) and g < 0):
            raise LaunchError("spec gpus holds an invalid GPU %r" % (g,))
        gpu_names.append(name)
    cwd = spec.get("cwd")
    if cwd is not None:
        _clean_str(cwd, "spec cwd")
        if not os.path.isdir(cwd):
            raise LaunchError("spec cwd %s is not a directory" % cwd)
    try:
        log_cap = cap_bytes(spec.get("log_cap_mb"))
    except ValueError as e:
        raise LaunchError("spec %s" % e)
    return {"argv": list(argv), "session_id": session_id, "gpus": gpu_names, "cwd": cwd, "log_cap": log_cap}


def server_environ(base, env, spec, run_dir=None):
    """The server's environment: ours + the given env + CUDA_VISIBLE_DEVICES + session id (+ its run directory)."""
    out = dict(base)
    out.update(env)
    if spec["gpus"]:
        out["CUDA_VISIBLE_DEVICES"] = ",".join(spec["gpus"])
    out[SESSION_ENV] = spec["session_id"]
    if run_dir:
        out[RUN_DIR_ENV] = os.path.abspath(run_dir)
    return out


# ------------------------------------------------------------------ process plumbing

def close_fds_except(keep):
    """Close every open fd >= 3 not in ``keep`` (fds inherited from the caller included)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd >= 3 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def become_subreaper():
    """prctl(PR_SET_CHILD_SUBREAPER, 1); returns an error string or None."""
    try:
        try:
            libc = ctypes.CDLL(None, use_errno=True)  # libc is already mapped into python
            prctl = libc.prctl
        except (OSError, AttributeError):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            prctl = libc.prctl
        if prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return os.strerror(ctypes.get_errno())
    except Exception as e:
        return repr(e)
    return None


def spawn_server(argv, environ, out_fd):
    """Fork and exec the server in its own process group.

    Returns ``(pid, started_at, exec_error)``; ``exec_error`` is None when exec succeeded,
    else a message (the child already exited 127 after writing it to output.log).
    """
    err_r, err_w = os.pipe()  # both close-on-exec: EOF on success, a message on failure
    started_at = time.time()
    pid = os.fork()
    if pid == 0:  # the server-to-be
        try:
            os.close(err_r)
            os.setpgid(0, 0)
            for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE,
                        signal.SIGQUIT, signal.SIGXFSZ, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_fd, 1)
            os.dup2(out_fd, 2)
            try:
                os.execvpe(argv[0], argv, environ)
            except OSError as e:
                reason = e.strerror or str(e)
                msg = "mtpconsole-supervisor: cannot execute %r: %s" % (argv[0], reason)
                os.write(2, (msg + "\n").encode("utf-8", "replace"))
                os.write(err_w, msg.encode("utf-8", "replace"))
        except BaseException as e:
            try:
                os.write(err_w, ("mtpconsole-supervisor: cannot start the server: %r" % (e,)).encode())
            except BaseException:
                pass
        os._exit(127)
    os.close(err_w)
    try:
        os.setpgid(pid, pid)  # also in the parent: no race with a killpg right after fork
    except OSError:
        pass  # EACCES once the child has exec'd: it did it itself
    chunks = []
    while True:
        chunk = os.read(err_r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(err_r)
    message = b"".join(chunks).decode("utf-8", "replace")
    return pid, started_at, (message or None)


def list_procs():
    """{pid: (ppid, pgid, state)} for every process readable in /proc."""
    procs: Dict[int, Tuple[int, int, str]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return procs
    for name in names:
        if not name.isdigit():
            continue
        st = proc_stat(int(name))
        if st is not None:
            procs[int(name)] = (st["ppid"], st["pgid"], st["state"])
    return procs


def has_session_env(pid, marker):
    """True when ``/proc/<pid>/environ`` holds exactly ``marker`` (``NAME=value``)."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return marker in data.split(b"\x00")


def leftover_targets(me, pgid, marker, spare):
    """Live processes left by the server: its group, our descendants, its session env."""
    procs = list_procs()
    children: Dict[int, List[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found = set()
    stack = list(children.get(me, []))
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, []))
    uid = os.getuid()
    for pid, (_, group, _) in procs.items():
        if group == pgid:
            found.add(pid)
        elif pid not in found and pid not in spare:
            try:
                if os.stat("/proc/%d" % pid).st_uid != uid:
                    continue
            except OSError:
                continue
            if has_session_env(pid, marker):
                found.add(pid)
    return set(p for p in found if p not in spare and procs.get(p, (0, 0, "Z"))[2] != "Z")


def record_exit(run_dir, pid, start_ticks, code, sig, role=None, launcher_alive=None, server=False,
                killed_by_supervisor=False):
    """Append a process's exit to exits.jsonl; never raises.

    ``code``/``sig``: known when we reaped it. ``server``: the session's server itself. ``launcher_alive``:
    whether the server still ran when this end was seen. ``killed_by_supervisor``: a leftover we SIGKILLed
    after the server ended (never the first death; see ``watch.first_abnormal_exit``).
    """
    how = "signal" if sig else "exited" if code is not None else "gone"
    try:
        append_json_line(os.path.join(run_dir, RUN_EXITS), {
            "pid": pid, "start_ticks": start_ticks, "at": time.time(), "exit_code": code, "signal": sig,
            "how": how, "role": role, "oom_kill_delta": None,
            "after_stop_request": stop_asked(run_dir),
            "source": "supervisor", "server": bool(server), "launcher_alive": launcher_alive,
            "killed_by_supervisor": bool(killed_by_supervisor)})
    except Exception as e:
        log("cannot append to %s: %r" % (RUN_EXITS, e))


def wait_for_server(server, run_dir=None, session_id=None):
    """Reap every other child until the server exits; returns its (exit_code, signal).

    The server itself is left unreaped (``WNOWAIT``): the caller kills its group first. With a
    ``run_dir``, each orphan reaped on the way and every other member of the session that ends
    (see ``watch.MemberWatch``, polled every ``MEMBER_POLL_S``; SIGCHLD wakes the wait at once) is
    recorded in ``exits.jsonl``.
    """
    members = MemberWatch(run_dir, os.getpid(), server, session_id, log, stop_asked) if run_dir is not None else None
    if members is None:
        return _wait_loop(server, run_dir, None, None)
    # a socket pair, not a pipe: the daemon's only pipes stay the ones it was given (none of the caller's)
    wake_r, wake_w = socket.socketpair()
    wake_w.setblocking(False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a handler, so that the wakeup fd fires
    signal.set_wakeup_fd(wake_w.fileno())
    try:
        result = _wait_loop(server, run_dir, members, wake_r)
        members.poll()  # what ended together with the server
        return result
    finally:
        signal.set_wakeup_fd(-1)  # never a stray byte into a later fd that reuses this number
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        wake_r.close()
        wake_w.close()


def _wait_loop(server, run_dir, members, wake_r):
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT | (os.WNOHANG if members is not None else 0))
        except ChildProcessError:
            raise RuntimeError("lost track of the server (no child left to wait for)")
        if info is None:
            if members is not None:
                members.poll()
                ready, _, _ = select.select([wake_r], [], [], MEMBER_POLL_S)
                if ready:
                    wake_r.recv(4096)
            continue
        if info.si_pid == server:
            if info.si_code == os.CLD_EXITED:
                return info.si_status, None
            return None, info.si_status  # CLD_KILLED / CLD_DUMPED
        ticks = start_ticks_of(info.si_pid)  # still readable: the zombie is not reaped yet
        launcher = alive(server)  # the server is never reaped here, so its pid is not reused
        try:
            _, status = os.waitpid(info.si_pid, 0)
        except ChildProcessError:
            continue
        code, sig = decode_wait_status(status)
        log("reaped orphan %d (exit_code=%s signal=%s)" % (info.si_pid, code, sig))
        if run_dir is not None:
            record_exit(run_dir, info.si_pid, ticks, code, sig, launcher_alive=launcher)


def reap_children(statuses=None):
    """Reap every exited child without blocking (``statuses`` gets pid -> wait status); returns False when we
    have no child left."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        if statuses is not None:
            statuses[pid] = status


def kill_leftovers(pgid, session_id, timeout=CLEANUP_TIMEOUT_S, seen=None):
    """SIGKILL and reap everything the server left behind; returns the pids signalled.

    ``seen`` (a dict) gets ``pid -> [start_ticks, wait status or None]`` of each process signalled (the status
    when we reaped it), so that each can be recorded as a leftover the supervisor killed.
    """
    me = os.getpid()
    marker = ("%s=%s" % (SESSION_ENV, session_id)).encode("utf-8", "surrogateescape")
    spare = set([me, 1])
    parent = os.getppid()
    while parent > 1 and parent not in spare:  # never our own ancestors
        spare.add(parent)
        st = proc_stat(parent)
        parent = st["ppid"] if st else 0
    killed = set()
    seen = {} if seen is None else seen
    statuses: Dict[int, int] = {}
    deadline = time.monotonic() + timeout
    targets = leftover_targets(me, pgid, marker, spare)  # before the group kill: what it kills is ours too
    for pid in targets:
        seen.setdefault(pid, [start_ticks_of(pid), None])
    try:
        os.killpg(pgid, signal.SIGKILL)
        killed.update(targets)
    except OSError:
        pass  # ESRCH: the group is already empty
    while True:
        targets = leftover_targets(me, pgid, marker, spare)
        for pid in targets:
            ticks = start_ticks_of(pid)
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
                seen.setdefault(pid, [ticks, None])
            except OSError:
                pass
        have_children = reap_children(statuses)
        for pid, status in statuses.items():
            if pid in seen:
                seen[pid][1] = status
        if not targets and not have_children:
            break
        if time.monotonic() >= deadline:
            log("cleanup deadline reached; still present: %s" % sorted(targets))
            break
        time.sleep(0.02)
    return killed


def record_leftovers(run_dir, killed, seen):
    """One exits.jsonl line per leftover the supervisor killed (the agent's line of it adds role and GPU)."""
    for pid in sorted(killed):
        ticks, status = seen.get(pid) or [None, None]
        code, sig = decode_wait_status(status)
        record_exit(run_dir, pid, ticks, code, sig, launcher_alive=False, killed_by_supervisor=True)


# ------------------------------------------------------------------ an operator's stop, and its exit record

def _on_stop_signal(signum, frame):
    global _stop_signalled
    _stop_signalled = True


def stop_asked(run_dir):
    """Whether an operator asked this session to stop: told by ``STOP_SIGNAL``, or a whole stop-request.json."""
    return _stop_signalled or stop_requested(run_dir)


class ExitReserve(object):
    """Disk space set aside for exit.json while there is some: a full disk at the end (the server's log, or
    anything else, filled it) still gets the session's exit record. The record is written over this file's
    own blocks (no new one is needed), then the file is renamed to exit.json."""

    def __init__(self, path, fd):
        self.path, self.fd = path, fd

    @classmethod
    def make(cls, run_dir):
        """The reserve of ``run_dir``, or None (logged) when even that much space is not there."""
        path = os.path.join(run_dir, EXIT_RESERVE)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as e:
            log("no space set aside for exit.json: %s" % (e.strerror or e))
            return None
        try:
            view = memoryview(b" " * EXIT_RESERVE_BYTES)  # written, not sparse: the blocks are ours
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as e:
            log("no space set aside for exit.json: %s" % (e.strerror or e))
            cls(path, fd).drop()
            return None
        return cls(path, fd)

    def write(self, run_dir, data):
        """Put ``data`` (at most EXIT_RESERVE_BYTES) in the reserve and rename it to exit.json."""
        done = 0
        while done < len(data):
            done += os.pwrite(self.fd, data[done:], done)
        os.ftruncate(self.fd, len(data))
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        os.rename(self.path, os.path.join(run_dir, RUN_EXIT))
        fsync_dir(run_dir)

    def drop(self):
        """Give the space back (never raises)."""
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1
        try:
            os.unlink(self.path)
        except OSError:
            pass


def set_aside_exit_space(run_dir):
    """Make the reserve exit.json will be written into (see :class:`ExitReserve`)."""
    global _exit_reserve
    _exit_reserve = ExitReserve.make(run_dir)


def write_exit_json(run_dir, record):
    """Write the server's exit record: into the reserve when there is one (so a full disk cannot lose it; a list
    of leftovers too long for it is cut, exits.jsonl has each), else as any atomic JSON file."""
    reserve = _exit_reserve
    if reserve is not None and reserve.fd >= 0:
        fits = record
        data = (json.dumps(fits, sort_keys=True) + "\n").encode("utf-8")
        while len(data) > EXIT_RESERVE_BYTES and fits["leftovers_killed"]:
            fits = dict(fits, leftovers_killed=fits["leftovers_killed"][:len(fits["leftovers_killed"]) // 2])
            data = (json.dumps(fits, sort_keys=True) + "\n").encode("utf-8")
        try:
            if len(data) <= EXIT_RESERVE_BYTES:
                reserve.write(run_dir, data)
                return
        except OSError as e:
            log("cannot write exit.json into its reserve: %s" % (e.strerror or e))
        reserve.drop()
    atomic_write_json(os.path.join(run_dir, RUN_EXIT), record)


# ------------------------------------------------------------------ the daemon

def _daemon_setup(run_dir, spec, log_fd, out_fd, notify_w):
    """Turn the current (grandchild) process into the detached supervisor."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(STOP_SIGNAL, _on_stop_signal)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    close_fds_except(set([log_fd, out_fd, notify_w]))
    problem = become_subreaper()
    if problem:
        log("prctl(PR_SET_CHILD_SUBREAPER) failed: %s (orphaned workers go to init)" % problem)
    else:
        log("child subreaper set")
    os.chdir(spec["cwd"] or run_dir)
    log("detached: sid=%d pgid=%d cwd=%s" % (os.getsid(0), os.getpgid(0), os.getcwd()))


def _notify(notify_w, code):
    """Tell the first process the launch is recorded (one byte), then let it go."""
    if notify_w < 0:
        return -1
    try:
        os.write(notify_w, bytes([code]))
    except OSError:
        pass
    try:
        os.close(notify_w)
    except OSError:
        pass
    return -1


def run_daemon(run_dir, spec, env, log_fd, out_fd, notify_w):
    """The supervisor proper. Always ends the process with ``os._exit``."""
    server = None
    pgid = None
    pump = None
    exit_written = False
    try:
        _daemon_setup(run_dir, spec, log_fd, out_fd, notify_w)
        oom_before = read_oom_kill()
        log("oom_kill before: %s" % oom_before)
        environ = server_environ(os.environ, env, spec, run_dir)
        log("starting %s (env names: %s; gpus: %s)" % (
            json.dumps(mask_argv(spec["argv"])), ",".join(sorted(env)) or "-", ",".join(spec["gpus"]) or "-"))
        if spec.get("log_cap"):  # through a pipe we drain and rotate (see logcap); else the file itself
            pipe_r, pipe_w = os.pipe()  # close-on-exec: the server gets the write end as fds 1 and 2 only
            widen_pipe(pipe_w)
            server, started_at, exec_error = spawn_server(spec["argv"], environ, pipe_w)
            os.close(pipe_w)
            pump = LogPump(run_dir, pipe_r, out_fd, spec["log_cap"], log)
            pump.start()
            log("%s capped at %d bytes per segment (output.log.1 kept, head in output.log.head)" % (
                RUN_LOG, spec["log_cap"]))
        else:
            server, started_at, exec_error = spawn_server(spec["argv"], environ, out_fd)
            os.close(out_fd)
        out_fd = -1
        pgid = server
        if exec_error:
            _, status = os.waitpid(server, 0)
            code, sig = decode_wait_status(status)
            log("exec failed: %s" % exec_error)
            if pump is not None:
                pump.finish()
            atomic_write_json(os.path.join(run_dir, RUN_EXIT), exit_record(
                exit_code=code, sig=sig, error=exec_error.replace("mtpconsole-supervisor: ", "", 1),
                oom_before=oom_before, oom_after=read_oom_kill()))
            exit_written = True
            log("exit.json written")
            notify_w = _notify(notify_w, EXIT_NOT_STARTED)
            os._exit(0)
        record = {
            "supervisor_pid": os.getpid(),
            "supervisor_start_ticks": start_ticks_of("self"),
            "pid": server,
            "pgid": pgid,
            "start_ticks": start_ticks_of(server),
            "started_at": started_at,
            "boot_id": boot_id(),
        }
        atomic_write_json(os.path.join(run_dir, RUN_RECORD), record)
        log("record.json written: pid=%d pgid=%d start_ticks=%s" % (server, pgid, record["start_ticks"]))
        notify_w = _notify(notify_w, EXIT_STARTED)
        set_aside_exit_space(run_dir)

        code, sig = wait_for_server(server, run_dir, spec["session_id"])
        record_exit(run_dir, server, record["start_ticks"], code, sig, role="launcher", server=True)
        log("server exited: exit_code=%s signal=%s" % (code, sig))
        # the server is still an unreaped zombie here, so its pid (= the pgid) cannot be
        # reused by an unrelated process before the group is killed
        seen: Dict[int, List[Any]] = {}
        killed = kill_leftovers(pgid, spec["session_id"], seen=seen)
        killed.discard(server)
        if killed:
            log("killed leftovers: %s" % sorted(killed))
            record_leftovers(run_dir, killed, seen)
        if pump is not None:  # every line the server (and its workers) wrote is on disk before exit.json
            pump.finish(DRAIN_TIMEOUT_S)
        oom_after = read_oom_kill()
        stopped = stop_asked(run_dir)
        write_exit_json(run_dir, exit_record(
            exit_code=code, sig=sig, oom_before=oom_before, oom_after=oom_after,
            leftovers=killed, stopped=stopped))
        exit_written = True
        log("exit.json written (oom_kill after: %s, stopped by operator: %s%s)" % (oom_after, stopped, (
            ", told by signal" if _stop_signalled else ", by %s" % RUN_STOP_REQUEST) if stopped else ""))
        os._exit(0)
    except BaseException as e:
        try:
            log("supervisor failure: %r" % (e,))
            leftovers = ()
            if server is not None and pgid is not None:
                leftovers = kill_leftovers(pgid, spec["session_id"])
            if leftovers:
                log("killed after failure: %s" % sorted(leftovers))
            if pump is not None:
                pump.finish(1.0)
            if _exit_reserve is not None:
                _exit_reserve.drop()
            if not exit_written:
                write_error_exit(run_dir, "supervisor failure: %r" % (e,))
            _notify(notify_w, EXIT_NO_SPACE if disk_full(e) and not exit_written else EXIT_NOT_STARTED)
        finally:
            os._exit(1)


# ------------------------------------------------------------------ entry point

def _wait_for_daemon(notify_r, child):
    """First process: wait for the daemon's one-byte report; returns our exit status."""
    deadline = time.monotonic() + SETUP_TIMEOUT_S
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            sys.stderr.write("mtpconsole-supervisor: no report from the supervisor after %ds\n"
                             % SETUP_TIMEOUT_S)
            return EXIT_NOT_STARTED
        ready, _, _ = select.select([notify_r], [], [], left)
        if ready:
            data = os.read(notify_r, 1)
            break
    try:
        os.waitpid(child, 0)
    except ChildProcessError:
        pass
    if not data:
        return EXIT_NOT_STARTED
    return data[0]


def main(argv=None):
    """Run the supervisor for ``RUN_DIR``; returns the first process's exit status.

    0: the server runs and record.json is written; 1: it could not be started (exit.json
    says why); 2: bad usage or input (exit.json says why when the run dir is writable); 3: the run
    directory's disk is full (``EXIT_NO_SPACE``: nothing recorded, nothing left running).
    Only the first process returns: the forked processes end with ``os._exit``.
    """
    global _log_fd
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 1 or not args[0] or args[0].startswith("-"):
        sys.stderr.write("usage: supervisor.py RUN_DIR  (stdin: one JSON line {\"env\": {...}})\n")
        return EXIT_BAD_INPUT
    run_dir = os.path.abspath(args[0])
    if not os.path.isdir(run_dir):
        sys.stderr.write("mtpconsole-supervisor: run dir %s does not exist\n" % run_dir)
        return EXIT_BAD_INPUT
    try:
        _log_fd = os.open(os.path.join(run_dir, RUN_SUPERVISOR_LOG),
                          os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        sys.stderr.write("mtpconsole-supervisor: cannot open %s: %s\n" % (RUN_SUPERVISOR_LOG, e))
        return EXIT_NO_SPACE if disk_full(e) else EXIT_BAD_INPUT
    log("supervisor for %s (python %s)" % (run_dir, sys.version.split()[0]))
    try:
        env, argv = read_launch_line(sys.stdin.buffer)
        spec = load_spec(run_dir)
        if argv is not None:
            spec["argv"] = real_argv(argv, spec["argv"])
        try:
            out_fd = os.open(os.path.join(run_dir, RUN_LOG),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        except FileExistsError:
            raise LaunchError("%s already exists: refusing to reuse a log" % RUN_LOG)
        except OSError as e:
            if disk_full(e):
                sys.stderr.write("mtpconsole-supervisor: cannot create %s: %s\n" % (RUN_LOG, e.strerror or e))
                return EXIT_NO_SPACE
            raise LaunchError("cannot create %s: %s" % (RUN_LOG, e.strerror or e))
    except LaunchError as e:
        write_error_exit(run_dir, str(e))
        sys.stderr.write("mtpconsole-supervisor: %s\n" % e)
        return EXIT_BAD_INPUT
    except Exception as e:
        write_error_exit(run_dir, "supervisor failure: %r" % (e,))
        sys.stderr.write("mtpconsole-supervisor: %r\n" % (e,))
        return EXIT_BAD_INPUT
    log("%s created; session %s" % (RUN_LOG, spec["session_id"]))

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    notify_r, notify_w = os.pipe()
    try:
        child = os.fork()
    except OSError as e:
        write_error_exit(run_dir, "cannot fork: %s" % e)
        return EXIT_NOT_STARTED
    if child == 0:  # intermediate: new session, fork the daemon, vanish
        try:
            os.close(notify_r)
            os.setsid()
            if os.fork() == 0:
                run_daemon(run_dir, spec, env, _log_fd, out_fd, notify_w)
        except BaseException as e:
            log("cannot detach: %r" % (e,))
            write_error_exit(run_dir, "supervisor cannot detach: %r" % (e,))
        os._exit(0)
    os.close(notify_w)
    os.close(out_fd)
    status = _wait_for_daemon(notify_r, child)
    os.close(notify_r)
    if status != EXIT_STARTED and not os.path.exists(os.path.join(run_dir, RUN_EXIT)) \
            and not os.path.exists(os.path.join(run_dir, RUN_RECORD)):
        write_error_exit(run_dir, "supervisor died before the server was started")
    return status


if __name__ == "__main__":
    sys.exit(main())
