"""LineChannel: the agent's stdout cut into lines as bytes arrive, however the transport chunks them."""

from __future__ import annotations

import asyncio
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.link.channel import STDERR_KEEP, LineChannel, open_local


def _lines(stream: bytes) -> list[bytes]:
    """What a reader of the whole stream calls its lines (readline's: a last one without its newline too)."""
    return stream.splitlines(keepends=True)  # the stream holds no \r: its lines end at \n only


def _feed(chan: LineChannel, stream: bytes, cuts: list[int]) -> None:
    start = 0
    for cut in sorted({c % (len(stream) + 1) for c in cuts}):
        chan.feed(stream[start:cut])
        start = cut
    chan.feed(stream[start:])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300).map(lambda b: b.replace(b"\r", b"")), st.lists(st.integers(0, 400), max_size=12))
def test_any_chunking_gives_the_lines_of_the_whole_stream(stream: bytes, cuts: list[int]) -> None:
    got: list[bytes] = []
    chan = LineChannel(limit=10_000)
    chan.deliver(got.append, lambda: None)
    _feed(chan, stream, cuts)
    chan.ended()
    assert got == _lines(stream)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=8), st.lists(st.integers(0, 400), max_size=12))
def test_a_line_over_the_limit_is_dropped_whole_and_the_others_arrive(lengths: list[int], cuts: list[int]) -> None:
    limit = 20
    lines = [b"x" * n + b"\n" for n in lengths]
    stream = b"".join(lines)
    got: list[bytes] = []
    chan = LineChannel(limit=limit)
    chan.deliver(got.append, lambda: None)
    _feed(chan, stream, cuts)
    assert got == [ln for ln in lines if len(ln) <= limit]
    assert chan.oversized == sum(len(ln) > limit for ln in lines)


async def test_lines_before_deliver_queue_for_next_line_and_then_go_to_the_callback_in_order() -> None:
    chan = LineChannel(limit=100)
    chan.feed(b"motd\n{\"type\":\"ready\"}\n{\"a\"")
    assert await chan.next_line() == b"motd\n"
    assert await chan.next_line() == b'{"type":"ready"}\n'
    chan.feed(b":1}\n{\"b\":2}\n")
    got: list[bytes] = []
    lost: list[bool] = []
    chan.deliver(got.append, lambda: lost.append(True))
    chan.feed(b"{\"c\":3}\n")
    assert got == [b'{"a":1}\n', b'{"b":2}\n', b'{"c":3}\n']
    chan.ended()
    assert lost == [True]
    with pytest.raises(ConnectionError):
        await chan.write_line(b"x\n")


async def test_next_line_is_none_at_the_end_and_deliver_after_the_end_tells_the_loss_at_once() -> None:
    chan = LineChannel(limit=100)
    waiter = asyncio.ensure_future(chan.next_line())
    await asyncio.sleep(0)
    chan.feed(b"partial")
    chan.ended()
    assert await waiter == b"partial"
    assert await chan.next_line() is None
    lost: list[bool] = []
    chan.deliver(lambda line: None, lambda: lost.append(True))
    assert lost == [True]


def test_stderr_keeps_its_tail() -> None:
    chan = LineChannel(limit=100)
    chan.feed_stderr(b"a" * STDERR_KEEP)
    chan.feed_stderr(b"Traceback: the cause")
    assert len(chan.stderr) == STDERR_KEEP and chan.stderr.endswith(b"the cause")


async def test_a_local_agent_channel_round_trips_lines_and_reports_stderr_and_its_end() -> None:
    code = ("import sys\n"
            "for line in sys.stdin:\n"
            "    sys.stdout.write(line.upper()); sys.stdout.flush()\n"
            "sys.stderr.write('bye from stderr')\n")
    chan = await open_local([sys.executable, "-u", "-c", code], {}, limit=1 << 20)
    await chan.write_line(b"hello\n")
    assert await asyncio.wait_for(chan.next_line(), 10) == b"HELLO\n"
    got: list[bytes] = []
    ended = asyncio.Event()
    chan.deliver(got.append, ended.set)
    big = b"y" * 300_000 + b"\n"  # more than a pipe holds: the write waits, the reply arrives in many chunks
    await chan.write_line(big)
    await asyncio.wait_for(_until(lambda: got), 10)
    assert got == [big.upper()]
    chan._close()  # closes stdin too: the agent's loop ends
    await asyncio.wait_for(ended.wait(), 10)
    assert "bye from stderr" in await chan.stderr_text(wait=5) or chan.lost


async def _until(pred, step: float = 0.01) -> None:
    while not pred():
        await asyncio.sleep(step)


async def test_a_message_that_breaks_its_handler_or_no_object_is_dropped_and_the_link_reads_on() -> None:
    from console.link.link import HostLink
    from console.link.ssh import HostSpec

    lk = HostLink(HostSpec(name="local", local=True))
    chan = LineChannel(limit=1 << 10)
    lk.chan = chan
    fut = asyncio.get_running_loop().create_future()
    lk._pending[7] = fut
    chan.on_oversized = lk._oversized
    chan.deliver(lambda line: lk._on_line(chan, line), lambda: lk._on_lost(chan))
    chan.feed(b'[1, 2]\n"text"\nnot json\n{"type":"sample"}\n' + b"z" * 2000 + b'\n{"type":"reply","id":7,"ok":true,"result":1}\n')
    assert await asyncio.wait_for(fut, 1) == 1
    assert any("'sample' message broke its handler" in why for why in lk.book.refused)
    assert any("line over 64 MiB" in why or "dropped" in why for why in lk.book.refused)
    assert lk.chan is chan


@pytest.mark.sshd
async def test_over_the_real_sshd_lines_arrive_whole_an_oversized_one_is_dropped_and_stderr_is_kept(sshd):
    import shlex

    import asyncssh

    from console.link.channel import open_ssh

    code = ("import sys\n"
            "sys.stdout.write('a' * 100000 + '\\n')\n"  # one line over many SSH packets
            "sys.stdout.write('b' * 300000 + '\\n')\n"  # over the limit below: dropped whole
            "sys.stdout.write('{\"end\": 1}\\n'); sys.stdout.flush()\n"
            "sys.stderr.write('the cause, on stderr'); sys.stderr.flush()\n")
    conn = await asyncssh.connect("127.0.0.1", port=sshd.port, username=sshd.user,
                                  client_keys=[str(sshd.client_key)], known_hosts=str(sshd.known_hosts))
    try:
        chan = await open_ssh(conn, shlex.join(["python3", "-u", "-c", code]), limit=200_000)
        got: list[bytes] = []
        ended = asyncio.Event()
        chan.deliver(got.append, ended.set)
        await asyncio.wait_for(ended.wait(), 20)
        assert got == [b"a" * 100000 + b"\n", b'{"end": 1}\n'] and chan.oversized == 1
        assert "the cause, on stderr" in await chan.stderr_text(wait=5)
        await chan.close()
    finally:
        conn.close()
