#!/usr/bin/env python3
"""Issue 32: a two-member group over real NCCL on two GPUs of one host, a rank killed, seen and cleaned up,
through the console's own CLI.

Two "nodes" on one machine: ``node0`` and ``node1`` in a generated config, both over the local transport,
each with its own runs_dir, ``node0`` given GPU ``--gpu0`` and ``node1`` GPU ``--gpu1`` (issue 30's
``--gpu HOST:LIST``), each host's ``server_command`` the group load (``tests/gpu/group_load.py``: a real
``torch.distributed`` NCCL group, one all-reduce a step, ``--mem-gb`` GiB held on each GPU) and its
``launch_env`` the same interface and NVLink-multicast variables. Run on a host with two NVIDIA GPUs,
torch, nvidia-ml-py and pydantic::

    python3 tests/gpu/validate_group.py --out /tmp/gvg-out [--mem-gb 20] [--port 30000] [--budget 420]

The steps, each bounded and each recorded (command, rc, timings, JSON) in ``OUT/results.json``:

1. environment: both GPUs (``nvidia-smi``, ``-L``, ``topo -m``), torch, NCCL's version, the console's deps;
   the idle baseline: ``status --json`` of both hosts, nvidia-smi and NVML per GPU;
2. ``launch --host node0 --host node1 --gpu node0:G0 --gpu node1:G1 --nnodes 2 --port P --wait --json -- FLAGS``
   -> READY; then ``status``/``sessions`` with both GPUs' memory attributed to the group's processes (each
   member's pid in its GPU's NVML process list, and in the console's ``servers`` with its session id);
3. SIGKILL of rank 1's server (its pid from node1's ``record.json``) while rank 0's ``/health`` is polled at
   10 Hz and both GPUs are traced through NVML at 20 Hz: the group FAILED within 2 s naming rank 1 while rank
   0 still answers 200; the rest of the group killed (by the console's failure policy when the CLI guards the
   group, else by ``kill GROUP``) and confirmed here too: processes gone, ports closed, both GPUs' memory back
   to the idle baseline (within 1024 MiB);
4. ``relaunch GROUP`` (or, where the CLI has no group relaunch, the same group launch again) -> READY;
5. ``kill GROUP`` -> memory back to baseline; the final ``status``, ``sessions --all``, each member's log.

Files in OUT: ``results.json`` (after every step), ``audit.jsonl`` (the console's audit log),
``smi-before.txt`` / ``smi-after.txt`` (nvidia-smi, both GPUs), ``runs.tar.gz`` (both hosts' run
directories). docs/gpu-validation.md says how the figures are read. Dry run without GPUs (fake NVML with
two GPUs and nvidia-smi from ``tests/gpu/fake_nvml/``, put first on PYTHONPATH by a shim; the load with
``--no-gpu``)::

    PATH=tests/gpu/fake_nvml:$PATH python3 tests/gpu/validate_group.py --no-gpu --out /tmp/gvg-dry --port 29650

Where the console's CLI does not have a piece yet (the group launch, a guard that watches the group after
READY, a group relaunch), the step says so in results.json (``"cli"``) and the run goes as far as it can.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import group_load  # noqa: E402  (its FORCED_ENV: one definition of the NCCL variables)
import validate as v  # noqa: E402  (Run, say, smi_query, NvmlTrace, read_audit, environment)

REPO = v.REPO
GROUP_LOAD = HERE / "group_load.py"
HOSTS = ("node0", "node1")
GROUP_ENV = {**group_load.FORCED_ENV, **{k: "lo" for k in group_load.LOOPBACK_ENV}}
"""Each host's launch_env: equal on both "nodes" (issue 30's preflight compares the interface variables)."""
MEM_SLACK_MIB = 1024
"""Memory "back to baseline": within this of the idle reading (validate.py's rule)."""
FAILED_WITHIN_S = 2.0
GONE_WITHIN_S = 30.0
SMI_GPU_FIELDS = "index,name,memory.used,memory.total,power.draw,utilization.gpu,temperature.gpu"
say = v.say


# ------------------------------------------------------------------ run, config, console

class GroupRun(v.Run):
    """validate.Run (out/work dirs, results.json after every step, ``console()``) with the two-host config."""

    def __init__(self, args) -> None:
        args.gpu = args.gpu0  # validate.environment() reads one GPU's power details
        super().__init__(args)
        self.gpus = (args.gpu0, args.gpu1)
        self.runs = {h: self.work / ("runs-" + h) for h in HOSTS}
        env = ", ".join("%s = %s" % (k, json.dumps(val)) for k, val in sorted(GROUP_ENV.items()))
        lines = []
        for h in HOSTS:
            lines += ["[hosts.%s]" % h, 'transport = "local"', "python = %s" % json.dumps(sys.executable),
                      "runs_dir = %s" % json.dumps(str(self.runs[h])), 'gpu_source = "nvml"',
                      "server_command = %s" % json.dumps([sys.executable, str(GROUP_LOAD)]),
                      "launch_env = { %s }" % env, ""]
        p = self.work / "cfg-group.toml"
        p.write_text("\n".join(lines))
        self.cfgs["group"] = str(p)
        self.results["config"] = p.read_text()
        self.pids: dict = {}  # (pid, start_ticks) of every member seen, for the final cleanup

    def group(self, argv: list, timeout: float = 60.0) -> dict:
        return self.console(argv, "group", timeout=timeout)

    def hosts(self) -> list:
        return [x for h in HOSTS for x in ("--host", h)]


def start_ticks(pid: int) -> int | None:
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def alive(pid: int | None, ticks: int | None = None) -> bool:
    state = v.NvmlTrace.proc_state(pid) if pid else None
    return state not in (None, "Z", "X") and (ticks is None or start_ticks(pid) == ticks)


def port_open(port: int | None) -> bool:
    if not port:
        return False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def health(port: int | None, timeout: float = 1.0) -> int:
    if not port:
        return 0
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def member_files(run: GroupRun, gid: str, rank: int) -> dict:
    """A member's record/spec/exit from its host's run directory (session id ``GROUP-r<rank>``)."""
    d = run.runs[HOSTS[rank]] / ("%s-r%d" % (gid, rank))
    out: dict = {"dir": str(d)}
    for name in ("record", "spec", "exit"):
        try:
            out[name] = json.loads((d / (name + ".json")).read_text())
        except (OSError, ValueError):
            out[name] = None
    rec = out["record"] or {}
    if rec.get("pid"):
        run.pids[rec["pid"]] = rec.get("start_ticks")
    return out


def member_port(files: dict) -> int | None:
    argv = (files.get("spec") or {}).get("argv") or []
    for i, a in enumerate(argv[:-1]):
        if a == "--port":
            try:
                return int(argv[i + 1])
            except ValueError:
                return None
    return (files.get("spec") or {}).get("port")


# ------------------------------------------------------------------ GPU figures

def nvml_all(run: GroupRun) -> dict:
    """One NVML read of each GPU (memory v1/v2, power, util, pids with MiB)."""
    out = {}
    for g in run.gpus:
        try:
            out[str(g)] = v.NvmlTrace(g).read()
        except Exception as e:  # record, never die
            out[str(g)] = {"error": str(e)}
    return out


def smi_text(argv: list) -> str:
    try:
        p = subprocess.run(["nvidia-smi", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20,
                           check=False)
        return p.stdout.decode("utf-8", "replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        return "error: %s" % e


def smi_dump(run: GroupRun, name: str) -> str:
    text = "\n".join("$ nvidia-smi %s\n%s" % (" ".join(a), smi_text(a)) for a in (
        [], ["-L"], ["topo", "-m"], ["--query-gpu=" + SMI_GPU_FIELDS, "--format=csv"],
        ["--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv"]))
    (run.out / name).write_text(text)
    return text


def snapshot(run: GroupRun, label: str, gid: str | None = None) -> dict:
    """status --json of both hosts, NVML and nvidia-smi per GPU; with ``gid``, the group's attribution."""
    st = run.group(["status", *run.hosts(), "--json"], timeout=60)
    row = {"label": label, "status": st, "nvml": nvml_all(run),
           "smi": {str(g): v.smi_query(SMI_GPU_FIELDS, g) for g in run.gpus}}
    if gid:
        row["attribution"] = attribution(run, st, row["nvml"], gid)
    for g, n in row["nvml"].items():
        say("  %s: GPU %s used %s MiB, pids %s" % (label, g, n.get("used_v2_mib"), n.get("pids")))
    return row


def attribution(run: GroupRun, st: dict, nvml: dict, gid: str) -> dict:
    """Per rank: its pid, whether NVML lists it on its own GPU (with MiB), what the console's status says of it."""
    servers = []
    for host in ((st.get("json") or {}).get("hosts") or []):
        for s in host.get("servers") or []:
            if str(s.get("session_id") or "").startswith(gid):
                servers.append({"host": host.get("name") or host.get("host"), **{k: s.get(k) for k in (
                    "pid", "session_id", "role", "gpu_mem_mib", "cuda_visible_devices")}})
    out: dict = {"servers": servers, "ranks": []}
    for rank in (0, 1):
        f = member_files(run, gid, rank)
        pid = (f.get("record") or {}).get("pid")
        g = str(run.gpus[rank])
        listed = [p for p in (nvml.get(g, {}).get("pids") or []) if isinstance(p, list) and p[0] == pid]
        console = [s for s in servers if s.get("pid") == pid]
        out["ranks"].append({"rank": rank, "host": HOSTS[rank], "gpu": run.gpus[rank], "pid": pid,
                             "nvml_mib": listed[0][1] if listed else None,
                             "console_gpu_mem_mib": console[0].get("gpu_mem_mib") if console else None,
                             "console_session": console[0].get("session_id") if console else None})
        say("  rank %d (%s, GPU %s): pid %s, NVML %s MiB, console %s" % (
            rank, HOSTS[rank], g, pid, out["ranks"][-1]["nvml_mib"], out["ranks"][-1]["console_gpu_mem_mib"]))
    out["ok"] = all(r["nvml_mib"] and r["console_gpu_mem_mib"] for r in out["ranks"])
    return out


def mem_back(run: GroupRun, base: dict) -> dict:
    """Per GPU: whether used memory is within MEM_SLACK_MIB of the idle baseline and no member pid is listed."""
    now = nvml_all(run)
    out = {}
    for g, row in now.items():
        b = (base.get(g) or {}).get("used_v2_mib")
        u = row.get("used_v2_mib")
        pids = [p[0] for p in (row.get("pids") or []) if isinstance(p, list)]
        out[g] = {"used_mib": u, "baseline_mib": b, "member_pids_listed": [p for p in pids if p in run.pids],
                  "back": isinstance(u, int) and isinstance(b, int) and u <= b + MEM_SLACK_MIB
                  and not any(p in run.pids for p in pids)}
    return out


# ------------------------------------------------------------------ the group steps

def cli_support(run: GroupRun) -> dict:
    """What the console's CLI offers for groups, read from its own --help."""
    text = (run.group(["launch", "--help"], timeout=30).get("stdout") or "")
    rl = (run.group(["relaunch", "--help"], timeout=30).get("stdout") or "")
    guard = next((f for f in ("--guard", "--watch", "--follow") if f in text), None)
    out = {"group_launch": "--nnodes" in text, "guard_flag": guard, "relaunch_help": rl[:2000],
           "launch_help": text[:4000]}
    say("CLI: group launch %s, guard flag %s" % ("yes" if out["group_launch"] else "NO", guard or "none"))
    return out


def launch_argv(run: GroupRun, guard: str | None) -> list:
    a = run.args
    flags = ["--mem-gb", str(a.mem_gb), "--duty", "0.3", "--lifetime", str(a.lifetime), "--warmup", "2",
             "--log-interval", "2"] + (["--no-gpu"] if a.no_gpu else [])
    return (["launch", *run.hosts(), "--gpu", "node0:%d" % run.gpus[0], "--gpu", "node1:%d" % run.gpus[1],
             "--nnodes", "2", "--port", str(a.port), "--wait", "--json", "--timeout", "240"]
            + ([guard] if guard else []) + ["--", *flags])


def newest_group(run: GroupRun, after: float) -> str | None:
    """The group id of the newest rank-0 run directory on node0 made after ``after`` (a guarded launch's id is
    only printed when the guard ends)."""
    best = None
    for d in run.runs["node0"].glob("*-r0") if run.runs["node0"].is_dir() else []:
        try:
            m = d.stat().st_mtime
        except OSError:
            continue
        if m >= after - 1 and (best is None or m > best[0]):
            best = (m, d.name[:-3])
    return best[1] if best else None


def console_bg(run: GroupRun, argv: list) -> tuple:
    """A console command in the background (a guarded launch): (Popen, argv as shown, t0)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["MTPCONSOLE_AUDIT_LOG"] = str(run.out / "audit.jsonl")
    full = [sys.executable, "-m", "console", argv[0], "--config", run.cfgs["group"], *argv[1:]]
    say("$ (background) python3 -m console %s" % " ".join(argv))
    p = subprocess.Popen(full, cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p, argv, time.time()


def bg_result(p: subprocess.Popen, argv: list, t0: float, timeout: float) -> dict:
    try:
        so, se = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        so, se = p.communicate(timeout=10)
        rc = "timeout"
    so_t, se_t = so.decode("utf-8", "replace"), se.decode("utf-8", "replace")
    try:
        data = json.loads(so_t)
    except ValueError:
        data = None
    return {"argv": " ".join(argv), "rc": rc, "t0": t0, "t1": time.time(), "json": data,
            "stdout": None if data is not None else so_t[-4000:], "stderr": se_t[-4000:]}


def group_launch(run: GroupRun, label: str, guard: str | None) -> dict:
    """Launch the group; returns {"gid", "ready", "cmd", "bg"} (``bg``: the guarded launch still running)."""
    argv = launch_argv(run, guard)
    if not guard:
        r = run.group(argv, timeout=300)
        j = r["json"] or {}
        show_group(j)
        return {"gid": j.get("session_id") or j.get("group"), "ready": bool(j.get("ok")) and
                j.get("state") == "ready", "cmd": r, "bg": None}
    t_start = time.time()
    p, shown, t0 = console_bg(run, argv)
    gid, ready_at = None, None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and p.poll() is None:  # READY: the console's one-token generate answered
        gid = gid or newest_group(run, t_start)
        if gid:
            log = run.runs["node0"] / (gid + "-r0") / "output.log"
            try:
                if '"POST /generate HTTP/1.1" 200' in log.read_text(errors="replace"):
                    ready_at = time.time()
                    break
            except OSError:
                pass
        time.sleep(0.1)
    if ready_at is None:
        r = bg_result(p, shown, t0, 60)
        show_group(r["json"] or {})
        return {"gid": gid, "ready": False, "cmd": r, "bg": None}
    time.sleep(1.0)  # the guard takes its baseline after READY
    return {"gid": gid, "ready": True, "ready_seen_at": ready_at, "cmd": {"argv": " ".join(shown), "t0": t0},
            "bg": (p, shown, t0)}


def show_group(j: dict) -> None:
    for m in j.get("members") or []:
        say("    %s rank %s: %s %s port %s gpus %s %s" % (m.get("host"), m.get("rank"), m.get("session_id"),
                                                        m.get("state"), m.get("port"), m.get("gpus"),
                                                        m.get("cause") or ""))
        for s in m.get("steps") or []:
            say("      %-22s %-7s %6ss  %s" % (s.get("name"), s.get("state"), s.get("elapsed_s"),
                                                (s.get("evidence") or "")[:140]))
    for k in ("state", "ok", "refused", "failed", "failed_host", "failed_rank", "head_health", "error"):
        if j.get(k) is not None:
            say("    %s: %s" % (k, j.get(k)))
    for line in j.get("refusals") or []:
        say("    refusal: %s" % line)
    for line in j.get("killed") or []:
        say("    killed: %s" % line)


def sessions_state(run: GroupRun, gid: str) -> tuple:
    """(the group's state as ``sessions --json`` gives it, the entries naming the group)."""
    r = run.group(["sessions", *run.hosts(), "--json", "--all"], timeout=60)
    found = []

    def walk(x) -> None:
        if isinstance(x, dict):
            if any(str(x.get(k) or "").startswith(gid) for k in ("session_id", "group", "id")):
                found.append(x)
                return
            for val in x.values():
                walk(val)
        elif isinstance(x, list):
            for val in x:
                walk(val)

    walk(r["json"])
    state = next((e.get("state") for e in found if (e.get("session_id") or e.get("group")) == gid), None)
    if state is None and found:  # no group entry: the worst member's
        states = [str(e.get("state")) for e in found]
        state = "failed" if "failed" in states else states[0]
    return state, found, r


def kill_rank1(run: GroupRun, gid: str, launched: dict, base_nvml: dict) -> dict:
    f0, f1 = member_files(run, gid, 0), member_files(run, gid, 1)
    pid0, pid1 = (f0["record"] or {}).get("pid"), (f1["record"] or {}).get("pid")
    port0, port1 = member_port(f0), member_port(f1)
    out: dict = {"pid0": pid0, "pid1": pid1, "port0": port0, "port1": port1,
                 "health_before": [health(port0), health(port1)]}
    if not pid1 or not alive(pid1, (f1["record"] or {}).get("start_ticks")):
        out["error"] = "rank 1's server is not running (record %s)" % f1["record"]
        return out
    traces = {}
    for g in run.gpus:
        try:
            traces[g] = v.NvmlTrace(g)
            traces[g].start()
        except Exception as e:
            say("NVML trace of GPU %s unavailable: %s" % (g, e))
    polls: list = []
    stop = threading.Event()

    def poll_head() -> None:
        for _ in range(600):
            polls.append([round(time.time(), 3), health(port0, 0.5), alive(pid0)])
            if stop.wait(0.1):
                return

    th = threading.Thread(target=poll_head, daemon=True)
    th.start()
    time.sleep(0.3)
    t_kill = time.time()
    os.kill(pid1, signal.SIGKILL)
    say("== SIGKILL rank 1 (pid %s) at %.3f" % (pid1, t_kill))
    out["t_kill"] = t_kill
    if launched.get("bg"):
        r = bg_result(*launched["bg"], timeout=90)
        j = r["json"] or {}
        show_group(j)
        out["guard"] = r
        out["failed_line"] = j.get("failed")
        out["failed_rank"] = j.get("failed_rank")
        out["failed_host"] = j.get("failed_host")
        out["head_health_seen_by_console"] = j.get("head_health")
        if j.get("failed_at"):
            out["failed_after_s"] = round(j["failed_at"] - t_kill, 3)
        out["killed_by_policy"] = j.get("killed")
    else:
        out["note"] = ("the CLI has no guard of the group after READY: the failure is read from sessions --json "
                       "(each call is a whole console start: its latency is in the figure) and the rest is killed "
                       "with kill GROUP")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state, found, r = sessions_state(run, gid)
            if state == "failed":
                out["failed_after_s"] = round(r["t1"] - t_kill, 3)
                out["failed_entries"] = found
                out["failed_line"] = next((e.get("cause") or e.get("line") or e.get("failed") for e in found
                                           if str(e.get("session_id") or "").endswith("-r1")), None)
                break
        out["kill_group"] = run.group(["kill", *run.hosts(), gid, "--json", "--grace", "8"], timeout=120)
        show_group(out["kill_group"]["json"] or {})
    # confirm here, independently of the console: every member gone, ports closed, both GPUs back
    deadline = time.monotonic() + GONE_WITHIN_S + 5
    gone_at = back_at = None
    while time.monotonic() < deadline:
        if gone_at is None and not alive(pid0) and not alive(pid1) and not port_open(port0) \
                and not port_open(port1):
            gone_at = time.time()
        mb = mem_back(run, base_nvml)
        if back_at is None and all(x["back"] for x in mb.values()):
            back_at = time.time()
        if gone_at and back_at:
            break
        time.sleep(0.2)
    stop.set()
    th.join(5)
    out["mem_back"] = mem_back(run, base_nvml)
    out["all_gone_after_s"] = round(gone_at - t_kill, 3) if gone_at else None
    out["mem_back_after_s"] = round(back_at - t_kill, 3) if back_at else None
    until = t_kill + (out.get("failed_after_s") or 0)
    out["head_health_until_failed"] = sorted({c for t, c, _ in polls if t_kill <= t <= until})
    out["head_polls"] = polls[:: max(1, len(polls) // 200)]
    out["traces"] = {str(g): tr.finish()[::2] for g, tr in traces.items()}
    ok = (out.get("failed_after_s") is not None and out["failed_after_s"] <= FAILED_WITHIN_S
          and out.get("failed_rank") in (1, None) and out["head_health_until_failed"] == [200]
          and out["all_gone_after_s"] is not None and out["mem_back_after_s"] is not None)
    out["ok"] = ok
    say("  failed after %s s (%s), head /health until then %s, all gone after %s s, memory back after %s s: %s"
        % (out.get("failed_after_s"), out.get("failed_line"), out["head_health_until_failed"],
           out["all_gone_after_s"], out["mem_back_after_s"], "OK" if ok else "NOT OK"))
    return out


def relaunch(run: GroupRun, gid: str, guard: str | None) -> dict:
    r = run.group(["relaunch", *run.hosts(), gid, "--wait", "--json", "--timeout", "240"], timeout=300)
    j = r["json"] or {}
    show_group(j)
    if j.get("ok") and j.get("state") == "ready" and j.get("members"):
        return {"how": "relaunch GROUP", "gid": j.get("session_id") or j.get("group"), "ready": True, "cmd": r}
    say("  relaunch of the group did not give a READY group (rc %s): launching the group again" % r["rc"])
    again = group_launch(run, "relaunch", None)
    again.update(how="group launch again (relaunch GROUP gave rc %s)" % r["rc"], relaunch_cmd=r)
    return again


def member_logs(run: GroupRun, gid: str) -> dict:
    out = {}
    for rank, h in enumerate(HOSTS):
        r = run.group(["logs", "--host", h, "%s-r%d" % (gid, rank), "-n", "80"], timeout=60)
        out["%s-r%d" % (gid, rank)] = (r.get("stdout") or "")[-6000:]
    return out


def tar_runs(run: GroupRun) -> None:
    try:
        with tarfile.open(str(run.out / "runs.tar.gz"), "w:gz") as tf:
            for h, root in run.runs.items():
                for d in sorted(root.iterdir()) if root.is_dir() else []:
                    for f in sorted(d.iterdir()) if d.is_dir() else []:
                        if f.is_file() and f.stat().st_size < 4 << 20:
                            tf.add(str(f), arcname="%s/%s/%s" % (h, d.name, f.name))
    except OSError as e:
        say("cannot tar the run directories: %s" % e)


def cleanup(run: GroupRun) -> list:
    """SIGKILL any member this run saw, or any server recorded in its two runs dirs, that still runs as itself
    (pid and start time), so that no GPU stays held (a member the console could not kill is named)."""
    for root in run.runs.values():
        for rec in root.glob("*/record.json") if root.is_dir() else []:
            try:
                r = json.loads(rec.read_text())
                run.pids.setdefault(int(r["pid"]), r.get("start_ticks"))
            except (OSError, ValueError, KeyError, TypeError):
                pass
    left = []
    for pid, ticks in run.pids.items():
        if alive(pid, ticks):
            left.append(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    if left:
        say("cleanup: SIGKILLed members still running: %s" % left)
    return left


def steps(run: GroupRun) -> int:
    a = run.args
    env = v.environment(run)
    if not a.no_gpu:  # in a child: this process never makes a CUDA context of its own
        env["torch_cuda_nccl"] = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.__version__, torch.cuda.device_count(), "
             "torch.cuda.nccl.version())"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120,
            check=False).stdout.decode("utf-8", "replace").strip()[-500:]
        say("torch / GPUs / NCCL: %s" % env["torch_cuda_nccl"])
    run.save("environment", env)
    run.save("nccl", {k: os.environ.get(k) for k in sorted(GROUP_ENV)})
    smi_dump(run, "smi-before.txt")
    cli = cli_support(run)
    run.save("cli", cli)
    if not cli["group_launch"]:
        say("the console's launch has no --nnodes yet: nothing of the group can run")
        return 2
    say("== 1. idle baseline")
    base = snapshot(run, "idle")
    run.save("idle", base)
    say("== 2. group launch -> READY")
    first = group_launch(run, "launch", cli["guard_flag"])
    run.save("launch", {k: val for k, val in first.items() if k != "bg"})
    gid = first.get("gid")
    if not first["ready"] or not gid:
        say("the group did not become READY: stopping here")
        if gid:
            run.save("kill_after_failed_launch", run.group(["kill", *run.hosts(), gid, "--json"], timeout=120))
        return 1
    ready = snapshot(run, "ready", gid)
    run.save("ready", ready)
    run.save("sessions_ready", sessions_state(run, gid)[2])
    say("== 3. SIGKILL rank 1: FAILED within %.0f s naming rank 1, head /health 200, the rest gone" % FAILED_WITHIN_S)
    k = kill_rank1(run, gid, first, base["nvml"])
    run.save("kill_rank1", k)
    run.save("after_failure", snapshot(run, "after-failure"))
    run.save("sessions_after_failure", sessions_state(run, gid)[2])
    run.save("logs_first", member_logs(run, gid))
    say("== 4. relaunch -> READY")
    again = relaunch(run, gid, cli["guard_flag"])
    if again.get("bg"):  # never: relaunch() launches without the guard
        again.pop("bg")
    run.save("relaunch", again)
    gid2 = again.get("gid")
    if again.get("ready") and gid2:
        run.save("relaunched", snapshot(run, "relaunched", gid2))
        say("== 5. kill GROUP -> memory back")
        t0 = time.time()
        kr = run.group(["kill", *run.hosts(), gid2, "--json", "--grace", "8"], timeout=120)
        show_group(kr["json"] or {})
        back = None
        for _ in range(150):
            mb = mem_back(run, base["nvml"])
            if all(x["back"] for x in mb.values()):
                back = round(time.time() - t0, 3)
                break
            time.sleep(0.2)
        run.save("kill_group", {"cmd": kr, "mem_back_after_s": back, "mem_back": mem_back(run, base["nvml"])})
        run.save("logs_relaunched", member_logs(run, gid2))
    run.save("end", snapshot(run, "end"))
    run.save("sessions_end", run.group(["sessions", *run.hosts(), "--json", "--all"], timeout=60))
    smi_dump(run, "smi-after.txt")
    verdict = {"ready": first["ready"], "attributed": ready["attribution"]["ok"], "kill_rank1": k.get("ok"),
               "relaunched": bool(again.get("ready"))}
    run.save("verdict", verdict)
    say("verdict: %s" % verdict)
    return 0 if all(verdict.values()) else 1


FAKE_SHIM = """# made by validate_group.py --no-gpu: tests/gpu/fake_nvml's pynvml with two GPUs
import importlib.util as _u
import os as _os
_os.environ["FAKE_NVML_GPUS"] = "2"
_s = _u.spec_from_file_location("_fake_pynvml", %r)
_m = _u.module_from_spec(_s)
_s.loader.exec_module(_m)
globals().update({k: getattr(_m, k) for k in dir(_m) if not k.startswith("__")})
"""


def fake_two_gpus(work: Path) -> None:
    """Dry run: the console's agent gets only some variables (PYTHONPATH among them, FAKE_NVML_GPUS not), so a
    pynvml shim first on PYTHONPATH sets the fake's GPU count to two in every process that imports it."""
    d = work / "fake-nvml-2gpus"
    d.mkdir(parents=True, exist_ok=True)
    (d / "pynvml.py").write_text(FAKE_SHIM % str(HERE / "fake_nvml" / "pynvml.py"))
    os.environ["FAKE_NVML_GPUS"] = "2"
    sys.path.insert(0, str(d))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(d)] + ([os.environ["PYTHONPATH"]]
                                                           if os.environ.get("PYTHONPATH") else []))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/mtp-gpu-validation-group")
    ap.add_argument("--budget", type=float, default=420.0)
    ap.add_argument("--gpu0", type=int, default=0, help="node0's GPU (default 0)")
    ap.add_argument("--gpu1", type=int, default=1, help="node1's GPU (default 1)")
    ap.add_argument("--port", type=int, default=30000, help="rank 0's port (rank 1 gets the next: same address)")
    ap.add_argument("--mem-gb", type=float, default=20.0, help="GiB each member holds (default 20)")
    ap.add_argument("--lifetime", type=float, default=300.0, help="each member's --lifetime (default 300)")
    ap.add_argument("--no-gpu", action="store_true", help="dry run: the load gets --no-gpu (fake NVML)")
    args = ap.parse_args()
    if args.gpu0 == args.gpu1:
        ap.error("--gpu0 and --gpu1 must differ (NCCL refuses two ranks on one GPU)")
    if args.no_gpu:
        fake_two_gpus(Path(args.work))
    os.environ.update(GROUP_ENV)  # nvidia-smi, NVML and anything this script starts keep multicast off too
    run = GroupRun(args)
    try:
        return steps(run)
    finally:
        run.results["cleanup_killed"] = cleanup(run)
        tar_runs(run)
        run.save("done", {"elapsed_s": round(time.monotonic() - run.t_start, 1)})


if __name__ == "__main__":
    sys.exit(main())
