"""Pure UI helpers: sanitising, badges and staleness, flag form values, argv round trips."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from ui_fakes import ARGV, NOW, failed, foreign, ready, session, snapshot

from console.core.current import current_by_gpu
from console.ui.flag_values import FlagValues, field_errors, flag_diff, from_argv, split_argv
from console.ui.format import MAX_LINE, age_text, clean
from console.ui.widgets.badge import badge_for, staleness


@pytest.mark.parametrize("raw, want", [
    ("\x1b[1;31mred\x1b[0m", "red"),
    ("a\x1b]0;pwned\x07b", "ab"),
    ("a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),
    ("bell\x07 nul\x00 del\x7f c1\x9b2J", "bell nul del c1"),
    ("progress 10%\rprogress 50%\r", "progress 50%"),
    ("tab\there", "tab    here"),
    ("rtl\u202eevil", "rtlevil"),
    ("\x1bc reset", " reset"),
])
def test_clean_neutralises_terminal_control(raw, want):
    assert clean(raw) == want


def test_clean_truncates_long_lines():
    out = clean("y" * 90_000)
    assert out.startswith("y" * MAX_LINE) and out.endswith("… [+88000 chars]")


def test_age_text():
    assert [age_text(x) for x in (None, 0.42, 12.4, 300, 10_000)] == ["N/A", "0.4 s", "12 s", "5 min", "3 h"]


@pytest.mark.parametrize("age, state, want", [
    (0.4, "connected", "fresh"), (3.5, "connected", "amber"), (11, "connected", "red"),
    (0.4, "reconnecting", "red"), (0.4, "unreachable", "red"),
])
def test_staleness(age, state, want):
    assert staleness(snapshot(age=age, state=state), NOW, 1.0) == want


def test_staleness_uses_the_interval():
    assert staleness(snapshot(age=5), NOW, 2.0) == "fresh"
    assert staleness(snapshot(age=7), NOW, 2.0) == "amber"


@pytest.mark.parametrize("sess, snap_kw, want", [
    (None, {}, ("IDLE", "idle")),
    (ready(), {}, ("READY", "ready")),
    (ready(), {"age": 5}, ("STALE", "stale")),
    (ready(), {"state": "unreachable"}, ("UNREACHABLE", "unreachable")),
    (failed(), {"age": 30}, ("FAILED: gpu_oom", "failed")),
    (session("launching", "s", [0], step=3), {}, ("LAUNCHING 3/6", "launching")),
    (session("loading", "s", [0]), {}, ("LOADING", "loading")),
    (session("stopping", "s", [0]), {}, ("STOPPING", "stopping")),
    (session("stopped", "s", [0]), {}, ("STOPPED", "stopped")),
    (foreign(), {}, ("FOREIGN", "foreign")),
    (session("failed", "s", [0]), {}, ("FAILED: unknown", "failed")),
])
def test_badge_for(sess, snap_kw, want):
    assert badge_for(sess, snapshot(**snap_kw), NOW, 1.0) == want


def test_current_session_prefers_a_launch_then_live_sessions():
    def session_for_gpu(sessions, idx):
        return current_by_gpu(sessions, [idx])[0].session

    old = failed(gpus=(0,), sid="s-old")
    live = session("launching", "s-live", [0], step=2)
    assert session_for_gpu([old, live, ready()], 0).session_id == "s-live"
    assert session_for_gpu([old], 0).session_id == "s-old"
    assert session_for_gpu([ready()], 1).session_id == "s-ready"
    assert session_for_gpu([ready()], 5) is None


def test_form_values_round_trip_a_running_command_line():
    raw = from_argv(ARGV, [0, 1], 30000)
    v = FlagValues(**raw)
    assert v.spec_algo == "EAGLE" and v.num_steps == 3 and v.mem_fraction == 0.85 and v.tp_size == 2
    assert v.command == ["python3", "-m", "sglang.launch_server"]
    assert flag_diff(ARGV, v.to_flags()) == []  # nothing lost, nothing invented
    assert sorted(v.to_flags()) == sorted(split_argv(ARGV)[1])


def test_unknown_and_renamed_flags_go_to_extras_verbatim():
    raw = from_argv(["sglang", "serve", "--model", "/m", "--enable-hicache", "--mamba-scheduler-strategy",
                     "extra_buffer", "--cuda-graph-max-bs=512", "--x", "a b"], [0])
    v = FlagValues(**raw)
    assert v.model_path == "/m" and v.hicache and v.command == ["sglang", "serve"]
    assert v.extra_args() == ["--mamba-scheduler-strategy", "extra_buffer", "--cuda-graph-max-bs", "512",
                              "--x", "a b"]
    assert v.to_flags()[:3] == ["--model-path", "/m", "--enable-hierarchical-cache"]


@pytest.mark.parametrize("field, value, msg", [
    ("mem_fraction", "0", "must be in (0, 1]"),
    ("mem_fraction", "1.01", "must be in (0, 1]"),
    ("mem_fraction", "abc", "Input should be a valid number"),
    ("max_running", "-4", "must be a positive integer"),
    ("num_steps", "0", "must be a positive integer"),
    ("port", "0", "must be 1–65535"),
    ("port", "65536", "must be 1–65535"),
    ("context_length", "12q", "a positive integer, optionally with k or m"),
    ("model_path", "  ", "a model path is required"),
    ("model_path", "/m\n--evil", "NUL and line breaks are not allowed"),
    ("extras", "--a\x00b", "NUL and line breaks are not allowed"),
    ("extras", "--a 'open", "cannot split: No closing quotation"),
    ("gpus", "0,0", "distinct GPU indices"),
    ("spec_algo", "MEDUSA", "Input should be"),
])
def test_form_errors_are_specific(field, value, msg):
    raw = {"model_path": "/m", "gpus": "0", field: value}
    with pytest.raises(ValidationError) as e:
        FlagValues(**raw)
    assert field_errors(e.value)[field].startswith(msg)


def test_form_values_to_flags_and_tp_consistency():
    v = FlagValues(model_path="/m", gpus="0,1", tp_size="2", spec_algo="NEXTN", mem_fraction="0.80",
                   context_length="128k", hicache=True, hicache_size="200", mamba_strategy="extra_buffer",
                   extras="--served-model-name 'my model'")
    assert v.to_flags() == ["--model-path", "/m", "--speculative-algorithm", "NEXTN", "--mem-fraction-static", "0.8",
                            "--context-length", "128k", "--enable-hierarchical-cache", "--hicache-size", "200",
                            "--mamba-radix-cache-strategy", "extra_buffer", "--tp-size", "2",
                            "--served-model-name", "my model"]
    with pytest.raises(ValidationError) as e:
        FlagValues(model_path="/m", gpus="0", tp_size="2")
    assert field_errors(e.value)[""] == "tp size 2 needs 2 GPUs, 1 given"


def test_flag_diff():
    assert flag_diff(["--a", "1", "--b", "--c", "x"], ["--a", "2", "--b", "--d", "y"]) == [
        "- --a 1", "+ --a 2", "- --c x", "+ --d y"]


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x30F), max_size=3000))
def test_clean_never_leaks_control_characters(s):
    out = clean(s)
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in out)
    assert len(out) <= MAX_LINE + 30


def test_the_themes_folder_is_what_the_app_loads():
    """themes/ at the top of the repository is the one copy of the TCSS (installs ship it as console/themes/)."""
    from pathlib import Path

    from console.ui.themes import NAMES, css_paths, themes_dir

    repo = Path(__file__).resolve().parents[1]
    assert themes_dir() == repo / "themes" and all(p.is_file() for p in css_paths())
    assert sorted(p.name for p in (repo / "themes").glob("*.tcss")) == sorted(["base.tcss"] + [f"{n}.tcss"
                                                                                           for n in NAMES])
    assert not (repo / "console" / "ui" / "tcss").exists() and not (repo / "console" / "themes").exists()


def test_spark_is_on_an_absolute_scale():
    from console.ui.widgets.gpu_panel import spark_text

    assert spark_text([80.0, 81.0, 79.0], 600.0, 10) == "▂▂▂"  # 1 W of noise stays flat
    assert spark_text([0.0, 300.0, 600.0, 700.0], 600.0, 3) == "▅██"  # newest on the right, clipped
    assert spark_text([], 600.0, 5) == "" and spark_text([1.0], None, 0) == ""


def test_form_hook_helpers():
    from console.ui.screens.flag_form import as_findings, takes_host

    assert takes_host(lambda flags, host=None: 0) and takes_host(lambda flags, **kw: 0)
    assert not takes_host(lambda flags: 0) and not takes_host(len)
    assert as_findings("fits", "plan") == [("plan", "fits")]
    assert as_findings(("error", "does not fit"), "plan") == [("error", "does not fit")]
    assert as_findings([("warning", "x"), ("note", "y")], "plan") == [("warning", "x"), ("note", "y")]
    assert as_findings(None, "plan") == [] and as_findings([], "note") == []


def test_zombie_foreign_servers_are_not_shown():
    from ui_fakes import proc, snapshot

    from console.core.sessions import derive_views

    z = proc(5150, ["python", "-m", "sglang.launch_server"], None, {3: 0}).model_copy(update={"state": "Z"})
    assert derive_views(snapshot(servers=[z]), {}, NOW) == []  # a zombie is not a server
    assert [v.state for v in derive_views(snapshot(servers=[z.model_copy(update={"state": "S"})]), {}, NOW)] \
        == ["foreign"]


async def test_live_backend_form_hooks(tmp_path, monkeypatch):
    """LiveBackend.validator learns the host's --help once (in the background) and checks flags with it;
    planner turns the memory verdict into form findings; both answer without a host too."""
    import asyncio
    from pathlib import Path

    from console.config import Config
    from console.ops import lifecycle
    from console.ops.backend import LiveBackend
    from tests.helpers.wait import await_until

    help_text = (Path(__file__).resolve().parents[1] / "console" / "data"
                 / "sglang-0.5.23-launch-server-help.txt").read_text()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    runs = []

    class Link:
        name = "demo"

        async def request(self, op, args, timeout=None, audit=True):
            runs.append(args["argv"])
            if args["argv"][-1] == "--help":
                await asyncio.sleep(0.2)
                return {"rc": 0, "stdout": help_text, "stderr": ""}
            return {"rc": 0, "stdout": "0.5.23\n", "stderr": ""}

    be = LiveBackend(Config(), [])
    assert await be.validator(["--port", "1"]) == [("warning", "flags not checked: no host connection yet")]
    assert await be.planner(["--port", "1"], [0]) is None
    be.links["demo"] = Link()
    be.LEARN_WAIT_S = 0.05
    first = await be.validator(["--bogus-flag", "1"], host="demo")
    assert first[0][0] == "note" and "learning the server's --help" in first[0][1]
    async def learned():  # the check says no more that it is learning: the host's --help is known
        found = await be.validator(["--bogus-flag", "1", "--port", "30000"], host="demo")
        return None if found and found[0][0] == "note" else found
    found = await await_until(learned, 10)
    assert found and any(sev == "error" and "--bogus-flag" in msg for sev, msg in found), found
    ok = await be.validator(["--model-path", "/m", "--port", "30000"], host="elsewhere")  # unknown: the first
    assert ok[0][0] == "ok"
    assert sum(a[-1] == "--help" for a in runs) == 1  # learned once

    async def verdict(link, req, snap=None, *, count_use=False):
        return {"512": ("does_not_fit", "no room for the KV cache"), "16": ("fits", "fits")}.get(req.flags[-1], (None, "no --model-path"))
    monkeypatch.setattr(lifecycle, "memory_verdict", verdict)
    assert await be.planner(["--max-running-requests", "512"], [0], host="demo") == \
        ("error", "memory plan: does not fit — no room for the KV cache")
    assert await be.planner(["--max-running-requests", "16"], [0], host="demo") == "memory plan: fits"
    assert await be.planner(["--x", "1"], [0], host="demo") == "not planned: no --model-path"
