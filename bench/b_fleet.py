"""4. Fleet: 1, 8, 32 and 64 hosts at 1 Hz (``--sizes`` for others), each with 8 simulated GPUs and a serving stand-in.

The hosts are in-process ``asyncssh`` servers in one helper process (``bench/fleet_server.py``),
each session running the real agent as its own process (64 hosts = 64 agents). This process is
the console, running per host what the TUI's backend runs (``LiveBackend.start``): a ``HostLink`` kept up
by its own loop (``HostLink.run``: its timer, pings and reconnects) and a ``HostTracker`` turning each
sample into the host's ``HostView`` (the snapshot, its views, the GPUs' current sessions, the advisor).
Sizes grow in place: the links of the smaller fleet stay open while more are added.

Measured per size, over a window after a warm-up: the console's CPU (this process, getrusage),
its RSS, its event-loop lag (a 50 ms sleep's overshoot), the tick latency per host (the agent's
``sampled_at`` → the console's listener), samples received vs expected, and the CPU of the SSH
server process and of all the agents.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench import cpus
from bench.fleet_server import host_title
from bench.gc_pauses import GcPauses
from bench.links import open_link
from bench.procstat import children_map, self_cpu, self_rss, stat, tree_cpu
from bench.simhost import start_stand_in, stop, write_sim_dir
from bench.stats import cell, percentile, summarize
from console.host.delta import FULL_EVERY
from console.link.link import HostLink
from console.model import HostView
from console.ops.tracker import HostTracker
from console.ui.idle_gc import YOUNG_SAMPLE_EVERY, IdleCollector

REPO = Path(__file__).resolve().parents[1]


class Console:
    """The console's per-tick work for every host, with the measurements: what the TUI's backend runs per host
    (``LiveBackend.start``): the link kept up by its own loop (``HostLink.run``: its ticks, pings and reconnects)
    and a ``HostTracker`` deriving the host's ``HostView`` per sample and tick (views, current sessions, advice)."""

    def __init__(self):
        self.lat: list[float] = []
        self.count = 0
        self.views: dict[str, HostView] = {}
        self.trackers: list[HostTracker] = []
        self.keepers: list[asyncio.Task] = []

    def attach(self, link) -> None:
        """Run ``link`` as the backend does, its views landing in ``views`` and its samples' latency in ``lat``."""
        console, seen = self, [None]

        def on_view(view: HostView) -> None:
            console.views[link.name] = view
            snap = view.snapshot
            if snap is not seen[0]:  # a new sample (not a tick's view of the same one)
                seen[0] = snap
                now = time.time()
                console.lat.append((now - (snap.sampled_at or now)) * 1000)
                console.count += 1
        self.trackers.append(HostTracker(link, interval=1.0, on_view=on_view, on_log=lambda *a: None))
        self.keepers.append(asyncio.create_task(link.run()))


async def _tick_collector(collector: IdleCollector) -> None:
    while True:
        await asyncio.sleep(1.0)
        collector.tick()


