"""The benchmark report generator: sections carry commit and time, --only never rewrites BENCHMARKS.md
unless --out is given, and then replaces only its own section."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.report import Section, merge, parse, render
from bench.run import BENCHMARKS

REPO = Path(__file__).resolve().parents[1]
ORDER = [(k, t) for k, (_, t) in BENCHMARKS.items()]
MACH = {"nproc": 2, "cpu": "cpu", "mem_mib": 1, "python": "3.11", "kernel": "k", "libs": "", "ssh": "",
        "loadavg": (0.0, 0.0, 0.0)}


def test_every_committed_section_says_when_it_was_measured():
    kept = parse((REPO / "BENCHMARKS.md").read_text(encoding="utf-8"))
    assert kept, "no sections parsed"
    for title, k in kept.items():
        assert k.body[0].startswith("_Measured "), title


def test_one_section_is_replaced_and_the_others_kept_verbatim():
    text = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    kept = parse(text)
    title = BENCHMARKS["biglog"][1]
    fresh = Section(key="biglog", title=title, target="t", verdict="met (ratio 0.99)", commit="abc1234",
                    measured_at=1796000000.0, how="python -m bench --only biglog")
    fresh.para("new figures")
    out = render(merge([fresh], kept, ORDER), MACH, quick=False, started=1796000000.0, busy_share=None,
                 total_s=5, keys=list(BENCHMARKS))
    again = parse(out)
    assert again[title].body[0] == "_Measured at commit `abc1234` on 2026-11-30 00:53 UTC._"
    assert "new figures" in "\n".join(again[title].body) and "met (ratio 0.99)" in again[title].summary
    for t, k in kept.items():
        if t != title:
            assert again[t].body == k.body and again[t].summary == k.summary, t
    assert "sections biglog; the others are kept from earlier runs" in out


def test_only_prints_and_never_writes_the_committed_report(tmp_path):
    committed = (REPO / "BENCHMARKS.md").read_bytes()
    p = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "biglog"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "## 1. " + BENCHMARKS["biglog"][1] in p.stdout and "_Measured at commit `" in p.stdout
    assert (REPO / "BENCHMARKS.md").read_bytes() == committed
    copy = tmp_path / "B.md"
    copy.write_bytes(committed)
    p = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "biglog", "--out", str(copy)], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    merged = parse(copy.read_text(encoding="utf-8"))
    assert set(merged) == set(parse(committed.decode())) and "--quick" in merged[BENCHMARKS["biglog"][1]].body[0]
    assert (REPO / "BENCHMARKS.md").read_bytes() == committed


def test_the_generator_holds_no_figures():
    """Numbers in the report come from measurements: the renderer's own prose has none."""
    import re

    src = (REPO / "bench" / "report.py").read_text(encoding="utf-8")
    prose = " ".join(re.findall(r'"([^"{}]*)"', src))
    assert not re.search(r"\d+(\.\d+)?\s*(ms|s|%|RTT|min|MiB|GB)\b", prose), prose
