"""The classifier measured on real logs from public SGLang and vLLM threads (issue 15).

``tests/data/real-logs/`` holds the corpus and its labels (see its README for the labelling
rules). The corpus is split once, by file name, into a development part (rules may be written
while looking at it) and a test part (only measured). This test reports, for each part, the
accuracy per state and per cause, the confusion tables and how often the decisive line is the
labelled one, and fails when the test part is under state 0.95 / cause 0.85 (cause accuracy over
the failed logs) / decisive line 0.70 (over failed logs with a labelled line).

A label's cause is what its file shows (README). For a file cut before its exception line the error its
thread states is kept as ``thread_cause``: agreement with it is reported beside the gate, never gated
(the lines that would show it are not in the file).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import pytest

from console.core.classify import classify_file
from console.core.classify.lines import clean
from console.core.classify.rules import MAX_RETURNED_LINE
from console.model import Classification, ExitRecord, FailureCause

REAL = Path(__file__).resolve().parent / "data" / "real-logs"
LABEL_FILES = ("labels-sglang.jsonl", "labels-vllm.jsonl")
TEST2_MIN = (0.95, 0.90, 0.92)
"""The gate of a held-out later split (issue 28; test2's first): state, cause (failed logs), cause when the exit is
known (classified with ``--exit-code 1``). test2-4 became development data after their one measure (``ROUND5_LEVEL``);
a split collected after the next freeze is measured against this."""

STATE_MIN = 0.95
CAUSE_MIN = 0.85
LINE_MIN = 0.70
KEYS = {"file", "source", "framework", "version", "state", "cause", "decisive_line", "last_metrics", "notes"}


def split(name: str) -> str:
    """The corpus's one fixed split (README): about 30 % test, by the file name's hash."""
    return "test" if int(hashlib.sha256(name.encode()).hexdigest(), 16) % 10 < 3 else "dev"


def labels() -> list[dict]:
    out: list[dict] = []
    for name in LABEL_FILES:
        path = REAL / name
        if path.exists():
            out.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return out


SLICES = ("test2", "dev2", "dev3", "test3", "dev4", "test4", "test5")
"""The corpus's later slices, each a folder of its own with ``labels-<name>.jsonl`` (same keys). ``dev2``/``dev3``/``dev4``
(issue 28: fresh threads labelled by sessions that never saw the classifier) were development data from the start:
reported, not gated. ``test2``, ``test3`` and ``test4`` were held-out splits, each collected after a freeze of the rules
(72716bd, d2392d9, 8385c73) and measured once: state/cause 0.927/0.926, 0.971/0.867, 0.878/0.826. On 2026-12-03, after
those measures, they became development data (round 5): rules were written looking at their misses, so their figures
now say nothing about logs never seen; they are gated at the level reached then (``ROUND5_LEVEL``), so that no later
rule loses what they taught. ``test5`` (63 logs, two blind labellers in parallel, opened only after round 5's rules
were frozen at 78fd7b2) is the held-out split now: measured, never tuned on."""

ROUND5_LEVEL = {
    "test2": (1.0, 1.0, 1.0),
    "test3": (1.0, 14 / 15, 14 / 15),
    "test4": (1.0, 1.0, 1.0),
}
"""State, cause over failed logs, cause when the exit is known: what the former test splits read once they became
development data (2026-12-03). test3's one cause miss is a label the rules do not follow (a cut traceback of import
frames with a lazy ``__getattr__`` import labelled ``other``; the classifier reads the import chain as import_error)."""


def slice_labels(name: str) -> list[dict]:
    """The labels of one later slice (``REAL/<name>/labels-<name>.jsonl``); empty when the slice is absent."""
    path = REAL / name / f"labels-{name}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def labels_test2() -> list[dict]:
    return slice_labels("test2")


@dataclass
class Row:
    label: dict
    got: Classification
    got_exit: Classification | None = None
    """For a failed label: the classification once the exit is known (``--exit-code 1``)."""

    @property
    def file(self) -> str:
        return self.label["file"]

    @property
    def state_ok(self) -> bool:
        return self.got.state == self.label["state"]

    @property
    def cause_ok(self) -> bool:
        return self.got.state == "failed" and self.got.cause == self.label["cause"]

    @property
    def cause_exit_ok(self) -> bool:
        g = self.got_exit
        return g is not None and g.state == "failed" and g.cause == self.label["cause"]

    @property
    def thread_cause_ok(self) -> bool:
        """For a file cut before its exception line: the cause its thread states (README, ``thread_cause``)."""
        return self.got.state == "failed" and self.got.cause == self.label.get("thread_cause")

    @property
    def metrics_ok(self) -> bool:
        """The last metrics equal the labelled ones (fields the label gives; token usage within 0.001)."""
        want = self.label.get("last_metrics")
        got = self.got.metrics
        if want is None:
            return got is None or all(v is None for v in got.model_dump().values())
        if got is None:
            return False
        pairs = (("gen_throughput", got.gen_throughput), ("running", got.running_req), ("queue", got.queue_req),
                 ("token_usage", got.token_usage))
        return all(want.get(k) is None or (v is not None and abs(float(v) - float(want[k])) <= 1e-3)
                   for k, v in pairs)

    @property
    def line_ok(self) -> bool:
        want = self.label.get("decisive_line")
        return want is not None and self.got.line == clean(want, MAX_RETURNED_LINE)


def evaluate(part: str) -> list[Row]:
    """Classify every file of one part (``dev``, ``test`` or a later slice): live, and failed ones also with their exit."""
    if part in SLICES:
        chosen = [(REAL / part / lab["file"], lab) for lab in slice_labels(part)]
    else:
        chosen = [(REAL / lab["file"], lab) for lab in labels() if split(lab["file"]) == part]
    ended = ExitRecord(exit_code=1, ended_at=1.0)
    return [Row(lab, classify_file(path), classify_file(path, ended) if lab["state"] == "failed" else None)
            for path, lab in chosen]


def _ratio(ok: int, n: int) -> float:
    return ok / n if n else 1.0


def _table(title: str, pairs: list[tuple[str, str]]) -> list[str]:
    rows = sorted({a for a, _ in pairs})
    cols = sorted({b for _, b in pairs})
    counts = Counter(pairs)
    width = max([len(title)] + [len(r) for r in rows]) + 2
    out = [title.ljust(width) + "".join(c[:16].rjust(17) for c in cols)]
    for r in rows:
        out.append(r.ljust(width) + "".join(str(counts[(r, c)] or ".").rjust(17) for c in cols))
    return out


@dataclass
class Scores:
    state: float
    cause: float
    line: float
    report: str
    cause_exit: float = 0.0


def score(part: str, rows: list[Row]) -> Scores:
    failed = [r for r in rows if r.label["state"] == "failed"]
    with_line = [r for r in failed if r.label.get("decisive_line")]
    state = _ratio(sum(r.state_ok for r in rows), len(rows))
    cause = _ratio(sum(r.cause_ok for r in failed), len(failed))
    line = _ratio(sum(r.line_ok for r in with_line), len(with_line))
    cause_exit = _ratio(sum(r.cause_exit_ok for r in failed), len(failed))
    lines = [f"== {part}: {len(rows)} logs ({len(failed)} failed) ==",
             (f"state accuracy {state:.3f}   cause accuracy (failed logs) {cause:.3f}   cause when the exit is known "
              f"{cause_exit:.3f}   decisive line found {line:.3f} ({sum(r.line_ok for r in with_line)}/{len(with_line)})")]
    per_state: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        per_state[r.label["state"]].append(r.state_ok)
    cut = [r for r in failed if r.label.get("thread_cause")]
    whole = [r for r in failed if r not in cut]
    thread_ok = sum(r.thread_cause_ok for r in cut)
    lines.append(f"cause accuracy where the file shows its exception {_ratio(sum(r.cause_ok for r in whole), len(whole)):.3f} "
                 f"({sum(r.cause_ok for r in whole)}/{len(whole)}); cut before it {_ratio(sum(r.cause_ok for r in cut), len(cut)):.3f} "
                 f"({sum(r.cause_ok for r in cut)}/{len(cut)}), and against the error their threads state (not in the "
                 f"file) {_ratio(thread_ok, len(cut)):.3f} ({thread_ok}/{len(cut)})")
    lines.append(f"cause accuracy over failed logs if the thread's error counted for cut ones "
                 f"{_ratio(sum(r.cause_ok for r in whole) + thread_ok, len(failed)):.3f}")
    lines.append(f"last metrics as labelled: {sum(r.metrics_ok for r in rows)}/{len(rows)}")
    lines.append("per state: " + ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in sorted(per_state.items())))
    per_cause: dict[str, list[bool]] = defaultdict(list)
    for r in failed:
        per_cause[r.label["cause"]].append(r.cause_ok)
    lines.append("per cause: " + ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in sorted(per_cause.items())))
    lines += _table("state\\got", [(r.label["state"], r.got.state) for r in rows])
    lines += _table("cause\\got", [(r.label["cause"], str(r.got.cause) if r.got.state == "failed" else
                                    f"({r.got.state})") for r in failed])
    return Scores(state, cause, line, "\n".join(lines), cause_exit)


def _mismatches(rows: list[Row]) -> str:
    out = []
    for r in rows:
        if not r.state_ok or (r.label["state"] == "failed" and not r.cause_ok):
            out.append(f"  {r.file}: want {r.label['state']}/{r.label['cause']}, got {r.got.state}/{r.got.cause}")
    return "\n".join(out)


def test_corpus_is_labelled_and_split():
    labs = labels()
    files = {p.name for p in REAL.glob("*.log")}
    labelled = [lab["file"] for lab in labs]
    assert len(labelled) == len(set(labelled)), "a file is labelled twice"
    assert set(labelled) == files, (files - set(labelled), set(labelled) - files)
    causes = set(get_args(FailureCause))
    for lab in labs:
        assert set(lab) - {"thread_cause"} == KEYS, lab["file"]
        assert lab["state"] in ("ready", "loading", "failed", "stopped"), lab
        assert (lab["cause"] is not None) == (lab["state"] == "failed"), lab
        assert lab["cause"] is None or lab["cause"] in causes, lab["file"]
        if "thread_cause" in lab:
            assert lab["state"] == "failed" and lab["thread_cause"] in causes, lab["file"]
        if lab.get("decisive_line") is not None:
            text = (REAL / lab["file"]).read_text(encoding="utf-8")
            assert lab["decisive_line"] in text.split("\n"), lab["file"]
    parts = Counter(split(f) for f in labelled)
    assert parts["test"] >= 10 and parts["dev"] >= 20, parts


def test_real_logs_dev_part_report(tmp_path):
    """The development part: reported (rules were written looking at it), not a gate."""
    rows = evaluate("dev")
    s = score("dev", rows)
    report = s.report + "\nmismatches:\n" + _mismatches(rows)
    (tmp_path / "real-logs-dev.txt").write_text(report + "\n", encoding="utf-8")
    print("\n" + report)
    assert s.state >= 0.8 and s.cause >= 0.6, report


def _test_part(tmp_path):
    rows = evaluate("test")
    names = sorted(r.file for r in rows)
    s = score("test", rows)
    report = s.report + f"\ntest part ({len(names)} files): " + ", ".join(names)
    (tmp_path / "real-logs-test.txt").write_text(report + "\n", encoding="utf-8")
    print("\n" + report)
    if not rows:
        pytest.fail("the corpus has no test part")
    return s, report


def test_real_logs_test_part(tmp_path):
    """The held-out part: state >= 0.95 and decisive line >= 0.70 (gates that hold today)."""
    s, report = _test_part(tmp_path)
    assert s.state >= STATE_MIN, report
    assert s.line >= LINE_MIN, report


def test_real_logs_test_part_cause(tmp_path):
    """The held-out part's cause gate: >= 0.85 over failed logs (labelled by what each file shows: README)."""
    s, report = _test_part(tmp_path)
    assert s.cause >= CAUSE_MIN, report


