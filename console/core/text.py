"""Terminal text, one home for each fact the console prints: remote text made safe to draw (:func:`clean`,
:func:`short`), the mark of each step state (the steps pane, the full log's steps line and the CLI all use
:data:`STEP_MARKS`) and the launch's confirmation steps (:data:`LAUNCH_STEPS`, the ``n/6`` of LAUNCHING).

Pure: no I/O, no UI.
"""

from __future__ import annotations

import re

from console.core.redact import redact_text
from console.model import HostSnapshot, Step, StepState

MAX_LINE = 2000
"""Longest line :func:`clean` keeps (the rest is counted, not shown)."""

# CSI, OSC (BEL or ST terminated), DCS/SOS/PM/APC strings, and two-byte escapes.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -/]*[0-~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)
_CTRL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: str, limit: int = MAX_LINE) -> str:
    """Make remote text safe to draw: no escapes or control characters, secrets masked, one line, bounded."""
    if "\r" in text:
        text = text.rstrip("\r").rsplit("\r", 1)[-1]  # progress bars: keep the last redraw
    text = redact_text(_CTRL.sub("", _ANSI.sub("", text.replace("\t", "    ").replace("\n", " "))))
    if len(text) > limit:
        text = f"{text[:limit]}… [+{len(text) - limit} chars]"
    return text


def visible(text: str, limit: int = MAX_LINE) -> str:
    """Text an operator typed (a flag, an argument), safe to print yet recognisable: unlike :func:`clean`, which
    drops them, each escape or control character is shown as its escape (``--x\\x1b[31m``); secrets masked,
    bounded."""
    text = redact_text(_CTRL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text))
    if len(text) > limit:
        text = f"{text[:limit]}… [+{len(text) - limit} chars]"
    return text


def short(text: str, n: int) -> str:
    """``text`` cut to ``n`` characters with an ellipsis."""
    return text if len(text) <= n else text[: max(0, n - 1)] + "…"


STEP_MARKS: dict[StepState, str] = {
    "ok": "✓", "failed": "✗", "running": "…", "pending": "·", "skipped": "–", "warning": "⚠",
}
"""The mark of each step state, for every state a :class:`~console.model.Step` can have (``warning``: a check the
operator overrode, e.g. a forced launch that does not fit). The steps pane animates ``running`` with a spinner."""


def steps_line(steps: list[Step]) -> str:
    """The steps on one line, each as its mark and name: ``✓ preflight · ✓ spawned · ✗ healthy``."""
    return " · ".join(f"{STEP_MARKS[s.state]} {s.name}" for s in steps)


LAUNCH_STEPS: tuple[str, ...] = ("spawned", "logging", "listening", "healthy", "ready", "on GPU")
"""A launch's confirmation steps after its preflight, in order: the process is up, writes its log, listens on its
port, answers /health, serves a request, holds GPU memory. LAUNCHING ``n/6`` counts them."""


def launch_progress(step: int | None) -> str:
    """``n/N``: how many of the launch's confirmation steps (:data:`LAUNCH_STEPS`) have passed."""
    return f"{step or 0}/{len(LAUNCH_STEPS)}"


GPU_SOURCE_NAMES: dict[str, str] = {"nvml": "NVML", "nvidia-smi": "nvidia-smi", "sim": "the simulated GPUs",
                                    "auto": "the GPU source", "none": "no GPU source"}
"""How a GPU source (``HostSnapshot.gpu_source``) is named in a sentence: the one that reported a figure."""

NO_GPU_INFO = "no GPU information"
"""The agent's own prefix of ``HostSnapshot.gpu_error`` (``console/host/gpus.py``)."""

DOWN_STATES = ("unreachable", "failed", "closed", "reconnecting")
"""Link states in which a host has no current sample to show."""


def gpu_source_name(source: str) -> str:
    """``sim`` -> ``the simulated GPUs``: the source as a sentence names it (unknown ones as given)."""
    return GPU_SOURCE_NAMES.get(source, source)


def no_gpus_text(snap: HostSnapshot) -> str:
    """Why a host shows no GPUs, said once: the link is down (and why), the first sample has not come yet, the
    agent's reason (``no GPU information: …``, its prefix never doubled), or the source that listed none."""
    c = snap.connection
    if c.state in DOWN_STATES:
        return f"{c.state}: {c.error or 'the host does not answer'}"
    if snap.gpu_error:
        return f"{NO_GPU_INFO}: {snap.gpu_error.removeprefix(NO_GPU_INFO + ': ').removeprefix(NO_GPU_INFO)}".rstrip(": ")
    if snap.received_at is None:
        return "waiting for the first sample…"
    return f"{NO_GPU_INFO}: {gpu_source_name(snap.gpu_source)} listed no GPU"
