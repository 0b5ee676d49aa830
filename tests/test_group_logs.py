"""Issue 30: a group's logs interleaved by time (console/ops/group/members.merge_logs): each host's clock offset is
subtracted, unstamped lines (a traceback) stay with the stamped line before them, a node's own order never changes,
every line is marked with its node and rank."""

from __future__ import annotations

from console.core.group import group_state, member_flags, member_ports, tp_for
from console.ops.group import merge_logs


def test_skewed_clock_is_corrected_before_merging():
    head = "[2026-12-02 03:00:00] Init parallel begin.\n[2026-12-02 03:00:03] The server is fired up and ready to roll!"
    # node1's clock runs 10 s ahead: its 03:00:11 is the console's 03:00:01
    node1 = ("[2026-12-02 03:00:11 TP1] Init parallel ends.\nTraceback (most recent call last):\n  File x\n"
             "[2026-12-02 03:00:12 TP1] Load weight end.")
    lines = merge_logs([("node0", 0, head, 0.0), ("node1", 1, node1, 10.0)])
    assert lines == [
        "node0/r0 | [2026-12-02 03:00:00] Init parallel begin.",
        "node1/r1 | [2026-12-02 03:00:11 TP1] Init parallel ends.",
        "node1/r1 | Traceback (most recent call last):",
        "node1/r1 |   File x",
        "node1/r1 | [2026-12-02 03:00:12 TP1] Load weight end.",
        "node0/r0 | [2026-12-02 03:00:03] The server is fired up and ready to roll!",
    ]
    assert merge_logs([("node0", 0, head, 0.0)], n=1) == [lines[-1]]


def test_group_state_is_the_worst_members():
    assert group_state(["ready", "ready"]) == "ready"
    assert group_state(["ready", "loading"]) == "loading"
    assert group_state(["ready", "failed"]) == "failed"
    assert group_state(["stopped", "failed"]) == "failed"
    assert group_state(["ready", "unreachable"]) == "unreachable"
    assert group_state([]) == "unreachable"


def test_member_flags_tp_derivation_and_ports():
    assert tp_for(["--model-path", "m"], 8, 2) == (16, False)
    assert tp_for(["--model-path", "m", "--tp-size", "16"], 8, 2) == (16, True)
    for bad in (["--tp-size", "3"], ["--tp-size", "8"]):
        try:
            tp_for(bad, 8, 2)
        except ValueError:
            continue
        raise AssertionError(bad)
    f = member_flags(["--model-path", "m"], tp=16, tp_given=False, nnodes=2, rank=1, dist_init_addr="10.0.0.1:5000",
                     port=30001)
    assert f == ["--model-path", "m", "--tp-size", "16", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr",
                 "10.0.0.1:5000", "--port", "30001"]
    assert member_ports(["a", "b"], 30000) == [30000, 30000]  # own machines: the same port
    assert member_ports(["a", "a", "b"], 30000) == [30000, 30001, 30000]  # sharing one: each its own
