"""The incident report's picture: the GPU panel at the failure, drawn as SVG with rich.

One function shared by ``mtpconsole report`` and the TUI's ``p`` (through the backend), so both
write the same picture. rich only (no terminal, no Textual); every string from the host goes
through :func:`~console.core.text.clean` (secrets masked, no escapes or control characters) and is
drawn as a :class:`~rich.text.Text`, never parsed as console markup: a log line holding ``[/INST]``
or ``[link=…]`` is drawn as written.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from console.core.report import ReportInputs, failure_time, gpu_points
from console.core.text import clean

SVG_WIDTH = 100
"""Columns of the drawn panel (wide enough for the decisive line's first 200 characters on two rows)."""
LINE_CHARS = 200
"""The decisive line and the hint are drawn up to this many characters."""


def panel_svg(inp: ReportInputs) -> str:
    """The GPU panel at the failure, drawn with rich (no terminal needed)."""
    c = inp.classification
    gpus = inp.spec.gpus if inp.spec and inp.spec.gpus else []
    points = [p for p in gpu_points(inp) if not gpus or p.gpu in gpus]
    at = failure_time(inp)
    before = [p for p in points if at is None or p.at <= at]
    last = before[-1:] or points[:1]  # the last sample before the failure, else the first after it
    state = (inp.state or (c.state if c else "unknown")).upper()
    badge = Text(clean(f" {state}{': ' + c.cause if c and c.cause else ''} "),
                 style="bold white on red" if state == "FAILED" else "bold black on yellow")
    body = Table.grid(padding=(0, 1))
    body.add_column(style="dim")
    body.add_column()
    body.add_row("session", Text(clean(inp.session_id)))
    if last:
        p = last[0]
        if p.power_w is not None and p.power_limit_w:
            body.add_row("power", f"{p.power_w:.0f} / {p.power_limit_w:.0f} W")
        if p.mem_used_mib is not None and p.mem_total_mib:
            body.add_row("memory", f"{p.mem_used_mib / 1024:.1f} / {p.mem_total_mib / 1024:.1f} GiB")
    if c and c.line:
        body.add_row("line", Text(clean(c.line, LINE_CHARS)))
    if c and c.hint:
        body.add_row("hint", Text(clean(c.hint, LINE_CHARS)))
    title = Text.assemble(clean(f"GPU {','.join(map(str, gpus)) or '?'} · {inp.host} "), badge)
    console = Console(record=True, width=SVG_WIDTH, file=io.StringIO(), force_terminal=True)
    console.print(Panel(body, title=title, title_align="left"))
    return console.export_svg(title=clean(f"mtpconsole · {inp.session_id}"))
