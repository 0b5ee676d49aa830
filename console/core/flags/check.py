"""Validate a flag set the way the server's argparse will read it, before anything starts.

:func:`validate` mirrors argparse's own reading (Python 3.11): every token is first
classified as an option or a value (an ambiguous prefix anywhere is fatal, exactly like
``ambiguous option: --cuda-graph-max-bs could match ...``), then options consume values by
their ``nargs``. On top it reports what argparse lets through but an operator should hear
about: abbreviations, renamed and deprecated flags, duplicates. :func:`resolve` and
:func:`diff_flags` use the same reading to turn argv into ``{canonical name: value}``.
"""

from __future__ import annotations

import difflib
import re

from console.core.flags.argv import Occurrence, Resolved, resolve_argv
from console.core.flags.models import Flag, FlagSchema, Problem
from console.core.flags.renames import Rename, find_rename
from console.host.hostsecrets import (  # the one shipped list of secret flags
    SECRET_FLAGS,
    mask_text,
)

__all__ = ["SECRET_FLAGS", "Value", "argparse_error", "diff_flags", "redact", "resolve", "validate"]

Value = str | bool | list[str]


def redact(text: str) -> str:
    """Replace secrets (``hf_...``/``sk-...`` tokens, secret-flag values) in ``text`` with ``***``."""
    return mask_text(text)


def _shown(value: str, flag: str | None) -> str:
    """``value`` as a message may show it: hidden entirely for secret-looking flags."""
    if flag in SECRET_FLAGS or (flag and _SECRET_NAME.search(flag)):
        return "***"
    return redact(value)


_SECRET_NAME = re.compile(r"key|token|passw|secret", re.IGNORECASE)


def _masked_argv(argv: list[str]) -> list[str]:
    """argv with the value of every secret-looking option replaced, for messages built from tokens."""
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next and not a.startswith("--"):
            out.append("***")
            hide_next = False
            continue
        hide_next = False
        name, eq, _ = a.partition("=")
        if a.startswith("--") and _SECRET_NAME.search(name):
            if eq:
                out.append(f"{name}=***")
            else:
                out.append(a)
                hide_next = True
            continue
        out.append(redact(a))
    return out


def _scan(argv: list[str], schema: FlagSchema, version: str | None) -> tuple[Resolved, list[Problem]]:
    """Resolve argv like argparse (:func:`resolve_argv`); turn what it met into problems for an operator."""
    argv = [str(a) for a in argv]
    shown_argv = _masked_argv(argv)
    res = resolve_argv(argv, schema)
    where = f"sglang {version}" if version else "this server"
    problems: list[Problem] = []
    for occ in res.occurrences:
        if occ.flag is None:
            rename = find_rename(occ.typed, schema)
            target = schema.get(rename.new) if rename else None
            if occ.ambiguous:
                problems.append(_ambiguous(occ, shown_argv[occ.index], rename))
            elif rename and target is not None:
                problems.append(_renamed(occ, rename, where))
                if not rename.value:  # the value is read the way the new flag will read it
                    again = resolve_argv([target.name, *occ.values], schema)
                    problems += [Problem(kind=e.kind, flag=target.name, message=redact(e.message))
                                 for e in again.errors if e.kind in ("bad_choice", "bad_type", "missing_value")]
            else:
                problems.append(_unknown(occ, schema))
            continue
        f = occ.flag
        if occ.abbreviated:
            problems.append(Problem(
                kind="ambiguous", flag=f.name, severity="warning", suggestion=occ.option,
                message=f"{occ.typed} is an abbreviation of {occ.option}; argparse accepts it, but a new "
                        f"flag with the same prefix makes it an error — write {occ.option}"))
        if f.deprecated:
            problems.append(Problem(
                kind="deprecated", flag=f.name, severity="warning", suggestion=_deprecation_hint(f),
                message=f"{f.name} is deprecated in {where}" + (f": {f.help[:300]}" if f.help else "")))
        rename = find_rename(occ.option or "", schema)
        if rename is not None and rename.old == occ.option and rename.new in schema:
            problems.append(Problem(
                kind="renamed", flag=occ.option, severity="warning", suggestion=rename.replacement,
                message=f"{occ.option} still works in {where} but was renamed {rename.replacement} "
                        f"(old name gone in sglang {rename.old_removed_in})"))
    for e in res.errors:
        if e.kind in ("ambiguous", "unknown"):
            continue  # per occurrence above; stray values below
        ef = e.flag
        if e.kind == "missing_required":
            has_config = res.given("--config")
            problems.append(Problem(
                kind="missing_required", flag=ef.name if ef else None, severity="warning" if has_config else "error",
                message=e.message.replace("the following arguments are required: ", "")
                + " is required" + (" (unless the --config file sets it)" if has_config else "")))
            continue
        name = ef.name if ef else None
        message = e.message if not (name and _shown("x", name) == "***") else f"argument {name}: bad value (hidden)"
        suggestion = None
        if e.kind == "bad_choice" and ef is not None and ef.choices:
            value = next((o.values[-1] for o in res.occurrences if o.index == e.index and o.values), "")
            close = difflib.get_close_matches(value, ef.choices, n=1)
            suggestion = close[0] if close else None
        problems.append(Problem(kind=e.kind, flag=name, message=redact(message), suggestion=suggestion,
                                candidates=list(ef.choices or []) if e.kind == "bad_choice" and ef else []))
    covered = {o.index + k for o in res.occurrences if o.flag is None
               for k in range(1 if o.explicit else len(o.values) + 1)}
    stray = [i for i, a in enumerate(argv) if a in res.extras and i not in covered]
    if stray:
        shown = " ".join(shown_argv[i] for i in stray)
        problems.append(Problem(kind="unknown", flag=None,
                                message=f"unrecognized arguments: {shown} (values without a flag)"))
    problems.extend(_duplicates(res.occurrences))
    return res, problems


