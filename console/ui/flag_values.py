"""The flag form's values as a validated model, and conversion to and from server argv.

Pure (no Textual): :class:`FlagValues` parses what the operator typed, :func:`from_argv`
prefills it from a running server's command line, :meth:`FlagValues.to_flags` produces the
argv list (never a shell string), and :func:`flag_diff` shows what an edit changes.
"""

from __future__ import annotations

import re
import shlex
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
    field_validator,
    model_validator,
)

from console.core.flags.argv import resolve_argv
from console.core.flags.launcher import split_launch_command
from console.core.flags.sources import bundled_schema
from console.model import DEFAULT_SERVER_COMMAND, SPECULATIVE_ALGORITHMS

SPEC_ALGOS = ("none", *SPECULATIVE_ALGORITHMS)
"""The form's choices: off, or one of SGLang's built-in algorithms (the one list in console.model)."""
MAMBA_STRATEGIES = ("default", "auto", "no_buffer", "extra_buffer", "extra_buffer_lazy")
DEFAULT_COMMAND = list(DEFAULT_SERVER_COMMAND)

# form field -> (flag, aliases); bool fields are store_true switches.
FIELD_FLAGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "model_path": ("--model-path", ("--model",)),
    "spec_algo": ("--speculative-algorithm", ()),
    "num_steps": ("--speculative-num-steps", ()),
    "eagle_topk": ("--speculative-eagle-topk", ()),
    "num_draft_tokens": ("--speculative-num-draft-tokens", ()),
    "mem_fraction": ("--mem-fraction-static", ()),
    "max_running": ("--max-running-requests", ()),
    "context_length": ("--context-length", ()),
    "hicache": ("--enable-hierarchical-cache", ("--enable-hicache",)),
    "hicache_size": ("--hicache-size", ()),
    "mamba_strategy": ("--mamba-radix-cache-strategy", ()),
    "tp_size": ("--tp-size", ("--tensor-parallel-size",)),
    "port": ("--port", ()),
}
SWITCHES = {"hicache"}
_FLAG_TO_FIELD = {f: name for name, (flag, al) in FIELD_FLAGS.items() for f in (flag, *al)}
_BAD_CHARS = re.compile(r"[\x00\n\r]")
_HUMAN_INT = re.compile(r"^[1-9][0-9]*[kKmM]?$")


