"""Issue 18, item 9 (second half): an optional ``output.log`` size cap (``log_cap_mb``) that never loses the
decisive line. Real agent (local transport), real supervisor, a real server stand-in
(``tests/helpers/log_flood.py``: start-up lines, ~30 MB of numbered lines, a CUDA OOM traceback that ends a
segment exactly, exit 1), the real CLI as a subprocess; pump and follower edge cases on real files."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

from console.config import HostConfig
from console.core.classify import classify, failure_tail
from console.host.launch import SUPERVISOR_BOOT, materialize
from console.host.logcap import HEAD_BYTES, READ_SIZE, LogPump, cap_bytes
from console.host.logfollow import LogFollower, read_log
from console.link.link import HostLink
from console.link.protocol import shipped_sources
from console.link.ssh import HostSpec
from console.model import ExitRecord, LaunchSpec, LogRotated, LogTruncated
from console.ops.tracker import TAIL_BYTES
from tests.helpers.heard import Heard
from tests.helpers.log_flood import HEAD, TRACEBACK, TRAILER, stream
from tests.helpers.rel_util import cleanup_runs, cli, write_config
from tests.helpers.wait import await_until, wait_until

FLOOD = str(Path(__file__).resolve().parent / "helpers" / "log_flood.py")
CAP = 1 << 20  # log_cap_mb = 1
FOLLOWED, BURST, FLOODED = 6 << 20, 3 << 18, 24 << 20  # a burst crosses at most one rotation
DECISIVE = TRACEBACK[-1].decode().rstrip("\n")
RUN_FILES = {"spec.json", "record.json", "exit.json", "exits.jsonl", "supervisor.log", "output.log", "output.log.1",
             "output.log.head"}


def lines_of(data: bytes) -> list[str]:
    return data.decode().split("\n")[:-1]


def cpu_busy() -> bool:
    return os.getloadavg()[0] > (os.cpu_count() or 1)


# ------------------------------------------------------------------ the whole path, one real capped launch

def test_capped_launch_rotates_and_never_loses_the_decisive_line(tmp_path):
    runs, hs = tmp_path / "runs", tmp_path / "handshake"
    runs.mkdir()
    hs.mkdir()
    sid = "20261201-000000-gpu0-" + uuid.uuid4().hex[:4]
    steps = list(stream(CAP, FOLLOWED, BURST, FLOODED))
    expected = b"".join(arg for kind, arg in steps if kind != "wait")
    followed_part = b"".join(arg for kind, arg in steps[:steps.index(("wait", "flood"))] if kind != "wait")
    burst_ends = [lines_of(arg)[-1] for kind, arg in steps if kind == "write"][1:-2]  # the followed bursts
    hc = HostConfig(python=sys.executable, runs_dir=str(runs), gpu_source="none", log_cap_mb=1)

    async def go():
        lk = HostLink(HostSpec(name="local", local=True), hc, interval=5.0)
        await lk.open()
        heard = Heard(lk, sid)
        got = heard.chunks
        try:
            spec = LaunchSpec(session_id=sid, argv=[sys.executable, FLOOD, str(CAP), str(FOLLOWED), str(BURST),
                                                    str(FLOODED), str(hs)])
            info = (await lk.client.launch(spec, timeout=60)).session
            assert info and info.record and info.spec and info.spec.log_cap_mb == 1, info  # the host's cap, in the spec
            await lk.client.follow_log(sid, 0)  # before any rotation: the server waits for "go"
            (hs / "go").touch()
            for k, last in enumerate(burst_ends):  # one burst (3/4 segment) at a time, each seen before the next
                seen = await await_until(lambda: any(last in m.data for m in got[-8:]), 30)
                assert seen, f"burst {k} never arrived"
                (hs / f"ack-{k}").touch()
            await lk.client.unfollow_log(sid)
            (hs / "flood").touch()
            assert await await_until(lambda: (runs / sid / "exit.json").exists(), 60)
        finally:
            await lk.close()
        return got, [e for e in heard.events if isinstance(e, (LogRotated, LogTruncated))]
    try:
        got, events = asyncio.run(go())
    finally:
        cleanup_runs(runs)

    # the follower started before the first rotation saw every line once, in order, across ~6 rotations
    text = "".join(m.data for m in got)
    assert text.encode() == followed_part, (len(text), len(followed_part))
    rotated = [e for e in events if isinstance(e, LogRotated)]
    assert len(rotated) >= 4 and not any(e.dropped for e in rotated), events
    assert not [e for e in events if isinstance(e, LogTruncated)], events

    d = runs / sid
    assert json.loads((d / "exit.json").read_text())["exit_code"] == 1
    assert {p.name for p in d.iterdir()} <= RUN_FILES  # never an output.log.2
    prev, cur = (d / "output.log.1").read_bytes(), (d / "output.log").read_bytes()
    assert len(prev) <= CAP and len(cur) <= CAP
    assert expected.endswith(prev + cur)  # the two kept segments are exactly the stream's end
    head = (d / "output.log.head").read_bytes()
    assert expected.startswith(head) and head.startswith(b"".join(HEAD)) and head.endswith(b"\n")
    assert HEAD_BYTES - 200 < len(head) <= HEAD_BYTES
    # the decisive line ends output.log.1; output.log alone holds only what came after it
    assert lines_of(prev)[-1] == DECISIVE and DECISIVE.encode() not in cur and cur == b"".join(TRAILER)

    # the server was never held up: the flood went through the pipe at >= 50 MB/s
    stats = json.loads((hs / "stats.json").read_text())
    rate = stats["flood_bytes"] / max(stats["in_writes_s"], 1e-6)
    assert rate >= 50e6 or (cpu_busy() and rate >= 15e6), stats
    assert stats["worst_write_s"] < 2.0, stats

    # what the console reads: the tracker's tail (classification of an ended session) and a failed launch's
    r = read_log(str(runs), sid, tail_bytes=TAIL_BYTES)
    assert r["previous_bytes"] > 0 and r["end"] == len(cur) and r["data"].endswith(DECISIVE + "\n" + TRAILER[0].decode())
    ex = ExitRecord.model_validate(json.loads((d / "exit.json").read_text()))
    c = classify(r["data"], ex)
    assert c.state == "failed" and c.cause == "gpu_oom" and "CUDA out of memory" in (c.line or ""), c
    assert DECISIVE in failure_tail(read_log(str(runs), sid, tail_bytes=256 * 1024)["data"].splitlines(), 30)
    all_lines = lines_of(expected)
    for n in (1, 2, 7, 5000, 100_000):  # exactly the last N lines, across the boundary (as far as it goes)
        t = read_log(str(runs), sid, tail_lines=n)
        assert not t["capped"] and lines_of(t["data"].encode()) == all_lines[-n:][-len(lines_of(prev + cur)):]

    # the same through the CLI: `sessions` classifies the session from its own log, `logs -n` is exact
    conf = write_config(tmp_path / "config.toml", {"local": {"transport": "local", "python": sys.executable,
                                                             "runs_dir": str(runs), "gpu_source": "none",
                                                             "log_cap_mb": 1}})
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    s = cli("--config", str(conf), "sessions", "--host", "local", "--json", env=env)
    assert s.returncode == 0, s.stderr
    (v,) = [x for x in json.loads(s.stdout) if x["session_id"] == sid]
    assert v["state"] == "failed" and v["cause"] == "gpu_oom" and "CUDA out of memory" in v["line"], v
    lg = cli("--config", str(conf), "logs", sid, "--host", "local", "-n", "3", "--json", env=env)
    assert lg.returncode == 0, lg.stderr
    assert json.loads(lg.stdout)["lines"] == all_lines[-3:]


# ------------------------------------------------------------------ the supervisor, cap off and on

@pytest.fixture(scope="module")
def lib():
    root = tempfile.mkdtemp(prefix="mtp-cap-lib-")
    yield materialize(shipped_sources(), root)
    shutil.rmtree(root, ignore_errors=True)


def supervise(lib: str, run_dir: Path, argv: list[str], **spec) -> dict:
    run_dir.mkdir()
    (run_dir / "spec.json").write_text(json.dumps({"session_id": run_dir.name, "argv": argv, "gpus": [], **spec}))
    p = subprocess.run([sys.executable, "-c", SUPERVISOR_BOOT, lib, str(run_dir)], input=b'{"env": {}}\n',
                       capture_output=True, timeout=30)
    assert p.returncode in (0, 1, 2), p.stderr
    assert wait_until(lambda: (run_dir / "exit.json").exists(), 20), (run_dir / "supervisor.log").read_text()
    return json.loads((run_dir / "exit.json").read_text())


WHERE = "import os,sys; print(os.readlink('/proc/self/fd/1')); print(os.readlink('/proc/self/fd/2'), file=sys.stderr)"


def test_cap_off_the_server_writes_output_log_itself(lib, tmp_path):
    """Default (no log_cap_mb): exactly as before, the server's fds 1 and 2 are output.log; nothing rotates."""
    d = tmp_path / "s-off"
    assert supervise(lib, d, [sys.executable, "-c", WHERE])["exit_code"] == 0
    out = (d / "output.log").read_text().split()
    assert out == [str(d / "output.log")] * 2, out
    assert not (d / "output.log.1").exists() and not (d / "output.log.head").exists()
    assert "capped" not in (d / "supervisor.log").read_text()


