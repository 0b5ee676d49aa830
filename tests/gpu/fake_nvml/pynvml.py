"""A fake pynvml for a dry run of tests/gpu/validate.py without a GPU (never imported by the console's tests).

One "Fake H200": every live process whose argv[1] ends in gpu_load.py holds 5000 MiB and draws
the GPU to 600 W; idle 100 W; v1 memory counts 600 MiB reserved, v2 does not. Use::

    PATH=tests/gpu/fake_nvml:$PATH PYTHONPATH=tests/gpu/fake_nvml python3 tests/gpu/validate.py --no-gpu --out /tmp/gv
"""

import os

NVML_TEMPERATURE_GPU = 0
nvmlMemory_v2 = 0x2000028
MIB = 1 << 20


class _O(object):
    def __init__(self, **k):
        self.__dict__.update(k)


def _pids():
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
        if len(argv) > 1 and argv[1].endswith(b"gpu_load.py") and state not in ("Z", "X"):
            out.append(int(n))
    return out


def nvmlInit():
    pass


def nvmlDeviceGetCount():
    return 1


def nvmlDeviceGetHandleByIndex(i):
    return i


def nvmlDeviceGetName(h):
    return "Fake H200"


def nvmlDeviceGetUUID(h):
    return "GPU-fake-0"


def nvmlDeviceGetPowerUsage(h):
    return 100000 + 500000 * bool(_pids())


def nvmlDeviceGetEnforcedPowerLimit(h):
    return 700000


def nvmlDeviceGetUtilizationRates(h):
    return _O(gpu=100 if _pids() else 0, memory=0)


def nvmlDeviceGetMemoryInfo(h, version=None):
    used = 5000 * len(_pids())
    if version is None:
        return _O(used=(used + 600) * MIB, total=143771 * MIB, free=(143771 - used - 600) * MIB)
    return _O(used=used * MIB, total=143771 * MIB, reserved=600 * MIB, free=(143771 - used - 600) * MIB)


def nvmlDeviceGetTemperature(h, sensor):
    return 30


def nvmlDeviceGetComputeRunningProcesses(h):
    return [_O(pid=p, usedGpuMemory=5000 * MIB) for p in _pids()]
