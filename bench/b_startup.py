"""6. Start-up: ``mtpconsole --help`` wall time, time to the first frame, and the slowest imports.

* ``--help`` through the installed entry point (and through the pyenv shim when that is what
  ``mtpconsole`` resolves to), against a bare ``python -c pass`` (the floor any Python CLI pays);
* first frame: the app on a real 200×50 pseudo-terminal (``bench/first_frame.py``): with the tests'
  FakeBackend, and ``mtpconsole --demo`` (the built-in demo host) when this build has it; the
  frame counts when the header's title has been drawn on the app's screen, the first frame *with
  data* when a GPU panel's power reading has (issue 16: within 1 s), with the app's own CPU time
  and its children's (agent, demo stand-ins) at that moment; then ``q``, and nothing may be left running;
* ``python -X importtime``: the biggest imports under ``import console.cli`` and under the TUI's
  ``import console.ui.app``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.stats import cell, ratio, summarize

REPO = Path(__file__).resolve().parents[1]


def _wall(argv: list[str], n: int, env: dict) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, timeout=60, env=env)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _importtime(module: str, env: dict) -> tuple[float, list[tuple[float, float, str]]]:
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True,
                       text=True, cwd=REPO, timeout=60, env=env)
    rows = []
    for line in p.stderr.splitlines():
        if not line.startswith("import time:") or "[us]" in line:
            continue
        try:
            _, rest = line.split(":", 1)
            self_us, cum_us, name = rest.split("|", 2)
            rows.append((int(self_us) / 1000, int(cum_us) / 1000, name[1:].rstrip()))
        except ValueError:
            continue
    total = next((c for s, c, n in rows if n.strip() == module), max((c for _, c, _ in rows), default=0.0))
    return total, rows


def _direct(rows, k: int = 6) -> list[tuple[float, float, str]]:
    """The module's direct imports (one indent below it), by cumulative time."""
    firsts = [(s, c, n) for s, c, n in rows if len(n) - len(n.lstrip()) == 2]
    return sorted(firsts, key=lambda r: -r[1])[:k]


def _by_self(rows, k: int = 6) -> list[tuple[float, float, str]]:
    """The single modules that cost the most themselves (executing their own body), anywhere below."""
    inner = [(s, c, n) for s, c, n in rows if len(n) - len(n.lstrip()) >= 2]
    return sorted(inner, key=lambda r: -r[0])[:k]


DATA = r"\d+/\d+ W"
"""A GPU panel's power reading (``612/700 W``): the first frame *with data* (no placeholder matches it)."""


def _first_frame(cmd: list[str], env: dict) -> dict:
    p = subprocess.run([sys.executable, "-m", "bench.first_frame", "mtpconsole", DATA, "--", *cmd],
                       capture_output=True,
                       text=True, cwd=REPO, timeout=120, env=env)
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (p.stderr or p.stdout)[-500:]}


def _starts(argv: list[str], env: dict) -> str | None:
    """None when ``argv --help`` works here, else the last line of its error (an entry point whose
    editable install points elsewhere cannot import ``console``)."""
    p = subprocess.run([*argv, "--help"], capture_output=True, text=True, cwd=REPO, timeout=60, env=env)
    return None if p.returncode == 0 else ((p.stderr or p.stdout).strip().splitlines() or ["exit %d" % p.returncode])[-1]


