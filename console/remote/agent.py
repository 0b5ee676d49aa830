"""The remote agent: one long-lived process per host, speaking JSON lines on stdin/stdout.

Stdlib only; runs on the host's ``python3`` >= 3.8 with nothing installed. It is shipped as
source over the connection (see ``protocol.BOOTSTRAP``) and never imports ``console``.

Per tick it samples every GPU (NVML, else ``nvidia-smi`` CSV, else simulated GPUs, else an
explicit "no GPU information" state), the server processes from /proc, and the launch
sessions in the runs directory, and pushes one ``sample`` message. Process exits are pushed
as ``event`` messages as they happen (pidfd where the kernel has it, else 50 ms polling);
followed session logs are pushed as ``log`` messages by byte offset. Every failure becomes
a value in the sample, never a dead agent.
"""

import fcntl
import hashlib
import json
import os
import pwd
import queue
import random
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

AGENT_VERSION = 1
SESSION_ENV = "MTPCONSOLE_SESSION"
SIM_DIR_ENV = "MTPCONSOLE_SIM_DIR"
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", SESSION_ENV, SIM_DIR_ENV)
RUN_SPEC, RUN_RECORD, RUN_LOG = "spec.json", "record.json", "output.log"
RUN_STOP_REQUEST, RUN_EXIT = "stop-request.json", "exit.json"
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_KIB = (os.sysconf("SC_PAGE_SIZE") // 1024) if hasattr(os, "sysconf") else 4
MAX_LOG_CHUNK = 256 * 1024
RECENT_ENDED_SESSIONS = 32
SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
"""What a session id may be (also a directory name under the runs dir): nothing else reaches a path."""

SERVER_PATTERNS = [
    (re.compile(r"^sglang::"), "sglang", "worker"),
    (re.compile(r"^VLLM::"), "vllm", "worker"),
    (re.compile(r"(^|\s|/)sglang(\.launch_server|\s+serve)\b|-m\s+sglang\.launch_server"), "sglang", "launcher"),
    (re.compile(r"-m\s+console\.sim\.sglang(\s|$)"), "sglang", "launcher"),
    (re.compile(r"(^|\s|/)vllm(\s+serve|\.entrypoints)"), "vllm", "launcher"),
    (re.compile(r"sglang\.(srt|data_parallel|bench)"), "sglang", "worker"),
]


def now():
    return time.time()


# ------------------------------------------------------------------ /proc helpers

def read_text(path, limit=1 << 20):
    with open(path, "rb") as f:
        return f.read(limit).decode("utf-8", "replace")


def proc_stat(pid):
    """Parse /proc/<pid>/stat -> dict(ppid, pgid, sid, state, start_ticks, rss_kib) or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    rp = raw.rfind(")")
    if rp < 0:
        return None
    fields = raw[rp + 2:].split()
    try:
        return {
            "state": fields[0], "ppid": int(fields[1]), "pgid": int(fields[2]),
            "sid": int(fields[3]), "start_ticks": int(fields[19]),
            "rss_kib": int(fields[21]) * PAGE_KIB,
        }
    except (IndexError, ValueError):
        return None


def proc_alive(pid, start_ticks=None):
    """Alive means /proc/<pid>/stat exists, is not a zombie, and (if given) the start time matches."""
    st = proc_stat(pid)
    if st is None or st["state"] in ("Z", "X"):
        return False
    return start_ticks is None or st["start_ticks"] == start_ticks


def proc_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            raw = f.read(256 * 1024)
    except OSError:
        return None
    parts = raw.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", "replace") for p in parts]


def proc_comm(pid):
    """The process's short name (/proc/<pid>/comm), or None (another namespace, gone)."""
    try:
        return read_text("/proc/%d/comm" % pid, 256).strip() or None
    except OSError:
        return None


def proc_environ(pid, names):
    """Selected variables from /proc/<pid>/environ; None when unreadable."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            raw = f.read(1 << 20)
    except OSError:
        return None
    out = {}
    for item in raw.split(b"\0"):
        k, _, v = item.partition(b"=")
        k = k.decode("utf-8", "replace")
        if k in names:
            out[k] = v.decode("utf-8", "replace")
    return out


def proc_uid(pid):
    try:
        return os.stat("/proc/%d" % pid).st_uid
    except OSError:
        return None


_user_cache = {}


def user_name(uid):
    if uid is None:
        return None
    if uid not in _user_cache:
        try:
            _user_cache[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _user_cache[uid] = str(uid)
    return _user_cache[uid]


def read_oom_kill():
    try:
        for line in read_text("/proc/vmstat").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def boot_id():
    try:
        return read_text("/proc/sys/kernel/random/boot_id").strip()
    except OSError:
        return None


def listening_ports():
    """Map port -> socket inode for TCP sockets in LISTEN state (IPv4 and IPv6)."""
    out = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = read_text(path).splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A":
                try:
                    out.setdefault(int(f[1].rsplit(":", 1)[1], 16), int(f[9]))
                except ValueError:
                    pass
    return out


def pid_of_socket_inode(inode):
    target = "socket:[%d]" % inode
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % name):
                try:
                    if os.readlink("/proc/%s/fd/%s" % (name, fd)) == target:
                        return int(name)
                except OSError:
                    continue
        except OSError:
            continue
    return None


def port_open(port, timeout=0.5):
    for family, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect((addr, port))
            return True
        except OSError:
            continue
        finally:
            s.close()
    return False


def atomic_write_json(path, obj):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------ GPU sources

class NoGpus(object):
    name = "none"

    def __init__(self, reason):
        self.error = reason

    def sample(self):
        return []


class NvmlGpus(object):
    """NVML through pynvml (nvidia-ml-py): init once, handles cached, every failure a value."""

    name = "nvml"
    error = None
    v1_only = False

    def __init__(self):
        import pynvml  # noqa: raises ImportError when absent
        self.nv = pynvml
        pynvml.nvmlInit()
        self.handles = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            self.handles.append((i, h, self._get(lambda: pynvml.nvmlDeviceGetName(h), {}, "name"),
                                 self._get(lambda: pynvml.nvmlDeviceGetUUID(h), {}, "uuid")))

    def _get(self, fn, errors, field):
        try:
            v = fn()
            return v.decode() if isinstance(v, bytes) else v
        except Exception as e:  # NVMLError and friends
            errors[field] = str(e) or type(e).__name__
            return None

    def _memory(self, h):
        """Memory as nvidia-smi shows it: NVML v2, whose ``used`` leaves out the driver's reserved
        memory (v1's ``used`` counts it: about 615 MiB more on an idle H200, driver 580); else v1."""
        nv = self.nv
        v2 = getattr(nv, "nvmlMemory_v2", None)
        if v2 is not None and not self.v1_only:
            try:
                return nv.nvmlDeviceGetMemoryInfo(h, version=v2)
            except Exception:  # old pynvml signature or a driver without v2: use v1 if that works
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                self.v1_only = True
                return mem
        return nv.nvmlDeviceGetMemoryInfo(h)

    def sample(self):
        nv, out = self.nv, []
        for i, h, name, uuid in self.handles:
            e = {}
            power = self._get(lambda: nv.nvmlDeviceGetPowerUsage(h), e, "power_w")
            limit = self._get(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h), e, "power_limit_w")
            util = self._get(lambda: nv.nvmlDeviceGetUtilizationRates(h), e, "util_pct")
            mem = self._get(lambda: self._memory(h), e, "mem_used_mib")
            temp = self._get(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU), e, "temp_c")
            procs = self._get(lambda: nv.nvmlDeviceGetComputeRunningProcesses(h), e, "procs") or []
            plist = []
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                plist.append({"pid": p.pid, "used_mib": None if used is None else int(used) // (1 << 20),
                              "name": proc_comm(p.pid)})
            out.append({
                "index": i, "uuid": uuid, "name": name,
                "power_w": None if power is None else power / 1000.0,
                "power_limit_w": None if limit is None else limit / 1000.0,
                "util_pct": None if util is None else float(util.gpu),
                "mem_used_mib": None if mem is None else int(mem.used) // (1 << 20),
                "mem_total_mib": None if mem is None else int(mem.total) // (1 << 20),
                "mem_reserved_mib": None if getattr(mem, "reserved", None) is None else int(mem.reserved) // (1 << 20),
                "temp_c": None if temp is None else float(temp),
                "procs": plist, "errors": e,
            })
        return out


