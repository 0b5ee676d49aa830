"""Issue 25 items 6 and 8 (the host's share): faults and hostile input around the agent, each with real processes.

A real agent (the ``local`` transport), real files, real HTTP on 127.0.0.1 (hostile stand-in servers that trickle
a byte every 0.3 s, answer 302, or send ``+Inf``/``NaN``), the real CLI as a subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from console.host.agent import Agent
from tests.conftest import free_port
from tests.helpers.agent_proc import AgentProc
from tests.helpers.rel_util import REPO, agent_pids, cleanup_runs, descendants_of, write_config
from tests.helpers.wait import await_until, holds_for, wait_until

SID = "20261203-000000-gpu0-f1f0"
AGENT_IO_WORKERS = Agent.IO_WORKERS


HOSTILE = r'''
"""A stand-in server that is hostile over HTTP (mode: $HOSTILE_MODE, else argv[1]): "trickle" answers one
header byte every 0.3 s, "redirect" answers 302, "inf" exports +Inf and NaN on /metrics; it listens on --port
(default 30000) and says it is ready, as SGLang does. Bounded: it ends after 300 s."""
import os, socket, sys, threading, time

MODE = os.environ.get("HOSTILE_MODE") or sys.argv[1]
PORT = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 30000
INF = (b"# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{tp_rank=\"0\"} +Inf\n"
       b"# TYPE sglang:gen_throughput gauge\nsglang:gen_throughput{tp_rank=\"0\"} NaN\n"
       b"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank=\"0\"} 3.0\n")


def serve(conn):
    try:
        conn.settimeout(30)
        req = b""
        while b"\r\n\r\n" not in req:
            chunk = conn.recv(4096)
            if not chunk:
                return
            req += chunk
        path = req.split(b" ")[1] if req.count(b" ") >= 2 else b"/"
        if MODE == "trickle":
            end = time.time() + 120
            for b in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 100000:
                conn.sendall(bytes([b]))
                time.sleep(0.3)
                if time.time() > end:
                    break
        elif MODE == "redirect":
            conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: /login\r\nContent-Length: 0\r\n\r\n")
        else:
            body = INF if path.startswith(b"/metrics") else b"ok"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    except OSError:
        pass
    finally:
        conn.close()


srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", PORT))
srv.listen(128)
srv.settimeout(0.5)
print("Uvicorn running on http://127.0.0.1:%d" % PORT, flush=True)
print("The server is fired up and ready to roll!", flush=True)
end = time.time() + 300
while time.time() < end:
    try:
        conn, _ = srv.accept()
    except socket.timeout:
        continue
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
'''


@pytest.fixture
def hostile(tmp_path):
    """Start a hostile server: ``start(mode, as_sglang=False)`` -> (process, port). ``as_sglang``: run as
    ``python -m sglang.launch_server --port P --enable-metrics`` (a hand-started SGLang server to the agent)."""
    script = tmp_path / "hostile.py"
    script.write_text(HOSTILE)
    pkg = tmp_path / "pkg" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(f"import runpy\nrunpy.run_path({str(script)!r}, run_name='__main__')\n")
    procs: list[subprocess.Popen] = []

    def start(mode: str, as_sglang: bool = False) -> tuple[subprocess.Popen, int]:
        port = free_port()
        argv = ([sys.executable, "-m", "sglang.launch_server", "--port", str(port), "--enable-metrics"] if as_sglang
                else [sys.executable, str(script), mode, "--port", str(port)])
        env = dict(os.environ, PYTHONPATH=str(tmp_path / "pkg"), HOSTILE_MODE=mode)
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout is not None and "Uvicorn running" in p.stdout.readline()
        return p, port

    yield start, script
    for p in procs:
        p.kill()
        p.wait()


def agent_threads(agent: AgentProc) -> int:
    return len(os.listdir(f"/proc/{agent.p.pid}/task"))


def local_conf(tmp_path: Path, runs: Path, **extra) -> Path:
    return write_config(tmp_path / "config.toml", {"local": {"transport": "local", "python": sys.executable,
                                                             "runs_dir": str(runs), "gpu_source": "none", **extra}})


def cli_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}


def run_cli(tmp_path: Path, conf: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", "--config", str(conf), *args], capture_output=True,
                          text=True, cwd=REPO, env=cli_env(tmp_path), timeout=timeout)


def hand_session(runs: Path, sid: str = SID, log: bytes = b"") -> Path:
    """A run directory as a launch leaves it (spec.json, output.log); no server runs."""
    d = runs / sid
    d.mkdir(parents=True)
    os.chmod(d, 0o700)
    (d / "spec.json").write_text(json.dumps({"session_id": sid, "argv": ["sglang"], "gpus": [0], "port": 1,
                                             "created_at": time.time()}))
    (d / "output.log").write_bytes(log)
    return d


def rotate(d: Path, new: bytes) -> None:
    """As the supervisor rotates a capped log: the next segment exists before the oldest is dropped."""
    (d / ".next").write_bytes(new)
    os.replace(d / "output.log", d / "output.log.1")
    os.replace(d / ".next", d / "output.log")


# ------------------------------------------------------------------ item 6: logs -f more than one rotation behind

@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_logs_follow_says_when_lines_were_rotated_away(tmp_path, as_json):
    runs = tmp_path / "runs"
    d = hand_session(runs, log=b"a1\na2\n")
    conf = local_conf(tmp_path, runs)
    args = [sys.executable, "-m", "console", "--config", str(conf), "logs", SID, "--host", "local", "-f"]
    p = subprocess.Popen(args + (["--json"] if as_json else []), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=REPO, env=cli_env(tmp_path))
    watchdog = threading.Timer(60, p.kill)  # every readline below is bounded: a hung CLI is killed, and fails
    watchdog.start()
    try:
        first = p.stdout.readline()
        if as_json:
            assert json.loads(first)["lines"] == ["a1", "a2"]
        else:
            assert first == "a1\n" and p.stdout.readline() == "a2\n"
        agent = wait_until(lambda: descendants_of(p.pid) & agent_pids(), 20)
        (apid,) = agent
        with open(d / "output.log", "ab") as f:  # followed: the agent has pushed it, the follow is in place
            f.write(b"a3\n")
        got = p.stdout.readline()
        assert (json.loads(got)["lines"] == ["a3"]) if as_json else got == "a3\n", got
        os.kill(apid, signal.SIGSTOP)  # the follower falls behind: two rotations before it reads again
        try:
            rotate(d, b"b1\n")
            rotate(d, b"c1\nc2\n")
        finally:
            os.kill(apid, signal.SIGCONT)
        out = [p.stdout.readline() for _ in range(2)]
    finally:
        watchdog.cancel()
        p.send_signal(signal.SIGINT)
        try:
            _, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
    lost = [x for x in err.splitlines() if "lines lost" in x]
    assert len(lost) == 1 and SID in lost[0] and "rotated more than once" in lost[0], err
    if as_json:
        ev, chunk = (json.loads(x) for x in out)
        assert ev["type"] == "event" and ev["kind"] == "log_rotated" and ev["dropped"] is True, ev
        assert "lines lost" in ev["message"]
        assert chunk["type"] == "lines" and chunk["lines"] == ["c1", "c2"] and chunk["offset"] == 0, chunk
    else:
        assert out == ["c1\n", "c2\n"], out  # the newest segment from its start; b1 is gone, and said so


# ------------------------------------------------------------------ item 8: the exporter under idle and trickling clients

def _serving(p: subprocess.Popen, timeout: float = 60) -> str:
    """The exporter's first stdout line (it says where it serves), read with a bound."""
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    try:
        return p.stdout.readline()
    finally:
        timer.cancel()


