"""The real SGLang 0.5.23 package, for the contract tests (marker ``real_sglang``).

The venv is built once per machine by ``scripts/real-sglang-venv.sh`` (``.ci/run`` calls it and
exports ``MTPCONSOLE_SGLANG_PYTHON`` and ``MTPCONSOLE_REAL_SGLANG=required``). Under
``required`` a missing venv FAILS these tests; otherwise (a user's clone) they skip, naming the
command that builds it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = "scripts/real-sglang-venv.sh"
DEFAULT_PYTHON = Path.home() / ".cache" / "mtpconsole-ci" / "sglang-0.5.23-venv" / "bin" / "python"
REQUIRED = os.environ.get("MTPCONSOLE_REAL_SGLANG", "").lower() == "required"


def real_python() -> Path | None:
    given = os.environ.get("MTPCONSOLE_SGLANG_PYTHON")
    p = Path(given) if given else DEFAULT_PYTHON
    return p if p.is_file() and os.access(p, os.X_OK) else None


def offline_env() -> dict[str, str]:
    """The environment the real package runs in: offline, no GPU, quiet."""
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "",
                "PYTHONWARNINGS": "default"})
    return env


@pytest.fixture(scope="session")
def sglang_python() -> Path:
    """The venv's python with sglang 0.5.23; fails under MTPCONSOLE_REAL_SGLANG=required, else skips."""
    py = real_python()
    if py is None:
        msg = f"real sglang 0.5.23 venv not found; build it with: {BUILD}"
        if REQUIRED:
            pytest.fail(msg + " (MTPCONSOLE_REAL_SGLANG=required)", pytrace=False)
        pytest.skip(msg)
    return py


@pytest.fixture(scope="session")
def real_verdicts(sglang_python: Path):
    """Run a list of argv through the real parser (one process); returns a function argvs -> verdicts."""
    cache: dict[str, list[dict]] = {}

    def run(argvs: list[list[str]]) -> list[dict]:
        key = json.dumps(argvs)
        if key not in cache:
            r = subprocess.run([str(sglang_python), str(REPO / "tests" / "contract" / "real_argparse.py")],
                               input=key, capture_output=True, text=True, timeout=300, env=offline_env())
            assert r.returncode == 0, r.stderr[-2000:]
            cache[key] = json.loads(r.stdout)
        return cache[key]

    return run
