"""Every `mtpconsole` command line in the README's shell blocks parses with the real parser (nothing runs):
a documented form that argparse refuses (`relaunch … --set --mem-fraction-static=0.85` did) fails here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from console import cli

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_command_lines() -> list[str]:
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    out = []
    for block in blocks:
        for line in block.splitlines():
            line = line.split("&&")[-1].split(" #")[0].strip()
            if line.startswith("mtpconsole"):
                out.append(re.sub(r"\s*\[[^\]]*\]", "", line))  # optional parts: `[--kill PID]`
    return out


LINES = readme_command_lines()


def test_the_readme_has_command_lines():
    assert len(LINES) >= 20 and any(" relaunch " in x for x in LINES)


@pytest.mark.parametrize("line", LINES)
def test_readme_command_line_parses(line, monkeypatch):
    seen = []
    monkeypatch.setattr(cli, "context_from", lambda values, applies, theme=None: values)
    monkeypatch.setattr(cli, "_run", lambda fn, ctx, args: seen.append((fn, ctx, args)) or 0)
    try:
        rc = cli.main(shlex.split(line)[1:])
    except SystemExit as e:  # argparse refused it
        pytest.fail(f"{line!r}: the parser refused it (exit {e.code})")
    assert rc == 0 and len(seen) == 1, line
    if " relaunch " in line and "--set" in line:
        assert seen[0][2].set == ["--mem-fraction-static=0.85"]


def test_set_takes_a_flag_as_its_value_in_both_spellings():
    assert cli.glue_flag_values(["S", "--set", "--a=1", "--set=--b=2", "--unset", "--c", "--wait"],
                                ("--set", "--unset")) == ["S", "--set=--a=1", "--set=--b=2", "--unset=--c", "--wait"]
    assert cli.glue_flag_values(["--", "--set", "--x"], ("--set",)) == ["--", "--set", "--x"]  # server flags stay
