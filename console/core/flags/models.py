"""Data models for a server's command-line flags and for problems found in a flag set.

A :class:`FlagSchema` is what a server's ``--help`` says about its flags (parsed by
:func:`console.core.flags.help.parse_help`); a :class:`Problem` is one finding of the
validator or of the pre-launch notes. Both are frozen pydantic models so they cross the
CLI ``--json`` boundary and the JSON schema cache unchanged.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

TypeGuess = Literal["int", "float", "str", "bool", "json", "path"]
"""What a flag's value looks like, guessed conservatively from the help (None = unknown)."""

ProblemKind = Literal[
    "unknown",
    "ambiguous",
    "bad_choice",
    "bad_type",
    "missing_value",
    "unexpected_value",
    "missing_required",
    "deprecated",
    "renamed",
    "duplicate",
    "speculative",
    "security",
]
Severity = Literal["error", "warning"]
ActionKind = Literal["store", "store_true", "store_false", "store_const", "append", "append_const", "count",
                     "boolean_optional", "help", "version", "other"]
"""What an option does when given, as argparse's action classes do it (None on a Flag = inferred)."""


class Flag(BaseModel):
    """One option as ``--help`` shows it.

    ``name`` is the first option string (argparse's canonical spelling); ``aliases`` the
    others, including the ``--no-x`` form of a ``BooleanOptionalAction`` (then
    ``negatable`` is true). ``nargs`` is None for exactly one value (or none when
    ``takes_value`` is false), else ``"?"``, ``"*"``, ``"+"``, ``"..."`` or a count.
    ``default`` is the text shown after ``default:`` in the help, if any.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    aliases: list[str] = Field(default_factory=list)
    metavar: str | None = None
    takes_value: bool = False
    nargs: str | int | None = None
    choices: list[str] | None = None
    default: str | None = None
    type: TypeGuess | None = None
    required: bool = False
    deprecated: bool = False
    negatable: bool = False
    help: str = ""
    group: str | None = None
    dest: str | None = None
    """argparse's ``dest`` (the key of the parsed namespace); None = derived from the names."""
    action: ActionKind | None = None
    """argparse's action; None = inferred (a value: store, ``--no-x`` alias: boolean_optional, else store_true)."""
    hidden: bool = False
    """Hidden from ``--help`` (``help=SUPPRESS``) but accepted by the parser."""
    type_name: str | None = None
    """The value converter's ``__name__`` as argparse names it in errors (``int``, ``float``, ``loads``)."""
    const: str | None = None
    """What a store_const/append_const action stores, or an ``nargs='?'`` flag given without a value."""

    @property
    def option_strings(self) -> list[str]:
        """The name and every alias, in the order argparse registered them."""
        return [self.name, *self.aliases]

    @property
    def dest_name(self) -> str:
        """``dest``, or argparse's rule: the first long option string without ``--``, ``-`` -> ``_``."""
        if self.dest:
            return self.dest
        first = next((s for s in self.option_strings if s.startswith("--")), self.name)
        return first.lstrip("-").replace("-", "_")

    @property
    def action_kind(self) -> ActionKind:
        """``action``, or inferred from what ``--help`` shows."""
        if self.action is not None:
            return self.action
        if self.name in ("-h", "--help"):
            return "help"
        if self.takes_value:
            return "store"
        if self.negatable:
            return "boolean_optional"
        return "store_true"

    @property
    def argparse_nargs(self) -> str | int | None:
        """``nargs`` as argparse holds it: 0 for a switch, ``"..."`` as REMAINDER."""
        if self.action_kind in ("store_true", "store_false", "store_const", "append_const", "count",
                                "boolean_optional", "help", "version"):
            return 0
        return self.nargs


class FlagSchema(BaseModel):
    """Every flag a server accepts (as far as ``--help`` shows), with lookups by name/alias.

    ``prog`` is the program name from the usage line (``sglang serve``); ``version`` the
    server's version when it is known (set by whoever ran ``--help``).
    """

    model_config = ConfigDict(frozen=True)

    version: str | None = None
    prog: str | None = None
    flags: list[Flag] = Field(default_factory=list)

    _index: dict[str, Flag] = PrivateAttr(default_factory=dict)

    def model_post_init(self, __context: object) -> None:
        index: dict[str, Flag] = {}
        for f in self.flags:
            for s in f.option_strings:
                index.setdefault(s, f)
        self._index = index

    def by_dest(self, dest: str) -> Flag | None:
        """The flag that stores into ``dest`` (first one declared)."""
        for f in self.flags:
            if f.dest_name == dest:
                return f
        return None

    def get(self, option: str) -> Flag | None:
        """The flag whose name or alias is exactly ``option`` (``--model`` -> ``--model-path``)."""
        return self._index.get(option)

    def __contains__(self, option: object) -> bool:
        return isinstance(option, str) and option in self._index

    def option_strings(self) -> list[str]:
        """Every option string in declaration order, the order argparse matches prefixes in."""
        return list(self._index)

    def names(self) -> list[str]:
        """The canonical names, in help order."""
        return [f.name for f in self.flags]

    def with_version(self, version: str | None) -> FlagSchema:
        """A copy that carries ``version``."""
        return FlagSchema(version=version, prog=self.prog, flags=self.flags)


class Problem(BaseModel):
    """One finding about a flag set: what kind, which flag, a message for the operator.

    ``suggestion`` is the fix when there is one obvious fix (the full or new flag name);
    ``candidates`` lists alternatives (argparse's ambiguous matches, close spellings).
    Messages never contain secret values.
    """

    model_config = ConfigDict(frozen=True)

    kind: ProblemKind
    flag: str | None = None
    message: str
    severity: Severity = "error"
    suggestion: str | None = None
    candidates: list[str] = Field(default_factory=list)
