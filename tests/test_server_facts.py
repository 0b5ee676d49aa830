"""``/server_info`` and ``/model_info`` (issue 28): probed, never a condition of READY, never the ``/get_*`` forms."""

from __future__ import annotations

import json
import sys

import pytest

from console.core.server_info import DEPRECATED_PATHS, PROBE_EVERY_S, facts, json_object
from console.link.client import HostClient
from console.model import KillTarget, LaunchRequest
from console.ops import lifecycle
from console.ops.server_facts import FactsProbe, adaptive, probe
from console.sim.demo import FIXED_FLAGS
from tests.conftest import free_port
from tests.helpers.sim_files import make_sim, sim_link


@pytest.mark.parametrize("body", ["", "not json", "[1, 2]", "null", '"x"', "{" * 5000, b"\xff\xfe"])
def test_garbage_reads_as_not_offered(body):
    assert json_object(200, body) is None
    f = facts(1.0, json_object(200, body), None)
    assert not f.offered and f.version is None and f.avg_spec_accept_length is None


def test_missing_unknown_and_wrongly_typed_fields_are_absent_not_errors():
    si = {"version": 5, "speculative_num_steps": "3", "speculative_algorithm": ["EAGLE"], "new_field": {"x": 1},
          "internal_states": [{"avg_spec_accept_length": float("nan")}, "rank", {"avg_spec_accept_length": True}]}
    mi = {"architectures": "Qwen3ForCausalLM", "served_model_name": None, "model_path": ""}
    f = facts(2.0, si, mi)
    assert f.offered and f.server_info_offered and f.model_info_offered
    assert (f.version, f.spec_num_steps, f.speculative_algorithm, f.avg_spec_accept_length) == (None,) * 4
    assert (f.architectures, f.served_model_name, f.model_path) == ((), None, None)
    assert facts(0.0, {"internal_states": "x"}, {}).avg_spec_accept_length is None


def test_accept_length_is_averaged_over_the_ranks_that_report_it_and_ages():
    f = facts(100.0, {"version": "0.5.23", "speculative_num_steps": 3,
                      "internal_states": [{"avg_spec_accept_length": 2.0}, {"avg_spec_accept_length": 3.0}, {}]},
              {"served_model_name": "qwen", "architectures": ["Qwen3ForCausalLM", 7]})
    assert (f.version, f.spec_num_steps, f.avg_spec_accept_length) == ("0.5.23", 3, 2.5)
    assert f.architectures == ("Qwen3ForCausalLM",) and f.served_model_name == "qwen"
    assert f.age(110.0) == 10.0 and not f.stale(110.0) and f.stale(100.0 + 3 * PROBE_EVERY_S + 1)


def test_only_an_adaptive_session_is_read_again_at_the_cadence():
    p = FactsProbe(every_s=30)
    p.latest["a"] = p.latest["b"] = facts(0.0, None, None)
    assert adaptive(["--speculative-adaptive"]) and not adaptive(["--speculative-num-steps", "3"])
    assert p.due("new", [], 0.0)
    assert not p.due("a", ["--speculative-adaptive"], 29.0) and p.due("a", ["--speculative-adaptive"], 30.0)
    assert not p.due("b", ["--speculative-num-steps", "3"], 1000.0)


@pytest.fixture
def sim(tmp_path):
    return make_sim(tmp_path, gpus=1, tag="facts")


@pytest.mark.parametrize("fault", ["", "no_info"])
async def test_the_stand_in_s_facts_appear_and_a_server_without_them_is_ready_as_before(sim, runs_dir, fault):
    """A READY stand-in: its version, model and spec figures are read; the ``no_info`` variant (404 on both, as
    an older release) is READY all the same and reads as not offered, no error. Neither leaves a deprecation
    warning in the server's log (the console called no ``/get_*`` form)."""
    d, model = sim
    async with sim_link(runs_dir, d) as link:
        r = await lifecycle.launch(link, LaunchRequest(
            host="local", command=[sys.executable, "-m", "console.sim.sglang"],
            flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port(),
            env={"MTPCONSOLE_SIM_FAULT": fault} if fault else {}), timeout=60)
        assert r.ok, r
        spec = json.loads((runs_dir / r.session_id / "spec.json").read_text())
        client = HostClient.of(link)
        f = await FactsProbe().tick(client, r.session_id, int(spec["port"]), FIXED_FLAGS)
        assert f is not None
        if fault:
            assert not f.offered and f.version is None and f.spec_num_steps is None
            assert (await client.http_get(int(spec["port"]), "/health")).status == 200
        else:
            assert f.server_info_offered and f.model_info_offered
            assert f.version and f.model_path == str(model) and f.served_model_name and f.architectures
            assert f.speculative_algorithm == "EAGLE" and f.spec_num_steps == 3
            assert f.avg_spec_accept_length is not None and f.avg_spec_accept_length > 1
            again = await probe(client, int(spec["port"]))
            assert again.at >= f.at
        text = (runs_dir / r.session_id / "output.log").read_text(encoding="utf-8", errors="replace")
        assert "is deprecated" not in text and not any(p in text for p in DEPRECATED_PATHS)
        k = await lifecycle.kill(link, KillTarget(host="local", session_id=r.session_id), grace=10)
        assert k.ok, k


async def test_status_json_shows_each_ready_session_s_facts_with_their_age(sim, runs_dir, tmp_path):
    """``status --json``: a READY session's figures carry ``server_facts`` (version, model, spec, age)."""
    from tests.helpers.rel_util import cli, write_config

    d, model = sim
    async with sim_link(runs_dir, d) as link:
        r = await lifecycle.launch(link, LaunchRequest(
            host="local", command=[sys.executable, "-m", "console.sim.sglang"],
            flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port()), timeout=60)
        assert r.ok, r
        cfg = write_config(tmp_path / "config.toml", {"local": {"runs_dir": str(runs_dir), "python": sys.executable,
                                                                "gpu_source": "sim", "sim_dir": str(d)}})
        st = cli("status", "--host", "local", "--config", str(cfg), "--json")
        assert st.returncode == 0, st.stderr
        figs = json.loads(st.stdout)["hosts"][0]["figures"]
        mine = next(f for f in figs if f["session_id"] == r.session_id)
        sf = mine["server_facts"]
        assert sf["offered"] and sf["version"] and sf["model_path"] == str(model) and sf["spec_num_steps"] == 3
        assert sf["age_s"] >= 0 and sf["stale"] is False
        text = (runs_dir / r.session_id / "output.log").read_text(encoding="utf-8", errors="replace")
        assert "is deprecated" not in text
        k = await lifecycle.kill(link, KillTarget(host="local", session_id=r.session_id), grace=10)
        assert k.ok, k
