"""The link's errors: a request that could not be sent or answered, and the agent's typed refusals.

An error reply carries the agent's operator-readable ``error`` text and a machine-readable ``kind``
(``console/host/hostlib.py``'s ``ERROR_KINDS``); :func:`request_error` turns it into the class of that
kind, so callers catch :class:`NoSuchProcess` instead of matching ``"already gone"`` in the text.
"""

from __future__ import annotations


class LinkDown(Exception):
    """The link is not connected (or dropped while a request was in flight)."""


class RequestError(Exception):
    """The agent answered a request with an error (message is the agent's, operator-readable)."""

    kind = "failed"

    def __init__(self, message: str = "failed", kind: str | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class BadRequest(RequestError):
    """The request's arguments were wrong (a bad session id, argv, a missing argument)."""

    kind = "bad_request"


class UnknownOp(BadRequest):
    """The agent has no such op."""

    kind = "unknown_op"


class NotFound(RequestError):
    """No such file, session, log or command on the host."""

    kind = "not_found"


class Denied(RequestError):
    """The host refused access (file permissions)."""

    kind = "denied"


class NoSuchProcess(RequestError):
    """The process targeted is already gone (or is another process now)."""

    kind = "no_such_process"


class Refused(RequestError):
    """The agent will not do it: the target's identity changed, it holds the agent, a check failed."""

    kind = "refused"


class NotEnded(RequestError):
    """The session has not ended (an ``ack`` of a live session)."""

    kind = "not_ended"


class TimedOut(RequestError):
    """The command a ``run`` started ran out of its time on the host."""

    kind = "timed_out"


ERRORS: dict[str, type[RequestError]] = {c.kind: c for c in (
    RequestError, BadRequest, UnknownOp, NotFound, Denied, NoSuchProcess, Refused, NotEnded, TimedOut)}
"""Kind -> class: one class per kind the agent sends (checked against the agent's ERROR_KINDS by tests/test_client_contract.py)."""


def request_error(kind: object, message: object) -> RequestError:
    """The error of an error reply: the class of ``kind`` (a plain RequestError for an unknown one)."""
    cls = ERRORS.get(kind, RequestError) if isinstance(kind, str) else RequestError
    return cls(str(message or "failed"))
