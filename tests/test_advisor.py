"""The metrics parser on real /metrics text and each advisor rule on recorded fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.core import advisor
from console.core.advisor import ServerContext, advise
from console.core.metrics import MetricsParseError, figures_from_log, merge, parse_sglang_metrics
from console.core.model_config import parse_model_config
from console.core.orphans import Orphan
from console.core.planner import parse_server_flags
from console.model import Figure, GpuSample, ServeMetrics, ServingFigures

DATA = Path(__file__).parent / "data"
METRICS_0523 = json.loads((DATA / "sglang" / "sglang-0.5.23-metrics.json").read_text())


def fig(v: float, at: float = 100.0, source: str = "metrics") -> Figure:
    return Figure(value=v, source=source, at=at)  # type: ignore[arg-type]


def test_real_metrics_text_from_a_public_thread():
    text = (DATA / "metrics" / "sglang-pr4444-metrics.txt").read_text()
    f = parse_sglang_metrics(text, at=5.0)
    assert f.running == Figure(value=0.0, source="metrics", at=5.0)
    assert f.token_usage is not None and f.token_usage.value == 0.0
    assert f.gen_throughput is None  # the post was cut before its sample line


def test_the_names_we_read_exist_in_sglang_0523():
    names = {m["name"] for m in METRICS_0523["metrics"]}
    for n in (list(advisor_metric_names())):
        assert "sglang:" + n in names, n


def advisor_metric_names():
    from console.core import metrics
    yield from metrics.SUMMED.values()
    yield from metrics.AVERAGED.values()
    yield from metrics.HISTOGRAM_MEANS.values()
    for n in metrics.COUNTERS.values():
        yield n + "_total"


def test_ranks_summed_over_dp_and_histograms_averaged():
    text = "\n".join([
        "# TYPE sglang:num_queue_reqs gauge",
        'sglang:num_queue_reqs{dp_rank="0",tp_rank="0"} 3',
        'sglang:num_queue_reqs{dp_rank="1",tp_rank="0"} 4',
        'sglang:num_queue_reqs{dp_rank="0",tp_rank="1"} 3',
        "# TYPE sglang:spec_accept_length gauge",
        'sglang:spec_accept_length{tp_rank="0"} 2.5',
        "# TYPE sglang:time_to_first_token_seconds histogram",
        'sglang:time_to_first_token_seconds_bucket{le="1.0"} 2',
        'sglang:time_to_first_token_seconds_bucket{le="+Inf"} 4',
        "sglang:time_to_first_token_seconds_sum 2.0",
        "sglang:time_to_first_token_seconds_count 4",
        "# TYPE sglang_gen_throughput gauge",
        "sglang_gen_throughput 640.5",
    ]) + "\n"
    f = parse_sglang_metrics(text, at=1.0)
    assert f.queue is not None and f.queue.value == 7
    assert f.accept_length is not None and f.accept_length.value == 2.5
    assert f.ttft_s is not None and f.ttft_s.value == 0.5
    assert f.gen_throughput is not None and f.gen_throughput.value == 640.5


def test_garbage_metrics_is_a_clear_error():
    with pytest.raises(MetricsParseError):
        parse_sglang_metrics("sglang:x{unclosed 1\n", at=0)


def test_log_fallback_and_merge_keep_source_and_age():
    log = figures_from_log(ServeMetrics(gen_throughput=26.7, queue_req=5, running_req=32), at=50.0)
    assert log.queue == Figure(value=5, source="log", at=50.0)
    m = merge(ServingFigures(gen_throughput=fig(30.0, at=60.0)), log)
    assert m.gen_throughput is not None and m.gen_throughput.source == "metrics"
    assert m.queue is not None and m.queue.source == "log"


# ------------------------------------------------------------------ rules

SHAPE_MTP = parse_model_config({
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "torch_dtype": "bfloat16",
    "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936, "max_position_embeddings": 40960,
    "num_nextn_predict_layers": 1,
})
SHAPE_PLAIN = SHAPE_MTP.model_copy(update={"mtp_layers": 0, "mtp_params": 0})


def gpu(power=300.0, limit=600.0, total=97887) -> GpuSample:
    return GpuSample(index=0, power_w=power, power_limit_w=limit, mem_total_mib=total, mem_used_mib=60000)


def ctx(argv, *, shape=SHAPE_MTP, figures=None, history=(), g=None, log_tail=(), throttle=(), now=100.0,
        gpu_at=100.0, retract_lag_s=None) -> ServerContext:
    if retract_lag_s is None and log_tail:
        retract_lag_s = 0.0
    return ServerContext(host="h", gpu=g or gpu(), now=now, gpu_at=gpu_at, pid=4242, flags_argv=argv,
                         flags=parse_server_flags(argv), figures=figures or ServingFigures(), history=history,
                         shape=shape, log_tail=log_tail, retract_lag_s=retract_lag_s, throttle_reasons=throttle)


BASE = ["--model-path", "/m", "--mem-fraction-static", "0.85", "--max-running-requests", "32"]


def kinds(advice):
    return [a.kind for a in advice]


def test_underused_gpu_without_speculation_gets_a_checked_eagle_suggestion():
    a = advise([ctx(BASE, figures=ServingFigures(queue=fig(8), gen_throughput=fig(640)))], validate=lambda argv: None)
    assert kinds(a) == ["gpu_underused"]
    s = a[0].suggestion
    assert s is not None and "--speculative-algorithm" in s.flags and s.valid is True
    assert s.planner.startswith("planner:")
    assert any("300 W of 600 W" in e for e in a[0].evidence)
    # the title names the measure (power), not "underused": NVML's utilisation may read 96 % meanwhile
    assert a[0].message.startswith("GPU at 50% of its power limit with 8 queued; consider EAGLE/MTP (planner:")


def test_underused_rule_needs_a_queue_and_low_power():
    assert advise([ctx(BASE, figures=ServingFigures(queue=fig(0)))]) == []
    assert advise([ctx(BASE, g=gpu(power=560), figures=ServingFigures(queue=fig(8)))]) == []


def test_underused_without_mtp_head_or_config_says_so_instead_of_fits():
    no_head = advise([ctx(BASE, shape=SHAPE_PLAIN, figures=ServingFigures(queue=fig(3)))])
    assert no_head[0].suggestion is None and "no MTP head" in no_head[0].message
    unknown = advise([ctx(BASE, shape=None, figures=ServingFigures(queue=fig(3)))])
    assert unknown[0].suggestion is None and "config is unknown" in unknown[0].message


def test_planner_unchecked_suggestion_says_why():
    argv = BASE + ["--speculative-algorithm", "EAGLE"]
    low = [ServingFigures(accept_length=fig(1.1, at=90.0 + i)) for i in range(3)]  # three distinct readings
    a = advise([ctx(argv, shape=None, figures=ServingFigures(accept_length=fig(1.2)), history=low)])
    assert kinds(a) == ["speculation_costly"]
    assert a[0].suggestion is not None and "not checked by the planner (no model config)" in a[0].suggestion.planner
    assert "--speculative-algorithm" not in a[0].suggestion.flags


def test_good_acceptance_or_short_history_gives_no_advice():
    argv = BASE + ["--speculative-algorithm", "EAGLE"]
    assert advise([ctx(argv, figures=ServingFigures(accept_length=fig(2.8)),
                       history=[ServingFigures(accept_length=fig(2.9, at=90.0 + i)) for i in range(3)])]) == []
    assert advise([ctx(argv, figures=ServingFigures(accept_length=fig(1.1)))]) == []


def test_running_at_limit_with_growing_queue_raises_it_within_the_planner():
    hist = [ServingFigures(queue=fig(q, at=90.0 + i)) for i, q in enumerate((2, 5, 9))]
    a = advise([ctx(BASE, g=gpu(power=580), figures=ServingFigures(running=fig(32), queue=fig(14)), history=hist)])
    assert kinds(a) == ["running_at_limit"]
    assert a[0].suggestion is not None and "--max-running-requests 32 -> " in a[0].suggestion.change


def test_kv_full_with_retractions():
    tail = ["[2026-11-30 10:00:00] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.5"]
    a = advise([ctx(BASE, g=gpu(power=590), figures=ServingFigures(token_usage=fig(0.98)), log_tail=tail)])
    assert kinds(a) == ["kv_cache_full"]
    assert advise([ctx(BASE, g=gpu(power=590), figures=ServingFigures(token_usage=fig(0.98)))]) == []


def test_power_at_limit_with_throttled_clocks():
    a = advise([ctx(BASE, g=gpu(power=598), throttle=("sw_power_cap",))])
    assert kinds(a) == ["power_throttled"]
    assert advise([ctx(BASE, g=gpu(power=598))]) == []


def test_orphans_holding_memory():
    o = Orphan(host="h", pid=777, start_ticks=1, ppid=1, pgid=700, gpu_mem_mib={1: 81000},
               evidence=["its parent, pid 700 (python3 -m sglang.launch_server), was seen to die; init adopted it"])
    a = advise([], advisor.HostContext(host="h", orphans=[o], gpu_source="nvml"))
    assert kinds(a) == ["orphan_memory"] and a[0].pid == 777 and a[0].gpu == 1 and "81000 MiB" in a[0].message
    assert a[0].evidence == ["GPU 1: 81000 MiB held by pid 777 (nvml)", o.evidence[0]]


def test_thresholds_are_named_and_explained():
    for name in ("UNDERUSED_POWER_FRACTION", "LOW_ACCEPT_LENGTH", "KV_FULL_USAGE", "POWER_AT_LIMIT_FRACTION"):
        assert isinstance(getattr(advisor, name), float)
    assert [k for k, _ in advisor.SERVER_RULES] == ["gpu_underused", "speculation_costly", "running_at_limit",
                                                    "kv_cache_full", "power_throttled"]


def test_adaptive_speculation_reads_its_current_steps_from_the_servers_gauge():
    """``--speculative-adaptive`` changes the step count at run time: the advisor reads it (``sglang:spec_num_steps``)
    and gives no "remove speculation" advice once the controller has already stopped drafting."""
    text = ('# TYPE sglang:spec_num_steps gauge\nsglang:spec_num_steps{tp_rank="0"} 1\n'
            '# TYPE sglang:spec_num_steps_x gauge\nsglang:spec_num_steps{tp_rank="1"} 7\n')
    f = parse_sglang_metrics(text, at=1.0)
    assert f.spec_steps is not None and f.spec_steps.value == 1  # TP rank 0 only
    argv = BASE + ["--speculative-algorithm", "EAGLE", "--speculative-adaptive"]
    low = [ServingFigures(accept_length=fig(1.1, at=90.0 + i)) for i in range(3)]
    a = advise([ctx(argv, shape=None, figures=ServingFigures(accept_length=fig(1.2), spec_steps=fig(1)), history=low)])
    assert kinds(a) == ["speculation_costly"]
    assert "even with adaptive steps" in a[0].message
    assert any("adaptive: 1 speculative step(s) now" in e for e in a[0].evidence)
    off = advise([ctx(argv, shape=None, figures=ServingFigures(accept_length=fig(1.0), spec_steps=fig(0)), history=low)])
    assert off == []
