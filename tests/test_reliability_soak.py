"""The soak's ~15 s variant (tests/soak.py --quick): launch/load/relaunch/kill cycles over the test sshd with
simulated GPUs; no failed operation, no leaked fd, task, agent, SSH session or server process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quick_soak_leaks_nothing():
    p = subprocess.run([sys.executable, str(REPO / "tests" / "soak.py"), "--quick"], capture_output=True, text=True,
                       cwd=REPO, timeout=150)
    summary = json.loads(p.stdout[p.stdout.index("{"):])
    assert p.returncode == 0, (summary, p.stderr[-2000:])
    assert summary["cycles"] >= 1 and not summary["failures"] and not summary["leaks"]
    assert summary["leftover_server_procs"] == {"max_after_kill": 0, "after_close": 0}
    if summary["transport"] == "ssh":
        assert summary["agents"]["end"] == 1 and summary["sshd_sessions"]["end"] == summary["sshd_sessions"]["start"]
