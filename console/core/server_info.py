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

from console.model import PROBE_EVERY_S as PROBE_EVERY_S  # re-exported: the one definition is the model's
from console.model import ServerFacts

SERVER_INFO_PATH = "/server_info"
MODEL_INFO_PATH = "/model_info"
DEPRECATED_PATHS = ("/get_server_info", "/get_model_info")
"""Never called by the console (tests assert it on the stand-in's log)."""


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


def age_text(age_s: float) -> str:
    """A fact's age, terse: ``12s``, ``4m``, ``2h``, ``3d``."""
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if age_s >= n:
            return f"{int(age_s // n)}{unit}"
    return f"{int(age_s)}s"


def facts_text(f: ServerFacts) -> str | None:
    """The facts in one terse line without their age (``sglang 0.5.23 · EAGLE 3 steps · accept 2.41``); None
    when the server offered none of them."""
    parts = [f"sglang {f.version}"] if f.version else []
    steps = f"{f.spec_num_steps} steps" if f.spec_num_steps is not None else None
    spec = " ".join(x for x in (f.speculative_algorithm, steps) if x)
    if spec:
        parts.append(spec)
    if f.avg_spec_accept_length is not None:
        parts.append(f"accept {f.avg_spec_accept_length:.2f}")
    return " · ".join(parts) if f.offered and parts else None


def facts_line(f: ServerFacts | None, now: float) -> str | None:
    """:func:`facts_text` with the read's age, ``stale`` past three probe periods
    (``sglang 0.5.23 · EAGLE 3 steps · accept 2.41 · 12s``); None when there is nothing to show."""
    text = facts_text(f) if f is not None else None
    if f is None or text is None:
        return None
    return f"{text} · {age_text(f.age(now))}" + (" stale" if f.stale(now) else "")