def _ambiguous(occ: Occurrence, shown_token: str, rename: Rename | None) -> Problem:
    msg = f"ambiguous option: {shown_token} could match {', '.join(occ.ambiguous)}"
    if rename is not None:
        msg += f" ({occ.typed} was renamed {rename.replacement} in sglang {rename.new_since})"
    return Problem(kind="ambiguous", flag=redact(occ.typed), message=msg,
                   suggestion=rename.replacement if rename else None, candidates=list(occ.ambiguous))


def _renamed(occ: Occurrence, rename: Rename, where: str) -> Problem:
    note = f"; {rename.note}" if rename.note else ""
    return Problem(
        kind="renamed", flag=occ.typed, suggestion=rename.replacement, candidates=[rename.new],
        message=f"{occ.typed} was renamed {rename.replacement} (new name since sglang {rename.new_since}, "
                f"old name gone in {rename.old_removed_in}){note}; {where} rejects the old name")


def _unknown(occ: Occurrence, schema: FlagSchema) -> Problem:
    typed = occ.typed
    close = difflib.get_close_matches(typed, schema.option_strings(), n=3, cutoff=0.6)
    rest = (" " + " ".join(_shown(v, typed) for v in occ.values)) if occ.values else ""
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return Problem(kind="unknown", flag=redact(typed), suggestion=close[0] if close else None, candidates=close,
                   message=f"unrecognized argument: {redact(typed)}{rest}{hint}")


def _duplicates(occurrences: list[Occurrence]) -> list[Problem]:
    out: list[Problem] = []
    seen: dict[str, Occurrence] = {}
    for it in occurrences:
        if it.flag is None or it.flag.action_kind in ("append", "append_const", "count"):
            continue
        key = it.flag.name
        prev = seen.get(key)
        if prev is not None:
            spelled = prev.typed if prev.typed == it.typed else f"{key} ({prev.typed}, {it.typed})"
            conflict = prev.negated != it.negated
            out.append(Problem(
                kind="duplicate", flag=key, severity="warning",
                message=(f"{prev.typed} and {it.typed} contradict each other; the last one wins"
                         if conflict else f"{spelled} is given more than once; the last one wins")))
        seen[key] = it
    return out


def _deprecation_hint(f: Flag) -> str | None:
    m = re.search(r"\buse (--(?:\{[^}\s]*\}|[^\s,;)])+)", f.help, re.IGNORECASE)
    return m.group(1).rstrip(".,") if m else None


def validate(argv: list[str], schema: FlagSchema, *, version: str | None = None) -> list[Problem]:
    """Every problem the server's argparse (and an operator) would have with ``argv``.

    ``argv`` is the flags only (no ``python -m sglang.launch_server``). ``version`` (else
    ``schema.version``) is only used in messages. Errors are what makes argparse exit 2
    (or SGLang reject the flag); warnings are accepted but worth fixing.
    """
    return _scan(list(argv), schema, version or schema.version)[1]


def argparse_error(argv: list[str], schema: FlagSchema) -> str | None:
    """The line the server's argparse would end with (``sglang serve: error: ...``), None when it accepts argv."""
    line = resolve_argv([str(a) for a in argv], schema).error_line()
    return redact(" ".join(_masked_argv(line.split(" ")))) if line else None


def resolve(argv: list[str], schema: FlagSchema) -> dict[str, Value]:
    """``{canonical name: value as typed}`` as the server would see it; the last occurrence wins.

    Aliases and abbreviations map to the canonical name (``--model`` -> ``--model-path``).
    A switch is ``True`` (``False`` for ``--no-x``), a one-value flag a string, a multi-value
    flag a list. Unknown, ambiguous and renamed flags stay keyed as typed, so nothing the
    operator wrote disappears; a flag without its value is left out.
    """
    out: dict[str, Value] = {}
    res = resolve_argv([str(a) for a in argv], schema)
    for occ, (name, value) in zip(res.occurrences, res.pairs()):
        if occ.flag is None and not occ.values and not occ.ambiguous:
            rename = find_rename(occ.typed, schema)
            if rename is not None and rename.value:  # an old switch that became a value of another flag
                value = rename.value
        if value is None:
            if occ.flag is None or occ.flag.argparse_nargs != "?":
                continue
            value = True  # an optional value left out: the flag's const
        out[name] = value
    return out


def diff_flags(old_argv: list[str], new_argv: list[str], schema: FlagSchema) -> list[tuple[str, Value | None, Value | None]]:
    """``(flag, old value, new value)`` for every flag that differs; None where absent.

    Spelling differences that the server reads the same (``--model`` vs ``--model-path``)
    are not differences. Order: flags of the old set first, then new ones.
    """
    old, new = resolve(old_argv, schema), resolve(new_argv, schema)
    out: list[tuple[str, Value | None, Value | None]] = []
    for key in [*old, *(k for k in new if k not in old)]:
        a, b = old.get(key), new.get(key)
        if a != b:
            out.append((key, a, b))
    return out
