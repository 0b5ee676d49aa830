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

from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from console.host.delta import BadDelta, apply, changed_digest
from console.link.client import sessions_each
from console.model import ConnectionInfo, GpuSample, HostSnapshot, ProcRef, ServerProc, SessionInfo

LISTS: dict[str, type[BaseModel]] = {"gpus": GpuSample, "servers": ServerProc, "sessions": SessionInfo,
                                     "other_sessions": SessionInfo, "relatives": ProcRef}
"""The sample's lists and the model of each item."""


def _number_fields(cls: type[BaseModel]) -> dict[str, tuple[type, bool]]:
    """The fields of ``cls`` that are a plain number, or None: name -> (float or int, None allowed)."""
    out: dict[str, tuple[type, bool]] = {}
    if cls.__pydantic_decorators__.model_validators:
        return out  # the model checks its fields together: every change is validated whole
    checked = {n for d in cls.__pydantic_decorators__.field_validators.values() for n in d.info.fields}
    for name, f in cls.model_fields.items():
        union = get_origin(f.annotation) in (Union, UnionType)
        if name in checked or not (union or f.annotation in (float, int)):
            continue  # a field of its own validator, a dict or list of numbers: validated whole
        kinds = set(get_args(f.annotation)) if union else {f.annotation}
        for kind in (float, int):
            if kinds in ({kind}, {kind, type(None)}):
                out[name] = (kind, type(None) in kinds)
    return out


NUMBERS: dict[str, dict[str, tuple[type, bool]]] = {key: _number_fields(cls) for key, cls in LISTS.items()}
"""Per list, the item fields a delta may change without the item being validated whole again: a changed GPU
power or temperature is checked as a number (what pydantic would accept and make of it) and copied into the
item's model, the other fields kept."""


def _number(value: Any, kind: type, optional: bool) -> tuple[bool, Any]:
    """(valid, value as the field holds it) for a number field: pydantic's own lax rules for the plain cases (an
    int for a float field is that float), anything else (a string, a bool, an integral float for an int field) is
    left to the full validation."""
    if value is None:
        return optional, None
    if isinstance(value, bool):
        return False, None
    if kind is float and isinstance(value, (int, float)):
        return True, float(value)
    if kind is int and isinstance(value, int):
        return True, value
    return False, None


def _with_numbers(model: BaseModel, changed: dict[str, Any]) -> BaseModel:
    """The model with number fields already checked (``_number``) replaced: pydantic's own copy, which validates
    nothing again (``_number_fields`` leaves out models with model validators and fields with validators of their
    own, so no validator depends on them)."""
    return model.model_copy(update=changed)


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
        self._patch: Any = None
        """The last delta's patch and the lists it was applied to, until the snapshot after it is built."""
        self._base: dict[str, Any] = {}

    def full(self, data: dict, seq: Any = None) -> None:
        """A whole sample: held from now on, whatever was held before."""
        self.data, self.seq = data, seq if isinstance(seq, int) and not isinstance(seq, bool) else None
        self.full_samples += 1
        self._patch, self._base = None, {}

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
        self._base = {key: self.data.get(key) for key in LISTS}
        self.data, self.seq, self._patch = new, seq, msg.get("patch")
        self.deltas += 1
        return True

    def _refuse(self, why: str) -> bool:
        self.refused = (self.refused + [why])[-20:]
        return False

    def snapshot(self, name: str, conn: ConnectionInfo, received_at: float | None, hello: dict | None) -> HostSnapshot:
        """The held sample as a HostSnapshot; raises ValidationError when an item or field is not valid."""
        s = self.data or {}
        patch = self._patch if isinstance(self._patch, list) and len(self._patch) == 3 and self._patch[0] == "d" \
            and isinstance(self._patch[1], dict) else None
        self._patch = None
        lists = {key: self._models(key, s.get(key, []), patch[1].get(key) if patch else None) for key in LISTS}
        return HostSnapshot(  # the lists' models are taken as they are (pydantic revalidates no instance)
            name=name, connection=conn, sampled_at=s.get("sampled_at"), received_at=received_at,
            hostname=(hello or {}).get("hostname"), gpu_source=s.get("gpu_source", "none"),
            gpu_error=s.get("gpu_error"), agent_uid=(hello or {}).get("uid"), agent_tick_ms=s.get("tick_ms"),
            gpu_sampled_at=s.get("gpu_sampled_at"), **lists)

    def _models(self, key: str, raw: Any, patch: Any = None) -> list[Any]:
        """The models of list ``key``: an item that is the very object seen last time keeps its model; one whose
        delta changed only number fields (``NUMBERS``) is its model with those fields replaced; the others are
        validated whole. ``patch``: the last delta's patch of this list, when the models held are of its base."""
        if not isinstance(raw, list):
            HostSnapshot.model_validate({"name": "-", "connection": {"state": "connected"}, key: raw})
            raise ValueError(f"{key} is no list")  # pragma: no cover (the line above raises)
        prev_raw, prev = self._items.get(key, ([], []))
        items = None
        if (isinstance(patch, list) and len(patch) == 3 and patch[0] == "l" and isinstance(patch[2], dict)
                and self._items.get(key) is not None and self._base.get(key) is self._items[key][0]):
            items = patch[2]  # the models held are those of the list this patch was applied to
        cls = LISTS[key]
        out: list[Any] = []
        for i, item in enumerate(raw):
            if i < len(prev_raw) and prev_raw[i] is item:
                out.append(prev[i])
                continue
            changed = self._numbers_only(key, items.get(str(i))) if items is not None and i < len(prev) else None
            if changed is not None:
                out.append(_with_numbers(prev[i], changed))
            elif cls is SessionInfo:
                out.append(sessions_each([item])[0])  # a malformed one is listed as broken, never voids the rest
            else:
                out.append(cls.model_validate(item))
        self._items[key] = (raw, out)
        return out

    @staticmethod
    def _numbers_only(key: str, item_patch: Any) -> dict[str, Any] | None:
        """The new values of an item patch that sets number fields of ``key``'s items only, as the model holds
        them; None when it does anything else (then the item is validated whole)."""
        if not (isinstance(item_patch, list) and len(item_patch) == 3 and item_patch[0] == "d"
                and isinstance(item_patch[1], dict) and not item_patch[2] and item_patch[1]):
            return None
        numbers, out = NUMBERS[key], {}
        for name, p in item_patch[1].items():
            field = numbers.get(name)
            if field is None or not (isinstance(p, list) and len(p) == 2 and p[0] == "="):
                return None
            if type(p[1]) is field[0]:  # the common case, inline: a float for a float field, an int for an int
                out[name] = p[1]
                continue
            ok, value = _number(p[1], *field)
            if not ok:
                return None
            out[name] = value
        return out


__all__ = ["LISTS", "SampleBook", "ValidationError"]
