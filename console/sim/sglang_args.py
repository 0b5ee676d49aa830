"""The SGLang stand-in's argparse, generated from the bundled real schema (sglang 0.5.23).

Every flag the real parser has (hidden ones included), with its aliases, dest, action, nargs,
choices, default and value converter, registered in the real order under ``prog="sglang serve"``:
the stand-in accepts what real SGLang accepts and rejects the rest with argparse's own usage and
error lines (``tests/contract`` compares the two). SGLang's own converters are replayed with their
messages (``human_readable_int``, ``json_list_type``, ...).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from console.core.flags.models import Flag
from console.core.flags.sources import BUNDLED_FLAGS, BUNDLED_PROG, bundled_schema


def _type_function(f: Flag) -> Any:
    """The ``type=`` callable for ``f``, named like SGLang's so argparse's messages match."""
    name = f.type_name
    if name == "int":
        return int
    if name == "float":
        return float
    if name == "loads":
        return json.loads
    if name in ("human_readable_int", "json_list_type", "parse_cuda_graph_backend_arg", "nullable_str"):
        from console.core.flags import argv as resolver

        def convert(text: str) -> Any:
            try:
                return resolver.convert_value(f, text)
            except ValueError as e:
                raise argparse.ArgumentTypeError(str(e)) from None

        convert.__name__ = name
        return convert
    return None


def build_parser() -> argparse.ArgumentParser:
    """``sglang serve``'s parser, as sglang 0.5.23 builds it (all 531 flags)."""
    p = argparse.ArgumentParser(prog=BUNDLED_PROG)
    records = {r["dest"]: r for r in json.loads(BUNDLED_FLAGS.read_text(encoding="utf-8"))}
    for f in bundled_schema().flags:
        kind = f.action_kind
        if kind == "help":
            continue
        rec = records.get(f.dest_name, {})
        kw: dict[str, Any] = {"dest": f.dest_name, "default": rec.get("default"),
                              "help": argparse.SUPPRESS if f.hidden else (f.help or None)}
        if kind == "store_true":
            kw["action"] = "store_true"
            kw["default"] = bool(rec.get("default", False))
        elif kind == "boolean_optional":
            kw["action"] = argparse.BooleanOptionalAction
            p.add_argument(f.name, **kw)  # argparse adds the --no- form itself
            continue
        else:
            t = _type_function(f)
            if t is not None:
                kw["type"] = t
            if f.nargs is not None:
                kw["nargs"] = f.nargs
            if f.choices is not None:
                kw["choices"] = [int(c) for c in f.choices] if f.type_name == "int" else list(f.choices)
            if f.required:
                kw["required"] = True
        p.add_argument(*f.option_strings, **kw)
    return p
