"""The flag form: typed fields for the key SGLang flags, an extras field, inline errors,
the backend's flag validator and memory planner, and a diff against the running flags.

Launch is two presses: the first validates and shows the checks (and the diff), the second
confirms. It dismisses with a :class:`LaunchRequest` (flags as an argv list) or ``None``.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from pydantic import ValidationError
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, Switch

from console.model import DEFAULT_PORT, LaunchRequest
from console.ui.flag_values import (
    MAMBA_STRATEGIES,
    SPEC_ALGOS,
    FlagValues,
    field_errors,
    flag_diff,
    from_argv,
)
from console.ui.format import clean, short
from console.ui.widgets.footer import QuietFooter

Validator = Callable[[list[str]], Any]
"""``validator(flags[, host=])`` -> [(severity, message)], or an awaitable of it."""
Planner = Callable[[list[str], list[int]], Any]
"""``planner(flags, gpus[, host=])`` -> a plan text, a (severity, text) pair, a list of pairs or None
(or an awaitable of one). An ``error`` blocks the launch unless *force* is on."""
FORCE_LABEL = "force: launch even if the memory plan says it does not fit"


def takes_host(fn: Callable) -> bool:
    """Whether a hook accepts ``host=`` (older hooks take only the flags)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "host" or p.kind is p.VAR_KEYWORD for p in params)


def as_findings(res: Any, default: str) -> list[tuple[str, str]]:
    """A hook's answer as (severity, message) pairs."""
    if not res:
        return []
    if isinstance(res, str):
        return [(default, res)]
    if isinstance(res, tuple) and len(res) == 2 and all(isinstance(x, str) for x in res):
        return [res]
    return [(str(sev), str(msg)) for sev, msg in res]

# (field, label, placeholder or choices)
FIELDS: list[tuple[str, str, Any]] = [
    ("model_path", "model path", "/models/... or org/name"),
    ("gpus", "GPUs", "0 or 0,1"),
    ("tp_size", "tp size", "default: 1"),
    ("port", "port", f"default: {DEFAULT_PORT}"),
    ("spec_algo", "speculative algorithm", SPEC_ALGOS),
    ("num_steps", "  num steps", "e.g. 3"),
    ("eagle_topk", "  eagle topk", "e.g. 1"),
    ("num_draft_tokens", "  num draft tokens", "e.g. 4"),
    ("mem_fraction", "mem fraction static", "(0, 1], e.g. 0.85"),
    ("max_running", "max running requests", "e.g. 48"),
    ("context_length", "context length", "e.g. 32768"),
    ("hicache", "hierarchical cache", bool),
    ("hicache_size", "  hicache size (GB)", "e.g. 200"),
    ("mamba_strategy", "mamba cache strategy", MAMBA_STRATEGIES),
    ("extras", "other flags", "--flag value ... (split like a shell, never run by one)"),
]


