"""`mtpconsole flags`: the server's flags as its own ``--help`` describes them.

    mtpconsole flags --host H [--command "python3 -m sglang.launch_server"] [--search WORDS] [--json]
    mtpconsole flags --help-file FILE [--json]          # offline, from a saved --help text

Learned schemas are cached per host, command and server version under
``$XDG_CACHE_HOME/mtpconsole/flags``.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from console.commands.context import CliContext, open_hosts, server_command
from console.core.flags import DEFAULT_COMMAND, Flag, FlagSchema, key_flags, parse_help, search
from console.core.flags.help import MAX_HELP_CHARS
from console.errors import UserError
from console.ops.flag_learning import default_cache_dir, learn_schema


def add_source_options(p: argparse.ArgumentParser) -> None:
    """Options shared with `check`: where the flag schema comes from."""
    p.add_argument("--command", dest="server_command", metavar="CMD", default=None,
                   help="the server command on the host (default: the host's server_command in the config, "
                        f"else '{' '.join(DEFAULT_COMMAND)}'; the SGLang stand-in under --demo)")
    p.add_argument("--help-file", metavar="FILE", default=None,
                   help="read a saved '--help' text instead of asking a host (offline)")
    p.add_argument("--server-version", metavar="V", default=None,
                   help="the server version, for messages (with --help-file)")
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where learned schemas are cached (default $XDG_CACHE_HOME/mtpconsole/flags)")


def configure(p: argparse.ArgumentParser) -> None:
    add_source_options(p)
    p.add_argument("--search", metavar="WORDS", default=None, help="only flags matching these words")


def command_of(args: argparse.Namespace, fallback: list[str] | None = None) -> list[str] | None:
    """The server command from ``--command`` (split like a shell would, never run by one), else ``fallback``;
    None: the host's configured ``server_command``."""
    if args.server_command:
        try:
            cmd = shlex.split(args.server_command)
        except ValueError as e:
            raise UserError(f"--command: {e}") from None
        if not cmd:
            raise UserError("--command is empty")
        return cmd
    return list(fallback) if fallback else None


def read_help_file(path: str) -> str:
    """A saved help text; invalid UTF-8 is replaced, not fatal. Read like every file the operator names
    (``paths.read_user_file``): a FIFO or a device is refused, never waited on, and the read is bounded."""
    from console.paths import UnreadableFile, read_user_file

    try:
        data = read_user_file(path, MAX_HELP_CHARS)
    except OSError as e:
        raise UserError(f"--help-file {path}: {e.strerror or e}") from None
    except UnreadableFile as e:
        raise UserError(f"--help-file {path}: {e}") from None
    return data.decode("utf-8", errors="replace")


async def load_schema(ctx: CliContext, args: argparse.Namespace, command: list[str] | None) -> FlagSchema:
    """The schema from ``--help-file``, or learned from the first ``--host`` through its agent
    (``command`` None: the host's configured server command)."""
    if args.help_file:
        return parse_help(read_help_file(args.help_file), version=args.server_version)
    if not ctx.hosts and not ctx.demo:
        raise UserError("give --host HOST to ask a host's server, or --help-file FILE to read a saved --help")
    cache_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    async with open_hosts(ctx, servers=False) as opened:  # the demo: its stand-in's --help, no server
        if not opened.links:
            raise UserError("no host to ask")
        link = opened.links[0]
        schema = await learn_schema(link, command or server_command(opened.config, link.name), cache_dir)
    if args.server_version and schema.version is None:
        schema = schema.with_version(args.server_version)
    return schema


def _describe(f: Flag) -> str:
    names = ", ".join(f.option_strings)
    if f.choices:
        arg = "{" + ",".join(f.choices) + "}"
    else:
        arg = f.metavar or ""
    if f.takes_value and f.nargs not in (None,):
        arg = f"{arg} (nargs {f.nargs})"
    marks = [m for m, on in (("required", f.required), ("deprecated", f.deprecated)) if on]
    head = f"{names} {arg}".rstrip()
    extra: list[str] = []
    if f.type:
        extra.append(f.type)
    if f.default is not None:
        extra.append(f"default {f.default}")
    extra += marks
    line = head + (f"  [{'; '.join(extra)}]" if extra else "")
    first = f.help.split(". ")[0].strip()
    return line + (f"\n      {first}" if first else "")


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    schema = await load_schema(ctx, args, command_of(args))
    flags = search(schema, args.search) if args.search else list(schema.flags)
    if ctx.json_output:
        print(json.dumps({"version": schema.version, "prog": schema.prog,
                          "flags": [f.model_dump() for f in flags]}, indent=1))
        return 0
    print(f"{schema.prog or 'server'} {schema.version or '(version unknown)'}: {len(schema.flags)} flags"
          + (f", {len(flags)} matching {args.search!r}" if args.search else ""))
    if not args.search:
        keys = key_flags(schema)
        if keys:
            print("\nkey flags:")
            for f in keys:
                print("  " + _describe(f))
        print("\nall flags:")
    for f in flags:
        print("  " + _describe(f))
    return 0
