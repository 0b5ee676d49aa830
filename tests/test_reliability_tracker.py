"""A long-running console keeps bounded state: the tracker forgets sessions the host no longer reports
(found by the soak: RSS grew with every launch because rings, classifiers and classes were never dropped)."""

from __future__ import annotations

import time
from collections import deque

from console.model import ConnectionInfo, HostSnapshot, SessionInfo
from console.ops.classify import LogClassifier
from console.ops.tracker import HostTracker


class FakeLink:
    name = "h"

    def __init__(self):
        self.listeners = []
        self.sessions: list[str] = []

    def snapshot(self) -> HostSnapshot:
        return HostSnapshot(name="h", connection=ConnectionInfo(state="connected", since=time.time()),
                            sessions=[SessionInfo(session_id=s, run_dir=f"/r/{s}") for s in self.sessions])


async def test_tracker_forgets_sessions_the_host_dropped():
    link = FakeLink()
    tr = HostTracker(link, interval=1.0, on_view=lambda v: None, on_log=lambda *a: None)
    for i in range(200):  # sessions come and go, as over days of relaunches
        sid = f"s{i}"
        tr.classifiers[sid] = LogClassifier()
        tr.classes[sid] = tr.classifiers[sid].result(None)
        tr.rings[sid] = deque(["x" * 100] * 1000, maxlen=5000)
        tr.health[sid], tr.health_at[sid] = True, 0.0
    tr.ui_follows.add("s3")
    tr.launching["s150"] = 1
    link.sessions = [f"s{i}" for i in range(190, 200)]  # the host reports only the latest
    for t in list(tr._tasks):
        t.cancel()
    tr._spawn = lambda key, coro: coro.close()  # no remote work in this unit test
    tr.emit()
    kept = set(tr.rings)
    assert kept == {f"s{i}" for i in range(190, 200)} | {"s3", "s150"}
    assert set(tr.classifiers) <= kept and set(tr.classes) <= kept and set(tr.health) <= kept
