"""Issue 13: how fast the UI shows the truth — the log pane following a new session, the panel
reading READY on a launch's result and STOPPED after a kill — by this console and by another.

The real app (headless, Textual's test driver) runs the real LiveBackend on a local host with
simulated GPUs and the SGLang stand-in (agent, supervisor, run directories, followed logs: the
same code as a real host). Each round, on GPU 1:

1. this console launches (the operations controller, as the flag form's Launch does): time from
   the call to the log pane following the new session, and from the launch's READY result to the
   panel's READY badge;
2. this console kills it: from the kill's result to the panel's STOPPED badge;
3. another console (a second link, as the CLI) launches there: from its ``spawned`` step to the
   log pane following that session;
4. the other console kills it: from its result to the panel's STOPPED badge.

Goal: each under 1 s. The agent samples once a second: a change made by another console is
seen at the next sample or exit event.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from bench.stats import summarize
from console.config import Config, HostConfig
from console.link.link import HostLink
from console.link.ssh import HostSpec
from console.model import KillTarget, LaunchRequest, Step
from console.ops import lifecycle
from console.ops.backend import LiveBackend
from console.sim.demo import FIXED_FLAGS, MODEL_CONFIG, free_port

GOAL_MS = 1000.0
GPU = 1


def _stage(root: Path) -> tuple[HostConfig, str]:
    sim, runs, model = root / "sim", root / "runs", root / "models" / "m27b"
    for d in (sim / "alloc", runs, model):
        d.mkdir(parents=True, exist_ok=True)
    (sim / "gpus.json").write_text(json.dumps([
        {"index": i, "uuid": f"GPU-b-{i}", "name": "SIM GPU", "mem_total_mib": 97887, "power_limit_w": 600.0}
        for i in range(2)]))
    (model / "config.json").write_text(json.dumps(MODEL_CONFIG))
    hc = HostConfig(transport="local", python=sys.executable, runs_dir=str(runs), gpu_source="sim",
                    sim_dir=str(sim), server_command=[sys.executable, "-m", "console.sim.sglang"],
                    launch_env={"MTPCONSOLE_SIM_DIR": str(sim), "MTPCONSOLE_SIM_SPEED": "20"})
    return hc, str(model)


async def _until(cond, timeout: float = 60.0) -> float:
    """Poll ``cond`` every 5 ms; returns the perf_counter time it became true (bounded)."""
    deadline = time.perf_counter() + timeout
    while not cond():
        if time.perf_counter() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.005)
    return time.perf_counter()


async def run(ctx, sec) -> None:
    from console.ui.app import make_app

    rounds = ctx.n(5, 1)
    root = ctx.tmp / "truth"
    hc, model = _stage(root)
    cfg = Config(hosts={"sim": hc})
    link = HostLink(HostSpec(name="sim", local=True), hc, interval=1.0)
    other = HostLink(HostSpec(name="sim", local=True), hc, interval=1.0)
    backend = LiveBackend(cfg, [link], interval=1.0)
    app = make_app(backend, interval=1.0)
    app.animation_level = "none"
    res: dict[str, list[float]] = {k: [] for k in ("follow_own", "ready_badge", "stopped_own", "follow_other",
                                                   "stopped_other")}

    def req() -> LaunchRequest:
        return LaunchRequest(host="sim", command=list(hc.server_command), gpus=[GPU], port=free_port(),
                             flags=["--model-path", model, *FIXED_FLAGS])

    def panel():
        return next((p for p in app.panels() if p.index == GPU), None)

    def shows(sid: str, badge: str | None = None) -> bool:
        p = panel()
        return (p is not None and p.session is not None and p.session.session_id == sid
                and (badge is None or p.badge_label.startswith(badge)))

    try:
        await other.open()
        other_task = asyncio.create_task(other.run())
        async with app.run_test(size=(160, 50)) as pilot:
            await _until(lambda: panel() is not None and panel().badge_label == "IDLE")
            panel().focus()
            await pilot.pause()
            for _ in range(rounds):
                # 1. this console launches
                before = app.following
                n = len(app.results)
                t0 = time.perf_counter()
                r = req()
                app.ops.run("launch", "launch", "sim", lambda cb, r=r: backend.launch(r, cb), gpus=[GPU], req=r)
                t1 = await _until(lambda: app.following not in (None, before) and shows(app.following[1]))
                res["follow_own"].append((t1 - t0) * 1000)
                await _until(lambda: len(app.results) > n, 120)
                t_res = time.perf_counter()
                result = app.results[-1]
                assert result.ok and result.state == "ready", result
                sid = result.session_id
                t2 = await _until(lambda: shows(sid, "READY"))
                res["ready_badge"].append((t2 - t_res) * 1000)
                # 2. this console kills it
                k = await backend.kill(KillTarget(host="sim", session_id=sid), lambda steps: None)
                t_k = time.perf_counter()
                assert k.ok, k
                t3 = await _until(lambda: shows(sid, "STOPPED"))
                res["stopped_own"].append((t3 - t_k) * 1000)
                # 3. another console launches on the same GPU
                spawned: list[float] = []

                def steps(ss: list[Step], spawned=spawned) -> None:
                    if not spawned and any(s.name == "spawned" and s.state == "ok" for s in ss):
                        spawned.append(time.perf_counter())
                task = asyncio.create_task(lifecycle.launch(other, req(), steps))
                await _until(lambda: bool(spawned), 60)
                t4 = await _until(lambda: app.following is not None and app.following[1] != sid
                                  and shows(app.following[1]))
                res["follow_other"].append((t4 - spawned[0]) * 1000)
                r2 = await task
                assert r2.ok, r2
                # 4. the other console kills it
                k2 = await lifecycle.kill(other, KillTarget(host="sim", session_id=r2.session_id))
                t_k2 = time.perf_counter()
                assert k2.ok, k2
                t5 = await _until(lambda: shows(r2.session_id, "STOPPED"))
                res["stopped_other"].append((t5 - t_k2) * 1000)
            await backend.stop()
        other_task.cancel()
    finally:
        await other.close()
        from console.sim.demo import teardown

        teardown(root, None)

    labels = {
        "follow_own": "log pane follows a launch by this console (from the call)",
        "ready_badge": "panel READY after the launch's READY result",
        "stopped_own": "panel STOPPED after this console's kill result",
        "follow_other": "log pane follows a launch by another console (from its spawned step)",
        "stopped_other": "panel STOPPED after another console's kill result",
    }
    rows, met = [], True
    for key, label in labels.items():
        s = summarize(res[key])
        if s is None:
            met = False
            rows.append([label, "0", "no samples", "", ""])
            continue
        met = met and s.hi < GOAL_MS
        rows.append([label, str(s.n), f"{s.median:.0f}", f"{s.p95:.0f}", f"{s.hi:.0f}"])
    sec.target = "each under 1 s"
    sec.verdict = "met" if met else "missed"
    sec.table(["what", "n", "median ms", "p95 ms", "max ms"], rows)
    sec.notes.append("Local host with simulated GPUs (the agent samples at 1 Hz); the UI applies views every "
                     "100 ms. A launch or kill by this console is shown from the operation itself; one by "
                     "another console at the agent's next sample or exit event.")
