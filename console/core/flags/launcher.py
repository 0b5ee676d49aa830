"""Split a server command line into its launcher and its server flags: the one place that does.

Recognised launchers, each after optional environment wrappers (``NAME=value``, ``env [-i] [-u NAME]
…``, ``nohup``):

- ``python… [interpreter options] -m MODULE`` and ``python… [interpreter options] SCRIPT``
  (``python3 -m sglang.launch_server``, ``/venv/bin/python3.11 -u -m console.sim.sglang``);
- ``sglang serve``;
- ``vllm serve [MODEL]`` (the model positional belongs to the command, not the flags).

A list that starts with an option is flags only (a pasted flag set). Anything else (an unknown
program, ``python -c …``, a launcher with nothing after it where one is needed) is not split at
all: ``([], [])``, no launcher and no flags, rather than a guess that reads the program's own
arguments as server flags.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
ENV_OPTIONS_WITH_VALUE = {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}
"""``env`` options that take the next token as their value."""
PYTHON_OPTIONS_WITH_VALUE = {"-W", "-X", "--check-hash-based-pycs"}
"""Interpreter options that take the next token as their value (``python -X dev -m …``)."""


class LaunchCommand(NamedTuple):
    """A command line split: ``launcher`` (wrappers included) and the server ``flags`` after it."""

    launcher: list[str]
    flags: list[str]


def _after_wrappers(argv: list[str]) -> int:
    """Index of the first token after environment wrappers (``A=1``, ``env -u X``, ``nohup``)."""
    i = 0
    while i < len(argv):
        tok = argv[i]
        if ASSIGNMENT.match(tok) or tok == "nohup":
            i += 1
        elif tok.rsplit("/", 1)[-1] == "env":
            i += 1
            while i < len(argv) and argv[i].startswith("-"):
                i += 2 if argv[i] in ENV_OPTIONS_WITH_VALUE else 1
        else:
            return i
    return i


def _python_end(argv: list[str], i: int) -> int | None:
    """End of ``python… [options] (-m MODULE | SCRIPT)`` starting at ``i``; None: not a server launch."""
    j = i + 1
    while j < len(argv) and argv[j].startswith("-") and argv[j] != "-m":
        if argv[j] == "-c" or argv[j] == "-":
            return None  # a command string or stdin: no server module to split at
        j += 2 if argv[j] in PYTHON_OPTIONS_WITH_VALUE else 1
    if argv[j:j + 1] == ["-m"]:
        return j + 2 if j + 1 < len(argv) else None
    return j + 1 if j < len(argv) else None


def _launcher_end(argv: list[str], i: int) -> int | None:
    """End of the recognised launcher that starts at ``argv[i]``, else None."""
    if i >= len(argv):
        return None
    base = argv[i].rsplit("/", 1)[-1]
    if re.fullmatch(r"python[0-9.]*", base):
        return _python_end(argv, i)
    if base == "sglang" and argv[i + 1:i + 2] == ["serve"]:
        return i + 2
    if base == "vllm" and argv[i + 1:i + 2] == ["serve"]:
        has_model = i + 2 < len(argv) and not argv[i + 2].startswith("-")
        return i + 3 if has_model else i + 2
    return None


def split_launch_command(argv: Sequence[str]) -> LaunchCommand:
    """``(launcher, flags)`` of a server command line (see the module's docstring for what is recognised).

    ``["python3", "-m", "sglang.launch_server", "--port", "1"]`` → ``(["python3", "-m",
    "sglang.launch_server"], ["--port", "1"])``; ``["--port", "1"]`` → ``([], ["--port", "1"])``;
    ``["./run.sh", "--port", "1"]`` (unrecognised) and ``[]`` → ``([], [])``.
    """
    args = [str(a) for a in argv]
    if not args:
        return LaunchCommand([], [])
    if args[0].startswith("-"):
        return LaunchCommand([], args)
    end = _launcher_end(args, _after_wrappers(args))
    if end is None:
        return LaunchCommand([], [])
    return LaunchCommand(args[:end], args[end:])
