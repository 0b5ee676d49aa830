"""Which flags the launch form shows first, and searching the rest."""

from __future__ import annotations

from console.core.flags.models import Flag, FlagSchema

KEY_FLAGS: list[str] = [
    "--speculative-algorithm",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--mem-fraction-static",
    "--max-running-requests",
    "--context-length",
    "--enable-hierarchical-cache",
    "--hicache-size",
    "--mamba-radix-cache-strategy",
    "--tp-size",
    "--port",
    "--model-path",
]
"""Flags the UI's flag form shows first (SGLang 0.5.23 names)."""


def key_flags(schema: FlagSchema) -> list[Flag]:
    """The :data:`KEY_FLAGS` this schema knows, in that order (by name or alias)."""
    out: list[Flag] = []
    for name in KEY_FLAGS:
        f = schema.get(name)
        if f is not None and f not in out:
            out.append(f)
    return out


def search(schema: FlagSchema, query: str, *, limit: int | None = None) -> list[Flag]:
    """Flags matching every word of ``query`` (case-insensitive) in a name, alias or help.

    Ranked: exact name, then name prefix, then words in the name, then words only in the
    help; ties keep help order. An empty query returns every flag.
    """
    words = [w for w in query.lower().split() if w]
    if not words:
        return list(schema.flags)[:limit]
    q = query.strip().lower()
    qflag = q if q.startswith("-") else "--" + q
    ranked: list[tuple[int, int, Flag]] = []
    for i, f in enumerate(schema.flags):
        names = [s.lower() for s in f.option_strings]
        name_text = " ".join(names)
        text = name_text + " " + f.help.lower()
        if not all(w in text for w in words):
            continue
        if q in names or qflag in names:
            rank = 0
        elif any(n.startswith(qflag) for n in names):
            rank = 1
        elif all(w in name_text for w in words):
            rank = 2
        else:
            rank = 3
        ranked.append((rank, i, f))
    ranked.sort(key=lambda t: (t[0], t[1]))
    return [f for _, _, f in ranked][:limit]
