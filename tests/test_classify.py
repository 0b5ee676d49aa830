"""The log classifier: realistic SGLang/vLLM logs, exit-record semantics, incremental feeding,
garbage and big input."""

from __future__ import annotations

import random
import time
import tracemalloc
from pathlib import Path

import pytest

from console.core.classify import (
    MAX_LINE,
    LogClassifier,
    apply_first_death,
    classify,
    classify_file,
    failure_tail,
)
from console.core.classify.hints import CUT_GUESS
from console.model import ExitRecord, ProcessExit, ServeMetrics

LOGS = Path(__file__).resolve().parent / "data" / "logs"


def log(name: str) -> str:
    return (LOGS / name).read_bytes().decode("utf-8", errors="replace")


def ex(**kw) -> ExitRecord:
    kw.setdefault("ended_at", 1.0)
    return ExitRecord(**kw)


# ---------------------------------------------------------------- every log, no exit record

CASES = [
    # file, state, cause, text the decisive line must contain
    ("incident_loading.log", "loading", None, None),
    ("incident_gpu_oom.log", "failed", "gpu_oom", "Not enough memory. Please try to increase --mem-fraction-static."),
    ("sglang_0523_ready_eagle.log", "ready", None, "fired up and ready to roll"),
    ("sglang_0410_ready.log", "ready", None, "fired up and ready to roll"),
    ("sglang_tp4_hybrid_ready.log", "ready", None, "fired up and ready to roll"),
    ("sglang_dp2_serving_scrolled.log", "ready", None, "Decode batch"),
    ("sglang_healthy_scary_warnings.log", "ready", None, "fired up and ready to roll"),
    ("vllm_ready_stats.log", "ready", None, "Application startup complete"),
    ("vllm_loading.log", "loading", None, None),
    ("vllm_gpu_oom.log", "failed", "gpu_oom", "No available memory for the cache blocks"),
    ("cuda_oom_torch.log", "failed", "gpu_oom", "torch.OutOfMemoryError: CUDA out of memory"),
    ("capture_graph_failed.log", "failed", "gpu_oom", "Capture cuda graph failed"),
    ("runtime_oom_after_ready.log", "failed", "gpu_oom", "Decode out of memory. Try to lower your batch size."),
    ("crash_after_ready_generic.log", "failed", "other", "KeyError: 'rid-7f3a'"),
    ("host_oom_rank_died.log", "failed", "signal_killed", "Rank 0 scheduler died during initialization (exit code: -9)"),
    ("port_in_use.log", "failed", "port_in_use", "address already in use"),
    ("port_in_use_zmq.log", "failed", "port_in_use", "Address already in use"),
    ("model_not_found_local.log", "failed", "model_not_found", "does not appear to have a file named config.json"),
    ("model_not_found_repo.log", "failed", "model_not_found", "RepositoryNotFoundError"),
    ("model_hf_validation.log", "failed", "model_not_found", "HFValidationError"),
    ("import_error.log", "failed", "import_error", "ModuleNotFoundError: No module named 'sgl_kernel'"),
    ("nccl_error.log", "failed", "nccl_error", "NCCL error"),
    ("bad_flags_unrecognized.log", "failed", "bad_flags", "unrecognized arguments: --mamba-scheduler-strategy"),
    ("bad_flags_ambiguous.log", "failed", "bad_flags", "ambiguous option: --cuda-graph-max-bs"),
    ("bad_flags_invalid_choice.log", "failed", "bad_flags", "invalid choice: 'flashattn'"),
    ("cuda_driver.log", "failed", "cuda_driver", "NVIDIA driver on your system is too old"),
    ("cuda_no_device.log", "failed", "cuda_driver", "CUDA driver version is insufficient"),
    ("cuda_illegal_after_ready.log", "failed", "cuda_driver", "illegal memory access"),
    ("spec_assert.log", "failed", "spec_decode_error", "assert self.speculative_num_steps is not None"),
    ("spec_draft_failed.log", "failed", "spec_decode_error", "RuntimeError: shape"),
    ("signal_killed_loading.log", "loading", None, None),
    ("warmup_failed.log", "failed", "warmup_failed", "Initialization failed. warmup error"),
]


@pytest.mark.parametrize("name,state,cause,needle", CASES, ids=[c[0] for c in CASES])
def test_log_files(name, state, cause, needle):
    c = classify(log(name))
    assert (c.state, c.cause) == (state, cause)
    if needle is None:
        assert c.line is None
    else:
        assert c.line is not None and needle in c.line
    if state == "failed":
        assert c.hint
    else:
        assert c.hint is None


def test_every_cause_has_a_log():
    causes = {c[2] for c in CASES if c[2]}
    # host_oom_killed and signal_killed need an exit record: covered below.
    assert causes >= {
        "gpu_oom", "port_in_use", "model_not_found", "import_error", "nccl_error", "bad_flags",
        "cuda_driver", "signal_killed", "spec_decode_error", "other",
    }


def test_incident_oom_decisive_line_and_hint():
    c = classify(log("incident_gpu_oom.log"))
    assert c.line == "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    assert "sigquit" not in c.line
    assert "--mem-fraction-static" in c.hint
    assert "--max-running-requests" in c.hint
    assert "sglang::" in c.hint


def test_incident_banner_is_loading_not_failed():
    c = classify(log("incident_loading.log"))
    assert c.state == "loading" and c.cause is None and c.metrics is None


# ---------------------------------------------------------------- metrics

def test_metrics_sglang_0523_eagle():
    assert classify(log("sglang_0523_ready_eagle.log")).metrics == ServeMetrics(
        gen_throughput=2291.70, accept_len=3.41, running_req=48, queue_req=7, token_usage=0.08)


