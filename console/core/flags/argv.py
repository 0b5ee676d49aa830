"""The one argv resolver: read server flags exactly the way the host's argparse reads them.

:func:`resolve_argv` replays CPython 3.11's ``ArgumentParser.parse_args`` over a
:class:`~console.core.flags.models.FlagSchema` (learned from the host, else the bundled 0.5.23
schema): every token is first classified as an option or a value (an unknown ``--x`` stays an
option, an ambiguous prefix is fatal), then options consume values by their ``nargs``, values
are converted (int, float, JSON) and checked against choices, required options are checked,
and what is left over is unrecognized. The result holds ``dest -> value`` for every option
given (last one wins, append accumulates, ``--no-x`` stores False) and the errors in the order
argparse meets them: ``errors[0]`` is the exact message argparse prints after
``<prog>: error:``. Unlike argparse it goes on after an error, so every problem is reported
and every flag it could read is resolved.

Everything that reads server flags (the planner, the session views, the flag form, the
validator) goes through here; nothing else splits argv.

Longer than ~400 lines on purpose: it replays argparse's own parsing algorithm (option matching,
nargs patterns, error messages), which reads and is checked best as one unit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any

from console.core.flags.launcher import split_launch_command
from console.core.flags.models import Flag, FlagSchema, ProblemKind

NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
"""argparse's ``_negative_number_matcher``."""

RawValue = str | bool | list[str] | None
"""A value as typed: a string, a list for multi-value flags, a bool for switches, None for ``nargs='?'`` alone."""


@dataclass(frozen=True)
class ArgvError:
    """One error argparse (or the resolver going on after it) meets; ``message`` is argparse's text."""

    kind: ProblemKind
    message: str
    flag: Flag | None = None
    typed: str | None = None
    index: int | None = None
    candidates: tuple[str, ...] = ()


@dataclass(frozen=True)
class Occurrence:
    """One option as given: which flag (None when unknown or ambiguous), how it was typed, its values."""

    index: int
    typed: str
    option: str | None
    flag: Flag | None
    values: tuple[str, ...]
    explicit: bool = False
    abbreviated: bool = False
    ambiguous: tuple[str, ...] = ()

    @property
    def negated(self) -> bool:
        """``--no-x`` of a BooleanOptionalAction."""
        return self.flag is not None and self.flag.action_kind == "boolean_optional" \
            and (self.option or "").startswith("--no-")


@dataclass
class Resolved:
    """What the server's argparse makes of an argv."""

    values: dict[str, Any] = field(default_factory=dict)
    """dest -> converted value, for every option given (argparse's namespace without defaults)."""
    raw: dict[str, RawValue] = field(default_factory=dict)
    """dest -> the value as typed (strings), same keys as ``values``."""
    occurrences: list[Occurrence] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)
    """The tokens argparse calls unrecognized, in its order."""
    errors: list[ArgvError] = field(default_factory=list)
    help_requested: bool = False
    schema: FlagSchema | None = None

    @property
    def ok(self) -> bool:
        """True when argparse accepts the argv."""
        return not self.errors

    @property
    def error(self) -> str | None:
        """argparse's own message (after ``prog: error:``), None when it accepts the argv."""
        return self.errors[0].message if self.errors else None

    def error_line(self) -> str | None:
        """The line argparse prints last: ``sglang serve: error: ...``."""
        if not self.errors:
            return None
        prog = (self.schema.prog if self.schema else None) or "server"
        return f"{prog}: error: {self.errors[0].message}"

    def get(self, option: str, default: Any = None) -> Any:
        """The resolved value of an option named by any of its spellings (``--tp`` style names too)."""
        dest = self.dest_of(option)
        return self.values.get(dest, default) if dest is not None else default

    def get_raw(self, option: str) -> RawValue:
        """The value as typed of ``option`` (by name, alias or dest), or of an unknown option spelled so."""
        dest = self.dest_of(option)
        if dest is not None and dest in self.raw:
            return self.raw[dest]
        for occ in reversed(self.occurrences):
            if occ.flag is None and occ.typed == option:
                return occ.values[-1] if occ.values else True
        return None

    def given(self, option: str) -> bool:
        """True when ``option`` (any spelling) was given."""
        dest = self.dest_of(option)
        if dest is not None and dest in self.raw:
            return True
        return any(o.flag is None and o.typed == option for o in self.occurrences)

    def dest_of(self, option: str) -> str | None:
        """The dest of ``option`` (name, alias, unique prefix, or a dest itself)."""
        if self.schema is None:
            return None
        f = self.schema.get(option)
        if f is None and option.startswith("--"):
            found = [self.schema.get(s) for s in self.schema.option_strings() if s.startswith(option)]
            names = {g.name for g in found if g is not None}
            f = found[0] if len(names) == 1 else None
        if f is not None:
            return f.dest_name
        if not option.startswith("-") and self.schema.by_dest(option) is not None:
            return option
        return None

    def pairs(self) -> list[tuple[str, RawValue]]:
        """(canonical option, value as typed) per occurrence, in order; unknown options as typed."""
        out: list[tuple[str, RawValue]] = []
        for occ in self.occurrences:
            name = occ.flag.name if occ.flag is not None else occ.typed
            out.append((name, _raw_of(occ)))
        return out


