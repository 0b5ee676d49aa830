"""`mtpconsole report --host H SESSION`: write an incident report (Markdown + the panel as SVG)."""

from __future__ import annotations

import argparse
import json
import math
import time

from console.commands._ops import require_session
from console.commands.context import CliContext, connect_hosts, single_host
from console.errors import UserError
from console.ops.backend import safe_name
from console.ops.report_files import check_targets, write_report
from console.ops.report_gather import ReportError, gather
from console.ops.server_facts import facts_json


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", help="the session id to report on")
    p.add_argument("--since", default="2h", metavar="AGE",
                   help="how far before the session to include audit entries (e.g. 30m, 2h); the GPU table shows "
                        "the samples from 2 minutes before the failure to 1 minute after it")
    p.add_argument("--out", metavar="FILE",
                   help="Markdown file to write (default ./report-SESSION.md); the panel's SVG goes beside it as "
                        "FILE with the suffix .svg. Both are created new (mode 0600), never through a symlink")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the Markdown and SVG files when they exist as regular files")


def parse_age(text: str) -> float:
    """``90s``, ``30m``, ``2h``, ``1d`` or plain seconds -> seconds; a clear error otherwise."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    t = text.strip().lower()
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise UserError(f"--since {text!r}: expected an age like 90s, 30m, 2h or 1d") from None
    if not math.isfinite(value):
        raise UserError(f"--since {text!r}: an age is a finite number of seconds, minutes, hours or days")
    if value < 0:
        raise UserError(f"--since {text!r}: an age cannot be negative")
    return value


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from console.core.group import is_group_id

    if is_group_id(args.session):  # a multi-node group: each member's report and the group's index (issue 30)
        from console.commands import group

        return await group.report(ctx, args, parse_age(args.since))
    host = single_host(ctx)
    since = parse_age(args.since)
    default = f"report-{safe_name(args.session)}.md"
    check_targets(args.out or default, overwrite=args.overwrite)  # a bad target is refused before the host is asked
    async with connect_hosts(ctx) as links:
        link = next(lk for lk in links if lk.name == host) if len(links) > 1 else links[0]
        await require_session(link, args.session)  # an unknown id is bad input (rc 2), as every command says it
        try:
            inp = await gather(link, args.session, audit_path=ctx.audit_log, since_s=since, now=time.time())
        except ReportError as e:
            raise UserError(str(e), exit_code=1) from None
    out, svg = write_report(inp, args.out or default, overwrite=args.overwrite)
    if ctx.json_output:
        print(json.dumps({"report": str(out), "svg": str(svg), "session_id": inp.session_id,
                          "state": inp.state, "cause": inp.classification.cause if inp.classification else None,
                          "server_facts": facts_json(inp.server_facts, time.time()) if inp.server_facts else None}))
    else:
        print(f"wrote {out} and {svg}")
    return 0
