"""Issue 29 item 1: ``[deployments.NAME]`` in the config (pydantic, precise errors) and the membership fields a
replica's spec.json carries (deployment, role, replica index) from its launch request."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.config import load_config
from console.errors import ConfigError
from console.model import LaunchRequest
from console.ops.lifecycle import build_spec

GOOD = """
[hosts.b200]
python = "/opt/venv/bin/python3"

[profiles.qwen]
host = "b200"
model_path = "/models/q"

[deployments.web]
host = "b200"
gpus = [0, 1, 2, 3]
gpus_per_replica = 2
profile = "qwen"
ports = 30000
router = { port = 29100 }
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "config.toml"
    p.write_text(text)
    return p


def test_a_deployment_loads_with_its_replicas_and_gateway(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, GOOD))
    d = cfg.deployments["web"]
    assert d.replica_gpus() == [[0, 1], [2, 3]]
    assert d.router.gateway_port() == 29100 and d.router.url is None
    assert d.router.command is None  # default: [<the host's python>, -m, smg]


def test_an_existing_gateway_by_url(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, GOOD.replace("router = { port = 29100 }",
                                                   'router = { url = "http://127.0.0.1:8000", key_file = "~/k" }')))
    assert cfg.deployments["web"].router.gateway_port() == 8000


@pytest.mark.parametrize("edit, says", [
    ("router = {}", "exactly one of url"),
    ('router = { port = 29100, url = "http://127.0.0.1:1" }', "exactly one of url"),
    ('router = { url = "http://10.0.0.5:8000" }', "must be http://127.0.0.1:PORT"),
    ('router = { port = 29100, command = ["smg"] }', '[PYTHON, "-m", MODULE]'),
    ("router = { port = 70000 }", "less than or equal to 65535"),
])
def test_a_bad_router_is_named(tmp_path: Path, edit: str, says: str) -> None:
    text = GOOD.replace("router = { port = 29100 }", edit)
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text))
    assert "deployments.web" in str(e.value) and says in str(e.value)


def test_gpus_must_split_into_replicas_and_names_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="do not split into replicas of 2"):
        load_config(write(tmp_path, GOOD.replace("gpus = [0, 1, 2, 3]", "gpus = [0, 1, 2]")))
    with pytest.raises(ConfigError, match=r"deployments.web.host': 'h100' is not a host"):
        load_config(write(tmp_path, GOOD.replace('host = "b200"\ngpus', 'host = "h100"\ngpus')))
    with pytest.raises(ConfigError, match=r"deployments.web.profile': 'nope' is not a profile"):
        load_config(write(tmp_path, GOOD.replace('profile = "qwen"', 'profile = "nope"')))
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(write(tmp_path, GOOD.replace("ports = 30000", "ports = 30000\nreplicas = 3")))


def test_membership_travels_into_the_spec() -> None:
    req = LaunchRequest(host="local", flags=["--model-path", "/m"], gpus=[2], port=30002, deployment="web",
                        deployment_role="replica", replica=1, replaces="old-session")
    spec, _ = build_spec(req, "sid", 0.0)
    assert (spec.deployment, spec.deployment_role, spec.replica, spec.replaces) == ("web", "replica", 1, "old-session")
    plain, _ = build_spec(LaunchRequest(host="local"), "sid2", 0.0)
    assert plain.deployment is None and plain.replica is None
