"""The built-in demo host: the incident staged on simulated GPUs, through the real code paths.

``demo_environment()`` creates a temporary directory with 4 simulated RTX PRO 6000
Blackwell GPUs, a hybrid 27B model's config.json, a runs directory, and a server started
"by hand" on GPU 0 (FOREIGN: no speculative decoding, ~400 W, its log in a legacy file),
and yields a config whose ``demo`` host is local, samples the simulated GPUs and launches
the SGLang stand-in — the same agent, supervisor and lifecycle code as a real host. Two
profiles are ready for the relaunch: the incident's flags (does not fit) and a fixed one.
Everything is removed on exit, Ctrl-C included, and no process is left behind.

``demo_environment`` is the demo of one process (the TUI's own, tests, benchmarks); the demo that ``--demo``
commands share between calls is console/sim/persistent.py, staged with the same :func:`stage` and removed with
the same :func:`teardown`. :func:`demo_facts` is the demo host without any server (``check``/``flags --demo``).
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
from typing import AsyncIterator, Iterator

from console.config import Config, HostConfig, Profile
from console.host import hostlib, ports

GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
GPU_MEM_MIB = 97887
"""The memory of one demo GPU (a 96 GB card as NVML reports it)."""
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
    """A free loopback port outside the ephemeral range (``console.host.ports``: no outgoing connection takes it)."""
    p = ports.listen_port(host="127.0.0.1")
    if p is None:
        raise OSError("no free TCP port on 127.0.0.1")
    return p


def model_dir(root: Path) -> Path:
    """Where the demo at ``root`` keeps its model (only its config.json: the stand-in loads nothing)."""
    return root / "models" / "Qwen3.6-27B"


def stage_files(root: Path, *, speed: float = 5.0) -> Config:
    """Create the demo's files under ``root`` (the simulated GPUs, the model's config.json, a runs directory) and
    return the config of its ``demo`` host and profiles; nothing is started."""
    sim, runs, model, logs = root / "sim", root / "runs", model_dir(root), root / "logs"
    for d in (sim / "alloc", runs, model, logs):
        d.mkdir(parents=True, exist_ok=True)
    (sim / "gpus.json").write_text(json.dumps([
        {"index": i, "uuid": f"GPU-demo-{i:04d}", "name": GPU_NAME, "mem_total_mib": GPU_MEM_MIB, "power_limit_w": 600.0}
        for i in range(N_GPUS)]))
    (model / "config.json").write_text(json.dumps(MODEL_CONFIG, indent=1))
    env = {"MTPCONSOLE_SIM_DIR": str(sim), "MTPCONSOLE_SIM_SPEED": str(speed)}
    command = [sys.executable, "-m", "console.sim.sglang"]
    host = HostConfig(transport="local", python=sys.executable, runs_dir=str(runs), gpu_source="sim",
                      sim_dir=str(sim), server_command=command, launch_env=env)
    common = dict(host="demo", model_path=str(model), gpus=[0], port=free_port())
    return Config(hosts={"demo": host}, profiles={
        "incident": Profile(**common, flags=INCIDENT_FLAGS,
                            description="the incident's relaunch: EAGLE 3/1/4, 512 running, 0.90 — does not fit"),
        "fixed": Profile(**common, flags=FIXED_FLAGS,
                         description="EAGLE 3/1/4 with 16 running requests: fits"),
    })


def stage(root: Path, *, speed: float = 5.0, port: int = 30000) -> tuple[Config, subprocess.Popen]:
    """Create the demo's files and start the hand-launched server on ``port``; return the config and it."""
    cfg = stage_files(root, speed=speed)
    host = cfg.host("demo")
    command, env, model = list(host.server_command), dict(host.launch_env), str(model_dir(root))
    # The server started "by hand" with nohup, as in the incident: no session, a legacy log.
    log = open(root / "logs" / "sglang_gpu0.log", "ab")
    foreign = subprocess.Popen(
        command + ["--model-path", model, "--port", str(port), *FOREIGN_FLAGS],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(root),
        env={**os.environ, **env, "CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": python_path()})
    log.close()
    return cfg, foreign


def python_path() -> str:
    """``$PYTHONPATH`` with this checkout's source first: a process the demo starts imports this console."""
    src_root = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join(filter(None, [src_root, os.environ.get("PYTHONPATH")]))


