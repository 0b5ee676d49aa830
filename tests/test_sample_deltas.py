"""Issue 31 item 1: samples as deltas. The agent sends what changed since its last sample (a whole one on connect,
every ``FULL_EVERY`` ticks and as a ``snapshot`` reply); the link rebuilds the sample from them and validates only
what changed; a lost or garbled delta is refused and a whole sample asked for, and no snapshot is ever wrong."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from console.config import HostConfig
from console.host.delta import FULL_EVERY, BadDelta, DeltaSender, apply, canonical, changed_digest, diff, digest
from console.link.link import HostLink
from console.link.samples import SampleBook
from console.link.ssh import parse_host_spec
from console.model import ConnectionInfo, HostSnapshot
from tests.helpers.sim_files import make_sim, sim_link
from tests.helpers.wait import await_until

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                      st.floats(allow_nan=False, allow_infinity=False, width=32), st.text(max_size=5))
json_value = st.recursive(json_leaf, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                            st.dictionaries(st.text(max_size=3), kids, max_size=4)),
                          max_leaves=20)


REPO = Path(__file__).resolve().parents[1]


def wire(obj):
    """What the other end reads: the message through JSON."""
    return json.loads(json.dumps(obj, separators=(",", ":")))


@settings(max_examples=300, deadline=None)
@given(st.lists(json_value, min_size=2, max_size=6))
def test_any_json_round_trips_and_the_base_is_left_alone(values):
    for a, b in zip(values, values[1:]):
        before = json.dumps(a, sort_keys=True)
        p = diff(a, b)
        got = a if p is None else apply(a, wire(p))
        assert json.dumps(got) == json.dumps(b)  # keys in the agent's order too: the digest reads them in order
        assert digest(got) == digest(b)
        assert json.dumps(a, sort_keys=True) == before


def test_keys_added_or_reordered_send_the_dict_whole_in_the_agents_order():
    assert diff({"x": 1, "y": 2}, {"y": 2, "x": 1}) == ["=", {"y": 2, "x": 1}]
    assert diff({"x": 1}, {"w": 0, "x": 1}) == ["=", {"w": 0, "x": 1}]
    assert diff({"x": 1, "y": 2, "z": 3}, {"x": 1, "z": 4}) == ["d", {"z": ["=", 4]}, ["y"]]
    got = apply({"x": 1, "y": 2}, wire(diff({"x": 1, "y": 2}, {"y": 2, "x": 1})))
    assert list(got) == ["y", "x"]


def test_the_digest_reads_values_not_identities_and_tells_types_apart():
    shared = [1.5, "é"]
    assert digest({"a": shared, "b": shared}) == digest(wire({"a": [1.5, "é"], "b": [1.5, "é"]}))
    assert len({digest(v) for v in (1, 1.0, True, 0.0, -0.0, "1", None, [1], {"1": 1})}) == 9
    assert digest({"x": 1, "y": 2}) != digest({"y": 2, "x": 1})


def _agent_pythons() -> list[str]:
    found = [sys.executable, *(shutil.which(f"python3.{minor}") or "" for minor in range(8, 15)),
             *(str(p) for p in Path(os.path.expanduser("~/.pyenv/versions")).glob("3.*/bin/python3")
               if tuple(map(int, p.parts[-3].split(".")[:2])) >= (3, 8))]
    return sorted({os.path.realpath(p) for p in found if p and "/shims/" not in p})


AGENT_PYTHONS = _agent_pythons()
"""This interpreter and every other Python >= 3.8 found here (pyenv's, the system's; not pyenv's shims)."""


@pytest.mark.parametrize("python", AGENT_PYTHONS)
def test_the_digest_is_the_same_in_every_python_an_agent_may_run(python):
    """The agent runs on the host's Python (>= 3.8), the console on its own: equal values, equal digests."""
    values = wire([{"gpus": [{"index": 0, "power_w": 481.4, "temp_c": -0.0, "name": "NVIDIA H200 ✓", "procs": []}]},
                   [2**70, -2**40, 3, 1e300, 5e-324, True, None, "\u0000 \ud7ff \ud800", {"": {}}], float("nan")])
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from delta import digest; "
            "print(json.dumps([digest(v) for v in json.loads(sys.stdin.read())]))")
    out = subprocess.run([python, "-c", code, str(REPO / "console" / "host")], input=json.dumps(values),
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert json.loads(out) == [digest(v) for v in values]


def test_a_type_change_is_a_change():
    assert diff({"x": 1}, {"x": True}) == ["d", {"x": ["=", True]}, []]
    assert diff([1, 2.0], [1, 2]) == ["l", 2, {"1": ["=", 2]}]
    assert diff({"a": [1]}, {"a": [1]}) is None


@pytest.mark.parametrize("base,patch", [
    ({"a": 1}, ["d", {}, ["b"]]),              # removes a key that is not there
    ({"a": 1}, ["d", {"b": ["d", {}, []]}, []]),  # patches a key that is not there
    ([1, 2], ["l", 4, {"2": ["=", 0]}]),       # grows without its new items
    ([1, 2], ["l", 2, {"5": ["=", 0]}]),       # an index outside
    ([1, 2], ["d", {}, []]),                   # a dict patch on a list
    ({"a": 1}, "garbage"),
])
def test_a_patch_that_does_not_fit_is_refused(base, patch):
    with pytest.raises(BadDelta):
        apply(base, patch)


# ---------------------------------------------------------------- generated sample sequences, through models

def _gpu(i, power, util, used, procs):
    return {"index": i, "uuid": f"GPU-{i}", "name": "Sim", "power_w": power, "power_limit_w": 600.0,
            "util_pct": util, "mem_used_mib": used, "mem_total_mib": 97887, "temp_c": 40.0 + i,
            "procs": [{"pid": p, "used_mib": 1000} for p in procs]}


def _server(pid, state):
    return {"pid": pid, "ppid": 1, "pgid": pid, "start_ticks": pid * 10, "state": state,
            "argv": ["python3", "-m", "sglang.launch_server", "--port", str(30000 + pid % 100)],
            "role": "launcher", "framework": "sglang", "session_id": None}


gpu_st = st.tuples(st.floats(0, 700, allow_nan=False), st.sampled_from([None, 0.0, 50.0, 100.0]),
                   st.integers(0, 97887), st.lists(st.integers(100, 110), max_size=2, unique=True))
sample_st = st.fixed_dictionaries({
    "sampled_at": st.floats(1.7e9, 1.8e9), "tick_ms": st.floats(0, 50),
    "gpu_source": st.sampled_from(["sim", "none"]), "gpu_error": st.sampled_from([None, "nvidia-smi timed out"]),
    "gpus": st.lists(gpu_st, max_size=8).map(lambda gs: [_gpu(i, *g) for i, g in enumerate(gs)]),
    "servers": st.lists(st.tuples(st.integers(100, 110), st.sampled_from("RSZ")), max_size=4,
                        unique_by=lambda t: t[0]).map(lambda ss: [_server(p, s) for p, s in ss]),
    "sessions": st.lists(st.sampled_from([
        {"session_id": "s1", "run_dir": "/r/s1"},
        {"session_id": "s2", "run_dir": "/r/s2", "broken": "no record.json"},
        {"session_id": "s3", "run_dir": 7},  # malformed: listed as broken, never voids the sample
    ]), max_size=3),
    "other_sessions": st.just([]),
    "relatives": st.lists(st.sampled_from([{"pid": 1, "argv": ["init"]}, {"pid": 99, "state": "S"}]), max_size=2),
})
CONN = ConnectionInfo(state="connected")


def _full_snapshot(sample) -> HostSnapshot:
    book = SampleBook()
    book.full(wire(sample), 1)
    return book.snapshot("h", CONN, 1.0, {"hostname": "h", "uid": 0})


@settings(max_examples=60, deadline=None)
@given(st.lists(sample_st, min_size=1, max_size=12), st.integers(1, 5))
def test_the_rebuilt_snapshot_equals_the_full_one(samples, full_every):
    sender, book = DeltaSender(full_every), SampleBook()
    for sample in samples:
        msg = wire(sender.message(sample))
        if msg["type"] == "sample":
            book.full(msg["data"], msg["seq"])
        else:
            assert book.delta(msg), book.refused
        assert book.data == canonical(sample)
        assert book.snapshot("h", CONN, 1.0, {"hostname": "h", "uid": 0}) == _full_snapshot(sample)
    assert book.full_samples + book.deltas == len(samples)


def test_unchanged_items_keep_their_models():
    """Validated only where it changed: a GPU whose figures did not move is the very model of the last snapshot."""
    a = {"sampled_at": 1.0, "gpus": [_gpu(0, 100.0, 0.0, 10, []), _gpu(1, 100.0, 0.0, 10, [])], "servers": [],
         "sessions": [], "other_sessions": [], "relatives": []}
    b = json.loads(json.dumps(a))
    b["gpus"][1]["power_w"] = 250.0
    sender, book = DeltaSender(), SampleBook()
    first = wire(sender.message(a))
    book.full(first["data"], first["seq"])
    s1 = book.snapshot("h", CONN, 1.0, None)
    assert book.delta(wire(sender.message(b)))
    s2 = book.snapshot("h", CONN, 2.0, None)
    assert s2.gpus[0] is s1.gpus[0] and s2.gpus[1] is not s1.gpus[1] and s2.gpus[1].power_w == 250.0


def test_a_gap_a_wrong_base_and_a_garbled_delta_are_refused():
    sender, book = DeltaSender(), SampleBook()
    s = [{"sampled_at": float(i), "gpus": [_gpu(0, float(i), 0.0, 10, [])]} for i in range(5)]
    m0 = wire(sender.message(s[0]))
    book.full(m0["data"], m0["seq"])
    sender.message(s[1])  # lost on the way
    assert not book.delta(wire(sender.message(s[2])))
    assert book.data == s[0] and "while holding 1" in book.refused[-1]
    book.full(wire(sender.full(s[2]))["data"], sender.seq)
    garbled = wire(sender.message(s[3]))
    garbled["patch"][1]["gpus"] = ["l", 1, {"0": ["d", {"power_w": ["=", 999.0]}, []]}]
    assert not book.delta(garbled)
    assert book.data == s[2] and "digest" in book.refused[-1]


# ---------------------------------------------------------------- a real agent

async def test_a_local_agent_sends_deltas_and_a_whole_sample_every_n(tmp_path, runs_dir):
    d, _ = make_sim(tmp_path, 2)
    async with sim_link(runs_dir, d, interval=0.05) as lk:
        lk.listen(_Count())
        run = __import__("asyncio").create_task(lk.run())
        assert await await_until(lambda: lk.book.deltas >= FULL_EVERY + 2, 20)
        assert lk.book.full_samples >= 2 and lk.resyncs == 0 and not lk.book.refused
        snap = lk.snapshot()
        assert [g.index for g in snap.gpus] == [0, 1] and snap.connection.error is None
        assert lk.book.data == canonical(lk.book.data)
        await lk.close()
        await run


class _Count:
    def __init__(self):
        self.samples = []

    def on_sample(self, snap):
        self.samples.append(snap)

    def __getattr__(self, name):
        return lambda *a: None


@pytest.mark.parametrize("fault", ["lost", "garbled", "invalid"])
async def test_a_lost_or_garbled_delta_asks_for_a_whole_sample(tmp_path, runs_dir, fault):
    """The fault is injected between the agent's pipe and the link: one delta dropped, one changed in flight (its
    digest no longer matches), one whose changed GPU is not a valid GPU. The link refuses it, keeps the sample it
    had (no snapshot shows the bad value), asks for a whole sample and goes on with deltas."""
    d, _ = make_sim(tmp_path, 2)
    async with sim_link(runs_dir, d, interval=0.05) as lk:
        seen = _Count()
        lk.listen(seen)
        real = lk._dispatch
        hit = []

        def dispatch(msg):
            if msg.get("type") == "sample_delta" and not hit and lk.book.deltas >= 3:
                hit.append(msg)
                if fault == "lost":
                    return
                if fault == "garbled":
                    msg = dict(msg, patch=["d", {"gpus": ["l", 2, {"0": ["d", {"power_w": ["=", 12345.0]}, []]}]}, []])
                else:
                    msg = dict(msg, patch=["d", {"gpus": ["l", 2, {"0": ["d", {"index": ["=", "zero"]}, []]}]}, []])
                    msg["digest"] = changed_digest(apply(lk.book.data, msg["patch"]), msg["patch"])
            real(msg)
        lk._dispatch = dispatch
        run = __import__("asyncio").create_task(lk.run())
        assert await await_until(lambda: hit and lk.resyncs >= 1 and lk.book.deltas >= 8, 20), lk.book.refused
        assert lk.book.refused, "the fault was not noticed"
        assert all(g.power_w != 12345.0 and isinstance(g.index, int) for s in seen.samples for g in s.gpus)
        assert all(s.connection.error is None for s in seen.samples)
        await lk.close()
        await run


@pytest.mark.sshd
async def test_deltas_over_sshd(sshd, runs_dir, tmp_path):
    """The agent-over-sshd path: the bootstrap ships delta.py, deltas arrive and rebuild the agent's sample."""
    d, _ = make_sim(tmp_path, 4)
    lk = HostLink(parse_host_spec(sshd.alias), HostConfig(runs_dir=str(runs_dir), python=sys.executable,
                                                          gpu_source="sim", sim_dir=str(d)),
                  ssh_config=str(sshd.ssh_config), interval=0.1)
    run = __import__("asyncio").create_task(lk.run())
    try:
        assert await await_until(lambda: lk.book.deltas >= 5, 30), lk.snapshot().connection
        snap = await lk.refresh()  # a snapshot reply is a whole sample, and the deltas build on it
        assert [g.index for g in snap.gpus] == [0, 1, 2, 3]
        n = lk.book.deltas
        assert await await_until(lambda: lk.book.deltas >= n + 3, 10)
        assert not lk.book.refused and lk.resyncs == 0
    finally:
        await lk.close()
        await run


# ---------------------------------------------------------------- views derived only when their inputs changed

@settings(max_examples=40, deadline=None)
@given(st.lists(sample_st, min_size=1, max_size=8), st.lists(st.floats(0, 10), min_size=8, max_size=8))
def test_the_view_memo_is_derive_views(samples, ages):
    """A tracker's ViewMemo returns what derive_views does for every snapshot of a delta-built sequence (the
    age rule applied each time), and derives again only when an input changed."""
    from console.core.sessions import ViewMemo, derive_views

    sender, book, memo = DeltaSender(), SampleBook(), ViewMemo()
    for sample, age in zip(samples, ages):
        msg = wire(sender.message(sample))
        book.full(msg["data"], msg["seq"]) if msg["type"] == "sample" else book.delta(msg)
        snap = book.snapshot("h", CONN, 100.0, None)
        assert memo.views(snap, {}, 100.0 + age) == derive_views(snap, {}, 100.0 + age)
    snap = book.snapshot("h", CONN, 100.0, None)
    n = memo.derived
    memo.views(snap, {}, 101.0)
    memo.views(book.snapshot("h", CONN, 101.0, None), {}, 102.0)
    assert memo.derived == n


def test_the_memos_compare_the_next_sample_by_identity_after_a_whole_one(monkeypatch):
    """A whole sample brings new models, equal by value to those held: each memo (views, orphans, current sessions)
    adopts them, so that the deltas after it, which keep those very objects, compare at once instead of by value
    every sample until something changes (the fleet benchmark's console paid some 7 model comparisons a sample)."""
    from pydantic import BaseModel

    from console.core.current import CurrentState
    from console.core.sessions import ViewMemo
    from console.model import HostView
    from console.ops.advice_host import OrphanMemo

    procs = [{"pid": 100, "used_mib": 80000, "name": None}]
    a = {"sampled_at": 1.0, "gpus": [{**_gpu(0, 100.0, 50.0, 80008, []), "procs": procs}], "servers": [],
         "sessions": [], "other_sessions": [], "relatives": []}
    sender, book = DeltaSender(), SampleBook()
    memo, orphans, current = ViewMemo(), OrphanMemo(), CurrentState("h", lambda: 100.0)

    def read(sample, whole: bool = False) -> None:
        msg = wire(sender.full(sample) if whole else sender.message(sample))
        book.full(msg["data"], msg["seq"]) if msg["type"] == "sample" else book.delta(msg)
        snap = book.snapshot("h", CONN, 100.0, None)
        view = current.apply(HostView(snapshot=snap, sessions=memo.views(snap, {}, 100.0)))
        orphans.orphans(view)

    read(a)                                   # whole (the first)
    read({**a, "sampled_at": 2.0}, whole=True)  # whole again (as every FULL_EVERY ticks): new models, equal by value
    compared: list[str] = []
    real_eq = BaseModel.__eq__
    monkeypatch.setattr(BaseModel, "__eq__", lambda self, other: compared.append(type(self).__name__)
                        or real_eq(self, other))
    read({**a, "sampled_at": 3.0})            # a delta: the same objects as the whole sample before it
    assert book.deltas == 1 and compared == [], compared


def test_a_number_change_is_checked_as_a_number_and_anything_else_validated_whole():
    """The fast path: a GPU whose delta changes number fields only is its model with those replaced (an int power
    becomes the float pydantic would make of it); a string there is validated whole, and refused."""
    a = {"sampled_at": 1.0, "gpus": [_gpu(0, 100.0, 0.0, 10, []), _gpu(1, 100.0, 0.0, 10, [])], "servers": [],
         "sessions": [], "other_sessions": [], "relatives": []}
    sender, book = DeltaSender(), SampleBook()
    first = wire(sender.message(a))
    book.full(first["data"], first["seq"])
    book.snapshot("h", CONN, 1.0, None)
    b = json.loads(json.dumps(a))
    b["gpus"][0]["power_w"], b["gpus"][0]["mem_used_mib"] = 250, 2048
    assert book.delta(wire(sender.message(b)))
    s2 = book.snapshot("h", CONN, 2.0, None)
    assert s2.gpus[0].power_w == 250.0 and isinstance(s2.gpus[0].power_w, float) and s2.gpus[0].mem_used_mib == 2048
    assert s2.gpus == _full_snapshot(b).gpus
    c = json.loads(json.dumps(b))
    c["gpus"][1]["mem_used_mib"] = "lots"
    assert book.delta(wire(sender.message(c)))
    with pytest.raises(ValidationError):
        book.snapshot("h", CONN, 3.0, None)
