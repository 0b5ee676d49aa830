#!/usr/bin/env python3
"""Validate mtpconsole's agent and lifecycle on a real NVIDIA GPU, through the console's own CLI.

Run from anywhere on a host with an NVIDIA GPU, torch and nvidia-ml-py (and pydantic for the
console)::

    python3 tests/gpu/validate.py --out /tmp/gv-out [--budget 330] [--gpu 0] [--port 30000]

What it does, in order (each step bounded; optional steps are skipped when the budget runs low):

1. environment: Python, torch, nvidia-ml-py, pydantic, driver, kernel;
2. ``status --json`` at idle (NVML) against ``nvidia-smi --query-gpu=...`` polled around it;
3. ``launch --host local --gpu G --wait --json`` of ``tests/gpu/gpu_load.py`` (``--mem-gb``, duty 1.0),
   then ``status`` several times (power rising, memory attributed to the session's pid), the same
   through ``gpu_source = "nvidia-smi"`` and through ``auto`` with pynvml made unimportable, and
   ``sessions --json``;
4. the agent's cost per tick: ``NvmlGpus().sample()``, each NVML call, ``SmiGpus.sample()``,
   ``Agent.scan_procs`` and ``Agent.take_sample`` timed in this process, with the load running;
5. ``kill --json`` while a 20 Hz NVML trace (with the process's /proc state) records when the pid
   leaves the driver's list and when memory returns, then how power decays;
6. launches holding 8 GiB at duty 0 (a CUDA context, no kernels) and at duty 0.3, each killed;
7. a launch with ``--oom`` (really exhausts GPU memory): the result must be ``gpu_oom``;
8. idle ``status`` again.

Results go to ``OUT/results.json`` (written after every step), the audit log to
``OUT/audit.jsonl`` and the session run directories to ``OUT/runs.tar.gz``. Dry run without a
GPU (fake NVML and nvidia-smi, the load with ``--no-gpu``)::

    PATH=tests/gpu/fake_nvml:$PATH PYTHONPATH=tests/gpu/fake_nvml python3 tests/gpu/validate.py --no-gpu \
        --out /tmp/gv-dry --port 38555
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOAD = REPO / "tests" / "gpu" / "gpu_load.py"
SMI_FIELDS = "index,power.draw,power.limit,memory.used,memory.total,utilization.gpu,temperature.gpu"
SMI_EXTRA = "power.draw.average,power.draw.instant,memory.reserved,clocks.sm"


def say(msg: str) -> None:
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


class Run:
    """Paths, budget and the results dict (flushed to disk after every step)."""

    def __init__(self, args) -> None:
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(args.work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.runs_dir = self.work / "runs"
        self.t_start = time.monotonic()
        self.results: dict = {"started_at": time.time(), "steps": {}}
        self.block_dir = self.work / "block-pynvml"
        self.block_dir.mkdir(exist_ok=True)
        (self.block_dir / "pynvml.py").write_text('raise ImportError("pynvml blocked for the fallback test")\n')
        self.cfgs = {}
        for name, source in (("nvml", "nvml"), ("smi", "nvidia-smi"), ("auto", "auto")):
            p = self.work / ("cfg-%s.toml" % name)
            p.write_text('[hosts.local]\npython = %s\nruns_dir = %s\ngpu_source = "%s"\n' % (
                json.dumps(sys.executable), json.dumps(str(self.runs_dir)), source))
            self.cfgs[name] = str(p)

    def left(self) -> float:
        return self.args.budget - (time.monotonic() - self.t_start)

    def save(self, key: str, value) -> None:
        self.results["steps"][key] = value
        self.results["elapsed_s"] = round(time.monotonic() - self.t_start, 1)
        tmp = self.out / "results.json.tmp"
        tmp.write_text(json.dumps(self.results, indent=1, default=str))
        tmp.replace(self.out / "results.json")

    def console(self, argv: list, cfg: str = "nvml", timeout: float = 60.0, block_pynvml: bool = False) -> dict:
        """Run ``python -m console ARGV --config CFG`` from the repo root; JSON-decode stdout if possible."""
        env = dict(os.environ)
        pp = [str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        if block_pynvml:
            pp.insert(0, str(self.block_dir))
        env["PYTHONPATH"] = os.pathsep.join(pp)
        env["MTPCONSOLE_AUDIT_LOG"] = str(self.out / "audit.jsonl")
        env["PYTHONUNBUFFERED"] = "1"
        full = [sys.executable, "-m", "console"] + argv[:1] + ["--config", self.cfgs[cfg]] + argv[1:]
        t0 = time.time()
        try:
            p = subprocess.run(full, cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=timeout, check=False)
            rc, so, se = p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired as e:
            rc, so, se = "timeout", (e.stdout or b"").decode("utf-8", "replace"), (e.stderr or b"").decode()
        t1 = time.time()
        try:
            data = json.loads(so)
        except ValueError:
            data = None
        shown = " ".join(shlex.quote(a) for a in ["python3", "-m", "console"] + argv[:1]
                         + ["--config", Path(self.cfgs[cfg]).name] + argv[1:])
        say("$ %s%s -> rc=%s in %.2f s" % ("PYTHONPATH=<block-pynvml>:... " if block_pynvml else "", shown, rc,
                                            t1 - t0))
        if data is None:
            print(so[-3000:], se[-3000:], flush=True)
        if se.strip():
            say("  stderr: %s" % se.strip()[-300:].replace("\n", " | "))
        return {"argv": shown, "rc": rc, "t0": t0, "t1": t1, "json": data,
                "stdout": None if data is not None else so[-4000:], "stderr": se[-4000:]}


# ------------------------------------------------------------------ nvidia-smi and NVML probes

def smi_query(fields: str, gpu: int) -> dict:
    t0 = time.time()
    try:
        p = subprocess.run(["nvidia-smi", "-i", str(gpu), "--query-gpu=" + fields, "--format=csv,noheader,nounits"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10, check=False)
        text = p.stdout.decode("utf-8", "replace").strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        text = "error: %s" % e
    t1 = time.time()
    return {"t": round((t0 + t1) / 2, 3), "dt_ms": round((t1 - t0) * 1000, 1),
            "values": dict(zip(fields.split(","), [c.strip() for c in text.split(",")])), "raw": text}


class SmiPoller:
    """Poll nvidia-smi in a thread while something else runs; pick the reading nearest a time."""

    def __init__(self, gpu: int) -> None:
        self.gpu, self.rows, self.stop = gpu, [], threading.Event()
        self.th = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        for _ in range(600):
            self.rows.append(smi_query(SMI_FIELDS + "," + SMI_EXTRA, self.gpu))
            if self.stop.wait(0.15):
                return

    def __enter__(self):
        self.th.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.th.join(15)

    def nearest(self, t: float) -> dict | None:
        return min(self.rows, key=lambda r: abs(r["t"] - t)) if self.rows else None


class NvmlTrace:
    """A 20 Hz NVML trace (power, memory v1/v2, util, pids) in a thread."""

    def __init__(self, gpu: int, period: float = 0.05) -> None:
        import pynvml

        self.nv = pynvml
        pynvml.nvmlInit()
        self.h = pynvml.nvmlDeviceGetHandleByIndex(gpu)
        self.period, self.rows, self.stop = period, [], threading.Event()
        self.th = None
        self.watch_pid = None

    @staticmethod
    def proc_state(pid: int):
        """The /proc state letter of pid (R, S, Z...), or None when it is gone."""
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return None

    def read(self) -> dict:
        nv, h = self.nv, self.h
        row = {"t": round(time.time(), 3)}
        for key, fn in (("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
                        ("used_v1_mib", lambda: nv.nvmlDeviceGetMemoryInfo(h).used // (1 << 20)),
                        ("used_v2_mib", lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2).used
                         // (1 << 20)),
                        ("reserved_v2_mib", lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2).reserved
                         // (1 << 20)),
                        ("util", lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu),
                        ("pids", lambda: [[p.pid, None if p.usedGpuMemory is None else p.usedGpuMemory >> 20]
                                          for p in nv.nvmlDeviceGetComputeRunningProcesses(h)])):
            try:
                row[key] = fn()
            except Exception as e:  # record, never die
                row[key] = "error: %s" % e
        if self.watch_pid:
            row["proc"] = self.proc_state(self.watch_pid)
        return row

    def _loop(self) -> None:
        for _ in range(20 * 600):
            self.rows.append(self.read())
            if self.stop.wait(self.period):
                return

    def start(self) -> None:
        self.rows, self.stop = [], threading.Event()
        self.th = threading.Thread(target=self._loop, daemon=True)
        self.th.start()

    def finish(self) -> list:
        self.stop.set()
        if self.th:
            self.th.join(5)
        return self.rows


def stats_ms(samples: list) -> dict:
    s = sorted(samples)
    if not s:
        return {}
    return {"n": len(s), "mean": round(statistics.mean(s), 3), "p50": round(s[len(s) // 2], 3),
            "p95": round(s[min(len(s) - 1, int(len(s) * 0.95))], 3), "max": round(s[-1], 3)}


def timed(fn, n: int) -> dict:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return stats_ms(out)


# ------------------------------------------------------------------ steps

def gpu_of(status: dict, index: int) -> dict | None:
    try:
        host = status["json"]["hosts"][0]
    except (TypeError, KeyError, IndexError):
        return None
    return next((g for g in host.get("gpus", []) if g["index"] == index), None)


def status_vs_smi(run: Run, label: str, cfg: str = "nvml", block: bool = False) -> dict:
    """One ``status --json`` with nvidia-smi polled around it; the nearest smi reading attached."""
    with SmiPoller(run.args.gpu) as poll:
        st = run.console(["status", "--host", "local", "--json"], cfg, timeout=40, block_pynvml=block)
    host = (st["json"] or {}).get("hosts", [{}])[0] if st["json"] else {}
    g = gpu_of(st, run.args.gpu)
    smi = poll.nearest(host.get("sampled_at") or st["t1"])
    row = {"label": label, "cfg": cfg, "pynvml_blocked": block, "rc": st["rc"],
           "gpu_source": host.get("gpu_source"), "gpu_error": host.get("gpu_error"),
           "agent_tick_ms": host.get("agent_tick_ms"), "sampled_at": host.get("sampled_at"),
           "console_gpu": g, "servers": [{k: p.get(k) for k in ("pid", "role", "session_id", "gpu_mem_mib",
                                                                   "cuda_visible_devices", "argv")}
                                          for p in host.get("servers", [])],
           "smi_nearest": smi, "smi_offset_s": None if not smi or not host.get("sampled_at") else
           round(smi["t"] - host["sampled_at"], 3), "stderr": st["stderr"][-1500:]}
    if g and smi:
        v = smi["values"]
        say("  %s: console[%s] P=%s/%s W mem=%s/%s util=%s T=%s | smi P=%s/%s mem=%s/%s util=%s T=%s (dt %.2fs)" % (
            label, row["gpu_source"], g.get("power_w"), g.get("power_limit_w"), g.get("mem_used_mib"),
            g.get("mem_total_mib"), g.get("util_pct"), g.get("temp_c"), v.get("power.draw"), v.get("power.limit"),
            v.get("memory.used"), v.get("memory.total"), v.get("utilization.gpu"), v.get("temperature.gpu"),
            row["smi_offset_s"] or 0))
    else:
        say("  %s: no GPU in status (rc=%s, source=%s, error=%s)" % (label, st["rc"], row["gpu_source"],
                                                                     row["gpu_error"]))
    return row


def environment(run: Run) -> dict:
    def cmd(argv):
        try:
            return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20,
                                  check=False).stdout.decode("utf-8", "replace").strip()[-3000:]
        except (OSError, subprocess.TimeoutExpired) as e:
            return "error: %s" % e

    env = {"python": sys.version, "executable": sys.executable, "uname": cmd(["uname", "-a"]),
           "nvidia_smi_L": cmd(["nvidia-smi", "-L"]),
           "nvidia_smi_q_power": cmd(["nvidia-smi", "-q", "-d", "POWER", "-i", str(run.args.gpu)])[-2000:],
           "nvidia_smi_header": cmd(["nvidia-smi"])[:1500], "cwd_repo": str(REPO)}
    from importlib import metadata

    for dist in ("torch", "nvidia-ml-py", "pydantic", "pydantic-core", "typing-extensions", "asyncssh", "textual"):
        try:
            env[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            env[dist] = None
    say("env: python %s, torch %s, nvidia-ml-py %s, pydantic %s" % (
        sys.version.split()[0], env["torch"], env["nvidia-ml-py"], env["pydantic"]))
    say("env: %s | %s" % (env["nvidia_smi_L"], env["uname"]))
    return env


def launch(run: Run, flags: list, timeout: float = 150.0) -> dict:
    if run.args.no_gpu:
        flags = flags + ["--no-gpu"]
    command = "%s %s" % (shlex.quote(sys.executable), shlex.quote(str(LOAD)))
    r = run.console(["launch", "--host", "local", "--gpu", str(run.args.gpu), "--port", str(run.args.port),
                     "--wait", "--json", "--timeout", "120", "--command", command, "--"] + flags,
                    "nvml", timeout=timeout)
    j = r["json"] or {}
    for s in j.get("steps", []):
        say("    %-10s %-7s %6ss  %s" % (s["name"], s["state"], s.get("elapsed_s"), (s.get("evidence") or "")[:150]))
    if not j.get("ok"):
        say("    cause=%s line=%s error=%s" % (j.get("cause"), j.get("line"), j.get("error")))
    return r


def kill(run: Run, sid: str, trace: NvmlTrace | None, settle: float = 3.0) -> dict:
    try:
        pid0 = json.loads((run.runs_dir / sid / "record.json").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        pid0 = None
    if trace:
        trace.watch_pid = pid0
        trace.start()
    r = run.console(["kill", "--host", "local", sid, "--json", "--grace", "20"], "nvml", timeout=90)
    time.sleep(settle)  # the trace runs on: power decay after the kill
    rows = trace.finish() if trace else []
    if trace:
        trace.watch_pid = None
    j = r["json"] or {}
    for s in j.get("steps", []):
        say("    %-12s %-7s %6ss  %s" % (s["name"], s["state"], s.get("elapsed_s"), (s.get("evidence") or "")[:150]))
    ex = None
    try:
        ex = json.loads((run.runs_dir / sid / "exit.json").read_text())
    except (OSError, ValueError):
        pass
    rec = None
    try:
        rec = json.loads((run.runs_dir / sid / "record.json").read_text())
    except (OSError, ValueError):
        pass
    pid = (rec or {}).get("pid")
    release = {}
    if rows and pid:
        listed = [row for row in rows if isinstance(row.get("pids"), list) and any(p[0] == pid for p in row["pids"])]
        release["pid_last_listed_at"] = listed[-1]["t"] if listed else None
        release["pid_first_unlisted_at"] = next((row["t"] for row in rows if isinstance(row.get("pids"), list)
                                                 and listed and row["t"] > listed[-1]["t"]), None)
        base = rows[-1].get("used_v1_mib")
        if isinstance(base, int):
            high = [row for row in rows if isinstance(row.get("used_v1_mib"), int) and row["used_v1_mib"] > base + 1024]
            release["mem_last_high_at"] = high[-1]["t"] if high else None
            release["mem_first_low_at"] = next((row["t"] for row in rows if high and row["t"] > high[-1]["t"]), None)
        release["server_ended_at"] = (ex or {}).get("ended_at")
        release["kill_cmd_started_at"] = r["t0"]
        sigterm = [e["at"] for e in read_audit(run) if e.get("op") == "kill" and (e.get("args") or {}).get("pid") == pid]
        release["sigterm_at"] = sigterm[0] if sigterm else None
        release["proc_gone_at"] = next((row["t"] for row in rows if "proc" in row and row["proc"] in (None, "Z", "X")),
                                       None)
        for ref in ("server_ended_at", "sigterm_at", "proc_gone_at"):
            for k in ("pid_first_unlisted_at", "mem_first_low_at"):
                if release.get(ref) and release.get(k):
                    release["%s_after_%s_s" % (k[:-3], ref[:-3])] = round(release[k] - release[ref], 3)
        if release.get("sigterm_at") and release.get("proc_gone_at"):
            release["proc_gone_after_sigterm_s"] = round(release["proc_gone_at"] - release["sigterm_at"], 3)
        say("    release: %s" % {k: v for k, v in release.items() if k.endswith("_s")})
    # keep the trace small: every row while anything changes, else one per second
    slim, last = [], None
    for row in rows:
        key = (json.dumps(row.get("pids")), row.get("used_v1_mib"), row.get("proc"))
        if key != last or not slim or row["t"] - slim[-1]["t"] >= 1.0:
            slim.append(row)
        last = key
    return {"cmd": r, "exit": ex, "record": rec, "release": release, "trace": slim}


def read_audit(run: Run) -> list:
    out = []
    try:
        for line in (run.out / "audit.jsonl").read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    except OSError:
        pass
    return out


def tick_cost(run: Run) -> dict:
    """Time the agent's sampling pieces in this process (the agent module imported from its file)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from console.host import gpus as agent  # the agent's GPU sources (its package imports relatively)

    out = {}
    nv = agent.NvmlGpus()
    nv.sample()
    out["NvmlGpus.sample"] = timed(nv.sample, 100)
    p, h = nv.nv, nv.handles[run.args.gpu][1]
    for name, fn in (("nvmlDeviceGetPowerUsage", lambda: p.nvmlDeviceGetPowerUsage(h)),
                     ("nvmlDeviceGetEnforcedPowerLimit", lambda: p.nvmlDeviceGetEnforcedPowerLimit(h)),
                     ("nvmlDeviceGetUtilizationRates", lambda: p.nvmlDeviceGetUtilizationRates(h)),
                     ("nvmlDeviceGetMemoryInfo", lambda: p.nvmlDeviceGetMemoryInfo(h)),
                     ("nvmlDeviceGetMemoryInfo_v2", lambda: p.nvmlDeviceGetMemoryInfo(h, version=p.nvmlMemory_v2)),
                     ("nvmlDeviceGetTemperature", lambda: p.nvmlDeviceGetTemperature(h, p.NVML_TEMPERATURE_GPU)),
                     ("nvmlDeviceGetComputeRunningProcesses", lambda: p.nvmlDeviceGetComputeRunningProcesses(h))):
        out[name] = timed(fn, 100)
    smi_exe = agent.shutil.which("nvidia-smi")
    if smi_exe:
        smi = agent.SmiGpus(smi_exe)
        out["SmiGpus.sample"] = timed(smi.sample, 10)
        out["SmiGpus.sample_result"] = smi.sample()
    out["NvmlGpus.sample_result"] = nv.sample()
    a = agent.Agent({"runs_dir": str(run.runs_dir), "gpu_source": "nvml"}, sys.stdin, open(os.devnull, "wb"))
    gpus = a.gpu.sample()
    sessions = a.scan_sessions()
    a.scan_procs(gpus, sessions)
    out["Agent.scan_sessions"] = timed(a.scan_sessions, 100)
    out["Agent.scan_procs"] = timed(lambda: a.scan_procs(gpus, sessions), 100)
    a.proc_cache = {}
    out["Agent.scan_procs_cold"] = timed(lambda: (a.__setattr__("proc_cache", {}), a.scan_procs(gpus, sessions)), 20)
    out["Agent.take_sample"] = timed(a.take_sample, 100)
    out["proc_count"] = sum(1 for n in os.listdir("/proc") if n.isdigit())
    out["servers_in_sample"] = len(a.take_sample()["servers"])
    for k, v in out.items():
        if isinstance(v, dict) and "mean" in v:
            say("    %-38s mean %7.3f ms  p95 %7.3f ms  max %7.3f ms" % (k, v["mean"], v["p95"], v["max"]))
    return out


