"""Key latency: every binding of the GPU panels' screen, key → the first frame that shows its effect.

The real app (``console.ui.app.make_app``) on the deterministic ``FakeBackend`` of ``tests/ui_fakes.py`` (two hosts,
six GPU panels: READY, FAILED, FOREIGN, IDLE, LOADING), headless in Textual's ``App.run_test``, once at 200×50 and
once at 80×24 (compact panels, the log pane under them). Each binding of ``MainScreen.BINDINGS`` (its own keys and
the app's help, quit and theme it repeats) and the command palette's ``ctrl+p`` is pressed with the Pilot in the
app's own process, ``n`` times, from the state its effect needs (a READY panel focused for ``k``, a scrolled-up log
for ``end``...), and put back afterwards (escape, ``n``, the toggle again) outside the measured time.

A sample is the time from the key's press to the first frame (``App._display`` with an update) at which the key's
effect is in the app: the screen it opens is on top with its content, the panel it moves to is focused, the pane it
toggles has toggled, the theme it picks is set. With the fake backend and a frozen clock the app draws no frame
when idle, so a key whose effect no check names (a binding added later) counts its first frame. ``q`` ends the app:
it is timed to the app's ``exit`` on fresh apps. The flag form draws its first fields first: ``l`` and ``e`` are timed
once more to the frame that has every field (the rows marked "(every field)", said beside the verdict, not in it).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.procstat import machine_busy
from bench.stats import Summary, cell, num, summarize

REPO = Path(__file__).resolve().parents[1]
SIZES = [(200, 50), (80, 24)]
GOAL_MS = 100.0
TIMEOUT_S = 3.0
WHOLE = " (every field)"
"""The rows of the flag form's keys timed to the frame with every field, after their own rows (first frame)."""


def _imports():
    sys.path.insert(0, str(REPO / "tests"))
    import ui_fakes  # noqa: E402

    return ui_fakes


@dataclass
class Case:
    """How one key is measured: put the app in the state its effect needs, tell when the effect is shown, undo it."""

    check: str
    """What the measured frame shows, in words (the report's column)."""
    changed: Callable[[], bool]
    prepare: Callable[[], Awaitable[None]] | None = None
    undo: Callable[[], Awaitable[None]] | None = None


@dataclass
class Frames:
    """Every frame's time, and the first one at which the current case's effect was shown."""

    times: list[float] = field(default_factory=list)
    check: Callable[[], bool] | None = None
    hit: float | None = None
    hit_cpu: float | None = None
    """The app's thread CPU time at that frame (``time.thread_time``)."""


