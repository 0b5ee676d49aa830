"""Where a flag schema comes from besides ``--help``: the host's own parser, and the bundled 0.5.23 data.

- :data:`PROBE_SOURCE` is a small stdlib program run by the host's Python (``python -c``): it
  builds SGLang's real argparse parser the way ``prepare_server_args`` does and prints every
  action as JSON, hidden (``help=SUPPRESS``) ones included. :func:`schema_from_dump` turns that
  into a :class:`FlagSchema` in registration order, the order argparse matches prefixes in.
- :func:`bundled_schema` is the schema of sglang 0.5.23 recorded from the same parser
  (``console/data/sglang-0.5.23-flags.json``), used when a host cannot be asked.
"""

from __future__ import annotations

import ast
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from console.core.flags.models import ActionKind, Flag, FlagSchema, TypeGuess

BUNDLED_VERSION = "0.5.23"
BUNDLED_FLAGS = Path(__file__).resolve().parents[2] / "data" / "sglang-0.5.23-flags.json"
BUNDLED_PROG = "sglang serve"

PROBE_SOURCE = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(p)
def base(a):
    for c in type(a).__mro__:
        if c.__module__ == "argparse":
            return c.__name__
    return "Action"
out = []
for a in p._actions:
    t = a.type
    out.append({"option_strings": list(a.option_strings), "dest": a.dest,
                "nargs": a.nargs if a.nargs is None or isinstance(a.nargs, (int, str)) else str(a.nargs),
                "cls": type(a).__name__, "base": base(a),
                "type": getattr(t, "__name__", None) if t is not None else None,
                "type_module": getattr(t, "__module__", None) if t is not None else None,
                "choices": [repr(c) for c in a.choices] if a.choices is not None else None,
                "hidden": a.help == argparse.SUPPRESS, "required": bool(a.required),
                "const": repr(a.const), "default": repr(a.default)[:2000], "metavar": a.metavar,
                "help": (a.help if isinstance(a.help, str) and a.help != argparse.SUPPRESS else "")[:2000]})
print("MTPCONSOLE-PARSER-DUMP " + json.dumps({"prog": p.prog, "allow_abbrev": p.allow_abbrev,
      "python": list(sys.version_info[:3]), "actions": out}))
