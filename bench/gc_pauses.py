"""The cyclic garbage collector's pauses while a benchmark measures (``gc.callbacks``)."""

from __future__ import annotations

import gc
import time


class GcPauses:
    """Each collection of ``generation`` (None: any) that ends while ``on``, in ms, in ``pauses``; a context
    manager that hooks into ``gc.callbacks`` and unhooks."""

    def __init__(self, generation: int | None = None) -> None:
        self.generation = generation
        self.pauses: list[float] = []
        self.on = False
        self._began = 0.0

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._cb)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._cb)

    def _cb(self, phase: str, info: dict) -> None:
        if self.generation is not None and info.get("generation") != self.generation:
            return
        if phase == "start":
            self._began = time.perf_counter()
        elif self.on:
            self.pauses.append((time.perf_counter() - self._began) * 1000)
