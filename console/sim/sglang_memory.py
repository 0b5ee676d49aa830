"""The SGLang stand-in's GPU memory: what one rank takes and whether it fits, as SGLang 0.5.23 sizes it at start-up.

The stand-in decides out-of-memory from its own numbers, never from the console's planner (a test of
the planner against the stand-in would otherwise pass by construction). The numbers come from the GPU
file: each GPU of ``gpus.json`` may carry, besides ``mem_total_mib``, what a rank of the stand-in takes
on it (``STANDIN_FIELDS`` in :mod:`console.sim.simgpu`; all optional)::

    context_mib           CUDA context + NCCL buffers before weights load   default 512 + 100 per extra TP rank
    weights_mib           one rank's weights once loaded                    default: the model's, see below
    draft_weights_mib     one rank's draft-model weights (speculative)      default: the MTP layers' (or a one-layer draft)
    kv_bytes_per_token    one rank's KV cache per token, target + draft     default: attention layers x KV heads/tp x head dim x 2 x dtype
    mamba_bytes_per_slot  one request slot of recurrent state (hybrids)     default: linear layers x (conv + SSM state)
    graph_mib             CUDA graphs captured after the pools              default: 256 MiB + 4 MiB per batch size (x2 speculative)

When a number is absent the stand-in reads it off the model's ``config.json`` with SGLang's own sizes
(:func:`read_model`; the weights from ``$MTPCONSOLE_SIM_WEIGHTS_GB`` when set, else the parameter count).
Then, as SGLang: ``usable`` is the free memory less the context; the static budget is
``--mem-fraction-static`` x usable; weights that exceed usable die in torch while loading; weights that
fill the budget leave no KV cache; the recurrent state (running requests x slots per request) and the
KV pool share what the weights leave, and a pool of no tokens is "Not enough memory".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

MIB = 1 << 20
GIB = 1 << 30
LOADER_OVERHEAD_MIB = 200
"""Rotary caches, vocab padding and loader buffers SGLang counts as weight memory."""
SPEC_DEFAULT_MAX_RUNNING = 48
MAMBA_SLOTS_PER_REQUEST = {"extra_buffer": 5, "auto": 5, "extra_buffer_lazy": 4, "no_buffer": 3}
KV_DTYPE_BYTES = {"bf16": 2.0, "bfloat16": 2.0, "fp16": 2.0, "float16": 2.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0,
                  "fp8": 1.0, "fp4_e2m1": 0.5, "int8": 1.0}
DTYPE_BYTES = {"float32": 2.0, "bfloat16": 2.0, "float16": 2.0, "float8_e4m3fn": 1.0, "float8": 1.0, "fp8": 1.0}
"""Weight bytes per parameter as served (float32 checkpoints are served in bfloat16)."""

Outcome = Literal["fits", "weights_exceed_gpu", "no_room_for_kv", "not_enough_memory"]


@dataclass(frozen=True)
class LinearLayers:
    """The recurrent (gated delta net) layers of a hybrid model, whole-model numbers."""

    num_layers: int
    num_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_dim: int
    conv_kernel: int
    ssm_dtype_bytes: int = 4
    conv_dtype_bytes: int = 2


@dataclass(frozen=True)
class ModelFacts:
    """What the stand-in reads from a model's config.json (whole model, before tensor parallelism)."""

    architecture: str | None
    model_type: str | None
    hidden_size: int
    attention_layers: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    weights_bytes: int
    layer_params: int
    """One full-attention decoder layer's parameters (sizes a one-layer draft model)."""
    weight_bytes_per_param: float
    mla_kv_dim: int = 0
    """kv_lora_rank + qk_rope_head_dim of an MLA model (0 otherwise)."""
    linear: LinearLayers | None = None
    mtp_layers: int = 0
    mtp_params: int = 0
    max_position_embeddings: int | None = None

    @property
    def hybrid(self) -> bool:
        return self.linear is not None and self.linear.num_layers > 0


def _int(cfg: dict[str, Any], *keys: str, default: int = 0, required: bool = False) -> int:
    v = next((cfg[k] for k in keys if cfg.get(k) is not None), None)
    if v is None:
        if required:
            raise ValueError("config.json has no %r" % keys[0])
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ValueError("config.json %r must be a non-negative number, got %r" % (keys[0], v))
    return int(v)


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    inner = config.get("text_config") or config.get("llm_config") or config.get("language_config")
    if isinstance(inner, dict) and "num_hidden_layers" in inner:
        return {**{k: v for k, v in config.items() if k not in ("text_config", "vision_config")}, **inner}
    return config


