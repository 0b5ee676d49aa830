"""Issue 29 item 5: a deployment of 2 replicas on a simulated 4-GPU local host behind the REAL gateway (SGLang's
``smg`` 1.13.0, the ``router`` extra; never a mock), driven through ``mtpconsole deploy`` as an operator runs it,
with 8 concurrent clients sending requests through the gateway for the whole roll.

- ``deploy roll --set --max-running-requests=24``: every request answered 2xx, both replicas replaced (on spare
  GPUs), the gateway lists exactly the new workers, the old sessions STOPPED by the operator with running + queued
  == 0 confirmed before their SIGTERM;
- a new replica that dies at start (an unknown flag, ``--no-validate``): the roll stops at replica 0 naming it,
  the old replicas still serve and stay registered, 0 failed requests.

Under ``CI=true`` a missing smg fails these tests; elsewhere they skip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from console.sim.loadgen import one_request
from tests.conftest import IN_CI
from tests.helpers.rel_util import cleanup_runs
from tests.helpers.sim_files import REPO, make_sim, sim_env
from tests.helpers.sshd import free_port

CLIENTS = 8
LATENCY_S = "0.3"


@pytest.fixture(scope="module", autouse=True)
def smg_installed() -> None:
    if importlib.util.find_spec("smg") is None:
        msg = "smg (SGLang's gateway, the 'router' extra: pip install '.[router]') is not installed"
        if IN_CI:
            pytest.fail(f"{msg}: under CI=true the deployment tests must run", pytrace=False)
        pytest.skip(msg)


def free_ports(n: int) -> int:
    """A base port with ``n`` consecutive ports free on 127.0.0.1."""
    return free_port(n)


class Dep:
    """A configured deployment 'web' on the local host and the CLI run against it."""

    def __init__(self, tmp: Path, gpus: int = 4, flags: tuple[str, ...] = (), layers: int | None = None):
        self.sim, self.model = make_sim(tmp, gpus, tag="dep")
        if layers is not None:  # a smaller model of the same shape (the planner and the stand-in read this file)
            cfg = json.loads((self.model / "config.json").read_text())
            cfg["text_config"]["num_hidden_layers"] = layers
            (self.model / "config.json").write_text(json.dumps(cfg))
        self.runs = tmp / "runs"
        self.audit = tmp / "audit.jsonl"
        base = free_ports(8)
        self.gateway_port, self.base = base, base + 2
        env = {**sim_env(self.sim), "MTPCONSOLE_SIM_LATENCY_S": LATENCY_S}
        launch_env = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
        self.config = tmp / "config.toml"
        self.config.write_text(f"""
[hosts.local]
python = {json.dumps(sys.executable)}
runs_dir = {json.dumps(str(self.runs))}
gpu_source = "sim"
sim_dir = {json.dumps(str(self.sim))}
transport = "local"
server_command = [{json.dumps(sys.executable)}, "-m", "console.sim.sglang"]
launch_env = {{ {launch_env} }}