class FlagValues(BaseModel):
    """What the flag form holds. Text fields arrive as strings; empty means "not set"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_path: str
    gpus: list[int] = [0]
    spec_algo: str = "none"
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    mem_fraction: float | None = None
    max_running: int | None = None
    context_length: str | None = None
    hicache: bool = False
    hicache_size: int | None = None
    mamba_strategy: Literal["default", "auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"] = "default"
    tp_size: int | None = None
    port: int | None = None
    extras: str | None = None
    command: list[str] = DEFAULT_COMMAND

    @field_validator("*", mode="before")
    @classmethod
    def _text(cls, v: object) -> object:
        if isinstance(v, str):
            if _BAD_CHARS.search(v):
                raise ValueError("NUL and line breaks are not allowed")
            v = v.strip()
            return v or None
        return v

    @field_validator("model_path", mode="before")
    @classmethod
    def _model(cls, v: object) -> object:
        if v is None or (isinstance(v, str) and not v.strip()):
            raise ValueError("a model path is required")
        return v

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, v: object) -> object:
        if v is None:
            raise ValueError("at least one GPU index is required")
        return gpu_indices(v) if isinstance(v, str) else _distinct(v)

    @field_validator("spec_algo")
    @classmethod
    def _algo(cls, v: str) -> str:
        for name in SPEC_ALGOS:
            if v.upper() == name.upper():
                return name
        raise ValueError(f"Input should be one of {', '.join(SPEC_ALGOS)}")

    @field_validator("num_steps", "eagle_topk", "num_draft_tokens", "max_running", "hicache_size", "tp_size")
    @classmethod
    def _positive(cls, v: int | None) -> int | None:
        if v is not None and v <= 0:
            raise ValueError("must be a positive integer")
        return v

    @field_validator("mem_fraction")
    @classmethod
    def _fraction(cls, v: float | None) -> float | None:
        if v is not None and not 0 < v <= 1:
            raise ValueError("must be in (0, 1]")
        return v

    @field_validator("context_length")
    @classmethod
    def _context(cls, v: str | None) -> str | None:
        if v is not None and not _HUMAN_INT.match(v):
            raise ValueError("a positive integer, optionally with k or m (e.g. 32768, 128k)")
        return v

    @field_validator("port")
    @classmethod
    def _port(cls, v: int | None) -> int | None:
        if v is not None and not 1 <= v <= 65535:
            raise ValueError("must be 1–65535")
        return v

    @field_validator("extras")
    @classmethod
    def _extras(cls, v: str | None) -> str | None:
        try:
            shlex.split(v or "")
        except ValueError as e:
            raise ValueError(f"cannot split: {e}") from None
        return v

    @model_validator(mode="after")
    def _consistent(self) -> FlagValues:
        if self.tp_size is not None and self.tp_size != len(self.gpus):
            raise ValueError(f"tp size {self.tp_size} needs {self.tp_size} GPUs, {len(self.gpus)} given")
        return self

    def extra_args(self) -> list[str]:
        return shlex.split(self.extras or "")

    def to_flags(self) -> list[str]:
        """The server flags as an argv list, in a stable order."""
        out: list[str] = []
        for name, (flag, _) in FIELD_FLAGS.items():
            v = getattr(self, name)
            if name in SWITCHES:
                out += [flag] if v else []
            elif v is not None and v not in ("none", "default"):
                out += [flag, f"{v:g}" if isinstance(v, float) else str(v)]
        return out + self.extra_args()


def _distinct(v: object) -> list[int]:
    if not isinstance(v, list) or not v or any(int(g) < 0 for g in v) or len(set(v)) != len(v):
        raise ValueError("distinct GPU indices ≥ 0, e.g. 0,1")
    return v


def gpu_indices(text: str) -> list[int]:
    """The GPUs field as indices (``0,1`` or ``0 1``); raises ValueError with the form's message."""
    try:
        v = [int(x) for x in text.replace(" ", ",").split(",") if x]
    except ValueError:
        raise ValueError("GPU indices as a comma list, e.g. 0,1") from None
    return _distinct(v)


def set_flag(raw: dict[str, object], flag: str, value: str) -> dict[str, object]:
    """Raw form values with server flag ``flag`` (canonical, as the planner names it) set to ``value``: its field
    when the form has one, else its occurrence in "other flags" (read as the server reads it), else appended there."""
    field = _FLAG_TO_FIELD.get(flag)
    if field is not None and field not in SWITCHES:
        return {**raw, field: value}
    tokens = shlex.split(str(raw.get("extras") or ""))
    for occ in resolve_argv(tokens, bundled_schema()).occurrences:
        if occ.flag is not None and occ.flag.name == flag and len(occ.values) == 1:
            end = occ.index + (1 if occ.explicit else 2)
            tokens[occ.index:end] = [flag, value]
            break
    else:
        tokens += [flag, value]
    return {**raw, "extras": shlex.join(tokens)}


def same_flags(a: list[str], b: list[str], ignore: tuple[str, ...] = ("port",)) -> bool:
    """Whether two server flag lists say the same to the server's argparse (its converted values: order,
    abbreviations, ``=`` forms and ``0.90``/``0.9`` aside; unknown options as typed), the ``ignore``'d
    destinations left out: does a form hold a profile's flags."""
    def read(flags: list[str]) -> tuple[dict[str, object], list[tuple[str, tuple[str, ...]]]]:
        res = resolve_argv([str(x) for x in flags], bundled_schema())
        unknown = sorted((o.typed, o.values) for o in res.occurrences if o.flag is None)
        return {k: v for k, v in res.values.items() if k not in ignore}, unknown
    return read(a) == read(b)


