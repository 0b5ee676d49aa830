"""Serving figures of a server: from its Prometheus ``/metrics`` text, else from its log.

The agent on the host fetches ``/metrics`` (only when the server runs with ``--enable-metrics``)
and ships the raw text; it is parsed here with ``prometheus_client``'s text parser, never by
hand. Without metrics the log's ``Decode batch`` lines (already read into
:class:`~console.model.ServeMetrics` by the classifier) are the fallback. Every figure carries
its source and the time it was read, so the UI and ``status --json`` can show its age.

SGLang exports one series per scheduler rank (labels ``tp_rank``, ``dp_rank``, ...). Counts of
requests and throughput are summed over data-parallel ranks and taken from tensor-parallel rank
0 only (every TP rank of one DP group reports the same batch); ratios are averaged.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from functools import lru_cache

from console.model import Figure, ServeMetrics, ServingFigures

# One name per figure; SGLang's prefix is ``sglang:`` (older exporters and some proxies
# rewrite it to ``sglang_``; both are accepted).
SUMMED = {
    "gen_throughput": "gen_throughput",
    "running": "num_running_reqs",
    "queue": "num_queue_reqs",
}
AVERAGED = {
    "token_usage": "token_usage",
    "accept_length": "spec_accept_length",
    "accept_rate": "spec_accept_rate",
    # the step count running now: an adaptive server (--speculative-adaptive) changes it (0.5.23 exports it here,
    # not in /server_info)
    "spec_steps": "spec_num_steps",
}
COUNTERS = {"retracted_total": "num_retracted_requests"}
HISTOGRAM_MEANS = {"ttft_s": "time_to_first_token_seconds", "itl_s": "inter_token_latency_seconds"}
PREFIXES = ("sglang:", "sglang_")

MAX_METRICS_BYTES = 4 << 20
"""Refuse to parse more than this (the agent already caps what it fetches at a smaller size)."""
PARSED_KEPT = 32
"""How many parsed ``/metrics`` responses are kept (one per metrics-exporting server and sample)."""


class MetricsParseError(ValueError):
    """The text is not Prometheus exposition format (the message says where it broke)."""


def _short(name: str) -> str | None:
    for p in PREFIXES:
        if name.startswith(p):
            return name[len(p):]
    return None


def _rank0(labels: dict[str, str]) -> bool:
    return labels.get("tp_rank", "0") == "0" and labels.get("pp_rank", "0") == "0"


@lru_cache(maxsize=PARSED_KEPT)
def parse_sglang_metrics(text: str, at: float) -> ServingFigures:
    """The figures in one ``/metrics`` response read at ``at`` (epoch seconds); a value that is not finite
    (``NaN``, ``+Inf``) is no figure. Parsed once per response (text and time): every later round of advice,
    every view of the same sample, gets the parse kept (a 2 MiB body cost seconds of CPU per round)."""
    # Imported here: prometheus_client pulls in its HTTP exposition (~40 ms) that a console start without
    # metrics to read never needs (see console/commands/tui.py's warm-up).
    from prometheus_client.parser import text_string_to_metric_families

    if len(text) > MAX_METRICS_BYTES:
        raise MetricsParseError(f"metrics text of {len(text)} bytes is over the {MAX_METRICS_BYTES} byte cap")
    values: dict[str, list[float]] = defaultdict(list)
    hist_sum: dict[str, float] = defaultdict(float)
    hist_count: dict[str, float] = defaultdict(float)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                short = _short(sample.name)
                if short is None or not _rank0(sample.labels):
                    continue
                if short.endswith("_sum") and short[:-4] in HISTOGRAM_MEANS.values():
                    hist_sum[short[:-4]] += sample.value
                elif short.endswith("_count") and short[:-6] in HISTOGRAM_MEANS.values():
                    hist_count[short[:-6]] += sample.value
                else:
                    values[short].append(sample.value)
    except (ValueError, TypeError, IndexError) as e:
        raise MetricsParseError(f"not Prometheus text: {e}") from e

    out: dict[str, Figure] = {}

    def put(field: str, v: float | None) -> None:
        if v is not None and math.isfinite(v):  # NaN is "not exported yet"; +Inf/-Inf are no count or rate
            out[field] = Figure(value=v, source="metrics", at=at)

    for field, name in SUMMED.items():
        put(field, sum(values[name]) if values.get(name) else None)
    for field, name in AVERAGED.items():
        vs = values.get(name)
        put(field, sum(vs) / len(vs) if vs else None)
    for field, name in COUNTERS.items():
        vs = values.get(name + "_total") or values.get(name)
        put(field, sum(vs) if vs else None)
    for field, name in HISTOGRAM_MEANS.items():
        if hist_count.get(name):
            put(field, hist_sum[name] / hist_count[name])
    return ServingFigures(**out)


def counter_total(text: str, name: str, rank0: bool = False) -> float | None:
    """The sum of counter ``name``'s samples (every label set; ``rank0``: SGLang's tensor-parallel rank 0 only) in a
    ``/metrics`` text, None when it has none (a deployment's requests/s: the gateway's ``smg_router_requests_total``,
    each server's ``sglang:num_requests_total``)."""
    from prometheus_client.parser import text_string_to_metric_families

    if len(text) > MAX_METRICS_BYTES:
        return None
    got: list[float] = []
    try:
        for family in text_string_to_metric_families(text):
            got += [s.value for s in family.samples if s.name == name and (not rank0 or _rank0(s.labels))]
    except (ValueError, TypeError, IndexError):
        return None
    vs = [v for v in got if math.isfinite(v)]
    return sum(vs) if vs else None


def figures_from_log(metrics: ServeMetrics | None, at: float | None) -> ServingFigures:
    """The fallback: the last ``Decode batch`` figures of the session's log, read at ``at``."""
    if metrics is None or at is None:
        return ServingFigures()
    pairs: Iterable[tuple[str, float | int | None]] = (
        ("gen_throughput", metrics.gen_throughput), ("running", metrics.running_req),
        ("queue", metrics.queue_req), ("token_usage", metrics.token_usage),
        ("accept_length", metrics.accept_len),
    )
    return ServingFigures(**{k: Figure(value=float(v), source="log", at=at) for k, v in pairs if v is not None})


PREFER_METRICS_WITHIN_S = 10.0
"""A ``/metrics`` figure wins over a log figure unless it is this much older: the log's time is when
the console read the line, not when the server wrote it, so it always looks newer than it is."""


def merge(primary: ServingFigures, fallback: ServingFigures) -> ServingFigures:
    """Per figure, ``primary`` (metrics) unless missing or clearly staler than ``fallback`` (the log)."""
    merged: dict[str, Figure] = {}
    for name in ServingFigures.model_fields:
        a, b = getattr(primary, name), getattr(fallback, name)
        pick = a if a is not None and (b is None or a.at >= b.at - PREFER_METRICS_WITHIN_S) else b
        if pick is not None:
            merged[name] = pick
    return ServingFigures(**merged)
