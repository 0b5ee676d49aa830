"""Issue 30: the group preflight's ports and GPUs, over the two hosts of tests/test_group.py (``local`` and the real
sshd on 127.0.0.1, one machine: the members share its address).

- ``--enable-dp-attention``: the port SGLang's DP attention derives (``--port`` + 233) held by a listener -> refused
  before anything starts, naming the member, the port and why;
- a GPU of node1 held by another session before the launch -> refused before anything starts (every member's GPUs
  are checked on every node first), naming node1 / rank 1, the GPU and its holder;
- a GPU of node1 taken between the preflight and the start -> node1's agent refuses the member's start (its checks
  again, under its launch lock): the group fails naming node1 / rank 1 and the GPU's holder, every member already
  started is killed (confirmed), and the session that took the GPU is left alone.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from console.core.group import DP_ATTENTION_PORT_DELTA, dp_attention_port
from console.model import LaunchRequest
from console.ops import group as grp
from console.ops import lifecycle
from console.ops.group import launch as group_launch
from console.ops.lifecycle import fresh_snapshot
from tests.helpers.sshd import free_port
from tests.test_group import STANDIN, close, group_request, nodes, open_links  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


def test_dp_attention_port_is_port_plus_233_only_with_the_flag():
    assert DP_ATTENTION_PORT_DELTA == 233
    assert dp_attention_port(["--enable-dp-attention", "--tp-size", "2"], 30000) == 30233
    assert dp_attention_port(["--tp-size", "2"], 30000) is None
    assert dp_attention_port(["--enable-dp-attention"], None) is None


def _runs(links) -> dict[str, list[str]]:
    return {lk.name: sorted(p.name for p in Path(lk.cfg.runs_dir).iterdir() if not p.name.startswith("."))
            for lk in links}


def _listener() -> tuple[socket.socket, int]:
    """A listener on some ``port + 233`` (the port returned: ``port``), on every address."""
    for _ in range(50):
        port = free_port()
        s = socket.socket()
        try:
            s.bind(("", port + DP_ATTENTION_PORT_DELTA))
        except OSError:
            s.close()
            continue
        s.listen()
        return s, port
    raise RuntimeError("no port + 233 free")


async def test_dp_attention_port_held_refused_naming_the_port_and_why(open_links, nodes):  # noqa: F811
    links = await open_links()
    held, port = _listener()
    try:
        greq = group_request(links, nodes[0].model, port)
        greq = grp.GroupRequest(requests=[r.model_copy(update={"flags": [*r.flags, "--enable-dp-attention"]})
                                          for r in greq.requests], nnodes=2)
        res = await grp.launch_group(links, greq, timeout=60)
        assert not res.ok and res.state == "idle", res
        dp = [r for r in res.refusals if "--enable-dp-attention" in r]
        assert dp == [f"local (rank 0): --port {port} + 233 (--enable-dp-attention: SGLang's DP attention derives it) "
                      f"{port + 233} is in use"], res.refusals  # rank 1 (own --port, port + 1): its + 233 is free
        assert _runs(links) == {"local": [], "testhost": []}  # nothing was started anywhere
    finally:
        held.close()
        await close(links)


async def _intruder(link, model: Path, gpu: int) -> str:
    """A plain session (no group) on ``gpu`` of ``link``'s host: another operator's server."""
    req = LaunchRequest(host=link.name, command=list(STANDIN), flags=["--model-path", str(model)], gpus=[gpu],
                        port=free_port())
    r = await lifecycle.launch(link, req, wait=False)
    assert r.ok and r.session_id, r
    return r.session_id


async def _alive(link, sid: str) -> bool:
    snap = await fresh_snapshot(link)
    return any(p.session_id == sid and p.alive for p in snap.servers)


async def test_gpu_held_on_node1_refused_before_anything_starts(open_links, nodes):  # noqa: F811
    links = await open_links()
    try:
        other = await _intruder(links[1], nodes[0].model, 1)
        res = await grp.launch_group(links, group_request(links, nodes[0].model, free_port()), timeout=60)
        assert not res.ok and res.state == "idle" and res.refused, res
        held = [r for r in res.refusals if "GPU 1 is held by session" in r]
        assert held and held[0].startswith("testhost (rank 1): the host's preflight: ") and other in held[0], \
            res.refusals
        assert _runs(links) == {"local": [], "testhost": [other]}  # no member was started on either node
        assert await _alive(links[1], other)
        await lifecycle.kill(links[1], lifecycle.KillTarget(host="testhost", session_id=other))
    finally:
        await close(links)


async def test_gpu_taken_between_the_preflight_and_the_start_refused_at_start_the_rest_killed(open_links, nodes,  # noqa: F811
                                                                                              monkeypatch):
    links = await open_links()
    taken: list[str] = []
    real = group_launch.preflight

    async def preflight_then_taken(*a, **kw):
        pre = await real(*a, **kw)
        assert not pre.refusals, pre.refusals  # every node's checks passed ...
        taken.append(await _intruder(links[1], nodes[0].model, 0))  # ... then another console takes node1's GPU 0
        return pre

    monkeypatch.setattr(group_launch, "preflight", preflight_then_taken)
    try:
        res = await grp.launch_group(links, group_request(links, nodes[0].model, free_port()), timeout=60)
        assert not res.ok and res.state == "failed", res
        assert res.failed_host == "testhost" and res.failed_rank == 1, res
        assert res.failed and "refused at its start" in res.failed and "GPU 0 is held by session" in res.failed \
            and taken[0] in res.failed, res.failed
        assert [k.split(":")[0] for k in res.killed] == ["local (rank 0)", "testhost (rank 1)"], res.killed
        assert "stopped, confirmed" in res.killed[0] or "nothing of it was started" in res.killed[0], res.killed
        assert "nothing of it was started" in res.killed[1], res.killed
        for lk, m in zip(links, res.members):  # no member's process is left on either node
            assert not await _alive(lk, m.session_id)
        assert await _alive(links[1], taken[0])  # the GPU's holder is not the group's: left alone
        await lifecycle.kill(links[1], lifecycle.KillTarget(host="testhost", session_id=taken[0]))
    finally:
        await close(links)