def field_errors(exc: ValidationError) -> dict[str, str]:
    """Field name -> first error message ("" for errors about the whole form)."""
    out: dict[str, str] = {}
    for err in exc.errors():
        key = str(err["loc"][0]) if err["loc"] else ""
        msg = err["msg"].removeprefix("Value error, ")
        out.setdefault(key, msg)
    return out


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(command, flags) of a session's argv, kept verbatim for a relaunch.

    A launcher the console knows is split where ``split_launch_command`` splits it (the one
    definition); a custom ``server_command`` it does not know keeps everything before its first
    ``--flag`` as the command, so a relaunch reruns it unchanged.
    """
    launcher, flags = split_launch_command(argv)
    if launcher:
        return list(launcher), list(flags)
    for i, a in enumerate(argv):
        if a.startswith("--"):
            return argv[:i], argv[i:]
    return list(argv), []


def parse_flags(flags: list[str]) -> list[tuple[str, str | None]]:
    """``(flag, value)`` per option, in order, read as the server's argparse reads them.

    The one argv resolver (``console.core.flags.argv``, bundled SGLang schema): abbreviations and
    aliases come back as the canonical name (``--max-running`` -> ``--max-running-requests``),
    ``--x=v`` as ``(--x, v)``, a switch as ``(--switch, None)``, several values joined by spaces;
    unknown options as typed.
    """
    out: list[tuple[str, str | None]] = []
    for name, value in resolve_argv([str(a) for a in flags], bundled_schema()).pairs():
        if isinstance(value, list):
            out.append((name, " ".join(value)))
        elif isinstance(value, str):
            out.append((name, value))
        else:
            out.append((name, None))
    return out


def from_argv(argv: list[str], gpus: list[int], port: int | None = None) -> dict[str, object]:
    """Raw form values (strings) prefilled from a server's command line."""
    command, flags = split_argv(argv)
    raw: dict[str, object] = {"gpus": ",".join(map(str, gpus)), "command": command or DEFAULT_COMMAND}
    res = resolve_argv(flags, bundled_schema())
    pieces: list[tuple[int, list[str]]] = []  # (position, tokens) kept for extras, in argv order
    covered: set[int] = set()
    for occ in res.occurrences:
        width = 1 if occ.explicit else 1 + len(occ.values)
        span = flags[occ.index:occ.index + width]
        covered.update(range(occ.index, occ.index + width))
        name = _FLAG_TO_FIELD.get(occ.flag.name) if occ.flag is not None else None
        value = occ.values[0] if len(occ.values) == 1 else None
        if name in SWITCHES and not occ.values and not occ.negated:
            raw[name] = True
        elif name is not None and name not in SWITCHES and value is not None:
            raw[name] = value
        elif occ.flag is None and occ.explicit:
            pieces.append((occ.index, span[0].split("=", 1)))  # an unknown --x=v kept as --x v
        else:
            pieces.append((occ.index, span))
    pieces += [(i, [a]) for i, a in enumerate(flags) if i not in covered]
    extras = [t for _, toks in sorted(pieces, key=lambda p: p[0]) for t in toks]
    if port is not None and "port" not in raw:
        raw["port"] = str(port)
    raw["extras"] = shlex.join(extras)
    return raw


def flag_diff(old: list[str], new: list[str]) -> list[str]:
    """Lines like ``- --mem-fraction-static 0.9`` / ``+ --mem-fraction-static 0.8``."""
    a = dict(parse_flags(split_argv(old)[1] if old and not old[0].startswith("--") else old))
    b = dict(parse_flags(new))

    def fmt(k: str, v: str | None) -> str:
        return k if v is None else f"{k} {v}"

    lines: list[str] = []
    for k in dict.fromkeys([*a, *b]):
        if k in a and (k not in b or a[k] != b[k]):
            lines.append("- " + fmt(k, a[k]))
        if k in b and (k not in a or a[k] != b[k]):
            lines.append("+ " + fmt(k, b[k]))
    return lines