def test_metrics_sglang_0410_period_format():
    assert classify(log("sglang_0410_ready.log")).metrics == ServeMetrics(
        gen_throughput=148.21, accept_len=None, running_req=1, queue_req=0, token_usage=0.0)


def test_metrics_hybrid_full_token_usage_and_tp_prefix():
    assert classify(log("sglang_tp4_hybrid_ready.log")).metrics == ServeMetrics(
        gen_throughput=1162.08, accept_len=2.97, running_req=48, queue_req=791, token_usage=0.13)


def test_metrics_dp_prefixes_last_line_wins():
    assert classify(log("sglang_dp2_serving_scrolled.log")).metrics == ServeMetrics(
        gen_throughput=1702.93, accept_len=None, running_req=63, queue_req=2, token_usage=0.23)


def test_metrics_vllm():
    assert classify(log("vllm_ready_stats.log")).metrics == ServeMetrics(
        gen_throughput=1534.9, accept_len=2.71, running_req=37, queue_req=5, token_usage=0.183)


def test_metrics_kept_when_failed_after_ready():
    m = classify(log("runtime_oom_after_ready.log")).metrics
    assert m == ServeMetrics(gen_throughput=3001.12, running_req=120, queue_req=40, token_usage=0.97)


def test_prefill_line_does_not_set_gen_throughput():
    c = classify("[2026-10-30 12:00:00] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, "
                 "token usage: 0.25, #running-req: 3, #queue-req: 9, \n")
    assert c.state == "ready"
    assert c.metrics == ServeMetrics(running_req=3, queue_req=9, token_usage=0.25)


# ---------------------------------------------------------------- hints

def test_bad_flags_hint_names_flag_and_drift():
    c = classify(log("bad_flags_unrecognized.log"))
    assert "--mamba-scheduler-strategy" in c.hint and "drift" in c.hint
    assert "--mamba-radix-cache-strategy" in c.hint


def test_bad_flags_ambiguous_hint_lists_candidates():
    c = classify(log("bad_flags_ambiguous.log"))
    assert "--cuda-graph-max-bs" in c.hint and "--cuda-graph-max-bs-decode" in c.hint


def test_port_hint_names_port():
    assert "30000" in classify(log("port_in_use.log")).hint


def test_import_hint_names_module():
    assert "sgl_kernel" in classify(log("import_error.log")).hint


def test_vllm_oom_hint_uses_vllm_flags():
    assert "--gpu-memory-utilization" in classify(log("vllm_gpu_oom.log")).hint


# ---------------------------------------------------------------- exit record semantics

def test_scheduler_sigkill_with_oom_kill_rise_is_host_oom():
    c = classify(log("host_oom_rank_died.log"), ex(exit_code=1, oom_kill_before=3, oom_kill_after=4))
    assert (c.state, c.cause) == ("failed", "host_oom_killed")
    assert "scheduler died" in c.line
    assert "oom_kill" in c.hint and "3 -> 4" in c.hint


def test_scheduler_sigkill_without_oom_kill_rise_is_signal_killed():
    c = classify(log("host_oom_rank_died.log"), ex(signal=9, oom_kill_before=3, oom_kill_after=3))
    assert c.cause == "signal_killed"
    assert "did not rise" in c.hint


def test_loading_then_sigkill_is_signal_killed():
    c = classify(log("signal_killed_loading.log"), ex(signal=9))
    assert (c.state, c.cause) == ("failed", "signal_killed")
    assert "SIGKILL" in c.hint
    assert c.line  # the last line the server wrote


def test_loading_then_sigkill_with_oom_rise_is_host_oom():
    c = classify(log("signal_killed_loading.log"), ex(signal=9, oom_kill_before=0, oom_kill_after=1))
    assert c.cause == "host_oom_killed"


def test_exit_137_counts_as_sigkill():
    assert classify(log("signal_killed_loading.log"), ex(exit_code=137)).cause == "signal_killed"


def test_log_cause_beats_the_signal():
    # SGLang's launcher SIGKILLs its own tree after a child failed: the log names the cause.
    c = classify(log("incident_gpu_oom.log"), ex(signal=9, oom_kill_before=1, oom_kill_after=2))
    assert c.cause == "gpu_oom" and "Not enough memory" in c.line


def test_exit_0_before_ready_is_failed_other():
    c = classify(log("incident_loading.log"), ex(exit_code=0))
    assert (c.state, c.cause) == ("failed", "other")
    assert "code 0" in c.hint and "before it was ready" in c.hint


def test_exit_after_ready_is_failed():
    c = classify(log("sglang_0523_ready_eagle.log"), ex(signal=9))
    assert (c.state, c.cause) == ("failed", "signal_killed")
    assert c.metrics is not None


def test_sigterm_from_outside_after_ready():
    text = log("sglang_0410_ready.log") + (
        "[2025-08-02 10:00:00] SIGTERM received. signum=15, frame=None. Draining requests and shutting down...\n")
    c = classify(text)
    assert c.state == "stopped" and "SIGTERM" in c.line  # the log shows a stop, no crash
    c = classify(text, ex(exit_code=0))  # it drained and exited by itself: a clean stop, from outside the console
    assert (c.state, c.cause) == ("stopped", None)
    assert "SIGTERM" in c.line and "from outside mtpconsole" in c.hint
    c = classify(text, ex(exit_code=1))  # an error exit after the SIGTERM is not a clean stop
    assert (c.state, c.cause) == ("failed", "other")
    assert "SIGTERM" in c.line and "SIGTERM" in c.hint