def test_exporter_threads_are_bounded_and_idle_or_trickling_clients_are_cut_off(tmp_path):
    from console.commands.export import EXPORT_WORKERS, REQUEST_DEADLINE_S

    runs = tmp_path / "runs"
    runs.mkdir()
    conf = local_conf(tmp_path, runs)
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "console", "--config", str(conf), "export", "--host", "local",
                          "--listen", f"127.0.0.1:{port}", "--duration", "60"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=REPO, env=cli_env(tmp_path))
    socks: list[socket.socket] = []
    try:
        assert f"127.0.0.1:{port}/metrics" in _serving(p)
        base = len(os.listdir(f"/proc/{p.pid}/task"))
        t0 = time.monotonic()
        for _ in range(200):  # 200 idle half-requests
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /metr")
            socks.append(s)
        threads = lambda: len(os.listdir(f"/proc/{p.pid}/task"))  # noqa: E731
        assert holds_for(lambda: threads() <= base + 2, 1.0), (base, threads())  # was: one per connection (201)
        for s in socks:  # each is cut off by its deadline (or closed at once: the backlog was full)
            s.settimeout(REQUEST_DEADLINE_S + 10)
            assert s.recv(100) == b""
        assert time.monotonic() - t0 < REQUEST_DEADLINE_S + 8
        trickle = socket.create_connection(("127.0.0.1", port), timeout=5)
        t1 = time.monotonic()
        with pytest.raises(OSError):  # a byte every 0.3 s: cut off at the whole request's deadline
            for c in b"GET /metrics HTTP/1.0\r\nX: " + b"y" * 100:
                trickle.sendall(bytes([c]))
                time.sleep(0.3)
        assert REQUEST_DEADLINE_S - 1 < time.monotonic() - t1 < REQUEST_DEADLINE_S + 3
        trickle.close()
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "mtpconsole_host_connected" in body  # a real scrape is served as before
        assert len(os.listdir(f"/proc/{p.pid}/task")) <= base + EXPORT_WORKERS
    finally:
        for s in socks:
            s.close()
        p.kill()
        p.communicate(timeout=20)


