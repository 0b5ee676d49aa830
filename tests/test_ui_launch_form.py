"""The launch form (issue 26): a profile fills flags and never moves the GPU, the title follows the GPUs field,
the form starts from the GPU's last session (else the host's defaults, never a profile), the picker says which
profile is applied and what each one is, Check runs at open and counts the GPUs' current use, one key applies the
planner's fix and, after a passing Check, one key launches; tabbing into "other flags" keeps its text.

Pilot tests against the fake backend (tests/ui_fakes.py) with the real memory planner where the plan matters; the
GPU accounting the form's Check shows is tested once more through the live backend on a real local host with
simulated GPUs, an orphan and another session holding them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

from textual.widgets import Button, Input, OptionList, Select, Static, Switch
from ui_fakes import ARGV, FakeBackend, frozen_app, session, started, toasts, view_idle

from console.config import Config, HostConfig, Profile
from console.core.model_config import parse_model_config
from console.core.planner import MIB, parse_server_flags, plan
from console.model import HostView, LaunchRequest
from console.sim.demo import FIXED_FLAGS, INCIDENT_FLAGS, MODEL_CONFIG
from console.ui.screens.flag_form import FlagForm
from console.ui.widgets.gpu_panel import GpuPanel
from tests.helpers.wait import until

SIZE = (140, 60)
MODEL = "/models/Qwen3.6-27B"
DEMO_GPU = 97887 * MIB


def incident_argv() -> list[str]:
    return ["python3", "-m", "sglang.launch_server", "--model-path", MODEL, *INCIDENT_FLAGS, "--port", "30001"]


def profiles() -> dict[str, LaunchRequest]:
    """The demo's two profiles, the incident's first (it used to fill every form), both on GPU 0."""
    return {
        "incident": LaunchRequest(host="", flags=["--model-path", MODEL, *INCIDENT_FLAGS], gpus=[0], port=31000,
                                  profile="incident", description="the incident's relaunch: does not fit"),
        "fixed": LaunchRequest(host="", flags=["--model-path", MODEL, *FIXED_FLAGS], gpus=[0], port=31500,
                               profile="fixed", env={"SGLANG_X": "1"}, description="16 running requests: fits"),
    }


def idle_with(*sessions) -> HostView:
    """host-a's four idle GPUs, with these sessions (ended ones: the GPUs read FAILED/STOPPED)."""
    return HostView(snapshot=view_idle(n=4).snapshot, sessions=list(sessions))


def real_planner(flags: list[str], gpus: list[int], host: str | None = None, count_use: bool = False):
    """The console's memory planner on the demo's model and GPUs, as the live backend words its verdict."""
    p = plan(parse_model_config(MODEL_CONFIG), parse_server_flags(flags), DEMO_GPU, n_gpus=len(gpus))
    text = "; ".join(p.reasons + p.advice)
    if p.verdict == "does_not_fit":
        return ("error", f"memory plan: does not fit — {text}")
    if p.verdict == "tight":
        return ("warning", f"memory plan: tight — {text}")
    return "memory plan: fits"


def panel(app, index: int) -> GpuPanel:
    return next(p for p in app.query(GpuPanel) if p.index == index)


async def open_form(app, pilot, index: int, key: str = "l") -> FlagForm:
    """Select GPU ``index``, press ``key``; the form once its Check run at open is done."""
    await started(pilot)
    panel(app, index).focus()
    await until(pilot, lambda: panel(app, index).has_class("selected"))
    await pilot.press(key)
    await until(pilot, lambda: isinstance(app.screen, FlagForm) and not app.screen.opening)
    return app.screen


def field(form: FlagForm, name: str) -> str:
    return form.query_one(f"#f-{name}", Input).value


def text(form: FlagForm, selector: str) -> str:
    return str(form.query_one(selector, Static).render())


def label(form: FlagForm) -> str:
    return str(form.query_one("#launch", Button).label)


def launches(be: FakeBackend) -> list[LaunchRequest]:
    return [c[1] for c in be.calls if c[0] == "launch"]


