"""The advisor: rules, as one table, that read a serving GPU the way an experienced operator would.

Each rule looks at one server (its GPU sample, serving figures over the last minutes, its
resolved flags, the model's shape when known) and returns an :class:`~console.model.Advice`
with the evidence it used. A rule that proposes a flag change builds the full new flag set and
has it checked by the flag validator and the memory planner before it is shown; when the
planner cannot check it (no model config), the suggestion says so instead of "fits".

Thresholds are named constants below, each with the reason for its value. They were chosen
from how SGLang and GPUs behave, not fitted to the demo.

Advice rests on live evidence only: the caller gives a context only for the current session of a GPU
whose server process is alive, and every figure a rule reads must be younger than its own age bound
(``*_MAX_AGE_S``, one per figure, in :data:`FIGURE_MAX_AGE_S`); an older or undated figure is as good as
none. A trend ("growing") is a series of distinct readings that rises: strictly more at its end than at its
start, by at least a minimum; a flat series is not growing. Memory held by processes of no live session is
what the orphan hunter proves (:func:`console.core.orphans.find_orphans`), never what a view leaves out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from console.core.model_config import ModelShape
from console.core.orphans import Orphan
from console.core.planner import SPEC_ALGOS, Verdict, best_value, plan
from console.model import Advice, Figure, GpuSample, ServingFigures, Suggestion

UNDERUSED_POWER_FRACTION = 0.75
"""A GPU decoding flat out draws close to its limit; below 3/4 with requests waiting, the GPU
waits on something (small batches, no speculation). The incident's GPU drew 400 of 600 W (0.67)."""

LOW_ACCEPT_LENGTH = 1.5
"""With speculative decoding each step costs one draft pass plus verification; below ~1.5
accepted tokens per step the extra passes cost more than the tokens they win (SGLang's own
benchmarks put useful EAGLE at 2-4)."""

MIN_HISTORY_POINTS = 3
"""Trends (a growing queue, a low accept length "over minutes") need at least this many readings."""

MIN_QUEUE_RISE = 2
"""A growing queue holds at least this many more requests at the end of its series than at the start: one
request more is the noise of a queue that admits and finishes requests every step."""

TREND_WINDOW_S = 300.0
"""A trend is read over the last 5 minutes of readings; older ones describe another load."""

SAME_READING_S = 1.0
"""Two readings of a figure dated less than this apart are one observation (the same log line or /metrics
fetch read twice): a series counts observations, not reads."""

QUEUE_MAX_AGE_S = 30.0
"""A queue length changes within seconds (busy SGLang logs a batch line every 40 decode steps, the agent
fetches /metrics every tick): one 30 s old describes another moment's load."""

RUNNING_MAX_AGE_S = 30.0
"""Running requests: as fast-moving as the queue."""

THROUGHPUT_MAX_AGE_S = 30.0
"""Generation throughput: per batch line, as fast-moving as the queue."""

TOKEN_USAGE_MAX_AGE_S = 30.0
"""KV-cache usage follows the running batch: as fast-moving as the queue."""

ACCEPT_LENGTH_MAX_AGE_S = 120.0
"""Speculative accept length: SGLang averages it over recent steps, so it moves over minutes, not seconds."""

RETRACTED_MAX_AGE_S = 60.0
"""The retraction counter (and a retraction log line) says the KV cache overflowed within the last minute."""

LATENCY_MAX_AGE_S = 120.0
"""Mean TTFT / inter-token latency since start (histograms): slow-moving, never used by a rule yet."""

GPU_SAMPLE_MAX_AGE_S = 10.0
"""Power and clock-throttle readings: the agent samples the GPU every tick (~1 s); 10 s is a stalled sample."""

FIGURE_MAX_AGE_S: dict[str, float] = {
    "queue": QUEUE_MAX_AGE_S, "running": RUNNING_MAX_AGE_S, "gen_throughput": THROUGHPUT_MAX_AGE_S,
    "token_usage": TOKEN_USAGE_MAX_AGE_S, "accept_length": ACCEPT_LENGTH_MAX_AGE_S,
    "accept_rate": ACCEPT_LENGTH_MAX_AGE_S, "spec_steps": ACCEPT_LENGTH_MAX_AGE_S, "retracted_total": RETRACTED_MAX_AGE_S,
    "ttft_s": LATENCY_MAX_AGE_S, "itl_s": LATENCY_MAX_AGE_S,
}
"""The age bound of every serving figure (``ServingFigures`` field -> seconds)."""

