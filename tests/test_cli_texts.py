"""Issue 26 item 9 (the command line's texts) and text ``status``: each GPU's state and session in the plain
output; a prefix never doubled (``no GPU information: no GPU information:``); the planner's ``does_not_fit`` never
in prose; an acknowledgement's time readable (not a raw epoch); a kill of nothing running says so (not
``0 process(es): ;``) and names each signalled pid once; GPU memory named after its real source (the simulated
GPUs, never NVML); sizes in GiB, ``GB`` and ``GiB`` read with their true meanings; an unreachable host says so and
why (not ``waiting for the first sample…``). Real CLI processes on the ``local`` host with simulated GPUs and the
SGLang stand-in; the pure phrasing helpers on their own."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from console.core.orphans import hunt_snapshot
from console.core.text import gpu_source_name, no_gpus_text
from console.model import ConnectionInfo, GpuProc, GpuSample, HostSnapshot, ProcRef
from console.sim.demo import FIXED_FLAGS, INCIDENT_FLAGS, MODEL_CONFIG
from tests.conftest import free_port
from tests.helpers.rel_util import cleanup_runs, cli, write_config
from tests.helpers.sim_files import make_sim, sim_env
from tests.test_orphans_cli import _p


def _host(tmp_path: Path, runs_dir: Path, gpus: int = 2, **extra) -> tuple[Path, dict, Path]:
    d, model = make_sim(tmp_path, gpus, tag="t")
    cfg = write_config(tmp_path / "config.toml", {"local": {
        "runs_dir": str(runs_dir), "python": sys.executable, "gpu_source": "sim", "sim_dir": str(d),
        "server_command": [sys.executable, "-m", "console.sim.sglang"], "launch_env": sim_env(d), **extra}})
    return cfg, {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}, model


def _gpu_line(out: str, i: int) -> str:
    return next(x for x in out.splitlines() if x.startswith(f"  GPU {i} "))


def test_text_status_names_each_gpus_state_and_session_and_the_operations_say_things_once(tmp_path, runs_dir):
    cfg, env, model = _host(tmp_path, runs_dir, gpus=3)
    base = ["--host", "local", "--config", str(cfg)]
    try:
        ok = cli("launch", *base, "--gpu", "1", "--port", str(free_port()), "--wait", "--json", "--",
                 "--model-path", str(model), *FIXED_FLAGS, env=env, timeout=180)
        ready = json.loads(ok.stdout)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        bad = cli("launch", *base, "--gpu", "0", "--port", str(free_port()), "--wait", "--force", "--json", "--",
                  "--model-path", str(model), *INCIDENT_FLAGS, env=env, timeout=180)
        failed = json.loads(bad.stdout)
        assert bad.returncode == 1 and failed["cause"] == "gpu_oom", bad.stdout
        pre = next(s["evidence"] for s in failed["steps"] if s["name"] == "preflight")
        assert "memory plan: does not fit" in pre and "does_not_fit" not in bad.stdout, pre
        st = cli("status", *base, env=env)
        assert st.returncode == 0, st.stderr
        assert re.match(rf"  GPU 0 Sim: FAILED: gpu_oom session {failed['session_id']} \(port \d+\) · ",
                        _gpu_line(st.stdout, 0)), st.stdout
        assert re.match(rf"  GPU 1 Sim: READY session {ready['session_id']} \(port \d+\) · ", _gpu_line(st.stdout, 1))
        assert _gpu_line(st.stdout, 2).startswith("  GPU 2 Sim: IDLE · "), st.stdout
        ack = cli("ack", *base, failed["session_id"], env=env)
        assert ack.returncode == 0 and re.search(r"acknowledged at \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \(\d+s ago\)",
                                                 ack.stdout), ack.stdout
        assert not re.search(r"acknowledged at \d{9,}", ack.stdout)
        k = cli("kill", *base, ready["session_id"], "--grace", "5", env=env)
        assert k.returncode == 0, k.stdout + k.stderr
        term = next(x for x in k.stdout.splitlines() if "SIGTERM" in x)
        pids = re.findall(r"pid (\d+)", term)
        assert pids and len(pids) == len(set(pids)), term  # each signalled pid named once
        after = cli("status", *base, env=env)
        assert _gpu_line(after.stdout, 0).startswith("  GPU 0 Sim: IDLE · "), after.stdout  # acknowledged
        assert _gpu_line(after.stdout, 1).startswith(f"  GPU 1 Sim: STOPPED session {ready['session_id']}")
    finally:
        cleanup_runs(runs_dir)


def test_a_kill_of_a_session_with_nothing_running_says_so(tmp_path, runs_dir):
    cfg, env, _ = _host(tmp_path, runs_dir, gpus=1)
    sid = "20260101-000000-gpu0-c0de"
    d = runs_dir / sid
    d.mkdir()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    (d / "spec.json").write_text(json.dumps({"session_id": sid, "argv": ["x", "--a"], "gpus": [0],
                                             "port": free_port(), "created_at": 1.0}))
    (d / "record.json").write_text(json.dumps({"supervisor_pid": 4_000_001, "pid": 4_000_002, "pgid": 4_000_002,
                                               "start_ticks": 5, "started_at": 2.0, "boot_id": boot}))
    (d / "output.log").write_text("x\n")
    k = cli("kill", "--host", "local", "--config", str(cfg), sid, "--grace", "1", env=env)
    assert "Traceback" not in k.stderr, k.stderr
    assert "0 process(es)" not in k.stdout and ": ;" not in k.stdout, k.stdout
    target = next(x for x in k.stdout.splitlines() if " target " in x)
    assert "no process of it is running" in target or "nothing signalled" in target or "already ended" in target, \
        k.stdout


def test_no_gpu_information_is_said_once(tmp_path, runs_dir):
    cfg = write_config(tmp_path / "config.toml", {"local": {"runs_dir": str(runs_dir), "python": sys.executable,
                                                            "gpu_source": "none"}})
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    kill, status = (cli(*a, "--host", "local", "--config", str(cfg), env=env)
                    for a in (["kill", "--gpu", "0"], ["status"]))
    assert kill.returncode == 2 and kill.stderr.count("no GPU information") == 1, kill.stderr
    assert "--gpu 0: local: no GPU information: " in kill.stderr and "name the SESSION or the --pid" in kill.stderr
    line = next(x for x in status.stdout.splitlines() if "GPUs: none" in x)
    assert line.count("no GPU information") == 1, line
    snap = HostSnapshot(name="h", connection=ConnectionInfo(state="connected"), received_at=1.0,
                        gpu_error="no GPU information: pynvml not importable; nvidia-smi not found on PATH")
    assert no_gpus_text(snap) == "no GPU information: pynvml not importable; nvidia-smi not found on PATH"
    down = HostSnapshot(name="h", connection=ConnectionInfo(state="unreachable", error="b200: cannot reach 10.0.0.9:22: "
                                                                                      "connection refused"))
    assert no_gpus_text(down) == "unreachable: b200: cannot reach 10.0.0.9:22: connection refused"  # not "waiting…"
    assert no_gpus_text(HostSnapshot(name="h", connection=ConnectionInfo(state="connecting"))).startswith("waiting")


def test_gpu_memory_is_named_after_its_real_source():
    snap = HostSnapshot(name="h", connection=ConnectionInfo(state="connected"), gpu_source="sim", agent_uid=1000,
                        gpus=[GpuSample(index=2, procs=[GpuProc(pid=71, used_mib=3000), GpuProc(pid=9999, used_mib=64)])],
                        servers=[_p(71, 1, 70, ["sglang::scheduler"], gpu_mem_mib={2: 3000})],
                        relatives=[ProcRef(pid=1, sid=1, pgid=1, state="S", argv=["/sbin/init"])])
    rep = hunt_snapshot(snap)
    facts = [e for o in rep.orphans for e in o.evidence] + [e for f in rep.foreign for e in f.evidence]
    held = [e for e in facts if e.startswith("holds ")]
    assert held and all(e.endswith("(the simulated GPUs)") for e in held), facts
    assert "NVML" not in " ".join(facts)
    assert gpu_source_name("nvml") == "NVML" and gpu_source_name("nvidia-smi") == "nvidia-smi"


def test_plan_says_gib_and_reads_gb_and_gib_with_their_true_meanings(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(MODEL_CONFIG))
    gib, gb = (cli("plan", "--model-config", str(cfg), "--gpu-mem", size, "--json") for size in ("96GiB", "96GB"))
    assert json.loads(gib.stdout)["plan"]["gpu_mem_bytes"] == 96 << 30, gib.stdout + gib.stderr
    assert json.loads(gb.stdout)["plan"]["gpu_mem_bytes"] == 96 * 10 ** 9, gb.stdout + gb.stderr
    text = cli("plan", "--model-config", str(cfg), "--gpu-mem", "96GB")
    assert "89.41 GiB" in text.stdout and not re.search(r"\d GB\b", text.stdout), text.stdout
    bad = cli("plan", "--model-config", str(cfg), "--gpu-mem", "lots")
    assert bad.returncode == 2 and "96GiB" in bad.stderr and "96GB for 96·10⁹ bytes" in bad.stderr, bad.stderr
