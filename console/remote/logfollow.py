"""Session logs for the agent: byte-offset reads and followed logs pushed as they grow.

Stdlib only, Python >= 3.8; shipped with the agent. Reads end at a line boundary; a log that
shrank (truncated by hand) is announced and followed from its start, never skipped.
"""

import os

from .hostlib import RUN_LOG, SESSION_ID_RE, OpError, now

MAX_LOG_CHUNK = 256 * 1024


def log_path(runs_dir, session_id):
    """The log of ``session_id``; a bad id (anything that could leave the runs dir) is an OpError."""
    if not isinstance(session_id, str) or not SESSION_ID_RE.match(session_id):
        raise OpError("bad session id %r" % (session_id,))
    return os.path.join(runs_dir, session_id, RUN_LOG)


def read_chunk(path, offset, max_bytes):
    """(start, data, size): up to ``max_bytes`` from ``offset``, cut after the last complete line.

    An offset past the end (the file was truncated or replaced) starts over at 0.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if offset > size:
            offset = 0  # truncated or replaced: start over, never show stale bytes twice
        f.seek(offset)
        data = f.read(max_bytes)
    if len(data) == max_bytes:
        cut = data.rfind(b"\n")
        if cut >= 0:
            data = data[:cut + 1]
    elif data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n")
        data = data[:cut + 1] if cut >= 0 else b""
    return offset, data, size


def read_log(runs_dir, session_id, offset=None, tail_bytes=None, max_bytes=MAX_LOG_CHUNK):
    """The ``read_log`` op: a chunk from ``offset``, or the last ``tail_bytes`` from a line start."""
    path = log_path(runs_dir, session_id)
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise OpError("no log for session %s: %s" % (session_id, e.strerror))
    max_bytes = max(1, min(int(max_bytes), 8 << 20))
    if offset is None:
        offset = max(0, size - int(tail_bytes or max_bytes))
    start, data, size = read_chunk(path, int(offset), max_bytes)
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

    def __bool__(self):
        return bool(self.offsets)

    def follow(self, session_id, offset=0):
        log_path(self.runs_dir, session_id)
        self.offsets[session_id] = int(offset)

    def unfollow(self, session_id):
        self.offsets.pop(session_id, None)

    def poll(self):
        for sid, off in list(self.offsets.items()):
            try:
                path = log_path(self.runs_dir, sid)
                size = os.stat(path).st_size
            except (OSError, OpError):
                continue
            if size < off:  # truncated by hand: say so and start over, never skip what follows
                self.offsets[sid] = 0
                self.send({"type": "event", "kind": "log_truncated", "session_id": sid, "size": size,
                           "at": now()})
                continue
            if size == off:
                continue
            try:
                start, data, size = read_chunk(path, off, MAX_LOG_CHUNK)
            except OSError:
                continue
            if data:
                self.offsets[sid] = start + len(data)
                self.send({"type": "log", "session_id": sid, "offset": start, "end": start + len(data),
                           "data": data.decode("utf-8", "replace")})