KV_FULL_USAGE = 0.95
"""Above 95 % KV-cache usage SGLang starts retracting requests (it re-queues them and redoes
their prefill), which is what makes a nearly full cache expensive."""

POWER_AT_LIMIT_FRACTION = 0.97
"""Within 3 % of the limit counts as "at the limit" (NVML's power reading is an average that
rarely touches the exact cap)."""

RAISE_RUNNING_FACTOR = 2
"""Raise --max-running-requests by at most this factor at once, then watch again."""

DEFAULT_SPEC_FLAGS = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
"""SGLang's usual automatic choice for EAGLE/MTP (steps 3, topk 1, 4 draft tokens)."""

Validator = Callable[[list[str]], str | None]
"""Returns None when the flags are valid, else the validator's first error."""


@dataclass(frozen=True)
class ServerContext:
    """What the rules may read about one server; built by the caller from a HostView."""

    host: str
    gpu: GpuSample
    now: float
    """The console's clock when the rules run: figures' ages are counted from it."""
    gpu_at: float | None = None
    """When ``gpu`` was sampled (console clock); None: undated, its power and throttling are not used."""
    session_id: str | None = None
    pid: int | None = None
    flags_argv: list[str] = field(default_factory=list)
    """The server flags as launched (no program name)."""
    flags: dict[str, Any] = field(default_factory=dict)
    """Resolved flags, keyed by canonical name (``max-running-requests``)."""
    figures: ServingFigures = field(default_factory=ServingFigures)
    history: Sequence[ServingFigures] = ()
    """Older readings, oldest first (the current one not included)."""
    log_tail: Sequence[str] = ()
    retract_lag_s: float | None = None
    """How long the log went on after its last retraction line (its own clock); None: none, or undated."""
    shape: ModelShape | None = None
    throttle_reasons: Sequence[str] = ()
    """NVML clock event reasons active now (e.g. ``sw_power_cap``, ``hw_slowdown``)."""


@dataclass(frozen=True)
class HostContext:
    """Host-wide facts for rules that are not about one server."""

    host: str
    gpus: Sequence[GpuSample] = ()
    orphans: Sequence[Orphan] = ()
    """Proven orphans (:func:`console.core.orphans.find_orphans`): processes of no live session, with evidence."""
    gpu_source: str = "GPU source"
    """Where the memory figures come from (``nvml``, ``nvidia-smi``, ``sim``)."""


def fresh(ctx: ServerContext, name: str) -> float | None:
    """The current value of figure ``name`` when it is younger than its bound (``FIGURE_MAX_AGE_S``), else None."""
    f = getattr(ctx.figures, name)
    if f is None or ctx.now - f.at > FIGURE_MAX_AGE_S[name] or f.at - ctx.now > SAME_READING_S:
        return None  # too old, or dated in the future (no clock to trust)
    return f.value


def gpu_fresh(ctx: ServerContext) -> bool:
    """The GPU sample (power, throttling) is dated and younger than ``GPU_SAMPLE_MAX_AGE_S``."""
    return ctx.gpu_at is not None and ctx.now - ctx.gpu_at <= GPU_SAMPLE_MAX_AGE_S


def series(ctx: ServerContext, name: str) -> list[float]:
    """The readings of figure ``name`` a trend may use, oldest first: distinct observations (one per
    ``SAME_READING_S``) of the last ``TREND_WINDOW_S``, the newest younger than its bound (else none)."""
    if fresh(ctx, name) is None:
        return []
    out: list[Figure] = []
    for h in [*ctx.history, ctx.figures]:
        f = getattr(h, name)
        if f is None or ctx.now - f.at > TREND_WINDOW_S:
            continue
        if out and abs(f.at - out[-1].at) < SAME_READING_S:
            out[-1] = f  # the same observation read again: one reading
        else:
            out.append(f)
    return [f.value for f in out]


def rising(values: Sequence[float], min_rise: float) -> bool:
    """A rising series: enough readings, never falling, and strictly more at the end than at the start by at
    least ``min_rise`` (a flat series is not rising)."""
    return (len(values) >= MIN_HISTORY_POINTS and all(b >= a for a, b in pairwise(values))
            and values[-1] - values[0] >= min_rise and values[-1] > values[0])


