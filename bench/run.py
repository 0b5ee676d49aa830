"""Run the benchmarks and write BENCHMARKS.md.

    python -m bench                 # every benchmark at full size, rewrites BENCHMARKS.md
    python -m bench --quick         # tiny sizes (smoke test); prints the report, writes nothing
    python -m bench --only ui       # one benchmark; prints its report, writes nothing
    python -m bench --only ui --out BENCHMARKS.md   # replaces that section, keeps the others
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):  # `python bench/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.procstat import machine_busy
from bench.report import Section, current_commit, machine, merge, parse, render
from tests.helpers.sshd import Sshd, start_sshd

REPO = Path(__file__).resolve().parents[1]

# key -> (module, title)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "refresh": ("bench.b_refresh", "Cost of one host refresh: agent vs a fresh ssh per tick"),
    "detect": ("bench.b_detect", "Failure detection and ready detection (issue items 2 and 3)"),
    "fleet": ("bench.b_fleet", "Fleet: 1 to 64 hosts at 1 Hz"),
    "ui": ("bench.b_ui", "UI: 64 panels, keypress latency, a 10,000 lines/s log"),
    "startup": ("bench.b_startup", "Start-up"),
    "biglog": ("bench.b_biglog", "Opening the tail of a 1 GB log"),
    "truth": ("bench.b_truth", "UI truth: the log pane follows a new session, the panel reads READY/STOPPED"),
    "deploy": ("bench.b_deploy", "Rolling relaunch behind the gateway vs a plain relaunch, under load (issue 29)"),
    "keys": ("bench.b_keys", "Key latency: every binding of the GPU panels' screen, key to the frame showing it"),
    "lines": ("bench.b_lines", "Reading the agent's lines over SSH: a stream reader per link, or the session's callback"),
}


class Ctx:
    """What every benchmark gets: size mode, a private temp dir, a lazily started sshd."""

    def __init__(self, quick: bool, tmp: Path, sizes: list[int] | None = None, hosts_nice: int = 0,
                 young_pacing: str = "on", pin: str = "auto"):
        self.quick, self.tmp = quick, tmp
        self.sizes = sizes
        """``--sizes``: the sizes a scaling benchmark (fleet) runs at, instead of its own."""
        self.hosts_nice = hosts_nice
        """``--hosts-nice``: the niceness the fleet's simulated hosts (SSH servers, agents) run at."""
        self.young_pacing = young_pacing
        """``--young-pacing``: the fleet's console paces its young collections as the TUI does (on), collects at every
        paced tick (collect: no freezes), or leaves them to CPython (off)."""
        self.pin = pin
        """``--pin``: the fleet's console runs on a core of its own, the simulated hosts on the others (auto), or
        all share every core (off)."""
        self._sshd: Sshd | None = None

    def n(self, full, quick):
        return quick if self.quick else full

    def sshd(self) -> Sshd:
        if self._sshd is None:
            self._sshd = start_sshd(self.tmp / "sshd")
        return self._sshd

    def close(self) -> None:
        if self._sshd is not None:
            self._sshd.stop()


def run_one(key: str, ctx: Ctx, commit: str) -> Section:
    mod_name, title = BENCHMARKS[key]
    t0 = time.monotonic()
    sec = Section(key=key, title=title, how=f"python -m bench --only {key}", commit=commit, measured_at=time.time(),
                  quick=ctx.quick)
    try:
        mod = importlib.import_module(mod_name)
        result = mod.run(ctx, sec)
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    except Exception:
        sec.error = traceback.format_exc()[-3000:]
    sec.seconds = time.monotonic() - t0
    return sec


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes must be whole numbers separated by commas, not {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"sizes must be at least 1: {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description="mtpconsole performance benchmarks")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, a smoke test; writes no file unless --out")
    ap.add_argument("--only", action="append", choices=list(BENCHMARKS),
                    help="run only this benchmark (repeatable); writes no file unless --out")
    ap.add_argument("--out", metavar="PATH",
                    help="write the report here; an existing report keeps the sections not run now "
                         "(default: BENCHMARKS.md for a full run, else print only)")
    ap.add_argument("--sizes", metavar="N,N,...", type=_sizes,
                    help="the sizes a scaling benchmark runs at (fleet: hosts), e.g. 1,64,128,256,512")
    ap.add_argument("--hosts-nice", metavar="N", type=int, default=0, choices=range(0, 20),
                    help="fleet: run the simulated hosts (their SSH servers and agents) at this niceness (0-19), so "
                         "that they yield the cores to the console as hosts of their own would (default 0)")
    ap.add_argument("--young-pacing", choices=("on", "collect", "off"), default="on",
                    help="fleet: pace the console's young collections as the TUI does (on: console/ui/idle_gc.py), "
                         "collect at every paced tick without freezing (collect), or leave them to CPython's "
                         "thresholds (off), for an A/B (default on)")
    ap.add_argument("--pin", choices=("auto", "off"), default="auto",
                    help="fleet: run the console on a core of its own and the simulated hosts on the other CPUs, as "
                         "hosts of their own would (auto: on machines of 8 CPUs or more; bench/cpus.py), or let "
                         "them share every core (off)")
    args = ap.parse_args(argv)
    keys = args.only or list(BENCHMARKS)
    full = not args.quick and not args.only
    out = Path(args.out) if args.out else (REPO / "BENCHMARKS.md" if full else None)
    commit = current_commit()
    started = time.time()
    mach = machine()
    b0 = machine_busy()
    tmp = Path(tempfile.mkdtemp(prefix="mtpbench-"))
    ctx = Ctx(args.quick, tmp, args.sizes, args.hosts_nice, args.young_pacing, args.pin)
    sections: list[Section] = []
    try:
        for key in keys:
            print(f"[bench] {key} ...", file=sys.stderr, flush=True)
            sec = run_one(key, ctx, commit)
            status = "ERROR" if sec.error else (sec.verdict or "done")
            print(f"[bench] {key}: {status} ({sec.seconds:.1f} s)", file=sys.stderr, flush=True)
            if sec.error:
                print(sec.error, file=sys.stderr)
            sections.append(sec)
    finally:
        ctx.close()
        shutil.rmtree(tmp, ignore_errors=True)
    b1 = machine_busy()
    busy = (b1[0] - b0[0]) / (b1[1] - b0[1]) if b1[1] > b0[1] else None
    existing = parse(out.read_text(encoding="utf-8")) if out is not None and out.exists() and not full else {}
    order = [(k, t) for k, (_, t) in BENCHMARKS.items()]
    text = render(merge(sections, existing, order), mach, quick=args.quick, started=started, busy_share=busy,
                  total_s=time.time() - started, keys=list(BENCHMARKS))
    if out is not None:
        out.write_text(text)
        print(f"[bench] wrote {out}", file=sys.stderr)
    else:
        print(text)
    return 1 if any(s.error for s in sections) else 0


if __name__ == "__main__":
    sys.exit(main())
