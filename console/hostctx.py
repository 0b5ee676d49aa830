"""Turning command-line arguments into config, host links and a backend.

Shared by every subcommand and the TUI, so scripts, tests and operators take one path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import AsyncIterator

from console.audit import Audit, default_audit_path
from console.config import Config, HostConfig, load_config
from console.errors import HostKeyError, UserError
from console.remote.link import HostLink
from console.remote.ssh import HostSpec, default_ssh_config, parse_host_spec


def load_args_config(args) -> Config:
    """The config in force: the demo's when staged, else the operator's file."""
    cfg = getattr(args, "loaded_config", None)
    return cfg if cfg is not None else load_config(getattr(args, "config", None))


def host_names(args, cfg: Config) -> list[str]:
    hosts = list(getattr(args, "hosts", None) or [])
    if not hosts:
        hosts = list(cfg.hosts) or []
    if not hosts:
        raise UserError("no host given: use --host HOST (an SSH alias, user@host[:port] or 'local'), or --demo")
    seen, out = set(), []
    for h in hosts:
        if h not in seen:
            seen.add(h)
            out.append(h)
    return out


def make_links(args, cfg: Config, names: list[str], audit: Audit | None) -> list[HostLink]:
    ssh_config = getattr(args, "ssh_config", None) or default_ssh_config()
    interval = getattr(args, "interval", None) or cfg.ui.interval
    links = []
    for n in names:
        hc: HostConfig = cfg.hosts.get(n) or HostConfig()
        spec = HostSpec(name=n, local=True) if hc.transport == "local" else parse_host_spec(n)
        links.append(HostLink(spec, hc, ssh_config=ssh_config, interval=interval, audit=audit))
    return links


def make_audit(args) -> Audit:
    path = getattr(args, "audit_log", None) or os.environ.get("MTPCONSOLE_AUDIT_LOG") or default_audit_path()
    return Audit(path)


@contextlib.asynccontextmanager
async def demo_or_config(args) -> AsyncIterator[tuple[Config, list[str]]]:
    """The config and host names to use: the built-in demo host, or the operator's."""
    if getattr(args, "demo", False):
        from console.sim.demo import demo_environment

        async with demo_environment(args) as (cfg, names):
            args.loaded_config = cfg
            yield cfg, names
        return
    cfg = load_args_config(args)
    args.loaded_config = cfg
    yield cfg, host_names(args, cfg)


@contextlib.asynccontextmanager
async def connect_hosts(args, *, require: bool = True) -> AsyncIterator[list[HostLink]]:
    """Open one link per host concurrently; one host failing never blocks another.

    With ``require`` a host that cannot be reached raises its HostError; without it the
    failed links are yielded too, carrying their error in their snapshot.
    """
    audit = make_audit(args)
    async with demo_or_config(args) as (cfg, names):
        links = make_links(args, cfg, names, audit)
        results = await asyncio.gather(*(l.open() for l in links), return_exceptions=True)
        try:
            for link, r in zip(links, results):
                if isinstance(r, BaseException):
                    if require:
                        raise r if isinstance(r, UserError) else UserError(f"{link.name}: {r}", exit_code=1)
                    link._set_state("failed" if isinstance(r, HostKeyError) else "unreachable", str(r))
            yield links
        finally:
            await asyncio.gather(*(l.close() for l in links), return_exceptions=True)
            audit.close()


def make_backend(args):
    """The real Backend for the TUI (links + lifecycle operations)."""
    from console.ops.backend import LiveBackend

    return LiveBackend(args)
