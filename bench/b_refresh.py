"""1. What one refresh of a host costs: the console's agent versus the incident's fresh ssh per tick.

Over a real OpenSSH sshd on 127.0.0.1. Three ways, interleaved in rounds so load drift hits all:

* agent request: one ``snapshot`` request on the open link, validated into a HostSnapshot;
* agent push: the agent's own tick (interval 0.25 s here, 1 s in the product), same validation;
* incident: ``ssh -F cfg testhost 'ps aux | grep sglang; nvidia-smi --query-gpu=...; tail -n 15 LOG'``
  as a fresh OpenSSH process per tick. There is no nvidia-smi on this machine: the command is
  kept as is and its failure ("command not found") is part of what it costs.

Client CPU: this process (getrusage SELF) plus reaped children (the ssh clients). Server CPU: the
whole sshd process tree (master, per-connection sshd, shells, ps/grep/tail, the agent), from
/proc/<pid>/stat including reaped children.
"""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import time

from bench.links import open_link
from bench.procstat import children_cpu, self_cpu, tree_cpu
from bench.simhost import start_stand_in, stop, write_sim_dir
from bench.stats import cell, num, ratio, summarize
from console.link.client import LinkListener
from console.model import HostSnapshot

SMI = ("nvidia-smi --query-gpu=index,uuid,name,power.draw,power.limit,utilization.gpu,memory.used,"
       "memory.total,temperature.gpu --format=csv,noheader,nounits")