class FlagForm(ModalScreen[LaunchRequest | None]):
    """Edit the flags of one launch on one host."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+r", "check", "Check", tooltip="validate the flags and plan the memory"),
        Binding("ctrl+l", "launch", "Launch", tooltip="launch (press again to confirm); enter in a field does too"),
    ]
    DEFAULT_CSS = """
    FlagForm .checks { width: 1fr; height: auto; }
    FlagForm .impact { height: auto; margin-bottom: 1; color: $text-warning; }
    """
    SPEC_FIELDS = ("num_steps", "eagle_topk", "num_draft_tokens")
    """Only in the tab order when a speculative algorithm is chosen."""

    def __init__(self, host: str, raw: dict[str, Any], *, title: str, running_argv: list[str] | None = None,
                 validator: Validator | None = None, planner: Planner | None = None,
                 remember: Callable[[dict[str, Any]], None] | None = None, replaces: str | None = None,
                 template: LaunchRequest | None = None, impact: list[str] | None = None,
                 profiles: dict[str, LaunchRequest] | None = None) -> None:
        super().__init__(classes="dialog-screen")
        self.host, self.raw, self.title_text = host, dict(raw), title
        self.running_argv, self.validator, self.planner = running_argv, validator, planner
        self.remember, self.replaces = remember, replaces
        self.template = template
        """Carries what the form does not edit (env values, profile name) into the request."""
        self.armed: list[str] | None = None
        self.impact = impact
        """What launching stops (the running server: pids, port, model, traffic, GPU memory), when it does."""
        self.profiles = dict(profiles or {})
        """Launch profiles the operator may start from (name -> request): the picker fills the fields."""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog form"):
            yield Static(Content.from_markup("[b]$t[/b]", t=self.title_text), classes="dialog-title")
            with VerticalScroll(classes="fields"):  # on a short terminal what it stops scrolls with the fields
                if self.impact:
                    yield Static(Content("launching stops:\n" + "\n".join(self.impact)), classes="impact")
                if self.profiles:
                    with Horizontal(classes="field"):
                        yield Label("profile", classes="field-label")
                        yield Select([(f"{n} · {short(' '.join(r.flags), 60)}", n) for n, r in self.profiles.items()],
                                     prompt="(none: the fields below)", id="profile")
                for name, label, kind in FIELDS:
                    with Horizontal(classes="field"):
                        yield Label(label, classes="field-label")
                        yield self._widget(name, kind)
                    yield Static("", id=f"err-{name}", classes="field-error", markup=False)
                yield Static("", id="err-", classes="field-error", markup=False)
                with Horizontal(classes="field force"):
                    yield Label("force", classes="field-label")
                    yield Switch(value=bool(self.template and self.template.force), id="force")
                    yield Label(FORCE_LABEL, classes="field-hint")
                yield Static("", id="diff", classes="diff").set_styles("display: none;")
                yield Static("", id="checks", classes="checks").set_styles("display: none;")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Check", id="check")
                yield Button("Launch", id="launch", variant="primary")
        yield QuietFooter()

    def _widget(self, name: str, kind: Any):
        v = self.raw.get(name)
        if kind is bool:
            return Switch(value=bool(v), id=f"f-{name}")
        if isinstance(kind, tuple):
            return Select([(c, c) for c in kind], value=v if v in kind else kind[0], allow_blank=False, id=f"f-{name}")
        return Input("" if v is None else str(v), placeholder=kind, id=f"f-{name}")

    def on_mount(self) -> None:
        for b in ("#cancel", "#check"):  # esc and ctrl+r do these: fewer tab stops
            self.query_one(b, Button).can_focus = False
        self._relevant()
        self.query_one("#f-model_path", Input).focus()
        if self.app.animation_level == "none":  # reduced motion: no blinking cursors either
            for box in self.query(Input):
                box.cursor_blink = False

    # ---- values
    def values(self) -> dict[str, Any]:
        out: dict[str, Any] = {"command": self.raw.get("command") or None}
        for name, _, kind in FIELDS:
            sel = f"#f-{name}"
            if kind is bool:
                out[name] = self.query_one(sel, Switch).value
            elif isinstance(kind, tuple):
                out[name] = self.query_one(sel, Select).value
            else:
                out[name] = self.query_one(sel, Input).value
        return {k: v for k, v in out.items() if v is not None}

    def parse(self) -> FlagValues | None:
        """Validate the fields; shows inline errors, returns the values when valid."""
        raw = self.values()
        self.raw = raw
        errors: dict[str, str] = {}
        result = None
        try:
            result = FlagValues(**raw)
        except ValidationError as e:
            errors = field_errors(e)
        for name in [n for n, _, _ in FIELDS] + [""]:
            box = self.query_one(f"#err-{name}", Static)
            box.update(errors.get(name, ""))
            box.set_class(name in errors, "-shown")
        first = next((n for n, _, _ in FIELDS if n in errors), None)
        if first is not None:
            self.query_one(f"#f-{first}").focus()
        elif "" in errors:
            self.query_one("#err-", Static).scroll_visible(animate=False)
        return result

    async def checks(self, v: FlagValues) -> bool:
        """Run the backend's validator and planner; returns False when they found an error."""
        flags, lines, ok = v.to_flags(), [], True
        force = self.force
        for fn, args in ((self.validator, (flags,)), (self.planner, (flags, v.gpus))):
            if fn is None:
                continue
            try:
                res = fn(*args, **({"host": self.host} if takes_host(fn) else {}))
                if inspect.isawaitable(res):
                    res = await res
                res = as_findings(res, "plan" if fn is self.planner else "note")
            except Exception as e:  # a broken checker must not take the form down
                res = [("warning", f"{'check' if fn is self.validator else 'plan'} could not run: {e}")]
            for sev, msg in res:
                if sev == "error" and fn is self.planner and force:
                    sev, msg = "warning", f"{msg} (forced)"
                ok = ok and sev != "error"
                style = {"error": "$text-error", "warning": "$text-warning"}.get(sev, "$text-muted")
                lines.append(Content.from_markup(f"[{style}]$s[/] $m", s=f"{sev}:", m=short(clean(str(msg)), 1500)))
        if not lines:
            lines.append(Content("no flag validator or memory planner available" if not (self.validator or self.planner)
                                 else "checks: nothing to report"))
        self._show("#checks", Content("\n").join(lines))
        if self.running_argv is not None:
            diff = flag_diff(self.running_argv, flags) or ["(no change)"]
            self._show("#diff", Content("changes against the server's current flags:\n" + "\n".join(diff)))
        self.query_one("#checks", Static).scroll_visible(animate=False)
        return ok

    @property
    def force(self) -> bool:
        return bool(self.query_one("#force", Switch).value)

    def _show(self, sel: str, content: Content) -> None:
        box = self.query_one(sel, Static)
        box.update(content)
        box.display = True

    def _relevant(self) -> None:
        """Fields that do not apply (speculative numbers without an algorithm, the hicache size without
        the hierarchical cache) are disabled: out of the tab order, their values kept."""
        algo = self.query_one("#f-spec_algo", Select).value
        for name in self.SPEC_FIELDS:
            self.query_one(f"#f-{name}").disabled = algo in ("none", None, Select.BLANK)
        self.query_one("#f-hicache_size").disabled = not self.query_one("#f-hicache", Switch).value

    # ---- buttons and keys
    async def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        await self.submit(event.button.id or "launch")

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in any single-line field launches (the first press checks, the second confirms)."""
        event.stop()
        await self.submit("launch")

    async def action_check(self) -> None:
        await self.submit("check")

    async def action_launch(self) -> None:
        await self.submit("launch")

    async def submit(self, which: str) -> None:
        """``cancel``, ``check`` (validate and plan) or ``launch`` (check, then arm; again: dismiss with it)."""
        if which == "cancel":
            self.dismiss(None)
            return
        v = self.parse()
        if v is None:
            self._disarm()
            return
        ok = await self.checks(v)
        if which == "check" or not ok:
            self._disarm()
            return
        flags = v.to_flags()
        if self.armed != flags:
            self.armed = flags
            self.query_one("#launch", Button).label = "Confirm launch"
            return
        if self.remember:
            self.remember(self.raw)
        keep = {"env": self.template.env, "profile": self.template.profile} if self.template else {}
        self.dismiss(LaunchRequest(host=self.host, command=v.command, flags=flags, gpus=v.gpus, port=v.port,
                                   replaces=self.replaces, force=self.force, **keep))

    def _disarm(self) -> None:
        self.armed = None
        self.query_one("#launch", Button).label = "Launch"

    def _changed(self) -> None:
        """The flags changed: the last Check's results (and diff) describe other flags, so hide them."""
        if self.armed is not None:
            self._disarm()
        for sel in ("#checks", "#diff"):
            box = self.query_one(sel, Static)
            if box.display:
                box.update("")
                box.display = False

    def on_input_changed(self) -> None:
        self._changed()

    def on_switch_changed(self) -> None:
        self._relevant()
        self._changed()

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "profile":
            self.use_profile(event.value)
        self._relevant()
        self._changed()

    def use_profile(self, name: object) -> None:
        """Fill every field from profile ``name`` (its model, flags, GPUs and port); the form stays editable."""
        req = self.profiles.get(name) if isinstance(name, str) else None
        if req is None:
            return
        raw = from_argv([*req.command, *req.flags], req.gpus, req.port)
        for field, _, kind in FIELDS:
            v = raw.get(field)
            if kind is bool:
                self.query_one(f"#f-{field}", Switch).value = bool(v)
            elif isinstance(kind, tuple):
                self.query_one(f"#f-{field}", Select).value = v if v in kind else kind[0]
            else:
                self.query_one(f"#f-{field}", Input).value = "" if v is None else str(v)
        self.raw = {**raw, "command": req.command}
        self.template = req

    def action_cancel(self) -> None:
        self.dismiss(None)
