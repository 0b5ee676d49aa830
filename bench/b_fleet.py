"""4. Fleet: 1, 8, 32 and 64 hosts at 1 Hz, each with 8 simulated GPUs and a serving stand-in.

The hosts are in-process ``asyncssh`` servers in one helper process (``bench/fleet_server.py``),
each session running the real agent as its own process (64 hosts = 64 agents). This process is
the console: one ``HostLink`` per host, and per pushed sample what the backend does per tick
(an immutable ``HostSnapshot``, ``derive_views`` and a ``HostView``). Sizes grow in place: the
links of the smaller fleet stay open while more are added.

Measured per size, over a window after a warm-up: the console's CPU (this process, getrusage),
its RSS, its event-loop lag (a 50 ms sleep's overshoot), the tick latency per host (the agent's
``sampled_at`` → the console's listener), samples received vs expected, and the CPU of the SSH
server process and of all the agents.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.links import open_link
from bench.procstat import descendants, self_cpu, self_rss, stat, tree_cpu
from bench.simhost import start_stand_in, stop, write_sim_dir
from bench.stats import cell, summarize
from console.core.sessions import derive_views
from console.link.client import LinkListener
from console.model import HostSnapshot, HostView

REPO = Path(__file__).resolve().parents[1]


class Console:
    """The console's per-tick work for every host, with the measurements."""

    def __init__(self):
        self.lat: list[float] = []
        self.count = 0
        self.views: dict[str, HostView] = {}

    def listener(self, link) -> LinkListener:
        console = self

        class OnSample(LinkListener):
            def on_sample(self, snap: HostSnapshot) -> None:
                now = time.time()
                console.views[link.name] = HostView(snapshot=snap, sessions=derive_views(snap, {}, now))
                console.lat.append((now - (snap.sampled_at or now)) * 1000)
                console.count += 1
        return OnSample()


async def _lag_probe(out: list[float], stop_ev: asyncio.Event) -> None:
    while not stop_ev.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.05)
        out.append((time.perf_counter() - t - 0.05) * 1000)


