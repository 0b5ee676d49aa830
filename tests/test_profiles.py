"""One translation of a launch profile into a launch request, for the CLI and the TUI, with one env precedence:
the host's ``env_names`` (from the console's environment) lowest, then the profile's env, then explicit --env."""

from __future__ import annotations

import argparse

from console.commands import launch as launch_cmd
from console.config import Config
from console.ops.backend import LiveBackend

CFG = Config.model_validate({
    "hosts": {"h": {"env_names": ["TOKEN_X", "ONLY_HOST"], "server_command": ["srv"]}},
    "profiles": {"p": {"model_path": "/m", "flags": ["--tp-size", "2"], "gpus": [1], "port": 31000,
                       "env": {"TOKEN_X": "from-profile"}}},
})


def args(*extra: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    launch_cmd.configure(p)
    return p.parse_args(list(extra))


def test_cli_and_tui_build_the_same_request_from_a_profile(monkeypatch):
    monkeypatch.setenv("TOKEN_X", "from-host")
    monkeypatch.setenv("ONLY_HOST", "h1")
    cli = launch_cmd.build_request(args("--profile", "p"), CFG, "h")
    tui = LiveBackend(CFG, []).launch_profiles("h")["p"]
    assert tui == CFG.profile_request("p", "h")
    for r in (cli, tui):
        assert r.command == ["srv"] and r.flags == ["--model-path", "/m", "--tp-size", "2"]
        assert r.gpus == [1] and r.port == 31000 and r.profile == "p"
    assert cli.env == {"TOKEN_X": "from-profile", "ONLY_HOST": "h1"}  # the profile's value over the host's
    tui_env = {"TOKEN_X": "from-host", "ONLY_HOST": "h1", **tui.env}  # what the backend merges at launch
    assert tui_env == cli.env


def test_explicit_env_beats_the_profile(monkeypatch):
    monkeypatch.setenv("TOKEN_X", "from-host")
    r = launch_cmd.build_request(args("--profile", "p", "--env", "TOKEN_X=explicit", "--gpu", "0"), CFG, "h")
    assert r.env["TOKEN_X"] == "explicit" and r.gpus == [0]