def _what_ran(handle: asyncio.Handle) -> str:
    """A callback as the report names it: a task's wake-up by the coroutine it resumed (its name and line)."""
    task = getattr(getattr(handle, "_callback", None), "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        frame = getattr(coro, "cr_frame", None)
        where = f" at line {frame.f_lineno}" if frame is not None else ""
        return f"task {getattr(coro, '__qualname__', coro)!s}{where}"[:160]
    return repr(handle)[:160]


class SlowCallbacks:
    """Every event-loop callback that ran longer than ``limit_ms`` while on: what asyncio's slow-callback log
    (debug mode) reports, timed around ``Handle._run`` without debug mode's own costs. Each is recorded with what
    explains it: the thread's CPU time in it (wall time far above it: the console was descheduled, its core given
    to another process), the garbage collector's pauses in it (any generation) and the agent messages it handled
    (``HostLink._dispatch`` calls: more than one is a backlog read in one step)."""

    def __init__(self, limit_ms: float = 50.0) -> None:
        self.limit = limit_ms / 1000
        self.slow: list[tuple[float, str]] = []
        self.on = False
        self.gc_s = 0.0
        self.gc_collected = 0
        """Objects the collections found unreachable (cyclic garbage) while on."""
        self.long_gc: list[tuple[float, int, int]] = []
        """Collections (any generation) over ``limit_ms`` / 2.5 while on: (ms, generation, objects collected)."""
        self.dispatched = 0
        self._gc_began = 0.0
        self._orig = asyncio.events.Handle._run
        self._orig_dispatch = HostLink._dispatch

    def __enter__(self) -> SlowCallbacks:
        watch, orig, orig_dispatch = self, self._orig, self._orig_dispatch
        clock, cpu = time.perf_counter, time.thread_time

        def _run(handle: asyncio.Handle) -> None:
            t, c, g, m = clock(), cpu(), watch.gc_s, watch.dispatched
            try:
                orig(handle)
            finally:
                took = clock() - t
                if watch.on and took > watch.limit:
                    watch.slow.append((took * 1000, f"{_what_ran(handle)} (CPU {(cpu() - c) * 1000:.0f} ms, GC "
                                       f"{(watch.gc_s - g) * 1000:.0f} ms, {watch.dispatched - m} message(s))"))

        def _dispatch(link: HostLink, msg: dict) -> None:
            watch.dispatched += 1
            orig_dispatch(link, msg)
        asyncio.events.Handle._run = _run  # type: ignore[method-assign,assignment]
        HostLink._dispatch = _dispatch  # type: ignore[method-assign,assignment]
        gc.callbacks.append(self._gc)
        return self

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_began = time.perf_counter()
        else:
            took = time.perf_counter() - self._gc_began
            self.gc_s += took
            if self.on:
                self.gc_collected += info.get("collected", 0)
                if took > self.limit / 2.5:
                    self.long_gc.append((took * 1000, info.get("generation", -1), info.get("collected", 0)))

    def __exit__(self, *exc: object) -> None:
        asyncio.events.Handle._run = self._orig  # type: ignore[method-assign,assignment]
        HostLink._dispatch = self._orig_dispatch  # type: ignore[method-assign,assignment]
        gc.callbacks.remove(self._gc)


def _run_queue_s() -> float:
    """Seconds this process's threads have waited on a run queue (runnable, not running: another process held the
    core), from /proc/self/task/*/schedstat; 0.0 where the kernel keeps no schedstats."""
    total = 0.0
    with contextlib.suppress(OSError, IndexError, ValueError):  # no schedstats (or a thread gone): what was read
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1]) / 1e9
    return total


SHARD = 64
"""Hosts per SSH server process."""


def _agents_cpu(srvs: list[subprocess.Popen]) -> float:
    """CPU seconds of all agents (everything below the SSH server processes: the agents, in PID-namespace mode the
    ``unshare`` parents and the idle stand-ins too): one /proc walk, run off the event loop."""
    cmap = children_map()
    return sum(tree_cpu(s.pid, include_root=False, cmap=cmap) for s in srvs)


def _servers_cpu(srvs: list[subprocess.Popen]) -> float:
    """CPU seconds of the SSH server processes themselves."""
    return sum(st["utime"] + st["stime"] for st in (stat(s.pid) for s in srvs) if st)


async def _lag_probe(out: list[float], stop_ev: asyncio.Event) -> None:
    while not stop_ev.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.05)
        out.append((time.perf_counter() - t - 0.05) * 1000)


