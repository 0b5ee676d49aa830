"""GPU memory planner for an SGLang launch: does this model with these flags fit, and if not, what to change.

The model follows SGLang's own accounting (per GPU, tensor parallel size ``tp``):

* ``usable`` = GPU memory minus the CUDA context / NCCL overhead present before weights load
  (what SGLang logs as ``Load weight begin. avail mem=``).
* ``static budget`` = ``mem_fraction_static x usable``: weights, draft weights, the Mamba/linear
  attention state pool and the KV pool must fit inside it. The rest (``(1 - fraction) x usable``)
  is left for activations and CUDA graphs.
* ``kv pool`` = budget - weights - draft weights - recurrent state; ``kv_tokens`` = pool / bytes
  per token. SGLang fails with "Not enough memory. Please try to increase --mem-fraction-static."
  when this is not positive.

Recurrent state (hybrid models): every running request holds ``S`` state slots (live state + radix
cache retention + the ``extra_buffer`` ping-pong track buffer: S=5 for ``extra_buffer``, 4 for
``extra_buffer_lazy``, 3 for ``no_buffer``) plus, with speculative decoding, one intermediate
state per draft token. A slot is conv state (bf16) + SSM state (float32) for every linear layer.

All numbers are estimates; :data:`CALIBRATION` in the tests checks them against published
SGLang startup logs (weights and KV tokens within 15 %).

Longer than ~400 lines on purpose: it is one memory model whose terms (weights, KV, recurrent state,
draft, activations) are read together against SGLang's own accounting.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field

from console.core.flags.argv import resolve_argv
from console.core.flags.models import FlagSchema
from console.core.flags.sources import bundled_schema
from console.core.model_config import GIB, ModelShape
from console.errors import UserError
from console.model import SPECULATIVE_ALGORITHMS

MIB = 1 << 20
SPEC_DEFAULT_MAX_RUNNING = 48
"""SGLang resets max running requests to 48 when speculating without --max-running-requests."""
SPEC_ALGOS = frozenset(SPECULATIVE_ALGORITHMS)
"""The built-in speculative algorithms (console.model.SPECULATIVE_ALGORITHMS), for membership tests."""
MAMBA_SLOTS_PER_REQUEST = {"extra_buffer": 5, "auto": 5, "extra_buffer_lazy": 4, "no_buffer": 3}
MIN_KV_TOKENS = 4096
"""Below this the KV pool is treated as not usable (a single long prompt would not fit)."""
LOADER_OVERHEAD_BYTES = 200 * MIB
"""Rotary caches, vocab padding and loader buffers SGLang counts as weight memory."""
KV_DTYPE_BYTES = {"auto": None, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2,
                  "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8": 1, "fp4_e2m1": 0.5, "int8": 1}

Verdict = Literal["fits", "tight", "does_not_fit"]


class PlanFix(BaseModel):
    """One flag change the planner advises, verified by planning again with it and every other flag as given."""

    model_config = ConfigDict(frozen=True)

    verb: Literal["lower", "raise", "use"]
    flag: str
    """The canonical flag (``--max-running-requests``)."""
    value: str
    bound: bool = False
    """``value`` is the largest that fits (``≤ value``): any smaller one fits too."""
    then: Verdict = "fits"
    """The verdict with this one change (``fits`` unless nothing this flag can take fits)."""
    note: str = ""
    """What the change needs or does, in words (``needs 8 GPUs``)."""

    @property
    def text(self) -> str:
        """The advice as the operator reads it; :func:`read_fixes` reads it back."""
        if self.verb == "use":
            head = f"use {self.flag} {self.value}"
        else:
            head = f"{self.verb} {self.flag} to {'≤ ' if self.bound else ''}{self.value}"
        notes = [n for n in (self.note, "" if self.then == "fits" else f"then {self.then.replace('_', ' ')}") if n]
        return head + (f" ({'; '.join(notes)})" if notes else "")


_NOTES = r"(?: \(([^()]*)\))?"
_FIX_TO = re.compile(r"\b(lower|raise) (--[a-z][a-z0-9-]*) to (≤ )?([0-9]+(?:\.[0-9]+)?)\b" + _NOTES)
_FIX_USE = re.compile(r"\buse (--[a-z][a-z0-9-]*) ([A-Za-z0-9_.]+)" + _NOTES)
_THEN = re.compile(r"(?:^|; )then (tight|does not fit)$")


def read_fixes(text: str) -> list[PlanFix]:
    """The fixes named in a plan's advice text (:attr:`PlanFix.text`), in the order they appear, with the verdict
    each leads to: the form reads them back from the planner's verdict line to apply one."""
    found: list[tuple[int, PlanFix]] = []
    for m, verb, flag, value, bound, notes in (
            *((m, m[1], m[2], m[4], bool(m[3]), m[5]) for m in _FIX_TO.finditer(text)),
            *((m, "use", m[1], m[2], False, m[3]) for m in _FIX_USE.finditer(text))):
        then = _THEN.search(notes or "")
        note = _THEN.sub("", notes or "")
        found.append((m.start(), PlanFix(verb=verb, flag=flag, value=value, bound=bound, note=note,
                                         then=then[1].replace(" ", "_") if then else "fits")))
    return [f for _, f in sorted(found, key=lambda x: x[0])]


