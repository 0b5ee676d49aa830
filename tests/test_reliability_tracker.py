"""A long-running console keeps bounded state: the tracker forgets sessions the host no longer reports
(found by the soak: RSS grew with every launch because rings, classifiers and classes were never dropped)."""

from __future__ import annotations

import time

from console.link.errors import LinkDown
from console.model import ConnectionInfo, HostSnapshot, LogChunk, SessionInfo
from console.ops.session_log import read_whole
from console.ops.tracker import HostTracker
from tests.helpers.wait import await_until


class FakeLink:
    name = "h"

    def __init__(self):
        self.listeners = []
        self.sessions: list[str] = []
        self.asked: list[str] = []

    def listen(self, listener) -> None:  # nothing is streamed in these unit tests
        pass

    async def request(self, op: str, args=None, **kw) -> dict:
        """No host behind it: the reads a view calls for end at once, as over a link that dropped."""
        self.asked.append(op)
        raise LinkDown("no host in this unit test")

    def snapshot(self) -> HostSnapshot:
        return HostSnapshot(name="h", connection=ConnectionInfo(state="connected", since=time.time()),
                            sessions=[SessionInfo(session_id=s, run_dir=f"/r/{s}") for s in self.sessions])


async def test_tracker_forgets_sessions_the_host_dropped():
    link = FakeLink()
    tr = HostTracker(link, interval=1.0, on_view=lambda v: None, on_log=lambda *a: None)
    for i in range(200):  # sessions come and go, as over days of relaunches
        sid = f"s{i}"
        tr.logs[sid] = read_whole(sid, LogChunk(session_id=sid, data=("x" * 100 + "\n") * 1000))
        tr.classes[sid] = tr.logs[sid].result(None)
        tr.health[sid], tr.health_at[sid] = True, 0.0
    tr.ui_follows.add("s3")
    tr.launching["s150"] = 1
    link.sessions = [f"s{i}" for i in range(190, 200)]  # the host reports only the latest
    tr.update()  # the view, then the bookkeeping of what is followed (forgetting what the host dropped)
    kept = set(tr.logs)
    assert kept == {f"s{i}" for i in range(190, 200)} | {"s3", "s150"}
    assert set(tr.classes) <= kept and set(tr.health) <= kept
    assert await await_until(lambda: not tr.reading, 5)  # the reads it started ended (the fake link is down)


async def test_tracker_shows_a_launch_from_the_moment_it_is_sent_and_its_result_at_once():
    """Issue 13 through the tracker: launch_sent emits LAUNCHING 0/6 on its GPU before the host reports
    anything; a refusal leaves the GPU as it was; a READY result is shown before the sample agrees."""
    from console.model import (
        Classification,
        GpuSample,
        LaunchSpec,
        OperationResult,
        PendingLaunch,
        SupervisorRecord,
    )

    class GpuLink(FakeLink):
        def __init__(self):
            super().__init__()
            self.infos: list[SessionInfo] = []

        def snapshot(self) -> HostSnapshot:
            now = time.time()
            return HostSnapshot(name="h", connection=ConnectionInfo(state="connected", since=now), received_at=now,
                                gpus=[GpuSample(index=0)], sessions=list(self.infos))

    link = GpuLink()
    views = []
    tr = HostTracker(link, interval=1.0, on_view=views.append, on_log=lambda *a: None)
    tr.launch_sent(PendingLaunch(host="h", session_id="s1", gpus=[0], argv=["python3"], sent_at=time.time()))
    c = views[-1].current_of(0)
    assert c.session.session_id == "s1" and c.session.state == "launching" and c.session.step == 0
    tr.launch_done("s1", OperationResult(op="launch", host="h", ok=False, error="memory plan: does not fit"))
    assert views[-1].current_of(0).session is None and views[-1].events[-1].kind == "launch_refused"

    tr.launch_sent(PendingLaunch(host="h", session_id="s2", gpus=[0], argv=["python3"], sent_at=time.time()))
    spec = LaunchSpec(session_id="s2", argv=["python3"], gpus=[0], port=31000)
    rec = SupervisorRecord(supervisor_pid=10, pid=11, pgid=11, start_ticks=5, started_at=time.time())
    link.infos = [SessionInfo(session_id="s2", run_dir="/r/s2", spec=spec, record=rec, server_alive=True,
                              supervisor_alive=True)]
    tr.classes["s2"] = Classification(state="loading")  # the tracker's own log follow lags behind
    tr.launch_done("s2", OperationResult(op="launch", host="h", ok=True, session_id="s2", state="ready"))
    s = views[-1].current_of(0).session
    assert (s.session_id, s.state) == ("s2", "ready") and tr.health["s2"] is True
    assert await await_until(lambda: not tr.reading, 5)  # the reads it started ended (the fake link is down)
