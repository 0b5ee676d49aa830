"""The audit log: every remote command the console runs, with its result.

Kept in memory (bounded) for the UI and appended to a JSON-lines file. Arguments and results are
redacted before they are stored: env values and secrets never reach the log. The file is created
0600 (an existing one is narrowed to 0600), in a directory created 0700: other users of the machine
read neither.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

from console import paths
from console.core.redact import redact_obj, redact_text
from console.model import AuditEntry


def _open_private(path: Path):
    """Open ``path`` for appending, readable by its owner only (0600; its directory 0700 when created here)."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
        return os.fdopen(fd, "a", encoding="utf-8")
    except OSError:
        os.close(fd)
        raise


SUMMARY_CHARS = 300
"""A request's result is stored as at most this many characters of its JSON (masked before it is cut)."""


def summarize(result: Any) -> str:
    """A request's result as stored: secrets masked in the whole object (argv lists, settings dumps, tokens)
    first, then its JSON cut to :data:`SUMMARY_CHARS`; text that is no JSON (an error) is masked as text."""
    if isinstance(result, str):
        try:
            result = json.loads(result)
        except ValueError:
            text = redact_text(result)
            return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 3] + "..."
    text = json.dumps(redact_obj(result), separators=(",", ":"), default=str)
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 3] + "..."


def default_audit_path() -> Path:
    return paths.audit_log()


class Audit:
    """Callable sink used by HostLink: ``audit(host, op, args, ok, result, elapsed_ms)``."""

    def __init__(self, path: str | os.PathLike | None = None, *, keep: int = 2000,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path) if path else None
        self.entries: deque[AuditEntry] = deque(maxlen=keep)
        self.listeners: list[Callable[[AuditEntry], None]] = []
        self.clock = clock
        self._fh = None
        if self.path is not None:
            try:
                self._fh = _open_private(self.path)
            except OSError:
                self._fh = None

    def __call__(self, host: str, op: str, args: dict, ok: bool | None, result: Any,
                 elapsed_ms: float | None) -> AuditEntry:
        """Record one request: ``result`` is the agent's raw answer (or the error text), redacted here once."""
        entry = AuditEntry(at=self.clock(), host=host, op=op, args=redact_obj(args), ok=ok,
                           result=None if result is None and not ok else summarize(result),
                           elapsed_ms=None if elapsed_ms is None else round(elapsed_ms, 2))
        self.entries.append(entry)
        if self._fh is not None:
            try:
                self._fh.write(entry.model_dump_json() + "\n")
                self._fh.flush()
            except OSError:
                pass
        for fn in list(self.listeners):
            fn(entry)
        return entry

    def others(self, since: float, ops: tuple[str, ...] | None = None) -> list[AuditEntry]:
        """What other consoles on this machine (the CLI, another TUI) wrote to this audit file from ``since`` on
        (of ``ops`` when given): the file's tail without this console's own entries. Reads the file."""
        if self.path is None:
            return []
        own = {entry_key(e) for e in list(self.entries)}  # a copy: may run in a thread while entries are added
        return [e for e in read_tail(self.path, since, ops) if entry_key(e) not in own]

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


READ_TAIL_BYTES = 8 << 20
"""Only the last 8 MiB of an audit file are read back."""


def entry_key(e: AuditEntry) -> tuple:
    """An entry's identity, the same in memory and read back from the file."""
    return (e.at, e.host, e.op, e.ok, json.dumps(e.args, sort_keys=True, default=str))


def read_entries(path: str | os.PathLike, since: float, *, until: float | None = None,
                 ops: tuple[str, ...] | None = None, max_bytes: int = READ_TAIL_BYTES,
                 ) -> tuple[list[AuditEntry], str | None]:
    """The one reader of an audit file: its entries in [since, until] (of ``ops`` when given), read from its
    last ``max_bytes``; lines that are not entries are skipped. Returns (entries, why none could be read): a
    missing file is no entry and no note; an unreadable one says why."""
    try:
        with open(Path(path).expanduser(), "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - max_bytes))
            raw = f.read().decode("utf-8", "replace").splitlines()
    except FileNotFoundError:
        return [], None
    except OSError as err:
        return [], f"audit log {path} not readable: {err.strerror or err}"
    marks = tuple(f'"op":"{op}"' for op in ops) if ops is not None else None
    out = []
    for line in raw:
        if marks is not None and not any(m in line for m in marks):  # cheap before parsing
            continue
        try:
            e = AuditEntry.model_validate_json(line)
        except ValueError:
            continue
        if e.at >= since and (until is None or e.at <= until) and (ops is None or e.op in ops):
            out.append(e)
    return out, None


def read_tail(path: str | os.PathLike, since: float, ops: tuple[str, ...] | None = None,
              max_bytes: int = READ_TAIL_BYTES) -> list[AuditEntry]:
    """:func:`read_entries` without the note ([] when the file cannot be read)."""
    return read_entries(path, since, ops=ops, max_bytes=max_bytes)[0]
