"""Memory planner: hand-checked numbers on synthetic configs, the incident's verdict, calibration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.cli import main as cli_main
from console.core.model_config import ModelConfigError, load_model_config, parse_model_config
from console.core.planner import (
    GIB,
    MIB,
    auto_mem_fraction_static,
    cuda_context_bytes,
    kv_bytes_per_token,
    mamba_state_bytes_per_slot,
    parse_mem,
    plan,
)
from console.errors import UserError

DATA = Path(__file__).resolve().parent / "data"
QWEN_LIKE = DATA / "models" / "qwen3.6-27b-like.json"
GPU_96 = 97887 * MIB  # RTX PRO 6000 Blackwell

INCIDENT = {
    "mem-fraction-static": 0.90, "max-running-requests": 512, "speculative-algorithm": "EAGLE",
    "speculative-num-steps": 3, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 4,
    "enable-hierarchical-cache": True, "hicache-size": 200, "mamba-radix-cache-strategy": "extra_buffer",
    "context-length": 32768, "tp-size": 1, "kv-cache-dtype": "auto",
}

TINY = {  # 2 layers, easy to check by hand
    "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16",
}


def test_tiny_param_count_by_hand():
    s = parse_model_config(TINY)
    head_dim = 16
    attn = 64 * 4 * head_dim + 2 * 64 * 2 * head_dim + 4 * head_dim * 64  # q, k+v, o
    mlp = 3 * 64 * 128
    norms = 2 * 64
    expected = 100 * 64 + 2 * (attn + mlp + norms) + 64  # tied embedding, final norm
    assert s.num_params == expected
    assert s.weights_bytes == expected * 2
    assert s.head_dim == head_dim and s.num_kv_heads == 2 and not s.hybrid


def test_kv_bytes_per_token_by_hand():
    s = parse_model_config(TINY)
    # 2 layers x 2 kv heads x 16 dims x 2 (K and V) x 2 bytes
    assert kv_bytes_per_token(s) == 2 * 2 * 16 * 2 * 2
    # tp 2: one kv head per rank
    assert kv_bytes_per_token(s, tp_size=2) == 2 * 1 * 16 * 2 * 2
    # tp 4 > kv heads: replicated, still one head per rank
    assert kv_bytes_per_token(s, tp_size=4) == 2 * 1 * 16 * 2 * 2
    assert kv_bytes_per_token(s, kv_dtype_bytes=1) == 2 * 2 * 16 * 2


def test_mla_kv_bytes_by_hand():
    cfg = dict(TINY, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=0)
    s = parse_model_config(cfg)
    assert s.mla
    assert kv_bytes_per_token(s) == (512 + 64) * 2 * 2  # (lora + rope) x layers x bf16
    assert kv_bytes_per_token(s, tp_size=8) == (512 + 64) * 2 * 2  # MLA is not sharded


def test_hybrid_layers_and_state_by_hand():
    s = load_model_config(QWEN_LIKE)
    assert s.num_layers == 64 and s.num_attention_layers == 16 and s.linear.num_layers == 48
    assert s.linear.kind == "gated_delta_net"
    assert s.mtp_layers == 1
    conv_dim = 2 * 16 * 128 + 32 * 128
    per_layer = conv_dim * 3 * 2 + 32 * 128 * 128 * 4  # conv (kernel-1, bf16) + ssm (fp32)
    assert mamba_state_bytes_per_slot(s) == 48 * per_layer
    assert kv_bytes_per_token(s) == 16 * 4 * 256 * 2 * 2
    # about 27B parameters, ~50 GB of bf16 weights
    assert 26e9 < s.num_params < 28e9
    assert 49 * GIB < s.weights_bytes < 52 * GIB


def test_layer_types_list_and_mamba2():
    cfg = dict(TINY, num_hidden_layers=4, layer_types=["linear_attention", "full_attention"] * 2,
               linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16)
    s = parse_model_config(cfg)
    assert (s.num_attention_layers, s.linear.num_layers) == (2, 2)
    m = dict(TINY, num_hidden_layers=4, hybrid_override_pattern="M-M*", mamba_num_heads=8, mamba_head_dim=16,
             ssm_state_size=32, conv_kernel=4, n_groups=1)
    s2 = parse_model_config(m)
    assert s2.linear.kind == "mamba2" and s2.linear.num_layers == 2 and s2.num_attention_layers == 1
    conv = (8 * 16 + 2 * 32) * 3 * 2
    ssm = 8 * 16 * 32 * 4
    assert mamba_state_bytes_per_slot(s2) == 2 * (conv + ssm)


def test_text_config_explicit_params_and_quantization():
    s = parse_model_config({"text_config": dict(TINY, num_parameters=1000)})
    assert s.num_params == 1000 and s.params_source == "config"
    q = parse_model_config(dict(TINY, quantization_config={"quant_method": "awq", "bits": 4}))
    assert q.weight_bytes_per_param < 1
    f8 = parse_model_config(dict(TINY, quantization_config={"quant_method": "fp8"}))
    assert f8.weight_bytes_per_param == 1.0
    # fp8 keeps embeddings 16-bit
    assert f8.weights_bytes == (f8.num_params - f8.embedding_params) + f8.embedding_params * 2


@pytest.mark.parametrize("bad", [{}, {"hidden_size": "x", "num_hidden_layers": 2, "num_attention_heads": 1},
                                 {"hidden_size": 8, "num_hidden_layers": 0, "num_attention_heads": 1}, [1, 2]])
def test_bad_configs_raise_clear_errors(bad):
    with pytest.raises(ModelConfigError):
        parse_model_config(bad)  # type: ignore[arg-type]


def test_load_model_config_errors(tmp_path):
    with pytest.raises(ModelConfigError, match="no such file"):
        load_model_config(tmp_path / "missing.json")
    bad = tmp_path / "config.json"
    bad.write_bytes(b"\xff\xfe not utf8")
    with pytest.raises(ModelConfigError, match="UTF-8"):
        load_model_config(tmp_path)
    bad.write_text("{not json")
    with pytest.raises(ModelConfigError, match="invalid JSON"):
        load_model_config(bad)


def test_plan_numbers_by_hand_dense():
    s = parse_model_config(TINY)
    gpu = 10 * GIB
    p = plan(s, {"mem-fraction-static": 0.5, "context-length": 1024}, gpu)
    usable = gpu - cuda_context_bytes(1)
    assert p.usable_bytes == usable
    assert p.static_budget_bytes == int(0.5 * usable)
    weights = s.weights_bytes + 200 * MIB
    assert p.weights_bytes == weights
    assert p.kv_tokens == (int(0.5 * usable) - weights) // (2 * 2 * 16 * 2 * 2)
    assert p.verdict == "fits"
    assert p.requests_at_context == p.kv_tokens // 1024 or p.max_running_requests is not None


def test_auto_mem_fraction():
    # 96 GB GPU: reserve is at least 10 GiB -> about 0.86-0.9
    f = auto_mem_fraction_static(GPU_96)
    assert 0.80 < f <= (97887 - 10240) / 97887 + 1e-9
    # small GPU: no 10 GiB floor
    assert auto_mem_fraction_static(24 * GIB, chunked_prefill_size=2048) > 0.8
    # speculation reserves more
    assert auto_mem_fraction_static(40 * GIB, speculative=True) < auto_mem_fraction_static(40 * GIB)


def test_incident_does_not_fit_with_advice():
    s = load_model_config(QWEN_LIKE)
    p = plan(s, INCIDENT, GPU_96, weights_bytes=51 * GIB)
    assert p.verdict == "does_not_fit"
    assert p.mamba_slots_per_request == 5 + 4  # extra_buffer + 4 draft tokens
    assert any("recurrent state for 512 requests" in r for r in p.reasons)
    assert any("host RAM" in r for r in p.reasons)
    mr = [a for a in p.advice if a.startswith("lower --max-running-requests to ≤ ")]
    assert mr, p.advice
    n = int(mr[0].rsplit(" ", 1)[1])
    assert 16 <= n < 48
    # and following the advice fits
    assert plan(s, {**INCIDENT, "max-running-requests": n}, GPU_96, weights_bytes=51 * GIB).verdict != "does_not_fit"


def test_incident_48_at_080_also_fails_and_spec_default():
    s = load_model_config(QWEN_LIKE)
    flags = {k: v for k, v in INCIDENT.items() if k != "max-running-requests"}
    p = plan(s, {**flags, "mem-fraction-static": 0.80}, GPU_96, weights_bytes=51 * GIB)
    assert p.max_running_requests == 48 and p.max_running_source == "speculative_default"
    assert p.verdict == "does_not_fit"


def test_corrected_config_fits():
    s = load_model_config(QWEN_LIKE)
    flags = {k: v for k, v in INCIDENT.items() if k not in ("enable-hierarchical-cache", "hicache-size")}
    p = plan(s, {**flags, "max-running-requests": 32}, GPU_96, weights_bytes=51 * GIB)
    assert p.verdict == "fits", (p.reasons, p.advice)
    assert p.kv_tokens >= 32768


def test_tp_advice_and_tight():
    s = parse_model_config(dict(TINY, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
                                intermediate_size=28672, num_hidden_layers=80, vocab_size=128256,
                                tie_word_embeddings=False))  # ~70B
    p = plan(s, {"mem-fraction-static": 0.9}, 80 * GIB, n_gpus=4)
    assert p.verdict == "does_not_fit"
    assert any(a.startswith("use --tp-size") for a in p.advice)
    p2 = plan(s, {"mem-fraction-static": 0.9, "tp-size": 4}, 80 * GIB, n_gpus=4)
    assert p2.verdict in ("fits", "tight")
    # a huge static fraction leaves too little for activations
    p3 = plan(parse_model_config(TINY), {"mem-fraction-static": 0.99}, 80 * GIB)
    assert p3.verdict == "tight" and any("lower --mem-fraction-static" in a for a in p3.advice)


def test_bad_flag_values():
    s = parse_model_config(TINY)
    with pytest.raises(ValueError, match="mem-fraction-static"):
        plan(s, {"mem-fraction-static": "lots"}, GPU_96)
    with pytest.raises(ValueError, match="between 0 and 1"):
        plan(s, {"mem-fraction-static": 1.5}, GPU_96)
    with pytest.raises(ValueError):
        plan(s, {"max-running-requests": 0}, GPU_96)


def test_parse_mem():
    assert parse_mem("96GB") == 96 * 10 ** 9 and parse_mem("96 GiB") == parse_mem("96G") == 96 * GIB  # true meanings
    assert parse_mem("512MB") == 512 * 10 ** 6 and parse_mem("2TiB") == 2 << 40 and parse_mem("1Ti") == 1 << 40
    assert parse_mem("97887MiB") == 97887 * MIB
    assert parse_mem("80") == 80 * GIB
    for bad in ("", "abc", "-1GB", "nanGB"):
        with pytest.raises(ValueError):
            parse_mem(bad)


# ---------------------------------------------------------------- calibration against published logs

def _calibration():
    return sorted((DATA / "calibration").glob("*.json"))


def test_calibration_set_has_three_or_more():
    assert len(_calibration()) >= 3


@pytest.mark.parametrize("path", _calibration(), ids=lambda p: p.stem)
def test_calibration_within_15_percent(path):
    rec = json.loads(path.read_text())
    s = parse_model_config(rec["model_config"])
    p = plan(s, rec["flags"], rec["gpu_mem_mib"] * MIB, n_gpus=rec["n_gpus"])
    obs = rec["observed"]
    assert rec["source_url"]
    if obs.get("weights_gib"):
        w = p.weights_bytes / GIB
        assert abs(w - obs["weights_gib"]) / obs["weights_gib"] <= 0.15, (w, obs["weights_gib"])
    assert abs(p.kv_tokens - obs["kv_tokens"]) / obs["kv_tokens"] <= 0.15, (p.kv_tokens, obs["kv_tokens"])


# ---------------------------------------------------------------- CLI

def test_cli_plan_incident_exit_1(capsys):
    rc = cli_main(["plan", "--model-config", str(QWEN_LIKE), "--gpu-mem", "97887MiB", "--weights-gb", "51", "--",
                   "--mem-fraction-static", "0.90", "--max-running-requests", "512", "--speculative-algorithm",
                   "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                   "--speculative-num-draft-tokens", "4", "--enable-hierarchical-cache", "--hicache-size", "200",
                   "--mamba-radix-cache-strategy=extra_buffer"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "DOES NOT FIT" in out and "lower --max-running-requests" in out


def test_cli_plan_json_fits(capsys):
    rc = cli_main(["plan", "--model-config", str(QWEN_LIKE), "--gpu-mem", "97887MiB", "--json", "--",
                   "--tp", "1", "--mem-fraction-static", "0.9", "--max-running-requests", "32",
                   "--speculative-algorithm", "EAGLE", "--context-length", "32768"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert data["plan"]["verdict"] == "fits"
    assert data["model"]["num_attention_layers"] == 16


@pytest.mark.parametrize("argv", [
    ["--model-config", "/nonexistent/config.json", "--gpu-mem", "96GB"],
    ["--model-config", str(QWEN_LIKE), "--gpu-mem", "lots"],
    ["--model-config", str(QWEN_LIKE), "--gpu-mem", "96GB", "--", "stray"],
    ["--model-config", str(QWEN_LIKE), "--gpu-mem", "96GB", "--", "--mem-fraction-static", "x"],
    ["--model-config", str(QWEN_LIKE), "--gpu-mem", "96GB", "--", "--tp-size", "2"],
])
def test_cli_plan_bad_input_exit_2(argv, capsys):
    assert cli_main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mtpconsole: ") and "Traceback" not in err


def test_cli_plan_reads_flags_like_argparse(capsys):
    """Issue 12: an abbreviation real argparse accepts (--max-running) is planned as given, not as 48."""
    rc = cli_main(["plan", "--model-config", str(QWEN_LIKE), "--gpu-mem", "97887MiB", "--json", "--",
                   "--speculative-algorithm", "EAGLE", "--max-running", "512", "--mem-frac=0.8"])
    data = json.loads(capsys.readouterr().out)
    assert rc in (0, 1)
    assert data["plan"]["max_running_requests"] == 512
    assert data["plan"]["mem_fraction_static"] == 0.8


def test_parse_server_flags_one_resolver():
    from console.core.planner import parse_server_flags

    flags = parse_server_flags(["--model", "m", "--tensor-parallel-size", "2", "--enable-hicache",
                                "--max-running=64", "--port", "1", "--port", "2", "--unknown-x", "v"])
    assert flags == {"model-path": "m", "tp-size": "2", "enable-hierarchical-cache": True,
                     "max-running-requests": "64", "port": "2", "unknown-x": "v"}
    with pytest.raises(UserError, match="ambiguous option: --cuda-graph-max-bs could match"):
        parse_server_flags(["--cuda-graph-max-bs", "8"], strict=True)


# ---------------------------------------------------------------- issue 26: one-pass flag fixing

def _apply(flags: dict, fix) -> dict:
    return {**flags, fix.flag.removeprefix("--"): fix.value}


def _demo_incident() -> tuple:
    from console.core.planner import parse_server_flags
    from console.sim.demo import INCIDENT_FLAGS, MODEL_CONFIG

    return parse_model_config(MODEL_CONFIG), parse_server_flags(INCIDENT_FLAGS), 97887 * MIB


def test_suggested_bound_fits_with_every_other_flag_as_given():
    """Issue 26: the demo's incident flags (EAGLE 3/1/4, 512 running, --context-length 32768): the bound the planner
    suggests fits as the only change, and it is the largest that does (one more is TIGHT or worse), found by
    re-planning, not by a formula that forgets the context length."""
    shape, flags, mem = _demo_incident()
    p = plan(shape, flags, mem)
    assert p.verdict == "does_not_fit"
    fix = p.fixes[0]
    assert (fix.verb, fix.flag, fix.bound, fix.then) == ("lower", "--max-running-requests", True, "fits")
    assert p.advice[0] == f"lower --max-running-requests to ≤ {fix.value}"
    n = int(fix.value)
    assert plan(shape, _apply(flags, fix), mem).verdict == "fits"
    assert plan(shape, {**flags, "max-running-requests": n + 1}, mem).verdict != "fits"
    # the planner's old formula (room for the minimum KV pool only) said ≤ 40, which is TIGHT at 32768 tokens
    tight = plan(shape, {**flags, "max-running-requests": 40}, mem)
    assert tight.verdict == "tight" and any("fewer than --context-length 32768" in r for r in tight.reasons)
    # and from there the first fix is that same bound again, not a smaller step
    assert tight.fixes[0].flag == "--max-running-requests" and tight.fixes[0].value == fix.value


def test_every_fix_is_what_planning_with_it_says():
    """Every fix's ``then`` is the verdict of planning with that one change (weights given, several contexts,
    running limits, fractions and memory in use), and a fix that says ``fits`` fits."""
    shape = load_model_config(QWEN_LIKE)
    seen = set()
    for mr in (36, 40, 48, 512):
        for ctx in (8192, 32768, 131072):
            for frac in (0.80, 0.90, 0.97):
                for used in (0, 8 * GIB):
                    flags = {**INCIDENT, "max-running-requests": mr, "context-length": ctx,
                             "mem-fraction-static": frac}
                    p = plan(shape, flags, GPU_96, weights_bytes=51 * GIB, in_use_bytes=used)
                    assert [f.text for f in p.fixes] == p.advice
                    for f in p.fixes:
                        if f.flag == "--tp-size":
                            continue
                        then = plan(shape, _apply(flags, f), GPU_96, weights_bytes=51 * GIB, in_use_bytes=used)
                        assert then.verdict == f.then, (flags, used, f)
                        seen.add((f.flag, f.then))
    assert {("--max-running-requests", "fits"), ("--max-running-requests", "tight"),
            ("--context-length", "fits")} <= seen


def test_memory_in_use_is_planned_against():
    """Memory other processes hold on the GPU is counted out first, as SGLang sizes from the free memory: a
    smaller bound, and the reason says how much was counted."""
    shape, flags, mem = _demo_incident()
    free = plan(shape, flags, mem)
    used = plan(shape, flags, mem, in_use_bytes=20 * GIB)
    assert used.usable_bytes == free.usable_bytes - 20 * GIB and used.in_use_bytes == 20 * GIB
    assert int(used.fixes[0].value) < int(free.fixes[0].value)
    assert plan(shape, _apply(flags, used.fixes[0]), mem, in_use_bytes=20 * GIB).verdict == "fits"
    assert any("20.0 GiB of the GPU is in use by other processes" in r for r in used.reasons)
    with pytest.raises(ValueError):
        plan(shape, flags, mem, in_use_bytes=-1)


def test_read_fixes_reads_the_advice_back():
    """The form reads the planner's fixes back from its verdict line: the same flag and value, in order; prose
    that names a flag without a value is no fix."""
    from console.core.planner import read_fixes

    shape, flags, mem = _demo_incident()
    p = plan(shape, flags, mem)
    line = "memory plan: does not fit — " + "; ".join(p.reasons + p.advice)
    assert read_fixes(line) == p.fixes  # flag, value, bound, note and the verdict it leads to
    assert read_fixes("; ".join(plan(*_demo_incident()[:2], 40 * GIB).advice)) == plan(*_demo_incident()[:2], 40 * GIB).fixes
    assert read_fixes("lower --max-running-requests or raise --mem-fraction-static") == []
    assert [(f.flag, f.value) for f in read_fixes("raise --mem-fraction-static to 0.87")] == \
        [("--mem-fraction-static", "0.87")]


def test_best_value_bisects_the_planner():
    from console.core.planner import best_value

    calls = []

    def at(n: int):
        calls.append(n)
        return "fits" if n <= 37 else "tight" if n <= 44 else "does_not_fit"

    assert best_value(at, 1, 511) == (37, "fits") and len(calls) <= 12
    assert best_value(lambda n: "tight" if n <= 5 else "does_not_fit", 1, 100) is None
    assert best_value(lambda n: "tight" if n <= 5 else "does_not_fit", 1, 100, or_tight=True) == (5, "tight")
    assert best_value(at, 50, 40) is None
