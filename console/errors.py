"""Errors meant for the operator: printed as one clear line, never as a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A problem the operator can fix (bad config, unknown host, invalid flags, ...)."""

    exit_code = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(UserError):
    """A config file that cannot be used: names the file, the key and the problem."""


class HostKeyError(UserError):
    """An unknown or changed SSH host key. The message carries the SHA256 fingerprint."""


class HostError(UserError):
    """A host that cannot be reached or used."""

    exit_code = 1