@pytest.mark.parametrize("name", SLICES)
def test_slice_is_labelled_like_the_corpus(name):
    """A later slice: every file labelled once with the corpus's keys, and no thread shared with the corpus or with
    another slice (a slice measures logs from threads nothing else used)."""
    labs = slice_labels(name)
    folder = REAL / name
    if not folder.exists():
        pytest.skip(f"no {name} slice in this checkout")
    files = {p.name for p in folder.glob("*.log")}
    assert sorted(lab["file"] for lab in labs) == sorted(files)
    others = {lab["source"] for lab in labels()} | {lab["source"] for o in SLICES if o != name for lab in slice_labels(o)}
    causes = set(get_args(FailureCause))
    for lab in labs:
        assert set(lab) - {"thread_cause"} == KEYS, lab["file"]
        assert lab["state"] in ("ready", "loading", "failed", "stopped"), lab
        assert (lab["cause"] is not None) == (lab["state"] == "failed"), lab
        assert lab["cause"] is None or lab["cause"] in causes, lab["file"]
        assert lab["source"] not in others, f"{lab['file']}: its thread is already in the corpus or another slice"
        if lab.get("decisive_line") is not None:
            assert lab["decisive_line"] in (folder / lab["file"]).read_text(encoding="utf-8").split("\n"), lab["file"]


