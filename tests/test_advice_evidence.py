"""Advice only from live evidence (issue 24, item 5): the rules with figures' ages and dead processes.

Every figure a rule uses comes from a live process of the GPU's current session and is younger than its own
age bound (``advisor.FIGURE_MAX_AGE_S``); "growing" needs a rising series of distinct readings; the orphaned
memory rule reads the orphan hunter's proven orphans. (The real-process case: test_advice_live_evidence.py.)
"""

from __future__ import annotations

import pytest

from console.core import advisor
from console.core.advisor import FIGURE_MAX_AGE_S, ServerContext, advise, rising, series
from console.core.classify.stamps import lag_after, metrics_lag, stamp_of
from console.core.planner import parse_server_flags
from console.core.sessions import derive_views
from console.model import (
    ConnectionInfo,
    ExitRecord,
    Figure,
    GpuProc,
    GpuSample,
    HostSnapshot,
    HostView,
    ProcRef,
    ServerProc,
    ServingFigures,
    SessionInfo,
    SupervisorRecord,
)
from console.ops.advice_host import LiveLogs, dated_log_figures, figures_for, host_advice, live_server

NOW = 1_800_000_000.0
BASE = ["--model-path", "/m", "--mem-fraction-static", "0.85", "--max-running-requests", "32"]


def fig(v: float, at: float = NOW, source: str = "metrics") -> Figure:
    return Figure(value=v, source=source, at=at)  # type: ignore[arg-type]


def gpu(power: float = 300.0) -> GpuSample:
    return GpuSample(index=0, power_w=power, power_limit_w=600.0, mem_total_mib=97887, mem_used_mib=60000)


def ctx(figures: ServingFigures, *, history=(), power=300.0, gpu_at: float | None = NOW, argv=BASE, now=NOW,
        tail=(), retract_lag_s=None) -> ServerContext:
    return ServerContext(host="h", gpu=gpu(power), now=now, gpu_at=gpu_at, pid=4242, flags_argv=argv,
                         flags=parse_server_flags(argv), figures=figures, history=history, log_tail=tail,
                         retract_lag_s=retract_lag_s)


def kinds(advice) -> list[str]:
    return [a.kind for a in advice]


# ---------------------------------------------------------------- ages

def test_every_figure_has_its_own_age_bound():
    assert set(FIGURE_MAX_AGE_S) == set(ServingFigures.model_fields)
    for name, bound in FIGURE_MAX_AGE_S.items():
        assert isinstance(bound, float) and bound > 0, name
    assert advisor.QUEUE_MAX_AGE_S == FIGURE_MAX_AGE_S["queue"]
    assert isinstance(advisor.GPU_SAMPLE_MAX_AGE_S, float)


@pytest.mark.parametrize("age,advised", [(0.0, True), (advisor.QUEUE_MAX_AGE_S - 1, True),
                                         (advisor.QUEUE_MAX_AGE_S + 1, False), (3600.0, False)])
def test_a_queue_older_than_its_bound_advises_nothing(age, advised):
    a = advise([ctx(ServingFigures(queue=fig(8, at=NOW - age)))])
    assert (kinds(a) == ["gpu_underused"]) is advised


def test_a_figure_dated_in_the_future_is_not_trusted():
    assert advise([ctx(ServingFigures(queue=fig(8, at=NOW + 60)))]) == []


@pytest.mark.parametrize("gpu_at", [None, NOW - advisor.GPU_SAMPLE_MAX_AGE_S - 1])
def test_an_undated_or_stale_gpu_sample_gives_no_power_advice(gpu_at):
    assert advise([ctx(ServingFigures(queue=fig(8)), gpu_at=gpu_at)]) == []
    throttled = ServerContext(host="h", gpu=gpu(598), now=NOW, gpu_at=gpu_at, throttle_reasons=("sw_power_cap",))
    assert advise([throttled]) == []
    assert kinds(advise([throttled.__class__(**{**throttled.__dict__, "gpu_at": NOW})])) == ["power_throttled"]


def test_a_stale_throughput_is_left_out_of_the_evidence():
    a = advise([ctx(ServingFigures(queue=fig(8), gen_throughput=fig(640, at=NOW - 300)))])
    assert kinds(a) == ["gpu_underused"] and not any("tok/s" in e for e in a[0].evidence)


# ---------------------------------------------------------------- growing

def _queue_ctx(values, *, step: float = 5.0, running: float = 32) -> ServerContext:
    readings = [ServingFigures(queue=fig(v, at=NOW - step * (len(values) - 1 - i))) for i, v in enumerate(values)]
    current = readings[-1].model_copy(update={"running": fig(running)})
    return ctx(current, history=readings[:-1], power=580)


