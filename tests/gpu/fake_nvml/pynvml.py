"""A fake pynvml for a dry run of tests/gpu/validate.py without a GPU (never imported by the console's tests).

One "Fake H200": every live process whose argv[1] ends in gpu_load.py (or group_load.py) holds 5000 MiB and
draws the GPU to 600 W; idle 100 W; v1 memory counts 600 MiB reserved, v2 does not. ``FAKE_NVML_GPUS=N``
(validate_group.py's dry run): N such GPUs, each process on the first GPU of its ``CUDA_VISIBLE_DEVICES``. Use::

    PATH=tests/gpu/fake_nvml:$PATH PYTHONPATH=tests/gpu/fake_nvml python3 tests/gpu/validate.py --no-gpu --out /tmp/gv
"""

import os

NVML_TEMPERATURE_GPU = 0
nvmlMemory_v2 = 0x2000028
MIB = 1 << 20


class _O(object):
    def __init__(self, **k):
        self.__dict__.update(k)


LOADS = (b"gpu_load.py", b"group_load.py")


def _count():
    try:
        return max(1, int(os.environ.get("FAKE_NVML_GPUS", "1")))
    except ValueError:
        return 1


def _gpu_of(pid):
    """The GPU a load process runs on: GPU 0 with one fake GPU, else its CUDA_VISIBLE_DEVICES' first entry."""
    if _count() == 1:
        return 0
    try:
        with open("/proc/%s/environ" % pid, "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        return int(env.get(b"CUDA_VISIBLE_DEVICES", b"0").split(b",")[0])
    except (OSError, ValueError):
        return 0


def _pids(h=None):
    out = []
    for n in os.listdir("/proc"):
        if not n.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % n, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % n) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if len(argv) > 1 and argv[1].endswith(LOADS) and state not in ("Z", "X") and (h is None or _gpu_of(n) == h):
            out.append(int(n))
    return out


def nvmlInit():
    pass


def nvmlDeviceGetCount():
    return _count()


def nvmlDeviceGetHandleByIndex(i):
    return i


def nvmlDeviceGetName(h):
    return "Fake H200"


def nvmlDeviceGetUUID(h):
    return "GPU-fake-%d" % h


def nvmlDeviceGetPowerUsage(h):
    return 100000 + 500000 * bool(_pids(h))


def nvmlDeviceGetEnforcedPowerLimit(h):
    return 700000


def nvmlDeviceGetUtilizationRates(h):
    return _O(gpu=100 if _pids(h) else 0, memory=0)


def nvmlDeviceGetMemoryInfo(h, version=None):
    used = 5000 * len(_pids(h))
    if version is None:
        return _O(used=(used + 600) * MIB, total=143771 * MIB, free=(143771 - used - 600) * MIB)
    return _O(used=used * MIB, total=143771 * MIB, reserved=600 * MIB, free=(143771 - used - 600) * MIB)


def nvmlDeviceGetTemperature(h, sensor):
    return 30


def nvmlDeviceGetComputeRunningProcesses(h):
    return [_O(pid=p, usedGpuMemory=5000 * MIB) for p in _pids(h)]