[deployments.web]
host = "local"
gpus = [0, 1]
model_path = {json.dumps(str(self.model))}
flags = {json.dumps(list(flags))}
ports = {self.base}
router = {{ port = {self.gateway_port} }}
""")

    def cli(self, *args: str, timeout: float = 240) -> tuple[int, Any, str]:
        """``mtpconsole --config C --audit-log A ARGS --json``: (rc, the JSON it printed, stderr)."""
        p = subprocess.run([sys.executable, "-m", "console", "--config", str(self.config), "--audit-log",
                            str(self.audit), *args, "--json"], capture_output=True, text=True, timeout=timeout,
                           cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            out = json.loads(p.stdout)
        except ValueError:
            out = None
        return p.returncode, out, p.stderr

    def status(self) -> dict[str, Any]:
        rc, st, err = self.cli("deploy", "status", "web")
        assert rc == 0 and st is not None, err
        return st

    def exit_record(self, sid: str) -> dict[str, Any] | None:
        p = self.runs / sid / "exit.json"
        return json.loads(p.read_text()) if p.exists() else None

    def spec(self, sid: str) -> dict[str, Any]:
        return json.loads((self.runs / sid / "spec.json").read_text())


class Load:
    """``CLIENTS`` clients sending the console's own load request (``console.sim.loadgen.one_request``: a
    streamed chat completion) through the gateway, back to back, until stopped."""

    def __init__(self, port: int, model: str):
        self.port, self.model = port, model
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ok = 0
        self.failed: list[str] = []
        self.done_at: list[float] = []
        self.threads = [threading.Thread(target=self.client, daemon=True) for _ in range(CLIENTS)]

    def client(self) -> None:
        while not self.stop.is_set():
            try:
                one_request("127.0.0.1", self.port, 8, timeout=60.0, model=self.model)
                with self.lock:
                    self.ok += 1
                    self.done_at.append(time.monotonic())
            except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                with self.lock:
                    self.failed.append(f"{type(e).__name__}: {e}")

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=90)
        assert not any(t.is_alive() for t in self.threads), "a load client hung"

    def wait_ok(self, n: int, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if self.ok >= n:
                    return
            time.sleep(0.1)
        raise AssertionError(f"the load did not reach {n} answered requests: {self.ok} ok, {self.failed[:3]}")


def deployed(tmp_path: Path, gpus: int, flags: tuple[str, ...] = (), layers: int | None = None) -> Iterator[Dep]:
    d = Dep(tmp_path, gpus, flags, layers)
    rc, up, err = d.cli("deploy", "up", "web", "--yes")
    try:
        assert rc == 0 and up is not None and up["ok"], (err, up and up.get("error"))
        yield d
    finally:
        d.cli("deploy", "down", "web", "--yes", timeout=120)
        cleanup_runs(d.runs)


@pytest.fixture()
def dep(tmp_path: Path) -> Iterator[Dep]:
    """'web' up: 2 replicas (GPUs 0 and 1) on a simulated 4-GPU host: two spare GPUs."""
    yield from deployed(tmp_path, 4)


@pytest.fixture()
def dep_full(tmp_path: Path) -> Iterator[Dep]:
    """'web' up: 2 replicas on a simulated 2-GPU host: no spare GPU."""
    yield from deployed(tmp_path, 2)


@pytest.fixture()
def dep_small(tmp_path: Path) -> Iterator[Dep]:
    """'web' up: 2 replicas of an 8-layer model on a simulated 2-GPU host, each taking 40% of its GPU: two fit on
    one GPU."""
    yield from deployed(tmp_path, 2, ("--mem-fraction-static", "0.4"), layers=8)


def gateway_workers(d: Dep) -> list[dict[str, Any]]:
    """The gateway's own worker list, asked as an operator on the host would (with the key from its file)."""
    import http.client

    key = (d.runs.parent / "runs.gateways" / "web.key").read_text().strip()
    c = http.client.HTTPConnection("127.0.0.1", d.gateway_port, timeout=5)
    c.request("GET", "/workers", headers={"Authorization": "Bearer " + key})
    return list(json.loads(c.getresponse().read())["workers"])


def worker_urls(st: dict[str, Any]) -> set[str]:
    return {w["url"].rstrip("/") for w in st["workers"]}


def replica_urls(st: dict[str, Any]) -> set[str]:
    return {f"http://127.0.0.1:{r['port']}" for r in st["replicas"]}


def test_roll_under_load_replaces_both_replicas_with_no_failed_request(dep: Dep) -> None:
    before = dep.status()
    assert before["gateway"]["health"] == 200 and "smg-1.13.0" in before["gateway"]["api"]
    assert "worker API smg /workers" in before["gateway"]["api"]  # the API detected, and said
    olds = {r["session_id"] for r in before["replicas"]}
    assert len(olds) == 2 and {r["state"] for r in before["replicas"]} == {"ready"}
    assert worker_urls(before) == replica_urls(before)
    # the control-plane key: a private file on the host, on no command line, in no log, audit or spec
    key_file = dep.runs.parent / "runs.gateways" / "web.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = key_file.read_text().strip()
    gw = before["gateway"]["session_id"]
    pid = json.loads((dep.runs / gw / "record.json").read_text())["pid"]
    assert key not in Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    for f in (dep.runs / gw / "output.log", dep.runs / gw / "spec.json", dep.audit):
        assert key not in f.read_text(), f
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as unauth:  # the worker API is closed to a caller without it
        urllib.request.urlopen(f"http://127.0.0.1:{dep.gateway_port}/workers", timeout=5)
    assert unauth.value.code == 401
    with Load(dep.gateway_port, str(dep.model)) as load:
        load.wait_ok(CLIENTS)
        t0 = time.monotonic()
        rc, r, err = dep.cli("deploy", "roll", "web", "--set", "--max-running-requests=24", "--yes")
        t1 = time.monotonic()
        load.wait_ok(load.ok + CLIENTS)  # still answered after the roll
    assert load.failed == [], load.failed[:5]
    assert sum(1 for t in load.done_at if t0 <= t <= t1) >= 20, "the load did not run through the roll"
    assert rc == 0 and r is not None and r["ok"], (err, r and r.get("error"))
    assert set(r["replaced"]) == olds and len(set(r["replaced"].values())) == 2
    news = set(r["replaced"].values())
    names = [s["name"] for s in r["steps"]]
    for i in (0, 1):
        drained = names.index(f"replica {i} old: drained")
        sigterm = names.index(f"replica {i} old kill: SIGTERM")
        assert drained < sigterm and names.index(f"replica {i} old: deregistered") < drained
        assert "running 0, queued 0" in (r["steps"][drained]["evidence"] or "")
        assert names.index(f"replica {i} new: generate") < names.index(f"replica {i} new: registered")
        assert "spare GPU" in (r["steps"][names.index(f"replica {i}: placement")]["evidence"] or "")
    after = dep.status()
    assert {x["session_id"] for x in after["replicas"]} == news
    assert {x["role"] for x in after["replicas"]} == {"current"} and {x["state"] for x in after["replicas"]} == {"ready"}
    assert worker_urls(after) == replica_urls(after)  # the gateway lists exactly the new workers
    assert after["foreign_workers"] == [] and not after["roll_in_progress"]
    for sid in olds:
        ex = dep.exit_record(sid)
        assert ex is not None and ex["stopped_by_operator"], (sid, ex)
    for sid in news:
        spec = dep.spec(sid)
        argv = spec["argv"]
        assert argv[argv.index("--max-running-requests") + 1] == "24"
        assert spec["deployment"] == "web" and spec["deployment_role"] == "replica" and spec["replaces"] in olds
    audit = dep.audit.read_text()
    assert '"result:deploy-roll"' in audit and '"result:deploy-up"' in audit


