"""Multi-node group sessions (issue 30): one SGLang server over several hosts, one group id.

- ``launch.py``: plan the members (``--node-rank``, ``--nnodes``, ``--dist-init-addr``, derived ``--tp-size``,
  ports), preflight every node, start all members at once, READY (every member confirmed + rank 0's one-token
  generate); ``guard`` then watches;
- ``preflight.py``: every node's checks before anything starts, each refusal naming its node;
- ``watch.py``: liveness that does not trust the head; the failure policy (kill the rest, confirmed per host);
- ``guard.py``: the same policy for a console that only sees the group (the TUI), on evidence re-checked at action
  time;
- ``members.py``: a group as the hosts hold it (members by spec, worst state), its logs interleaved by time;
- ``probe.py``: the one stdlib program the group's checks run on a node.

The pure parts (ids, member flags, state order, result models) live in :mod:`console.core.group`.
"""

from __future__ import annotations

from console.ops.group.guard import guard_group
from console.ops.group.launch import GroupRequest, as_operation, launch_group, plan, requests_over
from console.ops.group.members import GroupView, find_groups, group_logs, merge_logs
from console.ops.group.preflight import preflight, stale_members
from console.ops.group.watch import GROUP_KILL_GRACE_S, GroupWatch, kill_members

__all__ = [
    "GROUP_KILL_GRACE_S",
    "GroupRequest",
    "GroupView",
    "GroupWatch",
    "as_operation",
    "find_groups",
    "group_logs",
    "guard_group",
    "kill_members",
    "launch_group",
    "merge_logs",
    "plan",
    "preflight",
    "requests_over",
    "stale_members",
]
