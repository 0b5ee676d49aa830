"""Classify an inference server's log (plus its exit record) into ready / loading / failed / stopped.

SGLang (0.2 -> 0.5.x) and vLLM logs, measured on real logs from public issue threads
(``tests/test_classify_real.py``). The result is a :class:`console.model.Classification`: the
state, for a failure exactly one cause, the *decisive* line (the most specific line of the final
failure, e.g. ``Not enough memory. Please try to increase --mem-fraction-static.`` rather than the
``Received sigquit ...`` that follows it), a hint naming the likely fix, and the last serving
metrics seen.

The package is data plus structure:

* ``patterns.py`` - one table per framework (ready, serving, progress, metrics, stop lines) and
  the failure causes;
* ``lines.py`` - wrappers peeled off a line (Docker, Kubernetes, Ray, vLLM/SGLang prefixes);
* ``events.py`` - lines -> events; a failure line and the traceback it introduces are one event;
* ``rules.py`` - the structural rules (how a log ends, ready then crash, operator stop, exit
  record, first death) and ``hints.py`` - the fix each cause suggests;
* ``files.py`` - a big file read from its tail and a scan of its head.

Two forms: :func:`classify`, a pure function over a whole text, and :class:`LogClassifier`,
incremental for a live log (:meth:`LogClassifier.feed` chunks as they arrive,
:meth:`LogClassifier.result` at any time). Memory is bounded and work is linear in the text.
"""

from __future__ import annotations

import codecs
import os

from console.core.classify.episode import Failure
from console.core.classify.events import Reader
from console.core.classify.excerpt import failure_tail
from console.core.classify.files import HEAD_SCAN_BYTES, TAIL_BYTES, feed_file
from console.core.classify.rules import MAX_RETURNED_LINE, State, apply_first_death, decide
from console.model import Classification, ExitRecord, ProcessExit

__all__ = [
    "HEAD_SCAN_BYTES",
    "MAX_LINE",
    "MAX_RETURNED_LINE",
    "TAIL_BYTES",
    "LogClassifier",
    "apply_first_death",
    "classify",
    "classify_file",
    "classify_last_run",
    "failure_tail",
]

MAX_LINE = 64 * 1024
"""Characters of one line that are looked at; the rest of a longer line is ignored."""


class LogClassifier:
    """Incremental classifier for a live log.

    ``feed`` text chunks in order (any split, even mid-line or mid-character for
    :meth:`feed_bytes`); ``result`` may be called at any time and does not change the state.
    """

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._max_line = max(256, int(max_line))
        self._st = State()
        self._reader = Reader()
        self._partial: list[str] = []
        self._partial_len = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._fed = 0
        self._line_start = 0
        self.run_start = 0
        """Where the run being read begins: characters of :meth:`feed`'s text before its start banner (0 when
        the log holds one run; meaningful for text fed whole, not across a :meth:`gap`)."""

    def feed(self, text_chunk: str) -> None:
        """Add the next piece of the log (text already decoded)."""
        if not text_chunk:
            return
        if "\r" in text_chunk:
            text_chunk = text_chunk.replace("\r", "\n")
        parts = text_chunk.split("\n")
        last = parts.pop()
        pos = self._fed
        st = self._st
        for i, piece in enumerate(parts):
            if i == 0 and self._partial:
                self._append_partial(piece)
                line = "".join(self._partial)
                self._partial.clear()
                self._partial_len = 0
            else:
                line = piece[: self._max_line]
            runs = st.runs_skipped
            self._reader.line(line, st)
            if st.runs_skipped != runs:
                self.run_start = self._line_start
            pos += len(piece) + 1
            self._line_start = pos
        if last:
            self._append_partial(last)
        self._fed += len(text_chunk)

    def feed_bytes(self, data: bytes) -> None:
        """Add raw bytes; invalid UTF-8 becomes U+FFFD, characters split across chunks are joined."""
        self.feed(self._decoder.decode(data))

    def gap(self) -> None:
        """Mark that part of the log is missing here (e.g. between a file's head and tail)."""
        self._partial.clear()
        self._partial_len = 0
        self._decoder.reset()
        self._reader.close(self._st)
        self._reader.reset()

    def _append_partial(self, piece: str) -> None:
        room = self._max_line - self._partial_len
        if room > 0 and piece:
            piece = piece[:room]
            self._partial.append(piece)
            self._partial_len += len(piece)

    @property
    def runs_skipped(self) -> int:
        """Server runs of the log before the one being read (complete lines only)."""
        return self._st.runs_skipped

    @property
    def lines_seen(self) -> int:
        """Complete non-empty lines processed so far."""
        return self._reader.seq

    @property
    def pending_chars(self) -> int:
        """Characters of the unterminated last line held until its newline (never more than ``max_line``)."""
        return self._partial_len

    def run_over(self) -> bool:
        """Everything fed so far, read as a whole, reached ready or went down: a start banner fed next begins
        a new run (the state is not changed)."""
        st, reader = self._st.copy(), self._reader.copy()
        reader.close(st)
        return st.run_over()

    def result(self, exit: ExitRecord | None = None, first_death: ProcessExit | None = None) -> Classification:
        """The classification of everything fed so far (an unterminated last line included).

        ``exit`` is the session's exit record; ``first_death`` the earliest abnormal end of one of
        its processes (``SessionInfo.first_abnormal_exit``): a worker killed before its launcher
        noticed is then the cause, not the launcher's follow-up line.
        """
        st = self._st.copy()
        reader = self._reader.copy()
        if self._partial:
            reader.line("".join(self._partial), st)
        reader.close(st)
        return decide(st, exit, first_death, _exec_failure(exit))


def _exec_failure(exit: ExitRecord | None) -> Failure | None:
    if exit is None or not exit.error:
        return None
    st = State()
    reader = Reader()
    for line in exit.error.splitlines() or [exit.error]:
        reader.line(line, st)
    reader.close(st)
    return st.best()


def classify(text: str, exit: ExitRecord | None = None, first_death: ProcessExit | None = None) -> Classification:
    """Classify a whole log text (plus the optional exit record and first death). Pure; linear.

    A log holding several server runs is classified from the last one (``runs_skipped`` says how many came
    before)."""
    return classify_last_run(text, exit, first_death)[0]


def classify_last_run(text: str, exit: ExitRecord | None = None,
                      first_death: ProcessExit | None = None) -> tuple[Classification, str]:
    """:func:`classify`, and the text of the server run it read (``text`` itself when it holds one run)."""
    clf = LogClassifier()
    clf.feed(text)
    c = clf.result(exit, first_death)
    start = clf.run_start if c.runs_skipped == clf.runs_skipped else clf._line_start  # an unterminated banner
    return c, text[start:]


def classify_file(path: str | os.PathLike[str], exit: ExitRecord | None = None, *,
                  tail_bytes: int = TAIL_BYTES, head_scan_bytes: int = HEAD_SCAN_BYTES,
                  first_death: ProcessExit | None = None) -> Classification:
    """Classify a log file without loading it whole.

    Files up to ``tail_bytes`` are classified entirely. Bigger ones: the first 64 KiB (the
    startup banner), the ready line if it is within the first ``head_scan_bytes`` (a byte
    search, not a parse), then the last ``tail_bytes``. Raises ``OSError`` when unreadable.
    """
    clf = LogClassifier()
    with open(path, "rb") as f:
        feed_file(clf, f, tail_bytes=tail_bytes, head_scan_bytes=head_scan_bytes)
    return clf.result(exit, first_death)