class MemoryPlan(BaseModel):
    """The planner's answer, per GPU (bytes unless named otherwise)."""

    model_config = ConfigDict(frozen=True)

    gpu_mem_bytes: int
    n_gpus: int
    tp_size: int
    mem_fraction_static: float
    mem_fraction_source: Literal["flag", "auto"]
    usable_bytes: int
    """GPU memory before weights load (after the CUDA context)."""
    static_budget_bytes: int
    weights_bytes: int
    weights_source: Literal["config", "estimated", "given"]
    draft_weights_bytes: int = 0
    kv_dtype_bytes: float
    kv_bytes_per_token: int
    """Target + draft model KV bytes per token on one GPU."""
    mamba_state_bytes_per_slot: int = 0
    mamba_slots_per_request: int = 0
    mamba_slots: int = 0
    mamba_bytes: int = 0
    max_running_requests: int | None
    max_running_source: Literal["flag", "speculative_default", "auto"]
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int = 0
    kv_pool_bytes: int
    kv_tokens: int
    context_length: int
    requests_at_context: int
    """Requests that fit at the full context length (min of KV pool and running limit)."""
    activation_reserve_bytes: int
    """Estimated activations + CUDA graph memory needed outside the static budget."""
    outside_budget_bytes: int
    """What (1 - mem_fraction_static) leaves for them."""
    hicache_host_bytes: int = 0
    in_use_bytes: int = 0
    """Memory other processes already hold on the GPU (counted out before SGLang sizes anything)."""
    verdict: Verdict
    reasons: list[str] = Field(default_factory=list)
    advice: list[str] = Field(default_factory=list)
    fixes: list[PlanFix] = Field(default_factory=list)
    """The flag changes of ``advice``, each verified by planning again with it (in the same order)."""

    def gib(self, name: str) -> float:
        return getattr(self, name) / GIB


def cuda_context_bytes(tp_size: int = 1) -> int:
    """Memory taken before weights load: CUDA context, cuBLAS workspace, NCCL buffers for tp > 1."""
    return 512 * MIB + 100 * MIB * max(0, tp_size - 1)


def auto_mem_fraction_static(gpu_mem_bytes: int, *, tp_size: int = 1, chunked_prefill_size: int | None = None,
                             cuda_graph_max_bs: int | None = None, speculative: bool = False) -> float:
    """SGLang's automatic ``--mem-fraction-static`` when the flag is unset (0.5.x heuristic).

    It reserves memory for activations and CUDA graphs: 512 MiB + 1.5 MiB per prefill-chunk token
    (at least 2048) + 2 MiB per CUDA-graph batch size + 128 MiB per TP rank, + 2 GiB with
    speculative decoding; on GPUs larger than 60 GiB at least 10 GiB. The fraction is
    ``(gpu_mem - reserve) / gpu_mem`` rounded to three decimals.
    """
    gpu_mib = gpu_mem_bytes / MIB
    chunk = chunked_prefill_size or (8192 if gpu_mib > 60 * 1024 else 2048)
    bs = cuda_graph_max_bs or (256 if gpu_mib > 80 * 1024 else 160)
    reserve = 512 + 1.5 * max(chunk, 2048) + 2 * bs + 128 * tp_size
    if speculative:
        reserve += 2048
    if gpu_mib > 60 * 1024:
        reserve = max(reserve, 10 * 1024)
    return round(max(0.1, (gpu_mib - reserve) / gpu_mib), 3)