def _spec_on(ctx: ServerContext) -> bool:
    algo = ctx.flags.get("speculative-algorithm")
    return bool(algo) and str(algo).upper() in SPEC_ALGOS


def _set_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag`` set to ``value`` (replacing ``--flag v`` and ``--flag=v`` forms)."""
    out, skip = [], False
    for i, tok in enumerate(argv):
        if skip:
            skip = False
            continue
        if tok == flag:
            skip = i + 1 < len(argv)
            continue
        if tok.startswith(flag + "="):
            continue
        out.append(tok)
    return out + [flag, value]


@dataclass(frozen=True)
class Checker:
    """The validator and the planner, as the advisor uses them."""

    validate: Validator | None = None

    def check(self, ctx: ServerContext, argv: list[str], change: str, flags: dict[str, Any]) -> Suggestion:
        error = self.validate(argv) if self.validate else None
        valid = None if self.validate is None else error is None
        if ctx.shape is None or not ctx.gpu.mem_total_mib:
            why = "no model config" if ctx.shape is None else "no GPU memory information"
            verdict = f"not checked by the planner ({why})"
        else:
            try:
                p = plan(ctx.shape, flags, ctx.gpu.mem_total_mib << 20)
            except ValueError as e:
                verdict = f"not checked by the planner ({e})"
            else:
                verdict = {"fits": "planner: fits", "tight": "planner: fits, tight"}.get(
                    p.verdict, "planner: does not fit") + (f" — {p.reasons[0]}" if p.reasons else "")
        if error:
            verdict = f"flag validator: {error}; {verdict}"
        return Suggestion(flags=argv, change=change, valid=valid, planner=verdict)


# ------------------------------------------------------------------ rules, one function each

def underused_without_speculation(ctx: ServerContext, chk: Checker) -> Advice | None:
    g = ctx.gpu
    queue = fresh(ctx, "queue")
    if _spec_on(ctx) or not gpu_fresh(ctx) or not g.power_w or not g.power_limit_w or queue is None or queue <= 0:
        return None
    frac = g.power_w / g.power_limit_w
    if frac >= UNDERUSED_POWER_FRACTION:
        return None
    evidence = [f"power {g.power_w:.0f} W of {g.power_limit_w:.0f} W ({frac:.0%} < {UNDERUSED_POWER_FRACTION:.0%})",
                f"{queue:.0f} request(s) queued", "speculative decoding off"]
    tput = fresh(ctx, "gen_throughput")
    if tput is not None:
        evidence.append(f"{tput:.0f} tok/s")
    # Power, not NVML's utilisation (busy even when one small kernel runs), is what says the GPU has room.
    headroom = f"GPU at {frac:.0%} of its power limit with {queue:.0f} queued"
    if ctx.shape is None:
        return Advice(host=ctx.host, gpu=g.index, session_id=ctx.session_id, pid=ctx.pid, kind="gpu_underused",
                      message=f"{headroom}; speculative decoding could help, but the model's config is unknown "
                              "(no draft model or MTP head known to the planner)", evidence=evidence)
    if ctx.shape.mtp_layers <= 0:
        return Advice(host=ctx.host, gpu=g.index, session_id=ctx.session_id, pid=ctx.pid, kind="gpu_underused",
                      message=f"{headroom}; the model has no MTP head known to the planner (a separate draft "
                              "model would be needed for EAGLE)", evidence=evidence)
    argv = list(ctx.flags_argv)
    for k, v in zip(DEFAULT_SPEC_FLAGS[::2], DEFAULT_SPEC_FLAGS[1::2]):
        argv = _set_flag(argv, k, v)
    flags = dict(ctx.flags, **{"speculative-algorithm": "EAGLE", "speculative-num-steps": 3,
                               "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 4})
    sug = chk.check(ctx, argv, "add EAGLE/MTP (steps 3, topk 1, 4 draft tokens)", flags)
    return Advice(host=ctx.host, gpu=g.index, session_id=ctx.session_id, pid=ctx.pid, kind="gpu_underused",
                  message=f"{headroom}; consider EAGLE/MTP ({sug.planner})", evidence=evidence, suggestion=sug)


def speculation_costs_more(ctx: ServerContext, chk: Checker) -> Advice | None:
    if not _spec_on(ctx):
        return None
    lengths = series(ctx, "accept_length")[-12:]  # the readings shown are the ones judged
    if len(lengths) < MIN_HISTORY_POINTS:
        return None
    mean = sum(lengths) / len(lengths)
    if mean >= LOW_ACCEPT_LENGTH:
        return None
    adaptive = "--speculative-adaptive" in ctx.flags_argv
    steps = fresh(ctx, "spec_steps")
    if adaptive and steps is not None and steps < 1:
        return None  # the adaptive controller has already turned drafting off: nothing to win by removing it
    argv, skip = [], False
    for i, tok in enumerate(ctx.flags_argv):
        if skip:
            skip = False
            continue
        if tok.startswith("--speculative-"):
            skip = "=" not in tok and i + 1 < len(ctx.flags_argv) and not ctx.flags_argv[i + 1].startswith("--")
            continue
        argv.append(tok)
    flags = {k: v for k, v in ctx.flags.items() if not k.startswith("speculative-")}
    sug = chk.check(ctx, argv, "remove the --speculative-* flags", flags)
    return Advice(host=ctx.host, gpu=ctx.gpu.index, session_id=ctx.session_id, pid=ctx.pid,
                  kind="speculation_costly",
                  message="speculation costs more than it gives: accept length "
                          f"{mean:.2f} < {LOW_ACCEPT_LENGTH} over the last {len(lengths)} readings"
                          + (" even with adaptive steps" if adaptive else ""),
                  evidence=[f"accept length readings: {', '.join(f'{v:.2f}' for v in lengths)}"]
                  + ([f"{'adaptive: ' if adaptive else ''}{steps:.0f} speculative step(s) now "
                      "(sglang:spec_num_steps)"] if steps is not None else []),
                  suggestion=sug)


def _largest_that_fits(ctx: ServerContext, low: int, high: int) -> int:
    """The largest --max-running-requests in (low, high] the planner accepts, fitting before tight (the planner's
    own search, :func:`console.core.planner.best_value`); ``low`` when none is; ``high`` if it cannot check."""
    if ctx.shape is None or not ctx.gpu.mem_total_mib:
        return high
    shape, mem = ctx.shape, ctx.gpu.mem_total_mib << 20

    def verdict_at(n: int) -> Verdict:
        try:
            return plan(shape, dict(ctx.flags, **{"max-running-requests": n}), mem).verdict
        except ValueError:
            return "does_not_fit"

    found = best_value(verdict_at, low + 1, high, or_tight=True)
    return found[0] if found else low


def running_at_limit(ctx: ServerContext, chk: Checker) -> Advice | None:
    limit = ctx.flags.get("max-running-requests")
    try:
        limit_n = int(limit) if limit is not None else None
    except (TypeError, ValueError):
        limit_n = None
    running, queue = fresh(ctx, "running"), series(ctx, "queue")[-6:]  # the readings shown are the ones judged
    if limit_n is None or running is None or running < limit_n or not rising(queue, MIN_QUEUE_RISE):
        return None
    target = _largest_that_fits(ctx, limit_n, limit_n * RAISE_RUNNING_FACTOR)
    if target <= limit_n:
        return None
    argv = _set_flag(list(ctx.flags_argv), "--max-running-requests", str(target))
    sug = chk.check(ctx, argv, f"--max-running-requests {limit_n} -> {target}",
                    dict(ctx.flags, **{"max-running-requests": target}))
    return Advice(host=ctx.host, gpu=ctx.gpu.index, session_id=ctx.session_id, pid=ctx.pid, kind="running_at_limit",
                  message=f"running requests at --max-running-requests ({limit_n}) with a growing queue; "
                          f"raise it to {target} ({sug.planner})",
                  evidence=[f"running {running:.0f} of {limit_n}",
                            f"queue {', '.join(f'{v:.0f}' for v in queue[-6:])} (growing)"], suggestion=sug)


def _retract_lines(ctx: ServerContext) -> list[str]:
    """The log tail's retraction lines, when the last one is younger than ``RETRACTED_MAX_AGE_S`` (log clock)."""
    lines = [line for line in ctx.log_tail if "Retract requests" in line or "retract" in line.lower()]
    if not lines or ctx.retract_lag_s is None or ctx.retract_lag_s > RETRACTED_MAX_AGE_S:
        return []
    return lines


