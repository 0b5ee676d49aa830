"""Smoke test: every benchmark runs at tiny size and the report is written (no timing assertions)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.sshd
def test_bench_quick_runs_every_benchmark(tmp_path):
    from bench.run import BENCHMARKS

    out = tmp_path / "BENCH.md"
    committed = REPO / "BENCHMARKS.md"
    committed_before = committed.read_bytes() if committed.exists() else None
    before = set(os.listdir("/proc"))
    p = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(out)], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    text = out.read_text()
    for key, (_, title) in BENCHMARKS.items():
        assert title in text, f"section {key} missing"
    assert "The benchmark failed" not in text
    assert "nproc" in text or "CPU(s)" in text
    assert "(tiny sizes: NOT representative)" in text
    assert (committed.read_bytes() if committed.exists() else None) == committed_before, "--quick rewrote BENCHMARKS.md"
    # nothing the benchmarks started is still running (children of this test would be listed here)
    leftover = []
    for pid in set(os.listdir("/proc")) - before:
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "mtpbench-" in cmd or "fleet_server" in cmd or "stand_in.py" in cmd or "serving-stand-in" in cmd:
            leftover.append(cmd[:200])
    assert not leftover, leftover