async def test_a_profile_fills_flags_and_never_moves_the_gpu_and_the_title_follows_the_gpus_field():
    """Bug 2: on GPU 1, choosing profile ``fixed`` (made for GPU 0) fills its model, flags and port; the GPUs field
    stays 1 and the title says GPU 1; the operator's change of the field moves the title and the launch."""
    be = FakeBackend([idle_with()])
    be.profiles = profiles()
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(app, pilot, 1)
        assert form.title_text == "Launch on host-a · GPU 1" and field(form, "gpus") == "1"
        form.query_one("#profile", Select).value = "fixed"
        await until(pilot, lambda: field(form, "max_running") == "16" and not form.opening)
        assert field(form, "gpus") == "1" and form.title_text == "Launch on host-a · GPU 1"
        assert field(form, "model_path") == MODEL and field(form, "port") == "31500"  # the profile names its port
        assert "fixed: 16 running requests: fits" in text(form, "#profile-note")
        form.query_one("#f-gpus", Input).value = "2"
        await until(pilot, lambda: form.title_text == "Launch on host-a · GPU 2")
        assert "GPU 2" in text(form, "#form-title")
        form.query_one("#f-gpus", Input).value = "2,3"
        await until(pilot, lambda: form.title_text == "Launch on host-a · GPUs 2,3")
        form.query_one("#f-gpus", Input).value = "2,x"  # while the field does not parse: its last GPUs
        await until(pilot, lambda: form.query_one("#f-gpus", Input).value == "2,x")
        assert form.title_text == "Launch on host-a · GPUs 2,3"
        form.query_one("#f-gpus", Input).value = "2"
        await until(pilot, lambda: label(form) == "Launch" and form.title_text.endswith("GPU 2"))
        await pilot.press("ctrl+l")  # checks
        await until(pilot, lambda: label(form) == "Confirm launch")
        await pilot.press("ctrl+l")
        (req,) = await until(pilot, lambda: launches(be))
        assert req.gpus == [2] and req.port == 31500 and req.profile == "fixed" and req.env == {"SGLANG_X": "1"}
        i = req.flags.index("--max-running-requests")
        assert req.flags[i + 1] == "16"


async def test_the_picker_shows_each_profiles_description():
    be = FakeBackend([idle_with()])
    be.profiles = {**profiles(), "bare": LaunchRequest(host="", flags=["--model-path", "/m", "--tp-size", "1"])}
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(app, pilot, 1)
        picker = form.query_one("#profile", Select)
        picker.focus()
        await pilot.press("enter")
        options = await until(pilot, lambda: form.query(OptionList) and form.query_one(OptionList))
        prompts = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert "incident — the incident's relaunch: does not fit" in prompts
        assert "fixed — 16 running requests: fits" in prompts
        assert "bare · --model-path /m --tp-size 1" in prompts  # no description: its flags
        await pilot.press("escape")


async def test_the_form_starts_from_the_gpus_last_session_never_from_a_profile():
    """Bug 3: with the incident's profile configured first, the form on GPU 2 (its last session FAILED) holds that
    session's flags, the picker reads none and says where the fields came from; a GPU that never ran holds the
    host's defaults; a last session whose flags are a profile's shows that profile in the picker."""
    be = FakeBackend()  # view_a: GPU 2's last session s-failed ran ARGV
    be.profiles = profiles()
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(app, pilot, 2)
        assert field(form, "mem_fraction") == "0.85" and field(form, "max_running") == "48"  # s-failed's, not 0.90/512
        assert field(form, "gpus") == "2" and field(form, "model_path") == "/models/demo-27b"
        assert form.query_one("#profile", Select).value is Select.NULL and form.applied is None
        assert "the fields hold the flags of GPU 2's last session (s-failed, FAILED)" in text(form, "#profile-note")

    be = FakeBackend([idle_with()])
    be.profiles = profiles()
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(app, pilot, 3)
        assert field(form, "max_running") == "" and field(form, "mem_fraction") == "0.85"  # the template's
        assert form.query_one("#profile", Select).value is Select.NULL
        assert "the fields hold host-a's defaults" in text(form, "#profile-note")

    fixed = ["python3", "-m", "sglang.launch_server", "--model-path", MODEL, *FIXED_FLAGS, "--port", "30001"]
    be = FakeBackend([idle_with(session("stopped", "s-fixed", [1], argv=fixed, ended_at=1.0))])
    be.profiles = profiles()
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(app, pilot, 1)
        assert form.query_one("#profile", Select).value == "fixed" and form.applied == "fixed"
        assert field(form, "port") == "30001"  # the session's port: the picker shows it, it did not fill
        assert "its flags fill the fields" in text(form, "#profile-note")
        form.query_one("#f-max_running", Input).value = "12"
        await until(pilot, lambda: "edited since it filled the fields" in text(form, "#profile-note"))


def test_the_live_backend_template_is_the_hosts_defaults_never_a_profile():
    from console.ops.backend import LiveBackend

    cfg = Config(hosts={"h": HostConfig(server_command=["srv"])},
                 profiles={"incident": Profile(host="h", model_path="/m", flags=["--max-running-requests", "512"],
                                               gpus=[0, 1], description="bad")})
    be = LiveBackend(cfg, [])
    for gpu in (0, 1, 2):
        assert be.launch_template("h", gpu) == LaunchRequest(host="h", command=["srv"], gpus=[gpu], port=30000 + gpu)
    assert be.launch_profiles("h")["incident"].description == "bad"


