"""A hand-started (foreign) server's own output: its stdout file, read through ``/proc/<pid>/fd/1``.

Stdlib only, Python >= 3.8; shipped with the agent. Only a regular file is read (``nohup … > server.log``):
a pipe, a terminal or a socket is never read (reading one could block, or steal what its reader waits for).
The process is checked by (pid, start time) before and after the open, and the file opened must be the one
the descriptor named (device and inode), so what is read is that process's output. One bounded read: the
last ``tail_bytes`` (at most :data:`MAX_TAIL_BYTES`), its partial first line dropped.
"""

import os
import stat

from .hostlib import OpError, proc_stat

MAX_TAIL_BYTES = 8 << 20
"""The most one ``foreign_output`` reads."""

_KINDS = ((stat.S_ISFIFO, "pipe"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character special file"),
          (stat.S_ISDIR, "directory"), (stat.S_ISBLK, "block special file"))


def file_kind(mode):
    """What a non-regular file is, in words."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "special file"


def _live(pid, start_ticks):
    """``proc_stat`` of ``pid`` when it runs and is the process of ``start_ticks`` (None: any), else None."""
    st = proc_stat(pid)
    if st is None or st["state"] in ("Z", "X") or (start_ticks is not None and st["start_ticks"] != int(start_ticks)):
        return None
    return st


def _pread_all(fd, n, offset):
    chunks, got = [], 0
    while got < n:
        b = os.pread(fd, n - got, offset + got)
        if not b:
            break
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def _gone(pid):
    return OpError("pid %d is gone (or is another process now)" % pid, "no_such_process")


def _target(pid, fd_path):
    """(stat of the file the descriptor names, its path): OpError when there is none or it is not readable."""
    try:
        return os.stat(fd_path), os.readlink(fd_path)
    except FileNotFoundError:
        raise OpError("pid %d has no stdout (or is gone)" % pid, "not_found")
    except PermissionError:
        raise OpError("the stdout of pid %d is not readable by the agent's user" % pid, "denied")
    except OSError as e:
        raise OpError("the stdout of pid %d cannot be read: %s" % (pid, e.strerror or e))


def foreign_output(pid, start_ticks=None, tail_bytes=256 * 1024):
    """The ``foreign_output`` op: ``{pid, start_ticks, path, size, mtime, offset, data}`` of the stdout file of
    ``pid`` (checked against ``start_ticks`` when given). OpError ``no_such_process`` when the process is gone or
    another one, ``refused`` when its stdout is not a regular file (nothing is read then)."""
    if pid <= 1:
        raise OpError("bad pid %r" % pid, "bad_request")
    st = _live(pid, start_ticks)
    if st is None:
        raise _gone(pid)
    fd_path = "/proc/%d/fd/1" % pid
    target, path = _target(pid, fd_path)
    if not stat.S_ISREG(target.st_mode):
        raise OpError("the stdout of pid %d is a %s, not a file: nothing to read" % (pid, file_kind(target.st_mode)),
                      "refused")
    try:
        fd = os.open(fd_path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except PermissionError:
        raise OpError("the stdout of pid %d is not readable by the agent's user" % pid, "denied")
    except OSError as e:
        raise OpError("cannot open the stdout of pid %d: %s" % (pid, e.strerror or e))
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (target.st_dev, target.st_ino):
            raise OpError("the stdout of pid %d changed while it was opened: nothing read" % pid, "refused")
        if _live(pid, st["start_ticks"]) is None:
            raise _gone(pid)
        want = max(0, min(int(tail_bytes), MAX_TAIL_BYTES))
        start = max(0, now.st_size - want)
        data = _pread_all(fd, now.st_size - start, start)
    finally:
        os.close(fd)
    if start > 0:  # a tail starts mid-line: the partial first line is dropped
        nl = data.find(b"\n")
        if nl >= 0:
            start, data = start + nl + 1, data[nl + 1:]
    return {"pid": pid, "start_ticks": st["start_ticks"], "path": path, "size": now.st_size,
            "mtime": now.st_mtime, "offset": start, "data": data.decode("utf-8", "replace")}