def test_a_flat_queue_is_not_growing():
    assert advise([_queue_ctx([24, 24, 24, 24, 24, 24])]) == []


def test_a_queue_rising_by_less_than_the_minimum_is_not_growing():
    assert advise([_queue_ctx([24, 24, 25])]) == []


def test_a_rising_queue_is_growing_and_the_evidence_is_the_series_judged():
    a = advise([_queue_ctx([20, 20, 20, 20, 22, 24, 26])])
    assert kinds(a) == ["running_at_limit"]
    assert "queue 20, 20, 20, 22, 24, 26 (growing)" in a[0].evidence  # the six readings judged, shown


def test_the_old_rule_fired_on_a_flat_shown_series():
    """The incident: growth measured over all readings while the evidence showed the last six (flat)."""
    assert advise([_queue_ctx([10, 24, 24, 24, 24, 24, 24])]) == []


def test_one_stale_reading_read_again_is_one_observation():
    same = [ServingFigures(queue=fig(v, at=NOW - 10)) for v in (20, 22, 24)]  # one line, read three times
    c = ctx(ServingFigures(queue=fig(26, at=NOW - 10), running=fig(32)), history=same, power=580)
    assert series(c, "queue") == [26] and advise([c]) == []


def test_readings_outside_the_trend_window_do_not_count():
    old = [ServingFigures(queue=fig(v, at=NOW - advisor.TREND_WINDOW_S - 100 + i)) for i, v in enumerate((2, 4))]
    c = ctx(ServingFigures(queue=fig(9), running=fig(32)), history=old, power=580)
    assert series(c, "queue") == [9]


@pytest.mark.parametrize("values,want", [([1, 2, 3], True), ([3, 3, 3], False), ([1, 5, 4], False), ([1, 3], False),
                                         ([5, 5, 6], False), ([0, 0, 2], True)])
def test_rising(values, want):
    assert rising(values, advisor.MIN_QUEUE_RISE) is want


def test_a_stale_retraction_line_is_no_evidence():
    tail = ["[2026-11-30 10:00:00] KV cache pool is full. Retract requests. #retracted_reqs: 3"]
    full = ServingFigures(token_usage=fig(0.98))
    assert kinds(advise([ctx(full, tail=tail, retract_lag_s=5.0, power=590)])) == ["kv_cache_full"]
    assert advise([ctx(full, tail=tail, retract_lag_s=advisor.RETRACTED_MAX_AGE_S + 1, power=590)]) == []
    assert advise([ctx(full, tail=tail, retract_lag_s=None, power=590)]) == []
    counter = [ServingFigures(retracted_total=fig(5, at=NOW - 20))]
    assert advise([ctx(full.model_copy(update={"retracted_total": fig(5)}), history=counter, power=590)]) == []
    assert kinds(advise([ctx(full.model_copy(update={"retracted_total": fig(9)}), history=counter,
                             power=590)])) == ["kv_cache_full"]


# ---------------------------------------------------------------- the log's own clock

def test_stamps_of_real_prefixes():
    assert stamp_of("[2025-10-22 10:29:28 DP1 TP4] Decode batch") == stamp_of("[2025-10-22 10:29:28] x")
    assert stamp_of("INFO 09-28 15:47:24 [core.py:718] x") is not None
    assert stamp_of("(APIServer pid=1) INFO 09-28 15:47:24 [loggers.py:1] x") == stamp_of("INFO 09-28 15:47:24 y")
    assert stamp_of("2025-07-25T07:53:08.250+08:00 stdout F [2025-07-25 07:53:08] x") is not None
    assert stamp_of("  File \"x.py\", line 1") is None


DECODE = ("[2026-03-01 10:00:00 TP0] Decode batch, #running-req: 48, #token: 90000, token usage: 0.40, cuda graph: "
          "True, gen throughput (token/s): 27.00, #queue-req: 8, ")
PROBE = '[2026-03-01 10:{:02d}:00] INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 200 OK'


def test_metrics_lag_is_how_long_the_log_went_on():
    assert metrics_lag([DECODE]) == 0.0
    assert metrics_lag([DECODE, PROBE.format(1), PROBE.format(2)]) == 120.0
    assert metrics_lag(["no figures here"]) is None
    assert metrics_lag([DECODE, "Traceback (most recent call last):"]) is None  # nothing after it is dated
    assert lag_after(["undated line", PROBE.format(1)], 0) is None