async def test_check_at_open_then_one_key_applies_the_planners_fix_and_one_key_launches():
    """One pass: the form on the incident's FAILED session checks at once (no key pressed) with the real planner:
    does not fit, and the fix names a bound; ctrl+f sets the field to it and checks again: it fits, with every
    other flag as given (--context-length 32768 included); then one key launches."""
    be = FakeBackend([idle_with(session("failed", "s-inc", [1], argv=incident_argv(), cause="gpu_oom",
                                        ended_at=1.0))])
    asked = []

    def planner(flags, gpus, host=None, count_use=False):
        asked.append((list(flags), list(gpus), count_use))
        return real_planner(flags, gpus)
    be.planner = planner
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(app, pilot, 1)
        assert asked and asked[0][1:] == ([1], True)  # at open, counting what the GPU holds now
        status = text(form, "#check-status")
        assert "memory plan: does not fit" in status and "ctrl+f" in status
        assert label(form) == "Launch" and field(form, "max_running") == "512"
        (fix,) = form.fixes
        assert fix.flag == "--max-running-requests" and fix.then == "fits"
        assert f"ctrl+f applies the planner's fix: lower --max-running-requests to ≤ {fix.value}" in text(form, "#checks")
        await pilot.press("ctrl+f")
        await until(pilot, lambda: field(form, "max_running") == fix.value and label(form) == "Confirm launch")
        assert "✓ checked: nothing blocks this launch" in text(form, "#check-status")
        assert "memory plan: fits" in text(form, "#checks")
        await pilot.press("ctrl+l")  # one key
        (req,) = await until(pilot, lambda: launches(be))
        assert req.gpus == [1] and req.flags[req.flags.index("--max-running-requests") + 1] == fix.value
        assert "--context-length" in req.flags and "--enable-hierarchical-cache" in req.flags  # the rest as given
        assert real_planner(req.flags, req.gpus) == "memory plan: fits"


async def test_launch_is_one_key_after_a_passing_check_and_checks_again_after_an_edit():
    be = FakeBackend([idle_with()])
    be.planner = lambda flags, gpus: "memory plan: fits"
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(app, pilot, 0)
        assert label(form) == "Confirm launch" and "memory plan: fits" in text(form, "#checks")
        form.query_one("#f-mem_fraction", Input).value = "0.8"
        await until(pilot, lambda: label(form) == "Launch" and not form.query_one("#checks", Static).display)
        form.query_one("#f-mem_fraction", Input).value = "0.85"  # back to what was checked: still checked
        await until(pilot, lambda: label(form) == "Launch")
        form.query_one("#f-mem_fraction", Input).value = "0.8"
        await pilot.press("ctrl+r")  # a passing Check arms too
        await until(pilot, lambda: label(form) == "Confirm launch")
        form.query_one("#f-port", Input).focus()
        await pilot.press("enter")  # one key
        (req,) = await until(pilot, lambda: launches(be))
        assert req.flags[req.flags.index("--mem-fraction-static") + 1] == "0.8"


async def test_a_form_that_stops_a_server_checks_at_open_but_launch_still_asks_once():
    """e on a READY session: Check runs at open (no GPU accounting: the server there is the one it replaces); the
    relaunch kills it, so Launch asks once more even after the opening Check passed."""
    be = FakeBackend()
    seen = []
    be.gpu_check = lambda flags, gpus: seen.append(gpus) or []
    be.planner = lambda flags, gpus, count_use=False: seen.append(("plan", count_use)) or "memory plan: fits"
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(app, pilot, 0, key="e")
        assert seen == [("plan", False)] and "memory plan: fits" in text(form, "#checks")
        assert label(form) == "Launch" and "it stops the server above" in text(form, "#check-status")
        await pilot.press("ctrl+l")
        await until(pilot, lambda: label(form) == "Confirm launch")
        await pilot.press("ctrl+l")
        await until(pilot, lambda: any(c[0] == "relaunch" for c in be.calls))


