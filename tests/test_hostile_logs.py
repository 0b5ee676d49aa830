"""Hostile log content through the real agent (local link): invalid UTF-8, NUL bytes, ANSI escapes,
a 1 MB line, 100,000 lines at once. Following by offset loses nothing and repeats nothing; the
classifier and the UI's ``clean`` never crash, hang, or let an escape sequence through."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from console.config import HostConfig
from console.core.classify import LogClassifier, classify
from console.link.link import HostLink
from console.link.ssh import HostSpec
from console.ui.format import clean
from tests.helpers.heard import Heard
from tests.helpers.wait import await_until, until

SID = "20260101-000000-gpu0-hostile"


@pytest.fixture
async def local_link(runs_dir):
    (runs_dir / SID).mkdir()
    (runs_dir / SID / "output.log").write_bytes(b"")
    lk = HostLink(HostSpec(name="local", local=True),
                  HostConfig(python=sys.executable, runs_dir=str(runs_dir), gpu_source="none"), interval=0.2)
    await lk.open()
    yield lk
    await lk.close()


def _append(runs_dir: Path, data: bytes) -> None:
    with open(runs_dir / SID / "output.log", "ab") as f:
        f.write(data)


async def _collect_until(link: HostLink, size: int, timeout: float = 15.0) -> None:
    await await_until(lambda: link.follows.get(SID, 0) >= size, timeout, step=0.05)


def _expected(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


async def test_follow_with_invalid_utf8_loses_nothing_after_it(local_link, runs_dir):
    """Regression: the console counted the decoded text's UTF-8 length (U+FFFD is 3 bytes for a 1-byte
    invalid byte), drifted past the agent's offset and silently dropped every later chunk."""
    heard = Heard(local_link)
    await local_link.client.follow_log(SID, 0)
    parts = [b"bad \xff\xfe bytes\n", b"second line\n", b"\xc3\x28 third \x80\n", b"The server is fired up\n"]
    raw = b""
    for p in parts:
        _append(runs_dir, p)
        raw += p
        await asyncio.sleep(0.15)
    await _collect_until(local_link, len(raw))
    assert heard.text() == _expected(raw)
    assert local_link.follows[SID] == len(raw)  # the console's offset is the true byte offset


async def test_multibyte_char_split_at_chunk_boundary(local_link, runs_dir):
    """A 1 MB line of 3-byte characters is read in 256 KiB chunks that split characters: the bytes
    still all arrive, once, and the offset stays exact."""
    heard = Heard(local_link)
    await local_link.client.follow_log(SID, 0)
    line = ("€" * (1 << 20 // 3 + 7)).encode() + b"\n"  # not a multiple of 3 at any 256 KiB boundary
    tail = b"after the huge line\n"
    _append(runs_dir, line + tail)
    await _collect_until(local_link, len(line) + len(tail), timeout=20)
    text = heard.text()
    assert local_link.follows[SID] == len(line) + len(tail)
    assert text.endswith("after the huge line\n") and text.count("after the huge line") == 1
    # at most a few replacement characters where chunks cut a character, never lost bytes
    assert len(text.encode()) >= len(line) + len(tail) - 8


async def test_hundred_thousand_lines_at_once_in_order(local_link, runs_dir):
    heard = Heard(local_link)
    await local_link.client.follow_log(SID, 0)
    raw = b"".join(b"line %06d \x1b[31mred\x1b[0m\n" % i for i in range(100_000))
    t0 = time.monotonic()
    _append(runs_dir, raw)
    await _collect_until(local_link, len(raw), timeout=30)
    lines = heard.text().splitlines()
    assert len(lines) == 100_000 and lines[0].startswith("line 000000") and lines[-1].startswith("line 099999")
    assert lines == sorted(lines)  # in order, nothing twice
    assert time.monotonic() - t0 < 30


async def test_read_log_tail_with_nul_and_invalid_bytes(local_link, runs_dir):
    _append(runs_dir, b"a\x00b\xff\n" * 1000 + b"\x1b]0;pwned\x07title\n")
    r = await local_link.request("read_log", {"session_id": SID, "tail_bytes": 4096})
    assert r["end"] == os.path.getsize(runs_dir / SID / "output.log")
    assert "\x00" in r["data"] and "\ufffd" in r["data"]
    for line in r["data"].splitlines():
        out = clean(line)
        assert "\x1b" not in out and "\x00" not in out and "\x07" not in out


@pytest.mark.parametrize("sid", ["../etc", "..", ".hidden", "", "a/b", "x\x00y", "ok\n", "a b", "$(id)"])
async def test_read_log_rejects_bad_session_ids(local_link, sid):
    from console.link.link import RequestError

    with pytest.raises(RequestError) as e:
        await local_link.request("read_log", {"session_id": sid, "tail_bytes": 100})
    assert "session" in str(e.value) or "log" in str(e.value)


def test_classifier_survives_hostile_chunks():
    c = LogClassifier()
    c.feed("x" * (1 << 20))  # a 1 MB line without newline
    c.feed("\n")
    c.feed("\x00\x1b[2J\x1b]52;c;Zm9v\x07 RuntimeError: Not enough memory\n")
    c.feed_bytes(b"\xff\xfe\xc3(" * 1000 + b"\n")
    for i in range(100_000):
        if i % 20000 == 0:
            c.feed("".join(f"[2026-01-01 00:00:00] Decode batch, #running-req: {i}\n" for _ in range(20000)))
    r = c.result(None)
    assert r.state in ("failed", "loading", "ready", "unknown", "starting", "serving") or r.state
    assert classify("\x00" * 1000).state


def test_clean_strips_every_terminal_control():
    evil = ("\x1b[2J\x1b[H\x1b]0;title\x07\x1b]52;c;SGVsbG8=\x07\x1bP+q\x1b\\\x9b31m\x1b(0"
            "\x1b[?1049h\x1b[6n\x07\x08\x0c\u202e\u2066text\r\rkept")
    out = clean(evil)
    assert out == "kept"
    assert clean("a\x1b[31mred\x1b[0m b") == "ared b"
    assert len(clean("y" * 1_000_000)) < 2100


async def test_log_pane_draws_no_escape_sequence():
    """The TUI's log pane path: hostile lines are cleaned before they reach the terminal, and the pane's
    lines and rendered strips contain no ESC/C1/BEL/bidi control."""
    from textual.app import App

    from console.ui.widgets.log_pane import LogPane

    class Host(App):
        def compose(self):
            yield LogPane(id="lp")

    evil = ["\x1b[2J\x1b[Hcleared?", "\x1b]0;title\x07\x1b]52;c;SGVsbG8=\x07clip", "\x9b31mC1", "bell\x07\x08",
            "\u202eright-to-left", "progress 10%\rprogress 100%", "x" * 100_000, "bad \ufffd\x00 nul"]
    app = Host()
    async with app.run_test(size=(100, 20)) as pilot:
        pane = app.query_one(LogPane)
        pane.start("h", "s", "banner")
        pane.add_lines(evil)
        log = pane.log_widget
        await until(pilot, lambda: log.size.height > 0 and len(log.lines) == len(pane.lines))  # written and laid out
        for line in pane.lines:
            assert not any(c in line for c in "\x1b\x9b\x07\x08\x00\u202e"), repr(line[:80])
        assert "progress 100%" in pane.lines and any(x.startswith("x" * 100) and "chars]" in x for x in pane.lines)
        for y in range(20):
            for seg in pane.log_widget.render_line(y):
                assert "\x1b" not in seg.text and "\x07" not in seg.text
