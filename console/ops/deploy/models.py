"""A deployment as the console reads it back (``deploy status``) and what a deploy operation did (issue 29).

Membership is read from each session's spec.json (``deployment``, ``deployment_role``, ``replica``) and the
gateway's own worker list (matched by URL), never from the config's GPUs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from console.model import Step
from console.ops.deploy.gateway import GatewayWorker

ReplicaRole = Literal["current", "old", "new", "draining"]
"""``current``: the one session of its replica index; during a roll, ``old`` (still registered), ``new`` (its
replacement, ``replaces`` names the old one) and ``draining`` (an old one the gateway no longer lists)."""


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReplicaView(Frozen):
    """One live replica session of a deployment."""

    session_id: str
    replica: int
    role: ReplicaRole
    state: str
    """The session's state: ``ready`` (its own /health says 200), ``loading``, ``launching``, ``stopping``..."""
    port: int | None = None
    gpus: list[int] = Field(default_factory=list)
    replaces: str | None = None
    worker_id: str | None = None
    """Its worker at the gateway (None: the gateway does not list it)."""
    worker_status: str | None = None
    running: int | None = None
    """Its own running + queued requests (``/server_info``), None when unread."""
    queued: int | None = None
    requests_per_s: float | None = None
    """Requests it finished per second (its own ``sglang:num_requests_total``, ``--enable-metrics``) between two
    readings; None when unread (no metrics, or a first reading)."""


class TrafficSample(Frozen):
    """The request counters at one reading (``at``: epoch seconds): the next reading's rates come from them."""

    at: float
    gateway: float | None = None
    """The gateway's ``smg_router_requests_total`` (every route), None when its metrics port was not read."""
    servers: dict[str, float] = Field(default_factory=dict)
    """session id -> its server's ``sglang:num_requests_total``."""


class GatewayView(Frozen):
    """The deployment's gateway."""

    port: int
    owned: bool
    """Started by the console (``router.port``) rather than an existing one (``router.url``)."""
    session_id: str | None = None
    state: str | None = None
    """The owned gateway's session state (None for an existing gateway)."""
    health: int = 0
    """``GET /health``'s status (0: no answer)."""
    readiness: str | None = None
    api: str | None = None
    """Which worker API it speaks and its version (:meth:`Gateway.detect`'s line), None when it did not answer."""
    error: str | None = None


class DeploymentStatus(Frozen):
    """``deploy status NAME``: the gateway, each live replica, and the gateway's own view of its workers."""

    name: str
    host: str
    gateway: GatewayView
    replicas: list[ReplicaView] = Field(default_factory=list)
    workers: list[GatewayWorker] = Field(default_factory=list)
    """Every worker the gateway lists (its own view, ours and any other)."""
    foreign_workers: list[str] = Field(default_factory=list)
    """URLs the gateway lists that no replica session of this deployment serves."""
    loads: dict[str, object] | None = None
    """The gateway's ``/get_loads`` (traffic per worker)."""
    roll_in_progress: bool = False
    """A replica index has two live sessions (an old and its new one): a roll was interrupted or runs now."""
    requests_per_s: float | None = None
    """Requests per second through the gateway (its ``smg_router_requests_total``) between two readings."""
    traffic: TrafficSample | None = None
    """This reading's counters (the next reading's rates are measured from them)."""
    traffic_note: str | None = None
    """Why a rate is unknown (no metrics port for an existing gateway, no ``--enable-metrics`` on a replica)."""


class DeployResult(Frozen):
    """What ``deploy up|roll|down`` did: ok, each step (``replica 0: healthy``), the replicas it replaced."""

    op: Literal["deploy-up", "deploy-roll", "deploy-down"]
    name: str
    host: str
    ok: bool
    steps: list[Step] = Field(default_factory=list)
    error: str | None = None
    rolled_back: str | None = None
    """Set when a roll stopped and kept the old replica serving: which replica and why."""
    replaced: dict[str, str] = Field(default_factory=dict)
    """old session id -> new session id, for each replica a roll replaced."""
    started: list[str] = Field(default_factory=list)
    stopped: list[str] = Field(default_factory=list)