"""
"""Stdlib only (plus the server's own package), any Python >= 3.8; prints one marked JSON line."""

PROBE_MARK = "MTPCONSOLE-PARSER-DUMP "

_BASE_ACTIONS: dict[str, ActionKind] = {
    "_StoreAction": "store", "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const", "_AppendAction": "append", "_AppendConstAction": "append_const",
    "_CountAction": "count", "BooleanOptionalAction": "boolean_optional", "_HelpAction": "help",
    "_VersionAction": "version",
}


def _literal(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _type_guess(name: str | None, module: str | None) -> TypeGuess | None:
    if name in ("int", "float", "str") and module in (None, "builtins"):
        return name  # type: ignore[return-value]
    if name == "loads":
        return "json"
    return None


def _action_of(entry: dict[str, Any]) -> ActionKind:
    kind = _BASE_ACTIONS.get(str(entry.get("cls"))) or _BASE_ACTIONS.get(str(entry.get("base")))
    if kind is not None:
        return kind
    # a server's own Action subclass: a switch when it takes no value, else it stores what it is given
    return "store_true" if entry.get("nargs") == 0 else "store"


def _choice_text(c: Any) -> str:
    v = _literal(c)
    return v if isinstance(v, str) else str(v)


def schema_from_dump(dump: dict[str, Any], *, version: str | None = None) -> FlagSchema:
    """A :class:`FlagSchema` from :data:`PROBE_SOURCE`'s JSON (the parser's actions, in order)."""
    flags: list[Flag] = []
    for e in dump.get("actions") or []:
        strings = [str(s) for s in e.get("option_strings") or []]
        if not strings:
            continue  # positionals: SGLang's server parser has none
        action = _action_of(e)
        nargs = e.get("nargs")
        if action in ("store_true", "store_false", "store_const", "append_const", "count", "boolean_optional",
                      "help", "version"):
            takes_value, nargs = False, None
        else:
            takes_value = nargs != 0
            nargs = {"A...": "...", "...": "..."}.get(str(nargs), nargs) if nargs is not None else None
        default = _literal(e.get("default"))
        const = _literal(e.get("const"))
        flags.append(Flag(
            name=strings[0], aliases=strings[1:], metavar=e.get("metavar") if isinstance(e.get("metavar"), str) else None,
            takes_value=takes_value, nargs=nargs,
            choices=[_choice_text(c) for c in e["choices"]] if e.get("choices") is not None else None,
            default=None if default is None else str(default),
            type=_type_guess(e.get("type"), e.get("type_module")) if takes_value else "bool",
            required=bool(e.get("required")), negatable=action == "boolean_optional",
            help=str(e.get("help") or ""), dest=str(e.get("dest") or "") or None, action=action,
            hidden=bool(e.get("hidden")), type_name=e.get("type") if takes_value else None,
            const=None if const is None else str(const),
        ))
    return FlagSchema(version=version, prog=dump.get("prog"), flags=flags)


def parse_probe_output(stdout: str, *, version: str | None = None) -> FlagSchema | None:
    """The schema from the probe's stdout, or None when it printed no (valid) dump."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(PROBE_MARK):
            try:
                return schema_from_dump(json.loads(line[len(PROBE_MARK):]), version=version)
            except (ValueError, TypeError, KeyError):
                return None
    return None


def merge_help(probed: FlagSchema, helped: FlagSchema | None) -> FlagSchema:
    """The probed schema, with help texts and groups from ``--help`` where the probe has none."""
    if helped is None:
        return probed
    flags = []
    for f in probed.flags:
        h = helped.get(f.name)
        if h is not None:
            f = f.model_copy(update={"help": f.help or h.help, "group": h.group, "deprecated": h.deprecated})
        flags.append(f)
    return FlagSchema(version=probed.version or helped.version, prog=probed.prog or helped.prog, flags=flags)


_JSON_ACTIONS: dict[str, ActionKind] = {
    "bool(store_true)": "store_true", "bool(BooleanOptionalAction)": "boolean_optional",
}


def _bundled_entry(e: dict[str, Any]) -> dict[str, Any]:
    """One flags.json record as a probe-dump action."""
    t = str(e.get("type") or "")
    cls, tname, module = "_StoreAction", None, None
    if t.startswith("bool(store_true)") or "DeprecatedStoreTrueAction" in t:
        cls = "_StoreTrueAction"
    elif t.startswith("bool(BooleanOptionalAction)"):
        cls = "BooleanOptionalAction"
    elif "StoreConstAction" in t:  # SGLang's DeprecatedStoreConstAction; with choices it takes a value
        cls = "DeprecatedStoreConstAction"
    elif t.startswith("str(nargs"):
        cls, tname = "LoRAPathAction", "str"
    else:
        tname = t or None
        module = "builtins" if t in ("int", "float", "str") else None
    aliases = [str(a) for a in (e.get("aliases") or [])]
    return {"option_strings": [e["flag"], *aliases], "dest": e.get("dest"), "nargs": e.get("nargs"),
            "cls": cls, "type": tname, "type_module": module, "choices": e.get("choices"),
            "hidden": not e.get("help") and not e.get("help_full"), "required": bool(e.get("required")),
            "const": None, "default": repr(e.get("default")), "help": e.get("help") or ""}


@lru_cache(maxsize=1)
def bundled_schema() -> FlagSchema:
    """sglang 0.5.23's flags as its argparse parser holds them (``-h`` first, hidden flags included)."""
    records = json.loads(BUNDLED_FLAGS.read_text(encoding="utf-8"))
    actions: list[dict[str, Any]] = [{"option_strings": ["-h", "--help"], "dest": "help", "nargs": 0, "cls": "_HelpAction",
                "choices": None, "required": False, "default": "'==SUPPRESS=='", "help": "show this help message and exit"}]
    actions += [_bundled_entry(e) for e in records]
    for a in actions:
        choices = a.get("choices")
        if isinstance(choices, list):
            a["choices"] = [repr(c) for c in choices]
    return schema_from_dump({"prog": BUNDLED_PROG, "actions": actions}, version=BUNDLED_VERSION)