async def test_check_counts_what_holds_the_gpu_and_force_does_not_override_a_refusal():
    """The form's Check asks the GPU check (the launch's preflight, nothing launched) for the form's GPUs: an orphan
    holding the GPU is an error force does not lift (force is for the memory plan only)."""
    be = FakeBackend([idle_with()])
    asked = []

    async def gpu_check(flags, gpus, host=None):
        asked.append((gpus, host))
        return [("error", "the host's preflight: GPUs free: GPU 1 has compute processes: pid 4242 (40000 MiB)"),
                ("warning", "GPU 1 now: 41,000 of 97,887 MiB in use — orphan pid 4242 (sglang::scheduler) holding "
                            "40,000 MiB on GPU 1 — kill with o in the console or 'mtpconsole orphans --kill PID'")]
    be.gpu_check = gpu_check
    be.planner = lambda flags, gpus: ("error", "memory plan: does not fit — no room for the KV cache")
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(app, pilot, 1)
        assert asked == [([1], "host-a")]
        checks = text(form, "#checks")
        assert "GPU 1 has compute processes: pid 4242" in checks and "orphan pid 4242" in checks
        assert "✗" in text(form, "#check-status") and "(+1 more below)" in text(form, "#check-status")
        form.query_one("#force", Switch).value = True
        await pilot.press("ctrl+l")
        await until(pilot, lambda: len(asked) == 2 and "(forced)" in text(form, "#checks"))
        assert label(form) == "Launch" and not launches(be)  # the plan is forced, the GPU is not free


async def test_tabbing_into_other_flags_keeps_its_text():
    argv = [*ARGV[:3], "--model-path", "/models/m", "--enable-metrics", "--api-key-file", "/k"]
    be = FakeBackend([idle_with(session("stopped", "s-x", [1], argv=argv, ended_at=1.0))])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(app, pilot, 1)
        extras = form.query_one("#f-extras", Input)
        assert extras.value == "--enable-metrics --api-key-file /k"
        form.query_one("#f-mamba_strategy", Select).focus()
        await pilot.press("tab")
        await until(pilot, lambda: app.focused is extras)
        assert extras.selection.is_empty
        await pilot.press("end", "space", *"--x", "space", "1")
        await until(pilot, lambda: extras.value == "--enable-metrics --api-key-file /k --x 1")
        other = form.query_one("#f-max_running", Input)
        other.focus()  # a number field still selects on focus: typing replaces it
        await until(pilot, lambda: app.focused is other)


async def test_the_fix_key_with_nothing_to_apply_says_so():
    be = FakeBackend([idle_with()])
    be.planner = lambda flags, gpus: "memory plan: fits"
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(app, pilot, 0)
        before = form.values()
        await pilot.press("ctrl+f")
        await until(pilot, lambda: any(t.startswith("no planner fix to apply") for t in toasts(app)))
        assert form.values() == before


async def test_the_form_draws_its_first_fields_first_then_every_field_in_order():
    """Its first frame has the first fields and the focus in the first (issue 26: l and e drew ~90 widgets before
    their first frame); the rest are mounted right after, in the fields' order, holding what the form was given;
    before they come the form's values are the ones they will be mounted with."""
    from console.ui.screens.flag_form import FIELDS, FIRST_FIELDS

    argv = [*ARGV[:3], "--model-path", "/models/m", "--speculative-algorithm", "EAGLE", "--enable-hierarchical-cache",
            "--max-running-requests", "16", "--enable-metrics"]
    be = FakeBackend([idle_with(session("stopped", "s-x", [1], argv=argv, ended_at=1.0))])
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        panel(app, 1).focus()
        await until(pilot, lambda: panel(app, 1).has_class("selected"))
        first: dict[str, object] = {}
        real = app._display

        def display(screen, renderable):
            s = app.screen
            if renderable is not None and isinstance(s, FlagForm) and s.query("#f-model_path") and not first:
                first.update(fields=[w.id for w in s.query("Input, Select, Switch") if (w.id or "").startswith("f-")],
                             focus=s.focused.id if s.focused else None, values=s.values())
            return real(screen, renderable)
        app._display = display
        await pilot.press("l")
        form = await until(pilot, lambda: isinstance(app.screen, FlagForm) and app.screen.whole and app.screen)
        assert first["fields"] == [f"f-{n}" for n, _, _ in FIELDS[:FIRST_FIELDS]] and first["focus"] == "f-model_path"
        assert [w.id for w in form.query("Input, Select, Switch") if (w.id or "").startswith("f-")] == \
            [f"f-{n}" for n, _, _ in FIELDS]
        assert form.values() == first["values"]  # what the rest was mounted with is what the form said it held
        assert form.query_one("#f-spec_algo", Select).value == "EAGLE" and form.query_one("#f-hicache", Switch).value
        assert not form.query_one("#f-num_steps", Input).disabled and not form.query_one("#f-hicache_size").disabled
        assert form.query_one("#f-extras", Input).value == "--enable-metrics"
        await until(pilot, lambda: not form.opening)  # and the Check at open ran, on every field


