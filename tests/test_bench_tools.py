"""The fleet benchmark's tools: the CPU split that gives the console a core of its own, and the in-process replay of a
recorded agent stream (every delta it makes again applies, with the digest the agent would have sent)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import cpus, fleet_replay


def test_the_console_gets_the_first_core_and_the_hosts_the_rest(monkeypatch):
    monkeypatch.setattr(cpus, "_siblings", lambda cpu: {cpu, cpu + 8})  # SMT: CPU n and n+8 share a core
    mine, hosts = cpus.split(set(range(16)))
    assert mine == {0, 8} and hosts == set(range(16)) - {0, 8}
    monkeypatch.setattr(cpus, "_siblings", lambda cpu: {cpu})  # no sibling reported: the first two CPUs
    assert cpus.split(set(range(2, 12))) == ({2, 3}, set(range(4, 12)))
    assert cpus.split(set(range(4))) is None  # too few CPUs to give one away


def test_cpu_lists_read_and_written_as_the_kernel_does(tmp_path):
    assert cpus.describe({0, 1, 2, 5, 8, 9}) == "0-2,5,8-9"
    assert cpus.describe({3}) == "3"
    assert cpus._siblings(0) >= {0}  # whatever this machine reports, the CPU itself is in it


def test_pinning_this_thread_to_what_it_has_is_allowed():
    assert cpus.pin(0, os.sched_getaffinity(0))


def _stream(tmp_path: Path) -> Path:
    """A whole sample and two deltas, as the agent writes them."""
    from console.host.delta import DeltaSender

    base = {"sampled_at": 100.0, "gpu_source": "sim", "gpu_error": None, "gpu_sampled_at": 99.9, "tick_ms": 1.0,
            "gpus": [{"index": i, "power_w": 400.0 + i, "temp_c": 50.0, "mem_used_mib": 10, "mem_total_mib": 100,
                      "procs": [], "errors": {}} for i in range(2)], "servers": [], "sessions": []}
    sender = DeltaSender(full_every=30)
    lines = []
    for k in range(3):
        sample = json.loads(json.dumps(base))
        sample["sampled_at"] += k * 0.2
        sample["gpu_sampled_at"] += k * 0.2
        sample["gpus"][0]["power_w"] += k
        lines.append(json.dumps(sender.message(sample), separators=(",", ":")) + "\n")
    p = tmp_path / "stream.jsonl"
    p.write_text("".join(lines))
    return p


def test_the_timeline_makes_every_delta_again_at_one_sample_a_second(tmp_path):
    from console.host.delta import apply, canonical, changed_digest

    lines = _stream(tmp_path).read_bytes().splitlines(keepends=True)
    timeline = fleet_replay._timeline(lines, rounds=2)
    assert len(timeline) == 6
    cur = None
    for g, (at, line) in enumerate(timeline):
        msg = json.loads(line)
        assert msg["seq"] == g + 1
        if msg["type"] == "sample":
            cur = canonical(msg["data"])
        else:
            assert msg["base"] == g
            cur = apply(cur, msg["patch"])
            assert changed_digest(cur, msg["patch"]) == msg["digest"]
        assert cur["sampled_at"] == pytest.approx(100.0 + g) and at > cur["sampled_at"]
        assert cur["gpu_sampled_at"] == pytest.approx(99.9 + g)


async def test_a_replay_applies_every_delta_and_refuses_none(tmp_path):
    res = await fleet_replay._replay(_stream(tmp_path), hosts=3, rounds=2)
    assert res["refused"] == [] and res["messages"] == 3
    assert res["deltas"] == 3 * 2 * 3  # 3 rounds (one warm-up) x 2 deltas x 3 hosts
    assert res["us_per_msg"] > 0
