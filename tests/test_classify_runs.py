"""One server run at a time (issue 24, item 4).

A log holding several server runs (a restart appended to the same file) is classified from the last run:
a start banner (SGLang's ``server_args=``, vLLM's ``vLLM API server version``) begins a new run once the
previous one reached ready or went down; the same banner printed by several ranks or nodes of one start does
not split the log. Checked on the incident's shape (old READY run, new run dying of OOM), through every
reader (whole text, chunks, a big file's head + tail, ``classify-log``, the report), and as a property over
the real-log corpus: log A then log B classifies as B alone whenever A reached ready or went down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.core.classify import LogClassifier, classify, classify_file, classify_last_run
from console.core.report import ReportInputs, build_report
from console.model import Classification, ExitRecord

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "tests" / "data" / "real-logs"

OLD_READY = (
    "[2026-03-01 09:00:00] server_args=ServerArgs(model_path='/models/m', port=30000, tp_size=1)\n"
    "[2026-03-01 09:00:05] Load weight begin. avail mem=70.00 GB\n"
    "[2026-03-01 09:00:30] The server is fired up and ready to roll!\n"
    "[2026-03-01 09:05:00] Decode batch, #running-req: 48, #token: 90000, token usage: 0.40, cuda graph: True, "
    "gen throughput (token/s): 27.00, #queue-req: 8, \n"
)
NEW_OOM = (
    "[2026-03-02 10:00:00] server_args=ServerArgs(model_path='/models/m', port=30000, tp_size=1)\n"
    "[2026-03-02 10:00:05] Load weight begin. avail mem=70.00 GB\n"
    "[2026-03-02 10:00:20 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2000, in run_scheduler_process\n'
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.19 GiB of which 1.06 GiB is free.\n"
    "[2026-03-02 10:00:21] Received sigquit from a child process. It usually means the child failed.\n"
)


def _same(a: Classification, b: Classification) -> None:
    assert (a.state, a.cause, a.line, a.hint, a.metrics) == (b.state, b.cause, b.line, b.hint, b.metrics)


def test_the_incident_new_oom_run_is_not_given_the_old_runs_metrics():
    c = classify(OLD_READY + NEW_OOM)
    assert (c.state, c.cause) == ("failed", "gpu_oom")
    assert c.metrics is None, "27 tok/s and queue 8 were the old run's"
    assert c.runs_skipped == 1 and c.run_started_line is not None and "2026-03-02" in c.run_started_line
    _same(c, classify(NEW_OOM))
    assert classify(NEW_OOM).runs_skipped == 0


@pytest.mark.parametrize("size", [1, 7, 64, 4096])
def test_chunked_feed_and_the_runs_text(size):
    text = OLD_READY + NEW_OOM
    clf = LogClassifier()
    for i in range(0, len(text), size):
        clf.feed(text[i:i + size])
    _same(clf.result(), classify(NEW_OOM))
    assert text[clf.run_start:] == NEW_OOM
    c, run = classify_last_run(text)
    assert run == NEW_OOM and c.runs_skipped == 1


def test_three_runs_count_two_skipped():
    c = classify(OLD_READY + OLD_READY + NEW_OOM)
    assert c.runs_skipped == 2 and c.cause == "gpu_oom" and c.metrics is None


def test_banners_of_several_ranks_or_nodes_of_one_start_do_not_split():
    start = "".join(f"[2026-03-02 10:00:0{i}] server_args=ServerArgs(model_path='/m', node_rank={i})\n"
                    for i in range(4))
    log = start + NEW_OOM.split("\n", 1)[1]
    c = classify(log)
    assert c.runs_skipped == 0 and c.cause == "gpu_oom"
    # a banner between two ranks' start-up lines, still before ready: the same start
    mixed = OLD_READY.split("The server")[0].rsplit("\n", 1)[0] + "\n" + OLD_READY.split("\n")[0] + "\n"
    assert classify(mixed).runs_skipped == 0


def test_a_banner_after_a_going_down_line_starts_a_run():
    stopped = (OLD_READY.split("\n")[0] + "\n[2026-03-01 09:00:05] Load weight begin. avail mem=70.00 GB\n"
               "[2026-03-01 09:00:06] Received sigquit from a child process. It usually means the child failed.\n")
    c = classify(stopped + NEW_OOM)
    assert c.runs_skipped == 1
    _same(c, classify(NEW_OOM))


def test_a_banner_after_a_run_still_loading_is_the_same_start():
    loading = OLD_READY.split("\n")[0] + "\n[2026-03-01 09:00:05] Load weight begin. avail mem=70.00 GB\n"
    assert classify(loading + NEW_OOM).runs_skipped == 0


def test_vllm_restart_after_ready():
    old = ("INFO 09-28 15:40:00 [api_server.py:1805] vLLM API server version 0.10.1\n"
           "INFO 09-28 15:41:00 [launcher.py:37] Application startup complete.\n"
           "INFO 09-28 15:42:00 [loggers.py:123] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
           "Avg generation throughput: 27.0 tokens/s, Running: 4 reqs, Waiting: 8 reqs, GPU KV cache usage: 40.0%\n")
    new = ("INFO 09-29 10:00:00 [api_server.py:1805] vLLM API server version 0.10.1\n"
           "INFO 09-29 10:00:30 [gpu_model_runner.py:1] Loading model weights took 14.9 GiB\n"
           "ERROR 09-29 10:00:40 [core.py:700] EngineCore failed to start.\n"
           "ERROR 09-29 10:00:40 [core.py:700] Traceback (most recent call last):\n"
           'ERROR 09-29 10:00:40 [core.py:700]   File "core.py", line 1, in run_engine_core\n'
           "ERROR 09-29 10:00:40 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n")
    c = classify(old + new)
    assert c.runs_skipped == 1 and c.cause == "gpu_oom" and c.metrics is None
    _same(c, classify(new))


def test_a_big_files_restart_in_the_skipped_middle_is_found(tmp_path):
    filler = "".join(f"[2026-03-01 09:{m:02d}:00] Decode batch, #running-req: 48, #token: 90000, token usage: 0.40, "
                     f"cuda graph: True, gen throughput (token/s): 27.00, #queue-req: 8, \n" for m in range(60)) * 40
    new_head, new_rest = NEW_OOM.split("\n", 1)
    padding = "".join(f"[2026-03-02 10:00:1{i % 10}] Load weight begin. avail mem=70.00 GB\n" for i in range(3000))
    path = tmp_path / "server.log"
    path.write_text(OLD_READY + filler + new_head + "\n" + padding + new_rest)
    tail = len((padding + new_rest).encode()) - 1000  # the new run's banner is in the skipped middle
    c = classify_file(path, tail_bytes=tail, head_scan_bytes=1 << 20)
    assert (c.state, c.cause, c.metrics, c.runs_skipped) == ("failed", "gpu_oom", None, 1), c


def test_report_reads_and_excerpts_the_last_run_and_says_so():
    c, run = classify_last_run(OLD_READY + NEW_OOM, ExitRecord(signal=9, ended_at=0.0))
    md = build_report(ReportInputs(host="h", session_id="s", classification=c, state="failed",
                                   log_lines=run.splitlines()))
    assert "| Log | read from the last of 2 server runs in it (earlier runs skipped) |" in md
    assert "27.00" not in md and "2026-03-01" not in md
    assert "CUDA out of memory" in md


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONIOENCODING="utf-8")
    return subprocess.run([sys.executable, "-m", "console", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)


def test_classify_log_says_earlier_runs_were_skipped(tmp_path):
    log = tmp_path / "two-runs.log"
    log.write_text(OLD_READY + NEW_OOM)
    r = cli("classify-log", str(log))
    assert r.returncode == 0, r.stderr
    assert "FAILED (gpu_oom)" in r.stdout and "27.0 tok/s" not in r.stdout and "queue 8" not in r.stdout
    assert "run:     the last of 2 server runs in the file (1 earlier skipped), from: [2026-03-02 10:00:00]" in r.stdout
    (j,) = json.loads(cli("--json", "classify-log", str(log)).stdout)
    assert (j["cause"], j["metrics"], j["runs_skipped"]) == ("gpu_oom", None, 1)
    assert j["run_started_line"].startswith("[2026-03-02 10:00:00] server_args=")


# ---------------------------------------------------------------- the property, over the real-log corpus

SGLANG_BANNER = "[2026-01-01 00:00:00] server_args=ServerArgs(model_path='/models/m', port=30000)"
VLLM_BANNER = "INFO 01-01 00:00:00 [api_server.py:1805] vLLM API server version 0.10.1"


@cache
def corpus() -> tuple[tuple[str, str], ...]:
    """(name, text) of every real log, decoded as the classifier decodes files."""
    return tuple((p.name, p.read_bytes().decode("utf-8", "replace")) for p in sorted(REAL.glob("*.log")))


def _started(name: str, text: str) -> str:
    """The log as one server run: its framework's start banner, then the log."""
    return (VLLM_BANNER if name.startswith("vllm") else SGLANG_BANNER) + "\n" + text


