"""The console's config file (TOML, pydantic-validated) and its precise load errors.

Location: ``--config PATH`` or ``$XDG_CONFIG_HOME/mtpconsole/config.toml`` (default
``~/.config/mtpconsole/config.toml``). A missing default file is an empty config; a
missing explicit file, bad TOML or bad values are a :class:`ConfigError` naming the
file and every key with its problem, all at once, on one line.

Example::

    [ui]
    interval = 1.0
    theme = "dark"
    read_only = false

    [hosts.b200]                     # an SSH alias, user@host[:port], or "local"
    python = "/opt/venv/bin/python3"
    runs_dir = "~/.mtpconsole/runs"
    server_command = ["python3", "-m", "sglang.launch_server"]
    env_names = ["HF_TOKEN"]         # taken from the console's environment at launch
    log_cap_mb = 512                 # optional: rotate each launch's output.log at 512 MiB

    [profiles.qwen-mtp]
    host = "b200"
    model_path = "/models/Qwen3.6-27B"
    flags = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"]
    gpus = [0]
    port = 30000
    env = { SGLANG_ENABLE_SPEC_V2 = "1" }

A profile with ``hosts = ["node0", "node1"]`` (each a ``[hosts]`` table; optional ``nnodes = 2``) instead of ``host``
is a multi-node group: ``launch --profile NAME`` and the TUI's launch form start one member per host (README).
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from console import paths
from console.errors import ConfigError
from console.model import DEFAULT_SERVER_COMMAND, LaunchRequest


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HostConfig(Strict):
    """Per-host settings."""

    python: str = "python3"
    """The host's Python for the agent and the supervisor (>= 3.8, stdlib only)."""
    runs_dir: str = "~/.mtpconsole/runs"
    server_command: list[str] = Field(default_factory=lambda: list(DEFAULT_SERVER_COMMAND))
    env_names: list[str] = Field(default_factory=list)
    """Environment variables copied from the console's environment into each launch."""
    gpu_source: Literal["auto", "nvml", "nvidia-smi", "sim", "none"] = "auto"
    sim_dir: str | None = None
    connect_timeout: float = Field(default=10.0, gt=0.0, le=600.0, allow_inf_nan=False)
    """Seconds to reach the host and start its agent (finite, more than 0, at most 10 minutes)."""
    ping_timeout: float = Field(default=5.0, gt=0.0, le=300.0, allow_inf_nan=False)
    """Seconds the agent has to answer a ping before the link reads STALE (a silent agent is pinged after two
    sample intervals without a word: a frozen one is STALE within 2 intervals + this)."""
    transport: Literal["auto", "local", "ssh"] = "auto"
    """auto: 'local' runs as a subprocess, anything else over SSH; local forces a subprocess."""
    launch_env: dict[str, str] = Field(default_factory=dict)
    """Fixed, non-secret environment added to every launch on this host (secrets: env_names)."""
    log_cap_mb: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Cap each launch's ``output.log`` at this many MiB (the supervisor rotates it: ``output.log.1`` and the
    first 64 KiB in ``output.log.head`` are kept). None (default): the server writes the file, unbounded."""

    @field_validator("python", "runs_dir")
    @classmethod
    def _no_control(cls, v: str) -> str:
        if not v or any(c in v for c in "\0\n\r"):
            raise ValueError("must be non-empty without NUL or newline")
        return v


class Profile(Strict):
    """A named launch: model, flags, env, GPUs, port; with ``hosts`` (and ``nnodes``) a multi-node group (issue 30):
    one member per host in rank order, the same GPUs on each, launched like ``launch --host A --host B``."""

    host: str | None = None
    hosts: list[str] = Field(default_factory=list)
    """A multi-node group's hosts, rank 0 (the head) first; offered on each of them."""
    nnodes: int | None = Field(default=None, ge=2, le=64)
    """The group's node count (default: one per host of ``hosts``; must equal their number)."""
    model_path: str | None = None
    flags: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    gpus: list[int] = Field(default_factory=lambda: [0])
    port: int | None = Field(default=None, ge=1, le=65535)
    command: list[str] | None = None
    description: str | None = None

    @model_validator(mode="after")
    def _group(self) -> Profile:
        if self.hosts and self.host is not None:
            raise ValueError("give 'host' (one host) or 'hosts' (a multi-node group), not both")
        if len(set(self.hosts)) != len(self.hosts):
            raise ValueError("'hosts' names a host twice (one member per host)")
        if self.nnodes is not None and self.nnodes != len(self.hosts):
            raise ValueError(f"nnodes = {self.nnodes} needs that many 'hosts' (one member per host), "
                             f"got {len(self.hosts)}")
        if len(self.hosts) == 1:
            raise ValueError("'hosts' with one host is no group: use 'host'")
        return self

    def group_note(self) -> str | None:
        """How a multi-node profile is described where it is offered (None: a single-host profile)."""
        if not self.hosts:
            return None
        return f"a {len(self.hosts)}-node group over {', '.join(self.hosts)} (rank 0 on {self.hosts[0]})"