DRAIN = ("[2026-11-30 10:00:06] SIGTERM received. signum=15, frame=<frame at 0x7f3a>\n"
         "[2026-11-30 10:00:06] Gracefully exiting... Remaining number of requests 3\n"
         "[2026-11-30 10:00:11] Gracefully exiting... Remaining number of requests 0\n")


@pytest.mark.parametrize("end", [dict(exit_code=137), dict(exit_code=-9), dict(signal=9), dict(exit_code=0)])
def test_sigterm_drain_ended_by_sglangs_own_sigkill_is_a_clean_stop(end):
    """SGLang drains on SIGTERM, then SIGKILLs its own tree: exit 137 after ``Gracefully exiting...`` is a stop."""
    c = classify(log("sglang_0410_ready.log") + DRAIN, ex(**end))
    assert (c.state, c.cause) == ("stopped", None)
    assert "SIGTERM" in (c.line or "") and "from outside mtpconsole" in (c.hint or "")


def test_sigterm_drain_is_not_a_stop_when_the_oom_killer_fired_or_a_crash_came_first():
    text = log("sglang_0410_ready.log") + DRAIN
    assert classify(text, ex(exit_code=137, oom_kill_before=4, oom_kill_after=5)).state == "failed"
    crashed = (log("sglang_0410_ready.log") + "[2026-11-30 10:00:05] TP0 Scheduler hit an exception: Traceback "
               "(most recent call last):\nRuntimeError: CUDA error: an illegal memory access was encountered\n" + DRAIN)
    c = classify(crashed, ex(exit_code=137))
    assert (c.state, c.cause) == ("failed", "cuda_driver")


def test_exit_code_2_with_argparse_is_bad_flags():
    assert classify(log("bad_flags_unrecognized.log"), ex(exit_code=2)).cause == "bad_flags"


def test_exec_failure_from_supervisor():
    c = classify("", ex(error="[Errno 2] No such file or directory: 'python3.12'"))
    assert (c.state, c.cause) == ("failed", "other")
    assert c.line == "[Errno 2] No such file or directory: 'python3.12'"


def test_stopped_by_operator_keeps_ready_and_loading():
    stop = ex(signal=15, stopped_by_operator=True)
    assert classify(log("sglang_0523_ready_eagle.log"), stop).state == "stopped"
    assert classify(log("incident_loading.log"), stop).state == "stopped"
    # What the stop itself produces is no crash.
    text = log("incident_loading.log") + (
        "[2026-10-30 11:58:30] Received sigquit from a child process. It usually means the child failed.\n")
    assert classify(text, stop).state == "stopped"
    assert classify(text).state == "failed"  # without the record, it is a failure


def test_stopped_by_operator_after_a_crash_is_failed():
    stop = ex(signal=9, stopped_by_operator=True)
    c = classify(log("incident_gpu_oom.log"), stop)
    assert (c.state, c.cause) == ("failed", "gpu_oom")
    c = classify(log("crash_after_ready_generic.log"), stop)
    assert (c.state, c.cause) == ("failed", "other")


def test_no_exit_nothing_fatal_is_loading():
    assert classify("[2026-10-30 12:00:00] Load weight begin. avail mem=78.61 GB\n").state == "loading"


# ---------------------------------------------------------------- ready and after ready

def test_fatal_after_ready_fails():
    base = log("sglang_0523_ready_eagle.log")
    for tail in (
        "[2026-10-30 13:00:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n",
        ("[2026-10-30 13:00:00] Scheduler hit an exception: Traceback (most recent call last):\n"
        "  File \"scheduler.py\", line 1, in event_loop\n    x()\nKeyError: 3\n"),
        "[2026-10-30 13:00:00] Prefill out of memory. Try to lower your batch size.\n",
    ):
        assert classify(base + tail).state == "failed", tail


def test_handled_request_errors_after_ready_stay_ready():
    c = classify(log("sglang_healthy_scary_warnings.log"))
    assert c.state == "ready"
    # Even with exit-free trailing noise after the last serving line.
    c = classify(log("sglang_healthy_scary_warnings.log") + "ValueError: bad JSON in request\n")
    assert c.state == "ready"


def test_sglang_uvicorn_startup_is_not_ready():
    text = ("[2026-10-30 12:00:26] INFO:     Application startup complete.\n"
            "[2026-10-30 12:00:26] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)\n")
    assert classify(text).state == "loading"


def test_health_503_is_not_ready_but_200_is():
    l503 = '[2026-10-30 12:00:26] INFO:     127.0.0.1:4000 - "GET /health HTTP/1.1" 503 Service Unavailable\n'
    l200 = '[2026-10-30 12:00:27] INFO:     127.0.0.1:4000 - "GET /health HTTP/1.1" 200 OK\n'
    models = '[2026-10-30 12:00:26] INFO:     127.0.0.1:4000 - "GET /v1/models HTTP/1.1" 200 OK\n'
    assert classify(l503 + models).state == "loading"
    assert classify(l503 + l200).state == "ready"


def test_warning_mentioning_errors_before_ready_is_not_fatal():
    text = ("/x/torch/cuda/__init__.py:63: UserWarning: CUDA error: unknown error; NCCL error maybe\n"
            "  warnings.warn(\n"
            "[2026-10-30 12:00:00] Ignore import error when loading sglang.srt.models.x: No module named 'y'\n"
            "[2026-10-30 12:00:01] Load weight begin. avail mem=78.61 GB\n")
    assert classify(text).state == "loading"