def test_cap_on_the_server_writes_a_pipe_and_exec_errors_still_land_in_the_log(lib, tmp_path):
    d = tmp_path / "s-on"
    assert supervise(lib, d, [sys.executable, "-c", WHERE], log_cap_mb=0.5)["exit_code"] == 0
    out = (d / "output.log").read_text().split()
    assert len(out) == 2 and all(x.startswith("pipe:[") for x in out), out
    bad = tmp_path / "s-noexec"
    ex = supervise(lib, bad, ["/nonexistent/server"], log_cap_mb=1)
    assert ex["exit_code"] == 127 and "cannot execute" in ex["error"]
    assert "cannot execute" in (bad / "output.log").read_text()  # drained before exit.json was written


def test_a_bad_cap_is_refused_before_anything_runs(lib, tmp_path):
    ex = supervise(lib, tmp_path / "s-bad", ["true"], log_cap_mb="lots")
    assert "log_cap_mb" in ex["error"] and not (tmp_path / "s-bad" / "record.json").exists()
    with pytest.raises(ValueError):
        HostConfig(log_cap_mb=0)
    assert cap_bytes(None) is None and cap_bytes(0) is None and cap_bytes(1) == 1 << 20
    assert cap_bytes(0.001) == HEAD_BYTES  # raised to the least that keeps the head


