"""Session logs for the agent: byte-offset reads and followed logs pushed as they grow.

Stdlib only, Python >= 3.8; shipped with the agent. Reads end at a line boundary; a log that
shrank (truncated by hand) is announced and followed from its start, never skipped. A log is only
ever read from a real session directory, opened with ``O_NOFOLLOW | O_NONBLOCK`` and only when it is
a regular file (a FIFO or a symlink planted as ``output.log`` never blocks or redirects the agent).
``tail_lines`` reads backwards until it has the last N lines or ``MAX_TAIL_BYTES``, and says which.

A capped log (``log_cap_mb``, see ``logcap``) is rotated by its supervisor: a tail that wants more than
``output.log`` holds goes on into ``output.log.1``, so the last lines before a rotation (a failure's
decisive line) are never out of reach. Offsets are bytes of one file, named by its inode (``file``); a
followed log whose ``output.log`` became another file is read to the end of the old one (now
``output.log.1``), then ``log_rotated`` is pushed and the new one followed from 0: no line twice, none
dropped, no false ``log_truncated``. A follower that fell more than one segment behind is told so
(``dropped``); three behind, the filesystem may have given its old inode number to the new segment.
"""

import os
import time

from .hostlib import RUN_LOG, RUN_LOG_PREV, SESSION_ID_RE, OpError, now
from .logcap import open_previous, same_file
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
        raise OpError("bad session id %r" % (session_id,), "bad_request")
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
        raise OpError("no log for session %s: %s" % (session_id, e.strerror or e),
                      "not_found" if isinstance(e, FileNotFoundError) else "failed")


def _pread_all(fd, offset, n):
    chunks, got = [], 0
    while got < n:
        b = os.pread(fd, n - got, offset + got)
        if not b:
            break
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def read_chunk(fd, offset, max_bytes, final=False):
    """(start, data, size): up to ``max_bytes`` from ``offset`` of the open log ``fd`` (or a path, opened as
    :func:`open_regular` does), cut after the last complete line (``final``: a file that no longer grows
    is read to its very end). An offset past the end (the file was truncated or replaced) starts over at 0."""
    if not isinstance(fd, int):
        path_fd = open_regular(fd)
        try:
            return read_chunk(path_fd, offset, max_bytes, final)
        finally:
            os.close(path_fd)
    size = os.fstat(fd).st_size
    if offset > size:
        offset = 0  # truncated or replaced: start over, never show stale bytes twice
    data = _pread_all(fd, offset, min(max_bytes, max(0, size - offset)))
    if final and offset + len(data) >= size:
        return offset, data, size
    if len(data) == max_bytes:
        cut = data.rfind(b"\n")
        if cut >= 0:
            data = data[:cut + 1]
    elif data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n")
        data = data[:cut + 1] if cut >= 0 else b""
    return offset, data, size


class Span(object):
    """A log's bytes as one run: the previous segment (``output.log.1``, when given) then the current
    one. Sizes are taken once, at creation; positions count from the start of the previous segment."""

    def __init__(self, fd, prev_fd=None):
        self.fd, self.prev_fd = fd, prev_fd
        self.cur_size = os.fstat(fd).st_size
        self.base = os.fstat(prev_fd).st_size if prev_fd is not None else 0
        self.size = self.base + self.cur_size

    def pread(self, pos, n):
        """Up to ``n`` bytes from ``pos``, across the segment boundary."""
        n = max(0, min(n, self.size - pos))
        out = b""
        if pos < self.base:
            k = min(n, self.base - pos)
            out = _pread_all(self.prev_fd, pos, k)
            if len(out) < k:  # the previous segment shrank under us: stop at what it still has
                return out
            pos, n = self.base, n - k
        if n > 0:
            out += _pread_all(self.fd, pos - self.base, n)
        return out


def read_tail_lines(fd, lines, cap=MAX_TAIL_BYTES):
    """(start, data, size, capped): the last ``lines`` complete lines of the open log ``fd`` (or a
    :class:`Span`), read backwards in growing blocks. It stops after ``cap`` bytes: then ``capped`` is True
    and ``data`` starts at the first line boundary read."""
    span = fd if isinstance(fd, Span) else Span(fd)
    size = span.size
    pos, buf, end, block, capped = size, b"", None, 1 << 16, False
    while pos > 0:
        want = min(block, pos, cap - len(buf))
        if want <= 0:
            capped = True
            break
        pos -= want
        buf = span.pread(pos, want) + buf
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


def _tail_reply(span, start, data, ino):
    """A tail's reply in ``output.log``'s own offsets; ``previous_bytes`` says how much came from
    ``output.log.1`` (its ``offset`` is then 0: where the part in ``output.log`` starts)."""
    out = {"offset": max(0, start - span.base), "end": max(0, start + len(data) - span.base),
           "size": span.cur_size, "file": ino, "data": data.decode("utf-8", "replace")}
    if start < span.base:
        out["previous_bytes"] = min(len(data), span.base - start)
    return out


