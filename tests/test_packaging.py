"""What `pip install .` ships: every package folder of console/, its data files, and the themes (one copy)."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETUP = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def package_dir(pkg: str) -> Path:
    mapped = SETUP.get("package-dir", {})
    if pkg in mapped:
        return REPO / mapped[pkg]
    return REPO / Path(*pkg.split("."))


def source_packages() -> set[str]:
    """Every folder under console/ holding files (caches aside), as a dotted package name."""
    out = {"console"}
    for d in (REPO / "console").rglob("*"):
        if d.is_dir() and "__pycache__" not in d.parts and any(f.is_file() for f in d.iterdir()):
            out.add(".".join(d.relative_to(REPO).parts))
    return out


def test_every_package_folder_is_listed():
    listed = set(SETUP["packages"])
    missing = source_packages() - listed
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
    assert all(package_dir(p).is_dir() for p in listed), [p for p in listed if not package_dir(p).is_dir()]


def test_every_data_file_is_shipped():
    data = SETUP.get("package-data", {})
    unshipped = []
    for pkg in SETUP["packages"]:
        for f in package_dir(pkg).iterdir():
            if f.is_file() and f.suffix not in (".py", ".pyc"):
                globs = data.get(pkg, []) + data.get("*", [])
                if not any(fnmatch.fnmatch(f.name, g) for g in globs):
                    unshipped.append(str(f.relative_to(REPO)))
    assert unshipped == [], f"not in [tool.setuptools.package-data]: {unshipped}"


def test_themes_have_one_home():
    assert SETUP["package-dir"]["console.themes"] == "themes"
    tcss = sorted(p.relative_to(REPO).as_posix() for p in REPO.rglob("*.tcss")
                  if not {".git", "build", "dist"} & set(p.relative_to(REPO).parts))
    assert tcss and all(p.startswith("themes/") for p in tcss), tcss