def _raw_of(occ: Occurrence) -> RawValue:
    f = occ.flag
    if f is None:
        return occ.values[-1] if len(occ.values) == 1 else (list(occ.values) if occ.values else True)
    kind = f.action_kind
    if kind in ("store_true", "boolean_optional", "store_false", "store_const", "count", "append_const"):
        return not occ.negated if kind != "store_false" else False
    n = f.argparse_nargs
    if n is None:
        return occ.values[0] if occ.values else None
    if n == "?":
        return occ.values[0] if occ.values else None
    return list(occ.values)


class _Fail(Exception):
    def __init__(self, kind: ProblemKind, message: str) -> None:
        super().__init__(message)
        self.kind: ProblemKind = kind
        self.message = message


def _action_name(f: Flag) -> str:
    return "/".join(f.option_strings)


_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")


def _human_readable_int(text: str) -> int:
    """SGLang's ``human_readable_int`` (``128k``, ``1Mi``), with its own error texts."""
    value = text.strip()
    m = _HUMAN.fullmatch(value)
    if m:
        number, suffix = m.groups()
        if suffix in _IEC:
            if "." in number:
                raise _Fail("bad_type", f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                                        f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                                        f"or an SI value such as '{number}{suffix[0]}'.")
            return int(number) * _IEC[suffix]
        return int(Decimal(number) * _SI[suffix])
    try:
        return int(value)
    except ValueError:
        raise _Fail("bad_type", f"Invalid integer value: '{value}'. Use a plain integer, SI suffixes (1k, 1M), "
                                "or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive.") from None


def _json_list_type(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise _Fail("bad_type", f"Invalid JSON list: {text}. Please provide a valid JSON list.") from None


def _cuda_graph_backend(text: str) -> str:
    if text == "tc_piecewise":
        raise _Fail("bad_type", "tc_piecewise was removed; select breakable, full, or disabled")
    return text


_SERVER_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "human_readable_int": _human_readable_int,
    "json_list_type": _json_list_type,
    "parse_cuda_graph_backend_arg": _cuda_graph_backend,
    "nullable_str": lambda t: None if not t or t == "None" else t,
}
"""SGLang's own argparse ``type=`` functions (sglang 0.5.23), replayed with their messages."""


def _convert(f: Flag, text: str) -> Any:
    """argparse's ``_get_value`` for the converters the schema knows; unknown converters pass text."""
    name = f.type_name or {"int": "int", "float": "float", "json": "loads"}.get(f.type or "")
    special = _SERVER_CONVERTERS.get(name or "")
    if special is not None:
        return special(text)
    try:
        if name == "int":
            return int(text)
        if name == "float":
            return float(text)
        if name == "loads":
            return json.loads(text)
    except (TypeError, ValueError):
        raise _Fail("bad_type", f"invalid {name} value: {text!r}") from None
    return text


def _check_choice(f: Flag, value: Any) -> None:
    if f.choices is None:
        return
    choices: list[Any] = list(f.choices)
    if isinstance(value, int) and not isinstance(value, bool):
        choices = [_maybe_int(c) for c in choices]
    if value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise _Fail("bad_choice", f"invalid choice: {value!r} (choose from {listed})")


def _maybe_int(c: str) -> Any:
    try:
        return int(c)
    except ValueError:
        return c


_NARGS_PATTERN = {None: "(A)", "?": "(A?)", "*": "(A*)", "+": "(AA*)", "...": "([AO]*)"}


def _match(nargs: str | int | None, pattern: str) -> int:
    """argparse's ``_match_argument`` for an optional: how many values it takes, or why not."""
    if isinstance(nargs, int):
        regex = "(%s)" % ("A" * nargs)
    else:
        regex = _NARGS_PATTERN.get(nargs, "(A)")
    m = re.match(regex, pattern)
    if m is None:
        msg = {None: "expected one argument", "?": "expected at most one argument",
               "+": "expected at least one argument"}.get(nargs if not isinstance(nargs, int) else "n")
        if msg is None:
            msg = f"expected {nargs} argument" + ("" if nargs == 1 else "s")
        raise _Fail("missing_value", msg)
    return len(m.group(1))


