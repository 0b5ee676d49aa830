"""Host-side basics shared by the agent and the supervisor: clock, /proc readers, run-dir layout, JSON files.

Stdlib only, Python >= 3.8, no side effects on import. Shipped to the host with the agent (see
``shipboot.py``); imported by the console as ``console.host.hostlib`` for the same constants.
Every fact here has exactly one definition: the agent, the supervisor and the console import it.
"""

import errno
import json
import os
import pwd
import re
import socket
import time
from functools import lru_cache
from typing import Dict

AGENT_VERSION = 2
"""Bumped when the wire protocol or the shipped module set changes incompatibly."""

SESSION_ENV = "MTPCONSOLE_SESSION"
"""Set in the server's environment so its processes (and orphaned workers) can be traced back."""
RUN_DIR_ENV = "MTPCONSOLE_RUN_DIR"
"""Set beside ``SESSION_ENV``: the session's run directory, so an agent serving another runs directory (another
console's, another config's) can still find the session a process belongs to and read whether it has ended."""
SIM_DIR_ENV = "MTPCONSOLE_SIM_DIR"
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", SESSION_ENV, RUN_DIR_ENV, SIM_DIR_ENV)
"""The environment variables the agent reads from server processes (never any other)."""

# Run directory (``<runs_dir>/<session_id>/``); see protocol.py for what each file holds.
RUN_SPEC = "spec.json"
RUN_RECORD = "record.json"
RUN_LOG = "output.log"
RUN_LOG_PREV = "output.log.1"
"""With a log cap (``log_cap_mb``): the segment before ``output.log`` (older ones are dropped)."""
RUN_LOG_HEAD = "output.log.head"
"""With a log cap: the session's first ~64 KiB (start-up lines, server_args), written at the first rotation."""
RUN_SUPERVISOR_LOG = "supervisor.log"
RUN_STOP_REQUEST = "stop-request.json"
RUN_EXIT = "exit.json"
RUN_EXITS = "exits.jsonl"
"""One JSON line per process of the session that ended (pid, role, GPU, code or signal, oom_kill delta)."""
RUN_ACK = "ack.json"
"""Written by the agent's ``ack`` op: an operator acknowledged the ended session ({at, by})."""

RUNS_LOCK = ".launch.lock"
"""The runs directory's launch lock (``flock``): held by a launch from its preflight until its supervisor has
recorded the server (or failed), and by the ``prune`` op."""
RECORD_TIMEOUT_S = 90.0
"""A launch writes ``record.json`` within this long of its run directory's last change (the supervisor's first
process gives up after 60 s, the agent waits for it 30 s): a run directory still without a record after that,
or whose supervisor is gone, is broken, never LAUNCHING."""
SUPERVISOR_NO_SPACE = 3
"""The supervisor's exit status when the run directory's filesystem is full (no space, or over quota): nothing
was started and nothing is left running (0: started; 1: not started, exit.json says why; 2: bad input)."""

SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
"""What a session id may be (also a directory name under the runs dir): nothing else reaches a path."""

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_KIB = (os.sysconf("SC_PAGE_SIZE") // 1024) if hasattr(os, "sysconf") else 4


def now():
    """Wall-clock time in seconds (one clock for every timestamp the host reports)."""
    return time.time()


# ------------------------------------------------------------------ /proc readers

def read_text(path, limit=1 << 20):
    """Up to ``limit`` bytes of a file, decoded as UTF-8 with replacement."""
    with open(path, "rb") as f:
        return f.read(limit).decode("utf-8", "replace")


def proc_stat(pid):
    """Parse /proc/<pid>/stat -> dict(comm, ppid, pgid, sid, state, start_ticks, rss_kib) or None.

    ``pid`` may be an int or ``"self"``.
    """
    try:
        with open("/proc/%s/stat" % pid, "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    rp = raw.rfind(")")
    if rp < 0:
        return None
    fields = raw[rp + 2:].split()
    try:
        return {
            "comm": raw[raw.find("(") + 1:rp], "state": fields[0], "ppid": int(fields[1]), "pgid": int(fields[2]),
            "sid": int(fields[3]), "start_ticks": int(fields[19]),
            "rss_kib": int(fields[21]) * PAGE_KIB,
            # field 52: a zombie's wait status (0 while it runs), readable until its parent reaps it
            "wait_status": int(fields[49]) if len(fields) > 49 else None,
        }
    except (IndexError, ValueError):
        return None


def decode_wait_status(status):
    """(exit_code, signal) from a raw wait status (Python 3.8 has no waitstatus_to_exitcode)."""
    if status is None:
        return None, None
    if status & 0x7F:
        return None, status & 0x7F
    return (status >> 8) & 0xFF, None


def start_ticks_of(pid):
    """Start time of a process in clock ticks since boot (its identity with the pid), or None."""
    st = proc_stat(pid)
    return None if st is None else st["start_ticks"]


def proc_alive(pid, start_ticks=None):
    """Alive means /proc/<pid>/stat exists, is not a zombie, and (if given) the start time matches."""
    st = proc_stat(pid)
    if st is None or st["state"] in ("Z", "X"):
        return False
    return start_ticks is None or st["start_ticks"] == start_ticks


def proc_cmdline(pid):
    """A process's argv from /proc/<pid>/cmdline (None when gone or unreadable).

    A process that rewrote its title in place (SGLang's ``sglang::scheduler``) leaves the rest of
    its old argv area as empty strings: trailing empty arguments are dropped.
    """
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            raw = f.read(256 * 1024)
    except OSError:
        return None
    parts = raw.split(b"\0")
    while parts and parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", "replace") for p in parts]


def proc_comm(pid):
    """The process's short name (/proc/<pid>/comm), or None (another namespace, gone)."""
    try:
        return read_text("/proc/%d/comm" % pid, 256).strip() or None
    except OSError:
        return None


def proc_environ(pid, names):
    """Selected variables from /proc/<pid>/environ; None when unreadable or overwritten.

    A title longer than the original argv (Python's setproctitle, as SGLang's workers use it) is written over
    the environ area: the file then holds only NUL bytes, and so does a process caught in exec. Both read as
    None (unknown), never as an empty environment.
    """
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            raw = f.read(1 << 20)
    except OSError:
        return None
    if b"=" not in raw:
        return None
    out = {}
    for item in raw.split(b"\0"):
        k, _, v = item.partition(b"=")
        key = k.decode("utf-8", "replace")
        if key in names:
            out[key] = v.decode("utf-8", "replace")
    return out


def proc_uid(pid):
    """The owner uid of /proc/<pid>, or None."""
    try:
        return os.stat("/proc/%d" % pid).st_uid
    except OSError:
        return None


_user_cache: Dict[int, str] = {}


def user_name(uid):
    """The login name of ``uid`` (cached; the number as text when unknown)."""
    if uid is None:
        return None
    if uid not in _user_cache:
        try:
            _user_cache[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _user_cache[uid] = str(uid)
    return _user_cache[uid]


def read_oom_kill():
    """The ``oom_kill`` counter of ``/proc/vmstat``, or None when unreadable."""
    try:
        for line in read_text("/proc/vmstat").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "oom_kill":
                return int(parts[1])
    except (OSError, ValueError):
        return None
    return None


@lru_cache(maxsize=1)
def boot_time():
    """When the host booted (epoch seconds, ``btime`` of /proc/stat; read once), or None when unreadable."""
    try:
        for line in read_text("/proc/stat").splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_started_at(start_ticks):
    """A process's start (epoch seconds, host clock) from its start ticks, or None when the boot time is unknown."""
    bt = boot_time()
    return None if bt is None or start_ticks is None else round(bt + float(start_ticks) / CLK_TCK, 2)


def boot_id():
    """The kernel boot id, or None."""
    try:
        return read_text("/proc/sys/kernel/random/boot_id").strip() or None
    except OSError:
        return None


# ------------------------------------------------------------------ sockets

def listening_ports():
    """Map port -> socket inode for TCP sockets in LISTEN state (IPv4 and IPv6)."""
    out: Dict[int, int] = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = read_text(path).splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A":
                try:
                    out.setdefault(int(f[1].rsplit(":", 1)[1], 16), int(f[9]))
                except ValueError:
                    pass
    return out


def pid_of_socket_inode(inode):
    """The pid holding socket ``inode`` open (first found), or None."""
    target = "socket:[%d]" % inode
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % name):
                try:
                    if os.readlink("/proc/%s/fd/%s" % (name, fd)) == target:
                        return int(name)
                except OSError:
                    continue
        except OSError:
            continue
    return None


def port_open(port, timeout=0.5):
    """True when something accepts TCP on 127.0.0.1 or ::1 at ``port``."""
    for family, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect((addr, port))
            return True
        except OSError:
            continue
        finally:
            s.close()
    return False


# ------------------------------------------------------------------ JSON files

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
"""A write refused because the filesystem is full, or the user's quota is."""


def disk_full(e):
    """True when exception ``e`` is a write refused for want of space (ENOSPC, EDQUOT)."""
    return isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS


def no_space_text(where, e=None):
    """``no space left on WHERE`` (``disk quota exceeded on WHERE`` for EDQUOT): the one wording of a full disk."""
    if isinstance(e, OSError) and e.errno == errno.EDQUOT:
        return "disk quota exceeded on %s" % where
    return "no space left on %s" % where


def atomic_write_json(path, obj):
    """Write ``obj`` as JSON to ``path`` atomically and durably: temp file, fsync, rename, fsync dir.

    On failure (a full disk: ENOSPC at the write, the fsync or the rename) the temp file is removed and the
    error raised: nothing half-written is left, and ``path`` keeps what it held."""
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, ".%s.tmp.%d" % (os.path.basename(path), os.getpid()))
    data = (json.dumps(obj, sort_keys=True) + "\n").encode("utf-8")
    try:
        os.unlink(tmp)  # a leftover (or a planted symlink) is replaced, never written through
    except OSError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(directory)


def fsync_dir(directory):
    """Make a rename or a new name in ``directory`` durable (best effort: never raises)."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def append_json_line(path, obj):
    """Append ``obj`` as one JSON line (a single ``write`` on an O_APPEND fd, so lines never interleave)."""
    data = (json.dumps(obj, sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def load_json(path):
    """A JSON file's value, or None when missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_json_lines(path, limit=4 << 20):
    """Every well-formed JSON object line of ``path`` (a torn last line is skipped); [] when missing."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit)
    except OSError:
        return []
    out = []
    for line in raw.split(b"\n"):
        try:
            obj = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


ERROR_KINDS = ("failed", "bad_request", "unknown_op", "not_found", "denied", "no_such_process", "refused",
               "not_ended", "timed_out")
"""The machine-readable ``kind`` of an error reply (its ``error`` stays the operator's text): ``failed``
(anything else), ``bad_request`` (bad arguments or ids), ``unknown_op``, ``not_found`` (no such file,
session, log or command), ``denied`` (permission), ``no_such_process`` (the target is already gone),
``refused`` (the agent will not do it: identity changed, a check failed), ``not_ended`` (an ``ack`` of a
live session), ``timed_out`` (a ``run`` command ran out of time)."""


class OpError(Exception):
    """An agent op failed in a way the operator should read as is; ``kind`` is one of ERROR_KINDS."""

    def __init__(self, message, kind="failed"):
        Exception.__init__(self, message)
        self.kind = kind if kind in ERROR_KINDS else "failed"
