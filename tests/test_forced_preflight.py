"""A forced launch that the memory planner says does not fit: the preflight step reads ⚠ (warning), not ✓, and
when the server then dies of gpu_oom the hint leads with the planner's fix (the SGLang stand-in on simulated GPUs).

The stand-in dies of its own numbers, not the planner's: its GPU file pins what a rank takes on the GPU (the
incident's 51 GB of weights, the Mamba state of one request slot), so the planner and the stand-in agree here
because both read the same situation, never because one asks the other."""

from __future__ import annotations

import json
import sys

import pytest

from console.model import LaunchRequest
from console.ops import lifecycle
from console.sim.demo import INCIDENT_FLAGS, MODEL_CONFIG
from tests.conftest import free_port
from tests.test_orphans_cli import link  # noqa: F401  (fixture)

MIB = 1 << 20
STANDIN_NUMBERS = {"weights_mib": 51 * 1024, "draft_weights_mib": 800, "kv_bytes_per_token": 69632,
                   "mamba_bytes_per_slot": 100 * MIB}
"""Qwen3.6-27B on a 96 GB GPU, as in the incident: 51 GB of weights, ~100 MiB of recurrent state per request
slot (48 linear layers); 512 requests x 9 slots of it cannot fit beside the weights."""


@pytest.fixture
def sim(tmp_path):
    d = tmp_path / "sim"
    (d / "alloc").mkdir(parents=True)
    (d / "gpus.json").write_text(json.dumps([
        {"index": i, "uuid": f"GPU-f{i}", "name": "Sim", "mem_total_mib": 97887, "power_limit_w": 600.0,
         **STANDIN_NUMBERS} for i in range(2)]))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(MODEL_CONFIG))
    return d, model


async def test_forced_launch_warns_and_the_oom_hint_names_the_planners_fix(link, sim):  # noqa: F811
    _, model = sim
    req = LaunchRequest(host="local", command=[sys.executable, "-m", "console.sim.sglang"],
                        flags=["--model-path", str(model), *INCIDENT_FLAGS], gpus=[0], port=free_port(), force=True)
    r = await lifecycle.launch(link, req, timeout=60)
    pre = next(s for s in r.steps if s.name == "preflight")
    assert pre.state == "warning" and pre.evidence.startswith("⚠ forced: the memory plan says it does not fit"), pre
    assert not r.ok and r.cause == "gpu_oom", r
    assert r.hint and r.hint.startswith("memory planner: "), r.hint
    refused = await lifecycle.launch(link, req.model_copy(update={"force": False}), timeout=60)
    assert not refused.ok and refused.session_id is None and refused.steps[0].state == "failed"
