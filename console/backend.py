"""The seam between the UI and the data layer.

The UI never talks to a host: it renders ``HostView`` snapshots pushed by a backend and
calls the backend's coroutines for actions. The real implementation (links + lifecycle
operations) and test fakes both satisfy :class:`Backend`.
"""

from __future__ import annotations

from typing import Callable, Protocol, Union, runtime_checkable

from console.model import (
    AuditEntry,
    DeploymentRow,
    HostView,
    KillTarget,
    LaunchRequest,
    OperationResult,
    Step,
)

OnView = Callable[[HostView], None]
"""Called once per host per tick with that host's complete, immutable view."""
OnLog = Callable[[str, str, list[str]], None]
"""(host, session_id, lines): new lines of a followed session log, in order, never repeated."""
OnAudit = Callable[[AuditEntry], None]
OnDeployment = Callable[[DeploymentRow], None]
"""Called with a deployment's row each time it is read (every few seconds) or its roll's steps change."""
OnSteps = Callable[[list[Step]], None]
"""Progress of an operation: the full list of steps each time one changes."""
Finding = tuple[str, str]
"""(severity, message): severity is ``error``, ``warning``, ``note`` or ``ok``."""
PlanVerdict = Union[str, Finding, None]
"""The memory planner's answer for the flag form: a plan text, a finding, or None (nothing to say)."""


class Backend(Protocol):
    """What the UI needs from the data layer."""

    hosts: list[str]
    """The hosts, in the order their sections are shown."""
    read_only: bool
    """Every destructive action is disabled."""
    interval: float
    """Seconds between the samples the backend pushes (a view older than a few is stale)."""

    async def start(self, on_view: OnView, on_log: OnLog, on_audit: OnAudit) -> None:
        """Connect every host (never blocks on one host) and start pushing views."""

    async def stop(self) -> None:
        """Close every link; leaves servers running."""

    async def launch(self, req: LaunchRequest, on_steps: OnSteps) -> OperationResult:
        """Preflight, start, and confirm a launch step by step."""

    async def kill(self, target: KillTarget, on_steps: OnSteps) -> OperationResult:
        """Stop a session or foreign server and confirm it is gone."""

    async def relaunch(
        self, target: KillTarget, req: LaunchRequest, on_steps: OnSteps
    ) -> OperationResult:
        """Confirmed kill of ``target``, then launch ``req``."""

    async def launch_group(self, req: LaunchRequest, hosts: list[str], on_steps: OnSteps) -> OperationResult:
        """A multi-node group over ``hosts`` (rank order) from one launch request (issue 30): every node's preflight,
        all members at once, READY; ``session_id`` of the result is the group id."""

    async def guard_group(self, group: str, on_steps: OnSteps) -> OperationResult:
        """The group failure policy (issue 30): a member of ``group`` proven dead now (re-checked on its host), the
        rest of the group killed, each kill confirmed on its host; audited. ``ok``: every kill confirmed."""

    async def follow_log(self, host: str, session_id: str, tail_lines: int = 500) -> list[str]:
        """Start following a session's log; returns the last ``tail_lines`` lines.

        Later lines arrive through ``on_log``. Only that session's own output.log.
        """

    async def unfollow_log(self, host: str, session_id: str) -> None:
        """Stop following a session's log."""

    def launch_template(self, host: str, gpu: int) -> LaunchRequest:
        """A prefilled request for the flag form (profile or defaults for that host)."""

    def launch_profiles(self, host: str) -> dict[str, LaunchRequest]:
        """The config's launch profiles usable on ``host`` (name -> request), for the flag form's picker."""

    def acknowledge(self, host: str, session_id: str) -> None:
        """The operator acknowledged an ended session: its GPU reads IDLE (it stays in the history)."""

    async def validator(self, flags: list[str], host: str | None = None) -> list[Finding]:
        """Check a flag set against the flags ``host``'s server accepts (learned from its ``--help``)."""

    async def planner(self, flags: list[str], gpus: list[int], host: str | None = None,
                      count_use: bool = False) -> PlanVerdict:
        """The memory planner's verdict for these flags on these GPUs of ``host`` (``count_use``: against the memory
        free on them now, for a launch that stops nothing)."""

    async def gpu_check(self, flags: list[str], gpus: list[int], host: str | None = None) -> list[Finding]:
        """What the launch's preflight says of these GPUs (and the flags' port) on ``host`` now, nothing launched:
        ``error`` for each of the host's checks that would refuse it, then what holds each GPU's memory (orphans,
        other sessions, other processes)."""

    async def others_audit(self, since: float, ops: tuple[str, ...] | None = None) -> list[AuditEntry]:
        """What other consoles on this machine (the CLI, another TUI) wrote to the shared audit log from
        ``since`` on (of ``ops`` when given): this console's own entries left out; [] without an audit file."""

    async def foreign_output(self, host: str, pid: int, start_ticks: int | None) -> tuple[str, list[str]]:
        """A hand-started server's own output: (where it is, its last lines). Raises with the host's reason
        when it cannot be read (not a regular file, unreadable, the process is gone)."""

    async def report(self, host: str, session_id: str) -> str:
        """Write the incident report of ``session_id`` on ``host`` (Markdown, the panel's SVG beside it)
        and return the Markdown file's path. Raises with the reason when it cannot be written."""


@runtime_checkable
class DeployBackend(Protocol):
    """A backend that also runs the config's deployments (issue 29): the TUI shows a row per deployment and ``r`` on
    it rolls it. The live backend is one; a backend without deployments (a test's fake) need not be."""

    async def watch_deployments(self, on_row: OnDeployment) -> None:
        """Start reading every deployment of a connected host periodically (``deploy status``'s code path, off the
        UI's frames); each row goes to ``on_row``."""

    async def deploy_roll(self, name: str, sets: list[str], unsets: list[str], on_steps: OnSteps) -> OperationResult:
        """``deploy roll NAME --set … --unset …``'s code path: the rolling relaunch, its steps reported."""