class _Parser:
    def __init__(self, schema: FlagSchema) -> None:
        self.schema = schema
        self.strings = schema.option_strings()
        self.negative_like = any(NEGATIVE_NUMBER.match(s) for s in self.strings)

    def parse_optional(self, arg: str) -> tuple[Flag | None, str, str | None, list[str]] | None:
        """argparse's ``_parse_optional``: None for a value, else (flag, option, explicit, ambiguous matches)."""
        if not arg or arg[0] != "-":
            return None
        f = self.schema.get(arg)
        if f is not None:
            return f, arg, None, []
        if len(arg) == 1:
            return None
        if "=" in arg:
            opt, explicit = arg.split("=", 1)
            f = self.schema.get(opt)
            if f is not None:
                return f, opt, explicit, []
        tuples = self.option_tuples(arg)
        if len(tuples) > 1:
            return None, arg, None, [s for s, _ in tuples]
        if len(tuples) == 1:
            s, explicit2 = tuples[0]
            return self.schema.get(s), s, explicit2, []
        if NEGATIVE_NUMBER.match(arg) and not self.negative_like:
            return None
        if " " in arg:
            return None
        return None, arg, None, []

    def option_tuples(self, arg: str) -> list[tuple[str, str | None]]:
        out: list[tuple[str, str | None]] = []
        if arg[1] == "-":
            prefix, eq, explicit = arg.partition("=")
            for s in self.strings:
                if s.startswith(prefix):
                    out.append((s, explicit if eq else None))
        else:
            short, short_explicit = arg[:2], arg[2:]
            for s in self.strings:
                if s == short:
                    out.append((s, short_explicit))
                elif s.startswith(arg):
                    out.append((s, None))
        return out


def resolve_argv(argv: list[str], schema: FlagSchema) -> Resolved:
    """Resolve ``argv`` (flags only, no launcher) against ``schema`` the way argparse does.

    See the module docstring. Never raises for bad input: problems are in ``errors``.
    """
    args = [str(a) for a in argv]
    p = _Parser(schema)
    res = Resolved(schema=schema)
    early: list[ArgvError] = []  # ambiguous options: argparse stops while classifying
    consume: list[ArgvError] = []  # errors met while consuming, in argv order
    optionals: dict[int, tuple[Flag | None, str, str | None, list[str]]] = {}
    pattern: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            pattern.append("-")
            pattern.extend("A" * (len(args) - i - 1))
            break
        t = p.parse_optional(a)
        if t is None:
            pattern.append("A")
        else:
            optionals[i] = t
            pattern.append("O")
            if t[3]:
                early.append(ArgvError(
                    "ambiguous", f"ambiguous option: {a} could match {', '.join(t[3])}", typed=a.split("=", 1)[0],
                    index=i, candidates=tuple(t[3])))
        i += 1
    pat = "".join(pattern)
    seen: set[str] = set()

    def take(f: Flag, option: str, values: list[str], index: int, typed: str, explicit: bool, abbreviated: bool) -> None:
        vals = list(values)
        if f.argparse_nargs != "..." and "--" in vals:
            vals.remove("--")
        occ = Occurrence(index, typed, option, f, tuple(vals), explicit, abbreviated)
        res.occurrences.append(occ)
        seen.add(f.dest_name)
        kind = f.action_kind
        dest = f.dest_name
        if kind == "help":
            res.help_requested = True
            return
        if kind in ("store_true", "store_false", "boolean_optional", "store_const", "count", "append_const"):
            if kind == "count":
                res.values[dest] = int(res.values.get(dest) or 0) + 1
            elif kind == "store_const":
                res.values[dest] = f.const
            elif kind == "append_const":
                res.values.setdefault(dest, []).append(f.const)
            else:
                res.values[dest] = (kind != "store_false") and not occ.negated
            res.raw[dest] = _raw_of(occ)
            return
        n = f.argparse_nargs
        try:
            if not vals and n == "?":
                value: Any = f.const
            elif len(vals) == 1 and n in (None, "?"):
                value = _convert(f, vals[0])
                _check_choice(f, value)
            else:
                value = [_convert(f, v) for v in vals]
                for v in value:
                    _check_choice(f, v)
        except _Fail as e:
            consume.append(ArgvError(e.kind, f"argument {_action_name(f)}: {e.message}", f, typed, index))
            return
        if kind == "append":
            res.values.setdefault(dest, []).append(value)
            prev = res.raw.get(dest)
            res.raw[dest] = [*(prev if isinstance(prev, list) else []), *vals]
        else:
            res.values[dest] = value
            res.raw[dest] = _raw_of(occ)

    def consume_optional(start: int) -> int:
        f, option, explicit, ambiguous = optionals[start]
        token = args[start]
        typed = token.split("=", 1)[0] if token.startswith("--") else token
        if f is None:
            if not ambiguous:
                res.extras.append(token)
            if "=" in token and token.startswith("--"):  # --unknown=v: its value is part of the token
                res.occurrences.append(Occurrence(start, typed, None, None, (token.split("=", 1)[1],), True,
                                                  ambiguous=tuple(ambiguous)))
                return start + 1
            j = start + 1
            vals: list[str] = []
            while j < len(args) and pat[j] == "A":
                vals.append(args[j])
                j += 1
            res.occurrences.append(Occurrence(start, typed, None, None, tuple(vals), ambiguous=tuple(ambiguous)))
            if ambiguous:
                return j  # argparse stopped already; its values are not "unrecognized" as well
            return start + 1
        abbreviated = typed.startswith("--") and option != typed
        n = f.argparse_nargs
        if explicit is not None:
            count = 0 if n == 0 else _safe_match(n, "A")
            if count == 1:
                take(f, option, [explicit], start, typed, True, abbreviated)
            elif n == 0 and option[1] != "-" and explicit != "":
                # combined short switches (-vx): not used by the servers we know; read as argparse would
                take(f, option, [], start, typed, False, abbreviated)
                consume.append(ArgvError("unexpected_value", f"argument {_action_name(f)}: ignored explicit "
                                         f"argument {explicit!r}", f, typed, start))
            else:
                seen.add(f.dest_name)
                res.occurrences.append(Occurrence(start, typed, option, f, (explicit,), True, abbreviated))
                consume.append(ArgvError("unexpected_value", f"argument {_action_name(f)}: ignored explicit "
                                         f"argument {explicit!r}", f, typed, start))
            return start + 1
        try:
            count = _match(n, pat[start + 1:])
        except _Fail as e:
            seen.add(f.dest_name)  # given, if wrongly: not also "required"
            res.occurrences.append(Occurrence(start, typed, option, f, (), False, abbreviated))
            consume.append(ArgvError(e.kind, f"argument {_action_name(f)}: {e.message}", f, typed, start))
            return start + 1 + _count_values(pat, start + 1)
        take(f, option, args[start + 1:start + 1 + count], start, typed, False, abbreviated)
        return start + 1 + count

    start = 0
    last = max(optionals) if optionals else -1
    while start <= last:
        nxt = min(k for k in optionals if k >= start)
        if start != nxt:
            res.extras.extend(a for a in args[start:nxt])
            start = nxt
        start = consume_optional(start)
    res.extras.extend(args[start:])  # argparse keeps a '--' separator among the extras too
    required = [f for f in schema.flags if f.required and f.dest_name not in seen]
    late: list[ArgvError] = []
    if required and not res.help_requested:
        late.append(ArgvError("missing_required", "the following arguments are required: "
                              + ", ".join(_action_name(f) for f in required), required[0]))
    if res.extras:
        late.append(ArgvError("unknown", "unrecognized arguments: " + " ".join(res.extras)))
    res.errors = [*early, *consume, *late]
    if res.help_requested and not early and not _help_first_error(consume, res):
        res.errors = []
    return res


