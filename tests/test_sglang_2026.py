"""SGLang as it is in late 2026 (issue 28): ``sglang serve``'s sectioned help, renamed flags, a drained stop."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.core.flags import find_rename
from console.core.flags.help import llm_section, parse_help

DATA = Path(__file__).parent / "data" / "sglang"
SERVE_HELP = (DATA / "sglang-0.5.23-serve-help.txt").read_text(encoding="utf-8")
LAUNCH_HELP = (Path(__file__).parents[1] / "console" / "data" / "sglang-0.5.23-launch-server-help.txt").read_text(
    encoding="utf-8")


def test_serve_help_is_read_from_its_language_model_section():
    """The real ``sglang serve --help``: the LLM section's flags, plus the front end's own ``--model-type``."""
    serve, launch = parse_help(SERVE_HELP), parse_help(LAUNCH_HELP)
    assert serve.prog == "sglang serve"
    assert {f.name for f in serve.flags} - {f.name for f in launch.flags} == {"--model-type"}
    assert serve.get("--model-type").choices == ["auto", "llm", "diffusion"]
    assert serve.get("--model-path").required


def test_a_diffusion_section_never_lends_its_flags_to_the_llm_server():
    diffusion = ("usage: sglang serve [-h] [--num-inference-steps N]\n\noptions:\n"
                 "  --num-inference-steps N\n                        denoising steps\n"
                 "  --vae-cpu-offload     keep the VAE on the CPU\n")
    text = SERVE_HELP.replace('Diffusion model support is not available. Install with: pip install "sglang[diffusion]"',
                              diffusion)
    assert text != SERVE_HELP
    schema = parse_help(text)
    assert "--vae-cpu-offload" not in schema and "--num-inference-steps" not in schema
    assert "--mem-fraction-static" in schema


def test_help_without_sections_is_unchanged():
    lines = LAUNCH_HELP.split("\n")
    assert llm_section(lines) is lines


@pytest.mark.parametrize("old, new", [
    ("--stream-output", "--incremental-streaming-output"),
    ("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy"),
    ("--disable-piecewise-cuda-graph", "--disable-prefill-cuda-graph"),
    ("--enforce-piecewise-cuda-graph", "--cuda-graph-backend-prefill breakable"),
    ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
])
def test_flags_renamed_since_0_5_15_name_their_replacement(old, new):
    schema = parse_help(LAUNCH_HELP)
    rename = find_rename(old, schema)
    assert rename is not None and rename.replacement == new
    assert old not in schema and rename.new in schema
