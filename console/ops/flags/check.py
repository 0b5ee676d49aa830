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
from dataclasses import dataclass, field

from console.ops.flags.models import Flag, FlagSchema, Problem
from console.ops.flags.renames import Rename, find_rename
from console.remote.hostsecrets import (
    SECRET_FLAGS as SECRET_FLAGS,  # the one list, re-exported
)
from console.remote.hostsecrets import mask_text

Value = str | bool | list[str]

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def redact(text: str) -> str:
    """Replace secrets (``hf_...``/``sk-...`` tokens, secret-flag values) in ``text`` with ``***``."""
    return mask_text(text)


@dataclass
class _Tok:
    """One argv token as argparse classifies it."""

    text: str
    kind: str  # "A" value, "O" option, "--" separator
    flag: Flag | None = None
    option: str | None = None  # the option string as matched (full name for an abbreviation)
    typed: str | None = None  # the option part as typed (before '=')
    explicit: str | None = None
    abbreviated: bool = False
    matches: list[str] = field(default_factory=list)  # >1: ambiguous


@dataclass
class _Item:
    """One option occurrence after values were consumed."""

    key: str
    tok: _Tok
    values: list[str]
    flag: Flag | None
    negated: bool = False
    rename: Rename | None = None


def _classify(token: str, schema: FlagSchema, negative_like: bool) -> _Tok:
    if not token or token[0] != "-":
        return _Tok(token, "A")
    if token == "--":
        return _Tok(token, "--")
    f = schema.get(token)
    if f is not None:
        return _Tok(token, "O", f, token, token)
    if len(token) == 1:
        return _Tok(token, "A")
    if "=" in token:
        opt, val = token.split("=", 1)
        f = schema.get(opt)
        if f is not None:
            return _Tok(token, "O", f, opt, opt, val)
    matches: list[tuple[str, str | None]] = []
    if token.startswith("--"):
        prefix, _, explicit = token.partition("=")
        exp = explicit if "=" in token else None
        matches = [(s, exp) for s in schema.option_strings() if s.startswith(prefix)]
    else:
        for s in schema.option_strings():
            if s == token[:2]:
                matches.append((s, token[2:]))
            elif s.startswith(token):
                matches.append((s, None))
    typed = token.split("=", 1)[0]
    if len(matches) > 1:
        return _Tok(token, "O", None, None, typed, matches=[s for s, _ in matches])
    if len(matches) == 1:
        s, exp = matches[0]
        return _Tok(token, "O", schema.get(s), s, typed, exp, abbreviated=True)
    if _NEGATIVE_NUMBER.match(token) and not negative_like:
        return _Tok(token, "A")
    if " " in token:
        return _Tok(token, "A")
    explicit = token.split("=", 1)[1] if "=" in token else None
    return _Tok(token, "O", None, None, typed, explicit)


_SECRET_NAME = re.compile(r"key|token|passw|secret", re.IGNORECASE)


def _shown(value: str, flag: str | None) -> str:
    """``value`` as a message may show it: hidden entirely for secret-looking flags."""
    if flag in SECRET_FLAGS or (flag and _SECRET_NAME.search(flag)):
        return "***"
    return redact(value)


