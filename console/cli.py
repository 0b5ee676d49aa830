"""The `mtpconsole` command line: the TUI entry point and every action as a subcommand.

Subcommands live in ``console/commands/<module>.py``; each module exposes ``HELP`` (one
line), ``configure(parser)`` and ``run(args) -> int`` (``run`` may be a coroutine function).
Only the chosen subcommand's module is imported, so ``--help`` and start-up stay fast.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import os
import sys

from console import __version__

# name -> (module, one-line help). The registry is data so `--help` imports nothing heavy.
COMMANDS: dict[str, tuple[str, str]] = {
    "status": ("console.commands.status", "one snapshot per host (GPUs, servers, sessions), then exit"),
    "trust-host": ("console.commands.trust_host", "show a host's SSH key fingerprint and add it to known_hosts"),
    "launch": ("console.commands.launch", "launch a server in a fresh session, confirmed step by step"),
    "kill": ("console.commands.kill", "stop a session or a foreign server, confirmed"),
    "relaunch": ("console.commands.relaunch", "confirmed kill, then launch with the same or edited flags"),
    "sessions": ("console.commands.sessions", "list the launch sessions on a host and their state"),
    "logs": ("console.commands.logs", "print (or follow) one session's own log"),
    "classify-log": ("console.commands.classify_log", "classify server log files: state, failure cause, metrics"),
    "flags": ("console.commands.flags", "the host's server flags, learned from its --help"),
    "check": ("console.commands.check", "validate a flag set against the host's server"),
    "plan": ("console.commands.plan", "estimate GPU memory for a model and flags: fits / tight / does not fit"),
    "orphans": ("console.commands.orphans", "find orphaned server workers and GPU memory holders; --kill PID"),
    "events": ("console.commands.events", "what happened on a host: exits, OOM kills, READY, actions, with times"),
    "ack": ("console.commands.ack", "acknowledge an ended (failed) session: its GPU reads IDLE"),
    "load": ("console.commands.load", "send concurrent requests to a server (demo load generator)"),
}


def add_common(p: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """Options accepted both before and after the subcommand."""
    d = argparse.SUPPRESS if suppress else None
    p.add_argument("--host", action="append", dest="hosts", metavar="HOST", default=d,
                   help="SSH alias, user@host[:port], or 'local' (repeatable)")
    p.add_argument("--ssh-config", metavar="FILE", default=d, help="SSH config file (default ~/.ssh/config), like ssh -F")
    p.add_argument("--config", metavar="PATH", default=d, help="config file (default $XDG_CONFIG_HOME/mtpconsole/config.toml)")
    p.add_argument("--json", action="store_true", default=d if suppress else False, help="machine-readable output")
    p.add_argument("--demo", action="store_true", default=d if suppress else False,
                   help="use the built-in demo host (simulated GPUs and SGLang stand-ins)")
    p.add_argument("--read-only", action="store_true", default=d if suppress else False,
                   help="disable every destructive action")
    p.add_argument("--interval", type=float, metavar="S", default=d, help="sampling interval in seconds (default 1)")
    p.add_argument("--audit-log", metavar="FILE", default=d, help="JSON-lines audit log of remote commands")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mtpconsole",
        description="Operator console for LLM inference servers on remote GPU hosts. "
        "With no subcommand it opens the TUI.",
        epilog="subcommands:\n" + "\n".join(f"  {n:<13} {h}" for n, (_, h) in COMMANDS.items())
        + "\n\nRun 'mtpconsole SUBCOMMAND --help' for a subcommand's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"mtpconsole {__version__}")
    add_common(p)
    p.add_argument("--theme", metavar="NAME", default=None, help="dark, light or high-contrast")
    p.add_argument("command", nargs="?", metavar="SUBCOMMAND", help=argparse.SUPPRESS)
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


def _run(fn, args) -> int:
    result = fn(args)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    return int(result or 0)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    head, rest = split_at_command(argv)
    args = parser.parse_args(head)
    if rest is not None:
        args.command, args.rest = rest[0], rest[1:]
    from console.errors import UserError

    try:
        if args.command is None:
            if args.rest:
                parser.error(f"unexpected arguments: {' '.join(args.rest)}")
            from console.commands import tui
            return _run(tui.run, args)
        if args.command not in COMMANDS:
            parser.error(f"unknown subcommand {args.command!r} (choose from {', '.join(COMMANDS)})")
        modname, help_ = COMMANDS[args.command]
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as e:
            if e.name != modname:
                raise
            print(f"mtpconsole: '{args.command}' is not available in this build yet", file=sys.stderr)
            return 2
        sub = argparse.ArgumentParser(prog=f"mtpconsole {args.command}", description=help_)
        add_common(sub, suppress=True)
        mod.configure(sub)
        sub_args = sub.parse_args(args.rest)
        for k, v in vars(sub_args).items():
            setattr(args, k, v)
        return _run(mod.run, args)
    except UserError as e:
        print(f"mtpconsole: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `mtpconsole ... | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
