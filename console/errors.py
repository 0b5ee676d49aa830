"""Errors meant for the operator: printed as one clear line, never as a traceback.

The command line's one contract (``console/cli.py`` applies it to every subcommand): a :class:`UserError`
ends the command with its :attr:`~UserError.exit_code` — 2 for bad input (a bad option or value, invalid
server flags, an unknown host syntax, a broken config, an unknown session id), 1 for an operation that
failed or a host that did not answer — and one line naming the input; under ``--json`` it is also the object
:func:`error_object` on stdout, ``{"ok": false, "error": {"kind": KIND, "message": LINE}}``, where ``KIND``
is the error's :attr:`~UserError.kind` (one of :data:`KINDS`).
"""

from __future__ import annotations

from typing import Any

KINDS: dict[str, str] = {
    "usage": "a command-line option or argument that is missing, unknown or malformed (rc 2)",
    "bad_input": "a value the command cannot use: an option's value, a file, a port, a profile (rc 2)",
    "unknown_session": "no session of that id on the host (rc 2)",
    "unknown_process": "no server process (or orphan) of that pid on the host (rc 2)",
    "invalid_flags": "server flags the host's server would reject (rc 2)",
    "config": "a config file that cannot be used (rc 2)",
    "host_key": "a host key that is unknown or changed: nothing was sent to the host (rc 1)",
    "read_only": "a change asked of a read-only console (rc 2)",
    "not_proven": "a kill asked of a process not proven an orphan (rc 2)",
    "host": "a host that cannot be reached or used (rc 1)",
    "refused": "an operation refused before anything was started or stopped (rc 1)",
    "failed": "an operation that failed (rc 1)",
    "internal": "a bug in the console: the message names the exception (rc 1)",
}
"""Every ``error.kind`` the command line reports, with what it means."""


class UserError(Exception):
    """A problem the operator can fix (bad config, unknown host, invalid flags, ...).

    ``kind`` defaults to ``bad_input`` (rc 2) or ``failed`` (rc 1)."""

    exit_code = 2
    kind: str | None = None

    def __init__(self, message: str, *, exit_code: int | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
        if kind is not None:
            self.kind = kind
        if self.kind is None:
            self.kind = "bad_input" if self.exit_code == 2 else "failed"
        assert self.kind in KINDS, self.kind


class UsageError(UserError):
    """A command line argparse cannot read (an unknown option, a missing argument, a value of the wrong type)."""

    kind = "usage"


class UnknownSession(UserError):
    """A session id the host has no run directory for."""

    kind = "unknown_session"

    def __init__(self, session_id: str, host: str) -> None:
        super().__init__(f"no session {session_id!r} on {host} (list them with 'mtpconsole sessions --host "
                         f"{host} --all')")
        self.session_id = session_id


class UnknownProcess(UserError):
    """A pid that is not what the command needs on the host (no such server process, no such orphan)."""

    kind = "unknown_process"


class InvalidFlags(UserError):
    """Server flags the host's own server would reject."""

    kind = "invalid_flags"


class ConfigError(UserError):
    """A config file that cannot be used: names the file, the key and the problem."""

    kind = "config"


class HostKeyError(UserError):
    """An unknown or changed SSH host key. The message carries the SHA256 fingerprint."""

    exit_code = 1
    kind = "host_key"


class HostError(UserError):
    """A host that cannot be reached or used."""

    exit_code = 1
    kind = "host"


def error_object(kind: str, message: str) -> dict[str, Any]:
    """The ``--json`` form of a refusal or an error: ``{"ok": false, "error": {"kind", "message"}}``."""
    assert kind in KINDS, kind
    return {"ok": False, "error": {"kind": kind, "message": message}}