@pytest.mark.parametrize("name", ["dev2", "dev3", "dev4"])
def test_real_logs_fresh_dev_report(tmp_path, name):
    """The fresh development slices (issue 28): reported, not gated (rules may be written looking at them)."""
    rows = evaluate(name)
    if not rows:
        pytest.skip(f"no {name} slice in this checkout")
    s = score(name, rows)
    report = s.report + "\nmismatches:\n" + _mismatches(rows)
    (tmp_path / f"real-logs-{name}.txt").write_text(report + "\n", encoding="utf-8")
    print("\n" + report)


def _measured_slice(tmp_path, name: str) -> tuple[Scores, str]:
    """Score a later split (``test2`` ...), its report written beside the test and printed."""
    rows = evaluate(name)
    if not rows:
        pytest.fail(f"{name} holds no logs")
    s = score(name, rows)
    report = s.report + "\nmismatches:\n" + _mismatches(rows)
    (tmp_path / f"real-logs-{name}.txt").write_text(report + "\n", encoding="utf-8")
    print("\n" + report)
    return s, report


def _holds_round5_level(tmp_path, name: str) -> None:
    s, report = _measured_slice(tmp_path, name)
    state, cause, cause_exit = ROUND5_LEVEL[name]
    eps = 1e-9
    assert s.state >= state - eps, report
    assert s.cause >= cause - eps, report
    assert s.cause_exit >= cause_exit - eps, report


