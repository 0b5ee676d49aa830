"""The built-in demo host: the incident staged on simulated GPUs, through the real code paths.

``demo_environment()`` creates a temporary directory with 4 simulated RTX PRO 6000
Blackwell GPUs, a hybrid 27B model's config.json, a runs directory, and a server started
"by hand" on GPU 0 (FOREIGN: no speculative decoding, ~400 W, its log in a legacy file),
and yields a config whose ``demo`` host is local, samples the simulated GPUs and launches
the SGLang stand-in — the same agent, supervisor and lifecycle code as a real host. Two
profiles are ready for the relaunch: the incident's flags (does not fit) and a fixed one.
Everything is removed on exit, Ctrl-C included, and no process is left behind.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import AsyncIterator

from console.config import Config, HostConfig, Profile

GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
N_GPUS = 4

# A Qwen3.6-27B-like hybrid (3 of 4 layers linear attention, one MTP layer): our own numbers.
MODEL_CONFIG = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen3_5_text", "hidden_size": 5120, "num_hidden_layers": 64, "full_attention_interval": 4,
        "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256, "intermediate_size": 18944,
        "vocab_size": 248320, "max_position_embeddings": 262144, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4, "mtp_num_hidden_layers": 1,
    },
}

INCIDENT_FLAGS = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                  "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
                  "--mem-fraction-static", "0.90", "--enable-hierarchical-cache", "--hicache-size", "200",
                  "--max-running-requests", "512", "--cuda-graph-max-bs-decode", "512",
                  "--mamba-radix-cache-strategy", "extra_buffer", "--context-length", "32768",
                  "--enable-metrics"]
FIXED_FLAGS = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
               "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
               "--mem-fraction-static", "0.90", "--max-running-requests", "16",
               "--mamba-radix-cache-strategy", "extra_buffer", "--context-length", "32768", "--enable-metrics"]
FOREIGN_FLAGS = ["--mem-fraction-static", "0.85", "--max-running-requests", "32", "--context-length", "32768",
                 "--enable-metrics"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stage(root: Path, *, speed: float = 5.0, port: int = 30000) -> tuple[Config, subprocess.Popen]:
    """Create the demo's files and start the hand-launched server on ``port``; return the config and it."""
    sim, runs, model, logs = root / "sim", root / "runs", root / "models" / "Qwen3.6-27B", root / "logs"
    for d in (sim / "alloc", runs, model, logs):
        d.mkdir(parents=True, exist_ok=True)
    (sim / "gpus.json").write_text(json.dumps([
        {"index": i, "uuid": f"GPU-demo-{i:04d}", "name": GPU_NAME, "mem_total_mib": 97887, "power_limit_w": 600.0}
        for i in range(N_GPUS)]))
    (model / "config.json").write_text(json.dumps(MODEL_CONFIG, indent=1))
    env = {"MTPCONSOLE_SIM_DIR": str(sim), "MTPCONSOLE_SIM_SPEED": str(speed)}
    command = [sys.executable, "-m", "console.sim.sglang"]
    host = HostConfig(transport="local", python=sys.executable, runs_dir=str(runs), gpu_source="sim",
                      sim_dir=str(sim), server_command=command, launch_env=env)
    common = dict(host="demo", model_path=str(model), gpus=[0], port=free_port())
    cfg = Config(hosts={"demo": host}, profiles={
        "incident": Profile(**common, flags=INCIDENT_FLAGS,
                            description="the incident's relaunch: EAGLE 3/1/4, 512 running, 0.90 — does not fit"),
        "fixed": Profile(**common, flags=FIXED_FLAGS,
                         description="EAGLE 3/1/4 with 16 running requests: fits"),
    })
    # The server started "by hand" with nohup, as in the incident: no session, a legacy log.
    log = open(logs / "sglang_gpu0.log", "ab")
    src_root = str(Path(__file__).resolve().parents[2])
    foreign = subprocess.Popen(
        command + ["--model-path", str(model), "--port", str(port), *FOREIGN_FLAGS],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(root),
        env={**os.environ, **env, "CUDA_VISIBLE_DEVICES": "0",
             "PYTHONPATH": os.pathsep.join(filter(None, [src_root, os.environ.get("PYTHONPATH")]))})
    log.close()
    return cfg, foreign


def teardown(root: Path, foreign: subprocess.Popen | None) -> None:
    """Kill everything the demo started (by recorded process groups and sim holders), remove its files."""
    groups = set()
    if foreign is not None:
        groups.add(foreign.pid)
    for rec in (root / "runs").glob("*/record.json"):
        try:
            r = json.loads(rec.read_text())
            groups.add(int(r["pgid"]))
            groups.add(int(r["supervisor_pid"]))
        except (OSError, ValueError, KeyError):
            pass
    for alloc in (root / "sim" / "alloc").glob("*.json"):
        try:
            groups.add(int(json.loads(alloc.read_text())["pid"]))
        except (OSError, ValueError, KeyError):
            pass
    for g in groups:
        for fn in (os.killpg, os.kill):
            try:
                fn(g, signal.SIGKILL)
            except OSError:
                pass
    if foreign is not None:
        try:
            foreign.wait(5)
        except subprocess.TimeoutExpired:
            pass
    _kill_env_marked(str(root))
    shutil.rmtree(root, ignore_errors=True)


