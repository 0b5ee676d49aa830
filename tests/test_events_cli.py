"""`mtpconsole events` on the `local` host with simulated GPUs and the SGLang stand-in: a launch, its READY,
an operator's kill and an acknowledgement come back as events with times and sources (run directory, log,
exit record, audit log); the parsers for the kernel log, SGLang time stamps and --since on their own."""

from __future__ import annotations

import json
import sys

from console.core.events import (
    audit_events,
    kernel_oom_events,
    log_time,
    merge,
    parse_since,
    session_events,
)
from console.model import (
    AuditEntry,
    ExitRecord,
    LaunchSpec,
    SessionInfo,
    SupervisorRecord,
)
from console.ops import lifecycle
from console.sim.demo import FIXED_FLAGS
from tests.conftest import free_port
from tests.helpers.rel_util import cli
from tests.test_orphans_cli import config, link, sim  # noqa: F401  (fixtures)

DMESG = """2026-11-30T18:01:02,123456+00:00 python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE)
2026-11-30T18:01:02,200000+00:00 Out of memory: Killed process 4242 (sglang::schedul) total-vm:123kB, anon-rss:99kB
[  12.345] Out of memory: Killed process 17 (no iso time)
"""


def test_kernel_log_and_exit_record_oom():
    (e,) = kernel_oom_events("h", DMESG)
    assert e.kind == "oom_kill" and e.pid == 4242 and "sglang::schedul" in e.text and e.source == "kernel_log"
    assert abs(e.at - 1796061662.2) < 1
    s = SessionInfo(session_id="s1", run_dir="/r/s1",
                    spec=LaunchSpec(session_id="s1", argv=["x"], gpus=[0], port=30000, created_at=100.0,
                                    launched_by="op@box", profile="qwen"),
                    record=SupervisorRecord(supervisor_pid=1, pid=2, pgid=2, start_ticks=3, started_at=101.0),
                    exit=ExitRecord(ended_at=200.0, signal=9, oom_kill_before=4, oom_kill_after=5),
                    acknowledged_at=300.0)
    kinds = [(e.kind, e.source) for e in session_events("h", s)]
    assert kinds == [("launched", "run_dir"), ("exited", "exit_record"), ("oom_kill", "exit_record"),
                     ("acknowledged", "run_dir")]
    texts = [e.text for e in session_events("h", s)]
    assert "by op@box (profile qwen)" in texts[0] and "killed by signal 9" in texts[1] and "1 time(s)" in texts[2]


def test_parsers():
    assert log_time("[2026-10-30 12:02:00] The server is fired up") is not None
    assert log_time("no stamp") is None
    assert parse_since("1h", 10_000.0) == 6400.0 and parse_since("90s", 100.0) == 10.0
    try:
        parse_since("yesterday", 0)
        raise AssertionError("no error")
    except ValueError as e:
        assert "90s, 15m, 1h" in str(e)
    a = AuditEntry(at=5.0, host="h", op="kill", args={"pid": 7, "signal": 15}, ok=True)
    b = AuditEntry(at=6.0, host="other", op="kill", args={"pid": 8}, ok=True)
    (ev,) = audit_events("h", [a, b, AuditEntry(at=7.0, host="h", op="read_log")])
    assert ev.text == "kill signal sent (signal 15) pid 7" and ev.source == "audit"
    assert merge([ev], [ev], since=1.0) == [ev] and merge([ev], since=6.0) == []


async def test_events_cli_lists_launch_ready_stop_and_ack(link, sim, tmp_path, runs_dir):  # noqa: F811
    d, model = sim
    r = await lifecycle.launch(link, lifecycle.LaunchRequest(
        host="local", command=[sys.executable, "-m", "console.sim.sglang"],
        flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port()), timeout=60)
    assert r.ok, r
    cfg = config(tmp_path, runs_dir, d)
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    k = cli("kill", "--host", "local", "--config", str(cfg), r.session_id, "--grace", "5", env=env)
    assert k.returncode == 0, k.stdout + k.stderr
    a = cli("ack", "--host", "local", "--config", str(cfg), r.session_id, env=env)
    assert a.returncode == 0, a.stderr
    out = cli("events", "--host", "local", "--config", str(cfg), "--since", "1h", "--json", env=env)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    mine = [(e["kind"], e["source"]) for e in data["events"] if e["session_id"] == r.session_id]
    for want in [("launched", "run_dir"), ("ready", "log"), ("exited", "exit_record"), ("acknowledged", "run_dir"),
                 ("action", "audit")]:
        assert want in mine, (want, mine)
    ex = next(e for e in data["events"] if e["kind"] == "exited" and e["session_id"] == r.session_id)
    assert "stopped by an operator" in ex["text"]
    times = [e["at"] for e in data["events"]]
    assert times == sorted(times)
    text = cli("events", "--host", "local", "--config", str(cfg), "--since", "1h", env=env)
    assert "acknowledged" in text.stdout and "[exit_record]" in text.stdout
    bad = cli("events", "--host", "local", "--config", str(cfg), "--since", "yesterday", env=env)
    assert bad.returncode == 2 and "--since" in bad.stderr and "Traceback" not in bad.stderr


async def test_health_flap_is_an_event():
    from console.ops.tracker import HostTracker

    class Link:  # one-layer unit test: only what probe uses
        name = "h"
        listeners: list = []
        answers = [200, 503, 200]

        def listen(self, listener) -> None:
            pass

        async def request(self, op, args, **kw):
            return {"status": self.answers.pop(0)}

        def snapshot(self):  # a changed answer shows at once: the tracker derives its view again
            from console.model import ConnectionInfo, HostSnapshot
            return HostSnapshot(name="h", connection=ConnectionInfo(state="connecting"))  # no reads scheduled

    tr = HostTracker(Link(), interval=1.0, on_view=lambda v: None, on_log=lambda *a: None,  # type: ignore[arg-type]
                     clock=lambda: 100.0)
    for _ in range(3):
        await tr.probe("s1", 30000)
    flaps = [e for e in tr.current.events if e.kind == "health_flap"]
    assert [e.text for e in flaps] == ["session s1: GET /health now answers 503",
                                       "session s1: GET /health answers 200 again"]