def _ended_run(text: str) -> bool:
    """The text, read whole, reached ready or went down (what lets the next banner begin a run)."""
    clf = LogClassifier()
    clf.feed(text if text.endswith("\n") else text + "\n")
    return clf.run_over()


@cache
def ended_runs() -> tuple[str, ...]:
    return tuple(text for _, text in corpus() if _ended_run(text))


def _check_pair(a: str, b_name: str, b: str, exit: ExitRecord | None) -> None:
    b1 = _started(b_name, b)
    joined = a if a.endswith("\n") else a + "\n"
    got, alone = classify(joined + b1, exit), classify(b1, exit)
    _same(got, alone)
    assert got.runs_skipped == alone.runs_skipped + 1 + classify(joined, exit).runs_skipped


def test_most_real_logs_end_their_run():
    assert len(ended_runs()) >= 0.6 * len(corpus())  # the property below is not vacuous


@pytest.mark.parametrize("exit", [None, ExitRecord(signal=9, ended_at=0.0)], ids=["live", "sigkill"])
def test_every_real_log_after_an_ended_run_classifies_alone(exit):
    a = OLD_READY
    for name, b in corpus():
        _check_pair(a, name, b, exit)


def test_an_ended_real_log_before_a_new_run_changes_nothing():
    for a in ended_runs():
        _check_pair(a, "sglang-new-oom.log", NEW_OOM, None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_ended_real_log_then_any_real_log_classifies_as_the_second(data):
    a = data.draw(st.sampled_from(ended_runs()))
    b_name, b = data.draw(st.sampled_from(corpus()))
    _check_pair(a, b_name, b, data.draw(st.sampled_from([None, ExitRecord(signal=9, ended_at=0.0),
                                                         ExitRecord(exit_code=1, ended_at=0.0)])))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_repeated_banners_of_one_start_do_not_split_a_real_log(data):
    name, b = data.draw(st.sampled_from(corpus()))
    banner = (VLLM_BANNER if name.startswith("vllm") else SGLANG_BANNER) + "\n"
    k = data.draw(st.integers(min_value=2, max_value=4))
    many, one = classify(banner * k + b), classify(banner + b)
    _same(many, one)
    assert many.runs_skipped == one.runs_skipped
