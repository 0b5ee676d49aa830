"""The one preflight of a launch and of a relaunch: what is checked before anything is started or stopped.

Checked once per operation: the flags against the host's own server (:func:`check_launch_flags`), the memory
plan (:func:`memory_verdict`, from the model's config.json read on the host), and, when those refuse, the
host's own launch checks run without launching (``check_only``), so every failure is listed at once. A relaunch
runs the same checks before its kill and hands them to its launch (:func:`check_request`): the plan is made
once. The orphans on the target GPUs (:func:`orphan_note`) come from a snapshot the agent takes for the launch
(:func:`preflight_snapshot`): after a relaunch's kill, what the kill left.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from console.core.flags.models import FlagSchema
from console.core.sessions import flag_value, has_flag
from console.link.client import HostClient
from console.link.errors import LinkDown, RequestError
from console.link.link import HostLink
from console.model import HostSnapshot, LaunchRequest, LaunchSpec, OperationResult, PreflightCheck
from console.ops.flag_preflight import check_launch_flags
from console.ops.lifecycle.steps import Stepper, fresh_snapshot


@dataclass(frozen=True)
class Checked:
    """What the console's own checks of a launch request found (before the host's checks)."""

    refusals: list[str] = field(default_factory=list)
    """One line per check that refuses the launch (nothing may start)."""
    hints: list[str] = field(default_factory=list)
    line: str | None = None
    """The server's own error line for rejected flags."""
    flags_note: str = ""
    """What the flags check says of flags it accepts (where they were checked, or why they were not)."""
    verdict: str | None = None
    """The memory planner's verdict (None: not planned)."""
    plan_text: str = ""
    forced: bool = False
    """The plan says it does not fit and the request forces the launch anyway."""
    schema: FlagSchema | None = None
    """The host's own server flags the request was checked against (None: not checked, or none could be had)."""


def launched_flags(req: LaunchRequest) -> list[str]:
    """The server flags a launch of ``req`` runs with: its flags, and ``--port`` when it names a port they lack."""
    if req.port is not None and not has_flag(req.flags, "--port"):
        return [*req.flags, "--port", str(req.port)]
    return list(req.flags)


async def check_request(link: HostLink, req: LaunchRequest, snap: HostSnapshot | None, op: str = "launch") -> Checked:
    """The flags check (unless ``req.check_flags`` is off) and the memory plan of ``req`` (``op`` names the
    operation a forced retry would be: ``launch`` or ``relaunch``)."""
    refusals: list[str] = []
    hints: list[str] = []
    line, flags_note, schema = None, "", None
    if req.check_flags:  # the host's own server's flags, before anything is spawned
        fv = await check_launch_flags(link, req.command, launched_flags(req))  # as launched: --port included
        if not fv.ok:
            refusals.append(fv.error or "the server rejects these flags")
            line = fv.error
            fixes = "; ".join(f"{p.message}" + (f" (fix: {p.suggestion})" if p.suggestion else "")
                              for p in fv.problems[:5])
            hints += [fixes] if fixes else []
        flags_note, schema = (fv.note if fv.ok else ""), fv.flag_schema
    verdict, plan_text = await memory_verdict(link, req, snap)
    if verdict == "does_not_fit" and not req.force:
        refusals.append(f"memory plan: does not fit — {plan_text} ({op} with force to try anyway)")
    return Checked(refusals=refusals, hints=hints, line=line, flags_note=flags_note, verdict=verdict,
                   plan_text=plan_text, forced=verdict == "does_not_fit" and req.force, schema=schema)


