"""The SGLang stand-in as a real subprocess: log order, health, worker titles, alloc files, OOM, flags, signals."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from console.sim import simgpu
from console.sim.sglang import RETITLE_S_DEFAULT
from tests.helpers.sshd import free_port
from tests.helpers.wait import holds_for, wait_until

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "tests" / "data" / "models"

EAGLE_314 = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", "4"]
INCIDENT = ["--mem-fraction-static", "0.90", "--max-running-requests", "512", *EAGLE_314,
            "--enable-hierarchical-cache", "--hicache-size", "200", "--mamba-radix-cache-strategy", "extra_buffer"]
CORRECTED = ["--mem-fraction-static", "0.90", "--max-running-requests", "32", *EAGLE_314, "--context-length", "32768"]




class Server:
    """One stand-in launcher in its own session, its merged output collected by a thread."""

    def __init__(self, sim: "SimEnv", args: list[str], env: dict[str, str]) -> None:
        self.sim = sim
        self.port = free_port()
        self.args = ["--port", str(self.port), *args]
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "console.sim.sglang", *self.args], cwd=str(REPO),
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.lines: list[str] = []
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def text(self) -> str:
        return "\n".join(self.lines)

    def line_with(self, needle: str) -> str | None:
        return next((ln for ln in list(self.lines) if needle in ln), None)

    def wait_line(self, needle: str, timeout: float = 15.0) -> str:
        """The first output line holding ``needle`` (once the server exited, what its reader thread still had)."""
        found = wait_until(lambda: self.line_with(needle) or (self.proc.poll() is not None and not self._t.is_alive()),
                           timeout)
        if isinstance(found, str):
            return found
        raise AssertionError(f"no line with {needle!r}; output:\n{self.text()}")

    def wait_exit(self, timeout: float = 15.0) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._t.join(timeout=2)
        return rc

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def post(self, path: str, body: dict, timeout: float = 30.0) -> tuple[int, bytes]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def children(self) -> list[int]:
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    stat = Path(f"/proc/{d}/stat").read_text()
                except OSError:
                    continue
                if int(stat[stat.rindex(")") + 2:].split()[1]) == self.proc.pid:
                    out.append(int(d))
        return out


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class SimEnv:
    """A temporary sim dir (4 GPUs of 96 GB) and model dirs; kills every process of ours at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp / "sim"
        simgpu.write_gpus(str(self.dir), simgpu.default_gpus(4))
        self.models = tmp / "models"
        for name, src in (("qwen", "qwen3.6-27b-like.json"), ("llama", "llama-3.1-8b.json")):
            (self.models / name).mkdir(parents=True)
            shutil.copy(MODELS / src, self.models / name / "config.json")
        self.servers: list[Server] = []

    def env(self, speed: float = 50, **extra: str) -> dict[str, str]:
        e = dict(os.environ)
        for k in ("MTPCONSOLE_SIM_FAULT", "MTPCONSOLE_SIM_WEIGHTS_GB", "CUDA_VISIBLE_DEVICES"):
            e.pop(k, None)
        e.update({"MTPCONSOLE_SIM_DIR": str(self.dir), "MTPCONSOLE_SIM_SPEED": str(speed),
                  "PYTHONPATH": str(REPO)}, **extra)
        return e

    def start(self, model: str, args: list[str], speed: float = 50, **extra: str) -> Server:
        s = Server(self, ["--model-path", str(self.models / model), *args], self.env(speed, **extra))
        self.servers.append(s)
        return s

    def allocs(self) -> list[dict]:
        return simgpu.read_allocs(str(self.dir))

    def our_pids(self) -> list[int]:
        """Every live process whose environment points at this sim dir (ours only)."""
        needle = f"MTPCONSOLE_SIM_DIR={self.dir}".encode()
        pids = []
        for d in os.listdir("/proc"):
            if d.isdigit() and int(d) != os.getpid():
                try:
                    env = Path(f"/proc/{d}/environ").read_bytes()
                except OSError:
                    continue
                if needle in env.split(b"\0"):
                    pids.append(int(d))
        return pids

    def cleanup(self) -> None:
        for s in self.servers:
            if s.proc.poll() is None:
                try:
                    os.killpg(s.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
        for pid in self.our_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for s in self.servers:
            try:
                s.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture
def sim(tmp_path):
    env = SimEnv(tmp_path)
    yield env
    env.cleanup()


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    return wait_until(lambda: not simgpu.pid_alive(pid), timeout)


# ---------------------------------------------------------------- startup


def test_fitting_start_log_health_titles_allocs(sim):
    s = sim.start("qwen", CORRECTED + ["--enable-metrics"], speed=10, CUDA_VISIBLE_DEVICES="2")
    seen_refused = False
    codes: list[int] = []

    def healthy() -> bool:  # every answer kept: refused while loading, then 503, then 200
        nonlocal seen_refused
        try:
            codes.append(s.get("/health", timeout=1)[0])
        except ConnectionRefusedError:
            seen_refused = True
            return False
        return codes[-1] == 200
    wait_until(healthy, 15)
    assert seen_refused, "the port must refuse connections while loading"
    assert codes and codes[0] == 503 and codes[-1] == 200, codes
    s.wait_line("The server is fired up and ready to roll!")
    order = ["Attention backend not specified. Use flashinfer backend by default.",
             "server_args={'model_path': ", "Load weight begin. avail mem=", "Load weight end. elapsed=",
             "KV Cache is allocated. dtype: torch.bfloat16, #tokens: ", "Mamba Cache is allocated. max_mamba_cache_size: ",
             "Memory pool end. avail mem=", "Capture cuda graph begin.", "max_total_num_tokens=",
             f"Uvicorn running on http://127.0.0.1:{s.port} (Press CTRL+C to quit)",
             "The server is fired up and ready to roll!"]
    text = s.text()
    pos = [text.find(n) for n in order]
    assert all(p >= 0 for p in pos) and pos == sorted(pos), list(zip(order, pos))
    assert "'sglang serve' is the recommended entrypoint" in text.split("Attention backend")[0]
    assert "'speculative_algorithm': 'EAGLE'" in text
    for ln in s.lines:
        if "Load weight end" in ln:
            assert ln.startswith("[20") and "mem usage=" in ln and ln.endswith(" GB.")
            break

    kids = s.children()
    titles = {cmdline(p).split(b"\0")[0] for p in kids}
    assert b"sglang::scheduler" in titles and b"sglang::detokenizer" in titles  # tp 1: no _TP0, as real SGLang
    sched = next(p for p in kids if cmdline(p).startswith(b"sglang::scheduler\0"))
    allocs = sim.allocs()
    assert [a["pid"] for a in allocs] == [sched]  # the launcher holds no GPU memory
    a = allocs[0]
    assert a["gpu"] == 2 and a["spec"] is True and a["mem_mib"] > 80 * 1024

    # endpoints
    code, body = s.get("/server_info")
    info = json.loads(body)
    assert code == 200 and info["version"] == "0.5.23" and info["speculative_algorithm"] == "EAGLE"
    st = info["internal_states"][0]
    assert {"last_gen_throughput", "memory_usage", "avg_spec_accept_length"} <= set(st)
    assert json.loads(s.get("/model_info")[1])["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert json.loads(s.get("/v1/models")[1])["data"][0]["id"]
    code, metrics = s.get("/metrics")
    assert code == 200
    for name in ("sglang:gen_throughput", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                 "sglang:spec_accept_length"):
        assert f"{name}{{" in metrics.decode()
    assert 'tp_rank="0"' in metrics.decode()
    assert s.get("/nope")[0] == 404

    os.kill(s.proc.pid, signal.SIGTERM)
    assert s.wait_exit() == 0
    assert sim.allocs() == []
    assert all(wait_gone(p) for p in kids)


def test_incident_config_ooms_like_sglang(sim):
    speed = 20.0
    s = sim.start("qwen", INCIDENT, speed=speed)
    rc = s.wait_exit()
    elapsed = time.monotonic() - s.started
    text = s.text()
    assert rc == -signal.SIGKILL  # kill_process_tree kills the launcher itself
    assert "Scheduler hit an exception: Traceback (most recent call last):" in text
    lines = s.lines
    i = next(k for k, ln in enumerate(lines) if ln.startswith("RuntimeError: "))
    assert lines[i] == "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    assert any(ln.endswith("Received sigquit from a child process. It usually means the child failed.")
               for ln in lines[i + 1:])
    assert "Load weight end." in text and "KV Cache is allocated" not in text
    assert "Uvicorn running" not in text
    # ~10 simulated seconds (init + load + pool), i.e. ~2 s at the default speed 5
    assert elapsed < 10 / speed + 4.0 + RETITLE_S_DEFAULT  # (2 shared cores) + the workers' spawn-then-retitle pause
    assert sim.allocs() == []
    assert wait_until(lambda: sim.our_pids() == [], 10), sim.our_pids()


def test_spec_default_48_warning_and_order(sim):
    s = sim.start("qwen", ["--mem-fraction-static", "0.80", *EAGLE_314], speed=50)
    rc = s.wait_exit()
    text = s.text()
    warn = "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests."
    assert warn in text
    assert text.index(warn) < text.index("server_args={")
    assert "'max_running_requests': 48" in text
    assert rc != 0 and "Not enough memory" in text  # 48 at 0.80 also OOMs, as in the incident


@pytest.mark.parametrize("argv,message", [
    (["--bogus-flag", "1"], "sglang serve: error: unrecognized arguments: --bogus-flag 1"),
    (["--cuda-graph-max-bs", "512"],
     "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"),
    (["--mamba-scheduler-strategy", "extra_buffer"],
     "sglang serve: error: unrecognized arguments: --mamba-scheduler-strategy extra_buffer"),
])
def test_bad_flags_exit_2_like_argparse(sim, argv, message):
    r = subprocess.run([sys.executable, "-m", "console.sim.sglang", "--model-path", str(sim.models / "qwen"), *argv],
                       cwd=str(REPO), env=sim.env(), capture_output=True, timeout=30)
    assert r.returncode == 2
    assert r.stderr.decode().rstrip("\n").splitlines()[-1] == message
    assert r.stderr.decode().startswith("usage: sglang serve [-h] --model-path MODEL_PATH")


def test_missing_model_path_fails_like_sglang(sim, tmp_path):
    r = subprocess.run([sys.executable, "-m", "console.sim.sglang", "--model-path", str(tmp_path / "nope")],
                       cwd=str(REPO), env=sim.env(), capture_output=True, timeout=30)
    assert r.returncode == 1
    last = r.stderr.decode().rstrip().splitlines()[-1]
    assert last.startswith("OSError: Can't load the configuration of") and "config.json" in last


# ---------------------------------------------------------------- serving


def _timed_completion(s: Server, n: int) -> float:
    t0 = time.monotonic()
    code, body = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": n})
    assert code == 200, body
    assert json.loads(body)["usage"]["completion_tokens"] == n
    return time.monotonic() - t0


def test_eagle_tokens_flow_about_3x_and_metrics_404(sim):
    plain = sim.start("llama", ["--mem-fraction-static", "0.85"], speed=50)
    spec = sim.start("llama", ["--mem-fraction-static", "0.85", "--max-running-requests", "16", *EAGLE_314,
                               "--speculative-draft-model-path", "/models/eagle-head", "--enable-metrics"],
                     speed=50, CUDA_VISIBLE_DEVICES="1")
    plain.wait_line("ready to roll")
    spec.wait_line("ready to roll")
    assert plain.get("/metrics")[0] == 404
    t_plain = _timed_completion(plain, 27)
    t_spec = _timed_completion(spec, 27)
    ratio = t_plain / t_spec
    assert 2.0 < ratio < 4.5, (t_plain, t_spec)
    assert 0.7 < t_plain < 1.6  # ~27 tok/s per request
    # streaming works and reports usage
    c = http.client.HTTPConnection("127.0.0.1", spec.port, timeout=10)
    c.request("POST", "/v1/completions", body=json.dumps({"prompt": "x", "max_tokens": 9, "stream": True}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    events = [ln for ln in r.read().decode().split("\n\n") if ln.startswith("data: ")]
    c.close()
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-2][6:])["usage"]["completion_tokens"] == 9
    st = json.loads(spec.get("/server_info")[1])["internal_states"][0]
    assert st["avg_spec_accept_length"] == pytest.approx(3.0, abs=0.1)
    assert 'sglang:spec_accept_length{' in spec.get("/metrics")[1].decode()
    assert any('"POST /v1/chat/completions HTTP/1.1" 200 OK' in ln and "INFO:     127.0.0.1:" in ln
               for ln in spec.lines)
    # bad request bodies get clear errors
    assert spec.post("/v1/chat/completions", {"messages": []})[0] == 400
    c = http.client.HTTPConnection("127.0.0.1", spec.port, timeout=5)
    c.request("POST", "/v1/chat/completions", body=b"\xff{not json", headers={"Content-Type": "application/json"})
    assert c.getresponse().status == 400
    c.close()


def test_queue_beyond_max_running_and_decode_log(sim):
    s = sim.start("llama", ["--mem-fraction-static", "0.85", "--max-running-requests", "2"], speed=50)
    s.wait_line("ready to roll")
    results: list[float] = []
    threads = [threading.Thread(target=lambda: results.append(_timed_completion(s, 20))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert len(results) == 4
    # two run at once, two wait: the last ones take about twice as long
    assert max(results) > 1.6 * min(results)
    line = s.wait_line("Decode batch, #running-req: ")
    assert "cuda graph: True, gen throughput (token/s): " in line and "#queue-req: " in line
    assert "Prefill batch, #new-seq: " in s.text()


def test_sigterm_drains_after_first_request(sim):
    s = sim.start("llama", ["--mem-fraction-static", "0.85"], speed=10)
    s.wait_line("ready to roll")
    sched = [p for p in s.children() if cmdline(p).startswith(b"sglang::scheduler")]
    out: dict = {}

    def long_request() -> None:
        out["r"] = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 20})

    def running() -> int:
        return json.loads(s.get("/server_info")[1])["internal_states"][0]["num_running_reqs"]

    t = threading.Thread(target=long_request)
    t.start()
    assert wait_until(lambda: running() >= 1, 10), "the request should be running before the SIGTERM"
    os.kill(s.proc.pid, signal.SIGTERM)
    s.wait_line("SIGTERM received.")
    assert "Draining requests and shutting down..." in s.wait_line("SIGTERM received.")
    try:
        assert s.get("/health", timeout=1)[0] == 503
    except ConnectionRefusedError:
        pass
    t.join(timeout=10)
    assert out["r"][0] == 200
    assert s.wait_exit() == 0
    assert sim.allocs() == []
    assert all(wait_gone(p) for p in sched)


def test_sigterm_while_loading_dies_at_once(sim):
    s = sim.start("llama", ["--mem-fraction-static", "0.85"], speed=2)
    s.wait_line("Load weight begin.")
    kids = s.children()
    assert kids
    os.kill(s.proc.pid, signal.SIGTERM)
    assert s.wait_exit(timeout=5) == -signal.SIGTERM
    assert all(wait_gone(p) for p in kids)  # PR_SET_PDEATHSIG


def test_ignore_sigterm_fault(sim):
    s = sim.start("llama", ["--mem-fraction-static", "0.85"], speed=50, MTPCONSOLE_SIM_FAULT="ignore_sigterm")
    s.wait_line("ready to roll")
    os.killpg(s.proc.pid, signal.SIGTERM)
    assert holds_for(lambda: s.proc.poll() is None, 0.5), "SIGTERM is ignored: the server keeps running"
    assert s.get("/health")[0] == 200


def test_orphan_fault_keeps_gpu_memory_and_next_launch_ooms(sim):
    s = sim.start("qwen", CORRECTED, speed=50, MTPCONSOLE_SIM_FAULT="orphan")
    s.wait_line("ready to roll")
    sched = next(p for p in s.children() if cmdline(p).startswith(b"sglang::scheduler\0"))
    os.killpg(s.proc.pid, signal.SIGKILL)  # a process-group kill, as a careful operator would do
    s.wait_exit()
    assert holds_for(lambda: simgpu.pid_alive(sched), 0.5), "the orphaned scheduler escaped the group and survives"
    assert cmdline(sched).startswith(b"sglang::scheduler\0")
    held = [a for a in sim.allocs() if a["pid"] == sched]
    assert held and held[0]["mem_mib"] > 80 * 1024
    # the next launch on the same GPU finds the memory taken and fails at memory-pool init
    nxt = sim.start("qwen", CORRECTED, speed=50)
    assert nxt.wait_exit() != 0
    assert "Not enough memory" in nxt.text() or "Loaded weights leave no GPU memory" in nxt.text() \
        or "CUDA out of memory" in nxt.text()


def pin_numbers(sim: "SimEnv", **numbers: int) -> None:
    """Give every simulated GPU the stand-in's memory numbers (gpus.json's optional fields)."""
    simgpu.write_gpus(str(sim.dir), [{**g, **numbers} for g in simgpu.default_gpus(4)])


def test_the_gpu_files_numbers_decide_out_of_memory(sim):
    """The stand-in sizes memory from the GPU file's numbers when it has them (never from the console's planner):
    the same flags fit or fail by what gpus.json says a rank takes."""
    pin_numbers(sim, weights_mib=97_500)  # the weights alone exceed the GPU: torch fails while loading
    s = sim.start("qwen", CORRECTED, speed=50)
    assert s.wait_exit() != 0
    assert "torch.OutOfMemoryError: CUDA out of memory." in s.text() and "Load weight end." not in s.text()

    pin_numbers(sim, weights_mib=20_000, mamba_bytes_per_slot=1 << 20, kv_bytes_per_token=65536)
    s = sim.start("qwen", INCIDENT, speed=50)  # the incident's 512 requests fit when a slot takes 1 MiB
    s.wait_line("ready to roll")
    assert "mem usage=19.53 GB." in s.wait_line("Load weight end.")
    assert "max_mamba_cache_size: 4608," in s.wait_line("Mamba Cache is allocated.")
    os.killpg(s.proc.pid, signal.SIGTERM)
    assert s.wait_exit() == 0

    with pytest.raises(ValueError, match="'weights_mib' must be a non-negative integer"):
        pin_numbers(sim, weights_mib=-1)
        simgpu.read_gpus(str(sim.dir))


def test_tp2_rank_prefixes_and_two_gpus(sim):
    s = sim.start("llama", ["--mem-fraction-static", "0.85", "--tp-size", "2"], speed=50, CUDA_VISIBLE_DEVICES="2,3")
    s.wait_line("ready to roll")
    assert s.wait_line("Load weight begin.").split("]")[0].endswith(" TP0") or \
        any(" TP1] Load weight begin." in ln for ln in s.lines)
    assert any(" TP1] Load weight begin." in ln for ln in s.lines)
    titles = sorted(t for t in (cmdline(p).split(b"\0")[0] for p in s.children()) if t.startswith(b"sglang::"))
    assert titles == [b"sglang::detokenizer", b"sglang::scheduler_TP0", b"sglang::scheduler_TP1"]
    assert sorted(a["gpu"] for a in sim.allocs()) == [2, 3]


def test_simgpu_stale_alloc_and_power_model(tmp_path):
    d = str(tmp_path)
    simgpu.write_gpus(d, simgpu.default_gpus(1))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    simgpu.write_alloc(d, dead.pid, 0, 5000, 0.5, True)
    first = simgpu.reap_stale_allocs(d, now=100.0)
    assert first and first[0]["dead_since"] == 100.0  # memory still held right after death
    assert simgpu.reap_stale_allocs(d, now=100.1)
    assert simgpu.reap_stale_allocs(d, now=100.3) == []  # freed ~0.15 s after death, as on the H200
    simgpu.write_alloc(d, os.getpid(), 0, 1000, 1.0, True)
    g = simgpu.sample_gpus(d)[0]
    assert g["mem_used_mib"] >= 1000 and 540 <= g["power_w"] <= 600
    assert 380 <= simgpu.power_w(1.0, False) <= 420
    assert 76 <= simgpu.power_w(0.0, True) <= 84
    assert 118 <= simgpu.power_w(0.0, False, holders=1) <= 128
    ramp = simgpu.PowerRamp()
    assert ramp.step(0, 80.0, 0.0) == 80.0
    assert 600 < ramp.step(0, 690.0, 1.0) < 690  # ~1 s to the cap
    assert 83 < ramp.step(0, 80.0, 2.0) < 400 and ramp.step(0, 80.0, 5.0) < 120  # ~3 s back down
    assert simgpu.physical_gpu(1, "3,1") == 1
    simgpu.remove_alloc(d, os.getpid())
    assert simgpu.read_allocs(d) == []


# ------------------------------------------------------------------ the real package's contract


def test_parser_is_generated_from_the_real_schema():
    """Every real flag, alias and choice, hidden ones included; argparse's own messages (issue 14)."""
    import contextlib
    import io

    from console.sim.sglang import build_parser

    p = build_parser()
    assert p.prog == "sglang serve" and len([a for a in p._actions if a.option_strings]) == 532
    ns = p.parse_args(["--model", "/m", "--device", "cpu", "--forward-pass-metrics-worker-id", "w",
                       "--max-running", "64", "--no-enable-tf32-matmul", "--context-length", "128k"])
    assert (ns.device, ns.max_running_requests, ns.enable_tf32_matmul, ns.context_length) == ("cpu", 64, False, 128000)
    err = io.StringIO()
    with pytest.raises(SystemExit) as e, contextlib.redirect_stderr(err):
        p.parse_args(["--model", "/m", "--attention-backend", "bogus"])
    assert e.value.code == 2
    last = err.getvalue().strip().splitlines()[-1]
    assert last.startswith("sglang serve: error: argument --attention-backend: invalid choice: 'bogus' (choose from ")


def test_workers_start_as_spawn_children_then_retitle(sim):
    """Like SGLang's: a multiprocessing 'spawn' command line first, the title later, a resource tracker beside."""
    s = sim.start("llama", ["--mem-fraction-static", "0.85"], speed=50, MTPCONSOLE_SIM_RETITLE_S="3")

    def spawned() -> list[bytes]:
        return [c for c in (cmdline(p) for p in s.children()) if b"--multiprocessing-fork" in c]

    early = wait_until(lambda: len(spawned()) >= 2 and spawned(), 10)
    assert early and all(b"-c\0from multiprocessing.spawn import spawn_main;" in c for c in early), early
    assert wait_until(lambda: any(b"multiprocessing.resource_tracker" in cmdline(p) for p in s.children()), 10)
    s.wait_line("ready to roll", timeout=30)
    sched = [cmdline(p) for p in s.children() if cmdline(p).startswith(b"sglang::scheduler")]
    assert len(sched) == 1
    argv = sched[0].split(b"\0")
    assert argv[0] == b"sglang::scheduler" and len(argv) > 3 and set(argv[1:]) == {b""}  # NUL padding, as setproctitle


def test_titles_follow_tp_and_dp():
    from console.sim.sglang import scheduler_title

    assert scheduler_title(0, 1, 1) == "sglang::scheduler"
    assert [scheduler_title(r, 2, 1) for r in (0, 1)] == ["sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    assert [scheduler_title(r, 1, 2) for r in (0, 1)] == ["sglang::scheduler_DP0_TP0", "sglang::scheduler_DP1_TP0"]
