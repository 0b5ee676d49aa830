"""Classify a log file on disk from its tail plus a light scan of its head (never the whole file)."""

from __future__ import annotations

import os
from typing import BinaryIO, Protocol


class Feedable(Protocol):
    """What a file is fed to (a ``LogClassifier``): bytes, and a mark where bytes were skipped."""

    def feed_bytes(self, data: bytes) -> None: ...

    def gap(self) -> None: ...


TAIL_BYTES = 8 * 1024 * 1024
"""classify_file reads at most this many bytes from the end of a file."""

HEAD_SCAN_BYTES = 16 * 1024 * 1024
"""classify_file scans at most this many bytes from the start of a big file for the ready line."""

_SGLANG_READY = b"fired up and ready to roll"
_VLLM_READY = b"Application startup complete"
_BANNERS = (b"server_args=", b"vLLM API server version ")
"""``patterns.START_BANNERS`` as bytes: where a server run starts."""


def _read_at(f: BinaryIO, offset: int, size: int) -> bytes:
    f.seek(offset)
    return f.read(size)


def feed_file(clf: Feedable, f: BinaryIO, *, tail_bytes: int, head_scan_bytes: int) -> None:
    """Feed ``clf`` what it needs of an open file: all of a small one; head, ready line, tail of a big one.

    A big file's skipped middle is also searched (its last ``head_scan_bytes`` before the tail) for the last
    start banner and the ready line after it: fed in file order, they let the classifier start a new run there
    (a restart after the head's run became ready) instead of reading the tail as the head's run."""
    size = os.fstat(f.fileno()).st_size
    if size <= tail_bytes:
        while chunk := f.read(1 << 20):
            clf.feed_bytes(chunk)
        return
    tail_start = size - tail_bytes
    head = _read_at(f, 0, min(64 * 1024, tail_start))
    cut = head.rfind(b"\n")
    head_end = cut + 1 if cut >= 0 else 0
    clf.feed_bytes(head[:head_end])
    clf.gap()
    lines: list[tuple[int, bytes]] = []
    ready = find_ready(f, 0, min(head_scan_bytes, tail_start))
    if ready is not None:
        lines.append(ready)
    banner = find_last(f, max(head_end, tail_start - head_scan_bytes), tail_start, _BANNERS)
    if banner is not None:
        lines.append(banner)
        later = find_ready(f, banner[0], tail_start)  # the new run's own ready line
        if later is not None and later[0] > banner[0]:
            lines.append(later)
    for _, line in sorted(set(lines)):
        clf.feed_bytes(line + b"\n")
        clf.gap()
    tail = _read_at(f, tail_start, tail_bytes)
    nl = tail.find(b"\n")
    clf.feed_bytes(tail[nl + 1:] if nl >= 0 else b"")


def _line_at(data: bytes, i: int, max_line: int) -> tuple[int, bytes]:
    start = data.rfind(b"\n", 0, i) + 1
    end = data.find(b"\n", i)
    return start, data[start: end if end >= 0 else len(data)][:max_line]


def find_last(f: BinaryIO, start: int, end: int, markers: tuple[bytes, ...],
              max_line: int = 4000) -> tuple[int, bytes] | None:
    """(offset, line) of the last line in ``[start, end)`` holding one of ``markers``, searched backwards by
    byte search in blocks (bounded by the range)."""
    block = 1 << 20
    overlap = max(len(m) for m in markers) + max_line
    hi = end
    while hi > start:
        lo = max(start, hi - block)
        data = _read_at(f, lo, min(end, hi + overlap) - lo)
        best = max((data.rfind(m, 0, hi - lo + len(m)) for m in markers), default=-1)
        if best >= 0:
            at, line = _line_at(data, best, max_line)
            return lo + at, line
        hi = lo
    return None


def find_ready(f: BinaryIO, start: int, limit: int, max_line: int = 4000) -> tuple[int, bytes] | None:
    """(offset, line) of the ready line in ``[start, limit)``, found by byte search.

    SGLang's own ready line wins; uvicorn's ``Application startup complete`` (vLLM's ready
    line, but only a step on SGLang's way) is returned only when there is none."""
    block = 1 << 20
    overlap = len(_SGLANG_READY)
    offset = start
    fallback: tuple[int, bytes] | None = None
    while offset < limit:
        data = _read_at(f, offset, min(block + overlap, limit - offset))
        if not data:
            break
        for marker in (_SGLANG_READY, _VLLM_READY):
            i = data.find(marker)
            if i < 0:
                continue
            at, line = _line_at(data, i, max_line)
            if marker is _SGLANG_READY:
                return offset + at, line
            if fallback is None:
                fallback = (offset + at, line)
        offset += block
    return fallback