def test_exporter_on_every_address_says_it_exposes_the_metrics(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    conf = local_conf(tmp_path, runs)
    r = run_cli(tmp_path, conf, "export", "--host", "local", "--listen", f"0.0.0.0:{free_port()}", "--duration", "1")
    assert r.returncode == 0, r.stderr
    (warn,) = [x for x in r.stderr.splitlines() if "warning" in x]
    assert "0.0.0.0" in warn and "every network this machine is on" in warn and "127.0.0.1" in warn, warn
    quiet = run_cli(tmp_path, conf, "export", "--host", "local", "--listen", f"127.0.0.1:{free_port()}",
                    "--duration", "1", "--json")
    assert quiet.returncode == 0 and "warning:" not in quiet.stderr, quiet.stderr
    assert json.loads(quiet.stdout.splitlines()[0])["warning"] is None


# ------------------------------------------------------------------ item 8: trickling /metrics and /health, FIFOs

def test_a_trickling_metrics_server_never_stops_the_others(hostile, tmp_path):
    start, _ = hostile
    good, _ = start("inf", as_sglang=True)
    slow, _ = start("trickle", as_sglang=True)
    agent = AgentProc({"interval": 0.3, "runs_dir": str(tmp_path / "runs"), "gpu_source": "none"})
    try:
        agent.read_until(lambda m: m.get("type") == "ready")

        def of(m, pid):
            return next((x for x in m["data"]["servers"] if x["pid"] == pid), {}) if m.get("type") == "sample" else {}

        ats = set()

        def fresh_while_trickled(m):
            if of(m, good.pid).get("metrics_text") and "timed out" in (of(m, slow.pid).get("metrics_error") or ""):
                ats.add(of(m, good.pid)["metrics_at"])
            return len(ats) >= 3  # the good server's metrics keep coming while the trickler is cut off each round

        agent.read_until(fresh_while_trickled, timeout=15)  # was: one trickler stopped every server's metrics
    finally:
        agent.close()


def test_trickling_health_probes_reuse_a_bounded_set_of_threads(hostile, tmp_path):
    start, _ = hostile
    _, port = start("trickle")
    agent = AgentProc({"interval": 1.0, "runs_dir": str(tmp_path / "runs"), "gpu_source": "none"})
    try:
        agent.read_until(lambda m: m.get("type") == "sample")  # its own threads (stdin, GPU sampler) run
        base = agent_threads(agent)
        for _ in range(2):
            first = agent.ids + 1
            for _ in range(20):  # twenty probes at once, each with a 1 s whole-request deadline
                agent.ids += 1
                agent.p.stdin.write((json.dumps({"id": agent.ids, "op": "http_get", "args": {
                    "port": port, "path": "/health", "timeout": 1.0}}) + "\n").encode())
            agent.p.stdin.flush()
            t0 = time.monotonic()
            replies: dict[int, dict] = {}

            def all_in(m):
                if m.get("type") == "reply" and m["id"] >= first:
                    replies[m["id"]] = m
                return len(replies) == 20

            agent.read_until(all_in, timeout=30)
            assert time.monotonic() - t0 < 20  # 20 probes, 8 at a time, 1 s each: about 3 s (never one hung)
            assert all(r["ok"] and r["result"]["status"] == 0 and "timed out" in r["result"]["body"]
                       for r in replies.values()), replies
            assert agent_threads(agent) <= base + AGENT_IO_WORKERS, (base, agent_threads(agent))  # was +1 per probe
        assert agent.request("ping")["ok"]
    finally:
        agent.close()


def test_a_fifo_as_a_models_config_json_is_refused_not_waited_on(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    os.mkfifo(model / "config.json")
    (tmp_path / "real.json").write_text('{"a": 1}')
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "config.json").symlink_to(tmp_path / "real.json")  # as in a Hugging Face snapshot
    agent = AgentProc({"interval": 1.0, "runs_dir": str(tmp_path / "runs"), "gpu_source": "none"})
    try:
        agent.read_until(lambda m: m.get("type") == "sample")
        base = agent_threads(agent)
        t0 = time.monotonic()
        r = agent.request("read_file", path=str(model / "config.json"), max_bytes=4 << 20, timeout=5)
        assert time.monotonic() - t0 < 2
        assert not r["ok"] and r["kind"] == "refused" and "pipe, not a regular file" in r["error"], r
        for other in ("/dev/zero", str(tmp_path)):
            r = agent.request("read_file", path=other, timeout=5)
            assert not r["ok"] and r["kind"] == "refused", r
        r = agent.request("read_file", path=str(tmp_path / "linked" / "config.json"), timeout=5)
        assert r["ok"] and r["result"]["data"] == '{"a": 1}', r
        assert agent_threads(agent) <= base + AGENT_IO_WORKERS  # nothing left blocked on the FIFO
    finally:
        agent.close()


# ------------------------------------------------------------------ item 8: +Inf and NaN never reach --json or advice

def _strict(text: str):
    """JSON as a strict parser reads it: ``NaN``/``Infinity`` (Python's extension, not JSON) fail."""
    def refuse(token: str):
        raise ValueError(f"not JSON: {token}")
    return json.loads(text, parse_constant=refuse)


async def test_inf_and_nan_from_metrics_are_no_figures_and_no_advice(hostile, tmp_path):
    from console.core.flags.sources import bundled_schema
    from console.ops.advice_host import advise_link, schema_validator
    from console.sim.simgpu import write_alloc
    from tests.helpers.sim_files import make_sim, sim_link

    d, _ = make_sim(tmp_path, 1)
    os.environ["MTPCONSOLE_SIM_DIR"] = str(d)  # the hand-started server belongs to the simulated host
    try:
        start, _ = hostile
        p, _ = start("inf", as_sglang=True)
    finally:
        del os.environ["MTPCONSOLE_SIM_DIR"]
    write_alloc(str(d), p.pid, 0, 80_000, busy=0.5)
    runs = tmp_path / "runs"
    runs.mkdir()
    async with sim_link(runs, d) as link:
        async def fetched():
            snap = await link.refresh()
            proc = next((x for x in snap.servers if x.pid == p.pid), None)
            return snap if proc is not None and proc.metrics_text and "+Inf" in proc.metrics_text else None
        snap = await await_until(fetched, 20)
        assert snap is not None, "the agent never fetched the server's /metrics"
        advice, figures = await advise_link(link, snap, now=time.time(), validate=schema_validator(bundled_schema()))
    out = json.dumps({"advice": [a.model_dump(mode="json") for a in advice], "figures": figures})
    _strict(out)  # was: "queue": {"value": Infinity} and "gen_throughput": NaN in status --json
    (f,) = [x["figures"] for x in figures]
    assert "queue" not in f and "gen_throughput" not in f and f["running"]["value"] == 3.0, f
    assert not any("inf" in (a.message + " ".join(a.evidence)).lower().split() for a in advice), advice
    assert "inf request" not in out and "nan" not in out.lower().replace("nanos", ""), out


def test_inf_and_nan_in_exit_and_ack_files_never_reach_json(tmp_path):
    runs = tmp_path / "runs"
    a = hand_session(runs, "20261203-000001-gpu0-aaaa")
    b = hand_session(runs, "20261203-000002-gpu0-bbbb")
    for d in (a, b):
        (d / "record.json").write_text(json.dumps({"supervisor_pid": 999999, "pid": 999998, "pgid": 999998,
                                                   "start_ticks": 1, "started_at": 1.0e9, "boot_id": None}))
    (a / "exit.json").write_text('{"ended_at": NaN, "exit_code": 0, "signal": null, "stopped_by_operator": false, '
                                 '"leftovers_killed": [], "error": null}')
    (b / "exit.json").write_text('{"ended_at": 1000000100.0, "exit_code": 1, "signal": null, '
                                 '"stopped_by_operator": false, "leftovers_killed": [], "error": null}')
    (b / "ack.json").write_text('{"at": Infinity, "by": "x"}')
    conf = local_conf(tmp_path, runs)
    r = run_cli(tmp_path, conf, "sessions", "--host", "local", "--all", "--json")
    assert r.returncode == 0, r.stderr
    views = {v["session_id"]: v for v in _strict(r.stdout)}  # was: "ended_at": NaN, "acknowledged_at": Infinity
    va, vb = views[a.name], views[b.name]
    assert va["state"] == "failed" and "not a finite number" in (va["hint"] or ""), va
    assert vb["state"] == "failed" and vb["acknowledged"] is False and vb["acknowledged_at"] is None, vb
    s = run_cli(tmp_path, conf, "status", "--host", "local", "--json")
    assert s.returncode == 0, s.stderr
    _strict(s.stdout)


def test_a_2_mib_metrics_body_is_parsed_once_per_sample_not_per_advice_round(monkeypatch):
    import prometheus_client.parser as parser

    from console.core.metrics import parse_sglang_metrics
    from console.core.sessions import derive_views
    from console.model import ConnectionInfo, GpuProc, GpuSample, HostSnapshot, HostView, ServerProc
    from console.ops.advice_host import figures_for, host_advice

    lines = [f'sglang:num_running_reqs{{tp_rank="0",model_name="m{i}"}} 1.0' for i in range(40_000)]
    text = "# TYPE sglang:num_running_reqs gauge\n" + "\n".join(lines) + "\n"
    assert len(text) > 2 << 20
    calls = []
    real = parser.text_string_to_metric_families
    monkeypatch.setattr(parser, "text_string_to_metric_families", lambda t: calls.append(1) or real(t))
    now = time.time()
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--port", "30000", "--enable-metrics"]
    launcher = ServerProc(pid=4242, ppid=1, pgid=4242, start_ticks=11, state="S", user="op", argv=argv,
                          role="launcher", framework="sglang", gpu_mem_mib={0: 80_000}, metrics_text=text,
                          metrics_at=now)
    g = GpuSample(index=0, uuid="GPU-0", name="Sim", power_w=300.0, power_limit_w=600.0, util_pct=60.0,
                  mem_used_mib=81_000, mem_total_mib=97_887, procs=[GpuProc(pid=4242, used_mib=80_000)])
    snap = HostSnapshot(name="h", connection=ConnectionInfo(state="connected", rtt_ms=1.0), sampled_at=now,
                        received_at=now, gpu_source="sim", gpus=[g], servers=[launcher])
    view = HostView(snapshot=snap, sessions=derive_views(snap, {}, now))
    (s,) = [v for v in view.sessions if v.launcher_pid == 4242]
    parse_sglang_metrics.cache_clear()
    for _ in range(5):  # five rounds of advice (and the figures status shows) over one sample
        host_advice(view)
        assert figures_for(view, s).running.value == 40_000.0
    assert len(calls) == 1, len(calls)
    newer = snap.model_copy(update={"servers": [launcher.model_copy(update={"metrics_at": now + 1})]})
    figures_for(HostView(snapshot=newer, sessions=view.sessions), s)
    assert len(calls) == 2  # a new sample is parsed


# ------------------------------------------------------------------ item 8: launch --wait against a trickling /health

def test_launch_wait_against_a_trickling_health_is_no_lost_contact(hostile, tmp_path):
    from tests.helpers.sim_files import make_sim

    _, script = hostile
    _, model = make_sim(tmp_path, 1)
    runs = tmp_path / "runs"
    runs.mkdir()
    conf = local_conf(tmp_path, runs)
    port = free_port()
    try:
        r = run_cli(tmp_path, conf, "launch", "--host", "local", "--no-validate", "--port", str(port), "--wait",
                    "--timeout", "5", "--json", "--command", f"{sys.executable} {script} trickle", "--",
                    "--model-path", str(model), timeout=120)
        res = json.loads(r.stdout)
        steps = {s["name"]: s for s in res["steps"]}
        assert r.returncode == 1 and res["ok"] is False, r.stdout + r.stderr
        assert steps["listening"]["state"] == "ok" and steps["healthy"]["state"] == "failed", steps
        assert "lost contact" not in r.stdout + r.stderr, r.stdout  # was: "lost contact with the host: " (blank)
        assert "not confirmed within" in steps["healthy"]["evidence"], steps["healthy"]
        assert "GET /health: timed out" in steps["healthy"]["evidence"], steps["healthy"]  # what the server did
        ping = run_cli(tmp_path, conf, "sessions", "--host", "local", "--json")
        assert ping.returncode == 0  # the host was fine all along
    finally:
        cleanup_runs(runs)


# ------------------------------------------------------------------ item 8: kill '' / relaunch '', kill of an ended session

@pytest.mark.parametrize("command", ["kill", "relaunch"])
def test_an_empty_session_id_is_one_clear_line(command, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    conf = local_conf(tmp_path, runs)
    r = run_cli(tmp_path, conf, command, "", "--host", "local")
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "SESSION id is empty" in lines[0], r.stderr  # was: AssertionError / "process None"
    assert "Traceback" not in r.stderr and "None" not in r.stderr
    bad = run_cli(tmp_path, conf, command, "../x", "--host", "local")
    assert bad.returncode == 2 and "bad session id" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


async def test_kill_of_a_stopped_session_whose_port_a_newer_session_uses_says_it_already_ended(tmp_path):
    import asyncio

    from console.model import KillTarget
    from console.ops import lifecycle
    from tests.helpers.rel_util import req
    from tests.test_full_disk_kill import local_link

    runs = tmp_path / "runs"
    runs.mkdir()
    port = free_port()
    link = local_link(runs)
    await link.open()
    try:
        old = await lifecycle.launch(link, req(port, host="local"), None, timeout=60)
        assert old.ok, old
        k = await lifecycle.kill(link, KillTarget(host="local", session_id=old.session_id), grace=5)
        assert k.ok and k.state == "stopped", k
        new = await lifecycle.launch(link, req(port, host="local"), None, timeout=60)
        assert new.ok, new  # the newer session serves on the old one's port
        conf = local_conf(tmp_path, runs, log_cap_mb=1)
        r = await asyncio.to_thread(run_cli, tmp_path, conf, "kill", old.session_id, "--host", "local", "--json")
        res = json.loads(r.stdout)
        assert r.returncode == 0 and res["ok"] is True and res["state"] == "stopped", r.stdout + r.stderr
        target = next(s for s in res["steps"] if s["name"] == "target")
        assert "had already ended (STOPPED)" in target["evidence"] and "nothing signalled" in target["evidence"]
        assert all(s["state"] == "skipped" for s in res["steps"] if s["name"] != "target"), res["steps"]
        assert "port" not in (res["error"] or "") and not res["left"], res  # was: FAILED "port N still open"
        snap = await link.refresh()
        (cur,) = [x for x in snap.sessions if x.session_id == new.session_id]
        assert cur.server_alive and cur.exit is None  # the newer session was never touched
    finally:
        await link.close()
        cleanup_runs(runs)


def test_a_302_from_health_is_said_in_the_not_confirmed_reason(hostile, tmp_path):
    from tests.helpers.sim_files import make_sim

    _, script = hostile
    _, model = make_sim(tmp_path, 1)
    runs = tmp_path / "runs"
    runs.mkdir()
    conf = local_conf(tmp_path, runs)
    try:
        r = run_cli(tmp_path, conf, "launch", "--host", "local", "--no-validate", "--port", str(free_port()),
                    "--wait", "--timeout", "3", "--json", "--command", f"{sys.executable} {script} redirect", "--",
                    "--model-path", str(model), timeout=120)
        res = json.loads(r.stdout)
        (healthy,) = [s for s in res["steps"] if s["name"] == "healthy"]
        assert r.returncode == 1 and healthy["state"] == "failed", r.stdout + r.stderr
        assert "not confirmed within" in healthy["evidence"] and "HTTP 302" in healthy["evidence"], healthy
    finally:
        cleanup_runs(runs)