class KeyBench:
    """One app at one size: its cases and the measuring loop."""

    def __init__(self, f, app, pilot, frames: Frames) -> None:
        self.f, self.app, self.pilot, self.frames = f, app, pilot, frames

    # ---- helpers the cases use
    @property
    def main(self):
        return self.app.main

    def panel(self, host: str, index: int):
        return next(p for p in self.app.panels() if p.host == host and p.index == index)

    async def settle(self) -> None:
        """Until no frame came for 60 ms (at most 2 s): the previous step is drawn and done."""
        await self.pilot.pause()
        end = time.perf_counter() + 2.0
        while time.perf_counter() < end:
            last = self.frames.times[-1] if self.frames.times else 0.0
            if time.perf_counter() - last > 0.06:
                return
            await asyncio.sleep(0.02)

    async def until(self, cond: Callable[[], bool], timeout: float = TIMEOUT_S) -> None:
        end = time.perf_counter() + timeout
        while not cond():
            if time.perf_counter() > end:
                raise TimeoutError("the bench's state did not come")
            await asyncio.sleep(0.005)

    async def focus(self, host: str, index: int) -> None:
        await self.to_main()
        p = self.panel(host, index)
        if not p.has_focus:
            self.main.focus_panel(p)
            self.main.select(p)
        await self.until(lambda: p.has_focus and self.app.selected is p)

    async def to_main(self) -> None:
        """Back on the GPU panels' screen (a left-over screen closed with escape)."""
        for _ in range(4):
            if self.app.screen is self.main:
                return
            await self.pilot.press("escape")
            await self.pilot.pause()
        await self.until(lambda: self.app.screen is self.main)

    async def press_back(self, key: str) -> None:
        await self.pilot.press(key)
        await self.to_main()

    def top(self, kind: type, query: str | None = None) -> Callable[[], bool]:
        def on_top() -> bool:
            s = self.app.screen
            return isinstance(s, kind) and (query is None or bool(s.query(query)))
        return on_top

    # ---- the cases
    def cases(self) -> dict[str, Case]:
        from textual.command import CommandPalette
        from textual.widgets import Input

        from console.ui.screens.advice import AdviceScreen
        from console.ui.screens.confirm import ConfirmScreen
        from console.ui.screens.events import EventsScreen
        from console.ui.screens.flag_form import FlagForm
        from console.ui.screens.log_screen import LogScreen
        from console.ui.screens.orphans import OrphanScreen
        from console.ui.screens.sessions import SessionsScreen
        from console.ui.widgets.key_help import toggle_help

        app, main = self.app, self.main
        pane = main.log_pane

        def at(host: str, index: int) -> Callable[[], Awaitable[None]]:
            return lambda: self.focus(host, index)

        def moved_to(host: str, index: int) -> Callable[[], bool]:
            return lambda: (app.selected is not None and (app.selected.host, app.selected.index) == (host, index)
                            and app.selected.has_focus)

        def back(key: str = "escape") -> Callable[[], Awaitable[None]]:
            return lambda: self.press_back(key)

        async def unselected_focus() -> None:  # panel 0 focused, panel 1 selected: enter focuses the selection
            await self.focus("host-a", 0)
            main.select(self.panel("host-a", 1))

        async def help_closed() -> None:
            await self.to_main()
            toggle_help(main, False)

        async def log_scrolled_up() -> None:
            await self.focus("host-a", 0)
            log = pane.log_widget
            log.scroll_to(y=0, animate=False, immediate=True)
            await self.until(lambda: not pane.following)

        def followed() -> bool:
            log = pane.log_widget
            return pane.following and log.scroll_y >= log.max_scroll_y - 1

        async def clear_toasts() -> None:
            app.clear_notifications()

        state: dict[str, object] = {}

        def remember(name: str, get: Callable[[], object]) -> Callable[[], Awaitable[None]]:
            async def prep() -> None:
                await self.focus("host-a", 0)
                state[name] = get()
            return prep

        def toggled(name: str, get: Callable[[], object]) -> Callable[[], bool]:
            return lambda: get() != state.get(name)

        def whole() -> bool:  # a form that composes every field at once has them in its first frame
            s = app.screen
            return isinstance(s, FlagForm) and bool(s.query("#f-extras")) and getattr(s, "whole", True)

        def reported() -> bool:
            return bool(app.screen.query("Toast")) and any("writing the report" in t for t in self.f.toasts(app))

        return {
            "tab": Case("host-a GPU 1 focused", moved_to("host-a", 1), at("host-a", 0)),
            "shift+tab": Case("host-a GPU 0 focused", moved_to("host-a", 0), at("host-a", 1)),
            "right": Case("host-a GPU 1 focused", moved_to("host-a", 1), at("host-a", 0)),
            "left": Case("host-a GPU 0 focused", moved_to("host-a", 0), at("host-a", 1)),
            "down": Case("the GPU below focused", lambda: app.selected is not self.panel("host-a", 0)
                         and app.selected is not None and app.selected.has_focus, at("host-a", 0)),
            "up": Case("the GPU above focused", lambda: app.selected is not self.panel("host-a", 3)
                       and app.selected is not None and app.selected.has_focus, at("host-a", 3)),
            "enter": Case("the selected panel focused", lambda: self.panel("host-a", 1).has_focus, unselected_focus),
            "question_mark": Case("the key help shown", lambda: bool(app.help_shown), help_closed, help_closed),
            "f1": Case("the key help shown", lambda: bool(app.help_shown), help_closed, help_closed),
            "l": Case("the flag form, its fields", self.top(FlagForm, "#f-model_path"), at("host-b", 0), back()),
            "k": Case("the kill dialog, its body", self.top(ConfirmScreen, ".dialog-body"), at("host-a", 0), back("n")),
            "r": Case("the relaunch dialog, its body", self.top(ConfirmScreen, ".dialog-body"), at("host-a", 0),
                      back("n")),
            "e": Case("the edit form, its fields", self.top(FlagForm, "#f-model_path"), at("host-a", 0), back()),
            # the form draws its first fields first, the rest right after: when every field is there
            "l+": Case("the flag form, every field", whole, at("host-b", 0), back()),
            "e+": Case("the edit form, every field", whole, at("host-a", 0), back()),
            "slash": Case("the filter box open, focused", lambda: isinstance(app.focused, Input)
                          and app.focused.has_class("-open"), at("host-a", 0), back()),
            "w": Case("the log wrapped / unwrapped", toggled("w", lambda: pane.wrap), remember("w", lambda: pane.wrap)),
            "end": Case("the log at its end, following", followed, log_scrolled_up),
            "a": Case("the audit pane shown / hidden", toggled("a", lambda: main.audit_pane.has_class("-shown")),
                      remember("a", lambda: main.audit_pane.has_class("-shown"))),
            "c": Case("compact panels / full panels", toggled("c", lambda: main.compact),
                      remember("c", lambda: main.compact)),
            "t": Case("the next theme", toggled("t", lambda: app.theme), remember("t", lambda: app.theme), clear_toasts),
            "s": Case("the sessions table, its rows", lambda: self.top(SessionsScreen)() and bool(app.screen.rows),
                      at("host-a", 0), back()),
            "z": Case("the full log, its lines", lambda: self.top(LogScreen)() and bool(app.screen.lines),
                      at("host-a", 0), back()),
            "o": Case("the orphan hunter", self.top(OrphanScreen, ".detail"), at("host-a", 0), back()),
            "v": Case("the events table, its columns", lambda: self.top(EventsScreen)()
                      and bool(app.screen.table.columns), at("host-a", 0), back()),
            "i": Case("the advice dialog", self.top(AdviceScreen, "#advice-text"), at("host-a", 0), back()),
            "p": Case("the report's toast", reported, at("host-a", 2), clear_toasts),
            "ctrl+p": Case("the command palette", self.top(CommandPalette), at("host-a", 0), back()),
        }

    async def measure(self, key: str, case: Case, n: int) -> tuple[list[float], list[float]]:
        """``n`` presses of ``key``: their latencies and the app's thread CPU time each took (ms)."""
        out: list[float] = []
        cpu: list[float] = []
        for _ in range(n):
            if case.prepare is not None:
                await case.prepare()
            await self.settle()
            self.frames.hit, self.frames.hit_cpu, self.frames.check = None, None, case.changed
            c0, t0 = time.thread_time(), time.perf_counter()
            await self.pilot.press(key)
            end = time.perf_counter() + TIMEOUT_S
            while self.frames.hit is None and time.perf_counter() < end:
                await asyncio.sleep(0.002)
            self.frames.check = None
            if self.frames.hit is not None and self.frames.hit_cpu is not None:
                out.append((self.frames.hit - t0) * 1000)
                cpu.append((self.frames.hit_cpu - c0) * 1000)
            await self.settle()
            if case.undo is not None:
                await case.undo()
                await self.settle()
        return out, cpu