def _help_first_error(consume: list[ArgvError], res: Resolved) -> bool:
    """True when a consume error comes before ``-h`` (argparse stops at the first of the two)."""
    help_at = next((o.index for o in res.occurrences if o.flag is not None and o.flag.action_kind == "help"), None)
    return any(e.index is not None and help_at is not None and e.index < help_at for e in consume)


def _safe_match(n: str | int | None, pattern: str) -> int:
    try:
        return _match(n, pattern)
    except _Fail:
        return -1


def _count_values(pat: str, start: int) -> int:
    j = start
    while j < len(pat) and pat[j] == "A":
        j += 1
    return j - start


@lru_cache(maxsize=512)
def _resolve_cmdline_cached(argv: tuple[str, ...]) -> Resolved:
    from console.core.flags.sources import bundled_schema

    return resolve_argv(split_launch_command(argv).flags, bundled_schema())


def resolve_cmdline(argv: list[str], schema: FlagSchema | None = None) -> Resolved:
    """Resolve a whole server command line (launcher split off) against ``schema``, else the bundled one.

    For views that read a running server's flags; results for the bundled schema are cached
    (treat them as read-only).
    """
    if schema is None:
        return _resolve_cmdline_cached(tuple(str(a) for a in argv))
    return resolve_argv(split_launch_command(argv).flags, schema)


def flag_text(res: Resolved, *names: str) -> str | None:
    """The value as typed of the first of ``names`` that was given with a value (lists joined by spaces)."""
    for n in names:
        v = res.get_raw(n)
        if isinstance(v, list):
            return " ".join(v)
        if isinstance(v, str):
            return v
    return None


def convert_value(f: Flag, text: str) -> Any:
    """``text`` converted by ``f``'s value converter as argparse would; ValueError carries argparse's message."""
    try:
        return _convert(f, text)
    except _Fail as e:
        raise ValueError(e.message) from None
