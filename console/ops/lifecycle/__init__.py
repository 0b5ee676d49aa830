"""Launch, kill and relaunch, each step confirmed against the host — never assumed.

The package, as data and one loop:

- ``steps.py``: :class:`Stepper` (an operation's steps, reported whole on every change), :class:`Check` (one
  confirmation: its step, its probe, how long, how often) and :func:`wait_for`, the one loop every confirmation
  waits in;
- ``preflight.py``: the one preflight of a launch and a relaunch (flags, memory plan, the host's checks, the
  orphans on the target GPUs);
- ``launch.py``: the launch as a table of checks (spawned, logging, listening, healthy, ready, on GPU);
- ``kill.py``: SIGTERM, grace, SIGKILL, then confirmed gone (no process left, GPU released, port closed);
- ``relaunch.py``: preflight, confirmed kill, launch;
- ``watch.py``: a launch's watch on its own session (its followed log, its end).

Callers use the names below: ``from console.ops import lifecycle; await lifecycle.launch(link, req)``.
"""

from __future__ import annotations

from console.core.sessions import new_session_id
from console.model import KillTarget, LaunchRequest
from console.ops.lifecycle.kill import GPU_RELEASE_TOLERANCE_MIB, KILL_STEPS, find_session, kill
from console.ops.lifecycle.launch import (
    LAUNCH_STEPS,
    READY_LINE,
    MoreChecks,
    build_spec,
    host_env,
    launch,
    request_from_argv,
)
from console.ops.lifecycle.preflight import Checked, check_request, memory_verdict, orphan_note
from console.ops.lifecycle.relaunch import relaunch, relaunch_env
from console.ops.lifecycle.steps import Check, Skip, StepFailed, Stepper, fresh_snapshot, record_result, wait_for
from console.ops.lifecycle.watch import SessionWatch

__all__ = [
    "GPU_RELEASE_TOLERANCE_MIB",
    "KILL_STEPS",
    "LAUNCH_STEPS",
    "READY_LINE",
    "Check",
    "Checked",
    "KillTarget",
    "LaunchRequest",
    "MoreChecks",
    "SessionWatch",
    "Skip",
    "StepFailed",
    "Stepper",
    "build_spec",
    "check_request",
    "find_session",
    "fresh_snapshot",
    "host_env",
    "kill",
    "launch",
    "memory_verdict",
    "new_session_id",
    "orphan_note",
    "record_result",
    "relaunch",
    "relaunch_env",
    "request_from_argv",
    "wait_for",
]