def generic() -> Case:
    """A binding no case names: its first frame (the idle app draws none)."""
    return Case("its first frame (no check of its own)", lambda: True)


Row = tuple[str, str, str, "Summary | None", "Summary | None"]
"""(key, what it does, what is checked, its latencies, the CPU time they took)."""


def watch_frames(app) -> Frames:
    """Time every frame the app writes, and the first one for which the pending check holds."""
    frames = Frames()
    real = app._display

    def display(screen, renderable):
        if renderable is not None:
            now = time.perf_counter()
            frames.times.append(now)
            check = frames.check
            if check is not None and frames.hit is None:
                try:
                    if check():
                        frames.hit, frames.hit_cpu = now, time.thread_time()
                except Exception:  # a half-built screen: not shown yet
                    pass
        return real(screen, renderable)
    app._display = display
    return frames


async def one_size(f, size: tuple[int, int], n: int) -> tuple[list[Row], int]:
    """Every binding at ``size``."""
    from console.ui.main_screen import MainScreen

    backend = f.FakeBackend([f.view_a(), f.view_b()])
    app = f.frozen_app(backend)
    frames = watch_frames(app)
    rows: list[Row] = []
    async with app.run_test(size=size, notifications=True) as pilot:  # toasts drawn, as in a terminal
        await f.started(pilot)
        panels = len(app.panels())
        bench = KeyBench(f, app, pilot, frames)
        # a log long enough to scroll (end) in the session GPU 0 shows, as its tail whenever it is followed again
        more = [f"decode batch line {i}" for i in range(300)]
        backend.logs[("host-a", "s-ready")] = [*backend.logs[("host-a", "s-ready")], *more]
        await bench.until(lambda: app.following == ("host-a", "s-ready") and not app.follow_busy)
        app.on_log("host-a", "s-ready", more)
        await bench.settle()
        cases = bench.cases()
        seen: set[str] = set()
        for b in [*MainScreen.BINDINGS, "ctrl+p"]:
            key, what = (b, "the command palette") if isinstance(b, str) else (b.key, b.description)
            if key == "q" or key in seen:
                continue
            seen.add(key)
            case = cases.get(key) or generic()
            lat, cpu = await bench.measure(key, case, n)
            rows.append((key, what, case.check, summarize(lat), summarize(cpu)))
        for key, what in (("l", "Launch"), ("e", "Edit")):  # the flag form's every field, not only its first frame
            case = cases[f"{key}+"]
            lat, cpu = await bench.measure(key, case, n)
            rows.append((f"{key}{WHOLE}", what, case.check, summarize(lat), summarize(cpu)))
        await bench.to_main()
    return rows, panels


