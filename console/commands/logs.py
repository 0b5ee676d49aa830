"""`mtpconsole logs HOST SESSION`: print (or follow) one session's own output.log — nothing else.

``-f`` follows it; a capped log (``log_cap_mb``) is followed across its rotations. When the follower fell more
than one rotation behind (lines were rotated away before they were read: the agent's ``log_rotated`` with
``dropped``), that is said on stderr, never silently skipped; so is a log truncated by hand. With ``--json -f``
the output is JSON lines: the tail object (as without ``-f``), then ``{"type": "lines", ...}`` per chunk and
``{"type": "event", "kind": "log_rotated" | "log_truncated", ...}`` per event (``dropped``, ``message``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from console.commands._ops import require_session
from console.commands.context import CliContext, connect_hosts, single_host
from console.core.redact import redact_text
from console.errors import UserError
from console.link.client import LinkListener
from console.link.errors import LinkDown, RequestError
from console.model import AgentEvent, LogChunk, LogRotated, LogTruncated

LINES_LOST = ("lines lost: output.log was rotated more than once before they were read (the log is capped); "
              "following on from the start of its newest segment")
"""What ``logs -f`` says when the agent reports a rotation it could not read to its end (``dropped``)."""
TRUNCATED = "output.log shrank (truncated by hand): following it again from its start"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", help="session id")
    p.add_argument("-n", "--lines", type=int, default=50, help="last N lines (default 50)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines (Ctrl-C to stop)")


def _printer(tty: bool):
    """Lines as the terminal may show them: secrets masked always; on a terminal, escape and control
    sequences removed too (a log line must never retitle, recolour or write the operator's clipboard)."""
    if tty:
        from console.ui.format import clean

        return lambda line: clean(redact_text(line), 1 << 20)
    return redact_text


class _Chunks(LinkListener):
    """The followed log's chunks and its rotation and truncation events, queued in the order they arrive."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.queue: asyncio.Queue[LogChunk | LogRotated | LogTruncated] = asyncio.Queue()

    def on_log(self, chunk: LogChunk) -> None:
        if chunk.session_id == self.session_id:
            self.queue.put_nowait(chunk)

    def on_event(self, event: AgentEvent) -> None:
        if isinstance(event, (LogRotated, LogTruncated)) and event.session_id == self.session_id:
            self.queue.put_nowait(event)


def _event_line(event: LogRotated | LogTruncated) -> tuple[str | None, dict]:
    """(what stderr says of ``event``, None when nothing was lost; its ``--json`` line)."""
    if isinstance(event, LogTruncated):
        return TRUNCATED, {"type": "event", "kind": event.kind, "session_id": event.session_id, "size": event.size,
                           "at": event.at, "message": TRUNCATED}
    said = LINES_LOST if event.dropped else None
    return said, {"type": "event", "kind": event.kind, "session_id": event.session_id, "file": event.file,
                  "dropped": event.dropped, "at": event.at, "message": said or "output.log rotated: read to its end"}


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from console.core.group import is_group_id

    if is_group_id(args.session):  # a multi-node group: its members' logs interleaved by time (issue 30)
        from console.commands import group

        return await group.logs(ctx, args)
    single_host(ctx)
    async with connect_hosts(ctx) as links:
        link = links[0]
        if args.lines < 0:
            raise UserError(f"-n must be 0 or more, not {args.lines}")
        await require_session(link, args.session)  # an unknown id is bad input (rc 2), said as every command says it
        try:  # exactly the last N lines: the agent reads backwards until it has them (or its byte cap)
            r = await link.client.read_log(args.session, tail_lines=args.lines, timeout=60, audit=True)
        except RequestError as e:
            raise UserError(str(e), exit_code=1) from None
        except (TimeoutError, LinkDown) as e:
            raise UserError(f"{link.name}: no answer reading the log of {args.session}: {str(e) or 'timed out'}",
                            exit_code=1) from None
        lines = r.data.split("\n")[:-1]
        note = None
        if r.capped:
            note = (f"only {len(lines)} of the last {args.lines} lines: the agent reads at most the last "
                    f"{(r.cap_bytes or 0) >> 20} MiB of a log (these start at byte {r.offset} of {r.end})")
        if ctx.json_output:
            print(json.dumps({"session_id": args.session, "offset": r.offset, "end": r.end,
                              "capped": r.capped, "note": note,
                              "lines": [redact_text(x) for x in lines]}), flush=True)
            if not args.follow:
                return 0
        if note:
            print(f"mtpconsole logs: {note}", file=sys.stderr)
        show = _printer(sys.stdout.isatty())
        if not ctx.json_output:
            for line in lines:
                print(show(line))
        if not args.follow:
            return 0
        chunks = _Chunks(args.session)
        link.listen(chunks)
        await link.client.follow_log(args.session, r.end, r.file)
        runner = asyncio.create_task(link.run())  # reconnects and re-follows from the byte offset
        try:
            while True:
                item = await chunks.queue.get()
                if not isinstance(item, LogChunk):
                    said, obj = _event_line(item)
                    if said:
                        print(f"mtpconsole logs: {args.session}: {said}", file=sys.stderr, flush=True)
                    if ctx.json_output:
                        print(json.dumps(obj), flush=True)
                    continue
                if ctx.json_output:
                    print(json.dumps({"type": "lines", "session_id": item.session_id, "offset": item.offset,
                                      "end": item.end, "file": item.file,
                                      "lines": [redact_text(x) for x in item.lines]}))
                else:
                    for line in item.lines:
                        print(show(line))
                sys.stdout.flush()
        finally:
            runner.cancel()
