"""The CLI context: the command line's common options, resolved once into one immutable object.

``console.cli`` builds one :class:`CliContext` per invocation (config loaded and validated, host
names, SSH config, audit log path, interval, read-only, demo, JSON) and hands it to the chosen
subcommand together with that subcommand's own options. Everything below the commands receives
plain values (a :class:`~console.config.Config`, links, numbers), never this object and never an
``argparse.Namespace``. The helpers here turn a context into config, host links, an audit log and
the TUI's backend, so scripts, tests and operators take one path.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sys
from typing import AsyncIterator

from pydantic import BaseModel, ConfigDict, Field

from console.audit import Audit, default_audit_path
from console.config import Config, HostConfig
from console.errors import HostKeyError, UserError
from console.link.link import HostLink
from console.link.ssh import HostSpec, default_ssh_config, parse_host_spec


class CliContext(BaseModel):
    """The common options of one invocation, resolved against the config file (immutable)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    config: Config = Field(default_factory=Config)
    """The operator's config, loaded and validated once (the demo's host is added under ``demo``)."""
    hosts: tuple[str, ...] = ()
    """``--host`` values in the order given, duplicates removed (may be empty)."""
    ssh_config: str | None = None
    """The SSH config file (``--ssh-config``, else ``~/.ssh/config`` when it exists)."""
    audit_log: str = Field(default_factory=lambda: str(default_audit_path()))
    """Where remote requests are logged (``--audit-log``, ``$MTPCONSOLE_AUDIT_LOG`` or the default)."""
    interval: float = 1.0
    """Seconds between samples (``--interval``, else the config's ``ui.interval``)."""
    read_only: bool = False
    """``--read-only`` or the config's ``ui.read_only``."""
    demo: bool = False
    """Use the built-in demo host instead of the operator's hosts."""
    json_output: bool = False
    """``--json``: machine-readable output."""
    theme: str = "dark"
    """The TUI theme (``--theme``, else the config's ``ui.theme``)."""
    demo_load: bool = True
    """Whether the demo keeps its hand-started server busy (tests and benchmarks turn it off)."""


def make_context(*, config: Config, hosts: list[str] | tuple[str, ...] = (), ssh_config: str | None = None,
                 audit_log: str | None = None, interval: float | None = None, read_only: bool = False,
                 demo: bool = False, json_output: bool = False, theme: str | None = None,
                 demo_load: bool = True) -> CliContext:
    """A context from option values (``None``: not given), with the config's and the environment's defaults."""
    return CliContext(
        config=config,
        hosts=tuple(dict.fromkeys(hosts)),
        ssh_config=ssh_config or default_ssh_config(),
        audit_log=audit_log or os.environ.get("MTPCONSOLE_AUDIT_LOG") or str(default_audit_path()),
        interval=interval if interval is not None else config.ui.interval,
        read_only=bool(read_only or config.ui.read_only),
        demo=demo,
        json_output=json_output,
        theme=theme or config.ui.theme,
        demo_load=demo_load,
    )


def host_names(ctx: CliContext, cfg: Config | None = None) -> list[str]:
    """The hosts to use: ``--host`` values, else every host in the config; none is a UserError."""
    hosts = list(ctx.hosts) or list((cfg or ctx.config).hosts)
    if not hosts:
        raise UserError("no host given: use --host HOST (an SSH alias, user@host[:port] or 'local'), or --demo")
    return hosts


def single_host(ctx: CliContext) -> str:
    """The one host a lifecycle command acts on (``demo`` under ``--demo``)."""
    if ctx.demo and not ctx.hosts:
        return "demo"
    if len(ctx.hosts) != 1:
        raise UserError("this command needs exactly one --host")
    return ctx.hosts[0]


def server_command(cfg: Config, host: str) -> list[str]:
    """The server command configured for ``host`` (the SGLang stand-in for the demo host)."""
    return list(cfg.host(host).server_command)


