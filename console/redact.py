"""Redaction of secrets in anything the console echoes: audit log, --json output, UI text."""

from __future__ import annotations

import re
from typing import Any

SECRET_FLAGS = ("--api-key", "--admin-api-key", "--hf-token", "--token", "--ssl-keyfile-password")
SECRET_ENV_HINTS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
_PATTERNS = [
    (re.compile(r"\bhf_[A-Za-z0-9]{6,}"), "hf_***"),
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{6,}"), r"\1***"),
    (re.compile(r"(--(?:(?:admin-)?api-key|hf-token|token|ssl-keyfile-password)[= ])\S+"), r"\1***"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), "sk-***"),
    # SGLang's start-up dump: server_args=ServerArgs(..., api_key='VALUE', admin_api_key=None, ...)
    (re.compile(r"\b((?:admin_)?api_key|ssl_keyfile_password|hf_token)=(['\"])(?:(?!\2).)+\2"), r"\1=\2***\2"),
]


# One cheap scan decides whether any pattern can match (most log lines carry no secret).
_MAYBE = re.compile(r"hf_|(?i:bearer)|api-key|api_key|hf-token|hf_token|--token|sk-|keyfile.password")


def redact_text(text: str) -> str:
    """Mask tokens (hf_..., Bearer ..., --api-key VALUE, sk-...) in free text."""
    if not _MAYBE.search(text):
        return text
    for rx, rep in _PATTERNS:
        text = rx.sub(rep, text)
    return text


def redact_argv(argv: list[str]) -> list[str]:
    """Mask the value following (or attached to) a secret flag, and tokens anywhere."""
    out, hide = [], False
    for a in argv:
        if hide:
            out.append("***")
            hide = False
            continue
        name = a.split("=", 1)[0]
        if name in SECRET_FLAGS:
            if "=" in a:
                out.append(f"{name}=***")
            else:
                out.append(a)
                hide = True
            continue
        out.append(redact_text(a))
    return out


def redact_obj(obj: Any) -> Any:
    """Recursively redact a JSON-like object; env dicts keep their names but lose values."""
    if isinstance(obj, dict):
        out = {}
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
