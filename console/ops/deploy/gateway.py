"""The gateway's worker API (SGLang's ``smg``), spoken from the host through the agent (:mod:`.hostcall`).

Two APIs exist, told apart by what the gateway answers (:meth:`Gateway.detect`):

- ``smg-workers`` (smg >= 1.x): ``POST /workers {"url"}`` -> 202 with ``worker_id`` (registration runs in the
  background), ``GET /workers/{id}`` (``status``: ``pending`` ... ``ready``; 404 once gone), ``DELETE
  /workers/{id}`` -> 202, ``GET /workers`` (the list), behind the control-plane key;
- ``legacy`` (sglang-router 0.3.x): ``POST /add_worker?url=``, ``POST /remove_worker?url=``, ``GET /list_workers``
  (``{"urls": [...]}``); a worker's id is its URL, and listed means ready.

``/health``, ``/readiness`` and ``/get_loads`` are the same in both.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from console.link.client import HostClient
from console.ops.deploy.hostcall import Answer, http_call

ApiName = Literal["smg-workers", "legacy"]


class GatewayWorker(BaseModel):
    """One worker as the gateway lists it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    url: str
    status: str | None = None
    """``ready`` once the gateway routes to it (smg); None where the API has no status (legacy: listed = ready)."""
    is_healthy: bool | None = None
    load: int | None = None
    version: str | None = None
    """The worker's runtime version the gateway read from its ``/server_info``."""

    @property
    def ready(self) -> bool:
        return self.status == "ready" if self.status is not None else True


class GatewayError(Exception):
    """The gateway refused or did not answer a control-plane call."""


@dataclass
class Gateway:
    """The gateway on 127.0.0.1:``port`` of a host; ``key_file``: its control-plane key there."""

    client: HostClient
    python: str
    port: int
    key_file: str | None
    api: ApiName | None = None
    version: str | None = None
    """The gateway's own version, from ``/get_loads`` (``smg-1.13.0``)."""
    audit: bool = True
    """Its calls go to the audit log (False: a periodic reading, the TUI's deployment row)."""

    async def call(self, method: str, path: str, body: object | None = None, *, auth: bool = True,
                   timeout: float = 10.0) -> Answer:
        return await http_call(self.client, self.python, method, self.port, path,
                               key_file=self.key_file if auth else None, body=body, timeout=timeout, audit=self.audit)

    async def health(self) -> Answer:
        return await self.call("GET", "/health", auth=False, timeout=5.0)

    async def readiness(self) -> Answer:
        return await self.call("GET", "/readiness", auth=False, timeout=5.0)

    async def loads(self) -> dict[str, Any] | None:
        a = await self.call("GET", "/get_loads", timeout=5.0)
        j = a.json() if a.status == 200 else None
        return j if isinstance(j, dict) else None

    async def detect(self) -> str:
        """Which worker API this gateway speaks (and its version): a line saying so. Raises GatewayError."""
        a = await self.call("GET", "/workers")
        j = a.json()
        if a.status == 200 and isinstance(j, dict) and isinstance(j.get("workers"), list):
            self.api = "smg-workers"
        elif a.status in (401, 403):
            raise GatewayError(f"the gateway on port {self.port} refused the console's control-plane key "
                               f"(HTTP {a.status}): {a.body.strip()[:200]}")
        else:
            b = await self.call("GET", "/list_workers")
            jb = b.json()
            if b.status == 200 and isinstance(jb, dict) and "urls" in jb:
                self.api = "legacy"
            else:
                raise GatewayError(f"no worker API on port {self.port}: GET /workers answered "
                                   f"{a.status or a.body.strip()[:200]}, GET /list_workers {b.status or b.body[:200]}")
        loads = await self.loads()
        v = loads.get("version") if loads else None
        self.version = str(v) if v else None
        return (f"gateway {self.version or '(version unknown)'} on 127.0.0.1:{self.port}: worker API "
                + ("smg /workers (POST -> 202 + worker_id, GET /workers/{id} status, DELETE)"
                   if self.api == "smg-workers" else "legacy sglang-router (/add_worker, /remove_worker, /list_workers)"))

    async def _api(self) -> ApiName:
        if self.api is None:
            await self.detect()
        assert self.api is not None
        return self.api

    async def workers(self) -> list[GatewayWorker]:
        if await self._api() == "legacy":
            a = await self.call("GET", "/list_workers")
            j = a.json()
            if a.status != 200 or not isinstance(j, dict):
                raise GatewayError(f"GET /list_workers: {a.status or a.body[:200]}")
            return [GatewayWorker(id=u, url=u) for u in j.get("urls") or []]
        a = await self.call("GET", "/workers")
        j = a.json()
        if a.status != 200 or not isinstance(j, dict):
            raise GatewayError(f"GET /workers: {a.status or a.body[:200]}")
        return [_worker(w) for w in j.get("workers") or [] if isinstance(w, dict)]

    async def add(self, url: str) -> str:
        """Register ``url``; its worker id. Raises GatewayError."""
        if await self._api() == "legacy":
            a = await self.call("POST", "/add_worker?url=" + urllib.parse.quote(url, safe=""))
            if a.status != 200:
                raise GatewayError(f"POST /add_worker {url}: HTTP {a.status}: {a.body.strip()[:200]}")
            return url
        a = await self.call("POST", "/workers", {"url": url})
        j = a.json()
        if a.status not in (200, 201, 202) or not isinstance(j, dict) or not j.get("worker_id"):
            raise GatewayError(f"POST /workers {url}: HTTP {a.status}: {a.body.strip()[:200]}")
        return str(j["worker_id"])

    async def get(self, worker_id: str) -> GatewayWorker | None:
        """The worker, or None once the gateway has no such worker (404)."""
        if await self._api() == "legacy":
            return next((w for w in await self.workers() if w.id == worker_id), None)
        a = await self.call("GET", "/workers/" + urllib.parse.quote(worker_id, safe=""))
        if a.status == 404:
            return None
        j = a.json()
        if a.status != 200 or not isinstance(j, dict):
            raise GatewayError(f"GET /workers/{worker_id}: {a.status or a.body[:200]}")
        return _worker(j)

    async def remove(self, worker_id: str) -> None:
        if await self._api() == "legacy":
            a = await self.call("POST", "/remove_worker?url=" + urllib.parse.quote(worker_id, safe=""))
        else:
            a = await self.call("DELETE", "/workers/" + urllib.parse.quote(worker_id, safe=""))
        if a.status not in (200, 202, 204, 404):
            raise GatewayError(f"removing worker {worker_id}: HTTP {a.status}: {a.body.strip()[:200]}")


def _worker(w: dict[str, Any]) -> GatewayWorker:
    raw = w.get("labels")
    labels: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return GatewayWorker(id=str(w.get("id") or w.get("url")), url=str(w.get("url") or ""),
                         status=w.get("status") if isinstance(w.get("status"), str) else None,
                         is_healthy=w.get("is_healthy") if isinstance(w.get("is_healthy"), bool) else None,
                         load=w.get("load") if isinstance(w.get("load"), int) else None,
                         version=labels.get("version") if isinstance(labels.get("version"), str) else None)


def worker_url(port: int) -> str:
    """A replica's URL as the gateway (on the same host) reaches it."""
    return f"http://127.0.0.1:{port}"
