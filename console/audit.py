"""The audit log: every remote command the console runs, with its result.

Kept in memory (bounded) for the UI and appended to a JSON-lines file. Arguments are
redacted before they are stored: env values and secrets never reach the log.
"""

from __future__ import annotations

import os
import time
from collections import deque
from pathlib import Path
from typing import Callable

from console.model import AuditEntry
from console.redact import redact_obj, redact_text


def default_audit_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "mtpconsole" / "audit.jsonl"


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
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "a", encoding="utf-8")
            except OSError:
                self._fh = None

    def __call__(self, host: str, op: str, args: dict, ok: bool | None, result: str | None,
                 elapsed_ms: float | None) -> AuditEntry:
        entry = AuditEntry(at=self.clock(), host=host, op=op, args=redact_obj(args), ok=ok,
                           result=redact_text(result) if result else result,
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

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
