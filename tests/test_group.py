"""Issue 30: multi-node group sessions over two hosts: ``local`` (the local transport) and ``testhost`` (the real
sshd on 127.0.0.1), each with its own runs_dir and its own simulated GPUs, the SGLang stand-in speaking
multi-node (console/sim/sglang_group.py: a dead peer leaves the survivor hung, its /health 200).

Through the real agents, supervisors and lifecycle: group launch -> READY; SIGKILL of node1's worker -> the
group FAILED within 2 s naming testhost / rank 1 while the head still answers 200, then every member gone and
memory freed on both within 30 s; a stale member left on node1 -> preflight refuses naming it; different
server builds or interface variables -> refused before anything starts; kill of the group confirmed on both.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from console.config import HostConfig
from console.core.group import is_group_id
from console.link.link import HostLink
from console.link.ssh import HostSpec, parse_host_spec
from console.model import LaunchRequest
from console.ops import group as grp
from console.ops.lifecycle import fresh_snapshot
from console.ops.session_log import probe_health
from tests.helpers.rel_util import cleanup_runs
from tests.helpers.sim_files import REPO, make_sim, sim_env
from tests.helpers.sshd import free_port
from tests.helpers.wait import await_until

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

STANDIN = [sys.executable, "-m", "console.sim.sglang"]
OLD_BUILD = [sys.executable, str(REPO / "tests" / "helpers" / "old_sglang.py")]


class Node:
    def __init__(self, tmp: Path, name: str, model: bool) -> None:
        self.sim, self.model = make_sim(tmp / name, gpus=2, tag=name, model=model)
        self.runs = tmp / name / "runs"
        self.runs.mkdir()

    def config(self, command: list[str], **launch_env: str) -> HostConfig:
        return HostConfig(python=sys.executable, runs_dir=str(self.runs), gpu_source="sim", sim_dir=str(self.sim),
                          launch_env={**sim_env(self.sim), **launch_env}, server_command=command)

    def allocs(self) -> list[str]:
        return sorted(p.name for p in (self.sim / "alloc").glob("*.json"))


@pytest.fixture
def nodes(tmp_path):
    n0 = Node(tmp_path, "n0", model=True)
    n1 = Node(tmp_path, "n1", model=False)
    yield n0, n1
    cleanup_runs(n0.runs)
    cleanup_runs(n1.runs)


@pytest.fixture
def open_links(sshd, nodes):
    async def make(cmd0=STANDIN, cmd1=STANDIN, env0=None, env1=None) -> list[HostLink]:
        n0, n1 = nodes
        l0 = HostLink(HostSpec(name="local", local=True), n0.config(cmd0, **(env0 or {})), interval=0.3)
        l1 = HostLink(parse_host_spec(sshd.alias), n1.config(cmd1, **(env1 or {})), ssh_config=str(sshd.ssh_config),
                      interval=0.3)
        await asyncio.gather(l0.open(), l1.open())
        return [l0, l1]

    return make  # each test closes its links (close())


def group_request(links: list[HostLink], model: Path, port: int, **kw: object) -> grp.GroupRequest:
    reqs = [LaunchRequest(host=lk.name, command=list(lk.cfg.server_command), flags=["--model-path", str(model)],
                          gpus=[0, 1], port=port) for lk in links]
    return grp.GroupRequest(requests=reqs, nnodes=len(links), **kw)  # type: ignore[arg-type]


async def close(links: list[HostLink]) -> None:
    await asyncio.gather(*(lk.close() for lk in links), return_exceptions=True)


async def gone_everywhere(links: list[HostLink], nodes, sids: list[str]) -> bool:
    for lk, n in zip(links, nodes):
        snap = await fresh_snapshot(lk)
        if any(p.session_id in sids for p in snap.servers) or n.allocs():
            return False
    return True


async def test_group_ready_then_node1_worker_sigkilled_failed_in_2s_head_still_200_then_all_gone(open_links, nodes):
    links = await open_links()
    try:
        port = free_port()
        ready = await grp.launch_group(links, group_request(links, nodes[0].model, port), timeout=60)
        assert ready.ok and ready.state == "ready", ready
        assert is_group_id(ready.session_id)
        assert [(m.host, m.rank) for m in ready.members] == [("local", 0), ("testhost", 1)]
        assert ready.members[0].port == port and ready.members[1].port == port + 1  # one machine: own --port
        assert any("--tp-size 4 derived" in n for n in ready.notes), ready.notes
        # membership is in each member's spec.json
        for lk, m in zip(links, ready.members):
            snap = await fresh_snapshot(lk)
            s = next(x for x in snap.sessions if x.session_id == m.session_id)
            assert s.spec is not None and (s.spec.group, s.spec.node_rank, s.spec.nnodes) == (ready.group, m.rank, 2)
            assert "--node-rank" in s.spec.argv and str(m.rank) == s.spec.argv[s.spec.argv.index("--node-rank") + 1]
        views = await grp.find_groups(links, ready.group)
        assert [v.state for v in views] == ["ready"] and [m.state for m in views[0].members] == ["ready", "ready"]

        watch = asyncio.ensure_future(grp.GroupWatch(links, ready).run())
        await asyncio.sleep(0.5)
        snap1 = await fresh_snapshot(links[1])
        worker = next(p for p in snap1.servers if p.session_id == ready.members[1].session_id
                      and "scheduler" in " ".join(p.argv))
        t_kill = time.time()
        os.kill(worker.pid, signal.SIGKILL)
        res = await asyncio.wait_for(watch, 60)
        t_done = time.time()
        assert not res.ok and res.state == "failed"
        assert res.failed_host == "testhost" and res.failed_rank == 1 and res.failed and "testhost (rank 1)" in res.failed
        assert res.failed_at is not None and res.failed_at - t_kill <= 2.0, res.failed_at - t_kill
        assert res.head_health == 200  # the head did not notice: the console did
        assert t_done - t_kill <= 30.0
        assert res.killed[0].startswith("local (rank 0): stopped, confirmed"), res.killed
        assert all("stopped, confirmed" in k for k in res.killed), res.killed
        sids = [m.session_id for m in ready.members]
        assert await gone_everywhere(links, nodes, sids)
        assert (await probe_health(links[0], port, 2)).status == 0  # the head's port is closed
        after = await grp.find_groups(links, ready.group)
        assert after[0].state == "failed"
    finally:
        await close(links)


async def test_stale_member_left_on_node1_refused_naming_it(open_links, nodes):
    links = await open_links()
    try:
        port = free_port()
        first = await grp.launch_group(links, group_request(links, nodes[0].model, port), timeout=60)
        assert first.ok, first
        # the head dies hard (a crash, a reboot): node1's rank hangs on (as NCCL's survivors do), holding its GPUs
        snap0 = await fresh_snapshot(links[0])
        rec = next(x.record for x in snap0.sessions if x.session_id == first.members[0].session_id)
        assert rec is not None
        os.killpg(rec.pgid, signal.SIGKILL)
        await await_until(lambda: not any(p.session_id == first.members[0].session_id
                                          for p in links[0].snapshot().servers), 10)
        before = {lk.name: sorted(p.name for p in Path(lk.cfg.runs_dir).iterdir()) for lk in links}
        again = await grp.launch_group(links, group_request(links, nodes[0].model, free_port()), timeout=60)
        assert not again.ok and again.refused
        stale = [r for r in again.refusals if "stale member" in r]
        assert stale and stale[0].startswith("testhost:") and first.group in stale[0], again.refusals
        assert f"mtpconsole kill --host local --host testhost {first.group}" in stale[0]
        after = {lk.name: sorted(p.name for p in Path(lk.cfg.runs_dir).iterdir()) for lk in links}
        assert after == before  # nothing was started anywhere
        lines = await grp.kill_members(links, first.members)
        assert "stopped, confirmed" in lines[1], lines  # the hung rank ignores SIGTERM: SIGKILL, confirmed
    finally:
        await close(links)


@pytest.mark.parametrize("what", ["interface variables", "server builds"])
async def test_mismatch_refused_before_anything_starts(open_links, nodes, what):
    if what == "interface variables":
        links = await open_links(env0={"NCCL_SOCKET_IFNAME": "lo"}, env1={"NCCL_SOCKET_IFNAME": "eth0"})
    else:
        links = await open_links(cmd1=OLD_BUILD)
    try:
        res = await grp.launch_group(links, group_request(links, nodes[0].model, free_port()), timeout=60)
        assert not res.ok and res.state == "idle"
        if what == "interface variables":
            assert any("NCCL_SOCKET_IFNAME differs between the nodes: local=lo, testhost=eth0" in r
                       for r in res.refusals), res.refusals
        else:
            assert any("the nodes run different server builds" in r for r in res.refusals), res.refusals
        for lk in links:
            assert [p.name for p in Path(lk.cfg.runs_dir).iterdir() if not p.name.startswith(".")] == []
    finally:
        await close(links)


async def test_kill_group_confirmed_on_both_hosts(open_links, nodes):
    links = await open_links()
    try:
        res = await grp.launch_group(links, group_request(links, nodes[0].model, free_port()), timeout=60)
        assert res.ok, res
        lines = await grp.kill_members(links, res.members)
        assert [ln.split(":")[0] for ln in lines] == ["local (rank 0)", "testhost (rank 1)"]
        assert all("stopped, confirmed" in ln for ln in lines), lines
        assert await gone_everywhere(links, nodes, [m.session_id for m in res.members])
        views = await grp.find_groups(links, res.group)
        assert views[0].state == "stopped", views
    finally:
        await close(links)


async def test_group_logs_interleaved_by_time_marked_by_node(open_links, nodes):
    links = await open_links()
    try:
        res = await grp.launch_group(links, group_request(links, nodes[0].model, free_port()), timeout=60)
        assert res.ok, res
        view = (await grp.find_groups(links, res.group))[0]
        lines, notes = await grp.group_logs(links, view)
        assert any(ln.startswith("local/r0 | ") for ln in lines) and any(ln.startswith("testhost/r1 | ")
                                                                         for ln in lines)
        assert all("clock offset" in n for n in notes), notes
        await await_until(lambda: True, 1)
        await grp.kill_members(links, res.members)
    finally:
        await close(links)


async def test_member_killed_while_the_group_starts_fails_it_naming_the_node_and_kills_the_rest(open_links, nodes):
    links = await open_links()
    try:
        task = asyncio.ensure_future(grp.launch_group(links, group_request(links, nodes[0].model, free_port()),
                                                      timeout=60))

        def node1_launcher() -> int | None:
            snap = links[1].snapshot()
            return next((x.record.pid for x in snap.sessions if x.spec and x.spec.group and x.record), None)

        pid = await await_until(node1_launcher, 30)
        os.kill(pid, signal.SIGKILL)
        res = await asyncio.wait_for(task, 60)
        assert not res.ok and res.state == "failed" and res.failed_host == "testhost" and res.failed_rank == 1, res
        assert res.killed and res.killed[0].startswith("local (rank 0): stopped, confirmed"), res.killed
        assert await gone_everywhere(links, nodes, [m.session_id for m in res.members])
    finally:
        await close(links)


async def test_member_never_started_reads_launching_then_failed_with_the_kill_command(open_links, nodes, monkeypatch):
    from console.core.group import member_session_id, new_group_id
    from console.ops import lifecycle
    from console.ops.group import members as group_members

    links = await open_links()
    try:
        gid = new_group_id(2, time.time())
        req = LaunchRequest(host="local", command=list(STANDIN), flags=["--model-path", str(nodes[0].model), "--tp-size",
                            "4", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", f"127.0.0.1:{free_port()}"],
                            gpus=[0, 1], port=free_port(), group=gid, node_rank=0, nnodes=2,
                            group_hosts=["local", "testhost"])
        r = await lifecycle.launch(links[0], req, wait=False, session_id=member_session_id(gid, 0))
        assert r.ok, r  # a console that died before it launched rank 1: only rank 0 exists
        v = (await grp.find_groups(links, gid))[0]
        assert v.members[1].state == "launching" and "never started" in (v.members[1].cause or "")
        monkeypatch.setattr(group_members, "MISSING_GRACE_S", 0.0)
        v = (await grp.find_groups(links, gid))[0]
        assert v.state == "failed" and v.members[1].state == "failed"
        assert f"mtpconsole kill --host local --host testhost {gid}" in (v.members[1].cause or "")
        lines = await grp.kill_members(links, v.members)
        assert "stopped, confirmed" in lines[0] and "nothing of it was started" in lines[1], lines
    finally:
        await close(links)
