"""Session logs for the agent: byte-offset reads and followed logs pushed as they grow.

Stdlib only, Python >= 3.8; shipped with the agent. Reads end at a line boundary; a log that
shrank (truncated by hand) is announced and followed from its start, never skipped. A log is only
ever read from a real session directory, opened with ``O_NOFOLLOW | O_NONBLOCK`` and only when it is
a regular file (a FIFO or a symlink planted as ``output.log`` never blocks or redirects the agent).
``tail_lines`` reads backwards until it has the last N lines or ``MAX_TAIL_BYTES``, and says which.
"""

import os
import time

from .hostlib import RUN_LOG, SESSION_ID_RE, OpError, now
from .rundir import Broken, open_regular, real_session_dir

MAX_LOG_CHUNK = 256 * 1024
"""One ``read_log`` chunk by default."""
FOLLOW_READ = 1 << 20
"""One read of a followed log; a poll repeats it until caught up or ``FOLLOW_BUDGET_S`` is spent."""
FOLLOW_BUDGET_S = 0.03
"""How long one poll may read followed logs (the loop then handles exits and requests: never delayed more)."""
MAX_TAIL_BYTES = 16 << 20
"""The most ``tail_lines`` reads backwards; a reply that stopped there says ``capped``."""


def log_path(runs_dir, session_id):
    """The log of ``session_id``; a bad id (anything that could leave the runs dir) is an OpError."""
    if not isinstance(session_id, str) or not SESSION_ID_RE.match(session_id):
        raise OpError("bad session id %r" % (session_id,))
    return os.path.join(runs_dir, session_id, RUN_LOG)


def open_log(runs_dir, session_id):
    """An fd on the session's log: a real session directory, a regular file, no symlink (OpError otherwise)."""
    path = log_path(runs_dir, session_id)
    try:
        real_session_dir(runs_dir, session_id)
        return open_regular(path)
    except Broken as e:
        raise OpError("cannot read the log of session %s: %s" % (session_id, e))
    except OSError as e:
        if e.errno == 40:
            raise OpError("cannot read the log of session %s: output.log is a symlink" % session_id)
        raise OpError("no log for session %s: %s" % (session_id, e.strerror or e))


def _pread_all(fd, offset, n):
    chunks, got = [], 0
    while got < n:
        b = os.pread(fd, n - got, offset + got)
        if not b:
            break
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def read_chunk(fd, offset, max_bytes):
    """(start, data, size): up to ``max_bytes`` from ``offset`` of the open log ``fd`` (or a path, opened as
    :func:`open_regular` does), cut after the last complete line. An offset past the end (the file was
    truncated or replaced) starts over at 0."""
    if not isinstance(fd, int):
        path_fd = open_regular(fd)
        try:
            return read_chunk(path_fd, offset, max_bytes)
        finally:
            os.close(path_fd)
    size = os.fstat(fd).st_size
    if offset > size:
        offset = 0  # truncated or replaced: start over, never show stale bytes twice
    data = _pread_all(fd, offset, min(max_bytes, max(0, size - offset)))
    if len(data) == max_bytes:
        cut = data.rfind(b"\n")
        if cut >= 0:
            data = data[:cut + 1]
    elif data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n")
        data = data[:cut + 1] if cut >= 0 else b""
    return offset, data, size


def read_tail_lines(fd, lines, cap=MAX_TAIL_BYTES):
    """(start, data, size, capped): the last ``lines`` complete lines, read backwards in growing blocks. It
    stops after ``cap`` bytes: then ``capped`` is True and ``data`` starts at the first line boundary read."""
    size = os.fstat(fd).st_size
    pos, buf, end, block, capped = size, b"", None, 1 << 16, False
    while pos > 0:
        want = min(block, pos, cap - len(buf))
        if want <= 0:
            capped = True
            break
        pos -= want
        buf = _pread_all(fd, pos, want) + buf
        block = min(block * 2, 1 << 20)
        if end is None:
            nl = buf.rfind(b"\n")
            if nl < 0:
                continue
            end = pos + nl + 1  # complete lines only: a follow resumes at ``end``
        if buf.count(b"\n", 0, end - pos) > lines:
            break
    if end is None:
        return 0, b"", size, capped
    body = buf[:end - pos]
    if capped:
        first = body.find(b"\n") + 1
        return pos + first, body[first:], size, True
    keep = body.split(b"\n")[:-1][-lines:] if lines > 0 else []
    data = b"".join(x + b"\n" for x in keep)
    return end - len(data), data, size, False


