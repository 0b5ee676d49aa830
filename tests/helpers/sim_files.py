"""The files a test on simulated GPUs starts from, in one place: a sim directory (``gpus.json`` + ``alloc/``)
and a model directory holding the demo's ``config.json``."""

from __future__ import annotations

import json
from pathlib import Path

from console.sim.demo import MODEL_CONFIG

REPO = Path(__file__).resolve().parents[2]


def make_sim(tmp_path: Path, gpus: int = 2, *, tag: str = "s", model: bool = True,
             **numbers: object) -> tuple[Path, Path]:
    """(sim dir with ``gpus`` simulated 96 GB GPUs, model dir). ``numbers`` go into each GPU's entry (the
    stand-in's optional memory figures); ``tag`` makes the GPUs' uuids distinct between tests."""
    d = tmp_path / "sim"
    (d / "alloc").mkdir(parents=True)
    (d / "gpus.json").write_text(json.dumps([{"index": i, "uuid": f"GPU-{tag}{i}", "name": "Sim",
                                              "mem_total_mib": 97887, "power_limit_w": 600.0, **numbers}
                                             for i in range(gpus)]))
    m = tmp_path / "model"
    if model:
        m.mkdir()
        (m / "config.json").write_text(json.dumps(MODEL_CONFIG))
    return d, m


def sim_env(d: Path) -> dict[str, str]:
    """The environment a stand-in server on the simulated GPUs of ``d`` needs (20x speed)."""
    return {"MTPCONSOLE_SIM_DIR": str(d), "MTPCONSOLE_SIM_SPEED": "20", "PYTHONPATH": str(REPO)}