async def test_closing_the_form_while_its_opening_check_runs_launches_nothing():
    """Check at open waits on a slow validator (the host's --help being learned); escape closes the form at once,
    and the check's late answer changes nothing."""
    import asyncio

    be = FakeBackend([idle_with()])
    gate = asyncio.Event()

    async def slow(flags, host=None):
        await gate.wait()
        return [("ok", "flags: no problems")]
    be.validator = slow
    app = frozen_app(be)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        panel(app, 0).focus()
        await pilot.press("l")
        form = await until(pilot, lambda: isinstance(app.screen, FlagForm) and app.screen)
        assert form.opening
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, FlagForm))
        gate.set()
        await until(pilot, lambda: not form.opening)
        assert not launches(be) and not isinstance(app.screen, FlagForm)


# ---------------------------------------------------------------- the accounting, through the live backend

async def test_live_backend_gpu_check_counts_an_orphan_and_another_session(tmp_path, runs_dir):
    """On the local host with simulated GPUs: a scheduler orphaned on GPU 0 (its launcher killed while the agent
    watched) and a managed session on GPU 1. The form's GPU check names the orphan and the session with their
    memory and the host's refusals (as the launch's preflight words them); the plan counts what is in use; a
    free GPU reads free."""
    from console.core.orphans import find_orphans
    from console.ops import lifecycle
    from console.ops.backend import LiveBackend
    from tests.conftest import free_port
    from tests.helpers.rel_util import kill_quietly
    from tests.helpers.sim_files import make_sim, sim_env, sim_link
    from tests.helpers.wait import await_until

    d, model = make_sim(tmp_path, 3, tag="lf")
    command = [sys.executable, "-m", "console.sim.sglang"]
    log = tmp_path / "hand.log"
    env = {**os.environ, **sim_env(d), "MTPCONSOLE_SIM_FAULT": "orphan", "CUDA_VISIBLE_DEVICES": "0"}
    with open(log, "wb") as f:
        hand = subprocess.Popen([*command, "--model-path", str(model), "--port", str(free_port()),
                                 "--max-running-requests", "8"], stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    orphans: list[int] = []
    try:
        async with sim_link(runs_dir, d) as link:
            await await_until(lambda: "ready to roll" in log.read_text(errors="replace"), 30, step=0.1)
            await link.refresh()  # the agent watches the launcher before it dies
            os.kill(hand.pid, signal.SIGKILL)
            hand.wait(5)

            async def orphaned():
                snap = await link.refresh()
                found = [o for o in find_orphans(snap) if 0 in o.gpu_mem_mib]
                return found or None
            found = await await_until(orphaned, 15, step=0.2)
            assert found, "the scheduler should read as an orphan on GPU 0"
            orphans = [o.pid for o in found]
            r = await lifecycle.launch(link, LaunchRequest(host="local", command=command, gpus=[1], port=free_port(),
                                                           flags=["--model-path", str(model), *FIXED_FLAGS]),
                                       timeout=60)
            assert r.ok, r
            await link.refresh()
            cfg = Config(hosts={"local": HostConfig(server_command=command)})
            be = LiveBackend(cfg, [link])
            flags = ["--model-path", str(model), *FIXED_FLAGS, "--port", str(free_port())]

            on0 = await be.gpu_check(flags, [0], host="local")
            said = "\n".join(m for _, m in on0)
            assert ("error", f"the host's preflight: GPUs free: GPU 0 has compute processes: pid {orphans[0]}") in \
                [(s, m.split(" (")[0]) for s, m in on0], on0
            use0 = next(m for s, m in on0 if m.startswith("GPU 0 now: "))
            assert f"orphan pid {orphans[0]}" in use0 and "kill with o in the console" in use0, said

            on1 = await be.gpu_check(flags, [1], host="local")
            assert any(s == "error" and f"held by session {r.session_id}" in m for s, m in on1), on1
            use1 = next(m for s, m in on1 if m.startswith("GPU 1 now: "))
            assert f"session {r.session_id}, pid " in use1 and " MiB" in use1, on1

            on2 = await be.gpu_check(flags, [2], host="local")
            assert not any(s == "error" for s, _ in on2), on2
            assert any(s == "note" and re.fullmatch(r"GPU 2 now: \d+ of 97,887 MiB in use \(no process holds it\)", m)
                       for s, m in on2), on2

            counted = await be.planner(flags, [1], host="local", count_use=True)
            total = await be.planner(flags, [1], host="local")
            assert "MiB in use on GPU 1 now" in str(counted) and "in use" not in str(total), (counted, total)
    finally:
        kill_quietly([hand.pid, *orphans])