class DeploymentRouter(Strict):
    """A deployment's gateway (SGLang's ``smg``): an existing one (``url``) the console registers workers with, or
    one the console starts on the host (``port``) under its supervisor, bound to 127.0.0.1, and owns like a session
    (issue 29)."""

    url: str | None = None
    """An existing gateway, ``http://127.0.0.1:PORT`` on the deployment's host (its control plane is reached there)."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """The console starts ``smg launch --host 127.0.0.1 --port PORT`` on the host."""
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """The gateway's Prometheus port, bound to 127.0.0.1 (default: ``port`` + 1; smg's own default is 0.0.0.0:29000)."""
    command: list[str] | None = None
    """The gateway's command as ``[PYTHON, "-m", MODULE]`` (default ``[<the host's python>, "-m", "smg"]``): the
    console runs the module in-process so that its control-plane key never reaches a command line."""
    flags: list[str] = Field(default_factory=list)
    """More ``smg launch`` flags (e.g. ``["--policy", "round_robin"]``)."""
    key_file: str | None = None
    """For an existing gateway (``url``): the file on the host holding its control-plane admin key (read there,
    never sent). An owned gateway's key is created by the console beside the host's runs directory (0600)."""

    @field_validator("url")
    @classmethod
    def _loopback_url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        m = re.fullmatch(r"http://(127\.0\.0\.1|localhost|\[::1\]):(\d{1,5})/?", v)
        if not m or not 1 <= int(m.group(2)) <= 65535:
            raise ValueError("must be http://127.0.0.1:PORT (the gateway on the deployment's host, reached there)")
        return v

    @field_validator("command")
    @classmethod
    def _module_command(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (len(v) != 3 or v[1] != "-m" or not all(v)):
            raise ValueError('must be [PYTHON, "-m", MODULE] (the key is given to the module in-process, never '
                             "on its command line)")
        return v

    def gateway_port(self) -> int:
        """The port the gateway listens on (``url``'s or ``port``)."""
        if self.url is not None:
            return int(self.url.rstrip("/").rsplit(":", 1)[1])
        assert self.port is not None  # the model's validator requires one of them
        return self.port


class Deployment(Strict):
    """``[deployments.NAME]``: replicas of one profile (or flags) on one host behind a gateway (issue 29).

    The config says what to start; which sessions ARE the deployment is read back from each replica's spec.json
    (``deployment``, ``replica``) and the gateway's worker list, never from ``gpus`` (a roll onto spare GPUs makes
    it stale)."""

    host: str
    gpus: list[int] = Field(min_length=1)
    """The GPUs of the first ``deploy up``: one replica per ``gpus_per_replica`` of them, in order."""
    gpus_per_replica: int = Field(default=1, ge=1, le=64)
    profile: str | None = None
    """The profile each replica launches (its model, flags, env); or ``model_path`` + ``flags`` here."""
    model_path: str | None = None
    flags: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    ports: int = Field(ge=1, le=65535)
    """The base port: replica i starts on ``ports + i``; a roll's new replica takes the next free one."""
    router: DeploymentRouter

    @model_validator(mode="after")
    def _shape(self) -> Deployment:
        if len(self.gpus) % self.gpus_per_replica:
            raise ValueError(f"gpus: {len(self.gpus)} GPUs do not split into replicas of {self.gpus_per_replica}")
        if len(set(self.gpus)) != len(self.gpus):
            raise ValueError("gpus: a GPU is named twice")
        if (self.router.url is None) == (self.router.port is None):
            raise ValueError("router: give exactly one of url (an existing gateway) or port (the console starts one)")
        return self

    def replica_gpus(self) -> list[list[int]]:
        """The GPUs of each replica of the first ``deploy up``."""
        n = self.gpus_per_replica
        return [self.gpus[i:i + n] for i in range(0, len(self.gpus), n)]


ThemeName = Literal["dark", "light", "high-contrast"]
"""The TUI's themes (``ui.theme``, ``--theme``; ``t`` cycles them in this order)."""
THEME_NAMES: tuple[ThemeName, ...] = get_args(ThemeName)


class UiConfig(Strict):
    interval: float = Field(default=1.0, gt=0.0, le=60.0, allow_inf_nan=False)
    theme: ThemeName = "dark"
    keymap: dict[str, str] = Field(default_factory=dict)
    """action name -> key, overriding the defaults."""
    read_only: bool = False


class Config(Strict):
    hosts: dict[str, HostConfig] = Field(default_factory=dict)
    profiles: dict[str, Profile] = Field(default_factory=dict)
    deployments: dict[str, Deployment] = Field(default_factory=dict)
    ui: UiConfig = Field(default_factory=UiConfig)
    path: str | None = Field(default=None, exclude=True)

    def host(self, name: str) -> HostConfig:
        return self.hosts.get(name) or HostConfig()

    def profile_request(self, name: str, host: str, gpus: list[int] | None = None) -> LaunchRequest:
        """Profile ``name`` as a launch request on ``host`` (the one translation, for the CLI and the TUI): its
        command (else the host's), ``--model-path`` then its flags, its GPUs (unless ``gpus``), port and env.
        Env precedence at launch, lowest first: the host's ``env_names``, the profile's env, explicit ``--env``."""
        prof = self.profiles[name]
        return LaunchRequest(host=host, command=list(prof.command or self.host(host).server_command),
                             flags=(["--model-path", prof.model_path] if prof.model_path else []) + list(prof.flags),
                             gpus=list(gpus if gpus is not None else prof.gpus) or [0], port=prof.port,
                             env=dict(prof.env), profile=name, description=prof.description)


MAX_CONFIG_BYTES = 1 << 20
"""A config file is a few KiB; a larger one is refused without being read further."""


def default_path() -> Path:
    return paths.config_file()


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Load and validate the config; raise ConfigError naming the file, key and problem."""
    explicit = path is not None
    p = Path(path) if path is not None else default_path()
    if not p.exists():
        if explicit:
            raise ConfigError(f"config file {p} does not exist")
        return Config()
    try:  # bounded, and a FIFO or a device is refused (never a hang)
        data = tomllib.loads(paths.read_user_file(p, MAX_CONFIG_BYTES).decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: invalid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{p}: invalid TOML: nested too deeply") from None
    except paths.UnreadableFile as e:
        raise ConfigError(f"{p}: {e} (a config file is a regular file of at most {MAX_CONFIG_BYTES} bytes)") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror or e}") from None
    try:
        cfg = Config.model_validate(data)
    except ValidationError as e:
        problems = [_problem(err) for err in e.errors()]
        head = f"{len(problems)} problems: " if len(problems) > 1 else ""
        raise ConfigError(f"{p}: {head}{'; '.join(problems)}") from None
    problems = _reference_problems(cfg)
    if problems:
        head = f"{len(problems)} problems: " if len(problems) > 1 else ""
        raise ConfigError(f"{p}: {head}{'; '.join(problems)}")
    return cfg.model_copy(update={"path": str(p)})


def _reference_problems(cfg: Config) -> list[str]:
    """What the file names that it does not define: a profile's ``host`` must be one of its ``[hosts]`` (or a
    built-in host: ``local``, ``demo``), else the profile is never offered anywhere and a launch of it goes
    nowhere the operator meant."""
    known = sorted(cfg.hosts)
    return [f"key 'profiles.{name}.{key}': {h!r} is not a host of this config (hosts: "
            f"{', '.join(known) or 'none'}); add a [hosts.\"{h}\"] table or name one of them"
            for name, prof in cfg.profiles.items()
            for key, h in ([("host", prof.host)] if prof.host is not None else []) + [("hosts", x) for x in prof.hosts]
            if h not in (*known, "local", "demo")] + [
        f"key 'deployments.{name}.{key}': {val!r} is not a {what} of this config"
        for name, dep in cfg.deployments.items()
        for key, val, what, ok in (("host", dep.host, "host", dep.host in (*known, "local", "demo")),
                                   ("profile", dep.profile, "profile", dep.profile is None or dep.profile in cfg.profiles))
        if not ok]


def _problem(err: ErrorDetails) -> str:
    """One validation error as the operator reads it: the key and what is wrong with it."""
    key = ".".join(str(x) for x in err["loc"]) or "(top level)"
    if err["type"] == "extra_forbidden":
        return f"key '{key}': unknown key"
    msg = err["msg"].removeprefix("Value error, ")
    return f"key '{key}': {msg}"
