"""A host's latest sample, rebuilt from the agent's deltas, and its snapshot validated only where it changed.

The agent pushes a whole ``sample`` on connect, every ``FULL_EVERY`` ticks and as the reply to a ``snapshot``
request; between them ``sample_delta`` messages (``console/host/delta.py``). :class:`SampleBook` applies a delta
only to the sample it was made from (its ``base`` is the ``seq`` held) and only when the result's digest is the
agent's (the digest of the values it changed): a gap (a delta lost, or one of another base) or a delta that does not apply or check is refused, the
sample held stays as it was, and the link asks for a whole one. A wrong snapshot is never built.

Each GPU, server, session and relative is validated once, when it arrives or changes: the items a delta left
alone are the same objects as before (``delta.apply`` keeps them), and their models are reused.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from console.host.delta import BadDelta, apply, changed_digest
from console.link.client import sessions_each
from console.model import ConnectionInfo, GpuSample, HostSnapshot, ProcRef, ServerProc, SessionInfo

LISTS: dict[str, type[BaseModel]] = {"gpus": GpuSample, "servers": ServerProc, "sessions": SessionInfo,
                                     "other_sessions": SessionInfo, "relatives": ProcRef}
"""The sample's lists and the model of each item."""


class SampleBook:
    """The latest sample of one host (``data``), its sequence number, and the models made of its items."""

    def __init__(self) -> None:
        self.data: dict | None = None
        self.seq: int | None = None
        """The agent's number of ``data`` (None: a sample from an agent that sends no deltas, or none yet)."""
        self.full_samples = 0
        self.deltas = 0
        self.refused: list[str] = []
        """Why each refused delta was refused (the last 20), for tests and the benchmark."""
        self._items: dict[str, tuple[list[Any], list[Any]]] = {}

    def full(self, data: dict, seq: Any = None) -> None:
        """A whole sample: held from now on, whatever was held before."""
        self.data, self.seq = data, seq if isinstance(seq, int) and not isinstance(seq, bool) else None
        self.full_samples += 1

    def delta(self, msg: dict) -> bool:
        """Apply a ``sample_delta`` message; False (nothing changed) when it is not for the sample held or does not
        rebuild exactly the agent's sample: the caller asks for a whole one."""
        seq, base = msg.get("seq"), msg.get("base")
        if self.data is None or self.seq is None or base != self.seq or not isinstance(seq, int):
            return self._refuse(f"a delta on {base!r} while holding {self.seq!r}")
        try:
            new = apply(self.data, msg.get("patch")) if msg.get("patch") is not None else self.data
        except (BadDelta, TypeError, KeyError, IndexError) as e:
            return self._refuse(f"the delta does not apply: {e}")
        if not isinstance(new, dict):
            return self._refuse("the delta makes the sample no dict")
        try:
            if changed_digest(new, msg.get("patch")) != msg.get("digest"):
                return self._refuse("the rebuilt sample's digest is not the agent's")
        except (TypeError, ValueError) as e:
            return self._refuse(f"the rebuilt sample is no JSON: {e}")
        self.data, self.seq = new, seq
        self.deltas += 1
        return True

    def _refuse(self, why: str) -> bool:
        self.refused = (self.refused + [why])[-20:]
        return False

    def snapshot(self, name: str, conn: ConnectionInfo, received_at: float | None, hello: dict | None) -> HostSnapshot:
        """The held sample as a HostSnapshot; raises ValidationError when an item or field is not valid."""
        s = self.data or {}
        lists = {key: self._models(key, s.get(key, [])) for key in LISTS}
        snap = HostSnapshot(
            name=name, connection=conn, sampled_at=s.get("sampled_at"), received_at=received_at,
            hostname=(hello or {}).get("hostname"), gpu_source=s.get("gpu_source", "none"),
            gpu_error=s.get("gpu_error"), agent_uid=(hello or {}).get("uid"), agent_tick_ms=s.get("tick_ms"),
            gpu_sampled_at=s.get("gpu_sampled_at"))
        return snap.model_copy(update=lists)

    def _models(self, key: str, raw: Any) -> list[Any]:
        """The models of list ``key``: an item that is the very object seen last time keeps its model."""
        if not isinstance(raw, list):
            HostSnapshot.model_validate({"name": "-", "connection": {"state": "connected"}, key: raw})
            raise ValueError(f"{key} is no list")  # pragma: no cover (the line above raises)
        prev_raw, prev = self._items.get(key, ([], []))
        cls = LISTS[key]
        out: list[Any] = []
        for i, item in enumerate(raw):
            if i < len(prev_raw) and prev_raw[i] is item:
                out.append(prev[i])
            elif cls is SessionInfo:
                out.append(sessions_each([item])[0])  # a malformed one is listed as broken, never voids the rest
            else:
                out.append(cls.model_validate(item))
        self._items[key] = (list(raw), out)
        return out


__all__ = ["LISTS", "SampleBook", "ValidationError"]
