"""Classify a log file on disk from its tail plus a light scan of its head (never the whole file)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from console.ops.classify import LogClassifier

TAIL_BYTES = 8 * 1024 * 1024
"""classify_file reads at most this many bytes from the end of a file."""

HEAD_SCAN_BYTES = 16 * 1024 * 1024
"""classify_file scans at most this many bytes from the start of a big file for the ready line."""

_SGLANG_READY = b"fired up and ready to roll"
_VLLM_READY = b"Application startup complete"


def _read_at(f: BinaryIO, offset: int, size: int) -> bytes:
    f.seek(offset)
    return f.read(size)


def feed_file(clf: LogClassifier, f: BinaryIO, *, tail_bytes: int, head_scan_bytes: int) -> None:
    """Feed ``clf`` what it needs of an open file: all of a small one; head, ready line, tail of a big one."""
    size = os.fstat(f.fileno()).st_size
    if size <= tail_bytes:
        while chunk := f.read(1 << 20):
            clf.feed_bytes(chunk)
        return
    tail_start = size - tail_bytes
    head = _read_at(f, 0, min(64 * 1024, tail_start))
    cut = head.rfind(b"\n")
    clf.feed_bytes(head[: cut + 1] if cut >= 0 else b"")
    clf.gap()
    ready_line = scan_for_ready(f, min(head_scan_bytes, tail_start))
    if ready_line:
        clf.feed_bytes(ready_line + b"\n")
        clf.gap()
    tail = _read_at(f, tail_start, tail_bytes)
    nl = tail.find(b"\n")
    clf.feed_bytes(tail[nl + 1:] if nl >= 0 else b"")


def scan_for_ready(f: BinaryIO, limit: int, max_line: int = 4000) -> bytes | None:
    """The ready line in the first ``limit`` bytes, found by byte search.

    SGLang's own ready line wins; uvicorn's ``Application startup complete`` (vLLM's ready
    line, but only a step on SGLang's way) is returned only when there is none.
    """
    block = 1 << 20
    overlap = len(_SGLANG_READY)
    offset = 0
    fallback: bytes | None = None
    while offset < limit:
        data = _read_at(f, offset, min(block + overlap, limit - offset))
        if not data:
            break
        for marker in (_SGLANG_READY, _VLLM_READY):
            i = data.find(marker)
            if i < 0:
                continue
            start = data.rfind(b"\n", 0, i) + 1
            end = data.find(b"\n", i)
            line = data[start: end if end >= 0 else len(data)][:max_line]
            if marker is _SGLANG_READY:
                return line
            if fallback is None:
                fallback = line
        offset += block
    return fallback
