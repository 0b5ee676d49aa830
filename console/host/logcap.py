"""The optional ``output.log`` size cap (``log_cap_mb``): the supervisor's log pump and its rotation.

Stdlib only, Python >= 3.8; shipped with the agent. Without a cap (the default) none of this runs: the
server writes ``output.log`` itself. With one, the server's stdout+stderr is a pipe (widened to 1 MiB)
that a thread of the supervisor drains in reads of up to 1 MiB into ``output.log``. When the file would
pass the cap it is rotated before the first line that does not fit: ``output.log`` becomes
``output.log.1`` (the one before is dropped) and a fresh ``output.log`` continues. The pump writes whole
lines (an unfinished one waits for its end, or ``IDLE_FLUSH_S`` of silence), so a segment holds at most
``cap`` bytes; only a line longer than the cap, or one the server paused in the middle of, makes it
longer, by at most one read (1 MiB). The log on disk is thus at most two segments. The session's first
~64 KiB (the start-up lines with server_args) are kept in ``output.log.head``, written at the first
rotation.

Rotation never leaves a moment without ``output.log``: the next segment is created first (under a dot
name), the current one gets its second name ``output.log.1`` by a hard link, then the next one is renamed
over ``output.log`` (where hard links fail, two renames). While the two names share one inode a reader
must not read it twice: :func:`open_previous` returns the previous segment only when it is another file.

The server never waits on the disk: write errors (a full disk) drop the bytes and say so once in
``supervisor.log``, the pipe keeps being drained. After the server exits, the supervisor drains the pipe
to its end (:meth:`LogPump.finish`) before it writes ``exit.json``. If the supervisor itself dies while
the server lives, the pipe has no reader: the server's next write fails with EPIPE (a Python server, such
as SGLang, ignores SIGPIPE; its logging drops the line) and nothing more of its output is kept.
"""

import os
import select
import threading

from .hostlib import RUN_LOG, RUN_LOG_HEAD, RUN_LOG_PREV
from .rundir import open_regular

READ_SIZE = 1 << 20
"""One read from the server's pipe (and the most a segment may pass the cap by: one read)."""
PIPE_SIZE = 1 << 20
"""The pipe's buffer (F_SETPIPE_SZ, best effort): how much the server may write ahead of the pump."""
F_SETPIPE_SZ = 1031
"""Linux fcntl command (``fcntl.F_SETPIPE_SZ`` exists only from Python 3.10)."""
HEAD_BYTES = 64 << 10
"""How much of the session's start ``output.log.head`` keeps (cut at its last line end)."""
MIN_CAP_BYTES = HEAD_BYTES
"""A smaller cap is raised to this."""
IDLE_FLUSH_S = 1.0
"""A line the server left unfinished this long is written as it is (else it waits for its end)."""
DRAIN_TIMEOUT_S = 10.0
"""How long the supervisor waits, after the server and its leftovers are gone, for the pipe's end."""
_NEXT = ".output.log.next"
_PREV_TMP = ".output.log.1.tmp"


def cap_bytes(log_cap_mb):
    """The cap in bytes for ``log_cap_mb`` (MiB; None/0 = no cap); raises ValueError for a bad value."""
    if log_cap_mb is None:
        return None
    if isinstance(log_cap_mb, bool) or not isinstance(log_cap_mb, (int, float)) or log_cap_mb != log_cap_mb:
        raise ValueError("log_cap_mb must be a number of MiB, not %r" % (log_cap_mb,))
    if log_cap_mb < 0 or log_cap_mb > (1 << 40):
        raise ValueError("log_cap_mb must be between 0 (no cap) and 2**40, not %r" % (log_cap_mb,))
    if log_cap_mb == 0:
        return None
    return max(MIN_CAP_BYTES, int(log_cap_mb * (1 << 20)))


def widen_pipe(fd):
    """Give the pipe a 1 MiB buffer where the kernel allows it (never raises)."""
    try:
        import fcntl
        fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE)
    except (OSError, ImportError, ValueError):
        pass


def open_previous(run_dir, current_ino):
    """An fd on ``output.log.1`` when it is a regular file other than the current segment (inode
    ``current_ino``), else None (no rotation yet, mid-rotation, a symlink or a FIFO planted there)."""
    try:
        fd = open_regular(os.path.join(run_dir, RUN_LOG_PREV))
    except Exception:
        return None
    try:
        if os.fstat(fd).st_ino != current_ino:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def same_file(run_dir, name, ino):
    """An fd on ``run_dir/name`` when it is the regular file with inode ``ino`` (else None)."""
    try:
        fd = open_regular(os.path.join(run_dir, name))
    except Exception:
        return None
    try:
        if os.fstat(fd).st_ino == ino:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


