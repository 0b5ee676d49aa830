"""Contract (issue 30): the stand-in's multi-node checks equal the real sglang 0.5.23's (marker real_sglang).

Same command line to both: ``--nnodes 2 --tp-size 3`` is refused at start-up with SGLang's own assertion
(exit 1), before any rendezvous; the console derives ``--tp-size`` so that this never happens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.contract.conftest import REPO, offline_env
from tests.contract.test_standin_contract import CPU, TINY

pytestmark = pytest.mark.real_sglang

LINE = "AssertionError: tp_size must be divisible by number of nodes"


@pytest.mark.slow
def test_tp_not_divisible_by_nnodes_refused_alike(sglang_python, tmp_path):
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY))
    flags = ["--model-path", str(model), *CPU, "--tp-size", "3", "--nnodes", "2", "--node-rank", "0",
             "--dist-init-addr", "127.0.0.1:1"]
    real = subprocess.run([str(sglang_python), "-m", "sglang.launch_server", *flags], env=offline_env(),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    sim = subprocess.run([sys.executable, "-m", "console.sim.sglang", *flags],
                         env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert (real.returncode, sim.returncode) == (1, 1), (real.stderr[-2000:], sim.stderr[-2000:])
    assert real.stderr.rstrip().splitlines()[-1] == sim.stderr.rstrip().splitlines()[-1] == LINE
