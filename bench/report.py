"""The result of one benchmark and the BENCHMARKS.md renderer.

Every figure in the report comes from a measurement of the run that wrote it: the generator holds
no numbers of its own. Each section says the commit and the time it was measured, so a report can
mix sections from different runs: :func:`merge` keeps the sections of an existing report that were
not re-run (``python -m bench --only KEY --out BENCHMARKS.md`` replaces one section).
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Section:
    """One benchmark's findings: tables and notes as markdown lines, plus the reproduce command."""

    key: str
    title: str
    target: str = ""
    verdict: str = ""
    """'met', 'missed', 'not measured' (with the reason in notes) or '' when there is no target."""
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    how: str = ""
    seconds: float = 0.0
    error: str | None = None
    commit: str = ""
    """The code measured: ``git describe``-style short hash (``+dirty`` when the tree had changes)."""
    measured_at: float = 0.0
    quick: bool = False

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        self.lines.append("| " + " | ".join(header) + " |")
        self.lines.append("|" + "|".join("---" for _ in header) + "|")
        for r in rows:
            self.lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |")
        self.lines.append("")

    def para(self, text: str) -> None:
        self.lines.append(text)
        self.lines.append("")


@dataclass
class Kept:
    """A section of an existing report that this run did not re-measure: kept verbatim."""

    title: str
    summary: str
    """Its summary row's cells after the title: ``target | verdict``."""
    body: list[str]


def current_commit() -> str:
    """The commit being measured (short hash, ``+dirty`` with uncommitted changes), or ``unknown``."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=9", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head + ("+dirty" if dirty else "")) if head else "unknown"


def machine() -> dict:
    model = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = next(int(ln.split()[1]) for ln in open("/proc/meminfo") if ln.startswith("MemTotal")) // 1024
    except (OSError, StopIteration):
        mem = None
    try:
        import asyncssh
        import textual
        versions = f"asyncssh {asyncssh.__version__}, textual {textual.__version__}"
    except Exception:
        versions = ""
    ssh = ""
    try:
        ssh = subprocess.run(["ssh", "-V"], capture_output=True, text=True, timeout=5).stderr.strip()
    except Exception:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "mem_mib": mem, "python": sys.version.split()[0],
            "kernel": platform.release(), "libs": versions, "ssh": ssh, "loadavg": os.getloadavg()}


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def measured_line(s: Section) -> str:
    return (f"_Measured at commit `{s.commit or 'unknown'}` on {_utc(s.measured_at)}"
            + (" with `--quick` (tiny sizes: NOT representative)" if s.quick else "") + "._")


def section_body(s: Section) -> list[str]:
    """A section's text below its heading."""
    out = [measured_line(s), ""]
    if s.target:
        out += [f"Target: {s.target}. **Verdict: {s.verdict or 'n/a'}.**", ""]
    if s.error:
        out += ["**The benchmark failed:**", "", "```", s.error.rstrip(), "```", ""]
    out.extend(s.lines)
    if s.notes:
        out += ["Notes:", ""]
        out.extend(f"- {n}" for n in s.notes)
        out.append("")
    out += [f"Reproduce: `{s.how}` ({s.seconds:.0f} s in this run).", ""]
    return out


def summary_cells(s: Section) -> str:
    verdict = "ERROR: " + s.error.splitlines()[-1][:120] if s.error else (s.verdict or "–")
    return f"{s.target or '–'} | {verdict}"


