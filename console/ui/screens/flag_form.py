"""The flag form: typed fields for the key SGLang flags, an extras field, inline errors,
the backend's flag validator, memory planner and GPU check, and a diff against the running flags.

Check (``ctrl+r``) runs when the form opens: the flags against the host's server, the memory plan
(against the memory free now, for a launch that stops nothing) and what the launch's preflight says of
the GPUs now (a session, an orphan or another process holding them). After a passing Check one key
launches; otherwise Launch checks first and asks once more. ``ctrl+f`` applies the planner's fix to its
field and checks again. It dismisses with a :class:`LaunchRequest` (flags as an argv list) or ``None``.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable

from pydantic import ValidationError
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Select, Static, Switch

from console.core.planner import PlanFix, read_fixes
from console.model import DEFAULT_PORT, LaunchRequest
from console.ui.flag_values import (
    MAMBA_STRATEGIES,
    SPEC_ALGOS,
    FlagValues,
    field_errors,
    flag_diff,
    from_argv,
    gpu_indices,
    same_flags,
    set_flag,
)
from console.ui.format import clean, gpu_list, short
from console.ui.widgets.footer import QuietFooter

Validator = Callable[[list[str]], Any]
"""``validator(flags[, host=])`` -> [(severity, message)], or an awaitable of it."""
Planner = Callable[[list[str], list[int]], Any]
"""``planner(flags, gpus[, host=][, count_use=])`` -> a plan text, a (severity, text) pair, a list of pairs or None
(or an awaitable of one). An ``error`` blocks the launch unless *force* is on."""
GpuCheck = Callable[[list[str], list[int]], Any]
"""``gpu_check(flags, gpus[, host=])`` -> [(severity, message)] (or an awaitable of it): what the launch's preflight
says of the GPUs now. An ``error`` blocks the launch; force does not override it."""
FORCE_LABEL = "force: launch even if the memory plan says it does not fit"
FIX_UNAPPLIED = ("--tp-size",)
"""Fixes the form does not apply by key: a tensor-parallel size needs the operator's choice of GPUs."""


def takes(fn: Callable, name: str) -> bool:
    """Whether a hook accepts keyword ``name`` (older hooks take only the flags)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


def takes_host(fn: Callable) -> bool:
    """Whether a hook accepts ``host=``."""
    return takes(fn, "host")


def as_findings(res: Any, default: str) -> list[tuple[str, str]]:
    """A hook's answer as (severity, message) pairs."""
    if not res:
        return []
    if isinstance(res, str):
        return [(default, res)]
    if isinstance(res, tuple) and len(res) == 2 and all(isinstance(x, str) for x in res):
        return [res]
    return [(str(sev), str(msg)) for sev, msg in res]


def gpus_words(gpus: list[int]) -> str:
    """``GPU 1`` or ``GPUs 0,1``: a form's title names the GPUs its launch goes to."""
    return f"GPU{'s' if len(gpus) != 1 else ''} {gpu_list(gpus)}"


def profile_label(name: str, req: LaunchRequest) -> str:
    """A picker line: the profile's name and its description (else its flags)."""
    return f"{name} — {short(req.description, 70)}" if req.description else f"{name} · {short(' '.join(req.flags), 60)}"


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
FIRST_FIELDS = 4
"""The fields composed with the form: they fill its first frame (the focus is in the first, typing goes there); the
rest are mounted right after that frame is drawn (:meth:`FlagForm._mount_rest`). Composing the form's ~90 widgets
before its first frame took 2 to 3 times as long as the frame of these (``bench/b_keys.py``)."""
KEEP_ON_FOCUS = ("extras",)
"""Fields whose text tabbing in does not select (typing would replace every other flag)."""

Key = tuple[tuple[str, ...], tuple[int, ...], bool]
"""What a Check's results describe: the flags, the GPUs and force."""


