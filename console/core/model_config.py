"""Read a HuggingFace ``config.json`` into a :class:`ModelShape`: the numbers memory planning needs.

Handles plain decoder models (Llama, Qwen2/3, Mistral), MoE (Qwen3-MoE, DeepSeek), MLA
(DeepSeek ``kv_lora_rank``/``qk_rope_head_dim``), hybrid linear-attention models
(Qwen3-Next / Qwen3.5 style ``layer_types`` or ``full_attention_interval`` with
``linear_*`` dimensions), Mamba2-style hybrids (``mamba_*``, ``ssm_state_size``,
``conv_kernel``, ``hybrid_override_pattern``), nested ``text_config`` (multimodal wrappers)
and MTP layers (``num_nextn_predict_layers`` / ``mtp_num_hidden_layers``).

The parameter count is an estimate from the architecture unless the config carries an
explicit ``num_parameters`` (or the caller passes the real weights size to the planner).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from console.host.rundir import json_depth_ok
from console.paths import UnreadableFile, read_user_file

GIB = 1 << 30
MAX_CONFIG_BYTES = 4 << 20
"""A model's config.json is a few KiB; more than this is not one (and is never read further)."""
MAX_CONFIG_DEPTH = 32
"""A config.json nests 3 or 4 levels (``text_config``, ``rope_scaling``); deeper is refused before parsing."""

DTYPE_BYTES: dict[str, float] = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "float8": 1, "fp8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
    "int8": 1, "uint8": 1,
}


class ModelConfigError(ValueError):
    """A config.json that cannot be read as a decoder model (message names the problem)."""


class LinearAttnShape(BaseModel):
    """Recurrent-state (linear attention / Mamba) layers of a hybrid model, whole-model numbers."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["gated_delta_net", "mamba2"]
    num_layers: int
    num_heads: int
    """Value heads (GDN) or Mamba heads: the SSM state is per head."""
    key_head_dim: int
    """GDN key head dim; Mamba2 ``ssm_state_size`` (d_state)."""
    value_head_dim: int
    """GDN value head dim; Mamba2 head dim."""
    conv_dim: int
    """Channels of the causal conv (its state is conv_dim x (kernel - 1))."""
    conv_kernel: int
    ssm_dtype_bytes: int = 4
    """SGLang keeps the SSM state in float32 unless ``--mamba-ssm-dtype`` says otherwise."""
    conv_dtype_bytes: int = 2


class ModelShape(BaseModel):
    """What the memory planner needs to know about a model (whole model, before tensor parallelism)."""

    model_config = ConfigDict(frozen=True)

    architecture: str | None = None
    model_type: str | None = None
    num_params: int
    """Main model parameters (MTP layers excluded: they load only with speculative decoding)."""
    params_source: Literal["estimated", "config"] = "estimated"
    embedding_params: int = 0
    """Embedding + untied LM head parameters (kept in 16 bit by fp8 checkpoints)."""
    dtype: str = "bfloat16"
    weight_bytes_per_param: float = 2.0
    quantization: str | None = None
    hidden_size: int
    num_layers: int
    num_attention_layers: int
    """Layers that keep a KV cache (all layers of a plain model; the full-attention ones of a hybrid)."""
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int = 0
    vocab_size: int = 0
    num_experts: int = 0
    tie_word_embeddings: bool = False
    mla: bool = False
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    linear: LinearAttnShape | None = None
    mtp_layers: int = 0
    mtp_params: int = 0
    """Parameters of the MTP (next-n) layers, loaded as the draft model by EAGLE/NEXTN."""
    layer_params: int = 0
    """Parameters of one full-attention decoder layer (sizes a draft model when unknown)."""
    max_position_embeddings: int | None = None

    @property
    def hybrid(self) -> bool:
        return self.linear is not None and self.linear.num_layers > 0

    @property
    def weights_bytes(self) -> int:
        """Bytes of the main model's weights as loaded (16-bit embeddings for quantized checkpoints)."""
        if self.weight_bytes_per_param >= 2:
            return int(self.num_params * self.weight_bytes_per_param)
        body = self.num_params - self.embedding_params
        return int(body * self.weight_bytes_per_param + self.embedding_params * 2)