def kv_cache_full(ctx: ServerContext, chk: Checker) -> Advice | None:
    usage = fresh(ctx, "token_usage")
    retract = _retract_lines(ctx)
    counts = series(ctx, "retracted_total")
    risen = len(counts) >= 2 and counts[-1] > counts[0]  # the counter grew within the window: retracted lately
    if usage is None or usage <= KV_FULL_USAGE or not (retract or risen):
        return None
    evidence = [f"KV-cache usage {usage:.0%} > {KV_FULL_USAGE:.0%}"]
    evidence += [f"log: {retract[-1].strip()[:160]}"] if retract else \
        [f"{counts[-1] - counts[0]:.0f} request(s) retracted in the last readings"]
    mem = ctx.flags.get("mem-fraction-static")
    running = ctx.flags.get("max-running-requests")
    if running:
        new_n = max(1, int(int(running) * 0.75))
        argv = _set_flag(list(ctx.flags_argv), "--max-running-requests", str(new_n))
        sug = chk.check(ctx, argv, f"--max-running-requests {running} -> {new_n}",
                        dict(ctx.flags, **{"max-running-requests": new_n}))
    elif mem:
        new_m = round(min(0.95, float(mem) + 0.03), 2)
        argv = _set_flag(list(ctx.flags_argv), "--mem-fraction-static", f"{new_m:.2f}")
        sug = chk.check(ctx, argv, f"--mem-fraction-static {mem} -> {new_m:.2f}",
                        dict(ctx.flags, **{"mem-fraction-static": new_m}))
    else:
        sug = None
    return Advice(host=ctx.host, gpu=ctx.gpu.index, session_id=ctx.session_id, pid=ctx.pid, kind="kv_cache_full",
                  message="KV cache full and requests retracted: lower --max-running-requests or raise "
                          "--mem-fraction-static", evidence=evidence, suggestion=sug)