def _weight_bytes(cfg: dict[str, Any]) -> float:
    name = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").replace("torch.", "").lower()
    q = cfg.get("quantization_config")
    if isinstance(q, dict):
        bits = q.get("bits") or q.get("weight_bits")
        if isinstance(bits, (int, float)) and 0 < bits <= 16:
            return bits / 8
        return 1.0
    return DTYPE_BYTES.get(name, 2.0)


def _linear(cfg: dict[str, Any], n_layers: int) -> tuple[int, LinearLayers | None, int]:
    """(attention layers, the recurrent layers, one recurrent layer's parameters) of a Qwen3.5-style hybrid."""
    if "linear_num_value_heads" not in cfg and "linear_key_head_dim" not in cfg:
        return n_layers, None, 0
    types = cfg.get("layer_types")
    interval = cfg.get("full_attention_interval")
    if isinstance(types, list) and len(types) == n_layers:
        n_lin = sum(1 for t in types if str(t).lower() in ("linear_attention", "gdn"))
    elif isinstance(interval, int) and interval > 0:
        n_lin = n_layers - sum(1 for i in range(n_layers) if (i + 1) % interval == 0)
    else:
        return n_layers, None, 0
    v_heads = _int(cfg, "linear_num_value_heads", required=True)
    k_heads = _int(cfg, "linear_num_key_heads", default=v_heads)
    k_dim = _int(cfg, "linear_key_head_dim", default=128)
    v_dim = _int(cfg, "linear_value_head_dim", default=k_dim)
    kernel = _int(cfg, "linear_conv_kernel_dim", default=4)
    lin = LinearLayers(num_layers=n_lin, num_heads=v_heads, key_head_dim=k_dim, value_head_dim=v_dim,
                       conv_dim=2 * k_heads * k_dim + v_heads * v_dim, conv_kernel=kernel)
    hidden = _int(cfg, "hidden_size", required=True)
    key_total, value_total = k_heads * k_dim, v_heads * v_dim
    params = (hidden * (2 * key_total + 2 * value_total) + hidden * 2 * v_heads + lin.conv_dim * kernel
              + value_total * hidden + 2 * v_heads)
    return n_layers - n_lin, lin, params


def _mlp_params(cfg: dict[str, Any], hidden: int, inter: int, n_layers: int) -> tuple[int, int]:
    """(all layers' MLP parameters, one layer's) for dense and mixture-of-experts models."""
    experts = _int(cfg, "num_experts", "n_routed_experts", "num_local_experts")
    if not experts:
        return n_layers * 3 * hidden * inter, 3 * hidden * inter
    moe_inter = _int(cfg, "moe_intermediate_size", default=inter)
    shared = 3 * hidden * (_int(cfg, "shared_expert_intermediate_size")
                           or _int(cfg, "n_shared_experts") * moe_inter)
    layer = experts * 3 * hidden * moe_inter + shared + hidden * experts
    first_dense = _int(cfg, "first_k_dense_replace")
    moe_layers = max(0, n_layers - first_dense)
    return moe_layers * layer + (n_layers - moe_layers) * 3 * hidden * inter, layer


