"""What a test on simulated GPUs starts from, in one place: a sim directory (``gpus.json`` + ``alloc/``), a model
directory holding the demo's ``config.json``, and an open link to the ``local`` host on those GPUs."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from console.config import HostConfig
from console.link.link import HostLink
from console.link.ssh import HostSpec
from console.sim.demo import MODEL_CONFIG
from tests.helpers.rel_util import cleanup_runs

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


@contextlib.asynccontextmanager
async def sim_link(runs_dir: Path, d: Path, interval: float = 0.3) -> AsyncIterator[HostLink]:
    """An open link to the ``local`` host on the simulated GPUs of ``d`` (servers launched there get
    :func:`sim_env`); closed, and whatever its sessions left killed, on the way out."""
    lk = HostLink(HostSpec(name="local", local=True),
                  HostConfig(python=sys.executable, runs_dir=str(runs_dir), gpu_source="sim", sim_dir=str(d),
                             launch_env=sim_env(d)), interval=interval)
    await lk.open()
    try:
        yield lk
    finally:
        await lk.close()
        cleanup_runs(runs_dir)