def read_log(runs_dir, session_id, offset=None, tail_bytes=None, max_bytes=MAX_LOG_CHUNK, tail_lines=None):
    """The ``read_log`` op: a chunk from ``offset``, the last ``tail_bytes`` from a line start, or exactly the
    last ``tail_lines`` lines (``capped`` says when ``MAX_TAIL_BYTES`` stopped the read first)."""
    fd = open_log(runs_dir, session_id)
    try:
        if tail_lines is not None:
            start, data, size, capped = read_tail_lines(fd, max(0, int(tail_lines)))
            return {"offset": start, "end": start + len(data), "size": size, "capped": capped,
                    "cap_bytes": MAX_TAIL_BYTES, "data": data.decode("utf-8", "replace")}
        size = os.fstat(fd).st_size
        max_bytes = max(1, min(int(max_bytes), 8 << 20))
        if offset is None:
            offset = max(0, size - int(tail_bytes or max_bytes))
        start, data, size = read_chunk(fd, int(offset), max_bytes)
    finally:
        os.close(fd)
    if tail_bytes and start > 0:
        nl = data.find(b"\n")  # drop the partial first line of a tail
        if nl >= 0:
            start, data = start + nl + 1, data[nl + 1:]
    return {"offset": start, "end": start + len(data), "size": size, "data": data.decode("utf-8", "replace")}


class LogFollower(object):
    """Followed session logs: ``poll`` pushes what was appended since the last offset."""

    def __init__(self, runs_dir, send):
        self.runs_dir = runs_dir
        self.send = send
        self.offsets = {}  # session_id -> byte offset
        self.behind = False
        """True when the last poll ran out of its time budget with bytes left to push."""

    def __bool__(self):
        return bool(self.offsets)

    def follow(self, session_id, offset=0):
        log_path(self.runs_dir, session_id)
        self.offsets[session_id] = int(offset)

    def unfollow(self, session_id):
        self.offsets.pop(session_id, None)

    def poll(self):
        """Push what the followed logs gained: reads of ``FOLLOW_READ`` until caught up, within
        ``FOLLOW_BUDGET_S`` per call (a fast log is caught up over a few loop turns, exits are not delayed)."""
        deadline = time.monotonic() + FOLLOW_BUDGET_S
        behind = True
        while behind and time.monotonic() < deadline:
            behind = False
            for sid in list(self.offsets):
                if self._poll_one(sid):
                    behind = True
        self.behind = behind

    def _poll_one(self, sid):
        """One read of a followed log; True when it may have more right now."""
        off = self.offsets.get(sid)
        if off is None:
            return False
        try:
            fd = open_log(self.runs_dir, sid)
        except OpError:
            return False
        try:
            size = os.fstat(fd).st_size
            if size < off:  # truncated by hand: say so and start over, never skip what follows
                self.offsets[sid] = 0
                self.send({"type": "event", "kind": "log_truncated", "session_id": sid, "size": size,
                           "at": now()})
                return False
            if size == off:
                return False
            start, data, size = read_chunk(fd, off, FOLLOW_READ)
        except OSError:
            return False
        finally:
            os.close(fd)
        if not data:
            return False
        self.offsets[sid] = start + len(data)
        self.send({"type": "log", "session_id": sid, "offset": start, "end": start + len(data),
                   "data": data.decode("utf-8", "replace")})
        return start + len(data) < size
