"""No decisive line is a valid answer (issue 24, item 3).

When the log holds no failure line, a failure's ``line`` says so and what ended the server (the first death,
else the exit record); no other line of the log (a health probe, the ready line) is presented as decisive.
Checked on hand-written logs, as a property over the whole real-log corpus, and through ``classify-log``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.core.classify import apply_first_death, classify, classify_file
from console.core.classify.rules import NO_FAILURE_LINE
from console.model import Classification, ExitRecord, ProcessExit

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "tests" / "data" / "real-logs"

READY_THEN_PROBES = (
    "[2025-01-01 10:00:00] server_args=ServerArgs(model_path='m', port=30000)\n"
    "[2025-01-01 10:00:05] Load weight begin. avail mem=70.00 GB\n"
    "[2025-01-01 10:00:20] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)\n"
    "[2025-01-01 10:00:21] The server is fired up and ready to roll!\n"
    '[2025-01-01 10:00:30] INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 200 OK\n'
    '[2025-01-01 10:00:40] INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 200 OK\n'
)
KILL = ExitRecord(signal=9, ended_at=0.0)
LAUNCHER_KILLED = ProcessExit(pid=4242, signal=9, how="signal", role="launcher")


def _no_line(c: Classification, what: str) -> None:
    assert c.state == "failed"
    assert c.line == f"{NO_FAILURE_LINE}; {what}", c.line
    assert not c.line_in_log
    assert "HTTP" not in c.line and "fired up" not in c.line


def test_killed_after_ready_with_only_probes_after_it_has_no_decisive_line():
    _no_line(classify(READY_THEN_PROBES, KILL), "the server was killed by SIGKILL")


def test_exit_code_with_no_failure_line_says_so():
    _no_line(classify(READY_THEN_PROBES, ExitRecord(exit_code=1, ended_at=0.0)), "the server exited with code 1")


def test_the_first_death_is_what_the_sentence_names():
    c = classify(READY_THEN_PROBES, KILL, LAUNCHER_KILLED)
    _no_line(c, LAUNCHER_KILLED.describe())
    assert c.cause == "signal_killed"


def test_first_death_applied_to_a_live_classification_says_the_log_holds_no_failure_line():
    ready = classify(READY_THEN_PROBES)
    assert ready.state == "ready" and ready.line_in_log and "fired up" in (ready.line or "")
    _no_line(apply_first_death(ready, LAUNCHER_KILLED, KILL), LAUNCHER_KILLED.describe())
    _no_line(apply_first_death(classify(READY_THEN_PROBES, KILL), LAUNCHER_KILLED, KILL), LAUNCHER_KILLED.describe())


def test_a_logged_unspecific_failure_keeps_the_death_without_the_no_line_sentence():
    log = ("[2025-01-01 10:00:05] Load weight begin. avail mem=70.00 GB\n"
           "Traceback (most recent call last):\n"
           '  File "launch_server.py", line 1, in <module>\n'
           "RuntimeError: something odd\n")
    c = classify(log, KILL)
    assert c.state == "failed" and c.cause == "other" and c.line_in_log
    assert c.line == "RuntimeError: something odd"
    d = apply_first_death(c, LAUNCHER_KILLED, KILL)
    assert d is not None and d.line == LAUNCHER_KILLED.describe() and not d.line_in_log


def test_a_real_failure_line_is_the_decisive_line():
    log = READY_THEN_PROBES + (
        "[2025-01-01 10:00:50 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "scheduler.py", line 1, in event_loop\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    c = classify(log, KILL, LAUNCHER_KILLED)
    assert c.state == "failed" and c.cause == "gpu_oom" and c.line_in_log
    assert c.line is not None and "CUDA out of memory" in c.line


class _Events:
    """A classifier sink that records the kinds of events a line makes."""

    def __init__(self) -> None:
        self.kinds: set[str] = set()

    def seen(self, line: object) -> None: ...
    def is_sglang(self) -> bool: return False
    def ready(self, raw: str, explicit: bool) -> None: self.kinds.add("ready")
    def serving(self, raw: str) -> None: self.kinds.add("serving")
    def probe(self, raw: str) -> None: self.kinds.add("probe")
    def progress(self) -> None: self.kinds.add("progress")
    def stop(self, raw: str, seq: int, sigterm: bool) -> None: self.kinds.add("stop")
    def failure(self, f: object) -> None: self.kinds.add("failure")
    def metric(self, name: str, value: float) -> None: self.kinds.add("metric")
    def stopped_run(self) -> bool: return False


def _normal_line(line: str) -> bool:
    """The line, read alone, is a ready, serving, probe, progress or metrics line (no failure line)."""
    from console.core.classify.events import Reader

    sink, reader = _Events(), Reader()
    reader.line(line, sink)  # type: ignore[arg-type]
    reader.close(sink)  # type: ignore[arg-type]
    return bool(sink.kinds & {"ready", "serving", "probe", "progress", "metric"})


EXITS = [ExitRecord(signal=9, ended_at=0.0), ExitRecord(exit_code=1, ended_at=0.0), None]


@pytest.mark.parametrize("exit", EXITS, ids=["sigkill", "code1", "no-exit"])
def test_corpus_no_failed_classification_shows_a_non_failure_line(exit):
    """Property over every real log: a failure's line is never a ready, serving, probe or progress line."""
    bad = []
    for path in sorted(REAL.glob("*.log")):
        c = classify_file(path, exit)
        if c.state != "failed" or c.line is None:
            continue
        if c.line_in_log:
            if _normal_line(c.line):
                bad.append(f"{path.name}: {c.line[:120]}")
        else:
            assert c.line.startswith(NO_FAILURE_LINE), (path.name, c.line)
    assert not bad, "non-failure lines shown as decisive:\n" + "\n".join(bad)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONIOENCODING="utf-8")
    return subprocess.run([sys.executable, "-m", "console", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)


def test_classify_log_with_signal_kill_shows_no_ready_line_as_decisive(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(READY_THEN_PROBES)
    r = cli("classify-log", str(log), "--signal", "KILL")
    assert r.returncode == 0, r.stderr
    assert "line:    no failure line in the log; the server was killed by SIGKILL" in r.stdout, r.stdout
    assert "fired up" not in r.stdout and "GET /health" not in r.stdout
    j = json.loads(cli("--json", "classify-log", str(log), "--signal", "KILL").stdout)[0]
    assert j["line"] == "no failure line in the log; the server was killed by SIGKILL" and j["line_in_log"] is False