async def memory_verdict(link: HostLink, req: LaunchRequest, snap: HostSnapshot | None = None, *,
                         count_use: bool = False) -> tuple[str | None, str]:
    """The planner's verdict for this launch, from the model's config.json read on the host (GPU sizes from
    ``snap`` when given, else the link's latest sample). ``count_use``: plan against the memory free now on the
    target GPU with the least of it (:func:`gpu_use`), not its total.

    Returns (None, why) when it cannot be planned (no model path, unreadable config, no GPU info).
    """
    from console.core.model_config import parse_model_config
    from console.core.planner import parse_server_flags, plan

    model = flag_value(req.flags, "--model-path", "--model")
    if not model:
        return None, "no --model-path"
    snap = snap or link.snapshot()
    if not snap.gpus and (link.sample is None or snap.gpu_source != "none"):
        try:
            snap = await fresh_snapshot(link)
        except (RequestError, LinkDown, asyncio.TimeoutError):
            pass
    gpus = {g.index: g for g in snap.gpus}
    target = [gpus[i] for i in req.gpus if i in gpus and gpus[i].mem_total_mib]
    if not target:
        return None, "no GPU memory information"
    try:
        data = await HostClient.of(link).read_file(model.rstrip("/") + "/config.json", 4 << 20, audit=True)
        shape = parse_model_config(json.loads(data))
        use = min(gpu_use(snap, req.gpus), key=lambda u: u.free_mib) if count_use else None
        p = plan(shape, parse_server_flags(req.flags), min(g.mem_total_mib or 0 for g in target) << 20,
                 n_gpus=len(target), in_use_bytes=(use.in_use_mib << 20) if use else 0)
    except Exception as e:  # the host's answer, a lost link, a config that is not one: not planned, and why
        return None, f"not planned: {str(e)[:200]}"
    text = "; ".join(p.reasons[:2] + p.advice[:2]) or p.verdict.replace("_", " ")
    if use is not None and use.in_use_mib:
        text += f" (counting the {use.in_use_mib:,} MiB in use on GPU {use.index} now)"
    return p.verdict, text


@dataclass(frozen=True)
class GpuUse:
    """What holds one target GPU's memory now, as a launch's preflight counts it."""

    index: int
    total_mib: int
    free_mib: int
    """:attr:`console.model.GpuSample.mem_free_mib`: the one definition of free (the host's "GPUs free" check's)."""
    holders: list[str] = field(default_factory=list)
    """Who holds it: each orphan as :func:`orphan_note` names it, each other process the driver lists, with its MiB."""
    orphan_pids: list[int] = field(default_factory=list)
    """The proven orphans among them."""

    @property
    def in_use_mib(self) -> int:
        return max(0, self.total_mib - self.free_mib)

    def line(self) -> str:
        """``GPU 1 now: 40,960 of 97,887 MiB in use — orphan pid 4242 (…) holding …``."""
        head = f"GPU {self.index} now: {self.in_use_mib:,} of {self.total_mib:,} MiB in use"
        return head + (" — " + "; ".join(self.holders) if self.holders else " (no process holds it)")


def gpu_use(snap: HostSnapshot | None, gpus: list[int]) -> list[GpuUse]:
    """The memory in use on each of ``gpus`` in ``snap`` and who holds it: the orphans there (the preflight's
    :func:`console.core.orphans.find_orphans`), the sessions' and other processes the driver lists. GPUs without
    memory figures are left out."""
    from console.core.orphans import describe, find_orphans, orphans_on

    if snap is None:
        return []
    orphans = find_orphans(snap)
    by_pid = {s.pid: s for s in snap.servers}
    out: list[GpuUse] = []
    for g in snap.gpus:
        free = g.mem_free_mib
        if g.index not in gpus or free is None or not g.mem_total_mib:
            continue
        here = orphans_on(orphans, [g.index])
        named = {o.pid for o in here}
        holders = [describe(o) for o in here]
        for pr in g.procs:
            if pr.pid in named:
                continue
            srv = by_pid.get(pr.pid)
            who = f"session {srv.session_id}" if srv is not None and srv.session_id else "a process no session owns"
            title = f" ({' '.join(srv.argv)[:40]})" if srv is not None and srv.argv else ""
            used = f": {pr.used_mib:,} MiB" if pr.used_mib is not None else ""
            holders.append(f"{who}, pid {pr.pid}{title}{used}")
        out.append(GpuUse(index=g.index, total_mib=g.mem_total_mib, free_mib=free, holders=holders,
                          orphan_pids=sorted(named)))
    return out


