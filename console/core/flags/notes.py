"""Pre-launch notes on a flag set: SGLang's speculative-decoding rules and security warnings.

These are things argparse accepts but SGLang changes or rejects after parsing (the
speculative rules, as of 0.5.23 — see docs/sglang-facts.md), and things an operator
should not do (an unauthenticated API on every interface, secrets in argv). Pure functions
over argv and a :class:`~console.core.flags.models.FlagSchema`.
"""

from __future__ import annotations

import re

from console.core.flags.check import SECRET_FLAGS, Value, resolve
from console.core.flags.models import FlagSchema, Problem
from console.model import SPECULATIVE_ALGORITHMS

SPEC_NUMS = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")
MAMBA_TRACK_INTERVAL_DEFAULT = 256
"""SGLang 0.5.23's default --mamba-track-interval (used when the help shows none)."""
AUTO_DRAFT_TOKENS = 4
"""What SGLang usually picks for draft tokens when no speculative numbers are given (3, 1, 4)."""

_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}")
_ALL_INTERFACES = {"0.0.0.0", "::", "[::]", "*"}


def _int(v: Value | None) -> int | None:
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            return None
    return None


def speculative_notes(argv: list[str], schema: FlagSchema) -> list[Problem]:
    """SGLang's speculative-decoding rules applied before launch.

    - speculation without ``--max-running-requests``: SGLang resets it to 48 (warning);
    - ``--speculative-eagle-topk`` or ``--speculative-num-draft-tokens`` without
      ``--speculative-num-steps``: SGLang fails with an AssertionError (error);
    - topk == 1 forces draft tokens = steps + 1 (warning when given otherwise);
    - Mamba ``extra_buffer`` needs ``--mamba-track-interval`` >= draft tokens (error);
    - speculative numbers without ``--speculative-algorithm`` do nothing (warning).
    """
    r = resolve(argv, schema)
    algo = r.get("--speculative-algorithm")
    spec_on = algo is not None and not (isinstance(algo, str) and algo.strip().lower() in ("", "none"))
    given = [n for n in SPEC_NUMS if n in r]
    out: list[Problem] = []
    if isinstance(algo, str) and spec_on and algo.upper() not in SPECULATIVE_ALGORITHMS:
        out.append(Problem(
            kind="speculative", flag="--speculative-algorithm", candidates=list(SPECULATIVE_ALGORITHMS),
            message=f"SGLang stops at start with 'ValueError: Unknown speculative algorithm name: {algo}' "
                    f"(built-in: {', '.join(SPECULATIVE_ALGORITHMS)}; a plugin may register others)"))
    if not spec_on:
        if given:
            out.append(Problem(
                kind="speculative", flag=given[0], severity="warning",
                message=f"{', '.join(given)} without --speculative-algorithm: speculative decoding stays off"))
        return out
    if "--max-running-requests" not in r:
        out.append(Problem(
            kind="speculative", flag="--max-running-requests", severity="warning",
            suggestion="--max-running-requests",
            message="speculative decoding without --max-running-requests: max running requests will be reset "
                    "to 48 (SGLang: 'Max running requests is reset to 48 for speculative decoding'); "
                    "set --max-running-requests to choose it yourself"))
    steps = _int(r.get("--speculative-num-steps"))
    topk = _int(r.get("--speculative-eagle-topk"))
    draft = _int(r.get("--speculative-num-draft-tokens"))
    steps_given = "--speculative-num-steps" in r
    if not steps_given and ("--speculative-eagle-topk" in r or "--speculative-num-draft-tokens" in r):
        which = [n for n in SPEC_NUMS[1:] if n in r]
        out.append(Problem(
            kind="speculative", flag=which[0], suggestion="--speculative-num-steps",
            message=f"{' and '.join(which)} without --speculative-num-steps: SGLang stops with an AssertionError; "
                    "give --speculative-num-steps too, or none of the three to let SGLang choose (usually 3, 1, 4)"))
    effective = draft
    if topk == 1 and steps is not None:
        effective = steps + 1
        if draft is not None and draft != steps + 1:
            out.append(Problem(
                kind="speculative", flag="--speculative-num-draft-tokens", severity="warning",
                suggestion=f"--speculative-num-draft-tokens {steps + 1}",
                message=f"with --speculative-eagle-topk 1, SGLang sets draft tokens to steps + 1 = {steps + 1} "
                        f"(you gave {draft}): 'speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
                        "when speculative_eagle_topk == 1'"))
    elif not given:
        effective = AUTO_DRAFT_TOKENS
    strategy = r.get("--mamba-radix-cache-strategy", r.get("--mamba-scheduler-strategy"))
    if strategy == "extra_buffer" and effective is not None:
        interval = _int(r.get("--mamba-track-interval"))
        if interval is None:
            f = schema.get("--mamba-track-interval")
            interval = _int(f.default) if f is not None and f.default is not None else None
            interval = MAMBA_TRACK_INTERVAL_DEFAULT if interval is None else interval
        if interval < effective:
            out.append(Problem(
                kind="speculative", flag="--mamba-track-interval", suggestion=f"--mamba-track-interval {effective}",
                message=f"mamba extra_buffer with speculative decoding needs --mamba-track-interval >= draft tokens "
                        f"({interval} < {effective})"))
    return out


def security_notes(argv: list[str], schema: FlagSchema) -> list[Problem]:
    """Warnings about exposure and secrets; messages never contain the secret itself.

    - ``--host 0.0.0.0`` (or ``::``): the HTTP API listens on every interface, unauthenticated
      unless ``--api-key`` is set;
    - ``--api-key``/``--admin-api-key``/``--ssl-keyfile-password`` with a value, or an
      ``hf_...`` token anywhere in argv: visible in ``ps`` and logs, pass it as an env value.
    """
    r = resolve(argv, schema)
    out: list[Problem] = []
    host = r.get("--host")
    if isinstance(host, str) and host.strip() in _ALL_INTERFACES:
        auth = "" if "--api-key" in r else " with no authentication (no API key)"
        out.append(Problem(
            kind="security", flag="--host", severity="warning", suggestion="--host 127.0.0.1",
            message=f"--host {host.strip()} puts the server's HTTP API on every network interface{auth}; anyone who "
                    "can reach the port can use it. Bind 127.0.0.1 and reach it through SSH"))
    for name in SECRET_FLAGS:
        if isinstance(r.get(name), str):
            out.append(Problem(
                kind="security", flag=name, severity="warning",
                message=f"{name} puts a secret on the command line (visible in ps, /proc/PID/cmdline and logs); "
                        "pass it as an env value instead"))
    if any(_HF_TOKEN.search(a) for a in map(str, argv)):
        out.append(Problem(
            kind="security", flag=None, severity="warning",
            message="a Hugging Face token (hf_***) is on the command line (visible in ps and logs); "
                    "pass it as an env value instead (HF_TOKEN)"))
    return out
