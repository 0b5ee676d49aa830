"""The console's own work per agent message, in-process: a recorded agent stream replayed into N links and trackers.

The fleet benchmark (``bench/b_fleet.py``) measures the whole console beside 512 simulated hosts on the 16-core
machine, where the agents' load moves its figures. This tool measures only what the console does with a message
once its bytes have arrived (JSON, the delta, the snapshot, the tracker's view), with no SSH, no agents and no other
process, so that two source trees can be compared on any machine, a few per cent apart:

    python -m bench.fleet_replay record /tmp/stream.jsonl          # one real agent (sim GPUs, a stand-in), 30 ticks
    git archive OLD | tar -x -C /tmp/old
    python -m bench.fleet_replay ab /tmp/stream.jsonl /tmp/old . --rounds 5 --hosts 64

``record`` runs a local agent exactly as the fleet benchmark's hosts are set up (8 simulated GPUs, an idle
stand-in holding memory on them) at a 0.2 s interval and keeps its lines from one whole sample to the next (one
whole sample and ``FULL_EVERY - 1`` deltas: the mix of the steady state). ``replay`` (one tree, one process) feeds
the stream to ``--hosts`` links, each with its HostTracker as the backend attaches them, round after round (each
round starts with the whole sample, so every delta applies), and prints the process CPU per message. ``ab``
alternates the trees, each in a fresh process on its own code, and prints both medians and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


async def _record(out: Path, ticks: int) -> None:
    from bench.fleet_server import host_title
    from bench.simhost import start_stand_in, stop, write_sim_dir
    from console.config import HostConfig
    from console.host.delta import FULL_EVERY
    from console.link.link import HostLink
    from console.link.ssh import HostSpec

    root = Path(tempfile.mkdtemp(prefix="mtpreplay-"))
    sim = write_sim_dir(root / "sim", 8)
    stand_in = start_stand_in(host_title(0), sim)
    lines: list[bytes] = []
    link = HostLink(HostSpec(name="local", local=True),
                    HostConfig(runs_dir=str(root / "runs"), gpu_source="sim", sim_dir=str(sim)), interval=0.2)
    try:
        await link.open()
        assert link.chan is not None
        chan, take = link.chan, link._on_line

        def tap(c, line: bytes) -> None:
            lines.append(line)
            take(c, line)
        chan.deliver(lambda line: tap(chan, line), lambda: None)
        deadline = time.monotonic() + 0.2 * (FULL_EVERY * 2 + ticks) + 30
        while time.monotonic() < deadline:
            wholes = [i for i, ln in enumerate(lines) if ln.startswith(b'{"type":"sample"')]
            if len(wholes) >= 2:
                break
            await asyncio.sleep(0.1)
        wholes = [i for i, ln in enumerate(lines) if ln.startswith(b'{"type":"sample"')]
        if len(wholes) < 2:
            raise SystemExit(f"no two whole samples in {len(lines)} lines")
        stream = [ln for ln in lines[wholes[0]:wholes[1]] if b'"type":"sample' in ln]
        out.write_bytes(b"".join(stream))
        print(f"recorded {len(stream)} messages ({sum(map(len, stream)) / len(stream):.0f} bytes each on average)",
              file=sys.stderr)
    finally:
        await link.close()
        stop(stand_in)


def _timeline(lines: list[bytes], rounds: int, interval: float = 1.0) -> list[tuple[float, bytes]]:
    """The recorded stream ``rounds`` times over as one agent would have sent it at ``interval``: message ``g`` sampled
    at ``T0 + g * interval`` (the recording's 0.2 s cadence made the fleet's 1 Hz one: the tracker's once-a-second
    work, its advice, runs per message as in the fleet), each delta made again against the message before it (its
    patch, sequence numbers and digest), so that every one applies. Returns (when it arrives, its line)."""
    from console.host import delta as D

    msgs = [json.loads(ln) for ln in lines]
    t0 = msgs[0]["data"]["sampled_at"]
    out, cur = [], None
    for g in range(rounds * len(msgs)):
        m = msgs[g % len(msgs)]
        t = t0 + g * interval
        if m["type"] == "sample":
            new = D.canonical(m["data"])
        else:
            new = D.canonical(D.apply(cur, m["patch"]))
        lag = (new.get("sampled_at") or t) - (new.get("gpu_sampled_at") or new.get("sampled_at") or t)
        new["sampled_at"] = t
        if new.get("gpu_sampled_at") is not None:
            new["gpu_sampled_at"] = t - lag
        if m["type"] == "sample":
            msg = {"type": "sample", "seq": g + 1, "data": new}
        else:
            patch = D.diff(cur, new)
            msg = {"type": "sample_delta", "seq": g + 1, "base": g, "patch": patch,
                   "digest": D.changed_digest(new, patch)}
        cur = new
        out.append((t + 0.003, (json.dumps(msg, separators=(",", ":")) + "\n").encode()))
    return out


async def _replay(stream: Path, hosts: int, rounds: int) -> dict:
    from console.link import jsonline
    from console.link.link import HostLink
    from console.link.ssh import HostSpec
    from console.ops.tracker import HostTracker

    lines = stream.read_bytes().splitlines(keepends=True)
    timeline = _timeline(lines, rounds + 1)
    now = [timeline[0][0]]

    def clock() -> float:
        return now[0]
    hello = {"hostname": "replay", "uid": os.getuid()}
    links, trackers = [], []
    for i in range(hosts):
        link = HostLink(HostSpec(name=f"replay-{i:03d}", local=True), interval=1.0, clock=clock)
        link.hello, link.state = hello, "connected"
        links.append(link)
        trackers.append(HostTracker(link, interval=1.0, on_view=lambda v: None, on_log=lambda *a: None, clock=clock))

    if hasattr(HostLink, "_on_line"):  # the tree reads a line in one call
        def feed(link, line: bytes) -> None:
            link._on_line(None, line)
    else:  # an older tree: what its read loop did per line
        def feed(link, line: bytes) -> None:
            msg = jsonline.loads(line)
            link._heard()
            link._dispatch(msg)
    import gc
    gc.collect()
    gc.freeze()  # the TUI's policy after mounting: what exists now is never walked again
    per_round = []
    n = len(lines)
    for r in range(rounds + 1):
        c0 = time.process_time()
        for at, line in timeline[r * n:(r + 1) * n]:
            now[0] = at
            for link in links:
                feed(link, line)
        took = time.process_time() - c0
        if r:  # round 0 warms the memos and the models
            per_round.append(took / (n * hosts) * 1e6)
        gc.collect(1)
        await asyncio.sleep(0)  # what the trackers started (their reads: the links are down) runs out
    errors = sorted({w for lk in links for w in lk.book.refused})
    return {"us_per_msg": statistics.median(per_round), "rounds": per_round, "messages": n,
            "refused": errors[:3], "deltas": sum(lk.book.deltas for lk in links)}


def _ab(stream: Path, trees: list[str], rounds: int, hosts: int, reps: int) -> None:
    here = Path(__file__).resolve()
    got: dict[str, list[float]] = {t: [] for t in trees}
    for rep in range(reps):
        for tree in (trees if rep % 2 == 0 else trees[::-1]):
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            out = subprocess.run([sys.executable, str(here), "replay", str(stream), "--hosts", str(hosts),
                                  "--rounds", str(rounds), "--json"], env=env, cwd=os.path.abspath(tree),
                                 capture_output=True, text=True, timeout=600)
            if out.returncode:
                raise SystemExit(f"{tree}: {out.stderr[-800:]}")
            res = json.loads(out.stdout.strip().splitlines()[-1])
            if res["refused"]:
                raise SystemExit(f"{tree}: deltas refused: {res['refused']}")
            got[tree].append(res["us_per_msg"])
            print(f"rep {rep} {tree}: {res['us_per_msg']:.1f} µs per message", file=sys.stderr, flush=True)
    base = statistics.median(got[trees[0]])
    for t in trees:
        m = statistics.median(got[t])
        print(f"{t}: median {m:.1f} µs per message ({', '.join(f'{x:.1f}' for x in got[t])}); "
              f"{m / base:.2f}x of {trees[0]}")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet_replay", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out", type=Path)
    rec.add_argument("--ticks", type=int, default=5)
    rep = sub.add_parser("replay")
    rep.add_argument("stream", type=Path)
    rep.add_argument("--hosts", type=int, default=64)
    rep.add_argument("--rounds", type=int, default=5)
    rep.add_argument("--json", action="store_true")
    ab = sub.add_parser("ab")
    ab.add_argument("stream", type=Path)
    ab.add_argument("trees", nargs="+")
    ab.add_argument("--hosts", type=int, default=64)
    ab.add_argument("--rounds", type=int, default=5)
    ab.add_argument("--reps", type=int, default=4)
    a = ap.parse_args()
    if a.cmd == "record":
        asyncio.run(_record(a.out, a.ticks))
    elif a.cmd == "replay":
        res = asyncio.run(_replay(a.stream, a.hosts, a.rounds))
        print(json.dumps(res) if a.json else f"{res['us_per_msg']:.1f} µs per message "
              f"({res['messages']} messages x {a.hosts} hosts x {a.rounds} rounds; refused: {res['refused']})")
    else:
        _ab(a.stream, a.trees, a.rounds, a.hosts, a.reps)


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a file (the ab mode's children): the tree's root is on sys.path
        sys.path.insert(0, os.getcwd())
    main()
