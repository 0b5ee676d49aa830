"""Shared plumbing for the lifecycle subcommands: one host, steps printed live, JSON at the end."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Callable

from console.core.redact import redact_obj, redact_text
from console.core.text import STEP_MARKS
from console.errors import UnknownSession, UserError, error_object
from console.model import OperationResult, SessionInfo, Step

if TYPE_CHECKING:
    from console.link.link import HostLink
    from console.model import HostSnapshot

PORTS = range(1, 65536)
"""The TCP ports a server may listen on."""


def port_arg(text: str) -> int:
    """argparse ``type=`` for a TCP port: an integer 1-65535, refused at once (rc 2) otherwise."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)") from None
    if n not in PORTS:
        raise argparse.ArgumentTypeError(f"{n}: a port must be 1-65535")
    return n


def require_port(port: int | None, what: str) -> None:
    """Refuse (rc 2) a port outside 1-65535 before the host is asked anything (``what`` names where it came from)."""
    if port is not None and port not in PORTS:
        raise UserError(f"{what} {port}: a port must be 1-65535")


def require_ports(port: int | None, argv: list[str]) -> None:
    """Refuse (rc 2) a launch whose port (``--port``, a profile's) or server flag ``--port`` is no TCP port."""
    from console.core.sessions import flag_value

    require_port(port, "--port")
    v = (flag_value(argv, "--port") or "").strip()
    if v.lstrip("-").isdigit():
        require_port(int(v), "the server flag --port")


async def require_session(link: HostLink, session_id: str, snap: HostSnapshot | None = None) -> SessionInfo:
    """The session ``session_id`` on the link's host (from ``snap``, else the latest sample, else the agent's
    list of every run directory); an :class:`~console.errors.UnknownSession` (rc 2) when it has none."""
    from console.ops.lifecycle import find_session

    s = await find_session(link, snap or link.snapshot(), session_id)
    if s is None:
        raise UnknownSession(session_id, link.name)
    return s


def term(text: str) -> str:
    """Remote text as this terminal may print it: secrets masked; on a terminal, escape and control
    sequences removed (a log line or a process title must never retitle, clear or recolour it)."""
    text = redact_text(text)
    if sys.stdout.isatty():
        from console.ui.format import clean

        text = clean(text, 1 << 16)
    return text


def step_printer(json_output: bool) -> Callable[[list[Step]], None]:
    """Print each step once when it finishes (human mode only)."""
    shown: set[tuple[str, str]] = set()

    def on_steps(steps: list[Step]) -> None:
        if json_output:
            return
        for s in steps:
            if s.state in ("ok", "failed", "skipped", "warning") and (s.name, s.state) not in shown:
                shown.add((s.name, s.state))
                t = f" ({s.elapsed_s:.2f} s)" if s.elapsed_s is not None else ""
                print(f"  {STEP_MARKS[s.state]} {s.name}{t}: {term(s.evidence or '')}", flush=True)
    return on_steps


def refusal_kind(r: OperationResult) -> str | None:
    """None for an operation that ran; for one refused before anything was started or stopped: ``invalid_flags``
    when the host's server rejects its flags (the refusal then carries the server's own error line, see
    ``console.ops.lifecycle.preflight.Checked.line``: bad input, rc 2), else ``refused`` (rc 1)."""
    if r.refused is None:
        return None
    return "invalid_flags" if r.line else "refused"


def emit_result(json_output: bool, r: OperationResult) -> int:
    """Print an operation's result (JSON or text); the exit status: 0 when it succeeded, 2 when it was refused
    for invalid flags, else 1. Under ``--json`` the whole result; a refusal's ``error`` is the contract's error
    object (``{"kind", "message"}``, see :func:`console.errors.error_object`), a failure's stays its text."""
    kind = refusal_kind(r)
    if json_output:
        data = redact_obj(r.model_dump(mode="json"))
        if kind is not None:
            data["error"] = redact_obj(error_object(kind, r.error or r.refused or "refused"))["error"]
        print(json.dumps(data, indent=2))
    elif r.refused is not None:  # nothing was started (or stopped): one verdict line, then every reason
        killed = any(x.phase == "kill" for x in r.steps)  # a relaunch whose new launch was refused
        what = ("the old server was stopped, nothing was started" if killed else
                "nothing was stopped or started" if r.op == "relaunch" else "nothing was started")
        print(f"{r.op} on {r.host}: REFUSED — {what}")
        for reason in r.refusals or [r.refused]:
            print(f"  refused: {term(reason)}")
        if r.line and all(r.line not in x for x in r.refusals):
            print(f"  line:  {term(r.line)}")
        if r.hint:
            print(f"  hint:  {term(r.hint)}")
    else:
        head = f"{r.op} on {r.host}: {'OK' if r.ok else 'ABORTED' if r.aborted else 'FAILED'}"
        if r.session_id:
            head += f" — session {r.session_id}"
        if r.state and not (r.state == "failed" and not r.ok):  # "FAILED [FAILED]" says it twice
            head += f" [{r.state.upper()}]"
        print(head)
        if not r.ok:
            if r.aborted:  # an operator stopped the session while it launched: no cause, nothing failed
                print(f"  {r.aborted}: the session was stopped while it launched (not a failure)")
            if r.cause:
                print(f"  cause: {r.cause}")
            if r.line:
                print(f"  line:  {term(r.line)}")
            if r.hint:
                print(f"  hint:  {term(r.hint)}")
            if r.error and not r.cause:
                print(f"  error: {term(r.error)}")
            for x in r.left:
                print(f"  left:  {term(x)}")
            if r.log_tail:
                print("  last lines of this session's log:")
                for line in r.log_tail:
                    print("    " + term(line))
    sys.stdout.flush()
    return 0 if r.ok else 2 if kind == "invalid_flags" else 1
