"""`mtpconsole ack`: acknowledge an ended session (recorded as ``ack.json`` in its run directory), so
its GPU reads IDLE in every console; the session stays in the history (`mtpconsole sessions --all`)."""

from __future__ import annotations

import argparse
import getpass
import json
import socket
import time

from console.commands._ops import term
from console.commands.context import CliContext, connect_hosts, single_host
from console.commands.sessions import age
from console.core.events import stamp
from console.core.redact import redact_obj
from console.errors import UnknownSession, UserError
from console.link.errors import NotEnded, NotFound, RequestError


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", help="the ended session's id")


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    single_host(ctx)
    async with connect_hosts(ctx) as links:
        link = links[0]
        try:
            s = await link.client.ack(args.session, f"{getpass.getuser()}@{socket.gethostname()}")
        except NotFound:
            raise UnknownSession(args.session, link.name) from None
        except RequestError as e:
            raise UserError(f"{link.name}: {e}", exit_code=1 if isinstance(e, NotEnded) else 2,
                            kind="refused" if isinstance(e, NotEnded) else None) from None
    if ctx.json_output:
        print(json.dumps(redact_obj({"host": link.name, "session_id": s.session_id,
                                     "acknowledged_at": s.acknowledged_at}), indent=2))
    else:
        at = s.acknowledged_at
        when = f"at {stamp(at)} ({age(at, time.time())} ago)" if at is not None else "(no time recorded)"
        print(f"{term(link.name)}: session {term(s.session_id)} acknowledged {when}"
              " (its GPU reads IDLE; it stays in the history)")
    return 0
