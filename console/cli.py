"""The `mtpconsole` command line: the TUI entry point and every action as a subcommand.

Subcommands live in ``console/commands/<module>.py``; each module exposes ``configure(parser)``
(its own options) and ``run(ctx, args) -> int`` (``run`` may be a coroutine function), where
``ctx`` is the :class:`~console.commands.context.CliContext` built here once from the common
options and ``args`` holds only that subcommand's own options. Only the chosen subcommand's
module is imported, so ``--help`` and start-up stay fast.

One contract for every subcommand, applied here (:func:`main`): a :class:`~console.errors.UserError` from
anywhere below (argparse's own errors included, as :class:`~console.errors.UsageError`) ends the command with
its exit status (2: bad input, 1: a failed operation or an unreachable host) and one line on stderr; under
``--json`` its :func:`~console.errors.error_object` is printed on stdout too. What a command prints when it
ran (a list, a result with ``"ok": false``) is the command's own.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import difflib
import importlib
import inspect
import json
import os
import sys
import traceback
from typing import Any, NoReturn

from console import __version__
from console.errors import UsageError, UserError, error_object


class Parser(argparse.ArgumentParser):
    """argparse, whose errors are :class:`UsageError` (one line, the contract's exit status and ``--json``
    object) instead of a usage block and ``SystemExit``."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog.removeprefix('mtpconsole').strip() + ': ' if ' ' in self.prog else ''}"
                         f"{message} (see '{self.prog} --help')")


