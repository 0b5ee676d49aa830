"""`mtpconsole export --listen 127.0.0.1:9400`: the console's view as Prometheus metrics.

The same links and trackers as the TUI keep one HostView per host up to date; ``prometheus_client``'s
handler renders them at ``/metrics`` on each scrape, served by :class:`BoundedServer`: at most
``EXPORT_WORKERS`` threads and ``EXPORT_BACKLOG`` waiting connections (more are closed at once), each request
done within ``REQUEST_DEADLINE_S`` of its accept, whole (a client that sends nothing, or a byte every 0.3 s, is
cut off there). ``--listen`` on an address beyond this machine (``0.0.0.0``, ``::``, a LAN address) is served, with
a warning: the metrics name hosts, GPUs and sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import ipaddress
import json
import queue
import socket
import sys
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

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


EXPORT_WORKERS = 8
"""Threads that serve scrapes (a scrape takes milliseconds)."""
EXPORT_BACKLOG = 64
"""Connections accepted and waiting for a worker; one more is closed at once."""
REQUEST_TIMEOUT_S = 2.0
"""One read or write of a request may wait this long."""
REQUEST_DEADLINE_S = 5.0
"""A whole request (from its accept, its wait for a worker included) must be done within this."""


class BoundedServer(http.server.HTTPServer):
    """An HTTP server with a bounded pool instead of a thread per connection (see the module doc)."""

    request_queue_size = 256
    """The kernel's listen backlog: connections are accepted at once (and closed when too many wait), never left
    in the kernel's queue where no deadline counts."""

    def __init__(self, addr: str, port: int, registry: CollectorRegistry) -> None:
        self.address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        # StreamRequestHandler's timeout: the socket's, per read and write
        handler = type("ExportHandler", (MetricsHandler,), {"registry": registry, "timeout": REQUEST_TIMEOUT_S})
        super().__init__((addr, port), handler)
        self.waiting: queue.Queue[Any] = queue.Queue(maxsize=EXPORT_BACKLOG)
        self.active: dict[int, tuple[socket.socket, float]] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._work, name=f"export-{i}", daemon=True)
                        for i in range(EXPORT_WORKERS)]
        self.threads.append(threading.Thread(target=self._reap, name="export-deadline", daemon=True))
        for t in self.threads:
            t.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            self.waiting.put_nowait((request, client_address, time.monotonic() + REQUEST_DEADLINE_S))
        except queue.Full:
            self.shutdown_request(request)

    def _work(self) -> None:
        while not self.stopping.is_set():
            item = self.waiting.get()
            if item is None:
                return
            request, client_address, deadline = item
            if time.monotonic() >= deadline:  # waited its whole time for a worker
                self.shutdown_request(request)
                continue
            with self.lock:
                self.active[id(request)] = (request, deadline)
            try:
                self.finish_request(request, client_address)
            except Exception:
                pass  # a client that went away, or was cut off at its deadline
            finally:
                with self.lock:
                    self.active.pop(id(request), None)
                self.shutdown_request(request)

    def _reap(self) -> None:
        """Cut off every request past its deadline (its worker's blocked read then ends at once)."""
        while not self.stopping.wait(0.25):
            now = time.monotonic()
            with self.lock:
                late = [sock for sock, deadline in self.active.values() if now >= deadline]
            for sock in late:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def server_close(self) -> None:
        self.stopping.set()
        for _ in range(EXPORT_WORKERS):
            try:
                self.waiting.put_nowait(None)
            except queue.Full:
                break
        super().server_close()


def start_server(addr: str, port: int, registry: CollectorRegistry) -> tuple[BoundedServer, threading.Thread]:
    """Serve ``registry`` at ``http://addr:port/metrics`` from a daemon thread (see :class:`BoundedServer`)."""
    server = BoundedServer(addr, port, registry)
    thread = threading.Thread(target=server.serve_forever, name="export", daemon=True)
    thread.start()
    return server, thread


def exposure_warning(addr: str) -> str | None:
    """What to tell the operator when ``addr`` serves beyond this machine (None for a loopback address)."""
    ip = ipaddress.ip_address(addr)
    if ip.is_loopback:
        return None
    where = "every network this machine is on" if ip.is_unspecified else f"the network of {addr}"
    return (f"--listen {addr}: the metrics (host names, GPUs, sessions and their states) are served to {where}, "
            "to anyone who can reach this port; use 127.0.0.1 unless that is meant")


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
            server, thread = start_server(addr, port, reg)
        except OSError as e:
            raise UserError(f"--listen {args.listen}: {e.strerror or e}", exit_code=1) from None
        warning = exposure_warning(addr)
        if warning:
            print(f"mtpconsole export: warning: {warning}", file=sys.stderr, flush=True)
        await backend.start(lambda v: views.__setitem__(v.snapshot.name, v), lambda *a: None, lambda e: None)
        if ctx.json_output:
            print(json.dumps({"listening": f"http://{addr}:{port}/metrics", "hosts": names, "warning": warning}),
                  flush=True)
        else:
            print(f"serving the console's view of {', '.join(names)} at http://{addr}:{port}/metrics", flush=True)
        try:
            if args.duration is None:
                await asyncio.Event().wait()
            else:
                await asyncio.sleep(args.duration)
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)
            await backend.stop()
            audit.close()
    return 0