def test_a_new_replica_that_dies_at_start_stops_the_roll_and_the_old_ones_serve(dep: Dep) -> None:
    before = dep.status()
    olds = {r["session_id"] for r in before["replicas"]}
    with Load(dep.gateway_port, str(dep.model)) as load:
        load.wait_ok(CLIENTS)
        rc, r, err = dep.cli("deploy", "roll", "web", "--set", "--no-such-flag=1", "--no-validate", "--yes")
        load.wait_ok(load.ok + CLIENTS)
    assert load.failed == [], load.failed[:5]
    assert rc == 1 and r is not None and not r["ok"], err
    assert r["rolled_back"] and "replica 0" in r["rolled_back"] and "still serves" in r["rolled_back"]
    assert r["replaced"] == {}
    assert not any(s["name"].startswith("replica 1") for s in r["steps"])  # the roll stopped at replica 0
    failed = [s for s in r["steps"] if s["state"] == "failed"]
    assert failed and failed[0]["name"].startswith("replica 0 new:")
    after = dep.status()
    assert {x["session_id"] for x in after["replicas"]} == olds
    assert {x["state"] for x in after["replicas"]} == {"ready"}
    assert worker_urls(after) == replica_urls(after) == replica_urls(before)
    new = [p.name for p in dep.runs.iterdir() if (p / "spec.json").is_file() and p.name not in olds
           and dep.spec(p.name).get("deployment_role") == "replica"]
    assert len(new) == 1 and dep.exit_record(new[0]) is not None  # it died, and its end is recorded