@dataclasses.dataclass(frozen=True)
class Option:
    """A common option: accepted before the subcommand, and after it where it applies."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any]


COMMON: dict[str, Option] = {
    "hosts": Option(("--host",), dict(action="append", metavar="HOST",
                                      help="SSH alias, user@host[:port], or 'local' (repeatable)")),
    "ssh_config": Option(("--ssh-config",), dict(metavar="FILE",
                                                 help="SSH config file (default ~/.ssh/config), like ssh -F")),
    "config": Option(("--config",), dict(metavar="PATH",
                                         help="config file (default $XDG_CONFIG_HOME/mtpconsole/config.toml)")),
    "json": Option(("--json",), dict(action="store_true", help="machine-readable output")),
    "demo": Option(("--demo",), dict(action="store_true",
                                     help="use the built-in demo host (simulated GPUs and SGLang stand-ins)")),
    "read_only": Option(("--read-only",), dict(action="store_true", help="disable every destructive action")),
    "interval": Option(("--interval",), dict(type=float, metavar="S",
                                             help="sampling interval in seconds (default: the config's, 1)")),
    "audit_log": Option(("--audit-log",), dict(metavar="FILE", help="JSON-lines audit log of remote commands "
                                               "(default $MTPCONSOLE_AUDIT_LOG or "
                                               "$XDG_STATE_HOME/mtpconsole/audit.jsonl)")),
}
"""dest -> option. Which of them a subcommand accepts is in its :class:`Command` entry."""

HOST_OPTIONS = frozenset({"hosts", "ssh_config", "config", "demo", "audit_log", "json"})
"""What every command that talks to a host accepts."""
WRITE_OPTIONS = HOST_OPTIONS | {"read_only"}
"""Commands that change a host also honour --read-only."""


@dataclasses.dataclass(frozen=True)
class Command:
    """A subcommand: its module, its one-line help and the common options that apply to it."""

    module: str
    help: str
    common: frozenset[str]
    flag_valued: tuple[str, ...] = ()
    """Options whose value is itself a flag (``--set --mem-fraction-static=0.85``): argparse would read the value
    as an option, so ``--set X`` is taken as ``--set=X`` before parsing."""


# The registry is data so `--help` imports nothing heavy.
COMMANDS: dict[str, Command] = {
    "status": Command("console.commands.status", "one snapshot per host (GPUs, servers, sessions), then exit",
                      HOST_OPTIONS),
    "trust-host": Command("console.commands.trust_host",
                          "show a host's SSH key fingerprint and add it to known_hosts", frozenset({"ssh_config"})),
    "launch": Command("console.commands.launch", "launch a server in a fresh session, confirmed step by step",
                      WRITE_OPTIONS),
    "kill": Command("console.commands.kill", "stop a session or a foreign server, confirmed", WRITE_OPTIONS),
    "relaunch": Command("console.commands.relaunch", "confirmed kill, then launch with the same or edited flags",
                        WRITE_OPTIONS, flag_valued=("--set", "--unset")),
    "sessions": Command("console.commands.sessions", "list the launch sessions on a host and their state",
                        WRITE_OPTIONS),  # --prune removes a broken run directory: --read-only refuses it
    "logs": Command("console.commands.logs", "print (or follow) one session's own log", HOST_OPTIONS),
    "classify-log": Command("console.commands.classify_log",
                            "classify server log files: state, failure cause, metrics", frozenset({"json"})),
    "flags": Command("console.commands.flags", "the host's server flags, learned from its --help", HOST_OPTIONS),
    "check": Command("console.commands.check", "validate a flag set against the host's server", HOST_OPTIONS),
    "plan": Command("console.commands.plan", "estimate GPU memory for a model and flags: fits / tight / does not fit",
                    frozenset({"json", "demo"})),
    "orphans": Command("console.commands.orphans",
                       "find orphaned server workers and GPU memory holders; --kill PID", WRITE_OPTIONS),
    "events": Command("console.commands.events",
                      "what happened on a host: exits, OOM kills, READY, actions, with times", HOST_OPTIONS),
    "ack": Command("console.commands.ack", "acknowledge an ended (failed) session: its GPU reads IDLE",
                   HOST_OPTIONS),
    "load": Command("console.commands.load", "send concurrent requests to a server (demo load generator)",
                    frozenset({"json"})),
    "report": Command("console.commands.report",
                      "write an incident report of a session (Markdown + the panel as SVG)", HOST_OPTIONS),
    "export": Command("console.commands.export",
                      "serve the console's view as Prometheus metrics (for Prometheus/Grafana)",
                      HOST_OPTIONS | {"interval"}),
    "deploy": Command("console.commands.deploy", "replicas behind SGLang's gateway (smg): up, status, roll, down",
                      WRITE_OPTIONS, flag_valued=("--set", "--unset")),
    "demo": Command("console.commands.demo",
                    "the demo host --demo commands share: up, down, status (it idles out after 15 min)",
                    frozenset({"json"})),
}


def add_common(p: argparse.ArgumentParser, dests: frozenset[str] | set[str], *, suppress: bool = False) -> None:
    """Add the common options named by ``dests`` (with ``suppress``: absent unless given)."""
    for dest, opt in COMMON.items():
        if dest in dests:
            kw = dict(opt.kwargs)
            kw["default"] = argparse.SUPPRESS if suppress else (False if kw.get("action") == "store_true" else None)
            p.add_argument(*opt.flags, dest=dest, **kw)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="mtpconsole",
        description="Operator console for LLM inference servers on remote GPU hosts. "
        "With no subcommand it opens the TUI.",
        epilog="subcommands:\n" + "\n".join(f"  {n:<13} {c.help}" for n, c in COMMANDS.items())
        + "\n\nRun 'mtpconsole SUBCOMMAND --help' for a subcommand's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"mtpconsole {__version__}")
    add_common(p, frozenset(COMMON))
    p.add_argument("--theme", metavar="NAME", default=None, help="TUI theme (a name of ui.theme in the config: see the README)")
    p.add_argument("subcommand", nargs="?", metavar="SUBCOMMAND", help=argparse.SUPPRESS)
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


VALUE_OPTIONS = {"--host", "--ssh-config", "--config", "--interval", "--audit-log", "--theme"}


def split_at_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """Split at the subcommand so everything after it (a ``--`` included) reaches it verbatim."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return argv, None
        if a in VALUE_OPTIONS:
            i += 2
            continue
        if not a.startswith("-"):
            return argv[:i], argv[i:]
        i += 1
    return argv, None