def render(sections: list[Section | Kept], mach: dict, *, quick: bool, started: float, busy_share: float | None,
           total_s: float, keys: list[str]) -> str:
    """The whole report: machine and caveats of this run, the summary, then every section in order."""
    fresh = [s for s in sections if isinstance(s, Section)]
    out = ["# mtpconsole benchmarks", ""]
    run_desc = "`python -m bench" + (" --quick" if quick else "") + "`"
    if len(fresh) < len(sections):
        run_desc += f" (sections {', '.join(s.key for s in fresh)}; the others are kept from earlier runs)"
    out.append(f"Last written by {run_desc} on {_utc(started)}; that run took {total_s:.0f} s. Each section says "
               "the commit and time it was measured; comparisons inside a section were run side by side.")
    out += ["", "## Machine and caveats", ""]
    la = mach["loadavg"]
    out.append(f"- {mach['nproc']} CPU(s): {mach['cpu']}; {mach['mem_mib']} MiB RAM; Linux {mach['kernel']}")
    out.append(f"- Python {mach['python']}; {mach['libs']}; {mach['ssh']}")
    out.append(f"- Load average at the start: {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f}"
               + (f"; the whole machine was {busy_share * 100:.0f} % busy on average during the run "
                  f"(all {mach['nproc']} cores, including the benchmark itself)" if busy_share is not None else ""))
    out.append("- **Load caveat:** the machine may be shared with other work running at the same time; it competes "
               "for the same cores. Medians are robust to that, p95 and max are not: read a bad tail as "
               "'possibly somebody else's compile' unless it repeats.")
    out.append("- Network is loopback only (127.0.0.1): latencies exclude real round trips. A fresh SSH connection "
               "costs several round trips (key exchange, authentication, channel set-up), an agent request one and "
               "a pushed sample half of one.")
    out.append("- Format of a figure: `median unit (p95 x; min–max; n=samples)`. CPU is user+system time from "
               "`getrusage`/`/proc/<pid>/stat` (clock-tick resolution: per-operation CPU is a total over many "
               "operations divided by their number).")
    out += ["", "## Summary", "", "| # | benchmark | target | verdict |", "|---|---|---|---|"]
    for i, s in enumerate(sections, 1):
        cells = summary_cells(s) if isinstance(s, Section) else s.summary
        out.append(f"| {i} | [{s.title}](#{i}-{_anchor(s.title)}) | {cells} |")
    out.append("")
    out.append("Reproduce everything: `python -m bench` (rewrites this file). Smoke test at tiny sizes: "
               "`python -m bench --quick` (no file written unless `--out`). One benchmark: "
               "`python -m bench --only KEY` (prints the section; `--out BENCHMARKS.md` replaces that section here) "
               "with KEY one of " + ", ".join(f"`{k}`" for k in keys) + ".")
    out.append("")
    for i, s in enumerate(sections, 1):
        out += [f"## {i}. {s.title}", ""]
        out.extend(section_body(s) if isinstance(s, Section) else s.body)
    return "\n".join(out).rstrip() + "\n"


_HEADING = re.compile(r"^## (\d+)\. (.+)$")
_ROW = re.compile(r"^\| (\d+) \| \[(.+?)\]\(#[^)]*\) \| (.*) \|$")
_WRITTEN = re.compile(r"^(?:Generated|Last written) by .*? on (\d{4}-\d\d-\d\d \d\d:\d\d UTC)")


def parse(text: str) -> dict[str, Kept]:
    """The sections of an existing report, by title (a section without a measured line gets the report's date)."""
    lines = text.splitlines()
    written = next((m.group(1) for ln in lines if (m := _WRITTEN.match(ln))), None)
    rows = {m.group(2): m.group(3) for ln in lines if (m := _ROW.match(ln))}
    kept: dict[str, Kept] = {}
    title: str | None = None
    body: list[str] = []

    def close() -> None:
        if title is not None:
            b = body[1:] if body and not body[0].strip() else body
            if not (b and b[0].startswith("_Measured ")) and written:
                b = [f"_Measured on {written} (commit not recorded)._", "", *b]
            kept[title] = Kept(title=title, summary=rows.get(title, "– | –"), body=[*b, ""] if b[-1:] != [""] else b)
    for ln in lines:
        m = _HEADING.match(ln)
        if m or ln.startswith("## "):
            close()
            title, body = (m.group(2), []) if m else (None, [])
            continue
        if title is not None:
            body.append(ln)
    close()
    return kept


def merge(fresh: list[Section], existing: dict[str, Kept], order: list[tuple[str, str]]) -> list[Section | Kept]:
    """Every benchmark in ``order`` ((key, title)): this run's section, else the existing report's one."""
    by_key = {s.key: s for s in fresh}
    out: list[Section | Kept] = []
    for key, title in order:
        if key in by_key:
            out.append(by_key[key])
        elif title in existing:
            out.append(existing[title])
    return out


def _anchor(title: str) -> str:
    keep = "".join(c.lower() if c.isalnum() or c in " -" else "" for c in title)
    return keep.replace(" ", "-")