def activation_reserve_bytes(shape: ModelShape, *, tp_size: int = 1, chunked_prefill_size: int | None = None,
                             cuda_graph_max_bs: int | None = None, speculative: bool = False,
                             gpu_mem_bytes: int = 80 * GIB) -> int:
    """Memory needed outside the static budget: prefill activations for one chunk + CUDA graphs.

    activations ≈ chunk × (4·hidden + 2·intermediate/tp) × 2 bytes + 512 MiB of workspace;
    CUDA graphs ≈ 256 MiB + 4 MiB per captured batch size (×2 with speculative decoding, which
    captures draft and verify graphs).
    """
    big = gpu_mem_bytes > 60 * GIB
    chunk = chunked_prefill_size or (8192 if big else 2048)
    bs = cuda_graph_max_bs or (256 if gpu_mem_bytes > 80 * GIB else 160)
    inter = shape.intermediate_size or 4 * shape.hidden_size
    act = chunk * (4 * shape.hidden_size + 2 * inter / max(1, tp_size)) * 2 + 512 * MIB
    graphs = (256 * MIB + 4 * MIB * bs) * (2 if speculative else 1)
    return int(act + graphs)


def kv_bytes_per_token(shape: ModelShape, *, tp_size: int = 1, kv_dtype_bytes: float = 2, layers: int | None = None) -> int:
    """KV cache bytes per token on one GPU: layers × kv heads/tp × head_dim × 2 (K,V) × dtype; MLA:
    (kv_lora_rank + qk_rope_head_dim) × layers × dtype (replicated on every rank)."""
    n = shape.num_attention_layers if layers is None else layers
    if shape.mla:
        return int((shape.kv_lora_rank + shape.qk_rope_head_dim) * n * kv_dtype_bytes)
    heads = max(1, math.ceil(shape.num_kv_heads / max(1, tp_size)))
    return int(n * heads * shape.head_dim * 2 * kv_dtype_bytes)


def mamba_state_bytes_per_slot(shape: ModelShape, *, tp_size: int = 1) -> int:
    """One request's recurrent state on one GPU: (conv + SSM state) × linear layers."""
    lin = shape.linear
    if lin is None or lin.num_layers == 0:
        return 0
    tp = max(1, tp_size)
    conv = math.ceil(lin.conv_dim / tp) * (lin.conv_kernel - 1) * lin.conv_dtype_bytes
    ssm = math.ceil(lin.num_heads / tp) * lin.key_head_dim * lin.value_head_dim * lin.ssm_dtype_bytes
    return int((conv + ssm) * lin.num_layers)