def read_model(config: Any) -> ModelFacts:
    """The stand-in's reading of a config.json dict; raises ValueError when it is no decoder model."""
    if not isinstance(config, dict):
        raise ValueError("config.json must be a JSON object")
    cfg = _text_config(config)
    hidden = _int(cfg, "hidden_size", "d_model", required=True)
    n_layers = _int(cfg, "num_hidden_layers", "num_layers", required=True)
    if hidden == 0 or n_layers == 0:
        raise ValueError("config.json hidden_size and num_hidden_layers must be positive")
    heads = _int(cfg, "num_attention_heads", required=True) or 1
    kv_heads = _int(cfg, "num_key_value_heads", default=heads) or heads
    head_dim = _int(cfg, "head_dim", default=hidden // heads) or hidden // heads
    inter = _int(cfg, "intermediate_size", default=4 * hidden)
    vocab = _int(cfg, "vocab_size", default=32000)
    tied = bool(cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    n_att, lin, lin_params = _linear(cfg, n_layers)
    kv_lora, rope = _int(cfg, "kv_lora_rank"), _int(cfg, "qk_rope_head_dim")
    attn = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    if str(cfg.get("model_type", "")).startswith("qwen3_next") or cfg.get("attn_output_gate"):
        attn += hidden * heads * head_dim  # gated attention output
    mlp_total, layer_mlp = _mlp_params(cfg, hidden, inter, n_layers)
    norms = 2 * hidden
    emb = vocab * hidden * (1 if tied else 2)
    params = emb + n_att * (attn + norms) + (lin.num_layers * (lin_params + norms) if lin else 0) + mlp_total + hidden
    explicit = cfg.get("num_parameters")
    if isinstance(explicit, (int, float)) and not isinstance(explicit, bool) and explicit > 0:
        params = int(explicit)
    wbytes = _weight_bytes(cfg)
    weights = int(params * wbytes) if wbytes >= 2 else int((params - emb) * wbytes + emb * 2)
    layer_params = attn + layer_mlp + norms
    mtp = _int(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers")
    arch = cfg.get("architectures")
    return ModelFacts(
        architecture=str(arch[0]) if isinstance(arch, list) and arch else None,
        model_type=str(cfg["model_type"]) if cfg.get("model_type") else None,
        hidden_size=hidden, attention_layers=n_att, kv_heads=kv_heads, head_dim=head_dim, intermediate_size=inter,
        weights_bytes=weights, layer_params=layer_params, weight_bytes_per_param=wbytes,
        mla_kv_dim=kv_lora + rope if kv_lora else 0, linear=lin, mtp_layers=mtp,
        mtp_params=mtp * (layer_params + 2 * hidden * hidden + 3 * hidden) if mtp else 0,
        max_position_embeddings=_int(cfg, "max_position_embeddings") or None,
    )


def auto_mem_fraction_static(total_bytes: int, *, tp_size: int, chunked_prefill_size: int | None,
                             cuda_graph_max_bs: int | None, speculative: bool) -> float:
    """SGLang 0.5's automatic --mem-fraction-static: reserve activations and CUDA graphs, at least 10 GiB on a
    GPU above 60 GiB."""
    gpu_mib = total_bytes / MIB
    chunk = chunked_prefill_size or (8192 if gpu_mib > 60 * 1024 else 2048)
    bs = cuda_graph_max_bs or (256 if gpu_mib > 80 * 1024 else 160)
    reserve = 512 + 1.5 * max(chunk, 2048) + 2 * bs + 128 * tp_size + (2048 if speculative else 0)
    if gpu_mib > 60 * 1024:
        reserve = max(reserve, 10 * 1024)
    return round(max(0.1, (gpu_mib - reserve) / gpu_mib), 3)


@dataclass(frozen=True)
class Launch:
    """The resolved flags that size memory (after the stand-in's own defaults, as SGLang resolves them)."""

    tp_size: int
    mem_fraction_static: float | None
    max_running_requests: int | None
    kv_cache_dtype: str = "auto"
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int = 0
    draft_model_path: bool = False
    mamba_strategy: str = "extra_buffer"
    disable_radix_cache: bool = False
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory on its GPU (bytes) and the outcome SGLang would reach."""

    total_bytes: int
    free_bytes: int
    context_bytes: int
    usable_bytes: int
    mem_fraction_static: float
    static_budget_bytes: int
    weights_bytes: int
    draft_weights_bytes: int
    kv_dtype_bytes: float
    kv_bytes_per_token: int
    mamba_slots: int
    mamba_bytes: int
    max_running_requests: int | None
    kv_pool_bytes: int
    kv_tokens: int
    graph_bytes: int
    outcome: Outcome


def _field(gpu: dict[str, Any], name: str) -> int | None:
    v = gpu.get(name)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _draft(model: ModelFacts, run: Launch) -> tuple[int, int]:
    """(draft weights on one rank, draft layers keeping a KV cache)."""
    tp = max(1, run.tp_size)
    if not run.speculative_algorithm or run.speculative_algorithm == "NGRAM":
        return 0, 0
    if model.mtp_layers and not run.draft_model_path:
        return int(model.mtp_params * max(1.0, model.weight_bytes_per_param) / tp), model.mtp_layers
    return int((model.layer_params + 2 * model.hidden_size ** 2) * 2 / tp), 1


def _kv_per_token(model: ModelFacts, tp: int, dtype_bytes: float, layers: int) -> int:
    if model.mla_kv_dim:
        return int(model.mla_kv_dim * layers * dtype_bytes)
    return int(layers * max(1, math.ceil(model.kv_heads / max(1, tp))) * model.head_dim * 2 * dtype_bytes)


def _state_per_slot(model: ModelFacts, tp: int) -> int:
    lin = model.linear
    if lin is None or lin.num_layers == 0:
        return 0
    conv = math.ceil(lin.conv_dim / tp) * (lin.conv_kernel - 1) * lin.conv_dtype_bytes
    ssm = math.ceil(lin.num_heads / tp) * lin.key_head_dim * lin.value_head_dim * lin.ssm_dtype_bytes
    return int((conv + ssm) * lin.num_layers)


def _graph_bytes(model: ModelFacts, run: Launch, total: int) -> int:
    """CUDA graph memory: at most half of the activation reserve, 256 MiB + 4 MiB per captured batch size."""
    bs = run.cuda_graph_max_bs or (256 if total > 80 * GIB else 160)
    chunk = run.chunked_prefill_size or (8192 if total > 60 * GIB else 2048)
    spec = bool(run.speculative_algorithm)
    act = chunk * (4 * model.hidden_size + 2 * model.intermediate_size / max(1, run.tp_size)) * 2 + 512 * MIB
    graphs = (256 * MIB + 4 * MIB * bs) * (2 if spec else 1)
    return int(min((act + graphs) // 2, 256 * MIB + 4 * MIB * bs))


def rank_memory(model: ModelFacts, run: Launch, gpu: dict[str, Any], others_bytes: int = 0,
                weights_total_bytes: int | None = None) -> RankMemory:
    """One rank's memory on ``gpu`` (a gpus.json entry) with ``others_bytes`` held there by other processes.

    ``weights_total_bytes``: the whole model's weights ($MTPCONSOLE_SIM_WEIGHTS_GB), used when the GPU file
    names no ``weights_mib``."""
    tp = max(1, run.tp_size)
    total = int(gpu["mem_total_mib"]) * MIB
    free = max(0, total - others_bytes)
    ctx_mib = _field(gpu, "context_mib")
    ctx = (512 + 100 * (tp - 1)) * MIB if ctx_mib is None else ctx_mib * MIB
    usable = free - ctx
    frac = run.mem_fraction_static
    if frac is None:
        frac = auto_mem_fraction_static(total, tp_size=tp, chunked_prefill_size=run.chunked_prefill_size,
                                        cuda_graph_max_bs=run.cuda_graph_max_bs,
                                        speculative=bool(run.speculative_algorithm))
    budget = int(frac * usable)
    w_mib = _field(gpu, "weights_mib")
    whole = model.weights_bytes if weights_total_bytes is None else weights_total_bytes
    weights = w_mib * MIB if w_mib is not None else int(whole / tp) + LOADER_OVERHEAD_MIB * MIB
    draft, draft_layers = _draft(model, run)
    d_mib = _field(gpu, "draft_weights_mib")
    if d_mib is not None and run.speculative_algorithm:
        draft = d_mib * MIB
    kv_b = KV_DTYPE_BYTES.get(run.kv_cache_dtype.lower(), 2.0)
    kv_tok = _field(gpu, "kv_bytes_per_token")
    if kv_tok is None:
        kv_tok = _kv_per_token(model, tp, kv_b, model.attention_layers)
        kv_tok += _kv_per_token(model, tp, kv_b, draft_layers) if draft_layers else 0
    state = _state_per_slot(model, tp) if model.hybrid else 0
    pinned_state = _field(gpu, "mamba_bytes_per_slot")
    if model.hybrid and pinned_state is not None:
        state = pinned_state
    slots_per_req = 0
    if state:
        slots_per_req = 1 if run.disable_radix_cache else MAMBA_SLOTS_PER_REQUEST.get(run.mamba_strategy, 5)
        slots_per_req += run.speculative_num_draft_tokens if run.speculative_algorithm else 0
    after_weights = budget - weights - draft
    mr = run.max_running_requests
    if state and mr is None:  # SGLang sizes the state pool itself: at most half of what the weights leave
        mr = max(1, min(256, int(max(0, after_weights) * 0.5 // (slots_per_req * state))))
    mamba_slots = (mr or 0) * slots_per_req if state else 0
    mamba = mamba_slots * state
    kv_pool = after_weights - mamba
    kv_tokens = max(0, int(kv_pool // kv_tok)) if kv_tok else 0
    g_mib = _field(gpu, "graph_mib")
    graph = g_mib * MIB if g_mib is not None else _graph_bytes(model, run, total)
    outcome: Outcome = "fits"
    if weights > usable:
        outcome = "weights_exceed_gpu"
    elif after_weights <= 0:
        outcome = "no_room_for_kv"
    elif kv_pool <= 0 or kv_tokens <= 0:
        outcome = "not_enough_memory"
    return RankMemory(total_bytes=total, free_bytes=free, context_bytes=ctx, usable_bytes=usable,
                      mem_fraction_static=frac, static_budget_bytes=budget, weights_bytes=weights,
                      draft_weights_bytes=draft, kv_dtype_bytes=kv_b, kv_bytes_per_token=kv_tok,
                      mamba_slots=mamba_slots, mamba_bytes=mamba, max_running_requests=mr, kv_pool_bytes=int(kv_pool),
                      kv_tokens=kv_tokens, graph_bytes=graph, outcome=outcome)