def test_error_then_progress_is_not_failed_but_root_cause_survives_for_tp():
    # tp>1: rank 1 OOMs, rank 0 still logs progress, then the launcher goes down.
    text = ("[2026-10-30 12:00:00 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
            "  File \"model_runner.py\", line 9, in load\n    w.to(dev)\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
            "[2026-10-30 12:00:00 TP0] Load weight end. elapsed=3.00 s, type=X, avail mem=1.00 GB, mem usage=9.00 GB.\n"
            "[2026-10-30 12:00:01] Rank 1 scheduler died during initialization (exit code: 1).\n"
            "[2026-10-30 12:00:01] Received sigquit from a child process. It usually means the child failed.\n")
    c = classify(text)
    assert (c.state, c.cause) == ("failed", "gpu_oom")
    assert "CUDA out of memory" in c.line


def test_most_specific_cause_wins_over_consequences():
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n"
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited\n"
            "[2026-10-30 12:00:01] Received sigquit from a child process. It usually means the child failed.\n")
    assert classify(text).cause == "gpu_oom"


# ---------------------------------------------------------------- incremental feeding

def _chunked(text: str, rng: random.Random, max_chunk: int) -> LogClassifier:
    clf = LogClassifier()
    i = 0
    while i < len(text):
        n = rng.randint(1, max_chunk)
        clf.feed(text[i:i + n])
        i += n
    return clf


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_chunked_feeding_equals_whole_text(name):
    text = log(name)
    rng = random.Random(name)
    whole = classify(text)
    exit = ex(signal=9, oom_kill_before=1, oom_kill_after=2)
    for max_chunk in (1, 7, 300):
        clf = _chunked(text, rng, max_chunk)
        assert clf.result() == whole
        assert clf.result(exit) == classify(text, exit)


def test_feed_bytes_joins_split_utf8_and_replaces_invalid():
    data = ("[2026-10-30 12:00:00] Load weight begin. ✓ données\n".encode() + b"\xff\xfe bad\n"
            + "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. é\n".encode())
    clf = LogClassifier()
    for i in range(len(data)):
        clf.feed_bytes(data[i:i + 1])
    c = clf.result()
    assert c.cause == "gpu_oom" and c.line.endswith("é")
    assert c == classify(data.decode("utf-8", errors="replace"))


def test_result_includes_unterminated_last_line_without_consuming_it():
    clf = LogClassifier()
    clf.feed("[2026-10-30 12:00:00] Load weight begin. avail mem=78.61 GB\nRuntimeError: Not enough mem")
    assert clf.result().cause == "other"  # an exception ends the log so far, not yet the OOM
    clf.feed("ory. Please try to increase --mem-fraction-static.")
    assert clf.result().cause == "gpu_oom"
    assert clf.result().cause == "gpu_oom"  # result() does not change the state
    assert clf.lines_seen == 1
    clf.feed("\n")
    assert clf.lines_seen == 2 and clf.result().cause == "gpu_oom"


def test_crlf_and_carriage_return_progress_bars():
    text = log("incident_gpu_oom.log").replace("\n", "\r\n")
    assert classify(text) == classify(log("incident_gpu_oom.log"))
    bars = "".join(f"\rLoading safetensors checkpoint shards: {i}% Completed" for i in range(100))
    assert classify(bars + "\n").state == "loading"


# ---------------------------------------------------------------- garbage and big input

def test_garbage_bytes_never_raise():
    rng = random.Random(1234)
    for _ in range(20):
        data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 4000)))
        c = classify(data.decode("utf-8", errors="replace"))
        assert c.state in ("loading", "failed", "ready")
    assert classify("").state == "loading"
    assert classify("\x00" * 10000).state == "loading"
    assert classify("\n" * 10000).state == "loading"


def test_ansi_and_nul_are_stripped_from_the_returned_line():
    text = ("\x1b[31m[2026-10-30 12:00:00] Scheduler hit an \x00exception: Traceback (most recent call last):\x1b[0m\n"
            "  File \"x.py\", line 1, in f\n"
            "\x1b[1;31mRuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\x1b[0m\x00\n")
    c = classify(text)
    assert c.cause == "gpu_oom"
    assert c.line == "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."


def test_one_megabyte_lines_are_capped():
    big = "x" * 1_000_000
    text = big + "\n" + big + "Not enough memory. Please try to increase --mem-fraction-static.\n"
    c = classify(text)
    # The fatal text lies beyond MAX_LINE characters of its line: not looked at.
    assert c.state == "loading"
    clf = LogClassifier()
    for i in range(0, len(big), 4096):
        clf.feed(big[i:i + 4096])
    clf.feed("\nRuntimeError: Not enough memory. Please try to increase --mem-fraction-static. " + big + "\n")
    c = clf.result()
    assert c.cause == "gpu_oom" and len(c.line) <= 1000
    assert clf.pending_chars == 0


def test_long_partial_line_memory_is_bounded():
    clf = LogClassifier()
    for _ in range(300):
        clf.feed("y" * 10_000)
    assert clf.pending_chars <= MAX_LINE