def power_throttled(ctx: ServerContext, chk: Checker) -> Advice | None:
    g = ctx.gpu
    if not gpu_fresh(ctx) or not g.power_w or not g.power_limit_w or not ctx.throttle_reasons:
        return None
    if g.power_w < POWER_AT_LIMIT_FRACTION * g.power_limit_w:
        return None
    return Advice(host=ctx.host, gpu=g.index, session_id=ctx.session_id, pid=ctx.pid, kind="power_throttled",
                  message="power at the limit with clocks throttled: expect lower throughput",
                  evidence=[f"power {g.power_w:.0f} W of {g.power_limit_w:.0f} W",
                            "clock event reasons: " + ", ".join(ctx.throttle_reasons)])


SERVER_RULES: tuple[tuple[str, Callable[[ServerContext, Checker], Advice | None]], ...] = (
    ("gpu_underused", underused_without_speculation),
    ("speculation_costly", speculation_costs_more),
    ("running_at_limit", running_at_limit),
    ("kv_cache_full", kv_cache_full),
    ("power_throttled", power_throttled),
)
"""The rule table: kind -> rule. Order is the order advice is shown in."""


def orphans_holding_memory(host: HostContext) -> list[Advice]:
    """GPU memory held by processes of no live session: each proven orphan's memory, per GPU, with the
    orphan hunter's evidence (the process is alive, holds that memory per the GPU source, and its session
    ended or whoever started it is dead)."""
    return [Advice(host=host.host, gpu=gpu, pid=o.pid, kind="orphan_memory",
                   message=f"pid {o.pid} holds {mib} MiB of GPU memory but belongs to no live session",
                   evidence=[f"GPU {gpu}: {mib} MiB held by pid {o.pid} ({host.gpu_source})", *o.evidence])
            for o in host.orphans for gpu, mib in sorted(o.gpu_mem_mib.items()) if mib > 0]


def advise(servers: Sequence[ServerContext], host: HostContext | None = None, *,
           validate: Validator | None = None) -> list[Advice]:
    """Every piece of advice for these servers (and host-wide facts), in rule-table order per server."""
    chk = Checker(validate=validate)
    out = [a for ctx in servers for _, rule in SERVER_RULES if (a := rule(ctx, chk)) is not None]
    if host is not None:
        out += orphans_holding_memory(host)
    return out