def test_log_figures_are_dated_by_the_lines_not_by_the_read():
    m, at = dated_log_figures([DECODE, PROBE.format(1), PROBE.format(5)], read_at=NOW)
    assert m is not None and m.queue_req == 8 and at == NOW - 300  # five probe minutes after the batch line
    m, at = dated_log_figures([DECODE], read_at=NOW, written_at=NOW - 90)  # the file was last written 90 s ago
    assert at == NOW - 90
    assert dated_log_figures([DECODE, "undated"], read_at=NOW) == (None, None)


# ---------------------------------------------------------------- dead processes, from a snapshot

LAUNCHER_ARGV = ["python3", "-m", "sglang.launch_server", *BASE, "--port", "30000"]


def _snap(servers, sessions=(), procs=(GpuProc(pid=31, used_mib=80_000),)) -> HostSnapshot:
    g = GpuSample(index=0, uuid="GPU-0", power_w=120.0, power_limit_w=600.0, mem_total_mib=97887,
                  mem_used_mib=80_000, procs=list(procs))
    return HostSnapshot(name="h", connection=ConnectionInfo(state="connected"), sampled_at=NOW, received_at=NOW,
                        gpu_source="sim", gpus=[g], servers=list(servers), sessions=list(sessions), agent_uid=1000)


def _view(snap: HostSnapshot) -> HostView:
    return HostView(snapshot=snap, sessions=derive_views(snap, {}, NOW))


def _logs(key: str) -> LiveLogs:
    return LiveLogs(tails={key: [DECODE]}, read_at={key: NOW})  # a fresh-looking "8 queued"


def test_an_orphaned_worker_gives_no_serving_advice_and_its_memory_is_advised():
    """The incident: the launcher is dead, its escaped scheduler holds the GPU; its stdout is the dead log."""
    dead = ProcRef(pid=30, ppid=1, pgid=30, start_ticks=5, state="Z", uid=1000, argv=LAUNCHER_ARGV, role="launcher")
    worker = ServerProc(pid=31, ppid=1, pgid=31, sid=31, start_ticks=6, state="S", uid=1000, user="op", role="worker",
                        framework="sglang", argv=["sglang::scheduler_TP0"], gpu_mem_mib={0: 80_000},
                        reparented_from=dead)
    view = _view(_snap([worker]))
    (v,) = [s for s in view.sessions if s.launcher_pid == 31]
    assert v.state == "foreign" and not live_server(view, v)
    assert figures_for(view, v, _logs("pid:31")).queue is not None  # the log alone would say "8 queued"
    a = host_advice(view, logs=_logs("pid:31"), now=NOW)
    assert kinds(a) == ["orphan_memory"], a
    assert a[0].pid == 31 and a[0].gpu == 0 and "80000 MiB" in a[0].message
    assert any("died while the agent watched" in e for e in a[0].evidence)


def test_a_live_hand_started_server_is_advised_from_the_same_log():
    launcher = ServerProc(pid=30, ppid=1, pgid=30, start_ticks=5, state="S", uid=1000, role="launcher",
                          framework="sglang", argv=LAUNCHER_ARGV, gpu_mem_mib={0: 80_000})
    view = _view(_snap([launcher], procs=[GpuProc(pid=30, used_mib=80_000)]))
    assert kinds(host_advice(view, logs=_logs("pid:30"), now=NOW)) == ["gpu_underused"]
    assert host_advice(view, logs=_logs("pid:30"), now=NOW + advisor.QUEUE_MAX_AGE_S + 1) == []  # later: stale


def _session(sid: str, *, alive: bool, exit: ExitRecord | None) -> SessionInfo:
    return SessionInfo(session_id=sid, run_dir=f"/runs/{sid}", server_alive=alive, supervisor_alive=alive,
                       record=SupervisorRecord(pid=40, pgid=40, start_ticks=9, started_at=NOW - 600, supervisor_pid=39),
                       exit=exit)


def test_a_managed_session_whose_server_ended_gives_no_serving_advice():
    sid = "20260301-100000-gpu0-abcd"
    launcher = ServerProc(pid=40, ppid=39, pgid=40, start_ticks=9, state="S", uid=1000, role="launcher",
                          framework="sglang", argv=LAUNCHER_ARGV, session_id=sid, gpu_mem_mib={0: 80_000})
    live = _snap([launcher], [_session(sid, alive=True, exit=None)], procs=[GpuProc(pid=40, used_mib=80_000)])
    view = HostView(snapshot=live, sessions=derive_views(live, {}, NOW))
    assert kinds(host_advice(view, logs=_logs(sid), now=NOW)) == ["gpu_underused"]
    ended = _snap([], [_session(sid, alive=False, exit=ExitRecord(signal=9, ended_at=NOW - 5))], procs=[])
    view = HostView(snapshot=ended, sessions=derive_views(ended, {}, NOW))
    assert host_advice(view, logs=_logs(sid), now=NOW) == []
