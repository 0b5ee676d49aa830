"""The repository stands alone: no tracked file reads or links a file outside it.

A user clones the repository with nothing beside it. A relative path that climbs out of the
checkout (a parent-relative path into a sibling directory) or an absolute path of one of our own machines (``/work/…``,
``/root/…``) works here and breaks there, so both fail this test. Paths the program itself uses
at run time under the user's home (``~/.mtpconsole/…``, ``~/.cache/…``) are fine.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Where code, prose and generated reports live (recorded test data is checked for absolute paths only).
CHECKED_TOP = ("console/", "tests/", "bench/", "scripts/", "docs/", ".ci/", "requirements/")
CHECKED_FILES = ("README.md", "BENCHMARKS.md", "RELIABILITY.md", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".json", ".jsonl", ".sh", ".cfg", ".ini", ".tcss", ""}

# Absolute paths that exist only on our own machines.
OWN_MACHINE = re.compile(r"(?<![\w.~])/(?:work|root|home/[a-z_][\w-]*)/[\w.-]")
# Recorded program output and public logs (``/root/…`` inside someone's container is a fact there):
# only our own workspace counts as a reference out of the repository.
RECORDED = ("tests/data/", "console/data/", "docs/gpu-validation-raw/")
OUR_WORKSPACE = re.compile(r"(?<![\w.~])/work/(?:main|shared)\b")
SIBLING_PATH = "../" + "shared/"  # spelled in two parts so this file does not name it itself
THIS_FILE = "tests/test_repo_standalone.py"  # its examples name the very paths it forbids
# A relative path with at least one parent step, in code or prose.
RELATIVE_UP = re.compile(r"(?<![\w/.])((?:\.\./)+[\w.-][\w./-]*)")
# Names of the directories that sit beside the checkout on our machines (never on a user's).
SIBLINGS = re.compile(r"(?:^|/)shared(?:/|$)")
# pathlib climbing: ``REPO.parent``, ``Path(__file__).resolve().parents[N]``
PARENT_OF_REPO = re.compile(r"\b(?:REPO|ROOT|TOP)\.parent\b")
PARENTS_N = re.compile(r"__file__\)\.resolve\(\)\.parents\[(\d+)\]")
# Markdown links and images: [text](target)
MD_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)")


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    names = [n for n in out.decode().split("\0") if n]
    return [REPO / n for n in names
            if (n.startswith(CHECKED_TOP) or n in CHECKED_FILES) and Path(n).suffix in TEXT_SUFFIXES
            and "__snapshots__" not in n]


def _leaves_repo(base: Path, rel: str) -> bool:
    target = (base / rel).resolve()
    return not target.is_relative_to(REPO)


def problems_in(path: Path) -> list[str]:
    """Every place in ``path`` that points outside the repository, as ``file:line: text``."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    rel = path.relative_to(REPO)
    if rel.as_posix() == THIS_FILE:
        return []
    recorded = rel.as_posix().startswith(RECORDED)
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        where = f"{rel}:{no}: {line.strip()[:120]}"
        if recorded:
            if OUR_WORKSPACE.search(line) or SIBLING_PATH in line:
                found.append(where)
            continue
        if OWN_MACHINE.search(line):
            found.append(where)
            continue
        if PARENT_OF_REPO.search(line) or any(int(m.group(1)) > len(rel.parts) - 1
                                                for m in PARENTS_N.finditer(line)):
            found.append(where)
            continue
        for m in RELATIVE_UP.finditer(line):
            # A parent path counts when it names a sibling of the checkout or something that
            # exists outside it here; hostile inputs in tests (``../../etc/passwd``) do not.
            up = m.group(1)
            if (SIBLINGS.search(up) and (_leaves_repo(path.parent, up) or _leaves_repo(REPO, up))) or (
                    _leaves_repo(path.parent, up) and (path.parent / up).resolve().exists()):
                found.append(where)
                break
        if path.suffix == ".md":
            for m in MD_LINK.finditer(line):
                target = m.group(1).split("#", 1)[0]
                if not target or re.match(r"^[a-z]+:", target):
                    continue
                if _leaves_repo(path.parent, target) or not (path.parent / target).exists():
                    found.append(where + "  (broken or outside link)")
    return found


def test_no_tracked_file_points_outside_the_repository():
    files = tracked_files()
    assert len(files) > 50, "git ls-files found too few files: is this a checkout?"
    problems = [p for f in files for p in problems_in(f)]
    assert not problems, "files that read or link outside the repository:\n" + "\n".join(problems)


@pytest.mark.parametrize("line", [
    "see ../" "shared/reference/incident.md",
    'DATA = "/work/shared/reference/data"',
    "[an incident](../../elsewhere.md)",
    'HELP = REPO.parent / "sha' 'red" / "data"',
    'DATA = Path(__file__).resolve().parents[2] / "data"',
])
def test_the_check_catches_outside_paths(tmp_path, line):
    probe = REPO / "docs" / "_probe_outside.md"
    probe.write_text(line + "\n", encoding="utf-8")
    try:
        assert problems_in(probe)
    finally:
        probe.unlink()


@pytest.mark.parametrize("line", [
    "runs_dir = \"~/.mtpconsole/runs\"",
    "cache in ~/.cache/mtpconsole/flags",
    "[the corpus](../tests/data/sglang/README.md)",
    "a session id like ../escape is refused",
    "a hostile input ../../etc/passwdx is refused",
    'DATA = Path(__file__).resolve().parents[1] / "data"',
])
def test_the_check_allows_user_paths_and_inner_links(line):
    probe = REPO / "docs" / "_probe_inside.md"
    probe.write_text(line + "\n", encoding="utf-8")
    try:
        assert not problems_in(probe)
    finally:
        probe.unlink()
