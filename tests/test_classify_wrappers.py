"""The classifier reads a log the same way whatever wraps its lines.

Operators paste logs from many places: ``docker compose logs``, ``kubectl logs --prefix`` or
``--timestamps``, ``journalctl -u`` for a systemd unit, Ray's actor tags, ``srun -l``, OpenMPI's
``--tag-output``, a terminal's colours (also with the ESC byte lost), CRLF line ends, and a
paste that lost every line's indentation. A metamorphic test: every real log of
the corpus (``tests/data/real-logs``), wrapped line by line in each of these, must get the same
state and cause as the bare file. No label is read, so the test part may take part.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from console.core.classify import classify

REAL = Path(__file__).resolve().parent / "data" / "real-logs"

WRAPPERS: dict[str, Callable[[str], str]] = {
    "compose": lambda line: "sglang-1  | " + line,
    "compose_v1": lambda line: "sglang_1     | " + line,
    "containerd": lambda line: "2025-07-25T07:53:08.211+08:00 stdout F " + line,
    "docker_timestamps": lambda line: "2025-07-25T07:53:08.211000000Z " + line,
    "kubectl_prefix": lambda line: "[pod/sglang-0/sglang] " + line,
    "journald": lambda line: "Dec  1 02:00:00 gpu-host python3[12345]: " + line,
    "journald_iso": lambda line: "2025-12-01T02:00:00+0000 gpu-host sglang[12345]: " + line,
    "syslog_tag": lambda line: "sglang[1234]: " + line,
    "python_logging_time": lambda line: "2025-07-25 07:53:08,123 " + line,
    "ray_pid": lambda line: "(pid=12345) " + line,
    "ray_actor": lambda line: "(RayWorkerWrapper pid=1234, ip=10.0.0.1) " + line,
    "openmpi_tag": lambda line: "[1,0]<stdout>:" + line,
    "srun_label": lambda line: "0: " + line,
    "bracketed_iso_time": lambda line: "[2025-11-06T02:09:46.576Z] " + line,
    "no_indentation": lambda line: line.lstrip(),
    "no_indentation_compose": lambda line: "sglang-1  | " + line.lstrip(),
    "colour_lost_its_escape": lambda line: "[36m(WorkerDict pid=3432, ip=10.0.0.8)[0m " + line,
    "crlf": lambda line: line + "\r",
    "ansi_colour": lambda line: "\x1b[32m" + line + "\x1b[0m",
}


def _corpus() -> list[tuple[str, str]]:
    return [(p.name, p.read_text(encoding="utf-8", errors="replace")) for p in sorted(REAL.glob("*.log"))]


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_wrapped_real_logs_classify_as_bare(wrapper):
    wrap = WRAPPERS[wrapper]
    corpus = _corpus()
    assert len(corpus) >= 100
    changed = []
    for name, text in corpus:
        bare = classify(text)
        got = classify("\n".join(wrap(line) for line in text.split("\n")))
        if (got.state, got.cause) != (bare.state, bare.cause):
            changed.append(f"{name}: {bare.state}/{bare.cause} -> {got.state}/{got.cause}")
    assert not changed, "\n".join(changed)


def test_wrapped_decisive_line_is_the_wrapped_line():
    """The decisive line is shown as the operator's file has it (wrapper kept, colours dropped)."""
    text = "[2025-01-01 00:00:00] Load weight begin.\nRuntimeError: CUDA error: an illegal memory access was encountered\n"
    got = classify("\n".join(WRAPPERS["journald"](line) for line in text.split("\n")))
    assert got.state == "failed" and got.cause == "cuda_driver"
    assert got.line == "Dec  1 02:00:00 gpu-host python3[12345]: RuntimeError: CUDA error: an illegal memory access was encountered"