def tar_runs(run: Run) -> None:
    try:
        with tarfile.open(str(run.out / "runs.tar.gz"), "w:gz") as tf:
            for d in sorted(run.runs_dir.iterdir()):
                if d.is_dir():
                    for f in sorted(d.iterdir()):
                        if f.is_file() and f.stat().st_size < 4 << 20:
                            tf.add(str(f), arcname="runs/%s/%s" % (d.name, f.name))
    except OSError as e:
        say("cannot tar the run directories: %s" % e)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/mtp-gpu-validation")
    ap.add_argument("--budget", type=float, default=330.0, help="seconds for the whole run (optional steps skip)")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--mem-gb", type=float, default=40.0)
    ap.add_argument("--no-gpu", action="store_true", help="dry run of the driver: the load gets --no-gpu")
    args = ap.parse_args()
    run = Run(args)
    try:
        return steps(run)
    finally:
        tar_runs(run)
        run.save("done", {"elapsed_s": round(time.monotonic() - run.t_start, 1)})


def steps(run: Run) -> int:
    a = run.args
    run.save("environment", environment(run))
    trace = None
    try:
        trace = NvmlTrace(a.gpu)
        run.save("nvml_idle_read", trace.read())
    except Exception as e:
        say("NVML trace unavailable: %s" % e)

    say("== 1. idle status through NVML vs nvidia-smi")
    run.save("idle", [status_vs_smi(run, "idle-%d" % i) for i in range(3)])
    txt = run.console(["status", "--host", "local"], "nvml", timeout=40)
    run.save("idle_text", txt["stdout"])
    print(txt["stdout"], flush=True)

    say("== 2. launch the load (%.0f GiB, duty 1.0) through launch --wait" % a.mem_gb)
    if trace:
        trace.start()
    r = launch(run, ["--mem-gb", str(a.mem_gb), "--duty", "1.0", "--lifetime", "240", "--warmup", "3"])
    launch_trace = trace.finish() if trace else []
    sid = (r["json"] or {}).get("session_id")
    run.save("launch_load", {"cmd": r, "trace": launch_trace[::5]})
    if not (r["json"] or {}).get("ok"):
        say("launch failed: stopping here")
        if sid:
            run.save("kill_after_failed_launch", kill(run, sid, None))
        return 1

    say("== 3. status while loaded: NVML x5, nvidia-smi fallback x2, pynvml blocked x2")
    loaded = []
    for i in range(5):
        loaded.append(status_vs_smi(run, "loaded-nvml-%d" % i))
        time.sleep(1.0)
    run.save("loaded_nvml", loaded)
    run.save("loaded_smi_cfg", [status_vs_smi(run, "loaded-smi-%d" % i, "smi") for i in range(2)])
    run.save("loaded_pynvml_blocked", [status_vs_smi(run, "loaded-blocked-%d" % i, "auto", True) for i in range(2)])
    run.save("sessions_loaded", run.console(["sessions", "--host", "local", "--json"], "nvml", timeout=40))

    say("== 4. agent cost per tick (load running)")
    try:
        run.save("tick_cost", tick_cost(run))
    except Exception as e:
        import traceback

        run.save("tick_cost", {"error": traceback.format_exc()})
        say("tick cost failed: %s" % e)

    say("== 5. kill with an NVML trace")
    run.save("kill_load", kill(run, sid, trace))
    run.save("after_kill", status_vs_smi(run, "after-kill"))

    if run.left() > 130:
        say("== 6a. launch holding 8 GiB at duty 0 (idle with a CUDA context)")
        r0 = launch(run, ["--mem-gb", "8", "--duty", "0", "--lifetime", "120", "--warmup", "0"])
        sid0 = (r0["json"] or {}).get("session_id")
        rows = []
        if (r0["json"] or {}).get("ok"):
            time.sleep(2.0)
            rows = [status_vs_smi(run, "duty0-%d" % i) for i in range(2)]
        run.save("launch_duty0", {"cmd": r0, "status": rows})
        if sid0:
            run.save("kill_duty0", kill(run, sid0, trace, settle=1.0))
    if run.left() > 100:
        say("== 6b. launch at duty 0.3 (8 GiB)")
        r2 = launch(run, ["--mem-gb", "8", "--duty", "0.3", "--lifetime", "120", "--warmup", "2"])
        sid2 = (r2["json"] or {}).get("session_id")
        rows = []
        if (r2["json"] or {}).get("ok"):
            time.sleep(1.0)
            rows = [status_vs_smi(run, "duty0.3-%d" % i) for i in range(3)]
        run.save("launch_duty03", {"cmd": r2, "status": rows})
        if sid2:
            run.save("kill_duty03", kill(run, sid2, trace))
    else:
        say("skipping the duty-0.3 launch: %.0f s left" % run.left())

    if run.left() > 60:
        say("== 7. launch that really exhausts GPU memory (--oom)")
        if trace:
            trace.start()
        r3 = launch(run, ["--oom", "--mem-gb", "0", "--lifetime", "60"])
        oom_trace = trace.finish() if trace else []
        run.save("launch_oom", {"cmd": r3, "trace": oom_trace[::4]})
        j = r3["json"] or {}
        say("    OOM result: ok=%s cause=%s line=%s" % (j.get("ok"), j.get("cause"), j.get("line")))
        run.save("after_oom", status_vs_smi(run, "after-oom"))
        run.save("sessions_end", run.console(["sessions", "--host", "local", "--json", "--all"], "nvml", timeout=40))
    else:
        say("skipping the OOM launch: %.0f s left" % run.left())
    say("done in %.0f s" % (time.monotonic() - run.t_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
