"""GPU sources for the agent: NVML, else ``nvidia-smi`` CSV, else simulated GPUs, else an explicit none.

Stdlib only, Python >= 3.8 (``pynvml`` is imported when present). Every source has ``name``,
``error`` (why information is missing or degraded, else None) and ``sample()`` -> list of GPU
dicts (see ``console.model.GpuSample``); a failure of one field is a value in ``errors``.
"""

import random
import shutil
import subprocess

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
    error = None
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