def run(ctx, sec) -> None:
    n, nf = ctx.n(15, 2), ctx.n(5, 1)
    entry = Path(sys.executable).parent / "mtpconsole"
    which = shutil.which("mtpconsole")
    broken = _starts([str(entry)], dict(os.environ)) if entry.exists() else "absent"
    if entry.exists() and broken:
        sec.notes.append(f"The entry point beside the interpreter ({entry}) does not start in this environment "
                         f"({broken[:160]}): `python -m console` stands for it below.")
    if which and Path(which) != entry and _starts([which], dict(os.environ)):
        which = None
    nocache = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cached["PYTHONPYCACHEPREFIX"] = str(ctx.tmp / "pycache")
    conds = {"no bytecode cache": nocache, "bytecode cached": cached}
    _importtime("console.ui.app", cached)  # warm the cache
    subprocess.run([sys.executable, "-c", "import console.cli, console.commands.tui, console.commands.context, "
                    "console.sim.demo, console.ops.backend, console.sim.sglang, console.sim.sglang_worker"],
                   cwd=REPO, env=cached, capture_output=True, timeout=60)  # the demo's stand-ins too
    walls = {}
    for _ in range(2 if not ctx.quick else 1):  # interleave rounds
        for cname, env in conds.items():
            for name, argv in (("python -c pass", [sys.executable, "-c", "pass"]),
                               ("python -m console --help", [sys.executable, "-m", "console", "--help"]),
                               ("mtpconsole --help (entry point beside the interpreter)",
                                [str(entry), "--help"] if entry.exists() and not broken else None),
                               ("mtpconsole --help (another one on PATH)",
                                ["mtpconsole", "--help"] if which and Path(which) != entry else None)):
                if argv:
                    walls.setdefault((name, cname), []).extend(_wall(argv, n // 2 or 1, env))
    s = {k: summarize(v) for k, v in walls.items()}
    sec.table(["command", "bytecode", "wall time", "over bare Python"], [
        [f"`{k[0]}`", k[1], cell(v), "–" if k[0] == "python -c pass" else
         f"+{v.median - s[('python -c pass', k[1])].median:.0f} ms ({ratio(v.median, s[('python -c pass', k[1])].median)})"]
        for k, v in s.items()])
    frames = {"app + FakeBackend (`python -m bench.ff_fake`)": [sys.executable, "-m", "bench.ff_fake"]}
    demo = (REPO / "console" / "sim" / "demo.py").exists()
    if demo:
        frames["`mtpconsole --demo`" if not broken else "`python -m console --demo`"] = (
            [str(entry), "--demo"] if not broken else [sys.executable, "-m", "console", "--demo"])
    ff_rows, ff_all, leftovers = [], {}, []
    for _ in range(nf):
        for name, cmd in frames.items():
            for cname, env in conds.items():
                r = _first_frame(cmd, env)
                ff_all.setdefault(f"{name}, {cname}", []).append(r)
                leftovers += r.get("leftovers") or []
    for name, rs in ff_all.items():
        ff = summarize([r["first_frame_ms"] for r in rs if r.get("first_frame_ms") is not None])
        fo = summarize([r["first_output_ms"] for r in rs if r.get("first_output_ms") is not None])
        q = summarize([r["quit_ms"] for r in rs if r.get("quit_ms") is not None])
        fd = summarize([r["first_data_ms"] for r in rs if r.get("first_data_ms") is not None])
        cpu = summarize([r["cpu_app_ms"] for r in rs if r.get("cpu_app_ms") is not None])
        kids = summarize([r["cpu_children_ms"] for r in rs if r.get("cpu_children_ms") is not None])
        errs = [r.get("error") or r.get("tail") for r in rs if r.get("first_frame_ms") is None]
        ended = ", ".join(sorted({str(r.get("exited_by")) for r in rs}))
        ff_rows.append([name, cell(ff), cell(fd) if fd else "never",
                        f"{cpu.median:.0f} ms + {kids.median:.0f} ms" if cpu and kids else "–", cell(fo), cell(q),
                        ended, str(len(errs)) + (f" ({errs[0][:120]!r})" if errs else "")])
    sec.table(["first frame of", "first frame (title drawn)", "first frame with data (a GPU's power drawn)",
               "CPU until the data frame: app + its children (median)", "first byte on the terminal",
               "q → exited", "ended by", "runs without a frame"], ff_rows)

    sec.notes.append("First frame: counted on the app's own screen (after its switch to the alternate screen). The "
                     "demo prints a 'staging…' line on stderr first, which names the program too: runs before "
                     "2026-12-01 counted that line as the demo's first frame (~0.6 s).")
    for name, rs in ff_all.items():
        pairs = [(r["first_data_ms"], r["cpu_app_ms"]) for r in rs
                 if r.get("first_data_ms") is not None and r.get("cpu_app_ms") is not None]
        if "--demo" in name and pairs:
            wall = summarize([w for w, _ in pairs]).median
            cpu = summarize([c for _, c in pairs]).median
            sec.notes.append(
                f"{name}: the app's own CPU until the frame with data is {cpu / wall:.0%} of that wall time "
                + ("— the start is bound by the console's own work (imports, first layout), not by waiting for "
                   "the host's first sample" if cpu >= 0.8 * wall else
                   f"— it waits {wall - cpu:.0f} ms (for the host's first sample, or for a core)") + ".")

    def slowest(key: str):
        return max((summarize([r[key] for r in rs if r.get(key)]) or summarize([1e9]) for rs in ff_all.values()),
                   key=lambda x: x.median)
    worst, worst_data = slowest("first_frame_ms"), slowest("first_data_ms")
    sec.target = "first frame with data ≤ 1 s (issue 16), first frame < 1 s"
    sec.verdict = (("met" if worst_data.p95 <= 1000 and worst.p95 < 1000 else "missed")
                   + f" (slowest p95: with data {worst_data.p95:.0f} ms, first frame {worst.p95:.0f} ms)")
    sec.notes.append("The same benchmark on a 16-core host (the borrowed H200 machine's Xeon CPU): "
                     "`bench/results/startup-16-core-host.md` (recorded output) — the demo's first frame with data "
                     "at 589 ms median with bytecode cached, 674 ms without (p95 ≤ 832 ms): met there. On this "
                     "machine the start is CPU-bound (see the CPU column), so its core speed decides.")
    sec.notes.append("Core speed differs between instances of this 2-core VM type, so read the rows against the "
                     "bare `python -c pass` row of the same run: on 2026-12-01 05:57 UTC an instance where it took "
                     "115 ms measured the demo's first frame with data at 1125 ms (bytecode cached) / 1366 ms "
                     "(without): missed there.")
    if not demo:
        sec.notes.append("`--demo` is not in this build (no console/sim/demo.py): only the FakeBackend app was timed.")
    sec.notes.append("Processes left behind after `q`: " + ("none" if not leftovers else
                                                           f"{len(leftovers)}: " + "; ".join(leftovers[:5])))
    for module in ("console.cli", "console.ui.app"):
        total, rows = _importtime(module, cached)
        total_nc, _ = _importtime(module, nocache)
        sec.para(f"`python -X importtime -c \"import {module}\"`: {total:.0f} ms cumulative with bytecode cached, "
                 f"{total_nc:.0f} ms without a cache for console/ (one run each; the table is the cached run):")
        sec.table(["import", "kind", "cumulative", "self"],
                  [[f"`{n.strip()}`", "direct import", f"{c:.1f} ms", f"{s_:.1f} ms"] for s_, c, n in _direct(rows)]
                  + [[f"`{n.strip()}`", "top self time", f"{c:.1f} ms", f"{s_:.1f} ms"] for s_, c, n in _by_self(rows)])
    sec.notes.append(f"{n} runs per command in interleaved rounds; {nf} first-frame runs per app and condition. "
                     "'no bytecode cache': PYTHONDONTWRITEBYTECODE=1 as in this environment, so console/ is compiled "
                     "from source at every start (installed site-packages such as textual have their .pyc); "
                     "'bytecode cached': PYTHONPYCACHEPREFIX in a temp dir, warmed once — what an installed "
                     "package (pip compiles .pyc) or a developer checkout without PYTHONDONTWRITEBYTECODE gets.")