async def quit_latency(f, n: int) -> Summary | None:
    """``q`` on fresh apps: key → the app's ``exit`` (the backend stopped first)."""
    out = []
    for _ in range(n):
        app = f.frozen_app(f.FakeBackend([f.view_a(), f.view_b()]))
        done: dict[str, float] = {}
        real = app.exit

        def exit_(*a, _real=real, **kw):
            done.setdefault("t", time.perf_counter())
            return _real(*a, **kw)
        app.exit = exit_
        async with app.run_test(size=SIZES[0], notifications=True) as pilot:
            await f.started(pilot)
            await pilot.pause(0.2)
            t0 = time.perf_counter()
            await pilot.press("q")
            end = time.perf_counter() + TIMEOUT_S
            while "t" not in done and time.perf_counter() < end:
                await asyncio.sleep(0.002)
        if "t" in done:
            out.append((done["t"] - t0) * 1000)
    return summarize(out)


async def run(ctx, sec) -> None:
    sec.target = f"every binding of the GPU panels' screen: key → the frame showing its effect, p95 < {GOAL_MS:.0f} ms"
    try:
        f = _imports()
    except Exception as e:  # the UI is somebody else's work in progress
        sec.verdict = "not measured"
        sec.notes.append(f"the UI could not be imported: {type(e).__name__}: {e}")
        return
    n = ctx.n(12, 2)
    sizes = SIZES if not ctx.quick else SIZES[:1]
    load0, b0 = os.getloadavg(), machine_busy()
    results: dict[tuple[int, int], list] = {}
    panels = 0
    for size in sizes:
        results[size], panels = await one_size(f, size, n)
    q = await quit_latency(f, ctx.n(4, 1))
    b1 = machine_busy()
    busy = (b1[0] - b0[0]) / (b1[1] - b0[1]) if b1[1] > b0[1] else None
    _report(sec, results, q, n, panels, load0, busy)


