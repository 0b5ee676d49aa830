"""Trust nothing in a run directory: bounded reads, typed records, identities confirmed before use.

Stdlib only, Python >= 3.8; shipped with the agent. Everything under the runs directory may have been
written by hand, by an older console, by a crashed supervisor or by someone hostile, so:

- a session directory is a real directory (never a symlink) named like a session id;
- its files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and must be regular files (a FIFO or a
  symlink never blocks or redirects the agent), read up to a size cap, parsed with the depth of
  nesting bounded, and type-checked field by field: a bad one makes the session *broken* (with the
  reason) and never hides the host's other sessions or kills the agent;
- a recorded process (the supervisor, the server) counts as the session's only when its pid, its
  start time and the host's boot id all match ``record.json`` and it carries the session's own mark
  (the supervisor's command line names the run directory; the server's environment holds
  ``MTPCONSOLE_SESSION=<id>``). Otherwise the record is *stale* and nothing is attributed to it.
"""

import json
import math
import os
import re
import stat
from typing import Dict, List

from .hostlib import SESSION_ENV, SESSION_ID_RE, proc_cmdline, proc_environ, proc_stat, proc_uid

MAX_SPEC_BYTES = 4 << 20
"""spec.json holds argv (which may be long: see the 'Argument list too long' test), never more than this."""
MAX_SMALL_JSON_BYTES = 64 << 10
"""record.json, exit.json, ack.json, stop-request.json: a few hundred bytes when real."""
MAX_JSON_DEPTH = 32
"""Deeper nesting than this is refused before parsing (a real record is 2 or 3 levels deep)."""


class Broken(Exception):
    """A run-directory file that cannot be trusted; the message says why (shown to the operator)."""


def open_regular(path, flags=os.O_RDONLY):
    """An fd on ``path`` that is a regular file reached without following a symlink, opened without
    blocking (a FIFO would otherwise hang ``open``). Raises OSError, or Broken for another kind of file."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Broken("%s is not a regular file" % os.path.basename(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_capped(path, limit):
    """The bytes of a regular file (see :func:`open_regular`), at most ``limit``; None when absent."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == 40:  # ELOOP: the last component is a symlink
            raise Broken("%s is a symlink" % os.path.basename(path))
        raise Broken("cannot open %s: %s" % (os.path.basename(path), e.strerror or e))
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise Broken("%s is too large (%d bytes, the limit is %d)" % (os.path.basename(path), size, limit))
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise Broken("%s is too large (over %d bytes)" % (os.path.basename(path), limit))
        return b"".join(chunks)
    except OSError as e:
        raise Broken("cannot read %s: %s" % (os.path.basename(path), e.strerror or e))
    finally:
        os.close(fd)


def json_depth_ok(raw, limit=MAX_JSON_DEPTH):
    """True when the brackets of JSON text ``raw`` (bytes) never nest deeper than ``limit``."""
    depth = 0
    in_str = esc = False
    for b in raw:
        if in_str:
            if esc:
                esc = False
            elif b == 0x5C:  # backslash
                esc = True
            elif b == 0x22:
                in_str = False
        elif b == 0x22:
            in_str = True
        elif b in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return False
        elif b in (0x5D, 0x7D):
            depth -= 1
    return True


def load_file(path, limit=MAX_SMALL_JSON_BYTES):
    """The JSON value of a run-directory file; None when absent; Broken when it cannot be trusted."""
    raw = read_capped(path, limit)
    if raw is None:
        return None
    name = os.path.basename(path)
    if not json_depth_ok(raw):
        raise Broken("%s nests deeper than %d levels" % (name, MAX_JSON_DEPTH))
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise Broken("%s is not UTF-8" % name)
    except (ValueError, RecursionError) as e:
        raise Broken("%s is not valid JSON: %s" % (name, str(e)[:120]))


# ------------------------------------------------------------------ types

def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v):
    """A JSON number, finite (``NaN``/``Infinity``, which Python's json reads, are no time or count)."""
    return (isinstance(v, (int, float))) and not isinstance(v, bool) and math.isfinite(v)


def _opt(check):
    return lambda v: v is None or check(v)


def _str(v):
    return isinstance(v, str)


