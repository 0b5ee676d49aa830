"""The console's view as Prometheus metrics, for fleets that already run Prometheus/Grafana.

:class:`ViewCollector` is a ``prometheus_client`` collector over the latest
:class:`~console.model.HostView` of each host (kept up to date by the caller's trackers):
per GPU power, memory, utilisation, current session state and cause, advice count; per host
connection state and sample age. ``host_connected`` is 1 only while the agent answers (a ``stale`` link,
whose agent answered no ping within its bound, reads 0, its GPUs' sessions ``stale``). Names are prefixed
``mtpconsole_``; the standard client library renders the exposition format.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import get_args

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from console.model import Advice, ConnState, HostView, SessionState

STATES: tuple[SessionState, ...] = ("idle", "launching", "loading", "ready", "failed", "stopping", "stopped",
                                    "foreign", "stale", "unreachable")

LINK_STATES: tuple[ConnState, ...] = get_args(ConnState)

Views = Callable[[], Mapping[str, HostView]]
AdviceOf = Callable[[HostView], Sequence[Advice]]


def gpu_states(view: HostView) -> dict[int, tuple[SessionState, str | None]]:
    """GPU index -> (state, cause) of the GPU's current session (the one rule's choice; idle when none, but
    ``stale`` on a stale link and ``unreachable`` on a down one: "idle" is a fact with an age too)."""
    conn = view.snapshot.connection.state
    none: SessionState = "idle" if conn in ("connected", "connecting") else "stale" if conn == "stale" else "unreachable"
    out: dict[int, tuple[SessionState, str | None]] = {g.index: (none, None) for g in view.snapshot.gpus}
    if view.current:
        for c in view.current:
            if c.session is not None:
                out[c.index] = (c.session.state, c.session.cause)
        return out
    for s in view.sessions:  # a view built without the rule: live sessions only
        if s.state not in ("stopped", "failed") or s.ended_at is None:
            for gpu in s.gpus:
                out[gpu] = (s.state, s.cause)
    return out


class ViewCollector(Collector):
    """Collects the metrics of every host view ``views()`` returns at scrape time."""

    def __init__(self, views: Views, advice: AdviceOf | None = None, clock: Callable[[], float] = time.time):
        self.views, self.advice, self.clock = views, advice, clock

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        up = GaugeMetricFamily("mtpconsole_host_connected", "1 when the console's link to the host is up and its agent "
                               "answers", labels=["host"])
        link = GaugeMetricFamily("mtpconsole_host_link_state", "1 for the state of the console's link to the host "
                                 "(stale: the agent answered no ping within its bound)", labels=["host", "state"])
        age = GaugeMetricFamily("mtpconsole_host_sample_age_seconds", "Seconds since the host's last sample arrived",
                                labels=["host"])
        power = GaugeMetricFamily("mtpconsole_gpu_power_watts", "GPU power draw", labels=["host", "gpu"])
        limit = GaugeMetricFamily("mtpconsole_gpu_power_limit_watts", "GPU power limit", labels=["host", "gpu"])
        mem = GaugeMetricFamily("mtpconsole_gpu_memory_used_bytes", "GPU memory in use", labels=["host", "gpu"])
        mem_total = GaugeMetricFamily("mtpconsole_gpu_memory_total_bytes", "GPU memory", labels=["host", "gpu"])
        util = GaugeMetricFamily("mtpconsole_gpu_utilization_ratio", "GPU utilisation, 0..1", labels=["host", "gpu"])
        state = GaugeMetricFamily("mtpconsole_gpu_session_state",
                                  "1 for the state of the session the console shows on this GPU",
                                  labels=["host", "gpu", "state"])
        failed = GaugeMetricFamily("mtpconsole_gpu_failure", "1 while the GPU's session is FAILED, by cause",
                                   labels=["host", "gpu", "cause"])
        adv = GaugeMetricFamily("mtpconsole_gpu_advice", "Pieces of advice for the GPU's server", labels=["host", "gpu"])
        for name, view in sorted(self.views().items()):
            snap = view.snapshot
            up.add_metric([name], 1.0 if snap.connection.state == "connected" else 0.0)
            for ls in LINK_STATES:
                link.add_metric([name, ls], 1.0 if ls == snap.connection.state else 0.0)
            a = snap.age_s(now)
            if a is not None:
                age.add_metric([name], a)
            per_gpu = gpu_states(view)
            counts: dict[int, int] = {}
            for item in (self.advice(view) if self.advice else ()):
                if item.gpu is not None:
                    counts[item.gpu] = counts.get(item.gpu, 0) + 1
            for g in snap.gpus:
                labels = [name, str(g.index)]
                if g.power_w is not None:
                    power.add_metric(labels, g.power_w)
                if g.power_limit_w is not None:
                    limit.add_metric(labels, g.power_limit_w)
                if g.mem_used_mib is not None:
                    mem.add_metric(labels, g.mem_used_mib * 1048576.0)
                if g.mem_total_mib is not None:
                    mem_total.add_metric(labels, g.mem_total_mib * 1048576.0)
                if g.util_pct is not None:
                    util.add_metric(labels, g.util_pct / 100.0)
                current, cause = per_gpu.get(g.index, ("idle", None))
                for st in STATES:
                    state.add_metric([*labels, st], 1.0 if st == current else 0.0)
                if current == "failed":
                    failed.add_metric([*labels, cause or "other"], 1.0)
                adv.add_metric(labels, float(counts.get(g.index, 0)))
        yield from (up, link, age, power, limit, mem, mem_total, util, state, failed, adv)