async def run(ctx, sec) -> None:
    sizes = ctx.sizes or ctx.n([1, 8, 32, 64], [1, 3])
    # the warm-up outlasts a host's first periodic whole sample (FULL_EVERY ticks after it connects): the window
    # measures the steady state a console lives in for hours, not its first half minute (the memos' identity fast
    # path was lost after the first periodic whole sample, and a 3 s warm-up never saw it)
    window, warm = ctx.n(12.0, 2.0), ctx.n(FULL_EVERY * 1.0 + 3.0, 1.0)
    d = ctx.tmp / "fleet"
    d.mkdir()
    nmax = max(sizes)
    # one SSH server process per SHARD hosts: their handshakes and encryption spread over the cores, as N machines'
    firsts = list(range(0, nmax, SHARD))
    nice = ["nice", "-n", str(ctx.hosts_nice)] if ctx.hosts_nice else []
    srvs = [subprocess.Popen([*nice, sys.executable, "-m", "bench.fleet_server", str(d), str(min(SHARD, nmax - f)), str(f)],
                             cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=open(d / f"server.{f}.log", "wb"), start_new_session=True) for f in firsts]
    # the console on a core of its own, the simulated hosts on the other CPUs (their agents inherit it)
    own = os.sched_getaffinity(0)
    cpu_split = cpus.split(own) if ctx.pin == "auto" else None
    pinned = cpu_split is not None and all(cpus.pin(s.pid, cpu_split[1]) for s in srvs) and cpus.pin(0, cpu_split[0])
    stand_ins = []
    links = []
    console = Console()
    rows = []
    slow_cb = SlowCallbacks(50.0)
    slow_cb.__enter__()
    # the TUI's collector policy (the one long-running console of a fleet): no automatic full collections, one
    # when idle at most every 30 s, frozen afterwards; ticked once a second as the app does
    pacing = ctx.young_pacing
    collector, pauses = IdleCollector(sample_every=1 if pacing == "collect" else YOUNG_SAMPLE_EVERY), GcPauses(generation=2)
    collector.start()
    if pacing != "off":
        collector.pace_young(asyncio.get_running_loop())
    pauses.__enter__()
    gc_ticks = asyncio.create_task(_tick_collector(collector))
    try:
        deadline = time.monotonic() + 60
        while not all((d / f"ready.{f}").exists() for f in firsts):
            if any(s.poll() is not None for s in srvs) or time.monotonic() > deadline:
                raise RuntimeError("fleet server did not start: " + " | ".join(
                    (d / f"server.{f}.log").read_text()[-400:] for f in firsts))
            await asyncio.sleep(0.1)
        # one SSH config file per host: a console parses its ssh_config (asyncssh, twice per connection) on its
        # event loop, O(lines); a 512-block file made connecting all O(N²) (see the notes)
        blocks = "".join((d / f"ssh_config.{f}").read_text() for f in firsts).split("Host ")[1:]
        for b in blocks:
            (d / f"ssh_config.{b.split()[0]}").write_text("Host " + b)
        pidns = all(json.loads((d / f"ready.{f}").read_text()).get("pidns") for f in firsts)
        base_rss = self_rss()
        books0 = (0, 0, 0)
        for n in sizes:
            t0 = time.perf_counter()
            new = []
            for i in range(len(links), n):
                h = d / f"host-{i:02d}"
                sim = write_sim_dir(h / "sim", 8)
                if not pidns:  # else the host's namespace starts its own (bench/ns_host.py)
                    stand_ins.append(start_stand_in(host_title(i), sim))
                    if pinned and cpu_split:
                        cpus.pin(stand_ins[-1].pid, cpu_split[1])
                new.append(open_link(f"fleet-{i:02d}", d / f"ssh_config.fleet-{i:02d}", h / "runs", gpu_source="sim",
                                     sim_dir=sim, interval=1.0))
            got = await asyncio.gather(*new, return_exceptions=True)
            opened = [x for x in got if not isinstance(x, BaseException)]
            failed = [x for x in got if isinstance(x, BaseException)]
            if failed:  # the size is not measured: say how many did not connect, keep the sizes measured so far
                await asyncio.gather(*(lk.close() for lk in opened), return_exceptions=True)
                sec.notes.append(f"At {n} hosts, {len(failed)} of {len(new)} new connections failed within "
                                 f"{time.perf_counter() - t0:.1f} s (first: {failed[0]}); that size and larger ones "
                                 "were not measured.")
                break
            for link in opened:
                console.attach(link)
            collector.freeze()  # what the app does once a size's panels are mounted
            links.extend(opened)
            connect_s = time.perf_counter() - t0
            await asyncio.sleep(warm)
            # The agents' CPU is a /proc walk per agent: taken in a thread, before the window and the lag probe
            # start and after they stop, so that it never blocks the loop being measured.
            a0 = await asyncio.to_thread(_agents_cpu, srvs)
            s0 = _servers_cpu(srvs)
            lag: list[float] = []
            stop_ev = asyncio.Event()
            console.lat.clear()
            slow_cb.slow.clear()
            slow_cb.long_gc.clear()
            pauses.pauses.clear()
            c0, w0, p0, q0 = self_cpu(), time.perf_counter(), _packets_received(links), _run_queue_s()
            g0, k0 = slow_cb.gc_s, slow_cb.gc_collected
            slow_cb.on = pauses.on = True
            probe = asyncio.create_task(_lag_probe(lag, stop_ev))
            await asyncio.sleep(window)
            stop_ev.set()
            await probe
            slow_cb.on = pauses.on = False
            wall = time.perf_counter() - w0
            c1, p1, q1 = self_cpu(), _packets_received(links), _run_queue_s()
            g1, k1 = slow_cb.gc_s, slow_cb.gc_collected
            books = (sum(lk.book.deltas for lk in links), sum(lk.book.full_samples for lk in links),
                     sum(lk.resyncs for lk in links))
            lat = list(console.lat)
            s1 = _servers_cpu(srvs)
            a1 = await asyncio.to_thread(_agents_cpu, srvs)
            rows.append({
                "n": n, "connect_s": connect_s, "cpu_pct": (c1 - c0) / wall * 100, "rss_mib": self_rss() / 2**20,
                "rss_delta_mib": (self_rss() - base_rss) / 2**20, "lat": summarize(lat), "lag": summarize(lag),
                "lat_raw": lat, "lag_raw": lag,
                "received": len(lat), "expected": n * wall,
                "ssh_pct": (s1 - s0) / wall * 100,
                "agents_pct": (a1 - a0) / wall * 100,
                "agent_tick_ms": summarize([lk.sample.get("tick_ms") for lk in links if lk.sample]),
                "slow": sorted(slow_cb.slow, reverse=True),
                "long_gc": sorted(slow_cb.long_gc, reverse=True),
                "gc": list(pauses.pauses),
                "deltas": books[0] - books0[0], "fulls": books[1] - books0[1], "resyncs": books[2] - books0[2],
                "tick_ms_per_host": (c1 - c0) * 1000 / max(1, len(lat)),
                "packets_per_sample": (p1 - p0) / max(1, len(lat)),
                "run_queue_pct": (q1 - q0) / wall * 100,
                "gc_pct": (g1 - g0) / wall * 100,
                "garbage_per_s": (k1 - k0) / wall,
            })
            books0 = books
            r = rows[-1]
            print(f"[fleet] {n} hosts: console {r['cpu_pct']:.1f} % ({r['tick_ms_per_host']:.3f} ms/host/tick), "
                  f"lat p95 {r['lat'].p95 if r['lat'] else 0:.1f} ms, lag max {r['lag'].hi if r['lag'] else 0:.1f} ms, "
                  f"agents {r['agents_pct']:.1f} %, connect {connect_s:.1f} s", file=sys.stderr, flush=True)
    finally:
        cpus.pin(0, own)
        slow_cb.__exit__()
        gc_ticks.cancel()
        pauses.__exit__()
        collector.stop()
        await asyncio.gather(*(lk.close() for lk in links), return_exceptions=True)
        for t in console.keepers:
            t.cancel()
        await asyncio.gather(*console.keepers, return_exceptions=True)
        for p in stand_ins:
            stop(p)
        for srv in srvs:
            try:
                srv.stdin.close()
                srv.wait(5)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(srv.pid, signal.SIGKILL)  # the server and any agent still in its group
            except ProcessLookupError:
                pass
            if srv.poll() is None:
                srv.wait(5)

    top = rows[-1]
    n = top["n"]
    sec.target = (f"{n} hosts × 8 GPUs (the largest size run): console under 50 % of one core and at most 0.5 ms "
                  "per host per tick, p95 tick latency under 250 ms, event-loop lag p99 under 20 ms and max under "
                  "250 ms, no callback over 50 ms, all connected in under 15 s")
    if top["lat"] and not ctx.quick:
        lag = top["lag"]
        ok = (top["cpu_pct"] < 50 and top["tick_ms_per_host"] <= 0.5 and top["lat"].p95 < 250 and lag is not None
              and _p99(top, "lag") < 20 and lag.hi < 250 and not top["slow"] and top["connect_s"] < 15)
        sec.verdict = ("met" if ok else "missed") + (
            f" ({n} hosts: console {top['cpu_pct']:.0f} % of a core = {top['tick_ms_per_host']:.2f} ms per host per "
            f"tick, tick latency p95 {top['lat'].p95:.0f} / p99 "
            f"{_p99(top, 'lat'):.0f} ms, loop lag p99 {_p99(top, 'lag'):.1f} / max {lag.hi if lag else 0:.0f} ms, "
            f"{len(top['slow'])} callback(s) over 50 ms, connect all {top['connect_s']:.1f} s)")
    else:
        sec.verdict = f"quick run ({n} hosts): not a measurement"
    sec.table(["hosts", "console CPU (% of one core)", "console RSS (Δ vs 0 hosts)", "tick latency sampled_at → console",
               "tick latency p99", "event-loop lag (50 ms timer overshoot)", "event-loop lag p99",
               "callbacks over 50 ms", "console waiting for a core (% of the window)", "console in GC (% of the window)",
               "cyclic garbage found (objects/s)", "full GC pauses (max)", "samples received / expected", "console CPU per host per tick",
               "deltas / whole samples (resyncs)", "SSH packets per sample",
               "SSH server processes CPU", "all agents CPU", "agent CPU per host", "agent tick_ms (per host)",
               "connect all"], [
        [str(r["n"]), f"{r['cpu_pct']:.1f} %", f"{r['rss_mib']:.0f} MiB (+{r['rss_delta_mib']:.0f})", cell(r["lat"]),
         f"{_p99(r, 'lat'):.1f} ms", cell(r["lag"]), f"{_p99(r, 'lag'):.1f} ms",
         (f"{len(r['slow'])} (max {r['slow'][0][0]:.0f} ms)" if r["slow"] else "0"), f"{r['run_queue_pct']:.1f} %",
         f"{r['gc_pct']:.1f} %", f"{r['garbage_per_s']:.0f}",
         (f"{len(r['gc'])} ({max(r['gc']):.0f} ms)" if r["gc"] else "0"),
         f"{r['received']} / {r['expected']:.0f}", f"{r['tick_ms_per_host']:.3f} ms",
         f"{r['deltas']} / {r['fulls']} ({r['resyncs']})", f"{r['packets_per_sample']:.2f}", f"{r['ssh_pct']:.1f} %", f"{r['agents_pct']:.1f} %",
         f"{r['agents_pct'] / max(1, r['n']):.2f} %", cell(r["agent_tick_ms"]), f"{r['connect_s']:.1f} s"]
        for r in rows])
    slowest = [(r["n"], ms, what) for r in rows for ms, what in r["slow"][:3]]
    if slowest:
        sec.notes.append("Slowest callbacks (hosts, ms, callback, the thread's CPU, GC pauses and agent messages in it: "
                         "a wall time far above its CPU is the console descheduled, not its work): " + "; ".join(
                             f"{n_} hosts {ms:.0f} ms {what}" for n_, ms, what in slowest))
    long_gc = [(r["n"], len(r["long_gc"]), r["long_gc"][:3]) for r in rows if r["long_gc"]]
    if long_gc:
        sec.notes.append("Collections over 20 ms (any generation; hosts: how many, the longest as ms, generation, "
                         "objects collected): " + "; ".join(f"{n_} hosts: {k}, " + ", ".join(
                             f"{ms:.0f} ms gen {g} ({c})" for ms, g, c in top3) for n_, k, top3 in long_gc))
    sec.notes.append("'console waiting for a core' is the time the console's threads were runnable but not running "
                     "over the window (/proc/self/task/*/schedstat): other processes of the machine (here the "
                     "simulated hosts' agents and SSH servers) holding the cores it could have run on.")
    per_host = [(r["cpu_pct"] / r["n"]) for r in rows if r["n"]]
    sec.notes += [
        f"Window {window:.0f} s per size after {warm:.0f} s of warm-up (past each new host's first periodic whole "
        f"sample, every {FULL_EVERY} ticks: the steady state, whole samples among the deltas in the window); "
        "percentages are of one core "
        f"(this machine has {os.cpu_count()}). The console's CPU includes the benchmark's own 20 Hz lag probe "
        "and listener bookkeeping, so the fixed part"
        + (f" ({rows[0]['cpu_pct']:.1f} % at {rows[0]['n']} host(s))" if rows else "") + " is an overestimate.",
        "Console CPU per host per tick ≈ " + ", ".join(f"{r['cpu_pct'] * 10 / r['n']:.2f} ms ({r['n']} hosts)"
                                                       for r in rows) + ": SSH decryption (asyncssh), JSON "
        "parsing of the delta, rebuilding the sample and checking its digest, validating the items that changed, "
        "and the tracker's HostView (views and orphans judged again only when the host's processes changed, the "
        "GPUs' current sessions, the advisor at most once a second), the link's pings and quiet ticks. Before "
        "697bca5 the benchmark ran a lighter listener than the backend's (a snapshot and its views only, no "
        "tracker, no link loop): its figures of earlier runs are not comparable. Per tick means per sample "
        "received (the console's CPU over the window divided by the samples that arrived in it)"
        + (f"; less the fixed part measured at {rows[0]['n']} host(s) (the lag probe, timers): "
           + ", ".join(f"{(r['cpu_pct'] - rows[0]['cpu_pct']) * 10 / max(1, r['n'] - rows[0]['n']):.3f} ms "
                       f"({r['n']} hosts)" for r in rows[1:]) if len(rows) > 1 else "") + ".",
        f"Everything runs on the same {os.cpu_count()} cores: the console, one Python process per 64 hosts hosting their SSH "
        "servers (its "
        "encryption is what real hosts would do each for themselves) and N agents. On a real fleet the agents and "
        "SSH servers run on N different machines; here they compete with the console, which inflates its tick "
        "latency at the larger sizes. "
        + (f"In this run the console ran on CPUs {cpus.describe(cpu_split[0])} (a core of its own) and the simulated "
           f"hosts on CPUs {cpus.describe(cpu_split[1])} (--pin auto, bench/cpus.py): no agent shared the console's "
           "core or its SMT sibling. " if pinned and cpu_split else
           "In this run every process could run on every CPU (--pin off, or fewer than 8 CPUs, or the kernel "
           "refused the affinity): the console's cost per sample then also reads the agents' load on its core. ")
        + (f"In this run the simulated hosts (SSH servers, agents) ran at niceness {ctx.hosts_nice} (--hosts-nice), "
           "so that the console got a core whenever it was runnable, as beside hosts of their own. "
           if ctx.hosts_nice else "")
        + ("Each simulated host's agent ran in a PID namespace of its own with its stand-in (unshare -pf "
           "--mount-proc, bench/ns_host.py): its /proc scan sees its own host's processes only, as on a machine of "
           "its own." if pidns else
           "unshare -pf --mount-proc was refused here, so the agents' cost is inflated: every agent scans the whole "
           "shared /proc (all N hosts' processes plus everybody else's), which is O(N) per agent and O(N²) in "
           "total — an artifact of simulating N hosts on one box.")
        + " The agents' CPU (their whole process trees) is reported apart from the console's.",
        "The serving stand-in is one idle process per host holding 80 GB on each of its 8 simulated GPUs "
        "(8 alloc files); its title does not match the SGLang patterns, so each agent lists only its own host's "
        "stand-in (as role 'other' via its GPU memory) instead of all of them. No host serves a live SGLang server "
        "here: a fleet that does costs the console more per host (the advisor's server rules over its figures, a "
        "/health probe every few seconds, the log follow), which this benchmark does not measure.",
        f"Per-host memory cost is the RSS growth divided by hosts: ≈ {top['rss_delta_mib'] / max(1, top['n']):.2f} MiB "
        f"at {top['n']} hosts (links, asyncssh connection state, the latest sample and views).",
    ]
    sec.notes.append("Each host has an SSH config file of its own (one Host block), as an operator's hosts might share "
                     "one: the console parses a config file once per host until it changes (console/link/ssh.py "
                     "resolve, cached by the file's mtime, size and inode) and asyncssh parses it again in its executor "
                     "thread on each connection, O(lines) each; one file of N blocks would make connecting N hosts "
                     "O(N²) in asyncssh's parse. The agents load their code from a per-digest cache after the first "
                     "start (console/host/shipboot.py), and AES-GCM is offered first (console/link/ssh.py "
                     "FAST_CIPHERS).")
    sec.notes.append("The stand-in SSH servers send one packet per channel write, as OpenSSH's sshd does "
                     "(bench/fleet_server.py send_as_openssh: asyncssh would put an empty SSH_MSG_IGNORE before each, "
                     "doubling what the console decrypts per sample; tests/test_bench_fleet_server.py counts the real "
                     "sshd's packets). 'SSH packets per sample' is what the console received over the window divided "
                     "by the samples: about 1 (plus the odd window adjust or keepalive).")
    sec.notes.append("The console runs the TUI's garbage-collector policy (console/ui/idle_gc.py: the oldest "
                     "generation is never collected automatically; one collection when idle, at most every 30 s, "
                     "freezing what survived; the heap frozen once a size's links are attached, as the app does once "
                     "its panels are mounted). 'full GC pauses' are the oldest generation's collections inside the "
                     "window and their longest pause (part of the event-loop lag).")
    sec.notes.append("Young collections: " + {
        "on": "paced as the TUI paces them (console/ui/idle_gc.py pace_young: gc.collect(1) on a timer aiming at 4 ms "
              "pauses; while those find no garbage, one tick in %d collects and the others freeze the young "
              "generations; CPython's young count is decremented by the deallocation of old samples, so unpaced it lets "
              "the live new samples pile up for one long collection). 'cyclic garbage found' is what the collections "
              "in the window found unreachable." % YOUNG_SAMPLE_EVERY,
        "collect": "paced, every tick a collection, none frozen (--young-pacing collect), not as the TUI runs.",
        "off": "left to CPython's thresholds (--young-pacing off), not as the TUI runs."}[pacing]
        + (f" Paced ticks in the run: {collector.young_count}, {collector.young_frozen} of them freezes."
           if pacing != "off" else ""))
    sec.notes.append("The agents' CPU is read before and after each window in a worker thread (a /proc walk per "
                     "agent), never on the event loop while the lag probe runs.")
    del per_host


def _packets_received(links: list) -> int:
    """SSH packets the console has received over all links (asyncssh's receive sequence numbers)."""
    return sum(getattr(lk.conn, "_recv_seq", 0) for lk in links if lk.conn is not None)


def _p99(row: dict, key: str) -> float:
    """The p99 of a row's raw samples (kept beside their summary)."""
    xs = row.get(key + "_raw") or []
    return percentile(xs, 99) if xs else 0.0