def test_the_last_lines_are_on_disk_before_exit_json(lib, tmp_path):
    """The server writes 4 MB (four times the pipe's buffer) and its decisive line, and exits at once: the
    supervisor drains the pipe to its end before it writes exit.json."""
    d = tmp_path / "s-last"
    prog = ("import sys\n"
            "sys.stdout.write(''.join('%07d %s\\n' % (i, 'q' * 60) for i in range(60000)))\n"
            "sys.stdout.write('decisive last line\\n'); sys.exit(3)\n")
    ex = supervise(lib, d, [sys.executable, "-c", prog], log_cap_mb=1)
    assert ex["exit_code"] == 3
    assert (d / "output.log").read_text().endswith("0059999 " + "q" * 60 + "\ndecisive last line\n")


def test_a_dead_supervisor_leaves_the_server_epipe_not_a_hang(lib, tmp_path):
    """What RELIABILITY.md says: with a cap, a supervisor killed while the server lives leaves the server's
    output pipe without a reader; its next write fails with EPIPE (Python ignores SIGPIPE), never blocks."""
    d = tmp_path / "s-orphan"
    d.mkdir()
    mark = tmp_path / "epipe"
    prog = ("import sys,time\n"
            "for i in range(3000):\n"
            "    try:\n"
            "        print('tick %d' % i, flush=True)\n"
            "    except BrokenPipeError:\n"
            "        open(sys.argv[1], 'w').write('EPIPE'); sys.exit(0)\n"
            "    time.sleep(0.01)\n")
    (d / "spec.json").write_text(json.dumps({"session_id": d.name, "argv": [sys.executable, "-c", prog, str(mark)],
                                             "gpus": [], "log_cap_mb": 1}))
    p = subprocess.run([sys.executable, "-c", SUPERVISOR_BOOT, lib, str(d)], input=b'{"env": {}}\n',
                       capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    rec = json.loads((d / "record.json").read_text())
    try:
        assert wait_until(lambda: "tick 1\n" in (d / "output.log").read_text(), 10)
        os.kill(rec["supervisor_pid"], 9)
        assert wait_until(mark.exists, 10) and mark.read_text() == "EPIPE"
    finally:
        for pid in (rec["pid"], rec["supervisor_pid"]):
            try:
                os.kill(pid, 9)
            except OSError:
                pass


# ------------------------------------------------------------------ the pump's edge cases, in process

def pump_in(tmp_path: Path, cap: int, out_path: str | None = None):
    d = tmp_path / "run"
    d.mkdir()
    out = os.open(out_path or str(d / "output.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    r, w = os.pipe()
    logged: list[str] = []
    pump = LogPump(str(d), r, out, cap, logged.append)
    return d, pump, w, logged


def feed(w: int, data: bytes, chunk: int = 70_001) -> None:
    for i in range(0, len(data), chunk):
        os.write(w, data[i:i + chunk])


def test_segments_stay_within_the_cap_and_only_a_giant_line_is_split(tmp_path):
    cap = 64 << 10
    d, pump, w, _ = pump_in(tmp_path, cap)
    pump.start()
    short = b"".join(b"%06d %s\n" % (i, b"s" * (i % 300)) for i in range(3000))
    giant = b"G" * (cap + 2 * READ_SIZE) + b"\n"  # longer than the cap plus one read: the only split
    data = short + giant + short
    feed(w, data)
    os.close(w)
    assert pump.finish(10)
    prev, cur = (d / "output.log.1").read_bytes(), (d / "output.log").read_bytes()
    assert len(prev) <= cap + READ_SIZE and len(cur) <= cap
    assert data.endswith(prev + cur) and cur.endswith(b"\n") and prev.endswith(b"\n")
    assert (d / "output.log.head").read_bytes() == data[:data.rfind(b"\n", 0, HEAD_BYTES) + 1]


def test_a_full_disk_never_blocks_the_server(tmp_path):
    """Every write fails (/dev/full): the pump still drains the pipe to its end and says so once."""
    d, pump, w, logged = pump_in(tmp_path, 1 << 20, "/dev/full")
    pump.start()
    data = b"line that goes nowhere\n" * 200_000  # 4.6 MB: four times the pipe's buffer
    t = threading.Thread(target=feed, args=(w, data))
    t.start()
    t.join(20)
    assert not t.is_alive(), "the server was blocked"
    os.close(w)
    assert pump.finish(10) and pump.total == len(data) and pump.dropped == len(data)
    assert sum("No space left" in x for x in logged) == 1, logged


# ------------------------------------------------------------------ the follower across rotations, in process

def rotate(d: Path, new: bytes) -> None:
    """As the supervisor does: the next segment exists before the oldest is dropped (no inode reused)."""
    (d / ".next").write_bytes(new)
    os.replace(d / "output.log", d / "output.log.1")
    os.replace(d / ".next", d / "output.log")


def follow_run(tmp_path: Path):
    runs = tmp_path / "runs"
    d = runs / "20261201-000001-gpu0-f00d"
    d.mkdir(parents=True)
    sent: list[dict] = []
    return runs, d, LogFollower(str(runs), sent.append), sent


def texts(sent: list[dict]) -> str:
    return "".join(m["data"] for m in sent if m["type"] == "log")


def test_follower_finishes_the_old_segment_then_reads_the_new_one_from_zero(tmp_path):
    runs, d, f, sent = follow_run(tmp_path)
    (d / "output.log").write_bytes(b"a1\na2\n")
    f.follow(d.name, 0)
    f.poll()
    with open(d / "output.log", "ab") as fh:
        fh.write(b"a3\na4\n")
    rotate(d, b"b1\nb2\n")
    f.poll()
    assert texts(sent) == "a1\na2\na3\na4\nb1\nb2\n"
    (ev,) = [m for m in sent if m["type"] == "event"]
    assert ev["kind"] == "log_rotated" and ev["dropped"] is False
    assert ev["file"] == os.stat(d / "output.log").st_ino == sent[-1]["file"]


def test_follower_given_an_offset_in_the_previous_file_resumes_there(tmp_path):
    """A console that read the tail (offset, file) just before a rotation follows on from exactly there."""
    runs, d, f, sent = follow_run(tmp_path)
    (d / "output.log").write_bytes(b"a1\na2\na3\n")
    r = read_log(str(runs), d.name, tail_lines=1)
    rotate(d, b"b1\n")
    f.follow(d.name, r["end"], r["file"])
    f.poll()
    assert texts(sent) == "b1\n" and [m["kind"] for m in sent if m["type"] == "event"] == ["log_rotated"]


def test_follower_two_rotations_behind_says_what_it_lost(tmp_path):
    runs, d, f, sent = follow_run(tmp_path)
    (d / "output.log").write_bytes(b"a1\n")
    f.follow(d.name, 0)
    f.poll()
    rotate(d, b"b1\n")
    rotate(d, b"c1\n")
    f.poll()
    assert texts(sent) == "a1\nc1\n"
    (ev,) = [m for m in sent if m["type"] == "event"]
    assert ev["kind"] == "log_rotated" and ev["dropped"] is True


def test_tails_reach_across_the_boundary_and_big_tails_reach_the_end(tmp_path):
    runs, d, _, _ = follow_run(tmp_path)
    prev = b"".join(b"p%05d\n" % i for i in range(1000))
    (d / "output.log").write_bytes(prev)
    rotate(d, b"c1\nc2\n")
    r = read_log(str(runs), d.name, tail_bytes=21)
    assert r["data"] == "p00998\np00999\nc1\nc2\n" and r["previous_bytes"] == 14 and r["end"] == 6
    assert read_log(str(runs), d.name, tail_lines=3)["data"] == "p00999\nc1\nc2\n"
    assert read_log(str(runs), d.name, offset=0)["data"] == "c1\nc2\n"  # offsets: output.log's own
    # mid-rotation (output.log.1 is output.log: the hard link step): read once, never twice
    os.unlink(d / "output.log.1")
    os.link(d / "output.log", d / "output.log.1")
    assert read_log(str(runs), d.name, tail_lines=10)["data"] == "c1\nc2\n"
    # a tail bigger than one read chunk reaches the end (it used to stop 256 KiB after where it began)
    big = b"".join(b"%07d %s\n" % (i, b"z" * 50) for i in range(80_000))
    (d / "output.log").write_bytes(big)
    t = read_log(str(runs), d.name, tail_bytes=2 << 20)
    assert t["end"] == len(big) and t["data"].endswith("0079999 " + "z" * 50 + "\n")
    assert len(t["data"]) > (2 << 20) - 100
