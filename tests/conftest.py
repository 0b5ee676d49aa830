"""Shared fixtures: a real OpenSSH sshd on 127.0.0.1, temporary keys, an SSH config alias.

Under CI=true a missing or broken sshd FAILS the run (it never skips there).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# Import hypothesis now, not lazily at the terminal summary: rewriting it late trips CPython
# 3.11.7's "AST constructor recursion depth mismatch" bug and crashes pytest after the tests passed.
import hypothesis  # noqa: F401,E402
import pytest

from tests.helpers.sshd import Sshd, SshdUnavailable, free_port, start_sshd  # noqa: E402,F401

REPO = Path(__file__).resolve().parents[1]
SGLANG_DATA = REPO / "console" / "data"  # the bundled 0.5.23 help text and flag schema
TEST_SGLANG_DATA = REPO / "tests" / "data" / "sglang"  # recorded facts used only by tests
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# `--demo` in the tests stages a demo of its own per command, removed when the command exits (the persistent demo
# host, console/sim/persistent.py, is off): no test sees another's demo or leaves one up. Set before any test module
# copies os.environ; tests/test_demo_persistent.py turns it on for its commands, each in a directory of its own.
os.environ["MTPCONSOLE_DEMO_IDLE_S"] = "0"


def _missing(msg: str):
    if IN_CI:
        pytest.fail(f"sshd fixture unavailable under CI=true: {msg}", pytrace=False)
    pytest.skip(f"sshd fixture unavailable: {msg}")


def make_sshd(root: Path) -> Sshd:
    """A real OpenSSH sshd for the tests; under CI=true its absence fails the run."""
    try:
        return start_sshd(root)
    except (SshdUnavailable, OSError, subprocess.CalledProcessError) as e:
        _missing(str(e))


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    s = make_sshd(tmp_path_factory.mktemp("sshd"))
    yield s
    s.stop()


@pytest.fixture
def runs_dir(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    return d


@pytest.fixture
def console_config(tmp_path, runs_dir, sshd_alias_or_none=None):
    """Write a config whose hosts (local and the sshd alias) use a temporary runs dir."""
    def write(hosts=("local", "testhost"), **host_extra):
        lines = []
        for h in hosts:
            lines.append(f'[hosts."{h}"]')
            lines.append(f'runs_dir = "{runs_dir}"')
            lines.append(f'python = "{sys.executable if h == "local" else "python3"}"')
            for k, v in host_extra.items():
                lines.append(f"{k} = {v!r}".replace("'", '"'))
        p = tmp_path / "config.toml"
        p.write_text("\n".join(lines) + "\n")
        return p
    return write