SMI_GPU_FIELDS = "index,uuid,name,power.draw,power.limit,utilization.gpu,memory.used,memory.total,temperature.gpu"
SMI_APP_FIELDS = "pid,process_name,used_memory,gpu_uuid"


def _smi_value(raw, conv):
    raw = raw.strip()
    if not raw or raw.startswith("[") or raw in ("N/A", "Not Supported"):
        return None, (raw.strip("[]") or "empty")
    try:
        return conv(raw), None
    except ValueError:
        return None, "unparsable %r" % raw[:40]


def parse_smi_gpus(text):
    """Parse ``nvidia-smi --query-gpu=SMI_GPU_FIELDS --format=csv,noheader,nounits`` output."""
    gpus = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != 9:
            continue
        try:
            index = int(cols[0])
        except ValueError:
            continue
        g = {"index": index, "uuid": cols[1] or None, "name": cols[2] or None, "procs": [], "errors": {}}
        for key, raw, conv in (("power_w", cols[3], float), ("power_limit_w", cols[4], float),
                               ("util_pct", cols[5], float), ("mem_used_mib", cols[6], lambda s: int(float(s))),
                               ("mem_total_mib", cols[7], lambda s: int(float(s))), ("temp_c", cols[8], float)):
            v, err = _smi_value(raw, conv)
            g[key] = v
            if err:
                g["errors"][key] = err
        gpus.append(g)
    return gpus


