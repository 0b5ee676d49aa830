"""Advice and the incident report in the TUI (issue 17): the tracker fills HostView.advice, the GPU
panel shows the first advice in one line, ``i`` opens the detail, ``e`` there opens the flag form
with the suggested flags, ``p`` writes the report through the backend."""

from __future__ import annotations

import asyncio
import os

from console.model import HostView
from tests.helpers.wait import await_until


async def test_tracker_fills_advice_for_the_demos_underused_foreign_server(monkeypatch):
    """The demo's hand-started server (busy, no speculative decoding, ~half its power) gets the
    gpu_underused advice in the live view, as ``status --demo --json`` shows it."""
    from console.ops.tracker import HostTracker
    from console.remote.link import HostLink
    from console.remote.ssh import HostSpec
    from console.sim.demo import demo_environment

    monkeypatch.setenv("MTPCONSOLE_AUDIT_LOG", os.devnull)
    views: list[HostView] = []
    async with demo_environment(load=True) as (cfg, names):
        link = HostLink(HostSpec(name=names[0], local=True), cfg.hosts[names[0]], interval=0.5)
        tracker = HostTracker(link, interval=0.5, on_view=views.append, on_log=lambda *a: None)
        run = asyncio.ensure_future(link.run())  # connects, then streams samples (as LiveBackend runs it)
        try:
            def underused():
                # once the model's config.json is read (in the background), the suggestion is checked
                return next((a for v in views[-3:] for a in v.advice
                             if a.kind == "gpu_underused" and a.suggestion is not None), None)
            a = await await_until(underused, 60)
        finally:
            await link.close()
            run.cancel()
    assert a.pid is not None and a.session_id is None and a.gpu is not None
    assert a.evidence and a.suggestion is not None and "--speculative-algorithm" in a.suggestion.flags
    assert a.suggestion.valid is True and a.suggestion.planner
    assert tracker.figure_history, "the tracker keeps each server's figures for the advisor's trends"