def _scan(argv: list[str], schema: FlagSchema, version: str | None) -> tuple[list[_Item], list[Problem]]:
    """Read argv like argparse; return the option occurrences and the problems found."""
    argv = [str(a) for a in argv]
    negative_like = any(_NEGATIVE_NUMBER.match(s) for s in schema.option_strings())
    toks = [_classify(t, schema, negative_like) for t in argv]
    if "--" in argv:  # argparse: everything after '--' is a value
        cut = argv.index("--")
        toks = toks[:cut] + [_Tok("--", "--")] + [_Tok(t, "A") for t in argv[cut + 1:]]
    where = f"sglang {version}" if version else "this server"
    items: list[_Item] = []
    problems: list[Problem] = []
    stray: list[str] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        i += 1
        if tok.kind == "--":
            stray.extend(t.text for t in toks[i:])
            break
        if tok.kind == "A":
            stray.append(tok.text)
            continue
        following: list[str] = []
        while i + len(following) < len(toks) and toks[i + len(following)].kind == "A":
            following.append(toks[i + len(following)].text)

        if tok.flag is None:
            rename = find_rename(tok.typed or tok.text, schema)
            target = schema.get(rename.new) if rename else None
            if tok.matches:
                problems.append(_ambiguous(tok, rename))
            elif rename and target is not None:
                problems.append(_renamed(tok, rename, where))
            else:
                problems.append(_unknown(tok, following, schema))
            if target is not None and not tok.matches:
                if rename.value:  # an old switch replaced by a value of another flag
                    values, n = [rename.value], 0
                else:
                    values, n, bad = _take_values(target, tok, following)
                    problems.extend(bad)
                items.append(_Item(tok.typed or tok.text, tok, values, None, rename=rename))
                i += n
            else:
                values = ([tok.explicit] if tok.explicit is not None else []) + following
                items.append(_Item(tok.typed or tok.text, tok, values, None))
                i += len(following)
            continue

        f = tok.flag
        if tok.abbreviated:
            problems.append(Problem(
                kind="ambiguous", flag=f.name, severity="warning", suggestion=tok.option,
                message=f"{tok.typed} is an abbreviation of {tok.option}; argparse accepts it, but a new "
                        f"flag with the same prefix makes it an error — write {tok.option}"))
        if f.deprecated:
            problems.append(Problem(
                kind="deprecated", flag=f.name, severity="warning", suggestion=_deprecation_hint(f),
                message=f"{f.name} is deprecated in {where}" + (f": {f.help[:300]}" if f.help else "")))
        rename = find_rename(tok.option or "", schema)
        if rename is not None and rename.old == tok.option and rename.new in schema:
            problems.append(Problem(
                kind="renamed", flag=tok.option, severity="warning", suggestion=rename.replacement,
                message=f"{tok.option} still works in {where} but was renamed {rename.replacement} "
                        f"(old name gone in sglang {rename.old_removed_in})"))
        values, n, bad = _take_values(f, tok, following)
        problems.extend(bad)
        i += n
        items.append(_Item(f.name, tok, values, f, negated=f.negatable and (tok.option or "").startswith("--no-")))

    if stray:
        shown = " ".join(redact(s) for s in stray)
        problems.append(Problem(kind="unknown", flag=None,
                                message=f"unrecognized arguments: {shown} (values without a flag)"))
    problems.extend(_duplicates(items))
    given = {it.key for it in items} | {it.rename.new for it in items if it.rename}
    has_config = "--config" in given
    for f in schema.flags:
        if f.required and f.name not in given:
            problems.append(Problem(
                kind="missing_required", flag=f.name, severity="warning" if has_config else "error",
                message=f"{'/'.join(f.option_strings)} is required"
                        + (" (unless the --config file sets it)" if has_config else "")))
    return items, problems


def _take_values(f: Flag, tok: _Tok, following: list[str]) -> tuple[list[str], int, list[Problem]]:
    """The values ``f`` consumes, how many following tokens that is, and arity/value problems."""
    shown_opt = tok.option or f.name
    if tok.explicit is not None:
        if not f.takes_value:
            return [], 0, [Problem(kind="unexpected_value", flag=f.name,
                                   message=f"{shown_opt} takes no value (got '={_shown(tok.explicit, f.name)}')")]
        values, n = [tok.explicit], 0
    elif not f.takes_value:
        return [], 0, []
    else:
        nargs = f.nargs
        if nargs is None:
            values = following[:1]
            if not values:
                return [], 0, [Problem(kind="missing_value", flag=f.name,
                                       message=f"{shown_opt} expects one value ({f.metavar or 'VALUE'})")]
        elif nargs == "?":
            values = following[:1]
        elif nargs in ("*", "..."):
            values = list(following)
        elif nargs == "+":
            values = list(following)
            if not values:
                return [], 0, [Problem(kind="missing_value", flag=f.name,
                                       message=f"{shown_opt} expects at least one value")]
        else:
            count = int(nargs)
            values = following[:count]
            if len(values) < count:
                return [], len(values), [Problem(kind="missing_value", flag=f.name,
                                                 message=f"{shown_opt} expects {count} values")]
        n = len(values)
    return values, n, _check_values(f, values)