def _kill_env_marked(root: str) -> None:
    """Any process whose environment points at this demo's sim dir (orphans included)."""
    marker = f"MTPCONSOLE_SIM_DIR={root}/sim".encode()
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if marker in f.read():
                    os.kill(int(name), signal.SIGKILL)
        except OSError:
            continue


BACKGROUND_NICE = 10
"""CPU priority of the demo's own stand-ins while the TUI runs in front of them (see :func:`in_background`)."""


def in_background(pid: int) -> None:
    """Lower the CPU priority of a demo stand-in started in its own session (best effort): its nice value
    and its session's autogroup's (the kernel shares the CPU between sessions first, so a process's nice
    alone would not yield to the console). The hand-started server's start costs about a core-second; on a
    small machine the console's own start, which shows its first sample, goes first."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, BACKGROUND_NICE)
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(BACKGROUND_NICE))
    except OSError:  # no autogroups in this kernel, or not allowed: the nice value is what it gets
        pass


def start_load(root: Path, port: int) -> subprocess.Popen:
    """Keep the hand-launched server busy (bounded, 127.0.0.1 only) so its power and throughput move."""
    return subprocess.Popen(
        [sys.executable, "-m", "console", "load", "--port", str(port), "--concurrency", "40",
         "--duration", "3600", "--max-tokens", "512"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        cwd=str(root), env={**os.environ, "MTPCONSOLE_SIM_DIR": str(root / "sim")})


@contextlib.asynccontextmanager
async def demo_environment(*, load: bool = True, background: bool = False) -> AsyncIterator[tuple[Config, list[str]]]:
    """Stage the demo, yield (config, ["demo"]), and always tear it down (signals included).

    ``load``: keep the hand-started server busy with a bounded load generator.
    ``background``: yield as soon as the files exist and the hand-started server is spawned (the TUI's
    first frame then shows the simulated GPUs at their first sample, the server coming up on GPU 0);
    waiting for it to serve and starting the load go on in the background, and both run at a lower CPU
    priority (:func:`in_background`). Without it (the CLI), the server is serving (and loaded) when the
    config is yielded.
    """
    root = Path(tempfile.mkdtemp(prefix="mtpconsole-demo-"))
    procs: list[subprocess.Popen] = []
    staging: asyncio.Future | None = None
    done = {"torn": False}

    def cleanup() -> None:
        if not done["torn"]:
            done["torn"] = True
            for p in procs[1:]:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
            teardown(root, procs[0] if procs else None)

    def on_signal(signum, frame):  # terminal closed or killed: leave nothing behind, then go
        cleanup()
        os._exit(128 + signum)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            previous[sig] = signal.signal(sig, on_signal)
        except ValueError:  # not the main thread
            pass
    atexit.register(cleanup)
    try:
        port = 30000 if _port_free(30000) else free_port()  # two demos may run side by side
        cfg, foreign = stage(root, port=port)
        procs.append(foreign)
        if background:
            in_background(foreign.pid)
        # we are its parent: reap it when it dies (killed from the console), so no zombie lingers
        threading.Thread(target=foreign.wait, name="demo-reaper", daemon=True).start()
        if background:
            staging = asyncio.ensure_future(_serve_then_load(root, foreign, port, load, procs, done))
        else:
            await _wait_serving(foreign, port, timeout=30)
            if load:
                procs.append(start_load(root, port))
        yield cfg, ["demo"]
    finally:
        if staging is not None:
            staging.cancel()
        cleanup()
        atexit.unregister(cleanup)
        for sig, prev in previous.items():
            signal.signal(sig, prev)


async def _serve_then_load(root: Path, foreign: subprocess.Popen, port: int, load: bool,
                           procs: list[subprocess.Popen], done: dict) -> None:
    """Background staging: once the hand-started server serves, start its load (unless torn down meanwhile)."""
    await _wait_serving(foreign, port, timeout=30)
    if load and not done["torn"] and foreign.poll() is None:
        procs.append(start_load(root, port))
        in_background(procs[-1].pid)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


async def _wait_serving(foreign: subprocess.Popen, port: int, timeout: float) -> None:
    """Wait until the hand-launched server answers /health with 200 (it then holds its GPU memory)."""
    import http.client

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and foreign.poll() is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        try:
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        await asyncio.sleep(0.2)