def _report(sec, results, q, n, panels, load0, busy) -> None:
    sizes = list(results)
    keys = [r[0] for r in results[sizes[0]]]
    by = {size: {r[0]: r for r in rows} for size, rows in results.items()}
    worst: tuple[float, str] | None = None
    whole: tuple[float, str] | None = None  # the flag form's every field: said beside the verdict, not in it
    missing = []
    for size, rows in results.items():
        for key, _what, _check, s, _cpu in rows:
            if s is None:
                missing.append(f"{key} at {size[0]}×{size[1]}")
            elif key.endswith(WHOLE):
                if whole is None or s.p95 > whole[0]:
                    whole = (s.p95, f"{key[:-len(WHOLE)]} at {size[0]}×{size[1]}")
            elif worst is None or s.p95 > worst[0]:
                worst = (s.p95, f"{key} at {size[0]}×{size[1]}")
    if q is not None and (worst is None or q.p95 > worst[0]):
        worst = (q.p95, "q")
    ok = worst is not None and worst[0] < GOAL_MS and not missing
    sec.verdict = ("met" if ok else "missed") + (f" (slowest p95: {worst[1]} {num(worst[0])} ms)" if worst else "") + \
        (f"; no frame showed {', '.join(missing)}" if missing else "") + \
        (f"; the flag form with every field: slowest p95 {whole[1]} {num(whole[0])} ms" if whole else "")
    bindings = [k for k in keys if not k.endswith(WHOLE)]
    sec.para(f"{len(bindings) + 1} bindings ({len(bindings)} pressed {n} times at each size, and q), the fake backend's two "
             f"hosts ({panels} GPU panels) headless at " + " and ".join(f"{w}×{h}" for w, h in sizes) + ". "
             "Key → the first frame showing the key's effect (the check column), in the app's own process with "
             "Textual's Pilot; the state each key needs is set up, and undone, outside the measured time.")
    header = ["key", "does", "checked in the frame"]
    for w, h in sizes:
        header += [f"{w}×{h}: key → frame", "CPU (median)"]
    rows = []
    for key in keys:
        first = by[sizes[0]][key]
        cells = []
        for size in sizes:
            cpu = by[size][key][4]
            cells += [cell(by[size][key][3]), f"{num(cpu.median)} ms" if cpu else "–"]
        name = f"`{key[:-len(WHOLE)]}`{WHOLE}" if key.endswith(WHOLE) else f"`{key}`"
        rows.append([name, first[1], first[2], *cells])
    rows.append(["`q`", "Quit", "the app's exit (fresh apps, 200×50)", cell(q), "", *["" for _ in sizes[1:] for _c in "ab"]])
    sec.table(header, rows)
    sec.notes += [
        f"Load average at the start {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f}; the whole machine was "
        + (f"{busy * 100:.0f} % busy" if busy is not None else "of unknown load")
        + " during the run (other work shares these cores: a p95 is a tail, read a bad one against it).",
        "CPU is the app's thread's CPU time (`time.thread_time`) from the press to that frame: what the key costs "
        "the console itself, less sensitive to other work on the machine than the latency.",
        "A frame is a call of `App._display` with an update; headless Textual lays out and renders every frame "
        "(`Compositor.render_update`) and only skips writing escape codes to a terminal.",
        "`?`/F1 open the key help in a layer of its own over the screen (nothing under it is laid out or drawn "
        "again; it was Textual's help panel, which took a third of the width: every panel laid out and drawn again). "
        "`t` restyles once (the theme's classes change without a restyle of their own), the badge colours are one set "
        "of component classes per host, not per GPU panel, and the footer is one widget, not one per key (18 on this screen; "
        "`console/ui/widgets/footer.py`): it was a fifth of `t` and most of the cost of opening a dialog or a table.",
        "`l` and `e` open the flag form (`console/ui/screens/flag_form.py`): its first frame has its first "
        "fields (some 27 widgets; the focus in the first field from the start, so its field list is not focused and "
        "restyled first), the other ~60 widgets are mounted right after that frame (the rows marked *every field* "
        "time the frame that has them), and the push's restyle of every widget again is skipped at its first show. "
        "`t` parses no CSS: every source is kept parsed per theme, the other themes parsed in turns of ~4 ms after "
        "the start (`console.ui.themes.ThemeStylesheet.warm`); what is left of it is the restyle and redraw of every "
        "widget.",
    ]