def _strs(v):
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _ints(v):
    return isinstance(v, list) and all(_int(x) for x in v)


SPEC_FIELDS = {
    "session_id": _str, "argv": lambda v: _strs(v) and len(v) > 0, "env_names": _strs, "gpus": _ints,
    "port": _opt(_int), "cwd": _opt(_str), "launched_by": _opt(_str), "console_version": _opt(_str),
    "created_at": _opt(_num), "profile": _opt(_str), "replaces": _opt(_str), "log_cap_mb": _opt(_num),
    "group": _opt(_str), "node_rank": _opt(_int), "nnodes": _opt(_int), "group_hosts": _opt(_strs),
    "group_kill_on_failure": _opt(lambda v: isinstance(v, bool)),
}
SPEC_REQUIRED = ("session_id", "argv")
RECORD_FIELDS = {
    "supervisor_pid": _int, "supervisor_start_ticks": _opt(_int), "pid": _int, "pgid": _int,
    "start_ticks": _int, "started_at": _num, "boot_id": _opt(_str),
}
RECORD_REQUIRED = ("supervisor_pid", "pid", "pgid", "start_ticks", "started_at")
EXIT_FIELDS = {
    "exit_code": _opt(_int), "signal": _opt(_int), "ended_at": _num, "stopped_by_operator": lambda v: isinstance(
        v, bool), "oom_kill_before": _opt(_int), "oom_kill_after": _opt(_int), "leftovers_killed": _ints,
    "error": _opt(_str),
}
EXIT_REQUIRED = ("ended_at",)


def check_fields(name, obj, fields, required):
    """``obj`` when it is an object whose known fields have their types; Broken naming the first problem."""
    if not isinstance(obj, dict):
        raise Broken("%s must hold a JSON object, not %s" % (name, type(obj).__name__))
    for key in required:
        if key not in obj:
            raise Broken("%s has no %r" % (name, key))
    for key, check in fields.items():
        if key in obj and not check(obj[key]):
            if isinstance(obj[key], float) and not math.isfinite(obj[key]):
                raise Broken("%s: %r is not a finite number (%r)" % (name, key, obj[key]))
            raise Broken("%s: %r has the wrong type (%s)" % (name, key, type(obj[key]).__name__))
    return obj


def load_checked(path, fields, required, limit=MAX_SMALL_JSON_BYTES):
    """A run-directory record, type-checked (None when absent; Broken when it cannot be trusted)."""
    obj = load_file(path, limit)
    return None if obj is None else check_fields(os.path.basename(path), obj, fields, required)


# ------------------------------------------------------------------ directories

def session_dir_problem(runs_dir, name):
    """Why ``runs_dir/name`` is not a session directory to read (None when it is one).

    Dot names (the lock, the shipped modules) and names that are not session ids are not sessions; a
    symlink or anything but a directory is never followed.
    """
    if name.startswith(".") or not SESSION_ID_RE.match(name):
        return "not a session id"
    try:
        st = os.lstat(os.path.join(runs_dir, name))
    except OSError as e:
        return e.strerror or str(e)
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    return None


def real_session_dir(runs_dir, session_id):
    """The run directory of ``session_id`` when it is a real directory (OSError otherwise)."""
    problem = session_dir_problem(runs_dir, session_id)
    if problem:
        raise OSError("run directory %s: %s" % (session_id, problem))
    return os.path.join(runs_dir, session_id)


# ------------------------------------------------------------------ identity

def _alive_as(pid, start_ticks):
    if not _int(pid) or pid <= 1 or not _int(start_ticks):
        return False
    st = proc_stat(pid)
    return st is not None and st["state"] not in ("Z", "X") and st["start_ticks"] == start_ticks


def supervisor_is(rec, run_dir):
    """True when record.json's supervisor (pid, start time) is alive and is the supervisor of ``run_dir``."""
    pid = rec.get("supervisor_pid")
    if not _alive_as(pid, rec.get("supervisor_start_ticks")):
        return False
    argv = proc_cmdline(pid) or []
    return bool(argv) and os.path.realpath(argv[-1]) == os.path.realpath(run_dir)


