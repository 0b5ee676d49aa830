"""The classifier on real logs we produced ourselves (tests/data/real-logs/produced/): each with its exit record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.core.classify import MAX_RETURNED_LINE, classify_file
from console.core.classify.lines import clean
from console.model import ExitRecord

DIR = Path(__file__).parent / "data" / "real-logs" / "produced"
LABELS = [json.loads(x) for x in (DIR / "labels-produced.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]


def test_every_produced_file_is_labelled_with_how_it_was_made():
    files = {p.name for p in DIR.glob("*.log")}
    assert files == {lab["file"] for lab in LABELS}
    for lab in LABELS:
        assert lab["how"] and lab["exit"] is not None, lab["file"]
        if lab["decisive_line"] is not None:
            assert lab["decisive_line"] in (DIR / lab["file"]).read_text(encoding="utf-8").split("\n")


@pytest.mark.parametrize("lab", LABELS, ids=[lab["file"] for lab in LABELS])
def test_produced_log_with_its_exit_record(lab):
    c = classify_file(DIR / lab["file"], ExitRecord(ended_at=1.0, **lab["exit"]))
    assert (c.state, c.cause) == (lab["state"], lab["cause"]), c
    if lab["decisive_line"] is not None:
        assert c.line == clean(lab["decisive_line"], MAX_RETURNED_LINE)


@pytest.mark.parametrize("lab", [lab for lab in LABELS if lab["decisive_line"] is not None],
                         ids=lambda lab: lab["file"])
def test_produced_log_read_live_shows_its_failure_already(lab):
    """Before the exit record exists (the console reads the log live), a failure the log shows is already failed."""
    c = classify_file(DIR / lab["file"])
    assert (c.state, c.cause) == (lab["state"], lab["cause"]), c