def glue_flag_values(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """``--set --flag=v`` -> ``--set=--flag=v`` for each of ``options`` (up to a ``--`` that ends the options)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return out + argv[i:]
        if a in options and i + 1 < len(argv) and argv[i + 1].startswith("-") and argv[i + 1] != "--":
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def _given(top: argparse.Namespace) -> dict[str, Any]:
    """Common options given before the subcommand (defaults are None/False)."""
    return {d: v for d, v in vars(top).items() if d in COMMON and v is not None and v is not False}


def context_from(values: dict[str, Any], applies: frozenset[str], theme: str | None = None):
    """The one :class:`CliContext` of this invocation (the config is read only where it applies)."""
    from console.commands.context import make_context
    from console.config import Config, load_config

    interval = values.get("interval")
    if interval is not None and not 0 < interval <= 3600:
        raise UserError(f"--interval {interval}: expected a number of seconds above 0 (at most 3600)")
    cfg = load_config(values.get("config")) if "config" in applies else Config()
    return make_context(config=cfg, hosts=values.get("hosts") or (), ssh_config=values.get("ssh_config"),
                        audit_log=values.get("audit_log"), interval=values.get("interval"),
                        read_only=bool(values.get("read_only")), demo=bool(values.get("demo")),
                        json_output=bool(values.get("json")), theme=theme)


def _run(fn, ctx, args: argparse.Namespace) -> int:
    result = fn(ctx, args)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    return int(result or 0)


def _dispatch(parser: argparse.ArgumentParser, top: argparse.Namespace, name: str | None, rest: list[str]) -> int:
    given = _given(top)
    if name is None:
        if rest:
            parser.error(f"unexpected arguments: {' '.join(rest)}")
        from console.commands import tui

        return _run(tui.run, context_from(given, frozenset(COMMON), top.theme), argparse.Namespace())
    if name not in COMMANDS:
        near = difflib.get_close_matches(name, COMMANDS, n=2, cutoff=0.6)
        guess = f": did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
        raise UsageError(f"unknown subcommand {name!r}{guess} (subcommands: {', '.join(COMMANDS)}; "
                         "see 'mtpconsole --help')")
    cmd = COMMANDS[name]
    extra = [COMMON[d].flags[0] for d in given if d not in cmd.common]
    if top.theme is not None:
        extra.append("--theme")
    if extra:
        raise UsageError(f"{', '.join(extra)}: not an option of '{name}' (see 'mtpconsole {name} --help')")
    mod = importlib.import_module(cmd.module)
    sub = Parser(prog=f"mtpconsole {name}", description=cmd.help)
    add_common(sub, cmd.common, suppress=True)
    mod.configure(sub)
    ns = vars(sub.parse_args(glue_flag_values(rest, cmd.flag_valued)))
    values = {**given, **{d: v for d, v in ns.items() if d in COMMON}}
    own = argparse.Namespace(**{d: v for d, v in ns.items() if d not in COMMON})
    return _run(mod.run, context_from(values, cmd.common), own)


def wants_json(argv: list[str]) -> bool:
    """Whether ``--json`` is among the console's own options (before a ``--`` that starts server flags), read
    before anything is parsed, so that an error of the parsing itself is reported as JSON too."""
    return "--json" in (argv[:argv.index("--")] if "--" in argv else argv)


def report_error(e: UserError, as_json: bool) -> int:
    """The contract's one line on stderr (and under ``--json`` the error object on stdout); the exit status."""
    if as_json:
        print(json.dumps(error_object(e.kind or "bad_input", str(e)), indent=2), flush=True)
    print(f"mtpconsole: {e}", file=sys.stderr)
    return e.exit_code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    as_json = wants_json(argv)
    try:
        parser = build_parser()
        head, rest = split_at_command(argv)
        top = parser.parse_args(head)
        name, tail = (rest[0], rest[1:]) if rest is not None else (top.subcommand, list(top.rest or []))
        return _dispatch(parser, top, name, tail)
    except UserError as e:
        return report_error(e, as_json)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `mtpconsole ... | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except Exception as e:  # a bug: the traceback for the report, and under --json still an object to parse
        if not as_json:
            raise
        traceback.print_exc()
        print(json.dumps(error_object("internal", f"{type(e).__name__}: {e}"), indent=2), flush=True)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
