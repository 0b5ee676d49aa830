"""A refused launch reports the refusal, not a cause (issue 24, item 7).

`launch --profile incident --wait` refused by the memory planner printed `cause: gpu_oom` and "FAILED" twice
although nothing was started. Now, through the real CLI on the demo host (simulated GPUs, the SGLang
stand-in, a server started by hand on GPU 0): one verdict line (`REFUSED — nothing was started`), each
preflight failure on its own `refused:` line (flags, memory plan and the host's checks, all of them at once),
no cause; `--json` keeps its keys (`cause`/`state`/`session_id` null) and adds `refused` and `refusals`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ENV = {**os.environ, "MTPCONSOLE_AUDIT_LOG": os.devnull}


def mtp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", *args], capture_output=True, text=True, timeout=180,
                          env=ENV)


def test_a_planner_refusal_has_one_verdict_line_and_no_cause():
    r = mtp("launch", "--demo", "--profile", "incident", "--gpu", "1", "--wait")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    verdicts = [x for x in lines if x.startswith("launch on demo:")]
    assert verdicts == ["launch on demo: REFUSED — nothing was started"], r.stdout
    assert "FAILED" not in r.stdout and "cause:" not in r.stdout and "gpu_oom" not in r.stdout, r.stdout
    refused = [x for x in lines if x.startswith("  refused: ")]
    assert len(refused) == 1 and refused[0].startswith("  refused: memory plan: does not fit"), r.stdout
    assert "lower --max-running-requests to" in refused[0]

    j = mtp("launch", "--demo", "--profile", "incident", "--gpu", "1", "--wait", "--json")
    out = json.loads(j.stdout)
    assert j.returncode == 1 and out["ok"] is False
    assert out["cause"] is None and out["state"] is None and out["session_id"] is None, out
    assert out["refused"].startswith("memory plan: does not fit") and out["refusals"] == [out["refused"]]
    assert out["error"] == {"kind": "refused", "message": out["refused"]}, out  # the CLI contract's error object
    assert [s["name"] for s in out["steps"] if s["state"] == "failed"] == ["preflight"]


def test_every_preflight_failure_is_listed_at_once():
    # a flag the server rejects, a plan that does not fit, and GPU 0 held by the demo's hand-started server
    r = mtp("launch", "--demo", "--profile", "incident", "--gpu", "0", "--wait", "--json", "--",
            "--cuda-graph-max-bs", "8")
    out = json.loads(r.stdout)
    assert r.returncode == 2 and out["cause"] is None and out["session_id"] is None, out  # invalid flags: bad input
    assert out["error"]["kind"] == "invalid_flags", out
    reasons = out["refusals"]
    assert len(reasons) == 3, reasons
    assert "ambiguous option: --cuda-graph-max-bs" in reasons[0] and out["line"] == reasons[0]
    assert reasons[1].startswith("memory plan: does not fit")
    assert reasons[2].startswith("GPUs free: GPU 0 has compute processes: pid "), reasons
    assert out["refused"] == "; ".join(reasons)
    pre = next(s for s in out["steps"] if s["name"] == "preflight")
    assert all(x in pre["evidence"] for x in reasons) and pre["evidence"].endswith("nothing was started")
    text = mtp("launch", "--demo", "--profile", "incident", "--gpu", "0", "--wait", "--", "--cuda-graph-max-bs", "8")
    assert sum(x.startswith("  refused: ") for x in text.stdout.splitlines()) == 3, text.stdout
    assert "FAILED" not in text.stdout and "cause:" not in text.stdout