def server_is(rec, session_id):
    """True when record.json's server (pid, start time) is alive and carries this session's mark."""
    pid = rec.get("pid")
    if not _alive_as(pid, rec.get("start_ticks")):
        return False
    env = proc_environ(pid, (SESSION_ENV,))
    return env is not None and env.get(SESSION_ENV) == session_id


def _live_pids():
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st is not None and st["state"] not in ("Z", "X"):
                yield int(name)


def _names_run_dir(argv, wanted):
    """The run directory (of ``wanted``: realpath -> itself) a supervisor's command line names, or None."""
    if len(argv) < 3 or argv[1] != "-c" or os.path.basename(argv[-1].rstrip("/")) not in wanted["names"]:
        return None
    return wanted["dirs"].get(os.path.realpath(argv[-1]))


def live_supervisors(run_dirs, uid=None):
    """{run dir: [pid, ...]} for those of ``run_dirs`` whose supervisor still runs: a live process (of ``uid``
    when given) whose command line is the supervisor's (``python -c BOOT LIB_ROOT RUN_DIR``, see
    ``launch.supervisor_argv``) naming that directory. One walk over /proc for them all; a run directory
    without a record has no other trace of its supervisor."""
    wanted = {"dirs": dict((os.path.realpath(d), d) for d in run_dirs),
              "names": set(os.path.basename(d.rstrip("/")) for d in run_dirs)}
    out: Dict[str, List[int]] = {}
    if not run_dirs:
        return out
    for pid in _live_pids():
        if uid is not None and proc_uid(pid) != uid:
            continue
        d = _names_run_dir(proc_cmdline(pid) or [], wanted)
        if d is not None:
            out.setdefault(d, []).append(pid)
    return out


def session_pids(run_dir, session_id):
    """Pids of every live process of the session, whoever runs it: its supervisor (see
    :func:`live_supervisors`) and each process whose environment carries ``MTPCONSOLE_SESSION=<id>`` (the server,
    its workers, orphans). What must be gone before a run directory may be removed."""
    wanted = {"dirs": {os.path.realpath(run_dir): run_dir}, "names": set([os.path.basename(run_dir.rstrip("/"))])}
    out = []
    for pid in _live_pids():
        if pid == os.getpid():
            continue
        if _names_run_dir(proc_cmdline(pid) or [], wanted) is not None:
            out.append(pid)
            continue
        env = proc_environ(pid, (SESSION_ENV,))
        if env is not None and env.get(SESSION_ENV) == session_id:
            out.append(pid)
    return sorted(out)


def confirm_record(rec, run_dir, session_id, boot):
    """(server confirmed, supervisor confirmed, why the record is stale or None).

    ``boot`` is this host's boot id now. A record written under another boot id names processes of a
    previous boot: nothing it names is the session's, whatever runs under those pids today.
    """
    if not rec:
        return False, False, None
    if boot and rec.get("boot_id") != boot:
        return False, False, "host rebooted since the launch (the record's boot id is %s)" % (
            rec.get("boot_id") or "missing")
    server = server_is(rec, session_id)
    supervisor = supervisor_is(rec, run_dir)
    if server or supervisor:
        return server, supervisor, None
    taken = [what for what, pid in (("supervisor", rec.get("supervisor_pid")), ("server", rec.get("pid")))
             if _int(pid) and (pid <= 1 or proc_stat(pid) is not None)]
    if taken:
        return False, False, "record stale: the recorded %s pid now belongs to another process" % (
            " and ".join(taken))
    return False, False, None


def write_new_json(path, obj):
    """Create ``path`` holding ``obj`` (0600) unless something is there already (a file, or a symlink
    planted to redirect the write: ``O_EXCL`` never follows one). Returns True when written."""
    data = (json.dumps(obj, sort_keys=True) + "\n").encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return True


def expand_runs_dir(path):
    """The runs directory with ``$VAR``/``${VAR}`` and ``~`` expanded as this host's shell would; a variable
    the host does not set is an error (never a directory literally named ``$VAR``)."""
    out = os.path.expanduser(os.path.expandvars(path))
    if re.search(r"\$(\w+|\{[^}]*\})", out):  # what expandvars left: a variable this host does not set
        raise ValueError("runs_dir %r names an environment variable this host does not set" % path)
    return out