class LogPump(object):
    """Drains the server's pipe into ``output.log``, rotating it at ``cap`` bytes (see the module doc).

    ``out_fd`` is the open, empty ``output.log`` (the pump owns it from now on); ``log`` writes one line
    to supervisor.log. Runs in a daemon thread: :meth:`start`, then :meth:`finish` once the server ended.
    """

    def __init__(self, run_dir, read_fd, out_fd, cap, log):
        self.run_dir = run_dir
        self.read_fd = read_fd
        self.fd = out_fd
        self.cap = int(cap)
        self.log = log
        self.size = 0  # bytes in the current segment
        self.line_open = False  # the current segment does not end at a line end
        self.head = bytearray()
        self.total = 0  # bytes read from the pipe
        self.dropped = 0  # bytes lost to write errors
        self.rotations = 0
        self.errors = set()  # kinds of error already logged (each once)
        self.retry_at = None  # after a failed rotation: the size at which to try again
        self.done = threading.Event()
        self.thread = None

    # -------------------------------------------------------------- the thread
    def start(self):
        self.thread = threading.Thread(target=self._run, name="log-pump", daemon=True)
        self.thread.start()

    def _run(self):
        pending = b""  # a line not finished yet: written whole with the next bytes (or when the pipe idles)
        try:
            while True:
                if pending:
                    ready, _, _ = select.select([self.read_fd], [], [], IDLE_FLUSH_S)
                    if not ready:  # the server paused mid-line: put what it wrote on disk
                        self.write(pending)
                        pending = b""
                        continue
                try:
                    data = os.read(self.read_fd, READ_SIZE)
                except OSError as e:
                    self._once("read", "cannot read the server's output pipe: %s" % (e.strerror or e))
                    break
                if not data:
                    break
                self.total += len(data)
                if len(self.head) < HEAD_BYTES:
                    self.head += data[:HEAD_BYTES - len(self.head)]
                if pending:
                    data = pending + data
                cut = data.rfind(b"\n") + 1
                if cut < len(data) and len(data) - cut < READ_SIZE:  # rotate at line ends only
                    data, pending = data[:cut], data[cut:]
                else:
                    pending = b""
                if data:
                    self.write(data)
            if pending:
                self.write(pending)
        except BaseException as e:  # never let the thread die silently: the pipe would fill up
            self.log("log pump failure: %r" % (e,))
        finally:
            self.done.set()

    def finish(self, timeout=DRAIN_TIMEOUT_S):
        """Wait (bounded) until the pipe's end was read and written; True when it was."""
        ended = self.done.wait(timeout)
        if not ended:
            self.log("output pipe still open %.0f s after the server ended (a process outside the session "
                     "holds it): %d bytes kept so far" % (timeout, self.total - self.dropped))
        else:
            self.log("output pipe drained: %d bytes, %d rotation(s)%s" % (
                self.total, self.rotations, ", %d bytes lost to write errors" % self.dropped if self.dropped else ""))
            for fd in (self.read_fd, self.fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
        return ended

    def _once(self, kind, message):
        if kind not in self.errors:
            self.errors.add(kind)
            self.log(message)

    # -------------------------------------------------------------- writing
    def write(self, data):
        """Append ``data`` to the log, rotating at a line end when the segment would pass the cap."""
        while data:
            limit = self.cap if self.retry_at is None else self.retry_at
            room = limit - self.size
            if len(data) <= room:
                self._out(data)
                return
            cut = data.rfind(b"\n", 0, room) + 1 if room > 0 else 0
            if cut == 0 and self.size > 0 and not self.line_open:
                self._rotate()  # the segment ends at a line end and the next line does not fit
                continue
            if cut == 0:  # one line crosses the cap: end the segment where it ends, within one read
                slack = limit + READ_SIZE - self.size
                cut = data.find(b"\n", 0, max(slack, 0)) + 1 if slack > 0 else 0
                if cut == 0:
                    if len(data) <= slack:
                        self._out(data)  # the line goes on in the next read
                        return
                    cut = max(slack, 0)  # a line longer than a read past the cap: split it
            self._out(data[:cut])
            data = data[cut:]
            self._rotate()

    def _out(self, data):
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except OSError as e:
                self.dropped += len(view)
                self._once("write", "cannot write %s: %s (output is dropped while it fails)" % (
                    RUN_LOG, e.strerror or e))
                return
            self.size += n
            view = view[n:]
        if data:
            self.line_open = data[-1:] != b"\n"

    def _rotate(self):
        """``output.log`` -> ``output.log.1`` and a fresh ``output.log``, with no moment without one."""
        d = self.run_dir
        nxt = os.path.join(d, _NEXT)
        try:
            if os.path.lexists(nxt):
                os.unlink(nxt)  # left by a crash (or planted): never written through
            new_fd = os.open(nxt, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            return self._rotation_failed(e)
        try:
            if self.rotations == 0:
                self._write_head()
            tmp = os.path.join(d, _PREV_TMP)
            try:
                if os.path.lexists(tmp):
                    os.unlink(tmp)
                os.link(os.path.join(d, RUN_LOG), tmp)
                os.rename(tmp, os.path.join(d, RUN_LOG_PREV))
            except OSError:  # no hard links here: two renames (output.log is missing for a moment)
                os.rename(os.path.join(d, RUN_LOG), os.path.join(d, RUN_LOG_PREV))
            os.rename(nxt, os.path.join(d, RUN_LOG))
        except OSError as e:
            os.close(new_fd)
            try:
                os.unlink(nxt)
            except OSError:
                pass
            return self._rotation_failed(e)
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.fd, self.size, self.line_open, self.retry_at = new_fd, 0, False, None
        self.rotations += 1
        return None

    def _rotation_failed(self, e):
        """Keep writing the current segment; try again once it has grown by another cap."""
        self._once("rotate", "cannot rotate %s: %s (the segment keeps growing; retried every cap)" % (
            RUN_LOG, e.strerror or e))
        self.retry_at = self.size + self.cap
        return None

    def _write_head(self):
        """``output.log.head``: the session's first bytes up to their last line end (never raises)."""
        head = bytes(self.head)
        cut = head.rfind(b"\n")
        if cut >= 0:
            head = head[:cut + 1]
        try:
            fd = os.open(os.path.join(self.run_dir, RUN_LOG_HEAD),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            self._once("head", "cannot write %s: %s" % (RUN_LOG_HEAD, e.strerror or e))
            return
        try:
            view = memoryview(head)
            while view:
                view = view[os.write(fd, view):]
        except OSError as e:
            self._once("head", "cannot write %s: %s" % (RUN_LOG_HEAD, e.strerror or e))
        finally:
            os.close(fd)
