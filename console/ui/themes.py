"""Where the TCSS lives and which Textual theme goes with each of our theme names.

The TCSS ships as package data in ``console/ui/tcss/`` (so a plain ``pip install .`` has it)
and is always loaded from there; the top-level ``themes/`` folder holds identical copies for
people looking for the themes (tests/test_ui_units.py fails when the two differ).
``base.tcss`` holds the layout and colours (theme variables only) and each ``<name>.tcss``
holds rules scoped to ``App.theme-<name>``.
"""

from __future__ import annotations

from pathlib import Path

from textual.theme import Theme

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
    """The folder holding base.tcss and one TCSS file per theme (package data)."""
    d = Path(__file__).resolve().parent / "tcss"
    if not (d / "base.tcss").is_file():
        raise FileNotFoundError(f"mtpconsole: {d} (base.tcss, dark.tcss, ...) is missing from this install")
    return d


def css_paths() -> list[Path]:
    d = themes_dir()
    return [d / "base.tcss", *(d / f"{n}.tcss" for n in NAMES)]
