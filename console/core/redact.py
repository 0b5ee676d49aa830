"""Redaction of secrets in anything the console echoes: audit log, --json output, UI text."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from console.host.hostsecrets import (
    SECRET_FLAGS,
    TOKEN_PATTERNS,
    mask_argv,
    mask_text,
)

__all__ = ["SECRET_FLAGS", "SECRET_ENV_HINTS", "TOKEN_PATTERNS", "redact_argv", "redact_obj", "redact_text"]

SECRET_ENV_HINTS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
# The secret flags and token patterns have one definition, shipped to hosts too:
# console/host/hostsecrets.py (the supervisor masks its own log with the same code).


SCHEMA = Path(__file__).resolve().parent / "data" / "sglang-0.5.23-flags.json"
"""The bundled flag schema: its option strings decide which abbreviations argparse takes for a secret flag."""


@functools.lru_cache(maxsize=1)
def known_flags() -> frozenset[str]:
    """Every option string (flags and aliases) of the bundled schema; empty when it cannot be read (then
    the schema-less rule of ``hostsecrets.is_secret_flag`` applies, which masks more, never less)."""
    try:
        flags = json.loads(SCHEMA.read_text(encoding="utf-8"))
        return frozenset(n for f in flags for n in [f["flag"], *(f.get("aliases") or [])])
    except (OSError, ValueError, KeyError, TypeError):
        return frozenset()


def _known() -> frozenset[str] | None:
    return known_flags() or None


def redact_text(text: str) -> str:
    """Mask secrets in free text: secret-flag values (abbreviations argparse accepts included, in text
    and in argv dumped as JSON), SGLang's settings dump (``api_key='…'``, ``'api_key': '…'``), and tokens
    (``hf_…``, ``sk-…``, ``Bearer …``)."""
    return mask_text(text, _known())


def redact_argv(argv: list[str]) -> list[str]:
    """Mask the value following (or attached to) a secret flag or its abbreviation, and tokens anywhere."""
    return mask_argv(argv, _known())


def redact_obj(obj: Any) -> Any:
    """Recursively redact a JSON-like object; env dicts keep their names but lose values."""
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if k == "env" and isinstance(v, dict):
                out[k] = {name: "***" for name in v}
            elif k in ("argv", "flags", "command") and isinstance(v, list) and all(isinstance(x, str) for x in v):
                out[k] = redact_argv(v)
            else:
                out[k] = redact_obj(v)
        return out
    if isinstance(obj, list):
        return [redact_obj(x) for x in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj
