"""The TUI's deployment rows (issue 29): each configured deployment of a connected host read every few seconds
through ``deploy status``'s own code path (:meth:`Deploy.status`, its requests/s measured from the last reading) in
a task of its own — never per frame — and turned into an immutable :class:`~console.model.DeploymentRow`; a roll
this console runs adds each replica's current step as its steps arrive (no reading waited for).

A host that cannot be asked keeps its last reading, marked ``unreachable`` and ageing (the row shows it stale)."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Callable

from console.config import Config
from console.link.errors import LinkDown, RequestError
from console.link.link import HostLink
from console.model import DeploymentRow, GatewayState, RollStepNow, RowReplica, Step
from console.ops.deploy.models import DeploymentStatus
from console.ops.deploy.ops import Deploy

DEPLOY_INTERVAL_S = 3.0
"""Seconds between two readings of one deployment (each is a handful of calls on its host)."""
READ_TIMEOUT_S = 30.0
STALE_READINGS = 3
"""A row whose reading is older than this many intervals reads stale."""

OnRow = Callable[[DeploymentRow], None]
_STEP = re.compile(r"replica (\d+)( [^:]*)?: (.+)")


def roll_progress(steps: list[Step]) -> list[RollStepNow]:
    """Each replica's step under way in a roll's steps (``replica 0 new: generate``), else its last one."""
    now: dict[int, RollStepNow] = {}
    for s in steps:
        m = _STEP.fullmatch(s.name)
        if m is None or s.state == "pending":
            continue
        i = int(m.group(1))
        if i in now and now[i].state == "running" and s.state != "running":
            continue  # a later step done while this one runs (never in one replica's sequence; kept safe)
        part = (m.group(2) or "").strip()
        now[i] = RollStepNow(replica=i, step=f"{part}: {m.group(3)}" if part else m.group(3), state=s.state)
    return [now[i] for i in sorted(now)]


def row_of(st: DeploymentStatus, read_at: float, stale_after_s: float, steps: list[Step] | None = None,
           gateway: GatewayState | None = None, detail: str | None = None, expected: int = 0) -> DeploymentRow:
    """The row of one reading (``gateway``/``detail``: an unreachable host's last reading, said so; ``expected``:
    the replicas the config starts, so that one whose session is gone still counts in the total)."""
    g = st.gateway
    reps = [RowReplica(session_id=r.session_id, replica=r.replica, role=r.role, state=r.state, gpus=r.gpus, port=r.port,
                       ready_at_gateway=r.worker_status == "ready" or (r.worker_id is not None and r.worker_status is None),
                       running=r.running, queued=r.queued, requests_per_s=r.requests_per_s) for r in st.replicas]
    state: GatewayState = gateway or ("up" if g.health == 200 else "down")
    why = detail or (g.error if state != "up" else None) or (st.traffic_note if state == "up" else None)
    return DeploymentRow(name=st.name, host=st.host, gateway=state, detail=why, read_at=read_at,
                         stale_after_s=stale_after_s,
                         ready=len({r.replica for r in reps if r.state == "ready" and r.ready_at_gateway}),
                         total=max(expected, len({r.replica for r in reps})), requests_per_s=st.requests_per_s, replicas=reps,
                         rolling=bool(steps) or st.roll_in_progress, roll=roll_progress(steps or []))


class DeploymentWatch:
    """Reads every deployment of ``cfg`` whose host has a link, every ``interval`` seconds; ``on_row`` gets each row."""

    def __init__(self, cfg: Config, links: dict[str, HostLink], on_row: OnRow, interval: float = DEPLOY_INTERVAL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.cfg, self.links, self.on_row, self.interval, self.clock = cfg, links, on_row, interval, clock
        self.names = [n for n, d in cfg.deployments.items() if d.host in links]
        self.last: dict[str, tuple[DeploymentStatus, float]] = {}
        """name -> its last reading and when it was taken."""
        self.state: dict[str, tuple[GatewayState | None, str | None]] = {}
        self.steps: dict[str, list[Step]] = {}
        """name -> the steps of the roll this console runs on it."""
        self.tasks: list[asyncio.Task[None]] = []

    @property
    def stale_after_s(self) -> float:
        return self.interval * STALE_READINGS

    def start(self) -> None:
        for name in self.names:
            self.on_row(DeploymentRow(name=name, host=self.cfg.deployments[name].host, gateway="unreachable",
                                      detail="not read yet", stale_after_s=self.stale_after_s))
            self.tasks.append(asyncio.create_task(self._loop(name)))

    def stop(self) -> None:
        for t in self.tasks:
            t.cancel()

    async def _loop(self, name: str) -> None:
        while True:
            await self.read(name)
            await asyncio.sleep(self.interval)

    async def read(self, name: str) -> None:
        """One reading of ``name`` (through :meth:`Deploy.status`), then its row."""
        link = self.links[self.cfg.deployments[name].host]
        last = self.last.get(name)
        try:
            d = Deploy(link, self.cfg, name, audit_reads=False)  # a reading every few seconds: not audited
            st = await asyncio.wait_for(d.status(prev=last[0].traffic if last else None), READ_TIMEOUT_S)
        except (LinkDown, RequestError, OSError, asyncio.TimeoutError) as e:
            self.state[name] = ("unreachable", f"{link.name}: {type(e).__name__}: {str(e)[:200]}")
        except Exception as e:  # noqa: BLE001 - the row says why; the next reading tries again
            self.state[name] = ("unreachable", f"the reading failed: {type(e).__name__}: {str(e)[:200]}")
        else:
            self.last[name] = (st, self.clock())
            self.state[name] = (None, None)
        self.publish(name)

    def rolling(self, name: str, steps: list[Step] | None) -> None:
        """The steps of this console's roll of ``name`` so far (None: it ended): its row shows them now."""
        if steps is None:
            self.steps.pop(name, None)
        else:
            self.steps[name] = list(steps)
        self.publish(name)

    def publish(self, name: str) -> None:
        dep = self.cfg.deployments[name]
        last = self.last.get(name)
        gateway, detail = self.state.get(name, (None, None))
        if last is None:
            row = DeploymentRow(name=name, host=dep.host, gateway="unreachable", detail=detail or "not read yet",
                                stale_after_s=self.stale_after_s, rolling=name in self.steps,
                                roll=roll_progress(self.steps.get(name, [])))
        else:
            row = row_of(last[0], last[1], self.stale_after_s, self.steps.get(name), gateway, detail,
                         expected=len(dep.replica_gpus()))
        self.on_row(row)