def process_state(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, start ticks) of ``pid``, read by the agent's own /proc reader, or None when gone."""
    st = hostlib.proc_stat(pid)
    return None if st is None else (st["state"], st["pgid"], st["start_ticks"])


def same_process(pid: int, start_ticks: int | None) -> bool:
    """``pid`` is alive (not a zombie) and is the process that started at ``start_ticks`` (not a reused pid)."""
    st = process_state(pid)
    return st is not None and st[0] not in ("Z", "X") and start_ticks is not None and st[2] == start_ticks


def marker(root: Path) -> bytes:
    """What the environment of every process the demo at ``root`` starts carries: its own sim directory."""
    return f"MTPCONSOLE_SIM_DIR={root}/sim".encode()


def _recorded(root: Path) -> list[tuple[int, int | None]]:
    """(pid, start ticks) the demo's files record: each session's server and supervisor, each GPU memory holder."""
    out: list[tuple[int, int | None]] = []
    for rec in (root / "runs").glob("*/record.json"):
        try:
            r = json.loads(rec.read_text())
            out.append((int(r["pid"]), r.get("start_ticks")))
            out.append((int(r["supervisor_pid"]), r.get("supervisor_start_ticks")))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    for alloc in (root / "sim" / "alloc").glob("*.json"):
        try:
            a = json.loads(alloc.read_text())
            out.append((int(a["pid"]), a.get("start_ticks")))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return out


def own_processes(root: Path, foreign: subprocess.Popen | None = None) -> dict[int, int]:
    """pid -> process group of every live process that is the demo's own: its environment carries
    :func:`marker` (the demo and everything it launches set it), or the demo's files record it with the start
    time it still has, or it is the demo's hand-started server not yet reaped (``foreign``). Never this process."""
    me, mark = os.getpid(), marker(root)
    own: dict[int, int] = {}
    candidates = [(pid, ticks) for pid, ticks in _recorded(root) if same_process(pid, ticks)]
    if foreign is not None and foreign.poll() is None:  # our unreaped child: its pid cannot have been reused
        st = process_state(foreign.pid)
        if st is not None:
            candidates.append((foreign.pid, st[2]))
    for pid, _ in candidates:
        st = process_state(pid)
        if st is not None and pid != me:
            own[pid] = st[1]
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me or int(name) in own:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if mark not in f.read():
                    continue
        except OSError:
            continue
        st = process_state(int(name))
        if st is not None and st[0] not in ("Z", "X"):
            own[int(name)] = st[1]
    return own


def teardown(root: Path, foreign: subprocess.Popen | None) -> list[int]:
    """Kill everything the demo started (:func:`own_processes`, with the process group each of them leads) and
    remove its files; return the pids signalled. A pid reused by another process since is left alone."""
    signalled: list[int] = []
    for _ in range(5):  # a process forked while the others were killed is caught on the next pass
        own = own_processes(root, foreign)
        if not own:
            break
        for pid, pgid in own.items():
            try:
                if pgid == pid:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
                signalled.append(pid)
            except OSError:
                pass
        if foreign is not None:
            try:
                foreign.wait(5)
            except subprocess.TimeoutExpired:
                pass
        time.sleep(0.05)
    shutil.rmtree(root, ignore_errors=True)
    return sorted(set(signalled))


@contextlib.contextmanager
def demo_facts() -> Iterator[tuple[Config, list[str]]]:
    """The demo host without any server: its files (simulated GPUs, model config, runs directory) in a temporary
    directory, removed on exit, and its config — what ``check``/``flags --demo`` need (the stand-in's ``--help``,
    run by the agent like any host's)."""
    root = Path(tempfile.mkdtemp(prefix="mtpconsole-demo-"))
    try:
        yield stage_files(root), ["demo"]
    finally:
        teardown(root, None)


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
        port = 30000 if port_free(30000) else free_port()  # two demos may run side by side
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


def port_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:``port``."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def serving(port: int) -> bool:
    """The server on 127.0.0.1:``port`` answers /health with 200 (the hand-started one then holds its GPU memory)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


async def _wait_serving(foreign: subprocess.Popen, port: int, timeout: float) -> None:
    """Wait until the hand-launched server is :func:`serving` (or dies, or ``timeout`` s pass)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and foreign.poll() is None:
        if serving(port):
            return
        await asyncio.sleep(0.2)
