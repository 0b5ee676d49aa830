"""``/server_info`` and ``/model_info`` (issue 28): probed, never a condition of READY, never the ``/get_*`` forms."""

from __future__ import annotations

import json
import sys

import pytest
from textual.content import Content

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


# ---------------------------------------------------------------- where the facts are shown (sessions, report, TUI)

FACTS = facts(1000.0, {"version": "0.5.23", "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                       "internal_states": [{"avg_spec_accept_length": 2.41}]},
              {"model_path": "/models/q", "served_model_name": "qwen", "architectures": ["Qwen3ForCausalLM"]})


def test_the_terse_line_carries_its_age_and_reads_stale_past_three_periods():
    from console.core.server_info import age_text, facts_line, facts_text

    assert facts_line(FACTS, 1012.0) == "sglang 0.5.23 · EAGLE 3 steps · accept 2.41 · 12s"
    old = 1000.0 + 3 * PROBE_EVERY_S + 30
    assert facts_line(FACTS, old) == "sglang 0.5.23 · EAGLE 3 steps · accept 2.41 · 2m stale"
    assert facts_line(FACTS, 990.0).endswith("· 0s")  # a clock behind the read: age 0, never negative
    assert [age_text(x) for x in (0.4, 59.9, 60, 7199, 7200, 86400 * 3)] == ["0s", "59s", "1m", "1h", "2h", "3d"]
    assert facts_text(facts(0.0, {"speculative_num_steps": 5}, None)) == "5 steps"
    assert facts_line(facts(0.0, None, None), 1.0) is None  # not offered: nothing shown
    assert facts_line(facts(0.0, {"new_field": 1}, {"model_path": "/m"}), 1.0) is None  # nothing terse to say
    assert facts_line(None, 1.0) is None


def test_the_gpu_panel_shows_a_ready_session_s_facts_muted_and_dims_them_when_stale():
    from console.model import GpuSample, SessionView
    from console.ui.widgets.gpu_panel import body_text, facts_content

    fresh, stale = facts_content(FACTS, 1012.0), facts_content(FACTS, 1000.0 + 3 * PROBE_EVERY_S + 1)
    assert fresh.plain == "sglang 0.5.23 · EAGLE 3 steps · accept 2.41 · 12s"
    assert [sp.style for sp in fresh.spans] == ["$text-muted"]
    assert stale.plain.endswith("1m stale") and [sp.style for sp in stale.spans] == ["$text-disabled"]
    assert facts_content(facts(0.0, None, None), 1.0).plain == "" and facts_content(None, 1.0).plain == ""
    g = GpuSample(index=0, name="Sim", mem_used_mib=1, mem_total_mib=2)
    ready = SessionView(host="h", session_id="s1", state="ready", gpus=[0], port=30000)
    assert fresh.plain in body_text(g, ready, {}, False, facts=fresh).plain.splitlines()
    assert fresh.plain not in body_text(g, ready, {}, True, facts=fresh).plain  # compact: four lines, no facts
    failed = ready.model_copy(update={"state": "failed"})
    assert fresh.plain not in body_text(g, failed, {}, False, facts=fresh).plain
    assert body_text(g, ready, {}, False).plain == body_text(g, ready, {}, False, facts=Content("")).plain


class _Answers:
    """A host whose server answers ``/server_info`` + ``/model_info`` while ``up`` (404 after); counts the GETs."""

    def __init__(self) -> None:
        self.up, self.paths = True, []

    async def http_get(self, port, path, timeout, audit=False):
        from console.model import HttpResult

        self.paths.append(path)
        if not self.up:
            return HttpResult(status=404, body="")
        return HttpResult(status=200, body=json.dumps({"version": "0.5.23", "speculative_num_steps": 3}))


async def test_the_tracker_s_probe_reads_every_ready_session_at_the_cadence_and_keeps_facts_that_then_age():
    """``every_session`` (the panels' accept length moves for any session): read again each period, never
    sooner; a read that offers nothing after one that did keeps the older facts (they age and go stale)."""
    client, now = _Answers(), [0.0]
    p = FactsProbe(every_s=30, every_session=True)
    f = await p.tick(client, "s", 1, [], clock=lambda: now[0])
    assert f is not None and f.version == "0.5.23" and len(client.paths) == 2
    now[0] = 29.0
    await p.tick(client, "s", 1, [], clock=lambda: now[0])
    assert len(client.paths) == 2  # not due: not read
    client.up, now[0] = False, 30.0
    kept = await p.tick(client, "s", 1, [], clock=lambda: now[0])
    assert kept is f and len(client.paths) == 4 and p.read_at["s"] == 30.0 and not p.due("s", [], 59.0)
    assert kept.stale(30.0 + 3 * 30 + 1)
    assert set(client.paths) == {"/server_info", "/model_info"}
    p.forget("s")
    assert p.due("s", [], 60.0) and "s" not in p.read_at


def test_the_report_s_summary_names_the_server_s_facts_with_their_age():
    from console.core.report import ReportInputs, build_report

    md = build_report(ReportInputs(host="h", session_id="s1", state="ready", generated_at=1012.0,
                                   server_facts=FACTS))
    row = next(line for line in md.splitlines() if line.startswith("| Server facts |"))
    assert "sglang 0.5.23 · EAGLE 3 steps · accept 2.41; model qwen; Qwen3ForCausalLM" in row
    assert "12s before this report" in row and "stale" not in row
    later = build_report(ReportInputs(host="h", session_id="s1", generated_at=2000.0, server_facts=FACTS))
    assert "before this report, stale" in later
    none = build_report(ReportInputs(host="h", session_id="s1", generated_at=1.0, server_facts=facts(0.0, None, None)))
    assert "| Server facts | not offered" in none
    assert "Server facts" not in build_report(ReportInputs(host="h", session_id="s1"))  # not read: no row


async def test_sessions_report_and_the_tracker_show_a_ready_stand_in_s_facts(sim, runs_dir, tmp_path):
    """A READY stand-in: ``sessions --json`` carries its ``server_facts`` (with ``age_s``, ``stale``) as ``status``
    does, the text names them in one line, ``report`` has a ``Server facts`` row, and the TUI's tracker carries
    them in ``HostView.server_facts``; no ``/get_*`` form called."""
    from console.ops.tracker import HostTracker
    from tests.helpers.rel_util import cli, write_config
    from tests.helpers.wait import await_until

    d, model = sim
    async with sim_link(runs_dir, d) as link:
        views: list = []
        tracker = HostTracker(link, interval=0.3, on_view=views.append, on_log=lambda *a: None)
        r = await lifecycle.launch(link, LaunchRequest(
            host="local", command=[sys.executable, "-m", "console.sim.sglang"],
            flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port()), timeout=60)
        assert r.ok, r
        sid = r.session_id
        assert await await_until(lambda: views and sid in views[-1].server_facts, 15), "no facts in the view"
        tf = views[-1].server_facts[sid]
        assert tf.version and tf.spec_num_steps == 3 and sid in tracker.facts.read_at
        cfg = write_config(tmp_path / "config.toml", {"local": {"runs_dir": str(runs_dir), "python": sys.executable,
                                                                "gpu_source": "sim", "sim_dir": str(d)}})
        js = cli("sessions", "--host", "local", "--config", str(cfg), "--json")
        assert js.returncode == 0, js.stderr
        mine = next(v for v in json.loads(js.stdout) if v["session_id"] == sid)
        sf = mine["server_facts"]
        assert sf["offered"] and sf["version"] and sf["model_path"] == str(model) and sf["spec_num_steps"] == 3
        assert sf["speculative_algorithm"] == "EAGLE" and sf["age_s"] >= 0 and sf["stale"] is False
        text = cli("sessions", "--host", "local", "--config", str(cfg))
        assert text.returncode == 0, text.stderr
        lines = text.stdout.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(sid))
        assert lines[at + 1].strip().startswith(f"sglang {sf['version']} · EAGLE 3 steps · accept "), lines
        out = tmp_path / "r.md"
        rep = cli("report", "--host", "local", "--config", str(cfg), "--out", str(out), "--json", sid)
        assert rep.returncode == 0, rep.stderr
        assert json.loads(rep.stdout)["server_facts"]["version"] == sf["version"]
        row = next(line for line in out.read_text().splitlines() if line.startswith("| Server facts |"))
        assert f"sglang {sf['version']} · EAGLE 3 steps" in row and "before this report" in row
        log = (runs_dir / sid / "output.log").read_text(encoding="utf-8", errors="replace")
        assert "is deprecated" not in log and not any(p in log for p in DEPRECATED_PATHS)
        k = await lifecycle.kill(link, KillTarget(host="local", session_id=sid), grace=10)
        assert k.ok, k