def test_100k_lines_fast_and_bounded():
    unit = (
        "[2026-10-30 12:01:06] Decode batch, #running-req: 48, #token: 31744, token usage: 0.08, accept len: 3.41, "
        "accept rate: 0.85, cuda graph: True, gen throughput (token/s): 2291.70, #queue-req: 7, \n"
        '[2026-10-30 12:01:06] INFO:     127.0.0.1:40400 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
        "[2026-10-30 12:01:06] Error in request: something went wrong, error code 17\n"
        "[2026-10-30 12:01:06] KV cache pool is full. Retract requests. #retracted_reqs: 1\n"
    )
    text = log("sglang_0523_ready_eagle.log") + unit * 25_000
    t0 = time.perf_counter()
    c = classify(text)
    elapsed = time.perf_counter() - t0
    assert c.state == "ready" and c.metrics.gen_throughput == 2291.70
    assert elapsed < 30, elapsed  # ~1 s on an idle core; 2 shared cores under load measured 9-16 s
    # Memory stays flat while feeding: nothing per line is kept.
    clf = LogClassifier()
    chunk = unit * 200
    tracemalloc.start()
    try:
        for _ in range(20):
            clf.feed(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(chunk) + 1_000_000


# ---------------------------------------------------------------- files

def test_classify_file_small_equals_classify(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes((LOGS / "incident_gpu_oom.log").read_bytes())
    assert classify_file(p) == classify(log("incident_gpu_oom.log"))


def test_classify_file_big_uses_tail_and_head_scan(tmp_path):
    p = tmp_path / "big.log"
    filler = "[2026-10-30 12:00:05] Some startup detail that is not interesting at all.\n" * 2000  # ~150 KB
    other = "[2026-10-30 12:30:00] INFO:     127.0.0.1:1 - \"GET /v1/models HTTP/1.1\" 200 OK\n"
    with open(p, "w") as f:
        f.write("[2026-10-30 12:00:00] Attention backend not specified. Use flashinfer backend by default.\n")
        f.write(filler)
        f.write("[2026-10-30 12:00:28] The server is fired up and ready to roll!\n")
        f.write(other * 40_000)  # ~3 MB of lines that prove nothing
    c = classify_file(p, tail_bytes=256 * 1024, head_scan_bytes=1024 * 1024)
    assert c.state == "ready" and "fired up" in c.line
    # Without the head scan reaching the ready line, the tail alone says "loading".
    c = classify_file(p, tail_bytes=256 * 1024, head_scan_bytes=100 * 1024)
    assert c.state == "loading"
    with open(p, "a") as f:
        f.write(log("runtime_oom_after_ready.log"))
    c = classify_file(p, tail_bytes=256 * 1024, head_scan_bytes=1024 * 1024)
    assert (c.state, c.cause) == ("failed", "gpu_oom")


def test_classify_file_unreadable_raises_oserror(tmp_path):
    with pytest.raises(OSError):
        classify_file(tmp_path / "missing.log")


def test_sigterm_from_elsewhere_hint_does_not_blame_oom():
    c = classify(log("signal_killed_loading.log"), ex(signal=15))
    assert c.cause == "signal_killed" and "SIGTERM" in c.hint and "OOM" not in c.hint


def test_operator_stop_noise_does_not_turn_handled_errors_into_a_crash():
    text = (log("sglang_healthy_scary_warnings.log")
            + "[2026-10-30 15:00:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n")
    assert classify(text).state == "failed"
    assert classify(text, ex(signal=15, stopped_by_operator=True)).state == "stopped"


def test_classify_file_big_vllm_ready_from_head(tmp_path):
    p = tmp_path / "vllm.log"
    filler = "(APIServer pid=2211) INFO 10-30 12:12:07 [logger.py:43] Received request chatcmpl-1: prompt\n"
    with open(p, "w") as f:
        f.write(log("vllm_loading.log"))
        f.write(filler * 1000)
        f.write("(APIServer pid=2211) INFO:     Application startup complete.\n")
        f.write(filler * 20_000)
    c = classify_file(p, tail_bytes=128 * 1024, head_scan_bytes=1024 * 1024)
    assert c.state == "ready" and "Application startup complete" in c.line


# ---------------------------------------------------------------- structural rules (issue 15)

def test_any_unhandled_exception_ending_the_log_is_failed():
    text = ("[2026-10-30 12:00:00] Load weight begin. avail mem=78.61 GB\n"
            "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    f()\n"
            "SomeBrandNewError: nobody wrote a rule for this\n")
    c = classify(text)
    assert (c.state, c.cause) == ("failed", "other")
    assert c.line == "SomeBrandNewError: nobody wrote a rule for this"
    # A bare 'Error:' line ending the log is an unhandled failure too.
    assert classify("Error: the engine could not start\n").state == "failed"


def test_log_cut_mid_traceback_is_failed_and_frames_are_never_decisive():
    text = ("[2026-10-30 12:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/x/scheduler.py", line 9, in run_scheduler_process\n    scheduler = Scheduler()\n')
    c = classify(text)
    assert c.state == "failed" and "Scheduler hit an exception" in c.line
    c = classify('  File "/x/model_runner.py", line 3, in load\n    self.load()\n')  # cut at both ends
    assert c.state == "failed" and not c.line.lstrip().startswith("File ")


def test_failure_line_and_its_traceback_are_one_event():
    text = ("(VllmWorkerProcess pid=232) ERROR 08-23 08:25:25 multiproc_worker_utils.py:226] Exception in worker "
            "VllmWorkerProcess while processing method init_device: NCCL error: unhandled system error (run with "
            "NCCL_DEBUG=INFO for details), Traceback (most recent call last):\n"
            "(VllmWorkerProcess pid=232) ERROR 08-23 08:25:25 multiproc_worker_utils.py:226]   File \"w.py\", "
            "line 1, in init_device\n")
    c = classify(text)
    assert (c.state, c.cause) == ("failed", "nccl_error") and "NCCL error: unhandled system error" in c.line


def test_exception_message_lines_belong_to_the_exception():
    text = ("Traceback (most recent call last):\n  File \"hub.py\", line 3, in cached_file\n    raise OSError(\n"
            "OSError: You are trying to access a gated repo.\n"
            "Make sure to have access to it at https://huggingface.co/meta-llama/Llama-3.2-1B-Instruct.\n"
            "401 Client Error. (Request ID: Root=1-695139c1)\n")
    c = classify(text)
    assert (c.state, c.cause) == ("failed", "model_not_found")


def test_capture_failure_not_about_memory_is_cuda_graph_not_oom():
    text = ("[2026-10-30 12:00:00] Capture cuda graph begin. This can take up to several minutes. avail mem=9.1 GB\n"
            "[2026-10-30 12:00:01] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/x/cuda_graph_runner.py", line 300, in capture\n    out = run_once()\n'
            "RuntimeError: CUDA error: operation not permitted when stream is capturing\n")
    c = classify(text)
    assert (c.state, c.cause) == ("failed", "cuda_graph")
    assert "--disable-cuda-graph" in c.hint
    assert classify(log("capture_graph_failed.log")).cause == "gpu_oom"  # the memory case stays OOM


def test_real_sglang_0523_lines():
    text = ("[2026-11-29 20:15:30] server_args={'model_path': '/m', 'tp_size': 1}\n"
            "/x/launch_server.py:71: UserWarning: 'python -m sglang.launch_server' is still supported, but "
            "'sglang serve' is the recommended entrypoint.\n"
            "[2026-11-29 20:15:31] Init parallel begin.\n[2026-11-29 20:15:32] Init parallel ends.\n")
    assert classify(text).state == "loading"
    retry = "[2026-11-29 20:15:40] Retrying in 8s [Retry 5/5].\n"
    assert classify(text + retry).state == "loading"
    hf = ("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
          "'namespace/repo_name': '/models/missing'. Use `repo_type` argument if needed.\n")
    assert classify(text + hf).cause == "model_not_found"
    dead = ("[2026-11-29 20:16:00] Received sigquit from a child process. It usually means the child failed.\n"
            "RuntimeError: Rank 0 scheduler is dead. Please check if there are relevant logs.\n")
    assert classify(text + dead).state == "failed"


def test_operator_stop_lines_are_stopped_not_failed():
    ready = log("sglang_0410_ready.log")
    for tail in ("[2026-11-29 20:20:00] Received sig=15 signum=15 frame=<frame at 0x7f>\n"
                 "[2026-11-29 20:20:00] kill_process_tree called: parent_pid=4242\n",
                 "^C[2026-11-29 20:20:00] INFO:     Shutting down\n"):
        assert classify(ready + tail).state == "stopped", tail
    # A KeyboardInterrupt traceback after the stop is the stop's noise, not a crash.
    noise = ("[2026-11-29 20:20:00] SIGTERM received. signum=15, frame=None.\n"
             "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    loop()\nKeyboardInterrupt\n")
    assert classify(ready + noise).state == "stopped"
    vllm = ("(APIServer pid=1) INFO 05-26 19:19:56 [launcher.py:100] [shutdown] API server: shutdown triggered\n"
            "(APIServer pid=1) INFO:     Shutting down\n(APIServer pid=1) INFO:     Finished server process [1]\n")
    assert classify(log("vllm_ready_stats.log") + vllm).state == "stopped"
    # A crash before the stop stays a crash.
    assert classify(log("incident_gpu_oom.log") + noise).state == "failed"


def test_exit_record_outranks_the_log():
    ready = log("sglang_0523_ready_eagle.log")
    assert classify(ready).state == "ready"
    c = classify(ready, ex(exit_code=1))
    assert c.state == "failed"
    assert classify(log("incident_gpu_oom.log"), ex(signal=15, stopped_by_operator=True)).state == "failed"


def test_vllm_ready_stats_and_failures():
    text = ("(APIServer pid=1) INFO 05-13 14:15:33 [api_server.py:1131] Starting vLLM API server on http://0.0.0.0:8000\n"
            "(APIServer pid=1) INFO 05-19 10:13:51 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
            "Avg generation throughput: 1242.7 tokens/s, Running: 20 reqs, Waiting: 23 reqs, GPU KV cache usage: "
            "98.4%, Prefix cache hit rate: 0.0%\n")
    c = classify(text)
    assert c.state == "ready"
    assert c.metrics == ServeMetrics(gen_throughput=1242.7, running_req=20, queue_req=23, token_usage=0.984)
    oom = ("(EngineCore_DP0 pid=17374) ERROR 09-28 15:47:24 [core.py:718] ValueError: Free memory on device "
           "(3.22/4.0 GiB) on startup is less than desired GPU memory utilization (0.9, 3.6 GiB).\n")
    c = classify(oom)
    assert (c.state, c.cause) == ("failed", "gpu_oom") and "--gpu-memory-utilization" in c.hint
    flags = "usage: vllm [-h] [-v] {chat,complete,serve} ...\nvllm: error: unrecognized arguments: --omni\n"
    c = classify(flags)
    assert (c.cause, c.line) == ("bad_flags", "vllm: error: unrecognized arguments: --omni")


def test_argparse_usage_is_never_the_decisive_line_and_the_tail_skips_it():
    usage = ["usage: launch_server.py [-h] --model-path MODEL_PATH"] + [
        f"                        [--flag-{i} FLAG_{i}]" for i in range(470)]
    err = "launch_server.py: error: unrecognized arguments: --mamba-scheduler-strategy"
    c = classify("\n".join(usage + [err]) + "\n")
    assert (c.cause, c.line) == ("bad_flags", err)
    assert "--mamba-radix-cache-strategy" in c.hint  # the one rename table
    tail = failure_tail(["[x] starting"] + usage + [err], 30)
    assert tail == ["[x] starting", "[471 lines of usage left out]", err]


# ---------------------------------------------------------------- the first death decides

def _death(**kw) -> ProcessExit:
    kw.setdefault("pid", 4243)
    kw.setdefault("at", 10.0)
    return ProcessExit(**kw)


def test_first_death_by_signal_beats_the_launchers_follow_up():
    log_text = (log("sglang_0523_ready_eagle.log")
                + "[2026-10-30 13:00:00] Received sigquit from a child process. It usually means the child failed.\n")
    death = _death(signal=9, how="signal", role="worker", gpus=[1], tp_rank=1, oom_kill_delta=0)
    c = classify(log_text, ex(signal=9), first_death=death)
    assert (c.state, c.cause) == ("failed", "signal_killed")
    assert "TP1 worker" in c.line and "pid 4243" in c.line and "GPU 1" in c.line and "SIGKILL" in c.line
    assert "sigquit" not in c.line and "not the host OOM killer" in c.hint
    # Live, before the launcher's own exit record: the worker's death already decides.
    assert classify(log("sglang_0523_ready_eagle.log"), first_death=death).cause == "signal_killed"


def test_first_death_by_the_oom_killer():
    death = _death(signal=9, how="signal", role="worker", gpus=[0], tp_rank=0, oom_kill_delta=1)
    c = classify(log("incident_loading.log"), ex(signal=9), first_death=death)
    assert c.cause == "host_oom_killed" and "OOM killer" in c.hint


def test_first_death_does_not_hide_a_cause_the_log_names():
    death = _death(exit_code=1, how="exited", role="worker", gpus=[0])
    c = classify(log("incident_gpu_oom.log"), first_death=death)
    assert c.cause == "gpu_oom" and "Not enough memory" in c.line


def test_an_expected_end_after_a_stop_request_is_no_death():
    death = _death(signal=15, how="signal", role="worker", after_stop_request=True)
    assert classify(log("sglang_0523_ready_eagle.log"), first_death=death).state == "ready"


def test_apply_first_death_refines_a_live_classification():
    death = _death(signal=9, how="signal", role="worker", gpus=[1], tp_rank=1, oom_kill_delta=0)
    live = classify(log("sglang_0523_ready_eagle.log"))
    c = apply_first_death(live, death)
    assert (c.state, c.cause) == ("failed", "signal_killed") and "TP1 worker" in c.line
    assert c.metrics == live.metrics
    oom = classify(log("incident_gpu_oom.log"))
    assert apply_first_death(oom, death) == oom  # the log names the cause
    assert apply_first_death(live, None) is live
    stop = ex(signal=15, stopped_by_operator=True)
    assert apply_first_death(live, death, stop) is live
    assert apply_first_death(None, death).cause == "signal_killed"


def test_failure_tail_drops_usage_whose_start_scrolled_away():
    usage = [f"                        [--flag-{i} FLAG_{i}]" for i in range(200)]
    err = "launch_server.py: error: argument --tp-size: invalid int value: 'two'"
    assert failure_tail(usage + [err], 30) == ["[200 lines of usage left out]", err]
    plain = ["[x] Load weight begin.", "Traceback (most recent call last):", '  File "x.py", line 1', "KeyError: 3"]
    assert failure_tail(plain, 30) == plain


# ---------------------------------------------------------------- logs cut before the exception line

_HIT = "[2026-11-30 10:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
_GENERIC_FRAMES = ('  File "/x/sglang/srt/managers/scheduler.py", line 9, in run_scheduler_process\n'
                   "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)\n"
                   '  File "/x/sglang/srt/managers/scheduler.py", line 249, in __init__\n'
                   "    self.tp_worker = TpWorkerClass(\n")


GUESS_WORDS = {"nccl_error": "communication", "gpu_oom": "memory", "model_not_found": "model",
               "spec_decode_error": "speculative"}


def _guessed(c, cause: str) -> bool:
    """The file does not show the cause: ``other``, and the hint names the usual cause at that step as a guess."""
    return (c.state, c.cause) == ("failed", "other") and c.hint is not None and c.hint.startswith(CUT_GUESS) \
        and GUESS_WORDS[cause] in c.hint


@pytest.mark.parametrize(("progress", "cause", "shown"), [
    ("[2026-11-30 10:00:00 TP0] Init torch distributed begin.", "nccl_error", False),
    ("[2026-11-30 10:00:00 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=9.1 GB",
     "cuda_graph", True),
    ("[2026-11-30 10:00:00 TP0] Load weight begin. avail mem=78.61 GB", "other", True),  # no phase: too many reasons
    ("[2026-11-30 10:00:00 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=1.2 GB",
     "gpu_oom", False),  # the KV pool is sized next: usually memory, but not shown
])
def test_cut_traceback_takes_the_cause_of_the_startup_step_only_when_shown(progress, cause, shown):
    """A failure during CUDA-graph capture is the capture's (README of the corpus: the file decides); a step where
    failures are only *usually* of one kind (NCCL set-up, sizing the KV pool) leaves the cause ``other`` and puts
    the usual cause in the hint, marked as a guess."""
    c = classify(progress + "\n" + _HIT + _GENERIC_FRAMES)
    assert c.line == _HIT.rstrip("\n")  # the decisive line stays the traceback's announcing header
    if shown:
        assert (c.state, c.cause) == ("failed", cause)
        # The hint says the cause is inferred, not read.
        assert c.hint is not None and c.hint.startswith("the log stops before the exception line") == (cause != "other")
    else:
        assert _guessed(c, cause), c


def test_cut_vllm_worker_exception_during_nccl_setup_guesses_nccl():
    pre = "(VllmWorkerProcess pid=409) "
    text = (f"{pre}INFO 11-19 06:08:46 utils.py:961] Found nccl from library libnccl.so.2\n"
            f"{pre}INFO 11-19 06:08:46 pynccl.py:69] vLLM is using nccl==2.21.5\n"
            f"{pre}ERROR 11-19 06:08:46 multiproc_worker_utils.py:229] Exception in worker VllmWorkerProcess "
            "while processing method init_device.\n"
            f"{pre}ERROR 11-19 06:08:46 multiproc_worker_utils.py:229] Traceback (most recent call last):\n")
    c = classify(text)
    assert _guessed(c, "nccl_error"), c
    assert "while processing method init_device" in c.line


def test_sglang_cut_traceback_after_uvicorn_is_the_warmup():
    text = ("[2026-11-30 10:00:00 TP0] Load weight end. type=LlamaForCausalLM, avail mem=60.1 GB\n"
            "[2026-11-30 10:00:09] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)\n"
            "[2026-11-30 10:00:10] Traceback (most recent call last):\n"
            '  File "/x/sglang/utils.py", line 9, in post_json\n    res = session.post(url)\n')
    c = classify(text)
    assert (c.state, c.cause) == ("failed", "warmup_failed")


def test_phase_is_only_a_fallback():
    cap = "[2026-11-30 10:00:00 TP0] Capture cuda graph begin. avail mem=9.1 GB\n"
    # A later start-up step that names nothing clears the phase.
    c = classify(cap + "[2026-11-30 10:00:01 TP0] Capture cuda graph end. mem usage=0.1 GB\n" + _HIT + _GENERIC_FRAMES)
    assert (c.state, c.cause) == ("failed", "other")
    # An exception line of its own decides, whatever the step.
    c = classify(cap + _HIT + _GENERIC_FRAMES + "ValueError: unsupported architecture Foo\n")
    assert (c.cause, c.line) == ("other", "ValueError: unsupported architecture Foo")
    # A telling frame beats the step.
    c = classify(cap + _HIT + '  File "/x/model_loader.py", line 3, in <module>\n    from foo import bar\n')
    assert c.cause == "import_error"
    # After ready, the start-up step is over.
    ready = "[2026-11-30 10:00:30] The server is fired up and ready to roll!\n"
    c = classify(cap + ready + _HIT + _GENERIC_FRAMES)
    assert c.cause == "other" and not (c.hint or "").startswith(CUT_GUESS)


@pytest.mark.parametrize(("frame", "cause"), [
    ('  File "/x/sglang/srt/model_executor/model_runner.py", line 5, in init_memory_pool\n    self.pool = alloc()\n',
     "gpu_oom"),
    ('  File "/x/vllm/worker/worker.py", line 5, in determine_num_available_blocks\n    self.model_runner.profile_run()\n',
     "gpu_oom"),
    ('  File "/x/huggingface_hub/_snapshot_download.py", line 5, in snapshot_download\n    repo_info = api.repo_info()\n',
     "model_not_found"),
])
def test_cut_traceback_deepest_frame_suggests_the_cause(frame, cause):
    """Frames where failures are usually of one kind (sizing the KV pool, fetching from the Hub) are a guess."""
    c = classify(_HIT + _GENERIC_FRAMES + frame)
    assert _guessed(c, cause), c
    assert c.line == _HIT.rstrip("\n")


def test_cut_traceback_of_a_speculative_server_guesses_spec_decode_error():
    spec = ("[2026-11-30 10:00:00] server_args=ServerArgs(model_path='m', speculative_algorithm='EAGLE3', "
            "speculative_draft_model_path='d')\n")
    c = classify(spec + _HIT + _GENERIC_FRAMES)
    assert _guessed(c, "spec_decode_error") and c.line == _HIT.rstrip("\n")
    # A config dump that says speculative decoding is off is no evidence.
    off = "INFO 11-19 06:08:40 llm_engine.py:237] Initializing an LLM engine with config: model='m', speculative_config=None\n"
    c = classify(off + _HIT + _GENERIC_FRAMES)
    assert c.cause == "other" and not (c.hint or "").startswith(CUT_GUESS)
    # The start-up step, a telling frame and an exception line of its own all outrank it.
    assert _guessed(classify(spec + "[2026-11-30 10:00:01 TP0] Init torch distributed begin.\n" + _HIT
                             + _GENERIC_FRAMES), "nccl_error")
    assert classify(spec + _HIT + _GENERIC_FRAMES + "ValueError: bad rope scaling\n").cause == "other"
    # A frame on the speculative path shows it.
    c = classify(spec + _HIT + _GENERIC_FRAMES + '  File "/x/sglang/srt/speculative/eagle_worker.py", line 3, in '
                 "__init__\n    self.draft = load()\n")
    assert c.cause == "spec_decode_error"


@pytest.mark.parametrize(("method", "cause", "shown"), [
    ("init_device", "nccl_error", False),
    ("determine_num_available_blocks", "gpu_oom", False),
    ("capture_model", "cuda_graph", True),
    ("load_model", "other", True),
])
def test_cut_vllm_worker_failure_and_the_named_step(method, cause, shown):
    pre = "(VllmWorkerProcess pid=7) ERROR 11-19 06:08:46 multiproc_worker_utils.py:229] "
    text = (f"{pre}Exception in worker VllmWorkerProcess while processing method {method}.\n"
            f"{pre}Traceback (most recent call last):\n"
            f'{pre}  File "/x/vllm/worker/worker_base.py", line 5, in execute_method\n'
            f"{pre}    return executor(*args, **kwargs)\n")
    c = classify(text)
    assert (c.state, c.cause) == ("failed", cause) if shown else _guessed(c, cause), c
    assert f"while processing method {method}" in c.line
