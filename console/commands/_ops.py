"""Shared plumbing for the lifecycle subcommands: one host, steps printed live, JSON at the end."""

from __future__ import annotations

import json
import sys

from console.model import OperationResult, Step
from console.redact import redact_obj, redact_text

MARK = {"ok": "✓", "failed": "✗", "running": "…", "pending": " ", "skipped": "-"}


def term(text: str) -> str:
    """Remote text as this terminal may print it: secrets masked; on a terminal, escape and control
    sequences removed (a log line or a process title must never retitle, clear or recolour it)."""
    text = redact_text(text)
    if sys.stdout.isatty():
        from console.ui.format import clean

        text = clean(text, 1 << 16)
    return text


def single_host(args) -> str:
    hosts = getattr(args, "hosts", None) or []
    if getattr(args, "demo", False) and not hosts:
        return "demo"
    if len(hosts) != 1:
        from console.errors import UserError

        raise UserError("this command needs exactly one --host")
    return hosts[0]


def step_printer(args):
    """Print each step once when it finishes (human mode only)."""
    shown: set[tuple[str, str]] = set()

    def on_steps(steps: list[Step]) -> None:
        if args.json:
            return
        for s in steps:
            if s.state in ("ok", "failed", "skipped") and (s.name, s.state) not in shown:
                shown.add((s.name, s.state))
                t = f" ({s.elapsed_s:.2f} s)" if s.elapsed_s is not None else ""
                print(f"  {MARK[s.state]} {s.name}{t}: {term(s.evidence or '')}", flush=True)
    return on_steps


def emit_result(args, r: OperationResult) -> int:
    if args.json:
        print(json.dumps(redact_obj(r.model_dump(mode="json")), indent=2))
    else:
        head = f"{r.op} on {r.host}: {'OK' if r.ok else 'FAILED'}"
        if r.session_id:
            head += f" — session {r.session_id}"
        if r.state:
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