async def test_the_panel_of_a_ready_gpu_shows_its_server_s_facts_and_they_age_to_stale_on_screen():
    """The view's ``server_facts`` of GPU 0/1's READY session: one line on both panels with its age, which the
    once-a-second age tick moves on (no new view needed) to ``stale``; other GPUs show none."""
    from console.ui.widgets.gpu_panel import GpuPanel
    from tests.helpers.wait import until
    from tests.ui_fakes import NOW, FakeBackend, frozen_app, started, view_a

    clock = [NOW]
    f = facts(NOW - 12, {"version": "0.5.23", "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                         "internal_states": [{"avg_spec_accept_length": 2.41}]}, None)
    app = frozen_app(FakeBackend([view_a().model_copy(update={"server_facts": {"s-ready": f}})]))
    app.clock = lambda: clock[0]
    async with app.run_test(size=(140, 60)) as pilot:
        await started(pilot)
        panels = {p.index: p for p in app.query(GpuPanel) if p.host == "host-a"}
        line = "sglang 0.5.23 · EAGLE 3 steps · accept 2.41 · 12s"
        await until(pilot, lambda: all(line in panels[i].body.plain.splitlines() for i in (0, 1)))
        assert not any("sglang 0.5.23" in panels[i].body.plain for i in (2, 3))
        clock[0] = NOW + 100
        await until(pilot, lambda: "accept 2.41 · 1m stale" in panels[0].body.plain, what=lambda: panels[0].body)
