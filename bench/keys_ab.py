"""Key latency, the old way and the new in one run: two source trees alternated, fresh processes, the same cases.

    git archive OLD_COMMIT | tar -x -C /tmp/old        # the old way
    git archive HEAD | tar -x -C /tmp/new              # or a copy with only the files of one change
    cp bench/b_keys.py /tmp/old/bench/ && cp bench/b_keys.py /tmp/new/bench/   # one set of cases for both
    python -m bench.keys_ab /tmp/old /tmp/new --rounds 3 -n 6 l l+ e e+ t

Each round runs every size once per tree, old then new, each in a process of its own on that tree's code (this
file is run there; the cases are that tree's ``bench/b_keys.py``'s ``KeyBench``, hence the copy above: ``l+``/``e+`` are the flag form's keys timed to the frame with every
field). A tree is measured 2 s after its app shows its first views (past what it does right after the start). It
prints, per key and size, both trees' median, p95 and CPU and the new/old ratio of the medians: on a shared machine
the ratio is the measurement, the absolute figures move with the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SIZES = [(200, 50), (80, 24)]


async def _one(n: int, size: tuple[int, int], keys: list[str]) -> dict[str, dict[str, list[float]]]:
    """In a process started on one tree: ``keys`` pressed ``n`` times each at ``size``."""
    from bench import b_keys as B

    f = B._imports()
    app = f.frozen_app(f.FakeBackend([f.view_a(), f.view_b()]))
    frames = B.watch_frames(app)
    out: dict[str, dict[str, list[float]]] = {}
    async with app.run_test(size=size, notifications=True) as pilot:
        await f.started(pilot)
        bench = B.KeyBench(f, app, pilot, frames)
        await pilot.pause(2.0)
        await bench.settle()
        cases = bench.cases()
        for key in keys:
            lat, cpu = await bench.measure(key.rstrip("+"), cases[key], n)
            out[key] = {"lat": lat, "cpu": cpu}
        await bench.to_main()
    return out


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.keys_ab", description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("keys", nargs="+", help="keys as b_keys' cases name them (l+ / e+: the form's every field)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=6, help="presses of each key per tree, size and round")
    ap.add_argument("--json", metavar="PATH", help="also write every sample here")
    args = ap.parse_args(argv)
    res: dict[str, dict[str, dict[str, list[float]]]] = {}
    t0, load0 = time.time(), os.getloadavg()
    for r in range(args.rounds):
        for w, h in SIZES:
            for tree in ("old", "new"):
                root = getattr(args, tree)
                code = (f"import asyncio, json, runpy, sys; sys.path.insert(0, {root!r}); "  # this file, that tree's code
                        f"one = runpy.run_path({__file__!r})['_one']; "
                        f"print(json.dumps(asyncio.run(one({args.n}, ({w}, {h}), {args.keys!r}))))")
                p = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=900)
                if p.returncode != 0:
                    print(p.stderr[-3000:], file=sys.stderr)
                    return 1
                for key, v in json.loads(p.stdout.strip().splitlines()[-1]).items():
                    e = res.setdefault(f"{key} at {w}×{h}", {}).setdefault(tree, {"lat": [], "cpu": []})
                    e["lat"] += v["lat"]
                    e["cpu"] += v["cpu"]
        print(f"round {r + 1}/{args.rounds} done ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    print(f"load average {load0[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; {time.time() - t0:.0f} s")
    for name, v in res.items():
        o, n = v["old"], v["new"]
        mo, mn = statistics.median(o["lat"]), statistics.median(n["lat"])
        print(f"{name:16} old {mo:6.1f} ms (p95 {_p95(o['lat']):6.1f}, CPU {statistics.median(o['cpu']):6.1f}) | "
              f"new {mn:6.1f} ms (p95 {_p95(n['lat']):6.1f}, CPU {statistics.median(n['cpu']):6.1f}) | "
              f"new/old {mn / mo:.2f}  n={len(o['lat'])}/{len(n['lat'])}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"res": res, "load0": load0, "load1": os.getloadavg(), "secs": time.time() - t0}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