async def run(ctx, sec) -> None:
    sizes = ctx.n([1, 8, 32, 64], [1, 3])
    window, warm = ctx.n(12.0, 2.0), ctx.n(3.0, 1.0)
    d = ctx.tmp / "fleet"
    d.mkdir()
    nmax = max(sizes)
    srv = subprocess.Popen([sys.executable, "-m", "bench.fleet_server", str(d), str(nmax)], cwd=REPO,
                           stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=open(d / "server.log", "wb"),
                           start_new_session=True)
    stand_ins = []
    links = []
    console = Console()
    rows = []
    try:
        deadline = time.monotonic() + 60
        while not (d / "ready").exists():
            if srv.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("fleet server did not start: " + (d / "server.log").read_text()[-800:])
            await asyncio.sleep(0.1)
        base_rss = self_rss()
        for n in sizes:
            t0 = time.perf_counter()
            new = []
            for i in range(len(links), n):
                h = d / f"host-{i:02d}"
                sim = write_sim_dir(h / "sim", 8)
                stand_ins.append(start_stand_in(f"serving-stand-in-{i:02d} --tp-size 8", sim))
                new.append(open_link(f"fleet-{i:02d}", d / "ssh_config", h / "runs", gpu_source="sim",
                                     sim_dir=sim, interval=1.0))
            opened = await asyncio.gather(*new)
            for link in opened:
                link.listen(console.listener(link))
            links.extend(opened)
            connect_s = time.perf_counter() - t0
            await asyncio.sleep(warm)
            lag: list[float] = []
            stop_ev = asyncio.Event()
            probe = asyncio.create_task(_lag_probe(lag, stop_ev))
            console.lat.clear()
            c0, w0 = self_cpu(), time.perf_counter()
            s0 = stat(srv.pid)
            a0 = sum(tree_cpu(p) for p in descendants(srv.pid) if (stat(p) or {}).get("ppid") == srv.pid)
            await asyncio.sleep(window)
            wall = time.perf_counter() - w0
            c1 = self_cpu()
            s1 = stat(srv.pid)
            a1 = sum(tree_cpu(p) for p in descendants(srv.pid) if (stat(p) or {}).get("ppid") == srv.pid)
            stop_ev.set()
            await probe
            lat = list(console.lat)
            rows.append({
                "n": n, "connect_s": connect_s, "cpu_pct": (c1 - c0) / wall * 100, "rss_mib": self_rss() / 2**20,
                "rss_delta_mib": (self_rss() - base_rss) / 2**20, "lat": summarize(lat), "lag": summarize(lag),
                "received": len(lat), "expected": n * wall,
                "ssh_pct": ((s1["utime"] + s1["stime"]) - (s0["utime"] + s0["stime"])) / wall * 100,
                "agents_pct": (a1 - a0) / wall * 100,
                "agent_tick_ms": summarize([lk.sample.get("tick_ms") for lk in links if lk.sample]),
            })
    finally:
        await asyncio.gather(*(lk.close() for lk in links), return_exceptions=True)
        for p in stand_ins:
            stop(p)
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
    sec.target = "64 hosts × 8 GPUs: console under 50 % of one core, p95 tick latency under 200 ms"
    if top["n"] >= 64 and top["lat"]:
        ok = top["cpu_pct"] < 50 and top["lat"].p95 < 200
        sec.verdict = ("met" if ok else "missed") + f" (64 hosts: console {top['cpu_pct']:.0f} % of a core, " \
                      f"p95 tick latency {top['lat'].p95:.0f} ms)"
    else:
        sec.verdict = "not measured at 64 hosts (quick run)"
    sec.table(["hosts", "console CPU (% of one core)", "console RSS (Δ vs 0 hosts)", "tick latency sampled_at → console",
               "event-loop lag (50 ms timer overshoot)", "samples received / expected",
               "SSH server process CPU", "all agents CPU", "agent tick_ms (per host)", "connect all"], [
        [str(r["n"]), f"{r['cpu_pct']:.1f} %", f"{r['rss_mib']:.0f} MiB (+{r['rss_delta_mib']:.0f})", cell(r["lat"]),
         cell(r["lag"]), f"{r['received']} / {r['expected']:.0f}", f"{r['ssh_pct']:.1f} %", f"{r['agents_pct']:.1f} %",
         cell(r["agent_tick_ms"]), f"{r['connect_s']:.1f} s"] for r in rows])
    per_host = [(r["cpu_pct"] / r["n"]) for r in rows if r["n"]]
    sec.notes += [
        f"Window {window:.0f} s per size after {warm:.0f} s of warm-up; percentages are of one core "
        f"(this machine has {os.cpu_count()}). The console's CPU includes the benchmark's own 20 Hz lag probe "
        "and listener bookkeeping, so the fixed part"
        + (f" ({rows[0]['cpu_pct']:.1f} % at {rows[0]['n']} host(s))" if rows else "") + " is an overestimate.",
        "Console CPU per host per tick ≈ " + ", ".join(f"{r['cpu_pct'] * 10 / r['n']:.2f} ms ({r['n']} hosts)"
                                                       for r in rows) + ": SSH decryption (asyncssh), JSON "
        "parsing, and the pydantic HostSnapshot + derive_views per sample.",
        f"Everything runs on the same {os.cpu_count()} cores: the console, one Python process hosting all SSH "
        "servers (its "
        "encryption is what real hosts would do each for themselves) and N agents. On a real fleet the agents and "
        "SSH servers run on N different machines; here they compete with the console, which inflates its tick "
        "latency at 32–64 hosts. The agents' cost is also inflated: every agent scans the whole shared /proc "
        "(all N hosts' processes plus everybody else's), which is O(N) per agent and O(N²) in total — an "
        "artifact of simulating N hosts on one box.",
        "The serving stand-in is one idle process per host holding 80 GB on each of its 8 simulated GPUs "
        "(8 alloc files); its title does not match the SGLang patterns, so each agent lists only its own host's "
        "stand-in (as role 'other' via its GPU memory) instead of all 64 — on one shared /proc that is the only way "
        "to keep each host's sample the size it would have on its own machine.",
        f"Per-host memory cost is the RSS growth divided by hosts: ≈ {top['rss_delta_mib'] / max(1, top['n']):.2f} MiB "
        f"at {top['n']} hosts (links, asyncssh connection state, the latest sample and views).",
    ]
    del per_host