async def run(ctx, sec) -> None:
    sshd = ctx.sshd()
    root = ctx.tmp / "refresh"
    runs = root / "runs"
    sid = "bench-refresh-session"
    (runs / sid).mkdir(parents=True)
    log = runs / sid / "output.log"
    log.write_text("".join(f"[2026-10-30 12:00:{i % 60:02d} TP0] Decode batch, #running-req: 12, #token: 90000, "
                           f"token usage: 0.41, accept len: 3.21, gen throughput (token/s): 412.30, #queue-req: 0\n"
                           for i in range(5000)))
    sim = write_sim_dir(root / "sim", 8)
    stand_in = start_stand_in("python3 -m sglang.launch_server --model-path /models/demo-27b --tp-size 8", sim)
    incident_cmd = f"ps aux | grep sglang; {SMI}; tail -n 15 {shlex.quote(str(log))}"
    rounds, n_req, n_ssh, push_s = ctx.n(3, 1), ctx.n(70, 10), ctx.n(10, 2), ctx.n(6.0, 1.0)
    req_lat, ssh_lat, push_lat = [], [], []
    cpu = {k: [0.0, 0.0, 0] for k in ("req", "push", "ssh")}  # client s, server s, count
    ssh_rc, ssh_err = None, ""
    link = await open_link(sshd.alias, sshd.ssh_config, runs, gpu_source="sim", sim_dir=sim, interval=3600)
    try:
        for _ in range(5):  # warm up (first /proc scan, caches)
            link.sample = await link.request("snapshot", audit=False)
        for _ in range(rounds):
            # --- agent: one snapshot request per refresh
            c0, s0 = self_cpu(), tree_cpu(sshd.pid)
            for _ in range(n_req):
                t0 = time.perf_counter()
                link.sample = await link.request("snapshot", audit=False)
                link.received_at, link._snapshot = time.time(), None
                link.snapshot()
                req_lat.append((time.perf_counter() - t0) * 1000)
            _acc(cpu["req"], self_cpu() - c0, tree_cpu(sshd.pid) - s0, n_req)

            # --- agent: pushed ticks
            ticks: list[float] = []

            class OnSample(LinkListener):
                def on_sample(self, snap: HostSnapshot) -> None:  # the link built the snapshot for it
                    ticks.append((time.time() - (snap.sampled_at or time.time())) * 1000)
            on = OnSample()
            link.listen(on)
            await link.request("set_interval", {"interval": 0.25}, audit=False)
            await asyncio.sleep(0.6)
            ticks.clear()
            c0, s0 = self_cpu(), tree_cpu(sshd.pid)
            await asyncio.sleep(push_s)
            n = len(ticks)
            _acc(cpu["push"], self_cpu() - c0, tree_cpu(sshd.pid) - s0, n)
            await link.request("set_interval", {"interval": 3600}, audit=False)
            link.unlisten(on)
            push_lat.extend(ticks[:n])
            await asyncio.sleep(0.3)

            # --- incident: a fresh OpenSSH connection per refresh
            c0, k0, s0 = self_cpu(), children_cpu(), tree_cpu(sshd.pid)
            for _ in range(n_ssh):
                t0 = time.perf_counter()
                p = await asyncio.to_thread(subprocess.run, sshd.openssh_argv() + [incident_cmd],
                                            capture_output=True, text=True, timeout=30)
                ssh_lat.append((time.perf_counter() - t0) * 1000)
                ssh_rc, ssh_err = p.returncode, p.stderr.strip().splitlines()[-1:] or [""]
            await asyncio.sleep(0.2)  # let sshd reap the last session
            _acc(cpu["ssh"], (self_cpu() - c0) + (children_cpu() - k0), tree_cpu(sshd.pid) - s0, n_ssh)
    finally:
        await link.close()
        stop(stand_in)

    per = {k: (v[0] / v[2] * 1000 if v[2] else None, v[1] / v[2] * 1000 if v[2] else None) for k, v in cpu.items()}
    tot = {k: (per[k][0] + per[k][1]) if per[k][0] is not None else None for k in per}
    sl, rl, pl = summarize(ssh_lat), summarize(req_lat), summarize(push_lat)
    sec.target = "agent ≥ 20× cheaper than a fresh ssh per tick (CPU, both ends)"
    best = max(tot["req"] or 0, tot["push"] or 0) or None
    r = (tot["ssh"] / best) if best and tot["ssh"] else None
    sec.verdict = ("met" if r and r >= 20 else "missed") + (f" ({r:.0f}× less CPU for the costlier agent way)" if r else "")
    sec.table(["way", "latency per refresh", "client CPU / refresh", "server CPU / refresh", "total CPU",
               "CPU ratio vs incident", "latency ratio"], [
        ["incident: fresh `ssh … 'ps aux | grep; nvidia-smi; tail'`", cell(sl), f"{num(per['ssh'][0])} ms",
         f"{num(per['ssh'][1])} ms", f"{num(tot['ssh'])} ms", "1×", "1×"],
        ["agent: `snapshot` request on the open link", cell(rl), f"{num(per['req'][0])} ms",
         f"{num(per['req'][1])} ms", f"{num(tot['req'])} ms", ratio(tot["ssh"], tot["req"]),
         ratio(sl.median if sl else None, rl.median if rl else None)],
        ["agent: pushed tick (sampled_at → received)", cell(pl), f"{num(per['push'][0])} ms",
         f"{num(per['push'][1])} ms", f"{num(tot['push'])} ms", ratio(tot["ssh"], tot["push"]),
         ratio(sl.median if sl else None, pl.median if pl else None)],
    ])
    sec.notes += [
        f"{rounds} interleaved rounds of {n_req} requests, {push_s:.0f} s of pushed ticks at 4 Hz and {n_ssh} fresh ssh "
        f"commands; CPU per refresh = CPU over the block / refreshes in it.",
        "The agent samples 8 simulated GPUs (SimGpus), every process in /proc (the whole shared machine) and the "
        "run directories; the console side includes parsing the JSON and validating a HostSnapshot (pydantic).",
        f"The incident's command exits {ssh_rc} here (its last part, tail, succeeds) while its nvidia-smi fails: "
        f"there is none on this machine (`{ssh_err[0][:90]}`). "
        "A real nvidia-smi would add its own start-up and NVML query to every tick on the host, so the "
        "incident's figures are a lower bound.",
        "Latency of a pushed tick is the time from the agent's `sampled_at` (taken before the /proc scan) to the "
        "console's listener; a real network adds half a round trip to it, a fresh ssh several.",
    ]


def _acc(slot, client, server, n):
    slot[0] += client
    slot[1] += server
    slot[2] += n
