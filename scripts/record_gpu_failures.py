"""Record real GPU failure output for the classifier's produced slice (tests/data/real-logs/produced/).

Run on a machine with an NVIDIA GPU and torch: ``python3 scripts/record_gpu_failures.py OUTDIR``. Each case runs in
its own process with stdout and stderr in one file, as a server's output.log holds them, and its exit code is
written beside it. Cases: a real CUDA out-of-memory (asks for more memory than the GPU has) and an NCCL
communicator that cannot start because NCCL_SOCKET_IFNAME names no interface of the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

OOM = r"""
import torch
print("torch", torch.__version__, "device", torch.cuda.get_device_name(0), flush=True)
total = torch.cuda.get_device_properties(0).total_memory
x = torch.empty(int(total * 1.5), dtype=torch.uint8, device="cuda")
"""

NCCL = r"""
import os, torch, torch.distributed as dist
print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), flush=True)
torch.cuda.set_device(0)
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=0, world_size=1)
t = torch.ones(4, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("all_reduce done", t.tolist(), flush=True)
"""

CASES = {
    "torch-cuda-oom": (OOM, {}),
    "torch-nccl-bad-ifname": (NCCL, {"NCCL_SOCKET_IFNAME": "mtpbogus0", "NCCL_DEBUG": "WARN"}),
}


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, (code, env) in CASES.items():
        log = out / f"{name}.log"
        with open(log, "wb") as f:
            p = subprocess.run([sys.executable, "-c", code], stdout=f, stderr=subprocess.STDOUT,
                               env={**os.environ, **env}, timeout=180)
        (out / f"{name}.exit.json").write_text(json.dumps({"exit_code": p.returncode, "env": env}))
        print(name, p.returncode)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
