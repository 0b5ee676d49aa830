"""10. Reading the agent's lines over SSH: a stream reader and a task per line, or the session's own callback.

Over a real OpenSSH sshd on 127.0.0.1, one connection (AES-GCM, as the console offers it first): a sender on the
host writes a sample delta's worth of JSON (~600 bytes) per line, each line its own write (its own SSH packet, as
the agent's samples are), with a pause between them so that every line wakes the console on its own, as a fleet's
hosts do. The console reads them two ways, alternated in rounds: the naive way (``create_process`` and a task
looping on ``stdout.readline()``, what the link did before) and the link's channel (``console/link/channel.py``:
the session's ``data_received`` cuts the bytes into lines and hands each on in the same callback). The figure is
the console process's CPU per line (getrusage over the lines, divided by their number): the transport's cost,
decryption included, before any JSON is read.
"""

from __future__ import annotations

import json
import shlex
import time

from bench.procstat import self_cpu
from bench.stats import cell, ratio, summarize
from console.link.channel import open_ssh

LINE = json.dumps({"type": "sample_delta", "seq": 2, "base": 1, "patch": ["d", {"gpus": ["l", 8, {
    str(i): ["d", {"power_w": ["=", 480.4 + i], "temp_c": ["=", 51.6]}, []] for i in range(8)}]}, []],
    "digest": 806413578}, separators=(",", ":")) + "\n"


def _sender(lines: int, pause_s: float) -> str:
    """The host side: ``lines`` lines, one write and one flush each, ``pause_s`` apart."""
    code = (f"import sys, time\nline = {LINE!r}\nfor _ in range({lines}):\n"
            f"    sys.stdout.write(line); sys.stdout.flush(); time.sleep({pause_s})\n")
    return shlex.join(["python3", "-u", "-c", code])


async def _streams(conn, command: str) -> tuple[int, float]:
    proc = await conn.create_process(command, encoding=None, window=64 << 20)
    n, c0 = 0, self_cpu()
    while await proc.stdout.readline():
        n += 1
    took = self_cpu() - c0
    proc.close()
    await proc.wait_closed()
    return n, took


async def _channel(conn, command: str) -> tuple[int, float]:
    import asyncio

    chan = await open_ssh(conn, command, 64 << 20)
    count, ended = [0], asyncio.Event()

    def line(_: bytes) -> None:
        count[0] += 1
    c0 = self_cpu()
    chan.deliver(line, ended.set)
    await ended.wait()
    took = self_cpu() - c0
    await chan.close()
    return count[0], took


async def run(ctx, sec) -> None:
    import asyncssh

    sshd = ctx.sshd()
    lines, rounds = ctx.n(2000, 100), ctx.n(4, 1)
    command = _sender(lines, 0.0007)
    conn = await asyncssh.connect("127.0.0.1", port=sshd.port, username=sshd.user, client_keys=[str(sshd.client_key)],
                                  known_hosts=str(sshd.known_hosts), encryption_algs=["aes128-gcm@openssh.com"])
    per_line: dict[str, list[float]] = {"streams": [], "channel": []}
    t0 = time.perf_counter()
    try:
        for r in range(rounds + 1):
            for way, read in (("streams", _streams), ("channel", _channel))[:: 1 if r % 2 else -1]:
                n, took = await read(conn, command)
                if n != lines:
                    raise RuntimeError(f"{way}: {n} of {lines} lines read")
                if r:  # round 0 warms both up
                    per_line[way].append(took / n * 1e6)
    finally:
        conn.close()
        await conn.wait_closed()
    ss, sc = summarize(per_line["streams"]), summarize(per_line["channel"])
    faster = bool(ss and sc and sc.median < ss.median)
    sec.target = "the link's channel costs less CPU per line than a stream reader and a task per line"
    sec.verdict = ("met" if faster else "missed") + (
        f" (channel / streams: {sc.median / ss.median:.2f} of the CPU per line)" if ss and sc else "")
    sec.table(["way", "console CPU per line (one figure per round)", "less CPU than the naive way"], [
        ["naive: `create_process`, a task on `stdout.readline()`", cell(ss, "µs"), "1.0×"],
        ["the link's channel: the session's `data_received` cuts and hands on the lines", cell(sc, "µs"),
         ratio(ss.median if ss else None, sc.median if sc else None)],
    ])
    sec.notes += [
        f"{rounds} rounds of {lines} lines each way, alternated (the order flips each round), after a warm-up round; "
        f"{time.perf_counter() - t0:.0f} s in all. Each line ~{len(LINE)} bytes, written and flushed alone 0.7 ms "
        "apart, so that nearly every line arrives as its own SSH packet and wakes the event loop on its own (a "
        "fleet's samples arrive one host at a time).",
        "CPU is the console process's (getrusage, user + system) over the lines of a round: the sshd and the sender "
        "run in other processes. What remains per line in both ways is asyncssh's receive path (the socket read, "
        "AES-GCM, the packet and channel layers) and the event loop's wake-up: the channel removes the stream "
        "buffer, the reader task's wake-up and the readline search per line.",
    ]
