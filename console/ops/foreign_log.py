"""The output of a hand-started (foreign) server: its stdout file, found through ``/proc/<pid>/fd/1``.

Only when that descriptor is a readable regular file (``nohup … > server.log``): a pipe, a terminal
or a socket is never read (reading one would block or steal input). The agent's ``foreign_output`` op does
it in one round trip: the process checked by (pid, start time), then the file's path, size, last write and
tail (see ``console/host/foreign.py``).
"""

from __future__ import annotations

from console.link.client import HostClient, Wire
from console.link.errors import RequestError
from console.model import ForeignOutput

TAIL_BYTES = 256 * 1024


class NoOutput(Exception):
    """Why a server's output cannot be shown (gone, not a regular file, unreadable)."""


async def foreign_output(link: Wire | HostClient, pid: int, start_ticks: int | None,
                         tail_bytes: int = TAIL_BYTES) -> ForeignOutput:
    """The stdout file of process ``pid`` (its path, size, last write and last lines); NoOutput says why not."""
    try:
        return await HostClient.of(link).foreign_output(pid, start_ticks, tail_bytes)
    except RequestError as e:
        raise NoOutput(str(e)) from None


async def read_foreign_output(link: Wire | HostClient, pid: int, start_ticks: int | None,
                              tail_bytes: int = TAIL_BYTES) -> tuple[str, list[str]]:
    """(the file's path, its last lines) for the stdout of process ``pid``; NoOutput says why not."""
    out = await foreign_output(link, pid, start_ticks, tail_bytes)
    return out.path, out.lines