def parse_smi_apps(text, gpus):
    """Attach ``--query-compute-apps=SMI_APP_FIELDS`` rows to the GPUs by uuid (in place)."""
    by_uuid = dict((g["uuid"], g) for g in gpus)
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 4:
            continue
        try:
            pid = int(cols[0])
        except ValueError:
            continue
        g = by_uuid.get(cols[-1])
        if g is None:
            continue
        used, _ = _smi_value(cols[-2], lambda s: int(float(s)))
        g["procs"].append({"pid": pid, "used_mib": used, "name": ",".join(cols[1:-2]) or None})
    return gpus


class SmiGpus(object):
    name = "nvidia-smi"
    error = None

    def __init__(self, exe):
        self.exe = exe

    def _run(self, query):
        return subprocess.run([self.exe, query, "--format=csv,noheader,nounits"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=10, check=False).stdout.decode("utf-8", "replace")

    def sample(self):
        gpus = parse_smi_gpus(self._run("--query-gpu=" + SMI_GPU_FIELDS))
        return parse_smi_apps(self._run("--query-compute-apps=" + SMI_APP_FIELDS), gpus)


class SimGpus(object):
    """Simulated GPUs, through the console's one GPU model (console/sim/simgpu.py, shipped as source).

    Memory follows what live holders allocated (``<sim_dir>/alloc/<pid>.json``); a dead holder's
    memory is released a moment after its death, as a real driver does.
    """

    name = "sim"
    error = None

    def __init__(self, sim_dir, sim_src):
        if not sim_src:
            raise ValueError("no simulation model was shipped to the agent")
        self.m = {"__name__": "mtpconsole_simgpu"}
        exec(compile(sim_src, "mtpconsole-simgpu", "exec"), self.m)
        self.dir = sim_dir
        if not self.m["read_gpus"](sim_dir):
            raise ValueError("no valid gpus.json in %s" % sim_dir)
        self.ramp = self.m["PowerRamp"]()
        self.rng = random.Random(7)

    def sample(self):
        allocs = self.m["reap_stale_allocs"](self.dir)
        return self.m["sample_gpus"](self.dir, allocs=allocs, rng=self.rng, ramp=self.ramp)


def open_gpu_source(kind, sim_dir, sim_src=None):
    """Pick the GPU source: NVML, else nvidia-smi (saying why not NVML), else none (with the reason)."""
    reasons = []
    if kind == "sim" or (kind == "auto" and sim_dir):
        try:
            return SimGpus(sim_dir, sim_src)
        except Exception as e:
            return NoGpus("simulated GPUs unavailable: %s" % e)
    if kind in ("auto", "nvml"):
        try:
            return NvmlGpus()
        except ImportError as e:
            reasons.append("pynvml not importable (%s)" % e)
        except Exception as e:
            reasons.append("NVML failed: %s" % (str(e) or type(e).__name__))
        if kind == "nvml":
            return NoGpus("; ".join(reasons))
    if kind in ("auto", "nvidia-smi"):
        exe = shutil.which("nvidia-smi")
        if exe:
            smi = SmiGpus(exe)
            if reasons:
                smi.error = "using nvidia-smi: " + "; ".join(reasons)
            return smi
        reasons.append("nvidia-smi not found on PATH")
    if kind == "none":
        reasons.append("GPU sampling disabled")
    return NoGpus("no GPU information: " + "; ".join(reasons))


# ------------------------------------------------------------------ the agent

class Agent(object):
    def __init__(self, cfg, stdin, stdout):
        self.cfg = cfg
        self.stdin = stdin
        self.out = getattr(stdout, "buffer", stdout)
        self.wlock = threading.Lock()
        self.interval = float(cfg.get("interval") or 1.0)
        self.runs_dir = os.path.expanduser(cfg.get("runs_dir") or "~/.mtpconsole/runs")
        self.supervisor_src = cfg.get("supervisor_src") or ""
        self.launch_env = dict(cfg.get("launch_env") or {})
        self.gpu = open_gpu_source(cfg.get("gpu_source") or "auto", cfg.get("sim_dir"), cfg.get("sim_src"))
        # A simulated host is a namespace on this machine: its process table is its simulation's.
        self.sim_scope = cfg.get("sim_dir") if self.gpu.name == "sim" else None
        self.inbox = queue.Queue()
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake", None))
        self.watches = {}       # (pid, start_ticks) -> {"fd": pidfd or None, "session_id": ...}
        self.follows = {}       # session_id -> offset
        self.proc_cache = {}    # pid -> (start_ticks, cmdline, env, uid)
        self.session_cache = {}  # session_id -> dict
        self.pending_exits = {}  # session_id -> deadline to wait for exit.json
        self.last_gpus = []
        self.stop = False
        self.next_tick = 0.0
        self.tick_ms = None

    # -- output
    def send(self, obj):
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8")
        with self.wlock:
            try:
                self.out.write(data)
                self.out.flush()
            except (BrokenPipeError, OSError):
                self.stop = True

    def reply(self, rid, ok, result=None, error=None):
        msg = {"type": "reply", "id": rid, "ok": ok}
        if ok:
            msg["result"] = result
        else:
            msg["error"] = error
        self.send(msg)

    # -- input
    def reader(self):
        try:
            for line in self.stdin:
                self.inbox.put(line)
                os.write(self.wake_w, b"x")
        except Exception:
            pass
        self.inbox.put(None)
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass

    def run(self):
        threading.Thread(target=self.reader, name="stdin", daemon=True).start()
        while not self.stop:
            t = now()
            if t >= self.next_tick:
                self.tick()
                self.next_tick = t + self.interval
            timeout = self.next_tick - now()
            if self.pending_exits:
                timeout = min(timeout, 0.005)
            elif self.follows or any(w["fd"] is None for w in self.watches.values()):
                timeout = min(timeout, 0.05)
            for key, _ in self.sel.select(max(0.0, timeout)):
                kind, data = key.data
                if kind == "wake":
                    try:
                        os.read(self.wake_r, 4096)
                    except OSError:
                        pass
                elif kind == "pidfd":
                    self.on_exit(data)
            self.drain_inbox()
            self.poll_watches()
            self.poll_follows()
            self.poll_pending_exits()

    def drain_inbox(self):
        while True:
            try:
                line = self.inbox.get_nowait()
            except queue.Empty:
                return
            if line is None:
                self.stop = True
                return
            line = line.strip()
            if not line:
                continue
            try:
                req = json.loads(line)
                rid, op, args = req.get("id"), req["op"], req.get("args") or {}
            except (ValueError, KeyError, AttributeError) as e:
                self.send({"type": "error", "message": "bad request: %s" % e})
                continue
            fn = getattr(self, "op_" + str(op), None)
            if fn is None:
                self.reply(rid, False, error="unknown op %r" % op)
            elif op in self.SLOW_OPS:
                threading.Thread(target=self.call, args=(fn, rid, args), daemon=True).start()
            else:
                self.call(fn, rid, args)

    SLOW_OPS = ("launch", "http_get", "run", "port_open", "port_owner", "read_file")

    def call(self, fn, rid, args):
        try:
            self.reply(rid, True, fn(**args))
        except TypeError as e:
            self.reply(rid, False, error="bad arguments: %s" % e)
        except OpError as e:
            self.reply(rid, False, error=str(e))
        except Exception as e:
            self.reply(rid, False, error="%s: %s" % (type(e).__name__, e))

    # -- sampling
    def tick(self):
        t0 = time.perf_counter()
        sample = self.take_sample()
        self.tick_ms = (time.perf_counter() - t0) * 1000.0
        sample["tick_ms"] = round(self.tick_ms, 3)
        self.send({"type": "sample", "data": sample})

    def take_sample(self):
        try:
            gpus = self.gpu.sample()
            err = self.gpu.error
        except Exception as e:
            gpus, err = [], "GPU sampling failed: %s" % e
        self.last_gpus = gpus
        sessions = self.scan_sessions()
        return {
            "sampled_at": now(), "gpu_source": self.gpu.name if gpus or not err else "none",
            "gpu_error": err, "gpus": gpus, "servers": self.scan_procs(gpus, sessions),
            "sessions": self.visible_sessions(sessions),
        }

    def scan_procs(self, gpus, sessions):
        """Server processes from /proc: launchers, workers, supervisors and session members."""
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = proc_stat(int(name))
                if st is not None:
                    stats[int(name)] = st
        gpu_mem = {}
        for g in gpus:
            for p in g.get("procs") or []:
                gpu_mem.setdefault(p["pid"], {})[g["index"]] = p.get("used_mib") or 0
        roots = {}
        for s in sessions.values():
            rec = s.get("record") or {}
            if rec and not s.get("exit"):
                roots[rec.get("supervisor_pid")] = s["session_id"]
        children = {}
        for pid, st in stats.items():
            children.setdefault(st["ppid"], []).append(pid)
        under = {}
        for root, sid in roots.items():
            stack = list(children.get(root, []))
            while stack:
                p = stack.pop()
                if p not in under:
                    under[p] = sid
                    stack.extend(children.get(p, []))
        out, cache = [], {}
        for pid, st in stats.items():
            prev = self.proc_cache.get(pid)
            if prev and prev[0] == st["start_ticks"]:
                info = prev
            else:
                argv = proc_cmdline(pid) or []
                line = " ".join(argv)
                fw, role = "unknown", None
                for rx, f, r in SERVER_PATTERNS:
                    if rx.search(line):
                        fw, role = f, r
                        break
                if role is None and "supervisor" in line and (".mtpconsole" in line or self.runs_dir in line):
                    role = "supervisor"
                env = None
                if role is not None or pid in under or pid in gpu_mem:
                    env = proc_environ(pid, ENV_NAMES)
                info = (st["start_ticks"], argv, env, proc_uid(pid), fw, role)
            cache[pid] = info
            start, argv, env, uid, fw, role = info
            if role is None and pid not in under and pid not in gpu_mem:
                continue
            if env is None and (pid in under or pid in gpu_mem):
                env = proc_environ(pid, ENV_NAMES)
                cache[pid] = (start, argv, env, uid, fw, role)
            envd = env or {}
            if self.sim_scope and role != "supervisor" and envd.get(SIM_DIR_ENV) != self.sim_scope:
                continue  # a simulated host sees only the processes of its own simulation
            out.append({
                "pid": pid, "ppid": st["ppid"], "pgid": st["pgid"], "sid": st["sid"],
                "start_ticks": start, "state": st["state"], "uid": uid, "user": user_name(uid),
                "argv": argv, "role": role or "other", "framework": fw,
                "cuda_visible_devices": envd.get("CUDA_VISIBLE_DEVICES"),
                "session_id": envd.get(SESSION_ENV) or under.get(pid),
                "gpu_mem_mib": dict((str(k), v) for k, v in gpu_mem.get(pid, {}).items()),
                "rss_kib": st["rss_kib"],
            })
        self.proc_cache = cache
        return out

    def scan_sessions(self):
        """Read every run directory (spec/record/exit cached once final)."""
        try:
            names = os.listdir(self.runs_dir)
        except OSError:
            return {}
        out = {}
        for sid in names:
            if sid.startswith("."):
                continue
            d = os.path.join(self.runs_dir, sid)
            c = self.session_cache.get(sid)
            if c is not None and c.get("final"):
                out[sid] = c  # ended, and nothing of it runs: its files no longer change
                continue
            if c is None:
                if not os.path.isdir(d):
                    continue
                c = {"session_id": sid, "run_dir": d, "spec": None, "record": None, "exit": None}
            if c["spec"] is None:
                c["spec"] = load_json(os.path.join(d, RUN_SPEC))
            if c["record"] is None:
                c["record"] = load_json(os.path.join(d, RUN_RECORD))
            if c["exit"] is None:
                c["exit"] = load_json(os.path.join(d, RUN_EXIT))
            try:
                c["log_size"] = os.stat(os.path.join(d, RUN_LOG)).st_size
            except OSError:
                c["log_size"] = 0
            c["stop_requested"] = os.path.exists(os.path.join(d, RUN_STOP_REQUEST))
            rec = c["record"] or {}
            c["server_alive"] = bool(rec) and proc_alive(rec.get("pid", -1), rec.get("start_ticks"))
            c["supervisor_alive"] = bool(rec) and proc_alive(rec.get("supervisor_pid", -1),
                                                              rec.get("supervisor_start_ticks"))
            if rec and c["exit"] is None and c["server_alive"]:
                self.ensure_watch(rec["pid"], rec.get("start_ticks"), sid)
            c["final"] = c["exit"] is not None and not c["server_alive"] and not c["supervisor_alive"]
            out[sid] = c
        self.session_cache = dict((k, v) for k, v in self.session_cache.items() if k in out)
        self.session_cache.update(out)
        return out

    def visible_sessions(self, sessions):
        live = [s for s in sessions.values() if not s.get("exit")]
        ended = sorted((s for s in sessions.values() if s.get("exit")),
                       key=lambda s: s["session_id"], reverse=True)[:RECENT_ENDED_SESSIONS]
        return sorted(live + ended, key=lambda s: s["session_id"])

    # -- process exit watches
    def ensure_watch(self, pid, start_ticks, session_id=None):
        key = (pid, start_ticks)
        if key in self.watches:
            return
        fd = None
        if hasattr(os, "pidfd_open"):
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                fd = None
        if start_ticks is not None and not proc_alive(pid, start_ticks):
            if fd is not None:
                os.close(fd)
            self.watches[key] = {"fd": None, "session_id": session_id}
            self.on_exit(key)
            return
        self.watches[key] = {"fd": fd, "session_id": session_id}
        if fd is not None:
            self.sel.register(fd, selectors.EVENT_READ, ("pidfd", key))

    def on_exit(self, key):
        w = self.watches.pop(key, None)
        if w is None:
            return
        if w["fd"] is not None:
            try:
                self.sel.unregister(w["fd"])
            except (KeyError, ValueError):
                pass
            os.close(w["fd"])
        ev = {"type": "event", "kind": "exit", "pid": key[0], "start_ticks": key[1], "at": now()}
        if w["session_id"]:
            ev["session_id"] = w["session_id"]
            self.pending_exits[w["session_id"]] = now() + 5.0
        self.send(ev)

    def poll_watches(self):
        for key, w in list(self.watches.items()):
            if w["fd"] is None and not proc_alive(key[0], key[1]):
                self.on_exit(key)

    def poll_pending_exits(self):
        for sid, deadline in list(self.pending_exits.items()):
            d = os.path.join(self.runs_dir, sid)
            ex = load_json(os.path.join(d, RUN_EXIT))
            if ex is not None or now() > deadline:
                del self.pending_exits[sid]
                c = self.session_cache.get(sid)
                if c is not None:
                    c["exit"] = ex
                self.send({"type": "event", "kind": "session_ended", "session_id": sid, "exit": ex})
                self.next_tick = 0.0  # push a fresh sample now

    # -- logs
    def log_path(self, session_id):
        if not isinstance(session_id, str) or not SESSION_ID_RE.match(session_id):
            raise OpError("bad session id %r" % (session_id,))
        return os.path.join(self.runs_dir, session_id, RUN_LOG)

    def read_chunk(self, path, offset, max_bytes):
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if offset > size:
                offset = 0  # truncated or replaced: start over, never show stale bytes twice
            f.seek(offset)
            data = f.read(max_bytes)
        if len(data) == max_bytes:
            cut = data.rfind(b"\n")
            if cut >= 0:
                data = data[:cut + 1]
        elif data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n")
            data = data[:cut + 1] if cut >= 0 else b""
        return offset, data, size

    def poll_follows(self):
        for sid, off in list(self.follows.items()):
            try:
                path = self.log_path(sid)
                size = os.stat(path).st_size
            except (OSError, OpError):
                continue
            if size < off:  # truncated by hand: say so and start over, never skip what follows
                self.follows[sid] = 0
                self.send({"type": "event", "kind": "log_truncated", "session_id": sid, "size": size,
                           "at": now()})
                continue
            if size == off:
                continue
            try:
                start, data, size = self.read_chunk(path, off, MAX_LOG_CHUNK)
            except OSError:
                continue
            if data:
                self.follows[sid] = start + len(data)
                self.send({"type": "log", "session_id": sid, "offset": start, "end": start + len(data),
                           "data": data.decode("utf-8", "replace")})

    # -- ops
    def op_hello(self):
        return {
            "agent_version": AGENT_VERSION, "python": sys.version.split()[0], "hostname": socket.gethostname(),
            "uid": os.getuid(), "user": user_name(os.getuid()), "boot_id": boot_id(), "pid": os.getpid(),
            "gpu_source": self.gpu.name, "gpu_error": self.gpu.error, "clk_tck": CLK_TCK,
            "runs_dir": self.runs_dir, "pidfd": hasattr(os, "pidfd_open"),
        }

    def op_ping(self):
        return now()

    def op_snapshot(self):
        t0 = time.perf_counter()
        s = self.take_sample()
        s["tick_ms"] = round((time.perf_counter() - t0) * 1000.0, 3)
        return s

    def op_set_interval(self, interval):
        self.interval = max(0.05, float(interval))
        self.next_tick = 0.0
        return self.interval

    def op_sessions(self):
        return sorted(self.scan_sessions().values(), key=lambda s: s["session_id"])

    def op_read_log(self, session_id, offset=None, tail_bytes=None, max_bytes=MAX_LOG_CHUNK):
        path = self.log_path(session_id)
        try:
            size = os.stat(path).st_size
        except OSError as e:
            raise OpError("no log for session %s: %s" % (session_id, e.strerror))
        max_bytes = max(1, min(int(max_bytes), 8 << 20))
        if offset is None:
            offset = max(0, size - int(tail_bytes or max_bytes))
        start, data, size = self.read_chunk(path, int(offset), max_bytes)
        if tail_bytes and start > 0:
            nl = data.find(b"\n")  # drop the partial first line of a tail
            if nl >= 0:
                start, data = start + nl + 1, data[nl + 1:]
        return {"offset": start, "end": start + len(data), "size": size, "data": data.decode("utf-8", "replace")}

    def op_follow_log(self, session_id, offset=0):
        self.log_path(session_id)
        self.follows[session_id] = int(offset)
        return True

    def op_unfollow_log(self, session_id):
        self.follows.pop(session_id, None)
        return True

    def op_watch(self, pid, start_ticks=None, session_id=None):
        self.ensure_watch(int(pid), start_ticks, session_id)
        return True

    def op_port_open(self, port):
        return port_open(int(port))

    def op_port_owner(self, port):
        inode = listening_ports().get(int(port))
        if inode is None:
            return None
        pid = pid_of_socket_inode(inode)
        return {"pid": pid, "argv": proc_cmdline(pid) if pid else None}

    def op_http_get(self, port, path="/health", timeout=5.0):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=float(timeout))
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return {"status": r.status, "body": r.read(64 * 1024).decode("utf-8", "replace")}
        except (OSError, http.client.HTTPException) as e:
            return {"status": 0, "body": "%s: %s" % (type(e).__name__, e)}
        finally:
            conn.close()

    def op_read_file(self, path, max_bytes=1 << 20):
        with open(os.path.expanduser(path), "rb") as f:
            return {"data": f.read(min(int(max_bytes), 16 << 20)).decode("utf-8", "replace")}

    def op_run(self, argv, timeout=60, env=None):
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise OpError("argv must be a non-empty list of strings")
        full_env = dict(os.environ)
        full_env.update(env or {})
        try:
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=float(timeout), env=full_env, check=False)
        except FileNotFoundError:
            raise OpError("cannot execute %r: not found" % argv[0])
        except subprocess.TimeoutExpired:
            raise OpError("%r timed out after %ss" % (argv[0], timeout))
        return {"rc": p.returncode, "stdout": p.stdout.decode("utf-8", "replace")[-4 << 20:],
                "stderr": p.stderr.decode("utf-8", "replace")[-1 << 20:]}

    def op_vmstat(self):
        return {"oom_kill": read_oom_kill()}

    def op_proc(self, pid):
        st = proc_stat(int(pid))
        if st is None:
            return None
        st["argv"] = proc_cmdline(int(pid))
        return st

    def op_kill(self, start_ticks, signal=15, pid=None, pgid=None, session_id=None, pids=None):
        """Signal a process group (checked against its leader's start time) or one process.

        ``pids`` ([[pid, start_ticks], ...]) additionally signals stragglers outside the group.
        """
        sig = int(signal)
        done = []
        if session_id:
            d = os.path.dirname(self.log_path(session_id))
            if os.path.isdir(d) and not os.path.exists(os.path.join(d, RUN_STOP_REQUEST)):
                atomic_write_json(os.path.join(d, RUN_STOP_REQUEST), {"at": now(), "signal": sig})
        if pid is not None:
            st = proc_stat(int(pid))
            if st is None or st["state"] in ("Z", "X"):
                if not pids:
                    raise OpError("no such process %s (already gone)" % pid)
            elif start_ticks is not None and st["start_ticks"] != int(start_ticks):
                raise OpError("process %s is not the one targeted (start time changed): refusing" % pid)
            elif pgid is not None:
                if st["pgid"] != int(pgid):
                    raise OpError("process %s left group %s: refusing to signal the group" % (pid, pgid))
                try:
                    os.killpg(int(pgid), sig)
                    done.append(-int(pgid))
                except ProcessLookupError:
                    pass
            else:
                try:
                    os.kill(int(pid), sig)
                    done.append(int(pid))
                except ProcessLookupError:
                    pass
        for p, st_ticks in pids or []:
            if proc_alive(int(p), st_ticks):
                try:
                    os.kill(int(p), sig)
                    done.append(int(p))
                except ProcessLookupError:
                    pass
        return {"signalled": done}

    # -- launch
    def live_sessions(self):
        out = []
        for s in self.scan_sessions().values():
            if s.get("exit"):
                continue
            if s.get("record") and not (s.get("server_alive") or s.get("supervisor_alive")):
                continue
            out.append(s)
        return out

    def op_launch(self, spec, env=None, preflight=None):
        """Preflight and spawn under a host-wide lock; return the new session's info.

        Two consoles launching on the same GPU or port serialize on the lock; the second
        one sees the first's live session and is told who holds it.
        """
        preflight = preflight or {}
        env = dict(self.launch_env, **(env or {}))
        sid = spec.get("session_id") or ""
        if not SESSION_ID_RE.match(sid):
            raise OpError("bad session id %r" % sid)
        argv = spec.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
            raise OpError("argv must be a non-empty list of strings without NUL")
        for k, v in env.items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k) or "\0" in str(v):
                raise OpError("bad environment variable name or value for %r" % k)
        path_env = env.get("PATH", os.environ.get("PATH", ""))
        if "/" not in argv[0] and shutil.which(argv[0], path=path_env) is None:
            raise OpError("server command %r not found on the host's PATH" % argv[0])
        if "/" in argv[0] and not os.access(argv[0], os.X_OK):
            raise OpError("server command %r does not exist or is not executable" % argv[0])
        try:
            os.makedirs(self.runs_dir, exist_ok=True)
        except OSError as e:
            raise OpError("cannot create runs directory %s: %s" % (self.runs_dir, e.strerror))
        lock_fd = os.open(os.path.join(self.runs_dir, ".launch.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            checks = self.preflight(spec, preflight)
            bad = [c for c in checks if c["ok"] is False]
            if bad:
                raise OpError("preflight failed: " + "; ".join(c["detail"] for c in bad))
            info = self.spawn(spec, env)
            info["preflight"] = checks
            return info
        finally:
            os.close(lock_fd)

    def preflight(self, spec, opts):
        gpus = [int(g) for g in spec.get("gpus") or []]
        port = spec.get("port")
        checks = []
        holders = []
        for s in self.live_sessions():
            sp = s.get("spec") or {}
            shared = sorted(set(gpus) & set(int(g) for g in sp.get("gpus") or []))
            same_port = port is not None and sp.get("port") == port
            if shared or same_port:
                rec = s.get("record") or {}
                what = ("GPU %s" % ",".join(map(str, shared))) if shared else "port %s" % port
                holders.append("%s is held by session %s (pid %s, launched by %s)" % (
                    what, s["session_id"], rec.get("pid", "starting"), sp.get("launched_by") or "?"))
        checks.append({"name": "no live session on GPU/port", "ok": not holders,
                       "detail": "; ".join(holders) or "free"})
        if port is not None:
            busy = port_open(int(port)) or int(port) in listening_ports()
            detail = "port %s is free" % port
            if busy:
                owner = self.op_port_owner(port)
                detail = "port %s is in use%s" % (port, " by pid %s (%s)" % (
                    owner["pid"], " ".join(owner["argv"] or [])[:120]) if owner and owner.get("pid") else "")
            checks.append({"name": "port free", "ok": not busy, "detail": detail})
        if self.gpu.name == "none" or not self.last_gpus:
            try:
                self.last_gpus = self.gpu.sample()
            except Exception:
                self.last_gpus = []
        if not self.last_gpus:
            checks.append({"name": "GPUs free", "ok": None,
                           "detail": "skipped: %s" % (self.gpu.error or "no GPU information")})
        else:
            by_index = dict((g["index"], g) for g in self.last_gpus)
            problems, notes = [], []
            need = opts.get("need_mib")
            for i in gpus:
                g = by_index.get(i)
                if g is None:
                    problems.append("GPU %d does not exist on this host (has %s)" % (
                        i, ",".join(str(k) for k in sorted(by_index))))
                    continue
                foreign = [p for p in g.get("procs") or []]
                if foreign and not opts.get("allow_busy"):
                    problems.append("GPU %d has compute processes: %s" % (i, ", ".join(
                        "pid %d (%s MiB)" % (p["pid"], p.get("used_mib")) for p in foreign)))
                free = None
                if g.get("mem_total_mib") is not None and g.get("mem_used_mib") is not None:
                    free = g["mem_total_mib"] - g["mem_used_mib"] - (g.get("mem_reserved_mib") or 0)
                if need and free is not None and free < need:
                    problems.append("GPU %d has %d MiB free, the plan needs %d MiB" % (i, free, need))
                notes.append("GPU %d: %s MiB free" % (i, free))
            checks.append({"name": "GPUs free", "ok": not problems,
                           "detail": "; ".join(problems) or "; ".join(notes)})
        return checks

    def spawn(self, spec, env):
        run_dir = os.path.join(self.runs_dir, spec["session_id"])
        try:
            os.mkdir(run_dir, 0o755)
        except FileExistsError:
            raise OpError("run directory %s already exists: refusing to reuse a session" % run_dir)
        except OSError as e:
            raise OpError("cannot create %s: %s" % (run_dir, e.strerror))
        try:
            spec = dict(spec)
            spec["env_names"] = sorted(env)
            atomic_write_json(os.path.join(run_dir, RUN_SPEC), spec)
            sup = self.supervisor_path()
        except OSError as e:  # a full or failing disk: say where, leave nothing half-written
            shutil.rmtree(run_dir, ignore_errors=True)
            raise OpError("cannot write the run directory %s: %s" % (run_dir, e.strerror or e))
        try:
            p = subprocess.Popen([sys.executable, sup, run_dir], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, close_fds=True, cwd=run_dir)
            _, err = p.communicate((json.dumps({"env": env}) + "\n").encode("utf-8"), timeout=30)
        except OSError as e:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise OpError("cannot start the supervisor: %s" % e)
        except subprocess.TimeoutExpired:
            raise OpError("the supervisor did not detach within 30 s (see %s)" % run_dir)
        rec = load_json(os.path.join(run_dir, RUN_RECORD))
        ex = load_json(os.path.join(run_dir, RUN_EXIT))
        if rec is None and ex is None:
            if not os.path.exists(os.path.join(run_dir, RUN_LOG)):
                shutil.rmtree(run_dir, ignore_errors=True)
            raise OpError("the supervisor exited (%s) without starting the server: %s" % (
                p.returncode, err.decode("utf-8", "replace").strip()[-500:] or "no output"))
        if rec:
            self.ensure_watch(rec["pid"], rec.get("start_ticks"), spec["session_id"])
        self.session_cache.pop(spec["session_id"], None)
        return self.scan_sessions().get(spec["session_id"])

    def supervisor_path(self):
        if not self.supervisor_src:
            raise OpError("no supervisor source was shipped to the agent")
        digest = hashlib.sha256(self.supervisor_src.encode("utf-8")).hexdigest()[:16]
        path = os.path.join(self.runs_dir, ".supervisor-%s.py" % digest)
        if not os.path.exists(path):
            tmp = "%s.tmp.%d" % (path, os.getpid())
            try:
                with open(tmp, "w") as f:
                    f.write(self.supervisor_src)
                os.rename(tmp, path)
            except OSError:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        return path


class OpError(Exception):
    """An op failed in a way the operator should read as is."""


def main(stdin=None, stdout=None):
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    cfg_line = stdin.readline()
    try:
        cfg = json.loads(cfg_line) if cfg_line.strip() else {}
    except ValueError:
        cfg = {}
    try:
        agent = Agent(cfg, stdin, stdout)
    except Exception as e:
        out = getattr(stdout, "buffer", stdout)
        out.write((json.dumps({"type": "fatal", "message": "agent start failed: %s" % e}) + "\n").encode())
        out.flush()
        return 1
    agent.send({"type": "ready", "hello": agent.op_hello()})
    try:
        agent.run()
    except Exception:
        agent.send({"type": "fatal", "message": traceback.format_exc()[-2000:]})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
