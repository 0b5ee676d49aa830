"""A relaunch: the launch's preflight checks first (nothing is stopped when they refuse), a confirmed kill,
then the launch with those checks (the memory plan is made once). Its kill steps are shown first, named
``kill: <step>`` and of the ``kill`` phase."""

from __future__ import annotations

from typing import Callable

from console.config import Config
from console.link.link import HostLink
from console.model import KillTarget, LaunchRequest, LaunchSpec, OperationResult, Step
from console.ops.lifecycle.kill import kill
from console.ops.lifecycle.launch import host_env, launch
from console.ops.lifecycle.preflight import check_request
from console.ops.lifecycle.steps import OnSteps


def relaunch_env(cfg: Config, host: str, spec: LaunchSpec | None,
                 given: dict[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The environment a relaunch of the session of ``spec`` sends (the TUI's and the CLI's one path), with a
    launch's precedence, lowest first: the host's ``env_names`` from the console's environment, the session's
    profile's ``env`` (while the config has that profile), then ``given`` (``--env``); and the names the session
    was launched with that none of these supplies, nor the host's ``launch_env`` (the host adds it to every
    launch itself): the secrets only the operator can give again (values are never stored)."""
    hc = cfg.host(host)
    env = host_env(hc.env_names)
    if spec is not None and spec.profile and spec.profile in cfg.profiles:
        env.update(cfg.profiles[spec.profile].env)
    env.update(given or {})
    missing = [n for n in (spec.env_names if spec else []) if n not in env and n not in hc.launch_env]
    return env, missing


async def relaunch(link: HostLink, target: KillTarget, req: LaunchRequest, on_steps: OnSteps | None = None, *,
                   wait: bool = True, timeout: float = 900.0, grace: float = 20.0,
                   session_id: str | None = None,
                   on_launch: Callable[[], None] | None = None) -> OperationResult:
    """Confirmed kill, then launch. Refuses to start while anything of the old target remains."""
    collected: list[Step] = []

    def kill_steps(steps: list[Step]) -> None:
        collected[:] = [s.model_copy(update={"name": f"kill: {s.name}"}) for s in steps]
        if on_steps:
            on_steps(list(collected))

    checked = await check_request(link, req, None, op="relaunch")  # before anything is killed: every reason at once
    if checked.refusals:
        reason = "; ".join(checked.refusals)
        return OperationResult(op="relaunch", host=link.name, ok=False, session_id=target.session_id,
                               steps=[Step(name="preflight", state="failed", evidence=f"{reason}; nothing was stopped",
                                           phase="launch")],
                               error=f"{reason}; nothing was stopped", refused=reason, refusals=checked.refusals,
                               line=checked.line, hint="; ".join(checked.hints) or None)
    k = await kill(link, target, kill_steps, grace=grace)
    if not k.ok:
        return OperationResult(op="relaunch", host=link.name, ok=False, session_id=target.session_id,
                               state=k.state, steps=collected, left=k.left,
                               error="relaunch refused: the old server is not confirmed gone: " + (k.error or ""))
    prefix = list(collected)

    def launch_steps(steps: list[Step]) -> None:
        if on_steps:
            on_steps(prefix + steps)

    if on_launch is not None:  # the old server is confirmed gone: the new launch starts now
        on_launch()
    r = await launch(link, req.model_copy(update={"replaces": target.session_id}), launch_steps, wait=wait,
                     timeout=timeout, session_id=session_id, checked=checked)
    return r.model_copy(update={"op": "relaunch", "steps": prefix + r.steps})