def test_real_logs_test2_part_cause(tmp_path):
    """The first later split (41 logs collected after the 72716bd freeze). Measured once, 2026-12-02: cause 0.926,
    given the exit 1.000 (gates 0.90 / 0.92 met). Development data since 2026-12-03: gated at the level reached then."""
    _holds_round5_level(tmp_path, "test2")


def test_real_logs_test2_part_state(tmp_path):
    """test2's state: 0.927 (38/41) when measured once (gate 0.95 missed, then a strict xfail); 1.000 after round 5's
    rules, written looking at its misses (development data since 2026-12-03, so no measure of generalisation)."""
    s, report = _measured_slice(tmp_path, "test2")
    assert s.state >= ROUND5_LEVEL["test2"][0] - 1e-9, report


def test_real_logs_test3_part_state(tmp_path):
    """The third later split (35 logs collected after the d2392d9 freeze). Measured once: state 0.971 (34/35, gate 0.95
    met). Development data since 2026-12-03: gated at the level reached then."""
    s, report = _measured_slice(tmp_path, "test3")
    assert s.state >= ROUND5_LEVEL["test3"][0] - 1e-9, report


def test_real_logs_test3_part_cause(tmp_path):
    """test3's cause: 0.867 (13/15) both live and given the exit when measured once (gates 0.90 / 0.92 missed, then a
    strict xfail); 0.933 (14/15) after round 5 (development data since 2026-12-03; the one miss is a label the rules do
    not follow, see ``ROUND5_LEVEL``)."""
    _holds_round5_level(tmp_path, "test3")


def test_real_logs_test4_part_state(tmp_path):
    """The fourth later split (41 logs collected blind beside the rule work, opened after the 8385c73 freeze). Measured
    once: state 0.878 (36/41, gate 0.95 missed, then a strict xfail); 1.000 after round 5 (development data since
    2026-12-03)."""
    s, report = _measured_slice(tmp_path, "test4")
    assert s.state >= ROUND5_LEVEL["test4"][0] - 1e-9, report


def test_real_logs_test4_part_cause(tmp_path):
    """test4's cause: 0.826 (19/23) both live and given the exit when measured once (gates missed, then a strict
    xfail); 1.000 after round 5 (development data since 2026-12-03)."""
    _holds_round5_level(tmp_path, "test4")


def test_real_logs_test5_part_state(tmp_path):
    """The fifth later split (``test5``: 63 logs collected blind by two labellers in parallel, even and odd thread
    numbers, while round 5's rules were written on the former test splits; opened only after the 78fd7b2 freeze).
    Measured once, 2026-12-03: state 0.984 (62/63, gate 0.95 met). Never tuned on."""
    s, report = _measured_slice(tmp_path, "test5")
    assert s.state >= TEST2_MIN[0], report


def test_real_logs_test5_part_cause(tmp_path):
    """test5's cause over its failed logs, live and when the exit is known: measured once, 2026-12-03, 0.921 (35/38) both
    (gates 0.90 / 0.92 met); decisive line 0.842 (32/38). Never tuned on."""
    s, report = _measured_slice(tmp_path, "test5")
    assert s.cause >= TEST2_MIN[1], report
    assert s.cause_exit >= TEST2_MIN[2], report
