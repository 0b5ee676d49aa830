"""Where the TCSS lives and which Textual theme goes with each of our theme names.

The TCSS has one home: the top-level ``themes/`` folder. Installs ship it as the package
``console.themes`` (pyproject.toml maps that package to ``themes/``), so a plain ``pip install .``
finds it beside this package; a source checkout or an editable install finds it at the top of
the repository. ``base.tcss`` holds the layout and colours (theme variables only) and each
``<name>.tcss`` holds rules scoped to ``App.theme-<name>``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from textual.css.model import RuleSet
from textual.css.stylesheet import RulesMap, Stylesheet
from textual.dom import DOMNode
from textual.theme import Theme

from console.config import THEME_NAMES, ThemeName

if TYPE_CHECKING:
    from textual.app import App

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


def css_variables(app: App, name: ThemeName) -> dict[str, str]:
    """The CSS variables our theme ``name`` gives ``app``'s CSS: what ``App.get_css_variables`` returns while that
    theme is set (without setting it)."""
    theme = app.get_theme(TEXTUAL_THEME[name])
    assert theme is not None, name
    return {**app.get_theme_variable_defaults(), **theme.to_color_system().generate(), **theme.variables}


class ThemeStylesheet(Stylesheet):
    """Textual's stylesheet, keeping every CSS source's rules as parsed for each theme: a theme switch parses only
    the sources not parsed for that theme before (Textual empties its parse cache when the variables change and
    parses every source again on each theme change: some 60 ms of ``t`` on a 2-core machine; the first switch to a
    theme after a new widget type's CSS came parsed them all too). :meth:`warm` parses them for a theme before it is
    shown (the app does so for every theme in idle time after it starts)."""

    def __init__(self, *, variables: dict[str, str] | None = None) -> None:
        super().__init__(variables=variables)
        self._parsed: dict[tuple, dict[tuple, list[RuleSet]]] = {}
        """The theme's variables -> (css, where, default, tie breaker, scope) -> its rules."""
        self.generation = 0
        """Counts the rule sets built (a theme switch, a new CSS source): a screen shown again with the same
        generation needs no restyle (``console/ui/screens/fleet.py``)."""
        self._deferred: dict[DOMNode, list[bool]] | None = None
        """While :meth:`update_nodes` runs: node -> [layout, repaint] of the refreshes its new styles asked for."""

    def update_nodes(self, nodes: Iterable[DOMNode], animate: bool = False) -> None:
        """Textual's, with each node refreshed once at the end, not once per changed style property: a property's
        setter refreshes the node (a colour the node and every descendant, again for each colour: a theme switch
        changes dozens a node, some 40 ms of ``t`` on a 2-core machine). The refreshes asked for are the same,
        merged (layout if any asked for a layout)."""
        if self._deferred is not None:  # nested: the outer call refreshes
            super().update_nodes(nodes, animate)
            return
        deferred = self._deferred = {}
        try:
            super().update_nodes(nodes, animate)
        finally:
            self._deferred = None
            for node, (layout, repaint) in deferred.items():
                node.refresh(layout=layout, repaint=repaint)

    def replace_rules(self, node: DOMNode, rules: RulesMap, animate: bool = False) -> None:  # type: ignore[override]
        """Textual's (a classmethod there, called on the instance), its style refreshes recorded while
        :meth:`update_nodes` runs (see there)."""
        deferred = self._deferred
        base = node.styles.base
        if deferred is None or not node._is_mounted or "refresh" in vars(base):
            super().replace_rules(node, rules, animate)
            return

        def later(*, layout: bool = False, children: bool = False, parent: bool = False, repaint: bool = True,
                  **_: Any) -> None:  # Styles.refresh's effects, recorded
            def add(n: DOMNode, lay: bool, rep: bool) -> None:
                got = deferred.setdefault(n, [False, False])
                got[0] |= lay
                got[1] |= rep
            if parent and isinstance(node._parent, DOMNode):
                add(node._parent, False, repaint)
            add(node, layout, True)
            if children:
                for child in node.walk_children(with_self=False):
                    add(child, layout, repaint)

        base.refresh = later  # type: ignore[method-assign]
        try:
            super().replace_rules(node, rules, animate)
        finally:
            del base.refresh

    @staticmethod
    def _key(variables: dict[str, str]) -> tuple:
        return tuple(sorted(variables.items()))

    def _cached_rules(self, parse: Callable[..., list[RuleSet]], variables: dict[str, str]) -> list[RuleSet] | None:
        """Every source's rules for ``variables``, parsing the ones not parsed before with ``parse``; None when a
        source has errors (Textual's own parse then reports them)."""
        parsed = self._parsed.setdefault(self._key(variables), {})
        rules: list[RuleSet] = []
        for read_from, (css, is_default, tie_breaker, scope) in self.source.items():
            key = (css, read_from, is_default, tie_breaker, scope)
            got = parsed.get(key)
            if got is None:
                if css in self._invalid_css:
                    return None
                try:
                    got = parse(css, read_from, is_default, tie_breaker, scope)
                except Exception:
                    return None
                if any(rule.errors for rule in got):
                    return None
                parsed[key] = got
            rules.extend(got)
        return rules

    def parse(self) -> None:
        self.generation += 1
        rules = self._cached_rules(self._parse_rules, self._variables)
        if rules is None:
            super().parse()
            return
        self._rules, self._rules_map, self._require_parse = rules, None, False

    def reparse(self) -> None:
        self.parse()

    def is_warm(self, variables: dict[str, str]) -> bool:
        """Whether every source is parsed for the theme of ``variables`` (a switch to it parses nothing)."""
        parsed = self._parsed.get(self._key(variables), {})
        return all((css, where, *rest) in parsed for where, (css, *rest) in self.source.items())

    def warm(self, variables: dict[str, str], budget_s: float = 0.004) -> bool:
        """Parse sources not parsed yet for the theme of ``variables`` for about ``budget_s`` (a source takes a few
        ms: a key pressed meanwhile waits no longer than that); False once every source is (a switch to it then
        parses none)."""
        parsed = self._parsed.setdefault(self._key(variables), {})
        todo = [(where, src) for where, src in self.source.items()
                if (src[0], where, *src[1:]) not in parsed and src[0] not in self._invalid_css]
        scratch = Stylesheet(variables=variables)
        end, done = time.perf_counter() + budget_s, 0
        for where, (css, is_default, tie_breaker, scope) in todo:
            if time.perf_counter() > end:
                break
            done += 1
            try:
                got = scratch._parse_rules(css, where, is_default, tie_breaker, scope)
            except Exception:  # the theme's own switch reports it
                self._invalid_css.add(css)
                continue
            if not any(rule.errors for rule in got):
                parsed[(css, where, is_default, tie_breaker, scope)] = got
        return len(todo) > done
