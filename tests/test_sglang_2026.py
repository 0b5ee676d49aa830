"""SGLang as it is in late 2026 (issue 28): ``sglang serve``'s sectioned help, renamed flags, a drained stop."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from console.core.flags import find_rename
from console.core.flags.help import llm_section, parse_help
from console.link.client import HostClient
from console.model import KillTarget, LaunchRequest
from console.ops import lifecycle
from console.sim.demo import FIXED_FLAGS
from tests.conftest import free_port
from tests.helpers.rel_util import cli, write_config
from tests.helpers.sim_files import make_sim, sim_link
from tests.helpers.wait import await_until

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


# ---------------------------------------------------------------- a SIGTERM from outside, drained: STOPPED

@pytest.fixture
def sim(tmp_path):
    return make_sim(tmp_path, gpus=1, tag="drain")


async def test_a_server_stopped_by_sigterm_from_outside_reads_stopped_not_failed(sim, runs_dir, tmp_path):
    """The stand-in drains on SIGTERM and kills its tree, as SGLang 0.5.23 does: a stop, from outside the console."""
    d, model = sim
    async with sim_link(runs_dir, d) as link:
        r = await lifecycle.launch(link, LaunchRequest(
            host="local", command=[sys.executable, "-m", "console.sim.sglang"],
            flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port()), timeout=60)
        assert r.ok, r
        rec = json.loads((runs_dir / r.session_id / "record.json").read_text())
        await link.refresh()
        os.kill(rec["pid"], signal.SIGTERM)
        ended = await await_until(lambda: next((s for s in link.snapshot().sessions
                                                if s.session_id == r.session_id and s.exit is not None), None), 30)
        assert ended is not None, "the session's end should be seen"
    cfg = write_config(tmp_path / "config.toml", {"local": {"runs_dir": str(runs_dir), "python": sys.executable,
                                                            "gpu_source": "sim", "sim_dir": str(d)}})
    out = cli("sessions", "--host", "local", "--config", str(cfg), "--all", "--json")
    assert out.returncode == 0, out.stderr
    (row,) = [x for x in json.loads(out.stdout) if x["session_id"] == r.session_id]
    assert row["state"] == "stopped", row
    assert "from outside mtpconsole" in (row.get("hint") or ""), row


# ---------------------------------------------------------------- SGLANG_RUST_SERVER=1: no detokenizer, a scheduler
# child owns the port

async def test_a_rust_front_end_server_is_launched_confirmed_and_killed_like_any_other(sim, runs_dir):
    """With ``SGLANG_RUST_SERVER=1`` SGLang has no detokenizer process and its port belongs to the rank-0 scheduler
    (the stand-in does the same): every launch step, the port's owner and the confirmed kill hold for that shape."""
    d, model = sim
    port = free_port()
    async with sim_link(runs_dir, d) as link:
        r = await lifecycle.launch(link, LaunchRequest(
            host="local", command=[sys.executable, "-m", "console.sim.sglang"],
            flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=port,
            env={"SGLANG_RUST_SERVER": "1"}), timeout=60)
        assert r.ok, r
        snap = await lifecycle.fresh_snapshot(link)
        mine = [p for p in snap.servers if p.session_id == r.session_id]
        assert mine and not any("detokenizer" in " ".join(p.argv) for p in mine), [p.argv for p in mine]
        client = HostClient.of(link)
        owner = await client.port_owner(port)
        launcher = json.loads((runs_dir / r.session_id / "record.json").read_text())["pid"]
        assert owner is not None and owner.pid != launcher, owner  # not the launcher: a scheduler child holds it
        holder = next(p for p in mine if p.pid == owner.pid)
        assert holder.role == "worker" and "sglang::scheduler" in " ".join(holder.argv), holder
        assert (await client.http_get(port, "/health")).status == 200
        k = await lifecycle.kill(link, KillTarget(host="local", session_id=r.session_id), grace=10)
        assert k.ok, k
        assert not await client.port_open(port)


# ---------------------------------------------------------------- deprecated endpoints: never called

async def test_the_console_never_calls_a_deprecated_endpoint_alias(sim, runs_dir, tmp_path):
    """SGLang logs a warning on every ``/get_server_info`` / ``/get_model_info`` call (the stand-in does too): a
    launch, its confirmation, the agent's sampling and a report must leave no such line in the session's log."""
    d, model = sim
    async with sim_link(runs_dir, d) as link:
        r = await lifecycle.launch(link, LaunchRequest(
            host="local", command=[sys.executable, "-m", "console.sim.sglang"],
            flags=["--model-path", str(model), *FIXED_FLAGS, "--enable-metrics"], gpus=[0], port=free_port()),
            timeout=60)
        assert r.ok, r
        for _ in range(4):
            await link.refresh()
        cfg = write_config(tmp_path / "config.toml", {"local": {"runs_dir": str(runs_dir), "python": sys.executable,
                                                                "gpu_source": "sim", "sim_dir": str(d)}})
        rep = cli("report", "--host", "local", "--config", str(cfg), r.session_id, "--out", str(tmp_path / "r.md"))
        assert rep.returncode == 0, rep.stderr
        log = runs_dir / r.session_id / "output.log"
        text = log.read_text(encoding="utf-8", errors="replace")
        assert "ready to roll" in text
        assert "is deprecated" not in text and "/get_server_info" not in text and "/get_model_info" not in text
        # the control: one call of the alias does leave the warning (the check above is not vacuous)
        spec = json.loads((runs_dir / r.session_id / "spec.json").read_text())
        assert (await HostClient.of(link).http_get(int(spec["port"]), "/get_server_info")).status == 200
        assert await await_until(lambda: "is deprecated" in log.read_text(encoding="utf-8", errors="replace"), 10)
        await lifecycle.kill(link, KillTarget(host="local", session_id=r.session_id), grace=10)
