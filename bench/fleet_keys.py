"""The fleet overview's keypress → frame at N hosts × 8 GPUs (issue 31: under 100 ms at 512 hosts).

    python -m bench.fleet_keys [HOSTS] [REPEAT]

The real app (``make_app``) on ``tests/ui_fakes.py``'s ``FakeBackend`` with HOSTS hosts of 8 idle GPUs each and
``view_a``'s FAILED session first (past ``FLEET_START_GPUS`` the app starts on the overview), headless at 200×50
(``App.run_test``). A sample is a key's press to the first frame (``App._display`` with an update, as in
``bench/b_keys.py``) that shows its effect: ``down`` the highlighted row moved; the filter's ``enter`` (``/`` and a
host's name typed before, outside the time) the rows filtered; ``escape`` every row back; ``enter`` on a row that
host's GPU panels on top; ``f`` from there the overview again with all its rows. Prints one line per key and a JSON
line (``{"hosts", "keys": {key: [ms, ...]}, "gc_ms": {key: [ms, ...]}}``) last; ``gc_ms`` is the garbage collector's pauses inside
each sample (``gc.callbacks``), the part of a slow sample the collector took (``console/ui/idle_gc.py``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from bench.gc_pauses import GcPauses

REPO = Path(__file__).resolve().parents[1]


async def main(hosts: int, repeat: int) -> dict:
    sys.path.insert(0, str(REPO / "tests"))
    import ui_fakes as f  # noqa: E402
    from textual.widgets import DataTable

    from console.ui.main_screen import MainScreen
    from console.ui.screens.fleet import FleetScreen

    be = f.FakeBackend([f.view_a()] + [f.view_idle(f"gpu-{i:03d}", 8) for i in range(hosts - 1)])
    app = f.frozen_app(be)
    state: dict = {"check": None, "hit": None}
    real = app._display

    def display(screen, renderable):
        if renderable is not None and state["check"] is not None and state["hit"] is None:
            try:
                if state["check"]():
                    state["hit"] = time.perf_counter()
            except Exception:
                pass
        return real(screen, renderable)
    app._display = display

    def table():
        return app.screen.query_one(DataTable)

    def fleet_rows() -> int:
        return table().row_count if isinstance(app.screen, FleetScreen) else -1

    out: dict[str, list[float]] = {}
    gc_ms: dict[str, list[float]] = {}
    gc_watch = GcPauses()  # the collector's pauses inside a sample (between a key's press and its frame)
    gc_watch.__enter__()

    async def timed(name: str, key: str, cond) -> None:
        state["check"], state["hit"] = cond, None
        t = time.perf_counter()
        gc_watch.pauses.clear()
        gc_watch.on = True
        await pilot.press(key)
        end = t + 5
        while state["hit"] is None and time.perf_counter() < end:
            await asyncio.sleep(0.001)
        state["check"], gc_watch.on = None, False
        out.setdefault(name, []).append((state["hit"] - t) * 1000 if state["hit"] else float("inf"))
        gc_ms.setdefault(name, []).append(sum(gc_watch.pauses))

    async with app.run_test(size=(200, 50)) as pilot:
        t0 = time.perf_counter()
        while fleet_rows() != hosts:
            await asyncio.sleep(0.02)
            if time.perf_counter() - t0 > 60:
                raise RuntimeError("the overview did not show every host")
        out["first overview (s)"] = [time.perf_counter() - t0]
        for _ in range(repeat):
            row = table().cursor_row
            await timed("down", "down", lambda r=row: table().cursor_row == r + 1)
        for _ in range(repeat):
            await pilot.press("slash")
            for ch in "gpu-017":
                await pilot.press(ch)
            await timed("filter enter", "enter", lambda: fleet_rows() == 1)
            await timed("escape (filter cleared)", "escape", lambda: fleet_rows() == hosts)
        for _ in range(repeat):
            await timed("enter (host's panels)", "enter", lambda: isinstance(app.screen, MainScreen))
            await timed("f (overview again)", "f", lambda: fleet_rows() == hosts)
    gc_watch.__exit__()
    return {"hosts": hosts, "keys": out, "gc_ms": gc_ms}


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    rep = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    res = asyncio.run(main(n, rep))
    for k, v in res["keys"].items():
        s = sorted(v)
        print(f"{k:28s} median {s[len(s) // 2]:9.1f}  p95 {s[min(len(s) - 1, int(len(s) * 0.95))]:9.1f}  "
              f"max {s[-1]:9.1f}  n={len(s)}" + ("" if "(s)" in k else " ms"))
    for k, v in res["gc_ms"].items():
        print(f"{k:28s} garbage collection inside the sample: max {max(v):7.1f} ms, total {sum(v):7.1f} ms")
    print(json.dumps(res))