def _num(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        v = cfg.get(k)
        if v is not None:
            return v
    return default


def _int(cfg: dict[str, Any], *keys: str, default: int | None = None, required: bool = False) -> int:
    v = _num(cfg, *keys)
    if v is None:
        if required:
            raise ModelConfigError(f"config.json has no {keys[0]!r}")
        return 0 if default is None else default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ModelConfigError(f"config.json {keys[0]!r} must be a non-negative number, got {v!r}")
    return int(v)


def _dtype_bytes(cfg: dict[str, Any], outer: dict[str, Any]) -> tuple[str, float, str | None]:
    """(dtype name, bytes per weight, quantization method) from torch_dtype/dtype + quantization_config."""
    raw = _num(cfg, "torch_dtype", "dtype") or _num(outer, "torch_dtype", "dtype") or "bfloat16"
    name = str(raw).replace("torch.", "").lower()
    nbytes = DTYPE_BYTES.get(name, 2.0)
    if name == "float32":
        # SGLang serves float32 checkpoints in bfloat16 unless --dtype says otherwise.
        name, nbytes = "bfloat16", 2.0
    q = cfg.get("quantization_config") or outer.get("quantization_config")
    method = None
    if isinstance(q, dict):
        method = str(q.get("quant_method") or q.get("quantization") or "unknown").lower()
        bits = q.get("bits") or q.get("weight_bits") or q.get("w_bit")
        fmt = str(q.get("fmt") or q.get("format") or "")
        if isinstance(bits, (int, float)) and 0 < bits <= 16:
            nbytes = bits / 8 + (0.03 if bits < 8 else 0.0)  # group scales/zeros of 4-bit formats
        elif "fp8" in method or "fp8" in fmt or "e4m3" in fmt:
            nbytes = 1.0
        elif "fp4" in method or "nvfp4" in method or "mxfp4" in method:
            nbytes = 0.5 + 0.06
        elif method in ("awq", "gptq", "bitsandbytes"):
            nbytes = 0.5 + 0.03
        elif method not in ("unknown", "none"):
            nbytes = 1.0
    return name, float(nbytes), method


def _layer_kinds(cfg: dict[str, Any], n_layers: int) -> tuple[int, int]:
    """(attention layers, recurrent layers) for hybrid configs; (n_layers, 0) for plain ones."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) != n_layers:
            raise ModelConfigError(
                f"config.json layer_types has {len(types)} entries but num_hidden_layers is {n_layers}")
        lin = sum(1 for t in types if str(t).lower() in ("linear_attention", "mamba", "mamba2", "ssm", "gdn"))
        # sliding/full attention both keep a KV cache
        return n_layers - lin, lin
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        att = pattern.count("*")
        mam = pattern.count("M")
        return att, mam
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0 and ("linear_num_value_heads" in cfg or "linear_key_head_dim" in cfg):
        att = sum(1 for i in range(n_layers) if (i + 1) % interval == 0)
        return att, n_layers - att
    period = cfg.get("attn_layer_period")
    if isinstance(period, int) and period > 0 and _num(cfg, "mamba_d_state", "mamba_d_conv") is not None:
        offset = int(cfg.get("attn_layer_offset") or 0)
        att = sum(1 for i in range(n_layers) if i % period == offset)
        return att, n_layers - att
    return n_layers, 0


def _linear_shape(cfg: dict[str, Any], hidden: int, n_linear: int) -> LinearAttnShape | None:
    if n_linear <= 0:
        return None
    if "linear_num_value_heads" in cfg or "linear_key_head_dim" in cfg:
        v_heads = _int(cfg, "linear_num_value_heads", required=True)
        k_heads = _int(cfg, "linear_num_key_heads", default=v_heads)
        k_dim = _int(cfg, "linear_key_head_dim", default=128)
        v_dim = _int(cfg, "linear_value_head_dim", default=k_dim)
        kernel = _int(cfg, "linear_conv_kernel_dim", default=4)
        return LinearAttnShape(
            kind="gated_delta_net", num_layers=n_linear, num_heads=v_heads,
            key_head_dim=k_dim, value_head_dim=v_dim,
            conv_dim=2 * k_heads * k_dim + v_heads * v_dim, conv_kernel=kernel,
        )
    d_state = _int(cfg, "ssm_state_size", "mamba_d_state", "state_size", default=128)
    kernel = _int(cfg, "conv_kernel", "mamba_d_conv", "mamba_conv_kernel", default=4)
    n_groups = _int(cfg, "n_groups", "mamba_n_groups", default=1)
    head_dim = _int(cfg, "mamba_head_dim", "mamba_headdim", default=64)
    n_heads = _int(cfg, "mamba_num_heads", "mamba_n_heads", default=0)
    if n_heads == 0:
        expand = _num(cfg, "mamba_expand", "expand", default=2)
        n_heads = max(1, int(expand * hidden) // head_dim)
    d_inner = n_heads * head_dim
    return LinearAttnShape(
        kind="mamba2", num_layers=n_linear, num_heads=n_heads, key_head_dim=d_state,
        value_head_dim=head_dim, conv_dim=d_inner + 2 * n_groups * d_state, conv_kernel=kernel,
    )


def _linear_layer_params(lin: LinearAttnShape, cfg: dict[str, Any], hidden: int) -> int:
    if lin.kind == "gated_delta_net":
        k_heads = _int(cfg, "linear_num_key_heads", default=lin.num_heads)
        key_dim = k_heads * lin.key_head_dim
        value_dim = lin.num_heads * lin.value_head_dim
        in_proj = hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * lin.num_heads
        return in_proj + lin.conv_dim * lin.conv_kernel + value_dim * hidden + 2 * lin.num_heads
    d_inner = lin.num_heads * lin.value_head_dim
    in_proj = hidden * (2 * d_inner + (lin.conv_dim - d_inner) + lin.num_heads)
    return in_proj + lin.conv_dim * lin.conv_kernel + d_inner * hidden + 3 * lin.num_heads


def parse_model_config(config: dict[str, Any]) -> ModelShape:
    """Turn a HuggingFace config.json dict into a :class:`ModelShape` (raises ModelConfigError)."""
    if not isinstance(config, dict):
        raise ModelConfigError("config.json must be a JSON object")
    outer = config
    cfg = config
    inner = config.get("text_config") or config.get("llm_config") or config.get("language_config")
    if isinstance(inner, dict) and "num_hidden_layers" in inner:
        cfg = {**{k: v for k, v in outer.items() if k not in ("text_config", "vision_config")}, **inner}

    hidden = _int(cfg, "hidden_size", "d_model", "n_embd", required=True)
    n_layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers", required=True)
    if hidden == 0 or n_layers == 0:
        raise ModelConfigError("config.json hidden_size and num_hidden_layers must be positive")
    n_heads = _int(cfg, "num_attention_heads", "n_head", required=True) or 1
    n_kv = _int(cfg, "num_key_value_heads", "num_kv_heads", default=n_heads) or n_heads
    head_dim = _int(cfg, "head_dim", default=hidden // n_heads) or hidden // n_heads
    inter = _int(cfg, "intermediate_size", "ffn_hidden_size", "n_inner", default=4 * hidden)
    vocab = _int(cfg, "vocab_size", default=32000)
    tied = bool(_num(cfg, "tie_word_embeddings", default=outer.get("tie_word_embeddings", False)))
    dtype, wbytes, quant = _dtype_bytes(cfg, outer)

    n_att, n_lin = _layer_kinds(cfg, n_layers)
    lin = _linear_shape(cfg, hidden, n_lin)

    # attention parameters per full-attention layer
    kv_lora = _int(cfg, "kv_lora_rank")
    rope = _int(cfg, "qk_rope_head_dim")
    mla = kv_lora > 0
    if mla:
        q_lora = _int(cfg, "q_lora_rank")
        nope = _int(cfg, "qk_nope_head_dim", default=128)
        v_head = _int(cfg, "v_head_dim", default=128)
        qk = nope + rope
        q_params = hidden * q_lora + q_lora * n_heads * qk if q_lora else hidden * n_heads * qk
        attn = q_params + hidden * (kv_lora + rope) + kv_lora * n_heads * (nope + v_head) + n_heads * v_head * hidden
    else:
        attn = hidden * n_heads * head_dim + 2 * hidden * n_kv * head_dim + n_heads * head_dim * hidden
        if str(cfg.get("model_type", "")).startswith("qwen3_next") or cfg.get("attn_output_gate"):
            attn += hidden * n_heads * head_dim  # gated attention output

    # MLP parameters
    n_experts = _int(cfg, "num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
    dense_mlp = 3 * hidden * inter
    if n_experts:
        moe_inter = _int(cfg, "moe_intermediate_size", default=inter)
        shared_inter = _int(cfg, "shared_expert_intermediate_size")
        n_shared = _int(cfg, "n_shared_experts", "num_shared_experts")
        shared = 3 * hidden * (shared_inter or n_shared * moe_inter)
        moe_mlp = n_experts * 3 * hidden * moe_inter + shared + hidden * n_experts
        first_dense = _int(cfg, "first_k_dense_replace")
        step = _int(cfg, "decoder_sparse_step", "moe_layer_freq", default=1) or 1
        moe_layers = sum(1 for i in range(n_layers) if i >= first_dense and (i + 1) % step == 0)
        mlp_total = moe_layers * moe_mlp + (n_layers - moe_layers) * dense_mlp
        layer_mlp = moe_mlp
    else:
        mlp_total = n_layers * dense_mlp
        layer_mlp = dense_mlp
    if isinstance(cfg.get("hybrid_override_pattern"), str):
        # Nemotron-H style: MLP only on '-' layers
        mlp_total = cfg["hybrid_override_pattern"].count("-") * dense_mlp

    norms = 2 * hidden
    linear_total = n_lin * (_linear_layer_params(lin, cfg, hidden) + norms) if lin else 0
    emb = vocab * hidden * (1 if tied else 2)
    estimated = emb + n_att * (attn + norms) + linear_total + mlp_total + hidden
    layer_params = attn + layer_mlp + norms

    explicit = _num(cfg, "num_parameters", "num_params", "n_params") or _num(outer, "num_parameters")
    if explicit is not None:
        if isinstance(explicit, bool) or not isinstance(explicit, (int, float)) or explicit <= 0:
            raise ModelConfigError(f"config.json num_parameters must be a positive number, got {explicit!r}")
        num_params, source = int(explicit), "config"
    else:
        num_params, source = int(estimated), "estimated"

    mtp = _int(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")
    mtp_params = mtp * (layer_params + 2 * hidden * hidden + 3 * hidden) if mtp else 0

    arch = cfg.get("architectures") or outer.get("architectures")
    return ModelShape(
        architecture=str(arch[0]) if isinstance(arch, list) and arch else None,
        model_type=str(cfg.get("model_type")) if cfg.get("model_type") else None,
        num_params=num_params, params_source=source, embedding_params=emb,
        dtype=dtype, weight_bytes_per_param=wbytes, quantization=quant,
        hidden_size=hidden, num_layers=n_layers, num_attention_layers=n_att,
        num_attention_heads=n_heads, num_kv_heads=n_kv, head_dim=head_dim,
        intermediate_size=inter, vocab_size=vocab, num_experts=n_experts, tie_word_embeddings=tied,
        mla=mla, kv_lora_rank=kv_lora, qk_rope_head_dim=rope, linear=lin,
        mtp_layers=mtp, mtp_params=mtp_params, layer_params=layer_params,
        max_position_embeddings=_int(cfg, "max_position_embeddings") or None,
    )


def load_model_config(path: str | Path) -> ModelShape:
    """Read ``config.json`` (a file, or a model directory holding one) into a ModelShape."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        raw = read_user_file(p, MAX_CONFIG_BYTES)  # bounded: /dev/zero or a FIFO is refused, never read whole
    except FileNotFoundError:
        raise ModelConfigError(f"{p}: no such file") from None
    except OSError as e:
        raise ModelConfigError(f"{p}: cannot read ({e.strerror or e})") from None
    except UnreadableFile as e:
        limit = f"a config.json is a regular file of at most {MAX_CONFIG_BYTES} bytes"
        raise ModelConfigError(f"{p}: {e} ({limit})") from None
    if not json_depth_ok(raw, MAX_CONFIG_DEPTH):
        raise ModelConfigError(f"{p}: nests deeper than {MAX_CONFIG_DEPTH} levels (not a model's config.json)")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ModelConfigError(f"{p}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ModelConfigError(f"{p}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise ModelConfigError(f"{p}: nests too deeply to read") from None
    try:
        return parse_model_config(data)
    except ModelConfigError as e:
        raise ModelConfigError(f"{p}: {e}") from None