class FlagForm(ModalScreen[LaunchRequest | None]):
    """Edit the flags of one launch on one host."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+r", "check", "Check", tooltip="validate the flags, plan the memory, check the GPUs"),
        Binding("ctrl+f", "fix", "Fix", tooltip="apply the memory planner's fix to its field, then check again"),
        Binding("ctrl+l", "launch", "Launch",
                tooltip="launch (after a passing Check at once, else it checks first); enter in a field does too"),
    ]
    DEFAULT_CSS = """
    FlagForm .checks { width: 1fr; height: auto; }
    FlagForm .impact { height: auto; margin-bottom: 1; color: $text-warning; }
    FlagForm .profile-note { height: auto; color: $text-muted; margin-bottom: 1; }
    FlagForm .check-status { height: auto; margin-bottom: 1; }
    """
    AUTO_FOCUS = "#f-model_path"
    """The first field has the focus from the start: nothing else (the field list) is focused, and restyled with its
    80 widgets, first, then blurred and restyled again."""
    SPEC_FIELDS = ("num_steps", "eagle_topk", "num_draft_tokens")
    """Only in the tab order when a speculative algorithm is chosen."""

    def __init__(self, host: str, raw: dict[str, Any], *, title: str | Callable[[list[int]], str],
                 running_argv: list[str] | None = None, validator: Validator | None = None,
                 planner: Planner | None = None, gpu_check: GpuCheck | None = None,
                 remember: Callable[[dict[str, Any]], None] | None = None, replaces: str | None = None,
                 template: LaunchRequest | None = None, impact: list[str] | None = None,
                 profiles: dict[str, LaunchRequest] | None = None, source: str | None = None) -> None:
        super().__init__(classes="dialog-screen")
        self.host, self.raw = host, dict(raw)
        self._title = ""
        self.title_for = title
        """The title, or a function of the GPUs field's indices (the title follows the field)."""
        self.running_argv, self.validator, self.planner, self.gpu_check = running_argv, validator, planner, gpu_check
        self.remember, self.replaces = remember, replaces
        self.template = template
        """Carries what the form does not edit (env values, profile name) into the request."""
        self.armed: Key | None = None
        """A passing Check's key: Launch with these flags, GPUs and force launches at once."""
        self.impact = impact
        """What launching stops (the running server: pids, port, model, traffic, GPU memory), when it does."""
        self.profiles = dict(profiles or {})
        """Launch profiles the operator may start from (name -> request): the picker fills the fields."""
        self.source = source
        """Where the fields came from (the GPU's last session, the host's defaults...), said under the picker."""
        self.applied: str | None = self._matching(self.raw)
        """The profile whose flags the fields were filled from (or hold at open); the picker shows it."""
        self.fixes: list[PlanFix] = []
        """The planner's fixes of the last Check shown (``ctrl+f`` applies the first it can)."""
        self.opening = True
        """The Check run at open has not finished (or been skipped) yet."""
        self._shown: Key | None = None
        self._lock = asyncio.Lock()
        self._fresh = True
        """Not shown yet: its widgets got their styles as they were mounted."""
        self.whole = False
        """Every field is mounted (the ones after :data:`FIRST_FIELDS` come right after the first frame)."""
        self._whole = asyncio.Event()
        self._editors: dict[str, Input | Select | Switch] = {}
        """Each field's editor, from when it is made (and mounted with its row, that same turn): no DOM walks."""

    # ---- building
    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog form"):
            yield Static(self._title_content(), id="form-title", classes="dialog-title")
            with VerticalScroll(classes="fields"):  # on a short terminal what it stops scrolls with the fields
                yield Static("", id="check-status", classes="check-status").set_styles("display: none;")
                if self.impact:
                    yield Static(Content("launching stops:\n" + "\n".join(self.impact)), classes="impact")
                if self.profiles:
                    with Horizontal(classes="field"):
                        yield Label("profile", classes="field-label")
                        yield Select([(profile_label(n, r), n) for n, r in self.profiles.items()],
                                     prompt="(none: the fields below)", id="profile",
                                     value=self.applied if self.applied is not None else Select.NULL)
                    yield Static(self._profile_note(), id="profile-note", classes="profile-note", markup=False)
                for name, label, kind in FIELDS[:FIRST_FIELDS]:
                    yield from self._row(name, label, kind)
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Check", id="check")
                yield Button("Launch", id="launch", variant="primary")
        yield QuietFooter()

    def _row(self, name: str, label: str, kind: Any) -> list[Widget]:
        """One field: its label and editor, and the line under it for its error."""
        editor = self._editors[name] = self._widget(name, kind)
        return [Horizontal(Label(label, classes="field-label"), editor, classes="field"),
                Static("", id=f"err-{name}", classes="field-error", markup=False)]

    def _rest(self) -> list[Widget]:
        """What follows the first fields: the other fields (from the values now), force, the diff and the checks."""
        force = self._editors["force"] = Switch(value=bool(self.template and self.template.force), id="force")
        return [*(w for name, label, kind in FIELDS[FIRST_FIELDS:] for w in self._row(name, label, kind)),
                Static("", id="err-", classes="field-error", markup=False),
                Horizontal(Label("force", classes="field-label"), force,
                           Label(FORCE_LABEL, classes="field-hint"), classes="field force"),
                Static("", id="diff", classes="diff").set_styles("display: none;"),
                Static("", id="checks", classes="checks").set_styles("display: none;")]

    def _widget(self, name: str, kind: Any) -> Input | Select | Switch:
        v = self.raw.get(name)
        if kind is bool:
            return Switch(value=bool(v), id=f"f-{name}")
        if isinstance(kind, tuple):
            return Select([(c, c) for c in kind], value=v if v in kind else kind[0], allow_blank=False, id=f"f-{name}")
        return Input("" if v is None else str(v), placeholder=kind, id=f"f-{name}",
                     select_on_focus=name not in KEEP_ON_FOCUS)

    def on_mount(self) -> None:
        for b in ("#cancel", "#check"):  # esc and ctrl+r do these: fewer tab stops
            self.query_one(b, Button).can_focus = False
        self.query_one("#f-model_path", Input).focus()
        self._quiet_cursors()
        self.call_after_refresh(self._mount_rest)

    async def _mount_rest(self) -> None:
        """After the first frame: the other fields, then the Check run at open."""
        if not self.is_attached or self.whole:
            self.opening = False
            return
        await self.query_one(".fields", VerticalScroll).mount_all(self._rest())
        self.whole = True
        self._whole.set()
        self._relevant()
        self._quiet_cursors()
        self.run_worker(self.submit("open"), group="form-check", exit_on_error=False)

    def on_unmount(self) -> None:
        if not self.whole:  # closed before the rest of the fields came: no Check runs at open
            self.opening = False

    def _quiet_cursors(self) -> None:
        if self.app.animation_level == "none":  # reduced motion: no blinking cursors either
            for box in self.query(Input):
                box.cursor_blink = False

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        """The push's resume restyles every widget of the screen (a theme may have changed while it was under
        another): the first one, right after every widget was styled as it was mounted, does not."""
        if self._fresh:
            self._fresh = False
            event.refresh_styles = False

    # ---- the title and the picker follow the fields
    def _title_content(self) -> Content:
        """The title; a title of the GPUs is of the field's GPUs (while the field does not parse, its last)."""
        title = self.title_for
        if callable(title):
            try:
                self._title = title(gpu_indices(str(self.raw.get("gpus") or "")))
            except ValueError:
                self._title = self._title or title([])
        else:
            self._title = title
        return Content.from_markup("[b]$t[/b]", t=self._title)

    @property
    def title_text(self) -> str:
        return self._title_content().plain

    def _retitle(self) -> None:
        if callable(self.title_for):
            self.raw = {**self.raw, "gpus": self.query_one("#f-gpus", Input).value}
            self.query_one("#form-title", Static).update(self._title_content())

    def _matching(self, raw: dict[str, Any]) -> str | None:
        """The profile whose flags (port aside) ``raw`` holds, if one does."""
        try:
            flags = FlagValues(**raw).to_flags()
        except ValidationError:
            return None
        return next((n for n, r in self.profiles.items() if same_flags(flags, r.flags)), None)

    def _profile_note(self) -> str:
        req = self.profiles.get(self.applied) if self.applied else None
        if req is None:
            return f"the fields hold {self.source}" if self.source else ""
        try:
            edited = not same_flags(FlagValues(**self.raw).to_flags(), req.flags)
        except ValidationError:
            edited = True
        what = f"{self.applied}: {req.description + ' — ' if req.description else ''}"
        return what + ("edited since it filled the fields" if edited
                       else f"its flags fill the fields: {short(' '.join(req.flags), 400)}")

    def _renote(self) -> None:
        if self.profiles:
            self.query_one("#profile-note", Static).update(self._profile_note())

    # ---- values
    def values(self) -> dict[str, Any]:
        """What the fields hold (a field not mounted yet: the value it will be mounted with)."""
        out: dict[str, Any] = {"command": self.raw.get("command") or None}
        for name, _, kind in FIELDS:
            box = self._field(name)
            if box is None:
                v = self.raw.get(name)
                out[name] = bool(v) if kind is bool else (v if v in kind else kind[0]) if isinstance(kind, tuple) \
                    else ("" if v is None else str(v))
            else:
                out[name] = box.value
        return {k: v for k, v in out.items() if v is not None}

    def _field(self, name: str) -> Input | Select | Switch | None:
        """Field ``name``'s editor; None while it is not mounted yet."""
        return self._editors.get(name)

    def _key(self, v: FlagValues) -> Key:
        return tuple(v.to_flags()), tuple(v.gpus), self.force

    def _key_now(self) -> Key | None:
        """The key of what the fields hold now (None when they do not parse)."""
        try:
            return self._key(FlagValues(**self.values()))
        except ValidationError:
            return None

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

    async def _ask(self, fn: Callable, args: tuple, default: str, **kw: Any) -> list[tuple[str, str]]:
        what = {"plan": "plan", "note": "check", "gpus": "GPU check"}[default]
        try:
            res = fn(*args, **{k: v for k, v in kw.items() if takes(fn, k)})
            if inspect.isawaitable(res):
                res = await res
            return as_findings(res, "note" if default == "gpus" else default)
        except Exception as e:  # a broken checker must not take the form down
            return [("warning", f"{what} could not run: {e}")]

    async def checks(self, v: FlagValues, *, scroll: bool = True) -> bool | None:
        """Run the backend's validator, planner and GPU check; returns False when they found an error, None when
        the fields changed while they ran (the results describe other flags: not shown). The results go below the
        fields (``scroll``: brought into view), their summary above them."""
        async with self._lock:
            key = self._key(v)
            flags, gpus, lines, ok = v.to_flags(), list(v.gpus), [], True
            force, fixes, worst = self.force, [], []
            hooks = ((self.validator, (flags,), "note"), (self.planner, (flags, gpus), "plan"),
                     (self.gpu_check, (flags, gpus), "gpus"))
            for fn, args, default in hooks:
                if fn is None:
                    continue
                res = await self._ask(fn, args, default, host=self.host, count_use=self.gpu_check is not None)
                for sev, msg in res:
                    if default == "plan":
                        fixes += [f for f in read_fixes(msg) if f.flag not in FIX_UNAPPLIED]
                        if sev == "error" and force:
                            sev, msg = "warning", f"{msg} (forced)"
                    ok = ok and sev != "error"
                    worst += [msg] if sev == "error" else []
                    style = {"error": "$text-error", "warning": "$text-warning"}.get(sev, "$text-muted")
                    m = short(clean(str(msg)), 1500)
                    if sev not in ("error", "warning") and default == "plan" and not m.startswith("memory plan"):
                        m = f"memory plan: {m}"  # the planner's note, named once ("memory plan: fits")
                    lines.append(Content.from_markup(f"[{style}]$s[/] $m", s=f"{sev}:", m=m) if sev in ("error", "warning")
                                 else Content.from_markup(f"[{style}]$m[/]", m=m))
            if not self.is_attached or self._key_now() != key:  # closed, or the fields changed while it ran
                return None
            if not lines:
                lines.append(Content("no flag validator or memory planner available"
                                     if not (self.validator or self.planner) else "checks: nothing to report"))
            best = next((f for f in fixes if f.then == "fits"), fixes[0] if fixes else None)
            self.fixes = [best] if best else []
            if best is not None:
                lines.append(Content.from_markup("[$text-accent]$k[/] $t", k="ctrl+f applies the planner's fix:",
                                                 t=best.text))
            self._show("#checks", Content("\n").join(lines))
            if self.running_argv is not None:
                diff = flag_diff(self.running_argv, flags) or ["(no change)"]
                self._show("#diff", Content("changes against the server's current flags:\n" + "\n".join(diff)))
            self._shown = key
            self._summary(worst, best)
            if scroll:
                self.query_one("#checks", Static).scroll_visible(animate=False)
            return ok

    def _summary(self, errors: list[str], fix: PlanFix | None) -> None:
        """One line above the fields: what the Check found, and the key that acts on it."""
        if errors:
            more = f" (+{len(errors) - 1} more below)" if len(errors) > 1 else " (details below)"
            text = Content.from_markup("[$text-error]✗ $m[/]$r", m=short(clean(errors[0]), 160), r=more)
            if fix is not None:
                text += Content.from_markup(" — [$text-accent]ctrl+f[/] $t", t=fix.text)
        else:
            text = Content.from_markup("[$text-success]✓ checked: nothing blocks this launch[/] — $t",
                                       t="Launch, then Confirm launch (it stops the server above)" if self.impact
                                       else "ctrl+l or enter launches")
        self._show("#check-status", text)

    @property
    def force(self) -> bool:
        box = self._editors.get("force")
        return bool(box.value) if box is not None else bool(self.template and self.template.force)

    def _show(self, sel: str, content: Content) -> None:
        box = self.query_one(sel, Static)
        box.update(content)
        box.display = True

    def _relevant(self) -> None:
        """Fields that do not apply (speculative numbers without an algorithm, the hicache size without
        the hierarchical cache) are disabled: out of the tab order, their values kept."""
        if not self.whole:  # mounted with the rest, then set
            return
        e = self._editors
        algo = e["spec_algo"].value
        for name in self.SPEC_FIELDS:
            e[name].disabled = algo in ("none", None, Select.BLANK)
        e["hicache_size"].disabled = not e["hicache"].value

    # ---- buttons and keys
    async def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        await self.submit(event.button.id or "launch")

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in any single-line field launches (at once after a passing Check; else it checks first)."""
        event.stop()
        await self.submit("launch")

    async def action_check(self) -> None:
        await self.submit("check")

    async def action_launch(self) -> None:
        await self.submit("launch")

    async def action_fix(self) -> None:
        """Apply the planner's fix of the last Check to its field (or to "other flags"), then check again."""
        fix = next(iter(self.fixes), None)
        if fix is None:
            self.notify("no planner fix to apply: Check (ctrl+r) first; the plan fits or names none the form can set",
                        severity="warning")
            return
        self._fill(set_flag(self.values(), fix.flag, fix.value))
        self.notify(f"applied: {fix.flag} {fix.value}")
        await self.submit("check")

    async def submit(self, which: str) -> None:
        """``cancel``; ``check`` (validate, plan, check the GPUs); ``open`` (the same when the form opens, silent
        when the fields do not parse yet); ``launch``: at once after a passing Check of these very fields, else
        check and ask once more."""
        if which == "cancel":
            self.dismiss(None)
            return
        await self._whole.wait()  # a key pressed before the rest of the fields came: they are there now
        try:
            if which == "open" and self._key_now() is None:
                return
            v = self.parse()
            if v is None:
                self._disarm()
                return
            if which == "launch" and self.armed == self._key(v):
                self._dismiss_with(v)
                return
            ok = await self.checks(v, scroll=which != "open")  # at open the focus stays in view
            if ok is None:
                return
            if not ok:
                self._disarm()
                return
            if which != "open" or not self.impact:  # opening a form that stops a server never arms it alone
                self._arm(self._key(v))
        finally:
            if which == "open":
                self.opening = False

    def _dismiss_with(self, v: FlagValues) -> None:
        if self.remember:
            self.remember(self.raw)
        keep: dict[str, Any] = {}
        if self.template:
            keep["env"] = self.template.env
            prof = self.profiles.get(self.applied) if self.applied else None
            keep["profile"] = self.template.profile if prof is None or same_flags(v.to_flags(), prof.flags) else None
        self.dismiss(LaunchRequest(host=self.host, command=v.command, flags=v.to_flags(), gpus=v.gpus, port=v.port,
                                   replaces=self.replaces, force=self.force, **keep))

    def _arm(self, key: Key) -> None:
        self.armed = key
        self.query_one("#launch", Button).label = "Confirm launch"
        self._show("#check-status", Content.from_markup(
            "[$text-success]✓ checked: nothing blocks this launch[/] — $t", t="ctrl+l or enter launches"))

    def _disarm(self) -> None:
        self.armed = None
        self.query_one("#launch", Button).label = "Launch"

    def _changed(self) -> None:
        """The fields changed: a Check's results (and diff) that describe other flags are hidden, and Launch
        checks again first."""
        now = self._key_now()
        if self.armed is not None and self.armed != now:
            self._disarm()
        if self._shown is not None and self._shown != now:
            self._shown, self.fixes = None, []
            for sel in ("#checks", "#diff", "#check-status"):
                box = self.query_one(sel, Static)
                box.update("")
                box.display = False
        self.raw = {**self.raw, **self.values()}
        self._renote()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "f-gpus":
            self._retitle()
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
        """Fill the fields from profile ``name``: its model and flags (its port when it names one). The GPUs stay
        what the operator chose; the form stays editable; Check runs again."""
        req = self.profiles.get(name) if isinstance(name, str) else None
        if req is None or not isinstance(name, str):
            if name is Select.NULL and self.applied is not None:
                self.applied = None
                self._renote()
            return
        if name == self.applied:
            return
        raw = from_argv([*req.command, *req.flags], [], req.port)
        self._fill({**raw, "gpus": self.query_one("#f-gpus", Input).value,
                    "port": raw.get("port") or self.query_one("#f-port", Input).value})
        self.raw = {**raw, **self.values(), "command": req.command}
        self.template = req
        self.applied = name
        self._renote()
        self.run_worker(self.submit("check"), group="form-check", exit_on_error=False)

    def _fill(self, raw: dict[str, Any]) -> None:
        """Set every field from raw form values (one not mounted yet is mounted with its value)."""
        for field, _, kind in FIELDS:
            v, box = raw.get(field), self._field(field)
            if box is None:
                self.raw[field] = v
            elif isinstance(box, Switch):
                box.value = bool(v)
            elif isinstance(box, Select):
                box.value = v if v in kind else kind[0]
            else:
                box.value = "" if v is None else str(v)
        self._relevant()

    def action_cancel(self) -> None:
        self.dismiss(None)
