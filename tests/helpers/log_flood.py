"""A stand-in server for the log cap tests: start-up lines, then a flood of numbered lines, then a CUDA OOM
traceback whose decisive line is the very last line before a rotation, a few trailing lines, exit 1.

    log_flood.py CAP_BYTES FOLLOWED_BYTES BURST_BYTES FLOOD_BYTES DIR

The byte stream is deterministic: :func:`stream` gives the same pieces the program writes, so a test
knows every line the log must hold. With a log cap of ``CAP_BYTES`` the supervisor rotates at the line
end where the next line would not fit; :func:`stream` places the traceback so that it ends a segment
exactly. Handshakes (files in DIR): waits for ``go`` before the followed part, writes it in bursts of
``BURST_BYTES`` each followed by a wait for ``ack-K``; waits for ``flood`` before the unthrottled flood,
whose timing goes to ``DIR/stats.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time

HEAD = [
    b"[2026-01-01 00:00:00] server_args=ServerArgs(model_path='/models/Flood-1B', tp_size=1, port=30000, "
    b"mem_fraction_static=0.88, log_level='info')\n",
    b"[2026-01-01 00:00:01] Load weight begin. avail mem=78.50 GB\n",
]
TRACEBACK = [
    b"[2026-01-01 00:09:59] Scheduler hit an exception: Traceback (most recent call last):\n",
    b'  File "/sglang/srt/managers/scheduler.py", line 2345, in run_scheduler_process\n',
    b"    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)\n",
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    b"79.19 GiB of which 1.06 GiB is free.\n",
]
TRAILER = [b"[2026-01-01 00:10:00] Received sigquit from a child process. It usually means the child failed.\n"]
MIN_LINE = 12


def line(i: int, pad: int | None = None) -> bytes:
    """Filler line ``i`` (unique, numbered); ``pad`` fixes its padding (its length is ``11 + pad``)."""
    n = (i * 7919) % 160 if pad is None else pad
    return b"L%08d %s\n" % (i, b"x" * n)


def stream(cap: int, followed: int, burst: int, flood: int):
    """The program's output as ("write", bytes) / ("wait", name) steps, in order."""
    segment = 0  # bytes in the supervisor's current segment (it rotates before a line that does not fit)

    def put(b: bytes) -> bytes:
        nonlocal segment
        if segment + len(b) > cap and segment > 0:
            segment = 0
        segment += len(b)
        return b

    i = 0
    yield ("write", b"".join(put(x) for x in HEAD))
    yield ("wait", "go")
    sent = 0
    k = 0
    while sent < followed:
        block = []
        size = 0
        while size < burst:
            b = put(line(i))
            i += 1
            block.append(b)
            size += len(b)
        yield ("write", b"".join(block))
        sent += size
        yield ("wait", "ack-%d" % k)
        k += 1
    yield ("wait", "flood")
    block, size, total = [], 0, 0
    while total < flood:
        b = put(line(i))
        i += 1
        block.append(b)
        size += len(b)
        total += len(b)
        if size >= 256 << 10:
            yield ("flood", b"".join(block))
            block, size = [], 0
    tb = len(b"".join(TRACEBACK))
    while segment + tb != cap:  # fill the segment so that the traceback ends it exactly
        gap = cap - segment - tb
        if gap >= MIN_LINE:
            n = min(gap, 171)
            if 0 < gap - n < MIN_LINE:
                n = gap - MIN_LINE
            block.append(put(line(i, n - 11)))
        else:  # it does not fit this segment: go on into the next one
            block.append(put(line(i)))
        i += 1
    yield ("flood", b"".join(block))
    yield ("write", b"".join(put(x) for x in TRACEBACK))
    yield ("write", b"".join(put(x) for x in TRAILER))


def main() -> int:
    cap, followed, burst, flood = (int(x) for x in sys.argv[1:5])
    where = sys.argv[5]
    out = sys.stdout.buffer
    in_writes = worst = 0.0
    flooded = 0
    for kind, arg in stream(cap, followed, burst, flood):
        if kind == "wait":
            deadline = time.monotonic() + 120
            while not os.path.exists(os.path.join(where, arg)) and time.monotonic() < deadline:
                time.sleep(0.01)
            continue
        t0 = time.monotonic()
        out.write(arg)
        out.flush()
        took = time.monotonic() - t0
        if kind == "flood":
            in_writes += took
            worst = max(worst, took)
            flooded += len(arg)
    with open(os.path.join(where, "stats.json"), "w") as f:
        json.dump({"flood_bytes": flooded, "in_writes_s": in_writes, "worst_write_s": worst}, f)
    return 1


if __name__ == "__main__":
    sys.exit(main())
