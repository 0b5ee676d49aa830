"""Open a console HostLink to a benchmark host (the real console code path)."""

from __future__ import annotations

from pathlib import Path

from console.config import HostConfig
from console.link.link import HostLink
from console.link.ssh import parse_host_spec


async def open_link(alias: str, ssh_config: Path | None, runs_dir: Path, *, gpu_source: str = "none",
                    sim_dir: Path | None = None, interval: float = 1.0, python: str = "python3") -> HostLink:
    """Connect and bootstrap the agent (raises the link's HostError on failure)."""
    cfg = HostConfig(python=python, runs_dir=str(runs_dir), gpu_source=gpu_source,
                     sim_dir=str(sim_dir) if sim_dir else None)
    link = HostLink(parse_host_spec(alias), cfg, ssh_config=str(ssh_config) if ssh_config else None,
                    interval=interval)
    await link.open()
    return link
