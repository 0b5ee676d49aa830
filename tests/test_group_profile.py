"""Issue 30: a group from a multi-host profile (``hosts = [..]`` + ``nnodes``), over the two hosts of
tests/test_group_cli.py (``local`` and the real sshd on 127.0.0.1):

- the config: ``hosts`` must name hosts of the config, ``nnodes`` must equal their number, not with ``host``;
- the CLI: ``launch --profile NAME --wait`` (no ``--host``) launches the group over the profile's hosts, rank 0 on
  its first; ``--host`` naming fewer hosts than the profile's nodes is refused;
- the TUI: the launch form on ``local`` offers the profile as a group; choosing it and launching asks a dialog
  naming the members, then launches the group through the backend's group launch (the CLI's ``launch_group``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.config import Config, Profile, load_config
from console.errors import ConfigError
from tests.helpers.sshd import free_port
from tests.test_group import close, nodes, open_links  # noqa: F401  (fixtures)
from tests.test_group_cli import world  # noqa: F401  (fixture)

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


def _profile(conf: Path, model: str, port: int, **extra: str) -> None:
    lines = ["", "[profiles.two]", 'hosts = ["local", "testhost"]', "nnodes = 2", f"model_path = {json.dumps(model)}",
             "gpus = [0, 1]", f"port = {port}", *(f"{k} = {v}" for k, v in extra.items())]
    with conf.open("a") as f:
        f.write("\n".join(lines) + "\n")


def test_multi_host_profile_config_checked(tmp_path):
    assert Profile(hosts=["a", "b"], nnodes=2).group_note() == "a 2-node group over a, b (rank 0 on a)"
    assert Profile(host="a").group_note() is None
    for bad, says in ((dict(hosts=["a", "b"], nnodes=3), "nnodes = 3 needs that many 'hosts'"),
                      (dict(host="a", hosts=["a", "b"]), "not both"),
                      (dict(hosts=["a"]), "no group"),
                      (dict(hosts=["a", "a"]), "twice")):
        with pytest.raises(ValueError, match=says):
            Profile(**bad)  # type: ignore[arg-type]
    conf = tmp_path / "c.toml"
    conf.write_text('[hosts.a]\n[profiles.g]\nhosts = ["a", "b"]\n')
    with pytest.raises(ConfigError, match=r"key 'profiles.g.hosts': 'b' is not a host of this config"):
        load_config(conf)


async def test_live_backend_offers_a_group_profile_on_its_hosts_and_refuses_hosts_it_has_not_opened():
    from console.config import HostConfig
    from console.link.link import HostLink
    from console.link.ssh import HostSpec
    from console.ops.backend import LiveBackend

    cfg = Config(hosts={"local": HostConfig(), "other": HostConfig(), "third": HostConfig()},
                 profiles={"two": Profile(hosts=["local", "other"], model_path="/m", description="big"),
                           "one": Profile(model_path="/m")})
    be = LiveBackend(cfg, [HostLink(HostSpec(name="local", local=True), cfg.host("local"))])  # never opened
    offered = be.launch_profiles("local")
    assert offered["two"].group_hosts == ["local", "other"] and offered["two"].nnodes == 2
    assert offered["two"].description == "a 2-node group over local, other (rank 0 on local); big"
    assert offered["one"].group_hosts is None
    assert set(be.launch_profiles("third")) == {"one"}  # a group profile only on its own hosts
    r = await be.launch_group(offered["two"], ["local", "other"], lambda steps: None)
    assert not r.ok and r.refused and "not opened by this console: other (of the group's hosts local, other)" in r.refused, r
    assert "--host local --host other" in r.refused


def test_launch_profile_launches_the_group_over_its_hosts(world):  # noqa: F811
    run = world["run"]
    port = free_port()
    _profile(Path(world["base"][3]), world["model"], port)
    bad = run("launch", "--host", "local", "--profile", "two")
    assert bad.returncode != 0 and "profile 'two' is a 2-node group over local, testhost" in bad.stderr, bad.stderr
    r = run("launch", "--profile", "two", "--wait", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout)
    gid = res["session_id"]
    assert res["state"] == "ready" and res["nnodes"] == 2
    assert [(m["host"], m["rank"], m["gpus"]) for m in res["members"]] == [("local", 0, [0, 1]), ("testhost", 1, [0, 1])]
    assert res["members"][0]["port"] == port
    k = run("kill", *world["hosts"], gid, "--grace", "3", "--json")
    assert k.returncode == 0 and json.loads(k.stdout)["state"] == "stopped", k.stdout + k.stderr


async def test_tui_launch_form_launches_a_multi_host_profile_as_a_group(open_links, nodes):  # noqa: F811
    from textual.widgets import Button, Select

    from console.ops import group as grp
    from console.ops.backend import LiveBackend
    from console.ui.app import make_app
    from console.ui.screens.confirm import ConfirmScreen
    from console.ui.screens.flag_form import FlagForm
    from console.ui.widgets.gpu_panel import GpuPanel
    from console.ui.widgets.groups_bar import GroupsBar
    from tests.helpers.wait import until

    links = await open_links()
    port = free_port()
    cfg = Config(hosts={lk.name: lk.cfg for lk in links},
                 profiles={"two": Profile(hosts=["local", "testhost"], nnodes=2, model_path=str(nodes[0].model),
                                          gpus=[0, 1], port=port, description="the stand-in over both")})
    backend = LiveBackend(cfg, links, interval=0.3)
    app = make_app(backend, interval=0.3)
    app.animation_level = "none"
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            def panel():
                return next(p for p in app.query(GpuPanel) if p.host == "local" and p.index == 0)

            await until(pilot, panel, 30)
            panel().focus()
            await until(pilot, lambda: panel().has_class("selected"))
            await pilot.press("l")
            await until(pilot, lambda: isinstance(app.screen, FlagForm) and not app.screen.opening, 30)
            form = app.screen
            assert isinstance(form, FlagForm)
            assert "a 2-node group over local, testhost (rank 0 on local)" in (form.profiles["two"].description or "")
            form.query_one("#profile", Select).value = "two"
            await until(pilot, lambda: form.applied == "two" and not form.opening, 30)
            form.query_one("#f-gpus").value = "0,1"  # type: ignore[attr-defined]
            await pilot.press("ctrl+l")  # checks
            await until(pilot, lambda: str(form.query_one("#launch", Button).label) == "Confirm launch", 30)
            await pilot.press("ctrl+l")
            dialog = await until(pilot, lambda: app.screen if isinstance(app.screen, ConfirmScreen) else None, 30)
            assert dialog.title_text == "Launch a 2-node group over local, testhost?" and dialog.confirm == "Launch group"
            said = "\n".join(dialog.lines)
            assert "members:  rank 0 on local, rank 1 on testhost" in said and "GPUs:     0,1 on every host" in said, said
            await pilot.press("y")
            await until(pilot, lambda: app.ops.results, 120)
            r = app.ops.results[0]
            assert r.ok and r.op == "launch" and r.state == "ready" and r.session_id, r
            assert any(s.name.startswith("testhost r1: ") for s in r.steps), [s.name for s in r.steps]

            def bar() -> str:
                b = app.query(GroupsBar)
                return b.first().text if b else ""
            await until(pilot, lambda: bar().startswith(f"GROUP {r.session_id}: READY"), 30, what=bar)
            views = await grp.find_groups(links, r.session_id)
            assert [(m.host, m.rank, m.port) for m in views[0].members] == [("local", 0, port), ("testhost", 1, port + 1)]
            await grp.kill_members(links, views[0].members)
    finally:
        await backend.stop()
        await close(links)
