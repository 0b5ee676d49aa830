"""`mtpconsole check`: validate a flag set against the host's server, before launching it.

    mtpconsole check --host H [--command CMD] [--json] -- --model-path M --port 30000 ...
    mtpconsole check --help-file FILE -- python3 -m sglang.launch_server --model-path M ...

Reports what the server's argparse would reject (unknown, ambiguous, renamed, bad values),
SGLang's speculative-decoding rules and security warnings. Exit 0 when clean, 2 when any error is
listed (invalid flags are bad input, as for every command) or on bad input, 1 when only warnings are
listed (0 with --warn-ok). ``--json`` prints the list of problems whatever the verdict (empty when clean).
"""

from __future__ import annotations

import argparse
import json

from console.commands.context import CliContext
from console.commands.flags import add_source_options, command_of, load_schema
from console.core.flags import check_all, split_launch_command
from console.core.text import clean, visible
from console.errors import UserError


def configure(p: argparse.ArgumentParser) -> None:
    add_source_options(p)
    p.add_argument("--warn-ok", action="store_true", help="exit 0 when there are only warnings")
    p.add_argument("server_flags", nargs="*", metavar="FLAG",
                   help="the server flags after '--' (a whole 'python -m sglang.launch_server ...' line is fine)")
    # The top-level parser swallows a '--' that directly follows the subcommand
    # ("check -- --port 1" arrives here as ["--port", "1"]). Put it back before the first
    # token that is not one of this subcommand's own options, so server flags stay flags.
    original = p.parse_args

    def parse_args(args=None, namespace=None):
        return original(_restore_separator(p, list(args or [])), namespace)

    p.parse_args = parse_args  # type: ignore[method-assign]


def _restore_separator(p: argparse.ArgumentParser, tokens: list[str]) -> list[str]:
    own = p._option_string_actions  # noqa: SLF001 - argparse has no public lookup
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--":
            return tokens
        name = tok.split("=", 1)[0]
        action = own.get(name)
        if action is None:
            return tokens[:i] + ["--"] + tokens[i:]
        i += 1 if ("=" in tok or action.nargs == 0) else 2
    return tokens


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    tokens = list(args.server_flags or [])
    if tokens and tokens[0] == "--":
        tokens = tokens[1:]
    launcher, flags = split_launch_command(tokens)
    if tokens and not launcher and not flags:
        raise UserError("not a server command line this console can split: give 'python … -m MODULE …', "
                        "'sglang serve …', 'vllm serve …' or the server flags only")
    schema = await load_schema(ctx, args, command_of(args, launcher or None))
    problems = check_all(flags, schema, version=schema.version)
    errors = sum(p.severity == "error" for p in problems)
    warnings = len(problems) - errors
    if ctx.json_output:
        print(json.dumps([p.model_dump() for p in problems], indent=1))
    else:
        where = clean(f"{schema.prog or 'server'} {schema.version or ''}".rstrip())
        if not problems:
            print(f"ok: {len(flags)} arguments, no problems ({where})")
        for p in problems:  # a flag's escape bytes are shown as escapes, never sent to the terminal
            print(f"{p.severity:<7} {p.kind:<16} {visible(p.message)}")
            if p.suggestion:
                print(f"{'':<24} fix: {visible(p.suggestion)}")
        if problems:
            print(f"{errors} error(s), {warnings} warning(s) ({where})")
    if errors:
        return 2
    if warnings and not args.warn_ok:
        return 1
    return 0
