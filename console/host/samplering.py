"""A short ring of GPU samples kept in the runs directory, so a later report has the GPU's history.

Stdlib only, Python >= 3.8 (shipped with the agent). Every ``EVERY_S`` seconds the agent appends
one compact JSON line per sample to ``<runs_dir>/.gpu-samples.jsonl``; when the file holds more
than ``2 * KEEP`` lines it is rewritten (atomically) with the newest ``KEEP``. A report written
by a fresh console process reads it back with the ``gpu_samples`` op. The file is private (0600)
and only ever written through a regular, non-symlinked path.
"""

import json
import os

from .hostlib import now

RING_FILE = ".gpu-samples.jsonl"
EVERY_S = 5.0
"""One line per 5 s: enough to see power and memory around a failure without writing every tick."""
KEEP = 1440
"""Two hours at one line per 5 s."""
MAX_READ_BYTES = 8 << 20


def _point(g):
    keys = ("index", "power_w", "power_limit_w", "mem_used_mib", "mem_total_mib", "util_pct")
    return [g.get(k) for k in keys]


class SampleRing:
    """Appends GPU samples to the ring file at most every ``EVERY_S`` seconds; never raises."""

    def __init__(self, runs_dir, every_s=EVERY_S, keep=KEEP):
        self.path = os.path.join(runs_dir, RING_FILE)
        self.every_s, self.keep = every_s, keep
        self.last = 0.0
        self.lines = None  # lines in the file, counted on first write
        self.error = None

    def add(self, gpus, at=None):
        at = now() if at is None else at
        if not gpus or at - self.last < self.every_s:
            return
        self.last = at
        line = json.dumps({"at": round(at, 3), "gpus": [_point(g) for g in gpus]}, separators=(",", ":")) + "\n"
        try:
            if self.lines is None:
                self.lines = len(_read_lines(self.path))
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                if not _regular(fd):
                    return
                os.write(fd, line.encode())
            finally:
                os.close(fd)
            self.lines += 1
            if self.lines > 2 * self.keep:
                self._trim()
            self.error = None
        except OSError as e:
            self.error = "gpu sample ring: " + str(e)

    def _trim(self):
        lines = _read_lines(self.path)[-self.keep:]
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, "".join(lines).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        self.lines = len(lines)


def _regular(fd):
    import stat

    return stat.S_ISREG(os.fstat(fd).st_mode)


def _read_lines(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return []
    try:
        if not _regular(fd):
            return []
        size = os.fstat(fd).st_size
        if size > MAX_READ_BYTES:
            os.lseek(fd, size - MAX_READ_BYTES, 0)
        data = os.read(fd, MAX_READ_BYTES)
    finally:
        os.close(fd)
    lines = data.decode("utf-8", "replace").splitlines(True)
    if size > MAX_READ_BYTES and lines:
        lines = lines[1:]  # the first line was cut by the seek
    return [x for x in lines if x.endswith("\n")]


def read_samples(runs_dir, since=None, until=None, max_points=2000):
    """The ring's points in [since, until] as ``[{"at", "gpu", "power_w", ...}]`` (newest ``max_points``)."""
    keys = ("gpu", "power_w", "power_limit_w", "mem_used_mib", "mem_total_mib", "util_pct")
    out = []
    for line in _read_lines(os.path.join(runs_dir, RING_FILE)):
        try:
            rec = json.loads(line)
            at = float(rec["at"])
            if (since is not None and at < since) or (until is not None and at > until):
                continue
            for p in rec["gpus"]:
                if isinstance(p, list) and len(p) == len(keys):
                    d = dict(zip(keys, p))
                    d["at"] = at
                    out.append(d)
        except (ValueError, KeyError, TypeError):
            continue
    return out[-int(max_points):]