def read_log(runs_dir, session_id, offset=None, tail_bytes=None, max_bytes=MAX_LOG_CHUNK, tail_lines=None):
    """The ``read_log`` op: a chunk from ``offset``, the last ``tail_bytes`` (at most 8 MiB) from a line start,
    or exactly the last ``tail_lines`` lines (``capped`` says when ``MAX_TAIL_BYTES`` stopped the read first).
    A tail of a rotated log reaches back into ``output.log.1`` when ``output.log`` alone is too short."""
    fd = open_log(runs_dir, session_id)
    prev = None
    try:
        ino = os.fstat(fd).st_ino
        if offset is None:
            prev = open_previous(os.path.dirname(log_path(runs_dir, session_id)), ino)
        span = Span(fd, prev)
        if tail_lines is not None:
            start, data, _, capped = read_tail_lines(span, max(0, int(tail_lines)))
            out = _tail_reply(span, start, data, ino)
            out.update(capped=capped, cap_bytes=MAX_TAIL_BYTES)
            return out
        max_bytes = max(1, min(int(max_bytes), 8 << 20))
        if offset is not None:
            start, data, size = read_chunk(fd, int(offset), max_bytes)
            return {"offset": start, "end": start + len(data), "size": size, "file": ino,
                    "data": data.decode("utf-8", "replace")}
        want = max(1, min(int(tail_bytes or max_bytes), 8 << 20))
        start = max(0, span.size - want)
        data = span.pread(start, span.size - start)
    finally:
        os.close(fd)
        if prev is not None:
            os.close(prev)
    cut = data.rfind(b"\n")
    if not data.endswith(b"\n") and (cut >= 0 or len(data) < want):
        data = data[:cut + 1]  # complete lines only (a line longer than the whole tail is kept as read)
    if tail_bytes and start > 0:
        nl = data.find(b"\n")  # drop the partial first line of a tail
        if nl >= 0:
            start, data = start + nl + 1, data[nl + 1:]
    return _tail_reply(span, start, data, ino)


class LogFollower(object):
    """Followed session logs: ``poll`` pushes what was appended since the last offset, across rotations."""

    def __init__(self, runs_dir, send):
        self.runs_dir = runs_dir
        self.send = send
        self.offsets = {}  # session_id -> byte offset in the followed file
        self.files = {}  # session_id -> inode of the followed file (None: output.log's at the next poll)
        self.behind = False
        """True when the last poll ran out of its time budget with bytes left to push."""

    def __bool__(self):
        return bool(self.offsets)

    def follow(self, session_id, offset=0, file=None):
        """Follow from ``offset`` of the file with inode ``file`` (default: whatever ``output.log`` is then)."""
        log_path(self.runs_dir, session_id)
        self.offsets[session_id] = int(offset)
        self.files[session_id] = int(file) if file is not None else None

    def unfollow(self, session_id):
        self.offsets.pop(session_id, None)
        self.files.pop(session_id, None)

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
            st = os.fstat(fd)
            ino = self.files.get(sid)
            if ino is None:
                self.files[sid] = ino = st.st_ino
            if st.st_ino != ino:
                return self._rotated(sid, ino, off, st.st_ino)
            size = st.st_size
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
        return self._push(sid, ino, start, data, size)

    def _push(self, sid, ino, start, data, size):
        if not data:
            return False
        self.offsets[sid] = start + len(data)
        self.send({"type": "log", "session_id": sid, "offset": start, "end": start + len(data), "file": ino,
                   "data": data.decode("utf-8", "replace")})
        return start + len(data) < size

    def _rotated(self, sid, old, off, new):
        """``output.log`` is another file now: finish the old one (``output.log.1`` when it was rotated; it no
        longer grows), then say so and follow the new one from 0. True: more may be readable now."""
        run_dir = os.path.dirname(log_path(self.runs_dir, sid))
        fd = same_file(run_dir, RUN_LOG_PREV, old)
        dropped = fd is None  # rotated away (or replaced by hand) before we finished it
        if fd is not None:
            try:
                size = os.fstat(fd).st_size
                if off < size:
                    start, data, size = read_chunk(fd, off, FOLLOW_READ, final=True)
                    if data:
                        self._push(sid, old, start, data, size)
                        return True
            except OSError:
                dropped = True
            finally:
                os.close(fd)
        self.offsets[sid], self.files[sid] = 0, new
        self.send({"type": "event", "kind": "log_rotated", "session_id": sid, "file": new, "dropped": dropped,
                   "at": now()})
        return True
