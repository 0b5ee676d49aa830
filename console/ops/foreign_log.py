"""The output of a hand-started (foreign) server: its stdout file, found through ``/proc/<pid>/fd/1``.

Only when that descriptor is a readable regular file (``nohup … > server.log``): a pipe, a terminal
or a socket is never opened (reading one would block or steal input). The process is checked by
(pid, start time) first. Runs ``stat``, ``readlink`` and ``tail`` on the host through the agent,
argv as data.
"""

from __future__ import annotations

from console.link.link import HostLink, RequestError

TAIL_BYTES = 256 * 1024


class NoOutput(Exception):
    """Why a server's output cannot be shown (gone, not a regular file, unreadable)."""


async def _run(link: HostLink, argv: list[str]) -> str:
    r = await link.request("run", {"argv": argv, "timeout": 10}, audit=False)
    if r.get("rc") != 0:
        raise NoOutput((r.get("stderr") or "").strip().splitlines()[-1:][0] if (r.get("stderr") or "").strip()
                       else f"{argv[0]} exited {r.get('rc')}")
    return str(r.get("stdout") or "")


async def read_foreign_output(link: HostLink, pid: int, start_ticks: int | None,
                              tail_bytes: int = TAIL_BYTES) -> tuple[str, list[str]]:
    """(the file's path, its last lines) for the stdout of process ``pid``; NoOutput says why not."""
    proc = await link.request("proc", {"pid": pid}, audit=False)
    if not proc or (start_ticks is not None and proc.get("start_ticks") != start_ticks):
        raise NoOutput(f"pid {pid} is gone (or is another process now)")
    fd = f"/proc/{pid}/fd/1"
    try:
        kind = (await _run(link, ["stat", "-L", "-c", "%F", fd])).strip()
        if kind != "regular file":
            raise NoOutput(f"the stdout of pid {pid} is a {kind or 'special file'}, not a file: nothing to read")
        path = (await _run(link, ["readlink", fd])).strip()
        data = await _run(link, ["tail", "-c", str(int(tail_bytes)), fd])
    except RequestError as e:
        raise NoOutput(str(e)) from None
    return path, data.splitlines()


async def output_written_at(link: HostLink, pid: int) -> float | None:
    """When the stdout file of process ``pid`` was last written (host clock, epoch seconds), None when that
    cannot be read (gone, not a file, an answer that is not a time)."""
    try:
        out = (await _run(link, ["stat", "-L", "-c", "%Y", f"/proc/{pid}/fd/1"])).strip()
    except (NoOutput, RequestError):
        return None
    return float(out) if out.isdigit() else None
