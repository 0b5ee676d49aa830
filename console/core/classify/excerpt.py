"""The lines to show with a failure: the log's tail without an argparse usage dump."""

from __future__ import annotations

import re
from collections.abc import Sequence

from console.core.classify.lines import read_line
from console.core.classify.patterns import ARGPARSE_ERROR, USAGE_START

_USAGE_CONTINUATION = re.compile(r"^\s+(?:\[-{1,2}[\w-]+|-{1,2}[\w-]+ [A-Z_{])")
"""An argparse usage line whose ``usage:`` start is no longer in the buffer."""


def failure_tail(lines: Sequence[str], n: int = 30) -> list[str]:
    """The last ``n`` lines, with any argparse usage block (``usage: ...`` up to its ``error:``
    line, ~470 lines for SGLang) replaced by one line saying how many lines were left out."""
    out: list[str] = []
    usage: list[str] = []
    for raw in lines:
        body = read_line(raw).body
        if usage:
            if ARGPARSE_ERROR.match(body):
                out.append(f"[{len(usage)} lines of usage left out]")
                usage = []
                out.append(raw)
            else:
                usage.append(raw)
            continue
        if USAGE_START.match(body) or (not out and _USAGE_CONTINUATION.match(raw)):
            usage.append(raw)
            continue
        out.append(raw)
    out.extend(usage)  # a usage dump not followed by an error: keep it as it is
    return out[-n:] if n > 0 else []
