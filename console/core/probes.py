"""The console's own probes in a server's log: recognised, and left out of the log at the source when it can be.

The console asks every server it watches two things over and over: ``GET /health`` (a launch's ``healthy`` step,
then READY's check every few seconds) and ``GET /metrics`` (the agent's fetch, once a tick, of a server started
with ``--enable-metrics``). Uvicorn writes one access line for each — on a real session they were 23 % of its log
lines — and they push what the operator reads out of the log tail.

Two remedies, both kept here as pure functions:

- at the source: SGLang's ``--uvicorn-access-log-exclude-prefixes`` (0.5.23's help: "Exclude uvicorn access logs
  whose request path starts with any of these prefixes"). :func:`quiet_probe_flags` says what a launch adds — only
  when the host's own flag schema has the flag, and never when the operator gave it (any spelling: their value
  wins, an empty one included);
- in the view: :func:`probe_path` recognises such an access line of a server that still writes them (one started
  by hand, an older SGLang, a launch whose schema was not known), so that the log pane folds them.

A probe line is a uvicorn access line whose request path starts with one of :data:`PROBE_PREFIXES` — exactly what
the flag leaves out (any client, any method), so the fold hides nothing the flag would have kept.
"""

from __future__ import annotations

import re

from console.core.flags.argv import resolve_argv
from console.core.flags.models import FlagSchema
from console.core.server_info import SERVER_INFO_PATH

PROBE_PREFIXES = ("/metrics", "/health", SERVER_INFO_PATH)
"""The request paths the console itself asks every server for (``/health`` covers ``/health_generate`` too, as the
flag's prefix match does; ``/server_info``, which the server facts re-read every 30 s: console.core.server_info). Not
``/model_info``: read once after READY, it is also the server's own warmup request, which stays in the log."""
EXCLUDE_FLAG = "--uvicorn-access-log-exclude-prefixes"
"""SGLang's flag (0.5.23: ``nargs="*"``, default empty: nothing excluded) that drops those access lines."""

_ACCESS = re.compile(r'(?:^|\s)\S+:\d+ - "(?P<method>[A-Z]+) (?P<path>/\S*) HTTP/\d(?:\.\d)?" (?P<status>\d{3})\b')
"""Uvicorn's access line: ``<client host>:<port> - "<METHOD> <path> HTTP/<version>" <status> <phrase>`` (after
SGLang's ``[time] INFO:     `` prefix, or vLLM's ``(APIServer pid=N) INFO:     ``)."""


def probe_path(line: str) -> str | None:
    """The request path of ``line`` when it is an access line of a probe path (``/metrics``, ``/health…``);
    None for any other line (a request to another path, a log line that only quotes one)."""
    m = _ACCESS.search(line)
    if m is None:
        return None
    path = m.group("path")
    return path if path.startswith(PROBE_PREFIXES) else None


def is_probe_line(line: str) -> bool:
    """True when ``line`` is an access line of one of the console's probe paths (:func:`probe_path`)."""
    return probe_path(line) is not None


def quiet_probe_flags(flags: list[str], schema: FlagSchema | None) -> list[str]:
    """The flags a launch adds so that its server leaves the console's probes out of its access log:
    ``--uvicorn-access-log-exclude-prefixes /metrics /health /server_info`` when ``schema`` (the host's own server's flags) has
    that flag and ``flags`` do not give it in any spelling (abbreviated, ``=``, empty: the operator's value wins);
    else nothing (no schema known, an older server without the flag)."""
    if schema is None or schema.get(EXCLUDE_FLAG) is None:
        return []
    if resolve_argv(list(flags), schema).given(EXCLUDE_FLAG):
        return []
    return [EXCLUDE_FLAG, *PROBE_PREFIXES]
