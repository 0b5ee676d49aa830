"""A forced launch that the memory planner says does not fit: the preflight step reads ⚠ (warning), not ✓, and
when the server then dies of gpu_oom the hint leads with the planner's fix (the SGLang stand-in on simulated GPUs)."""

from __future__ import annotations

import sys

from console.model import LaunchRequest
from console.ops import lifecycle
from console.sim.demo import INCIDENT_FLAGS
from tests.conftest import free_port
from tests.test_orphans_cli import link, sim  # noqa: F401  (fixtures)


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
