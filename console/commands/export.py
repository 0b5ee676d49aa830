"""`mtpconsole export --listen 127.0.0.1:9400`: the console's view as Prometheus metrics.

The same links and trackers as the TUI keep one HostView per host up to date; a
``prometheus_client`` HTTP server renders them at ``/metrics`` on each scrape.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json

from prometheus_client import CollectorRegistry, start_http_server

from console.commands.context import (
    CliContext,
    demo_or_config,
    host_names,
    make_audit,
    make_links,
)
from console.core.exporter import ViewCollector
from console.errors import UserError
from console.model import HostView
from console.ops.advice_host import host_advice
from console.ops.backend import LiveBackend


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", default="127.0.0.1:9400", metavar="ADDR:PORT",
                   help="address and port to serve /metrics on (default 127.0.0.1:9400)")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="stop after S seconds (default: run until interrupted)")


def parse_listen(text: str) -> tuple[str, int]:
    """``ADDR:PORT`` (``[v6]:PORT`` for IPv6) -> (addr, port), with a clear error for anything else."""
    addr, sep, port = text.rpartition(":")
    addr = addr.strip("[]")
    try:
        ipaddress.ip_address(addr)
        n = int(port)
    except ValueError:
        raise UserError(f"--listen {text!r}: expected ADDR:PORT, e.g. 127.0.0.1:9400") from None
    if not sep or not 0 < n < 65536:
        raise UserError(f"--listen {text!r}: port must be 1..65535")
    return addr, n


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    addr, port = parse_listen(args.listen)
    views: dict[str, HostView] = {}
    audit = make_audit(ctx)
    async with demo_or_config(ctx) as (cfg, names):
        names = names or host_names(ctx, cfg)
        backend = LiveBackend(cfg, make_links(ctx, cfg, names, audit), interval=ctx.interval, audit=audit)
        reg = CollectorRegistry()
        reg.register(ViewCollector(lambda: dict(views), advice=host_advice))
        try:
            server, thread = start_http_server(port, addr=addr, registry=reg)
        except OSError as e:
            raise UserError(f"--listen {args.listen}: {e.strerror or e}", exit_code=1) from None
        await backend.start(lambda v: views.__setitem__(v.snapshot.name, v), lambda *a: None, lambda e: None)
        if ctx.json_output:
            print(json.dumps({"listening": f"http://{addr}:{port}/metrics", "hosts": names}), flush=True)
        else:
            print(f"serving the console's view of {', '.join(names)} at http://{addr}:{port}/metrics", flush=True)
        try:
            if args.duration is None:
                await asyncio.Event().wait()
            else:
                await asyncio.sleep(args.duration)
        finally:
            server.shutdown()
            thread.join(5)
            await backend.stop()
            audit.close()
    return 0