async def gpu_check(link: HostLink, spec: LaunchSpec, env: dict[str, str]) -> list[tuple[str, str]]:
    """The launch's preflight of ``spec``'s GPUs and port as it would run now, nothing launched, for the flag
    form's Check: the host's own checks (:func:`host_refusals`: a session or process holding the GPUs or the
    port, free memory), each one that fails an ``error`` (the launch would be refused); then what each GPU holds
    now (:func:`gpu_use`, on a fresh snapshot: a warning when anything does, the orphans named as
    :func:`orphan_note` names them)."""
    snap = await preflight_snapshot(link)
    out = [("error", f"the host's preflight: {r}") for r in await host_refusals(link, spec, env, {})]
    for u in gpu_use(snap, spec.gpus):
        hint = " — kill with o in the console or 'mtpconsole orphans --kill PID'" if u.orphan_pids else ""
        out.append(("warning" if u.holders else "note", u.line() + hint))
    return out


async def preflight_snapshot(link: HostLink) -> HostSnapshot | None:
    """A snapshot the agent takes now, for a launch's preflight: never the link's last sample, which may predate
    what came just before (a relaunch's kill). None when the host does not answer (then nothing is said of it)."""
    try:
        return await fresh_snapshot(link)
    except (RequestError, LinkDown, asyncio.TimeoutError):
        return None


async def host_refusals(link: HostLink, spec: LaunchSpec, env: dict[str, str], opts: dict[str, Any]) -> list[str]:
    """The host's launch checks that fail, run without launching (``check_only``): one line per failure."""
    try:
        r = await HostClient.of(link).launch(spec, env, {**opts, "check_only": True}, timeout=60, audit=False)
    except RequestError as e:
        return [str(e)]
    except (LinkDown, asyncio.TimeoutError) as e:
        return [f"the host's checks did not run: {e or 'timed out'}"]
    return [f"{c.name}: {c.detail}" for c in r.preflight if c.ok is False]


def passed_evidence(checked: Checked, host_checks: list[PreflightCheck], note: str) -> str:
    """The evidence of a passed preflight: the host's checks, the memory plan, the flags (``note``: orphans)."""
    verdict, plan_text = checked.verdict, checked.plan_text
    head = "⚠ forced: the memory plan says it does not fit; " if checked.forced else ""
    parts = [f"{c.name}: {c.detail}" for c in host_checks]
    words = (verdict or "skipped").replace("_", " ")  # "does not fit", never the planner's does_not_fit
    parts.append(f"memory plan: {words}" + (f" ({plan_text})" if plan_text and plan_text not in (verdict, words) else ""))
    parts += [checked.flags_note] if checked.flags_note else []
    return head + "; ".join(parts) + note


def refused(st: Stepper, res: dict, refusals: list[str], *, line: str | None = None, hint: str | None = None,
            note: str = "") -> OperationResult:
    """A launch refused by its preflight: nothing was started, so no session, no state and no cause. ``note``: the
    orphans on the target GPUs (:func:`orphan_note`), shown with the step and as the hint."""
    reason = "; ".join(refusals)
    st.finish("preflight", "failed", f"{reason}{note} — nothing was started")
    hint = "; ".join(x for x in (hint, note.removeprefix("; ")) if x) or None
    return OperationResult(**{**res, "session_id": None}, ok=False, steps=st.steps, error=reason + note,
                           refused=reason, refusals=refusals, line=line, hint=hint)


def orphan_note(snap: HostSnapshot | None, gpus: list[int]) -> str:
    """``; orphans on the target GPUs: …`` naming each orphan that holds memory there in ``snap`` (or "")."""
    from console.core.orphans import describe, find_orphans, orphans_on

    if snap is None:
        return ""
    found = orphans_on(find_orphans(snap), gpus)
    if not found:
        return ""
    return ("; orphans on the target GPUs: " + "; ".join(describe(o) for o in found[:4])
            + (f" (+{len(found) - 4} more)" if len(found) > 4 else "")
            + " — kill with 'mtpconsole orphans --kill PID' or o in the console")


def with_plan(r: OperationResult, checked: Checked) -> OperationResult:
    """A gpu_oom failure's hint leads with the memory planner's fix when the planner had warned."""
    if r.cause != "gpu_oom" or checked.verdict not in ("does_not_fit", "tight") or not checked.plan_text:
        return r
    return r.model_copy(update={"hint": f"memory planner: {checked.plan_text}" + (f"; {r.hint}" if r.hint else "")})