def make_links(ctx: CliContext, cfg: Config, names: list[str], audit: Audit | None) -> list[HostLink]:
    """One (not yet opened) link per host name, configured from ``cfg``."""
    links = []
    for n in names:
        hc: HostConfig = cfg.hosts.get(n) or HostConfig()
        spec = HostSpec(name=n, local=True) if hc.transport == "local" else parse_host_spec(n)
        links.append(HostLink(spec, hc, ssh_config=ctx.ssh_config, interval=ctx.interval, audit=audit))
    return links


def make_audit(ctx: CliContext) -> Audit:
    """The audit log this invocation appends to."""
    return Audit(ctx.audit_log)


def with_demo(cfg: Config, demo: Config) -> Config:
    """The operator's config with the demo's host and profiles added (its ``[ui]`` settings kept)."""
    return cfg.model_copy(update={"hosts": {**cfg.hosts, **demo.hosts},
                                  "profiles": {**cfg.profiles, **demo.profiles}})


@contextlib.asynccontextmanager
async def demo_or_config(ctx: CliContext, *, background: bool = False,
                         servers: bool = True) -> AsyncIterator[tuple[Config, list[str]]]:
    """The config and host names to use: the operator's, or under ``--demo`` the built-in demo host.

    The demo is the persistent one (console/sim/persistent.py) that every ``--demo`` command shares: reused when
    it runs, else staged here and left up for the next command (until ``mtpconsole demo down`` or its idle
    timeout). ``background`` (the TUI): a running persistent demo is reused and left running; with none, the TUI
    stages a demo of its own behind its first frame and removes it on quit. ``servers=False`` (``check``,
    ``flags``): the demo host's files and config only, no server staged. With ``$MTPCONSOLE_DEMO_IDLE_S=0`` each
    command stages its own demo and removes it on exit.
    """
    if not ctx.demo:
        yield ctx.config, host_names(ctx)
        return
    from console.sim import demo, persistent

    if not servers:
        with demo.demo_facts() as (demo_cfg, names):
            yield with_demo(ctx.config, demo_cfg), names
        return
    lease = None
    if persistent.enabled():
        lease = await asyncio.to_thread(persistent.acquire, load=ctx.demo_load, stage=not background,
                                        notice=lambda line: print(f"mtpconsole: {line}", file=sys.stderr))
    if lease is not None:
        try:
            if background:
                print(f"mtpconsole: using the running demo host in {lease.state.root} (quitting leaves it up: "
                      "'mtpconsole demo down' removes it)", file=sys.stderr)
            yield with_demo(ctx.config, lease.config), ["demo"]
        finally:
            lease.release()
        return
    async with demo.demo_environment(load=ctx.demo_load, background=background) as (demo_cfg, names):
        yield with_demo(ctx.config, demo_cfg), names


@dataclasses.dataclass(frozen=True)
class OpenHosts:
    """The config in force and one link per host, for the duration of a command."""

    config: Config
    links: list[HostLink]


@contextlib.asynccontextmanager
async def open_hosts(ctx: CliContext, *, require: bool = True, servers: bool = True) -> AsyncIterator[OpenHosts]:
    """Open one link per host concurrently; one host failing never blocks another.

    With ``require`` a host that cannot be reached raises its HostError; without it the
    failed links are yielded too, carrying their error in their snapshot. ``servers=False``: the command
    needs no server on the demo host (:func:`demo_or_config`).
    """
    audit = make_audit(ctx)
    try:
        async with demo_or_config(ctx, servers=servers) as (cfg, names):
            links = make_links(ctx, cfg, names, audit)
            results = await asyncio.gather(*(lk.open() for lk in links), return_exceptions=True)
            try:
                for link, r in zip(links, results):
                    if isinstance(r, BaseException):
                        if require:
                            raise r if isinstance(r, UserError) else UserError(f"{link.name}: {r}", exit_code=1)
                        link.mark_down(str(r), refused=isinstance(r, HostKeyError))
                yield OpenHosts(config=cfg, links=links)
            finally:
                await asyncio.gather(*(lk.close() for lk in links), return_exceptions=True)
    finally:
        audit.close()


@contextlib.asynccontextmanager
async def connect_hosts(ctx: CliContext, *, require: bool = True) -> AsyncIterator[list[HostLink]]:
    """:func:`open_hosts`, yielding only the links."""
    async with open_hosts(ctx, require=require) as opened:
        yield opened.links
