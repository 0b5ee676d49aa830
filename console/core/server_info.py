"""What the console reads from a server's ``/server_info`` and ``/model_info`` (SGLang), tolerant of anything.

SGLang answers ``GET /server_info`` with every resolved server argument, ``launch_command``, ``version`` and
``internal_states[i]`` (``last_gen_throughput``, ``memory_usage``, ``avg_spec_accept_length``), and
``GET /model_info`` with ``model_path``, ``served_model_name``, ``architectures`` .... The ``/get_server_info`` and
``/get_model_info`` forms are deprecated (SGLang logs a warning on every call): the console never calls them; the
paths below are the one definition every caller uses.

Neither endpoint is a condition of READY: a server without them (older releases, other frameworks, a stand-in)
is judged by its ready line and ``/health``. An answer that is not a 200 with a JSON object (404, no connection,
garbage) reads as *not offered* (``offered`` False), never as an error of the session. Each fact carries the time
it was read (``at``), so its age can be shown.
"""

from __future__ import annotations

import json
import math
from typing import Any

from console.model import Frozen

SERVER_INFO_PATH = "/server_info"
MODEL_INFO_PATH = "/model_info"
DEPRECATED_PATHS = ("/get_server_info", "/get_model_info")
"""Never called by the console (tests assert it on the stand-in's log)."""
PROBE_EVERY_S = 30.0
"""A session's facts are read once after READY, then at this cadence."""


class ServerFacts(Frozen):
    """The facts one read of ``/server_info`` + ``/model_info`` gave (None: not in the answer)."""

    at: float
    """When they were read (epoch seconds); the age of every fact here is now - at."""
    server_info_offered: bool = False
    model_info_offered: bool = False
    version: str | None = None
    model_path: str | None = None
    served_model_name: str | None = None
    architectures: tuple[str, ...] = ()
    speculative_algorithm: str | None = None
    spec_num_steps: int | None = None
    """The speculative step count the server reports now (under ``--speculative-adaptive``, its current choice)."""
    avg_spec_accept_length: float | None = None
    """Mean accepted tokens per step, averaged over the ``internal_states`` that report one."""

    @property
    def offered(self) -> bool:
        return self.server_info_offered or self.model_info_offered

    def age(self, now: float) -> float:
        return max(0.0, now - self.at)

    def stale(self, now: float) -> bool:
        """Older than three probe periods: shown as stale."""
        return self.age(now) > 3 * PROBE_EVERY_S


def json_object(status: int, body: str | bytes) -> dict[str, Any] | None:
    """The answer's JSON object, or None for anything else (not 200, not JSON, not an object)."""
    if status != 200:
        return None
    try:
        data = json.loads(body)
    except (ValueError, TypeError, UnicodeDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _text(v: object) -> str | None:
    return (v.strip()[:500] or None) if isinstance(v, str) else None


def _number(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _int(v: object) -> int | None:
    f = _number(v)
    return int(f) if f is not None and f == int(f) and 0 <= f < 1 << 20 else None


def facts(at: float, server_info: dict[str, Any] | None, model_info: dict[str, Any] | None) -> ServerFacts:
    """The facts of two answers (each a JSON object, or None when not offered); unknown fields are ignored and a
    field of the wrong type reads as absent."""
    si, mi = server_info or {}, model_info or {}
    states = si.get("internal_states")
    lengths = [x for x in ((_number(s.get("avg_spec_accept_length")) for s in states if isinstance(s, dict))
                           if isinstance(states, list) else ()) if x is not None]
    archs = mi.get("architectures")
    served = mi.get("served_model_name", si.get("served_model_name"))
    return ServerFacts(
        at=at, server_info_offered=server_info is not None, model_info_offered=model_info is not None,
        version=_text(si.get("version")),
        model_path=_text(mi.get("model_path", si.get("model_path"))),
        served_model_name=_text(served),
        architectures=tuple(a[:200] for a in archs if isinstance(a, str)) if isinstance(archs, list) else (),
        speculative_algorithm=_text(si.get("speculative_algorithm")),
        spec_num_steps=_int(si.get("speculative_num_steps")),
        avg_spec_accept_length=sum(lengths) / len(lengths) if lengths else None,
    )
