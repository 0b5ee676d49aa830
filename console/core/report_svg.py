"""The incident report's picture: the GPU panel at the failure, drawn as SVG with rich.

One function shared by ``mtpconsole report`` and the TUI's ``p`` (through the backend), so both
write the same picture. rich only (no terminal, no Textual); every string from the host is
redacted before it is drawn.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from console.core.redact import redact_text
from console.core.report import ReportInputs

SVG_WIDTH = 100
"""Columns of the drawn panel (wide enough for the decisive line's first 200 characters on two rows)."""


def panel_svg(inp: ReportInputs) -> str:
    """The GPU panel at the failure, drawn with rich (no terminal needed)."""
    c = inp.classification
    gpus = inp.spec.gpus if inp.spec and inp.spec.gpus else []
    last = [p for p in inp.samples if p.gpu in gpus][-1:] if gpus else inp.samples[-1:]
    state = (inp.state or (c.state if c else "unknown")).upper()
    badge = Text(f" {state}{': ' + c.cause if c and c.cause else ''} ",
                 style="bold white on red" if state == "FAILED" else "bold black on yellow")
    body = Table.grid(padding=(0, 1))
    body.add_column(style="dim")
    body.add_column()
    body.add_row("session", inp.session_id)
    if last:
        p = last[0]
        if p.power_w is not None and p.power_limit_w:
            body.add_row("power", f"{p.power_w:.0f} / {p.power_limit_w:.0f} W")
        if p.mem_used_mib is not None and p.mem_total_mib:
            body.add_row("memory", f"{p.mem_used_mib / 1024:.1f} / {p.mem_total_mib / 1024:.1f} GiB")
    if c and c.line:
        body.add_row("line", redact_text(c.line)[:200])
    if c and c.hint:
        body.add_row("hint", redact_text(c.hint)[:200])
    title = Text.assemble(f"GPU {','.join(map(str, gpus)) or '?'} · {inp.host} ", badge)
    console = Console(record=True, width=SVG_WIDTH, file=io.StringIO(), force_terminal=True)
    console.print(Panel(body, title=title, title_align="left"))
    return console.export_svg(title=f"mtpconsole · {inp.session_id}")
