"""Flag intelligence: read a server's flags from its ``--help`` and check flag sets before launch (learning a
host's schema through the agent lives in ``console.ops.flag_learning``).

The public API in one place (implementation in the ``flag_*`` modules beside this one):

- :func:`parse_help` (text -> :class:`FlagSchema`), :class:`HelpParseError`;
- :func:`validate` (argv -> [:class:`Problem`]), :func:`resolve`, :func:`diff_flags`;
- :func:`speculative_notes`, :func:`security_notes`, and :func:`check_all` (all of them);
- :data:`KEY_FLAGS`, :func:`key_flags`, :func:`search`;
- :data:`RENAMES`, :func:`find_rename`; :func:`split_launch_command`.
"""

from __future__ import annotations

from console.core.flags.check import SECRET_FLAGS, diff_flags, redact, resolve, validate
from console.core.flags.help import HelpParseError, parse_help
from console.core.flags.launcher import LaunchCommand, split_launch_command
from console.core.flags.models import Flag, FlagSchema, Problem
from console.core.flags.notes import security_notes, speculative_notes
from console.core.flags.renames import RENAMES, Rename, find_rename
from console.core.flags.search import KEY_FLAGS, key_flags, search
from console.model import DEFAULT_SERVER_COMMAND

__all__ = [
    "DEFAULT_COMMAND",
    "KEY_FLAGS",
    "RENAMES",
    "SECRET_FLAGS",
    "Flag",
    "FlagSchema",
    "HelpParseError",
    "LaunchCommand",
    "Problem",
    "Rename",
    "check_all",
    "diff_flags",
    "find_rename",
    "key_flags",
    "parse_help",
    "redact",
    "resolve",
    "search",
    "security_notes",
    "speculative_notes",
    "split_launch_command",
    "validate",
]

DEFAULT_COMMAND = list(DEFAULT_SERVER_COMMAND)
"""The server command whose flags are learned when none is given."""


def check_all(argv: list[str], schema: FlagSchema, *, version: str | None = None) -> list[Problem]:
    """:func:`validate` + :func:`speculative_notes` + :func:`security_notes`, errors first."""
    problems = validate(argv, schema, version=version)
    problems += speculative_notes(argv, schema)
    problems += security_notes(argv, schema)
    return sorted(problems, key=lambda p: p.severity != "error")