def _check_values(f: Flag, values: list[str]) -> list[Problem]:
    out: list[Problem] = []
    for v in values:
        if f.choices is not None and v not in f.choices:
            close = difflib.get_close_matches(v, f.choices, n=1)
            out.append(Problem(
                kind="bad_choice", flag=f.name, suggestion=close[0] if close else None, candidates=list(f.choices),
                message=f"{f.name}: invalid choice '{_shown(v, f.name)}' (choose from {', '.join(f.choices)})"))
        elif f.type == "int" and not _is_int(v):
            out.append(Problem(kind="bad_type", flag=f.name, message=f"{f.name} expects an integer, got '{_shown(v, f.name)}'"))
        elif f.type == "float" and not _is_float(v):
            out.append(Problem(kind="bad_type", flag=f.name, message=f"{f.name} expects a number, got '{_shown(v, f.name)}'"))
    return out


def _is_int(v: str) -> bool:
    try:
        int(v.strip())
        return True
    except ValueError:
        return False


def _is_float(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


def _ambiguous(tok: _Tok, rename: Rename | None) -> Problem:
    shown = tok.text
    if tok.explicit is not None and any(_shown("x", m) == "***" for m in tok.matches):
        shown = f"{tok.typed}=***"
    msg = f"ambiguous option: {redact(shown)} could match {', '.join(tok.matches)}"
    if rename is not None:
        msg += f" ({tok.typed} was renamed {rename.replacement} in sglang {rename.new_since})"
    return Problem(kind="ambiguous", flag=redact(tok.typed or tok.text), message=msg,
                   suggestion=rename.replacement if rename else None, candidates=list(tok.matches))


def _renamed(tok: _Tok, rename: Rename, where: str) -> Problem:
    note = f"; {rename.note}" if rename.note else ""
    return Problem(
        kind="renamed", flag=tok.typed, suggestion=rename.replacement, candidates=[rename.new],
        message=f"{tok.typed} was renamed {rename.replacement} (new name since sglang {rename.new_since}, "
                f"old name gone in {rename.old_removed_in}){note}; {where} rejects the old name")


def _unknown(tok: _Tok, following: list[str], schema: FlagSchema) -> Problem:
    typed = tok.typed or tok.text
    close = difflib.get_close_matches(typed, schema.option_strings(), n=3, cutoff=0.6)
    rest = (" " + " ".join(_shown(v, typed) for v in following)) if following else ""
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return Problem(kind="unknown", flag=redact(typed), suggestion=close[0] if close else None, candidates=close,
                   message=f"unrecognized argument: {redact(typed)}{rest}{hint}")


def _duplicates(items: list[_Item]) -> list[Problem]:
    out: list[Problem] = []
    seen: dict[str, _Item] = {}
    for it in items:
        prev = seen.get(it.key)
        if prev is not None and it.flag is not None:
            spelled = prev.tok.typed if prev.tok.typed == it.tok.typed else f"{it.key} ({prev.tok.typed}, {it.tok.typed})"
            conflict = prev.negated != it.negated
            out.append(Problem(
                kind="duplicate", flag=it.key, severity="warning",
                message=(f"{prev.tok.typed} and {it.tok.typed} contradict each other; the last one wins"
                         if conflict else f"{spelled} is given more than once; the last one wins")))
        seen[it.key] = it
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


def resolve(argv: list[str], schema: FlagSchema) -> dict[str, Value]:
    """``{canonical name: value}`` as the server would see it; the last occurrence wins.

    Aliases and abbreviations map to the canonical name (``--model`` -> ``--model-path``).
    A switch is ``True`` (``False`` for ``--no-x``), a one-value flag a string, a multi-value
    flag a list. Unknown, ambiguous and renamed flags stay keyed as typed, so nothing the
    operator wrote disappears; a flag without its value is left out.
    """
    out: dict[str, Value] = {}
    for it in _scan(list(argv), schema, None)[0]:
        f = it.flag
        if f is None:
            out[it.key] = True if not it.values else (it.values[0] if len(it.values) == 1 else list(it.values))
        elif not f.takes_value:
            out[it.key] = not it.negated
        elif f.nargs is None:
            if it.values:
                out[it.key] = it.values[0]
        elif f.nargs == "?":
            out[it.key] = it.values[0] if it.values else True
        else:
            out[it.key] = list(it.values)
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
