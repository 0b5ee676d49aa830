"""Issue 26 item 4: a relaunch asks only for secrets. The host's ``launch_env`` (non-secret, from the config, added
on the host to every launch) and the session's profile's env are never asked for again; a name of the host's
``env_names`` that this console's environment lacks is (its value is never stored). The CLI and the TUI take one
path (``console.ops.lifecycle.relaunch_env``). Real CLI processes on the ``local`` host with simulated GPUs and the
SGLang stand-in."""

from __future__ import annotations

import json
import sys

from console.config import Config, HostConfig, Profile
from console.model import LaunchSpec
from console.ops.lifecycle import relaunch_env
from console.sim.demo import FIXED_FLAGS
from tests.conftest import free_port
from tests.helpers.rel_util import cleanup_runs, cli, write_config
from tests.helpers.sim_files import make_sim, sim_env

SECRET = "H26_TOKEN"


def test_relaunch_env_asks_only_for_what_nothing_supplies(monkeypatch):
    cfg = Config(hosts={"h": HostConfig(env_names=[SECRET, "H26_UNSET"], launch_env={"FIXED": "1"})},
                 profiles={"p": Profile(env={"FROM_PROFILE": "x"})})
    spec = LaunchSpec(session_id="s", argv=["x"], env_names=sorted([SECRET, "FIXED", "FROM_PROFILE", "GIVEN"]),
                      profile="p")
    monkeypatch.setenv(SECRET, "v1")
    monkeypatch.delenv("H26_UNSET", raising=False)
    env, missing = relaunch_env(cfg, "h", spec, {"GIVEN": "g"})
    assert env == {SECRET: "v1", "FROM_PROFILE": "x", "GIVEN": "g"} and missing == []  # FIXED: the host adds it
    monkeypatch.delenv(SECRET)
    env, missing = relaunch_env(cfg, "h", spec, {})
    assert missing == ["GIVEN", SECRET] and "FIXED" not in missing, missing  # in spec.json's order
    assert relaunch_env(cfg, "h", None, {"A": "b"}) == ({"A": "b"}, [])


def test_cli_relaunch_does_not_ask_for_the_hosts_launch_env(tmp_path, runs_dir, monkeypatch):
    monkeypatch.delenv(SECRET, raising=False)
    d, model = make_sim(tmp_path, 1, tag="r")
    cfg = write_config(tmp_path / "config.toml", {"local": {
        "runs_dir": str(runs_dir), "python": sys.executable, "gpu_source": "sim", "sim_dir": str(d),
        "server_command": [sys.executable, "-m", "console.sim.sglang"], "launch_env": sim_env(d),
        "env_names": [SECRET]}})
    base = ["--host", "local", "--config", str(cfg)]
    bare = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    env = {**bare, SECRET: "s3cr3t-value"}
    try:
        r = cli("launch", *base, "--gpu", "0", "--port", str(free_port()), "--wait", "--json", "--",
                "--model-path", str(model), *FIXED_FLAGS, env=env, timeout=180)
        first = json.loads(r.stdout)
        assert r.returncode == 0, r.stdout + r.stderr
        spec = json.loads((runs_dir / first["session_id"] / "spec.json").read_text())
        assert set(sim_env(d)) | {SECRET} <= set(spec["env_names"]), spec["env_names"]  # launch_env names recorded
        # without the secret in this console's environment: only the secret is asked for, nothing is stopped
        asked = cli("relaunch", *base, first["session_id"], "--json", env=bare, timeout=60)
        err = json.loads(asked.stdout)["error"]
        assert asked.returncode == 2 and SECRET in err["message"], asked.stdout + asked.stderr
        assert not any(n in err["message"] for n in sim_env(d)), err  # the host's launch_env is not asked for
        assert not (runs_dir / first["session_id"] / "stop-request.json").exists()
        # with it (taken from the environment like a launch's): relaunched, no --env needed
        again = cli("relaunch", *base, first["session_id"], "--wait", "--json", "--grace", "5", env=env, timeout=180)
        res = json.loads(again.stdout)
        assert again.returncode == 0 and res["ok"] and res["session_id"] != first["session_id"], again.stdout
        new = json.loads((runs_dir / res["session_id"] / "spec.json").read_text())
        assert set(sim_env(d)) | {SECRET} <= set(new["env_names"]) and new["replaces"] == first["session_id"]
        assert "s3cr3t" not in json.dumps(new) + again.stdout
    finally:
        cleanup_runs(runs_dir)
