"""`mtpconsole classify-log`, run as a real subprocess (`python -m console classify-log ...`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.wait import wait_until

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / "tests" / "data" / "logs"
KEYS = {"file", "state", "cause", "line", "hint", "metrics", "line_in_log", "runs_skipped", "run_started_line"}
METRIC_KEYS = {"gen_throughput", "accept_len", "running_req", "queue_req", "token_usage"}


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONIOENCODING="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "console", "classify-log", *map(str, args)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )


def test_json_one_object_per_file_in_order():
    files = [LOGS / "incident_gpu_oom.log", LOGS / "sglang_tp4_hybrid_ready.log", LOGS / "incident_loading.log",
             LOGS / "bad_flags_ambiguous.log"]
    r = cli("--json", *files)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [e["file"] for e in out] == [str(f) for f in files]
    for e in out:
        assert set(e) == KEYS
    oom, ready, loading, flags = out
    assert (oom["state"], oom["cause"]) == ("failed", "gpu_oom")
    assert "Not enough memory. Please try to increase --mem-fraction-static." in oom["line"]
    assert oom["metrics"] is None and "--mem-fraction-static" in oom["hint"]
    assert (ready["state"], ready["cause"], ready["hint"]) == ("ready", None, None)
    assert set(ready["metrics"]) == METRIC_KEYS
    assert ready["metrics"] == {"gen_throughput": 1162.08, "accept_len": 2.97, "running_req": 48,
                                "queue_req": 791, "token_usage": 0.13}
    assert (loading["state"], loading["line"], loading["metrics"]) == ("loading", None, None)
    assert flags["cause"] == "bad_flags" and "--cuda-graph-max-bs" in flags["hint"]


def test_json_option_before_subcommand_too():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "console", "--json", "classify-log", str(LOGS / "port_in_use.log")],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["cause"] == "port_in_use"


def test_text_output_is_readable():
    r = cli(LOGS / "incident_gpu_oom.log", LOGS / "vllm_ready_stats.log")
    assert r.returncode == 0, r.stderr
    assert "incident_gpu_oom.log: FAILED (gpu_oom)" in r.stdout
    assert "line:    RuntimeError: Not enough memory" in r.stdout
    assert "hint:" in r.stdout
    assert "vllm_ready_stats.log: READY" in r.stdout
    assert "gen 1534.9 tok/s" in r.stdout and "accept 2.71" in r.stdout


def test_unreadable_file_has_error_and_exit_1(tmp_path):
    missing = tmp_path / "nope.log"
    r = cli("--json", missing, LOGS / "import_error.log", tmp_path)
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert len(out) == 3
    assert out[0]["file"] == str(missing) and "No such file" in out[0]["error"]
    assert out[0]["state"] is None
    assert out[1]["cause"] == "import_error" and "error" not in out[1]
    assert "directory" in out[2]["error"]
    r = cli(missing)
    assert r.returncode == 1 and "ERROR" in r.stdout and "Traceback" not in r.stderr


def test_exit_record_options():
    f = LOGS / "signal_killed_loading.log"
    assert json.loads(cli("--json", f).stdout)[0]["state"] == "loading"
    for sig in ("9", "KILL", "SIGKILL"):
        e = json.loads(cli("--json", "--signal", sig, f).stdout)[0]
        assert (e["state"], e["cause"]) == ("failed", "signal_killed"), sig
    e = json.loads(cli("--json", "--signal", "9", "--oom-kill-before", "5", "--oom-kill-after", "6", f).stdout)[0]
    assert e["cause"] == "host_oom_killed" and "5 -> 6" in e["hint"]
    e = json.loads(cli("--json", "--exit-code", "0", f).stdout)[0]
    assert (e["state"], e["cause"]) == ("failed", "other")
    e = json.loads(cli("--json", "--exit-code", "143", "--stopped-by-operator", f).stdout)[0]
    assert e["state"] == "stopped"  # an operator's stop with no crash before it (issue 15)


def test_exit_json_file(tmp_path):
    rec = tmp_path / "exit.json"
    rec.write_text(json.dumps({"exit_code": 1, "signal": None, "ended_at": 1.0,
                               "oom_kill_before": 10, "oom_kill_after": 11}))
    e = json.loads(cli("--json", "--exit-json", rec, LOGS / "host_oom_rank_died.log").stdout)[0]
    assert e["cause"] == "host_oom_killed"
    rec.write_text("{not json")
    r = cli("--exit-json", rec, LOGS / "host_oom_rank_died.log")
    assert r.returncode == 2 and "not JSON" in r.stderr and "Traceback" not in r.stderr


def test_bad_options_are_clear_errors():
    r = cli("--signal", "NOPE", LOGS / "incident_loading.log")
    assert r.returncode == 2 and "--signal" in r.stderr and "Traceback" not in r.stderr
    r = cli()
    assert r.returncode == 2 and "FILE" in r.stderr


def test_garbage_and_invalid_utf8_file(tmp_path):
    p = tmp_path / "garbage.log"
    p.write_bytes(bytes(range(256)) * 64 + b"\xff\xfe\x00\x1b[31mRuntimeError: CUDA error: no CUDA-capable "
                  b"device is detected\x1b[0m\n")
    r = cli("--json", p)
    assert r.returncode == 0, r.stderr
    e = json.loads(r.stdout)[0]
    assert e["cause"] == "cuda_driver" and "\x1b" not in e["line"]
    r = cli(p)  # text mode survives the same bytes
    assert r.returncode == 0 and "cuda_driver" in r.stdout


def test_huge_sparse_file_is_not_loaded(tmp_path):
    p = tmp_path / "huge.log"
    ready = (LOGS / "sglang_0523_ready_eagle.log").read_bytes()
    tail = (b'[2026-10-31 02:00:00] INFO:     127.0.0.1:1 - "GET /v1/models HTTP/1.1" 200 OK\n' * 1000)
    with open(p, "wb") as f:
        f.write(ready[: ready.index(b"The server is fired up")])
        f.write(b"x" * 200_000 + b"\n")  # push the ready line past the first 64 KiB
        f.write(b"[2026-10-30 12:00:28] The server is fired up and ready to roll!\n")
        f.truncate(1 << 30)  # a 1 GiB hole, read back as NUL bytes
        f.seek(1 << 30)
        f.write(tail)
    assert p.stat().st_size > 1 << 30
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out_path, err_path = tmp_path / "out.json", tmp_path / "err.txt"
    with open(out_path, "wb") as out_f, open(err_path, "wb") as err_f:
        proc = subprocess.Popen([sys.executable, "-m", "console", "classify-log", "--json", str(p)],
                                cwd=REPO, env=env, stdout=out_f, stderr=err_f)
    def ended():  # wait4 on this child only (its own rusage): (pid, status, usage) once it exited
        w = os.wait4(proc.pid, os.WNOHANG)
        return w if w[0] else None
    done = wait_until(ended, 60, step=0.05)
    if not done:
        proc.kill()
        os.wait4(proc.pid, 0)
        raise AssertionError("classify-log did not finish within 60 s")
    pid, status, usage = done
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, err_path.read_text()
    e = json.loads(out_path.read_text())[0]
    assert e["state"] == "ready" and "fired up" in e["line"]
    # ru_maxrss (KiB) of this child alone: far below the file's size.
    assert usage.ru_maxrss < 400 * 1024
