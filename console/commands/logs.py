"""`mtpconsole logs HOST SESSION`: print (or follow) one session's own output.log — nothing else."""

from __future__ import annotations

import asyncio
import json
import sys

from console.commands._ops import single_host
from console.errors import UserError
from console.hostctx import connect_hosts
from console.remote.link import RequestError

HELP = "print (or follow) one session's own log"


def configure(p) -> None:
    p.add_argument("session", help="session id")
    p.add_argument("-n", "--lines", type=int, default=50, help="last N lines (default 50)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines (Ctrl-C to stop)")


async def run(args) -> int:
    single_host(args)
    async with connect_hosts(args) as links:
        link = links[0]
        try:
            r = await link.request("read_log", {"session_id": args.session,
                                                "tail_bytes": max(4096, args.lines * 400)})
        except RequestError as e:
            raise UserError(str(e), exit_code=1) from None
        lines = r["data"].splitlines()[-args.lines:] if args.lines > 0 else []
        if args.json and not args.follow:
            print(json.dumps({"session_id": args.session, "offset": r["offset"], "end": r["end"], "lines": lines}))
            return 0
        for line in lines:
            print(line)
        if not args.follow:
            return 0
        q: asyncio.Queue = asyncio.Queue()
        link.listeners.append(lambda kind, msg: q.put_nowait(msg) if kind == "log" else None)
        await link.follow_log(args.session, r["end"])
        while True:
            msg = await q.get()
            sys.stdout.write(msg["data"])
            sys.stdout.flush()