def kill_mid_roll(dep: Dep) -> None:
    """Start ``deploy roll --set --max-running-requests=24`` and SIGKILL the console once the new replica 0 is
    registered while its old one still is (inside its settle window)."""
    p = subprocess.Popen([sys.executable, "-m", "console", "--config", str(dep.config), "--audit-log",
                          str(dep.audit), "deploy", "roll", "web", "--set", "--max-running-requests=24", "--yes",
                          "--settle", "30", "--json"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        end = time.monotonic() + 90
        while len(gateway_workers(dep)) < 3:
            assert time.monotonic() < end and p.poll() is None, "the roll never registered a new replica"
            time.sleep(0.2)
    finally:
        p.kill()
        p.wait(timeout=10)


def test_a_console_killed_mid_roll_shows_old_and_new_and_rolls_back_on_command(dep: Dep) -> None:
    before = dep.status()
    olds = {r["session_id"] for r in before["replicas"]}
    with Load(dep.gateway_port, str(dep.model)) as load:
        load.wait_ok(CLIENTS)
        kill_mid_roll(dep)
        mid = dep.status()
        roles = {x["session_id"]: x["role"] for x in mid["replicas"]}
        assert mid["roll_in_progress"] and sorted(roles.values()) == ["current", "new", "old"], roles
        new = next(sid for sid, role in roles.items() if role == "new")
        rc, r, err = dep.cli("deploy", "roll", "web", "--rollback", "--yes")
        load.wait_ok(load.ok + CLIENTS)
    assert load.failed == [], load.failed[:5]
    assert rc == 0 and r is not None and r["ok"] and "rolled back on command" in r["rolled_back"], (err, r)
    after = dep.status()
    assert {x["session_id"] for x in after["replicas"]} == olds and not after["roll_in_progress"]
    assert worker_urls(after) == replica_urls(before)
    ex = dep.exit_record(new)
    assert ex is not None and ex["stopped_by_operator"]


def test_with_no_spare_gpu_each_old_replica_is_drained_first_and_the_other_carries_the_traffic(dep_full: Dep) -> None:
    dep = dep_full
    olds = {r["session_id"]: r for r in dep.status()["replicas"]}
    with Load(dep.gateway_port, str(dep.model)) as load:
        load.wait_ok(CLIENTS)
        rc, r, err = dep.cli("deploy", "roll", "web", "--set", "--max-running-requests=24", "--yes")
        load.wait_ok(load.ok + CLIENTS)
    assert load.failed == [], load.failed[:5]
    assert rc == 0 and r is not None and r["ok"], (err, r and r.get("error"))
    names = [s["name"] for s in r["steps"]]
    for i in (0, 1):
        place = r["steps"][names.index(f"replica {i}: placement")]
        assert place["state"] == "warning" and "drained first" in place["evidence"]
        assert (names.index(f"replica {i} old: deregistered") < names.index(f"replica {i} old: drained")
                < names.index(f"replica {i} old kill: SIGTERM") < names.index(f"replica {i} new: spawned"))
    after = dep.status()
    assert {x["session_id"] for x in after["replicas"]} == set(r["replaced"].values())
    assert worker_urls(after) == replica_urls(after)
    for x in after["replicas"]:  # each new one took its old one's GPU and port
        old = olds[x["replaces"]]
        assert (x["gpus"], x["port"], x["replica"]) == (old["gpus"], old["port"], old["replica"])


def test_with_no_spare_gpu_but_room_the_new_replica_starts_beside_the_old_one(dep_small: Dep) -> None:
    dep = dep_small
    olds = {r["session_id"]: r for r in dep.status()["replicas"]}
    with Load(dep.gateway_port, str(dep.model)) as load:
        load.wait_ok(CLIENTS)
        rc, r, err = dep.cli("deploy", "roll", "web", "--yes")
        load.wait_ok(load.ok + CLIENTS)
    assert load.failed == [], load.failed[:5]
    assert rc == 0 and r is not None and r["ok"], (err, r and r.get("error"))
    names = [s["name"] for s in r["steps"]]
    for i in (0, 1):
        place = r["steps"][names.index(f"replica {i}: placement")]
        assert place["state"] == "ok" and "fits beside the old one" in place["evidence"], place
        assert names.index(f"replica {i} new: registered") < names.index(f"replica {i} old: deregistered")
    after = dep.status()
    for x in after["replicas"]:  # its old one's GPU, its own port
        old = olds[x["replaces"]]
        assert x["gpus"] == old["gpus"] and x["port"] != old["port"]
    assert worker_urls(after) == replica_urls(after)


def test_the_next_roll_resumes_an_interrupted_one_and_rolls_each_replica_once(dep: Dep) -> None:
    olds = {r["session_id"] for r in dep.status()["replicas"]}
    with Load(dep.gateway_port, str(dep.model)) as load:
        load.wait_ok(CLIENTS)
        kill_mid_roll(dep)
        mid = {x["role"]: x["session_id"] for x in dep.status()["replicas"]}
        rc, r, err = dep.cli("deploy", "roll", "web", "--set", "--max-running-requests=24", "--yes")
        load.wait_ok(load.ok + CLIENTS)
    assert load.failed == [], load.failed[:5]
    assert rc == 0 and r is not None and r["ok"], (err, r and r.get("error"))
    resumed = next(s for s in r["steps"] if s["name"] == "replica 0: interrupted roll")
    assert "resumed" in resumed["evidence"]
    assert r["replaced"][mid["old"]] == mid["new"]  # the new replica 0 of the killed roll was kept, not rolled again
    assert set(r["replaced"]) == olds
    after = dep.status()
    assert {x["session_id"] for x in after["replicas"]} == set(r["replaced"].values())
    assert worker_urls(after) == replica_urls(after) and not after["roll_in_progress"]
    for sid in olds:
        ex = dep.exit_record(sid)
        assert ex is not None and ex["stopped_by_operator"]