def _flag(flags: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        for key in (n, n.replace("-", "_")):
            if key in flags and flags[key] is not None:
                return flags[key]
    return default


def _as_int(v: Any, name: str) -> int | None:
    if v is None:
        return None
    try:
        return int(str(v).strip())
    except ValueError:
        raise ValueError(f"--{name} expects an integer, got {v!r}") from None


def _as_float(v: Any, name: str) -> float | None:
    if v is None:
        return None
    try:
        return float(str(v).strip())
    except ValueError:
        raise ValueError(f"--{name} expects a number, got {v!r}") from None


def _truthy(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.lower() in ("1", "true", "yes", "on", ""))


def plan(shape: ModelShape, flags: dict[str, Any], gpu_mem_bytes: int, *, n_gpus: int = 1,
         weights_bytes: int | None = None, in_use_bytes: int = 0) -> MemoryPlan:
    """Estimate per-GPU memory for ``shape`` served with SGLang ``flags`` on GPUs of ``gpu_mem_bytes``.

    ``flags`` maps canonical flag names (``mem-fraction-static``, ``max-running-requests``,
    ``speculative-algorithm``, ``speculative-num-steps``, ``speculative-eagle-topk``,
    ``speculative-num-draft-tokens``, ``speculative-draft-model-path``, ``context-length``,
    ``tp-size``, ``kv-cache-dtype``, ``mamba-radix-cache-strategy``, ``chunked-prefill-size``,
    ``cuda-graph-max-bs-decode``, ``enable-hierarchical-cache``, ``hicache-size``,
    ``hicache-ratio``, ``disable-radix-cache``) to values. ``weights_bytes`` (whole model)
    overrides the parameter-count estimate. ``in_use_bytes``: memory other processes hold on the GPU now
    (SGLang sizes its budget from the free memory). Raises ValueError on malformed flag values.

    Each piece of advice is a :class:`PlanFix` verified by planning again with it, every other flag as given:
    a bound (``lower --max-running-requests to ≤ N``) is the largest value that fits, found by bisection.
    """
    return _plan(shape, flags, gpu_mem_bytes, n_gpus=n_gpus, weights_bytes=weights_bytes, in_use_bytes=in_use_bytes,
                 advise=True)


def _plan(shape: ModelShape, flags: dict[str, Any], gpu_mem_bytes: int, *, n_gpus: int, weights_bytes: int | None,
          in_use_bytes: int, advise: bool) -> MemoryPlan:
    """:func:`plan`; ``advise`` off: the verdict only (the advice's own trial plans)."""
    if gpu_mem_bytes <= 0:
        raise ValueError("GPU memory must be positive")
    if in_use_bytes < 0:
        raise ValueError("memory in use cannot be negative")
    tp = _as_int(_flag(flags, "tp-size", "tp", "tensor-parallel-size"), "tp-size") or 1
    if tp < 1:
        raise ValueError("--tp-size must be at least 1")
    reasons: list[str] = []
    advice: list[str] = []

    algo_raw = _flag(flags, "speculative-algorithm")
    algo = str(algo_raw).upper() if algo_raw else None
    spec = algo is not None and algo != "NONE"
    if not spec:
        algo = None
    steps = _as_int(_flag(flags, "speculative-num-steps"), "speculative-num-steps")
    topk = _as_int(_flag(flags, "speculative-eagle-topk"), "speculative-eagle-topk")
    draft_tokens = _as_int(_flag(flags, "speculative-num-draft-tokens"), "speculative-num-draft-tokens")
    if spec:
        steps = steps or 3
        topk = topk or 1
        draft_tokens = steps + 1 if topk == 1 else (draft_tokens or 4)
    else:
        draft_tokens = 0

    chunk = _as_int(_flag(flags, "chunked-prefill-size"), "chunked-prefill-size")
    graph_bs = _as_int(_flag(flags, "cuda-graph-max-bs-decode", "cuda-graph-max-bs"), "cuda-graph-max-bs-decode")

    frac = _as_float(_flag(flags, "mem-fraction-static"), "mem-fraction-static")
    frac_source: Literal["flag", "auto"] = "flag"
    if frac is None:
        frac = auto_mem_fraction_static(gpu_mem_bytes, tp_size=tp, chunked_prefill_size=chunk,
                                        cuda_graph_max_bs=graph_bs, speculative=spec)
        frac_source = "auto"
    if not 0 < frac < 1:
        raise ValueError(f"--mem-fraction-static must be between 0 and 1, got {frac}")

    usable = max(0, gpu_mem_bytes - in_use_bytes - cuda_context_bytes(tp))
    budget = int(frac * usable)

    # weights
    if weights_bytes is not None:
        w_total, w_source = int(weights_bytes), "given"
    else:
        w_total, w_source = shape.weights_bytes, ("config" if shape.params_source == "config" else "estimated")
    weights = int(w_total / tp) + LOADER_OVERHEAD_BYTES

    # KV dtype
    kv_raw = str(_flag(flags, "kv-cache-dtype", default="auto")).lower()
    kv_b = KV_DTYPE_BYTES.get(kv_raw)
    if kv_b is None:
        kv_b = 2.0 if shape.weight_bytes_per_param < 2 or kv_raw == "auto" else shape.weight_bytes_per_param

    # draft model (EAGLE head or the model's MTP layers)
    draft_weights = 0
    draft_layers = 0
    if spec and algo != "NGRAM":
        if _flag(flags, "speculative-draft-model-path"):
            draft_layers = 1
            draft_weights = int((shape.layer_params + 2 * shape.hidden_size ** 2) * 2 / tp)
        elif shape.mtp_layers:
            draft_layers = shape.mtp_layers
            draft_weights = int(shape.mtp_params * max(1.0, shape.weight_bytes_per_param) / tp)
        else:
            draft_layers = 1
            draft_weights = int((shape.layer_params + 2 * shape.hidden_size ** 2) * 2 / tp)
            reasons.append(f"{algo} without a draft model path on a model without MTP layers: "
                           "a one-layer draft model was assumed")
    kv_tok = kv_bytes_per_token(shape, tp_size=tp, kv_dtype_bytes=kv_b)
    kv_tok += kv_bytes_per_token(shape, tp_size=tp, kv_dtype_bytes=kv_b, layers=draft_layers) if draft_layers else 0

    # running requests
    mr = _as_int(_flag(flags, "max-running-requests"), "max-running-requests")
    mr_source: Literal["flag", "speculative_default", "auto"] = "flag"
    if mr is None and spec:
        mr, mr_source = SPEC_DEFAULT_MAX_RUNNING, "speculative_default"
        reasons.append("Max running requests is reset to 48 for speculative decoding "
                       "(SGLang's rule when --max-running-requests is unset)")
    elif mr is None:
        mr_source = "auto"
    if mr is not None and mr < 1:
        raise ValueError("--max-running-requests must be at least 1")

    # recurrent state
    state = mamba_state_bytes_per_slot(shape, tp_size=tp)
    strategy = str(_flag(flags, "mamba-radix-cache-strategy", default="extra_buffer")).lower()
    slots_per_req = 0
    if state:
        if _truthy(_flag(flags, "disable-radix-cache", default=False)):
            slots_per_req = 1
        else:
            slots_per_req = MAMBA_SLOTS_PER_REQUEST.get(strategy, 5)
        slots_per_req += draft_tokens
    after_weights = budget - weights - draft_weights
    if state and mr is None:
        # SGLang sizes the state pool itself: give it at most half of what the weights leave.
        mr = max(1, min(256, int(max(0, after_weights) * 0.5 // (slots_per_req * state))))
    mamba_slots = (mr or 0) * slots_per_req if state else 0
    mamba_bytes = mamba_slots * state

    kv_pool = after_weights - mamba_bytes
    kv_tokens = max(0, int(kv_pool // kv_tok)) if kv_tok else 0

    ctx = _as_int(_flag(flags, "context-length"), "context-length") or shape.max_position_embeddings or 32768
    at_ctx = kv_tokens // ctx if ctx else 0
    if mr is not None:
        at_ctx = min(at_ctx, mr)

    act = activation_reserve_bytes(shape, tp_size=tp, chunked_prefill_size=chunk, cuda_graph_max_bs=graph_bs,
                                   speculative=spec, gpu_mem_bytes=gpu_mem_bytes)
    outside = usable - budget

    hicache = 0
    if _truthy(_flag(flags, "enable-hierarchical-cache", "enable-hicache", default=False)):
        size = _as_float(_flag(flags, "hicache-size"), "hicache-size")
        ratio = _as_float(_flag(flags, "hicache-ratio"), "hicache-ratio") or 2.0
        hicache = int(size * GIB) if size else int(max(0, kv_pool) * ratio)
        reasons.append(f"hierarchical cache keeps {hicache / GIB:.0f} GiB of KV in host RAM per GPU "
                       "(host memory, not GPU memory)")

    # ---- verdict
    g = lambda b: f"{b / GIB:.1f} GiB"  # noqa: E731
    verdict: Verdict = "fits"
    min_kv_bytes = MIN_KV_TOKENS * kv_tok
    if after_weights <= 0:
        verdict = "does_not_fit"
        reasons.append(f"weights {g(weights + draft_weights)} exceed the static budget {g(budget)} "
                       f"(--mem-fraction-static {frac} of {g(usable)})")
    elif kv_pool <= 0 or kv_tokens < MIN_KV_TOKENS:
        verdict = "does_not_fit"
        if mamba_bytes:
            reasons.append(f"recurrent state for {mr} requests × {slots_per_req} slots "
                           f"({g(mamba_bytes)}) plus weights {g(weights + draft_weights)} "
                           f"exceed the static budget {g(budget)}: no room for the KV cache")
        else:
            reasons.append(f"the KV pool after weights is {g(max(0, kv_pool))}: "
                           f"{kv_tokens} tokens, fewer than the minimum {MIN_KV_TOKENS}")
    else:
        if kv_tokens < ctx:
            verdict = "tight"
            reasons.append(f"KV pool holds {kv_tokens} tokens, fewer than --context-length {ctx}")
        if outside < act:
            verdict = "tight"
            reasons.append(f"only {g(outside)} left outside --mem-fraction-static for activations and "
                           f"CUDA graphs, about {g(act)} needed: risk of OOM at graph capture or under load")

    if in_use_bytes:
        reasons.append(f"{g(in_use_bytes)} of the GPU is in use by other processes: planned against the "
                       f"{g(max(0, gpu_mem_bytes - in_use_bytes))} free")

    # ---- advice: each fix verified by planning again with it
    fixes: list[PlanFix] = []
    if advise and verdict != "fits":
        def trial(over: dict[str, Any], n: int = n_gpus) -> Verdict:
            """The verdict with ``over`` changed and every other flag as given."""
            try:
                return _plan(shape, {**flags, **over}, gpu_mem_bytes, n_gpus=n, weights_bytes=weights_bytes,
                             in_use_bytes=in_use_bytes, advise=False).verdict
            except ValueError:
                return "does_not_fit"

        kv_short = verdict == "does_not_fit" or kv_tokens < ctx
        if state and mr and mr > 1 and kv_short:  # fewer requests: less recurrent state, more KV cache
            found = best_value(lambda n: trial({"max-running-requests": n}), 1, mr - 1,
                               or_tight=verdict == "does_not_fit")
            if found is not None:
                fixes.append(PlanFix(verb="lower", flag="--max-running-requests", value=str(found[0]), bound=True,
                                     then=found[1]))
        if verdict == "does_not_fit":
            if state and strategy == "extra_buffer" and slots_per_req > 1:
                fixes.append(PlanFix(verb="use", flag="--mamba-radix-cache-strategy", value="extra_buffer_lazy",
                                     note="one state slot less per request",
                                     then=trial({"mamba-radix-cache-strategy": "extra_buffer_lazy"})))
            need = (weights + draft_weights + mamba_bytes + min_kv_bytes) / usable if usable else 2.0
            start = max(math.ceil(need * 100), math.floor(frac * 100) + 1)
            raised = _first_fit(range(start, 96), lambda f: trial({"mem-fraction-static": f / 100}))
            if raised is not None:
                fixes.append(PlanFix(verb="raise", flag="--mem-fraction-static", value=f"{raised[0] / 100:.2f}",
                                     then=raised[1]))
            for t in (2, 4, 8):
                if t <= tp:
                    continue
                then = trial({"tp-size": t}, max(n_gpus, t))
                if then != "does_not_fit":
                    fixes.append(PlanFix(verb="use", flag="--tp-size", value=str(t), then=then,
                                         note="" if t <= n_gpus else f"needs {t} GPUs"))
                    break
        else:  # tight
            if outside < act and usable:
                lower = math.floor((1 - (act / usable)) * 100) / 100
                then = trial({"mem-fraction-static": lower}) if 0 < lower < frac else "does_not_fit"
                if then != "does_not_fit":
                    fixes.append(PlanFix(verb="lower", flag="--mem-fraction-static", value=f"{lower:.2f}", then=then))
            if kv_tokens < ctx:
                fixes.append(PlanFix(verb="lower", flag="--context-length", value=str(kv_tokens), bound=True,
                                     then=trial({"context-length": kv_tokens})))
    advice = [f.text for f in fixes]

    return MemoryPlan(
        gpu_mem_bytes=gpu_mem_bytes, n_gpus=n_gpus, tp_size=tp,
        mem_fraction_static=frac, mem_fraction_source=frac_source,
        usable_bytes=usable, static_budget_bytes=budget,
        weights_bytes=weights, weights_source=w_source, draft_weights_bytes=draft_weights,
        kv_dtype_bytes=kv_b, kv_bytes_per_token=kv_tok,
        mamba_state_bytes_per_slot=state, mamba_slots_per_request=slots_per_req,
        mamba_slots=mamba_slots, mamba_bytes=mamba_bytes,
        max_running_requests=mr, max_running_source=mr_source,
        speculative_algorithm=algo, speculative_num_draft_tokens=draft_tokens,
        kv_pool_bytes=int(kv_pool), kv_tokens=kv_tokens, context_length=ctx, requests_at_context=at_ctx,
        activation_reserve_bytes=act, outside_budget_bytes=outside, hicache_host_bytes=hicache,
        in_use_bytes=in_use_bytes, verdict=verdict, reasons=reasons, advice=advice, fixes=fixes,
    )


def _first_fit(values: Iterable[int], verdict_at: Callable[[int], Verdict]) -> tuple[int, Verdict] | None:
    """The first of ``values`` whose plan fits, else the first only tight, else None (planned in order, up to
    the first that fits)."""
    tight: tuple[int, Verdict] | None = None
    for v in values:
        then = verdict_at(v)
        if then == "fits":
            return v, then
        if then == "tight" and tight is None:
            tight = (v, then)
    return tight


def best_value(verdict_at: Callable[[int], Verdict], low: int, high: int, *,
               or_tight: bool = False) -> tuple[int, Verdict] | None:
    """The largest n in [low, high] whose plan fits (with ``or_tight``, else the largest only tight) and its
    verdict, by bisection over the planner: ``verdict_at(n)`` gets no better as n grows (more requests, less
    memory for each)."""
    for ok in (("fits",), ("fits", "tight"))[:2 if or_tight else 1]:
        if low > high or verdict_at(low) not in ok:
            continue
        lo, hi = low, high  # verdict_at(lo) is ok; the answer is in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if verdict_at(mid) in ok:
                lo = mid
            else:
                hi = mid - 1
        return lo, verdict_at(lo)
    return None


MEM_UNITS: dict[str, int] = {
    "tib": 1 << 40, "gib": GIB, "mib": MIB, "ti": 1 << 40, "gi": GIB, "mi": MIB,
    "tb": 10 ** 12, "gb": 10 ** 9, "mb": 10 ** 6,
    "t": 1 << 40, "g": GIB, "m": MIB,
}
"""Each size unit with its true meaning: TiB/GiB/MiB (and Ti/Gi/Mi, and T/G/M as nvidia-smi and docker write
them) are powers of 1024; TB/GB/MB are powers of 1000 (``96GB`` is 96·10⁹ bytes, 89.4 GiB). Longest first."""


def parse_mem(text: str) -> int:
    """'80GiB', '97887MiB', '96G' (GiB), '96GB' (10⁹ bytes each), '96' (GiB) -> bytes, each unit as
    :data:`MEM_UNITS` says. Raises ValueError."""
    s = str(text).strip().lower().replace(" ", "")
    units = MEM_UNITS
    for u, mul in units.items():
        if s.endswith(u):
            num = s[: -len(u)]
            break
    else:
        num, mul = s, GIB
    try:
        val = float(num)
    except ValueError:
        raise ValueError(f"not a memory size: {text!r} (use e.g. 96GiB, 97887MiB, or 96GB for 96·10⁹ bytes)") from None
    if not math.isfinite(val) or val <= 0:
        raise ValueError(f"memory size must be positive: {text!r}")
    return int(val * mul)


def parse_server_flags(tokens: list[str], *, schema: FlagSchema | None = None, strict: bool = False) -> dict[str, object]:
    """Server flags as the server's argparse reads them: ``{canonical name without --: value as typed}``.

    Resolved by the one argv resolver (:func:`console.core.flags.argv.resolve_argv`) against
    ``schema`` (the host's, else the bundled sglang 0.5.23 schema): abbreviations (``--max-running``),
    aliases (``--tp``... ``--tensor-parallel-size``), ``=`` forms, ``--no-x``, nargs. Unknown flags
    stay keyed as typed. With ``strict``, anything the server's argparse would reject (except a
    missing ``--model-path``, which the planner does not need) raises :class:`UserError`.
    """
    tokens = [str(t) for t in tokens]
    if tokens and tokens[0] == "--":
        tokens = tokens[1:]
    if any("\x00" in t or "\n" in t for t in tokens):
        raise UserError("server flags must not contain NUL or newline characters")
    res = resolve_argv(tokens, schema or bundled_schema())
    if strict:
        errors = [e for e in res.errors if e.kind != "missing_required"]
        if errors:
            prog = (schema or bundled_schema()).prog or "the server"
            raise UserError(f"server flags: {prog} would stop with: {errors[0].message}")
    out: dict[str, object] = {}
    for name, value in res.pairs():
        if value is None:
            continue
        out[name.lstrip("-")] = value
    return out
