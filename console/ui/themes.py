"""Where the TCSS lives and which Textual theme goes with each of our theme names.

TCSS is loaded from ``<repo or site-packages>/themes/`` (beside the ``console`` package) and
falls back to ``console/ui/themes/``; ``base.tcss`` holds the layout and colours (theme
variables only) and each ``<name>.tcss`` holds rules scoped to ``App.theme-<name>``.
"""

from __future__ import annotations

from pathlib import Path

from textual.theme import Theme

import console

NAMES = ("dark", "light", "high-contrast")
TEXTUAL_THEME = {"dark": "textual-dark", "light": "textual-light", "high-contrast": "mtp-high-contrast"}

HIGH_CONTRAST = Theme(
    name="mtp-high-contrast", dark=True,
    primary="yellow", secondary="aqua", accent="fuchsia", warning="yellow", error="red", success="lime",
    foreground="white", background="black", surface="black", panel="black", boost="white",
    variables={"text-muted": "white", "footer-key-foreground": "yellow", "block-cursor-background": "yellow",
               "block-cursor-foreground": "black", "border": "white", "border-blurred": "white"},
)


def themes_dir() -> Path:
    """The folder holding base.tcss and one TCSS file per theme."""
    for d in (Path(console.__file__).resolve().parent.parent / "themes", Path(__file__).resolve().parent / "themes"):
        if (d / "base.tcss").is_file():
            return d
    raise FileNotFoundError("mtpconsole: the themes/ folder (base.tcss, dark.tcss, ...) is missing from this install")


def css_paths() -> list[Path]:
    d = themes_dir()
    return [d / "base.tcss", *(d / f"{n}.tcss" for n in NAMES)]
