"""Bounded soak: launch / load / relaunch / kill cycles through the real console stack, measuring leaks.

    python tests/soak.py --minutes 10         # the full soak (default 10 minutes)
    python tests/soak.py --quick              # ~15 s, what CI runs (tests/test_reliability_soak.py)

The host is a real OpenSSH sshd on 127.0.0.1 (the test suite's fixture code, with temporary keys) with
simulated GPUs (``gpu_source="sim"``) and the SGLang stand-in as the server; the console side is one
HostLink kept up by ``HostLink.run`` plus a HostTracker (what the TUI runs), in this process. Each cycle:
launch (confirmed READY) -> ``python -m console load`` -> relaunch with edited flags (confirmed kill, then
launch) -> load -> kill (confirmed). After every cycle it records the console process's open file
descriptors, RSS and asyncio tasks, the agents and SSH sessions under this sshd, and every process left
carrying one of this soak's session ids. At the end it prints a JSON summary; exit status 1 when a leak
or a failed operation was seen. Without sshd it falls back to the local transport (no channel count).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from console.config import HostConfig  # noqa: E402
from console.link.link import HostLink  # noqa: E402
from console.link.ssh import HostSpec, parse_host_spec  # noqa: E402
from console.model import KillTarget, LaunchRequest  # noqa: E402
from console.ops import lifecycle  # noqa: E402
from console.ops.tracker import HostTracker  # noqa: E402
from console.sim.demo import FIXED_FLAGS, MODEL_CONFIG  # noqa: E402


def _ppid(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        return int(raw[raw.rfind(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def descendants_of(root: int) -> set[int]:
    pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    parent = {p: _ppid(p) for p in pids}
    out: set[int] = set()
    for p in pids:
        cur, n = p, 0
        while cur and n < 64:
            cur, n = parent.get(cur), n + 1
            if cur == root:
                out.add(p)
                break
    return out


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def session_procs(sids: set[str]) -> list[int]:
    """Live (non-zombie) processes whose environment carries one of these session ids."""
    out = []
    marks = {f"MTPCONSOLE_SESSION={s}".encode() for s in sids}
    for n in os.listdir("/proc"):
        if not n.isdigit():
            continue
        try:
            env = set(Path(f"/proc/{n}/environ").read_bytes().split(b"\0"))
            state = Path(f"/proc/{n}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if env & marks and state != "Z":
            out.append(int(n))
    return out


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def stage(root: Path, speed: float) -> tuple[HostConfig, Path]:
    sim, runs, model = root / "sim", root / "runs", root / "model"
    for d in (sim / "alloc", runs, model):
        d.mkdir(parents=True, exist_ok=True)
    (sim / "gpus.json").write_text(json.dumps([
        {"index": i, "uuid": f"GPU-soak-{i}", "name": "Sim", "mem_total_mib": 97887, "power_limit_w": 600.0}
        for i in range(2)]))
    (model / "config.json").write_text(json.dumps(MODEL_CONFIG))
    env = {"MTPCONSOLE_SIM_DIR": str(sim), "MTPCONSOLE_SIM_SPEED": str(speed), "PYTHONPATH": str(REPO)}
    hc = HostConfig(python=sys.executable, runs_dir=str(runs), gpu_source="sim", sim_dir=str(sim),
                    server_command=[sys.executable, "-m", "console.sim.sglang"], launch_env=env)
    return hc, model


async def load(port: int, requests: int) -> tuple[bool, str]:
    p = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "console", "load", "--port", str(port), "--requests", str(requests),
        "--concurrency", "4", "--max-tokens", "16", cwd=str(REPO), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(p.communicate(), 60)
    except asyncio.TimeoutError:
        p.kill()
        await p.wait()
        return False, "load timed out"
    return p.returncode == 0, out.decode(errors="replace").strip().splitlines()[0] if out else ""


def free_port() -> int:
    from tests.helpers.sshd import free_port as block

    return block()


async def soak(seconds: float, speed: float, use_ssh: bool, verbose: bool) -> dict:
    root = Path(tempfile.mkdtemp(prefix="mtpconsole-soak-"))
    sshd = None
    hc, model = stage(root, speed)
    if use_ssh:
        try:
            from tests.conftest import make_sshd

            sshd = make_sshd(root / "sshd")
        except BaseException as e:  # pytest.skip/fail raise BaseException subclasses
            print(f"soak: no sshd ({e}); using the local transport", file=sys.stderr)
            sshd = None
    if sshd is not None:
        hc = hc.model_copy(update={"python": "python3"})
        link = HostLink(parse_host_spec(sshd.alias), hc, ssh_config=str(sshd.ssh_config), interval=1.0)
    else:
        link = HostLink(HostSpec(name="local", local=True), hc, interval=1.0)
    views = {"n": 0}
    # the tracker registers itself as the link's listener, as in the TUI
    HostTracker(link, interval=1.0, on_view=lambda v: views.__setitem__("n", views["n"] + 1),
                on_log=lambda *a: None)
    runner = asyncio.create_task(link.run())
    sids: set[str] = set()
    samples: list[dict] = []
    failures: list[str] = []
    cycles = 0
    t_start = time.monotonic()

    def measure(tag: str) -> dict:
        m = {"t_s": round(time.monotonic() - t_start, 1), "tag": tag, "fds": len(os.listdir("/proc/self/fd")),
             "rss_kib": rss_kib(), "tasks": len(asyncio.all_tasks()), "leftover_procs": len(session_procs(sids))}
        if sshd is not None:
            under = descendants_of(sshd.proc.pid)
            m["agents"] = sum(1 for p in under if b"mtpconsole-agent" in cmdline(p))
            m["sshd_sessions"] = sum(1 for p in under if cmdline(p).startswith(b"sshd:"))
        return m

    try:
        await asyncio.wait_for(link.connected.wait(), 30)
        await asyncio.sleep(1.5)
        samples.append(measure("start"))
        while time.monotonic() - t_start < seconds:
            cycles += 1
            port = free_port()
            base = ["--model-path", str(model), *FIXED_FLAGS]
            req = LaunchRequest(host=link.name, command=list(hc.server_command), flags=base, gpus=[0], port=port)
            r = await lifecycle.launch(link, req, timeout=120)
            if r.session_id:
                sids.add(r.session_id)
            if not r.ok:
                failures.append(f"cycle {cycles} launch: {r.error}")
                await asyncio.sleep(1)
                continue
            ok, line = await load(port, 8)
            if not ok:
                failures.append(f"cycle {cycles} load: {line}")
            edited = LaunchRequest(host=link.name, command=list(hc.server_command),
                                   flags=[x if x != "16" else "8" for x in base], gpus=[0], port=port)
            rr = await lifecycle.relaunch(link, KillTarget(host=link.name, session_id=r.session_id), edited,
                                          timeout=120, grace=10)
            if rr.session_id:
                sids.add(rr.session_id)
            if not rr.ok:
                failures.append(f"cycle {cycles} relaunch: {rr.error}")
                continue
            ok, line = await load(port, 8)
            if not ok:
                failures.append(f"cycle {cycles} load after relaunch: {line}")
            k = await lifecycle.kill(link, KillTarget(host=link.name, session_id=rr.session_id), grace=10)
            if not k.ok:
                failures.append(f"cycle {cycles} kill: {k.error}")
            await asyncio.sleep(0.5)
            m = measure(f"cycle {cycles}")
            samples.append(m)
            if verbose:
                print(json.dumps(m), flush=True)
        await asyncio.sleep(2.0)  # let the tracker's unfollow/health tasks settle
        samples.append(measure("end"))
    finally:
        await link.close()
        runner.cancel()
        for sid in sids:
            rec = root / "runs" / sid / "record.json"
            if rec.exists():
                try:
                    os.killpg(json.loads(rec.read_text())["pgid"], 9)
                except (OSError, ValueError, KeyError):
                    pass
        left_after_close = len(session_procs(sids))
        if sshd is not None:
            sshd.stop()
        shutil.rmtree(root, ignore_errors=True)
    first, last = samples[0], samples[-1]
    steady = samples[1:] or samples
    summary = {
        "seconds": round(time.monotonic() - t_start, 1), "cycles": cycles, "launches": 2 * cycles,
        "transport": "ssh" if sshd is not None else "local", "failures": failures,
        "fds": {"start": first["fds"], "end": last["fds"], "max": max(s["fds"] for s in samples)},
        "rss_mib": {"start": round(first["rss_kib"] / 1024, 1), "end": round(last["rss_kib"] / 1024, 1),
                    "after_first_cycle": round(steady[0]["rss_kib"] / 1024, 1)},
        "tasks": {"start": first["tasks"], "end": last["tasks"]},
        "leftover_server_procs": {"max_after_kill": max(s["leftover_procs"] for s in samples),
                                  "after_close": left_after_close},
        "views_emitted": views["n"],
    }
    if sshd is not None:
        summary["agents"] = {"start": first["agents"], "end": last["agents"], "max": max(s["agents"] for s in samples)}
        summary["sshd_sessions"] = {"start": first["sshd_sessions"], "end": last["sshd_sessions"],
                                    "max": max(s["sshd_sessions"] for s in samples)}
    leaks = []
    if last["fds"] > first["fds"] + 4:
        leaks.append("file descriptors")
    if summary["leftover_server_procs"]["max_after_kill"] or left_after_close:
        leaks.append("server processes")
    if sshd is not None and (last["agents"] > 1 or last["sshd_sessions"] > first["sshd_sessions"]):
        leaks.append("SSH channels/agents")
    if last["tasks"] > first["tasks"] + 3:
        leaks.append("asyncio tasks")
    summary["leaks"] = leaks
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--quick", action="store_true", help="about 15 s")
    ap.add_argument("--speed", type=float, default=20.0, help="stand-in time scale (default 20)")
    ap.add_argument("--local", action="store_true", help="local transport instead of the sshd")
    ap.add_argument("-v", "--verbose", action="store_true", help="one JSON line per cycle")
    a = ap.parse_args(argv)
    seconds = 15.0 if a.quick else a.minutes * 60.0
    summary = asyncio.run(soak(seconds, a.speed, not a.local, a.verbose))
    print(json.dumps(summary, indent=2))
    return 0 if not summary["failures"] and not summary["leaks"] else 1


if __name__ == "__main__":
    sys.exit(main())
