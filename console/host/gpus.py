"""GPU sources for the agent: NVML, else ``nvidia-smi`` CSV, else simulated GPUs, else an explicit none.

Stdlib only, Python >= 3.8 (``pynvml`` is imported when present). Every source has ``name``,
``error`` (why information is missing or degraded, else None) and ``sample()`` -> list of GPU
dicts (see ``console.model.GpuSample``); a failure of one field is a value in ``errors``.
"""

import random
import shutil
import subprocess
import threading
import time
from typing import Any, Dict, Optional

from .hostlib import proc_comm


class NoGpus(object):
    name = "none"

    def __init__(self, reason):
        self.error = reason

    def sample(self):
        return []


class NvmlGpus(object):
    """NVML through pynvml (nvidia-ml-py): init once, handles cached, every failure a value."""

    name = "nvml"
    error: Optional[str] = None
    v1_only = False

    def __init__(self):
        import pynvml  # raises ImportError when absent
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

    def _throttle(self, h, errors):
        """Names of the clock event reasons active now that slow the GPU down (idle and app clocks are not)."""
        nv = self.nv
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        if fn is None:
            return None
        bits = self._get(lambda: fn(h), errors, "throttle_reasons")
        if bits is None:
            return None
        return [name for bit, name in THROTTLE_BITS if int(bits) & bit]

    def sample(self):
        nv, out = self.nv, []
        for i, h, name, uuid in self.handles:
            e: Dict[str, str] = {}
            throttle = self._throttle(h, e)
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
                "procs": plist, "errors": e, "throttle_reasons": throttle,
            })
        return out


THROTTLE_BITS = ((0x4, "sw_power_cap"), (0x8, "hw_slowdown"), (0x20, "sw_thermal_slowdown"),
                 (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"))
"""NVML clock event reason bits that lower clocks under load (nvmlClocksEventReason*)."""


SMI_TIMEOUT_S = 10.0
"""How long one nvidia-smi query may take before it is killed (it runs off the agent's loop)."""


class SmiError(Exception):
    """nvidia-smi failed: the message says how, in its own words where it printed any."""


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
        g: Dict[str, Any] = {"index": index, "uuid": cols[1] or None, "name": cols[2] or None, "procs": [],
                             "errors": {}}
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
    error: Optional[str] = None

    def __init__(self, exe, timeout=SMI_TIMEOUT_S):
        self.exe = exe
        self.timeout = timeout

    def _run(self, query):
        """stdout of one query; a non-zero exit, a timeout or an unstartable binary is an SmiError that
        carries nvidia-smi's own words (its stderr, else its stdout: it prints driver errors there)."""
        try:
            p = subprocess.run([self.exe, query, "--format=csv,noheader,nounits"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            raise SmiError("nvidia-smi did not answer within %g s" % self.timeout)
        except OSError as e:
            raise SmiError("cannot run nvidia-smi: %s" % (e.strerror or e))
        out = p.stdout.decode("utf-8", "replace")
        if p.returncode != 0:
            said = (p.stderr.decode("utf-8", "replace").strip() or out.strip()).splitlines()
            raise SmiError("nvidia-smi failed (exit %s): %s" % (
                p.returncode, " | ".join(said)[-300:] if said else "no output"))
        return out

    def sample(self):
        text = self._run("--query-gpu=" + SMI_GPU_FIELDS)
        gpus = parse_smi_gpus(text)
        if not gpus and text.strip():
            raise SmiError("nvidia-smi printed no GPU line this agent can read: %r" % text.strip()[:200])
        try:
            return parse_smi_apps(self._run("--query-compute-apps=" + SMI_APP_FIELDS), gpus)
        except SmiError as e:  # the GPUs are known; only their process lists are not
            for g in gpus:
                g["errors"]["procs"] = str(e)
            return gpus


class SimGpus(object):
    """Simulated GPUs, through the console's one GPU model (console/sim/simgpu.py, shipped as source).

    Memory follows what live holders allocated (``<sim_dir>/alloc/<pid>.json``); a dead holder's
    memory is released a moment after its death, as a real driver does.
    """

    name = "sim"
    error: Optional[str] = None

    def __init__(self, sim_dir, sim_src):
        if not sim_src:
            raise ValueError("no simulation model was shipped to the agent")
        self.m: Dict[str, Any] = {"__name__": "mtpconsole_simgpu"}
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


class GpuSampler(object):
    """Samples a GPU source in a worker thread, so a slow or hung driver never blocks the agent's loop.

    ``request()`` asks for a new sample (ignored while one is in flight); ``latest()`` returns the
    last result at once: ``(gpus, error, sampled_at)``, with an error saying so when the sample in
    flight has taken longer than ``stall_s``. ``on_done`` is called (from the worker) after each sample.
    """

    def __init__(self, source, on_done=None, stall_s=5.0):
        self.source = source
        self.on_done = on_done
        self.stall_s = stall_s
        self.cond = threading.Condition()
        self.gpus, self.error, self.sampled_at = [], None, None
        self.generation = 0  # count of finished samples
        self.wanted = False
        self.busy_since = None
        self.thread = None

    def _work(self):
        while True:
            with self.cond:
                while not self.wanted:
                    self.cond.wait()
                self.wanted = False
                self.busy_since = time.time()
            try:
                gpus, err = self.source.sample(), self.source.error
            except Exception as e:
                gpus, err = [], "GPU sampling failed: %s" % (str(e) or type(e).__name__)
            with self.cond:
                self.gpus, self.error, self.sampled_at = gpus, err, time.time()
                self.generation += 1
                self.busy_since = None
                self.cond.notify_all()
            if self.on_done is not None:
                self.on_done()

    def request(self):
        """Ask for a fresh sample; returns the generation that will hold it."""
        with self.cond:
            if self.thread is None:
                self.thread = threading.Thread(target=self._work, name="gpu-sampler", daemon=True)
                self.thread.start()
            if self.busy_since is None:  # else the sample in flight is the fresh one
                self.wanted = True
                self.cond.notify_all()
            return self.generation + 1

    def done(self, generation):
        """True once the sample of ``generation`` (from ``request``) finished."""
        with self.cond:
            return self.generation >= generation

    def wait(self, generation, timeout):
        """Block (not on the agent's loop) until ``generation`` finished or ``timeout`` passed."""
        deadline = time.time() + timeout
        with self.cond:
            while self.generation < generation:
                left = deadline - time.time()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return True

    def latest(self):
        """(gpus, error, sampled_at) of the last finished sample, flagged when the next one is stuck."""
        with self.cond:
            gpus, err, at, busy = self.gpus, self.error, self.sampled_at, self.busy_since
        if busy is not None and time.time() - busy > self.stall_s:
            stuck = "GPU sampling (%s) has not answered for %.0f s" % (self.source.name, time.time() - busy)
            err = stuck + ("; " + err if err else "")
        elif at is None and busy is not None:
            err = err or "GPU sampling (%s) in progress" % self.source.name
        return gpus, err, at
