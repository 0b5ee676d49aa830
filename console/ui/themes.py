"""Where the TCSS lives and which Textual theme goes with each of our theme names.

The TCSS has one home: the top-level ``themes/`` folder. Installs ship it as the package
``console.themes`` (pyproject.toml maps that package to ``themes/``), so a plain ``pip install .``
finds it beside this package; a source checkout or an editable install finds it at the top of
the repository. ``base.tcss`` holds the layout and colours (theme variables only) and each
``<name>.tcss`` holds rules scoped to ``App.theme-<name>``.
"""

from __future__ import annotations

from pathlib import Path

from textual.css.stylesheet import Stylesheet
from textual.theme import Theme

from console.config import THEME_NAMES, ThemeName

NAMES: tuple[ThemeName, ...] = THEME_NAMES
"""Our theme names (their one definition is ``console.config.ThemeName``), in the order ``t`` cycles them."""
TEXTUAL_THEME: dict[str, str] = {"dark": "textual-dark", "light": "textual-light", "high-contrast": "mtp-high-contrast"}
"""Our theme name → the Textual theme it selects."""

HIGH_CONTRAST = Theme(
    name="mtp-high-contrast", dark=True,
    primary="yellow", secondary="aqua", accent="fuchsia", warning="yellow", error="red", success="lime",
    foreground="white", background="black", surface="black", panel="black", boost="white",
    variables={"text-muted": "white", "footer-key-foreground": "yellow", "block-cursor-background": "yellow",
               "block-cursor-foreground": "black", "border": "white", "border-blurred": "white"},
)


def themes_dir() -> Path:
    """The folder holding base.tcss and one TCSS file per theme: installed package data
    (``console/themes/``), else the repository's ``themes/`` (source checkout, editable install)."""
    package = Path(__file__).resolve().parents[1]
    candidates = (package / "themes", package.parent / "themes")
    for d in candidates:
        if (d / "base.tcss").is_file():
            return d
    raise FileNotFoundError("mtpconsole: the themes (base.tcss, dark.tcss, ...) are missing from this install: "
                            + " and ".join(str(d) for d in candidates) + " have none")


def css_paths() -> list[Path]:
    """base.tcss, then one file per theme name, in load order."""
    d = themes_dir()
    return [d / "base.tcss", *(d / f"{n}.tcss" for n in NAMES)]


class ThemeStylesheet(Stylesheet):
    """Textual's stylesheet, keeping the rules parsed for each theme: ``t`` back to a theme already shown does not
    parse every CSS source again (Textual parses them all on each theme change, some 15 ms of ``t`` on a 2-core
    machine). One set of rules is kept per theme, used only while the CSS sources are the very ones it was parsed
    from (a widget type mounted since adds its own: they are parsed again, once)."""

    def __init__(self, *, variables: dict[str, str] | None = None) -> None:
        super().__init__(variables=variables)
        self._by_theme: dict[tuple, tuple[dict, list]] = {}

    def reparse(self) -> None:
        key = tuple(sorted(self._variables.items()))
        kept = self._by_theme.get(key)
        if kept is not None and kept[0] == self.source:
            self._rules, self._rules_map, self._require_parse = kept[1], None, False
            return
        super().reparse()
        self._by_theme[key] = (dict(self.source), self._rules)
