"""`mtpconsole plan`: offline GPU memory estimate for a model and a set of SGLang flags.

    mtpconsole plan --model-config config.json --gpu-mem 96GiB [--gpus N] [--weights-gb X] [--json] -- <server flags>
    mtpconsole plan --demo -- <server flags>          # the demo host's model and GPU; nothing is staged

Exit 0 when it fits (or is tight), 1 when it does not fit, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from console.core.planner import parse_server_flags
from console.errors import UserError

if TYPE_CHECKING:
    from console.commands.context import CliContext
    from console.core.model_config import ModelShape
    from console.core.planner import MemoryPlan


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-config", metavar="PATH",
                   help="the model's config.json (or its directory); with --demo, the demo's model by default")
    p.add_argument("--gpu-mem", metavar="SIZE",
                   help="memory of one GPU, e.g. 96GiB, 97887MiB (powers of 1024), 96GB (10^9 bytes each), a bare "
                        "number is GiB; with --demo, a demo GPU's by default")
    p.add_argument("--gpus", type=int, default=1, metavar="N", help="GPUs available on the host (default 1)")
    p.add_argument("--weights-gb", type=float, default=None, metavar="X",
                   help="real size of the weights in GiB (2^30 bytes; whole model), instead of the estimate")
    p.add_argument("server_flags", nargs=argparse.REMAINDER, metavar="-- FLAGS",
                   help="the SGLang flags after '--'")


def _demo_gpu_bytes() -> int:
    from console.sim.demo import GPU_MEM_MIB
    return GPU_MEM_MIB << 20


def _fmt_gb(b: int | float) -> str:
    return f"{b / (1 << 30):.2f} GiB"


def render(plan: MemoryPlan, shape: ModelShape) -> str:
    """Human-readable report of a MemoryPlan."""
    verdict = {"fits": "FITS", "tight": "TIGHT", "does_not_fit": "DOES NOT FIT"}[plan.verdict]
    lines = [
        f"model        {shape.architecture or shape.model_type or '?'}: {shape.num_params / 1e9:.1f}B params "
        f"({shape.params_source}), {shape.dtype}, {shape.num_layers} layers"
        + (f" ({shape.num_attention_layers} attention, {shape.linear.num_layers} linear)" if shape.linear else "")
        + (", MLA" if shape.mla else "") + (f", {shape.mtp_layers} MTP" if shape.mtp_layers else ""),
        f"gpu          {_fmt_gb(plan.gpu_mem_bytes)} × tp {plan.tp_size} (usable {_fmt_gb(plan.usable_bytes)})",
        f"fraction     --mem-fraction-static {plan.mem_fraction_static} ({plan.mem_fraction_source})"
        f" → static budget {_fmt_gb(plan.static_budget_bytes)}",
        f"weights      {_fmt_gb(plan.weights_bytes)} ({plan.weights_source})"
        + (f" + draft {_fmt_gb(plan.draft_weights_bytes)}" if plan.draft_weights_bytes else ""),
    ]
    if plan.mamba_state_bytes_per_slot:
        lines.append(
            f"state        {plan.mamba_state_bytes_per_slot / (1 << 20):.1f} MiB/slot × {plan.mamba_slots_per_request} "
            f"slots × {plan.max_running_requests} requests = {_fmt_gb(plan.mamba_bytes)}")
    lines += [
        f"running      max {plan.max_running_requests if plan.max_running_requests is not None else 'auto'}"
        f" ({plan.max_running_source})"
        + (f", {plan.speculative_algorithm} with {plan.speculative_num_draft_tokens} draft tokens"
           if plan.speculative_algorithm else ""),
        f"kv cache     {plan.kv_bytes_per_token / 1024:.1f} KiB/token, pool {_fmt_gb(max(0, plan.kv_pool_bytes))}"
        f" = {plan.kv_tokens} tokens; {plan.requests_at_context} requests at context {plan.context_length}",
        f"reserve      {_fmt_gb(plan.outside_budget_bytes)} outside the budget, ~{_fmt_gb(plan.activation_reserve_bytes)}"
        " needed for activations + CUDA graphs",
        f"verdict      {verdict}",
    ]
    for r in plan.reasons:
        lines.append(f"  why: {r}")
    for a in plan.advice:
        lines.append(f"  fix: {a}")
    return "\n".join(lines)


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from console.core.model_config import ModelConfigError, load_model_config
    from console.core.planner import parse_mem, plan

    demo = ctx.demo
    if not demo and (args.model_config is None or args.gpu_mem is None):
        missing = " and ".join(f for f, v in (("--model-config", args.model_config), ("--gpu-mem", args.gpu_mem))
                               if v is None)
        raise UserError(f"plan needs {missing} (or --demo for the demo host's model and GPUs)")
    try:
        if args.model_config is None:  # --demo: the demo's model, as its hosts serve it; no server is staged
            from console.core.model_config import parse_model_config
            from console.sim.demo import MODEL_CONFIG
            shape = parse_model_config(MODEL_CONFIG)
        else:
            shape = load_model_config(args.model_config)
    except ModelConfigError as e:
        raise UserError(str(e)) from None
    try:
        gpu = parse_mem(args.gpu_mem) if args.gpu_mem is not None else _demo_gpu_bytes()
    except ValueError as e:
        raise UserError(f"--gpu-mem: {e}") from None
    if args.gpus < 1:
        raise UserError("--gpus must be at least 1")
    weights = None
    if args.weights_gb is not None:
        if not args.weights_gb > 0:
            raise UserError("--weights-gb must be positive")
        weights = int(args.weights_gb * (1 << 30))
    flags = parse_server_flags(list(args.server_flags or []), strict=True)
    try:
        result = plan(shape, flags, gpu, n_gpus=args.gpus, weights_bytes=weights)
    except ValueError as e:
        raise UserError(str(e)) from None
    if result.tp_size > args.gpus:
        raise UserError(f"--tp-size {result.tp_size} needs {result.tp_size} GPUs, --gpus is {args.gpus}")
    if ctx.json_output:
        print(json.dumps({"plan": result.model_dump(), "model": shape.model_dump()}, indent=2))
    else:
        print(render(result, shape))
    return 1 if result.verdict == "does_not_fit" else 0
