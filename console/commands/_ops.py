"""Shared plumbing for the lifecycle subcommands: one host, steps printed live, JSON at the end."""

from __future__ import annotations

import json
import sys
from typing import Callable

from console.core.redact import redact_obj, redact_text
from console.core.text import STEP_MARKS
from console.model import OperationResult, Step


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


def emit_result(json_output: bool, r: OperationResult) -> int:
    """Print an operation's result (JSON or text); the exit status: 0 when it succeeded, else 1."""
    if json_output:
        print(json.dumps(redact_obj(r.model_dump(mode="json")), indent=2))
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
        head = f"{r.op} on {r.host}: {'OK' if r.ok else 'FAILED'}"
        if r.session_id:
            head += f" — session {r.session_id}"
        if r.state and not (r.state == "failed" and not r.ok):  # "FAILED [FAILED]" says it twice
            head += f" [{r.state.upper()}]"
        print(head)
        if not r.ok:
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
    return 0 if r.ok else 1
