"""Flags that SGLang renamed between releases: facts, with where each one comes from.

Source for every release number below: the per-release flag names extracted from the PyPI
wheels (``tests/data/sglang/sglang-flag-names-by-version.json``, releases 0.4.10.post2,
0.5.3, 0.5.6, 0.5.9, 0.5.12, 0.5.15, 0.5.18, 0.5.20, 0.5.22, 0.5.23). ``new_since`` is the
first sampled release that has the new name, ``old_removed_in`` the first sampled release
without the old one (the real change may sit in an unsampled release in between). Diffing
names only shows that one name went and another came; pairing them is judgement, noted per
entry. Entries with ``value`` are replacements by a value of another flag.

A flag that was merely deprecated (still accepted) is not here: its own help says so and
the validator reports it as ``deprecated``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from console.core.flags.models import FlagSchema


class Rename(BaseModel):
    """``old`` became ``new`` (optionally ``new value``)."""

    model_config = ConfigDict(frozen=True)

    old: str
    new: str
    value: str | None = None
    new_since: str
    old_removed_in: str
    note: str = ""

    @property
    def replacement(self) -> str:
        """What to write instead: ``--new`` or ``--new value``."""
        return f"{self.new} {self.value}" if self.value else self.new


RENAMES: list[Rename] = [
    # The incident's flag. Both names in 0.5.15 and 0.5.18, old gone in 0.5.20; same
    # choices (auto|no_buffer|extra_buffer...). Also in docs/sglang-facts.md.
    Rename(old="--mamba-scheduler-strategy", new="--mamba-radix-cache-strategy",
           new_since="0.5.15", old_removed_in="0.5.20"),
    # Split per phase: -decode/-prefill added in 0.5.15, the plain name gone in 0.5.20 (where it
    # becomes an ambiguous prefix of both). The old flag sized the decode graphs; SGLang's own
    # capture-failure hint now says "set --cuda-graph-max-bs-decode to a smaller value".
    Rename(old="--cuda-graph-max-bs", new="--cuda-graph-max-bs-decode",
           new_since="0.5.15", old_removed_in="0.5.20",
           note="split into --cuda-graph-max-bs-decode and --cuda-graph-max-bs-prefill"),
    Rename(old="--cuda-graph-bs", new="--cuda-graph-bs-decode",
           new_since="0.5.15", old_removed_in="0.5.20",
           note="split into --cuda-graph-bs-decode and --cuda-graph-bs-prefill"),
    # NSA attention backends: --nsa-prefill/--nsa-decode (0.5.3) -> --nsa-*-backend (0.5.6)
    # -> --dsa-*-backend (added 0.5.15, nsa names gone 0.5.20). Chains are followed.
    Rename(old="--nsa-prefill", new="--nsa-prefill-backend", new_since="0.5.6", old_removed_in="0.5.6"),
    Rename(old="--nsa-decode", new="--nsa-decode-backend", new_since="0.5.6", old_removed_in="0.5.6"),
    Rename(old="--nsa-prefill-backend", new="--dsa-prefill-backend", new_since="0.5.15", old_removed_in="0.5.20"),
    Rename(old="--nsa-decode-backend", new="--dsa-decode-backend", new_since="0.5.15", old_removed_in="0.5.20"),
    # Typo fix (OLTP -> OTLP, OpenTelemetry's protocol): swapped in 0.5.6.
    Rename(old="--oltp-traces-endpoint", new="--otlp-traces-endpoint", new_since="0.5.6", old_removed_in="0.5.6"),
    # Pipeline-parallel micro batches: swapped in 0.5.6.
    Rename(old="--max-micro-batch-size", new="--pp-max-micro-batch-size", new_since="0.5.6", old_removed_in="0.5.6"),
    # Swapped in 0.5.18 (retries -> attempts).
    Rename(old="--optimistic-prefill-retries", new="--optimistic-prefill-attempts",
           new_since="0.5.18", old_removed_in="0.5.18"),
    # DeepEP-specific name generalised: swapped in 0.5.18.
    Rename(old="--enable-deepep-waterfill", new="--enable-waterfill", new_since="0.5.18", old_removed_in="0.5.18"),
    # Both added in 0.5.18, gdn name gone in 0.5.20 (GDN generalised to linear attention).
    Rename(old="--enable-gdn-replayssm-spec", new="--enable-linear-replayssm-spec",
           new_since="0.5.18", old_removed_in="0.5.20"),
    # Both added in 0.5.12, DFlash-specific name gone in 0.5.20.
    Rename(old="--speculative-dflash-draft-window-size", new="--speculative-draft-window-size",
           new_since="0.5.12", old_removed_in="0.5.20"),
    # Same help text in both releases ("Whether to output as a sequence of disjoint segments"): both names in
    # 0.5.12-0.5.18, the old one gone in 0.5.20.
    Rename(old="--stream-output", new="--incremental-streaming-output", new_since="0.5.12", old_removed_in="0.5.20"),
    # The piecewise (prefill-phase) CUDA graph became the prefill phase of the per-phase graph settings (0.5.15:
    # --cuda-graph-backend-prefill {full,breakable,disabled}, --disable-prefill-cuda-graph); the piecewise names
    # are gone in 0.5.20. Pairing by meaning: 0.5.23's cuda_graph_hook folds the convenience flags into
    # cuda_graph_config[prefill]; "breakable" is the split-at-attention graph the piecewise one was.
    Rename(old="--disable-piecewise-cuda-graph", new="--disable-prefill-cuda-graph",
           new_since="0.5.15", old_removed_in="0.5.20"),
    Rename(old="--enforce-piecewise-cuda-graph", new="--cuda-graph-backend-prefill", value="breakable",
           new_since="0.5.15", old_removed_in="0.5.20"),
    Rename(old="--enable-breakable-cuda-graph", new="--cuda-graph-backend-prefill", value="breakable",
           new_since="0.5.15", old_removed_in="0.5.20",
           note="per phase now: --cuda-graph-backend-decode breakable for the decode graph"),
    Rename(old="--piecewise-cuda-graph-max-tokens", new="--cuda-graph-max-bs-prefill",
           new_since="0.5.15", old_removed_in="0.5.20",
           note="the prefill graph's capture sizes; --cuda-graph-max-seq-len-prefill (0.5.22) bounds replay length"),
    Rename(old="--piecewise-cuda-graph-tokens", new="--cuda-graph-bs-prefill",
           new_since="0.5.15", old_removed_in="0.5.20"),
    # MoE kernel switches folded into --moe-runner-backend / --moe-a2a-backend (added 0.5.3 /
    # present since 0.4.10); the --enable-*-moe switches are gone in 0.5.6. The values are the
    # matching choices of those flags in the 0.5.23 help.
    Rename(old="--enable-flashinfer-cutlass-moe", new="--moe-runner-backend", value="flashinfer_cutlass",
           new_since="0.5.3", old_removed_in="0.5.6"),
    Rename(old="--enable-flashinfer-trtllm-moe", new="--moe-runner-backend", value="flashinfer_trtllm",
           new_since="0.5.3", old_removed_in="0.5.6"),
    Rename(old="--enable-triton-kernel-moe", new="--moe-runner-backend", value="triton_kernel",
           new_since="0.5.3", old_removed_in="0.5.6"),
    Rename(old="--enable-deepep-moe", new="--moe-a2a-backend", value="deepep",
           new_since="0.4.10.post2", old_removed_in="0.5.6"),
]

_BY_OLD: dict[str, Rename] = {r.old: r for r in RENAMES}


def find_rename(option: str, schema: FlagSchema | None = None) -> Rename | None:
    """The rename of ``option``, following chains (nsa-prefill -> nsa-prefill-backend -> dsa-...).

    With a ``schema``, the chain is followed until a name that schema knows, and None is
    returned when no name in the chain is known to it (the table is about another server);
    without one, to the newest name. The result keeps ``old`` = ``option`` and the first
    step's releases.
    """
    first = _BY_OLD.get(option)
    if first is None:
        return None
    step, hops = first, 0
    while schema is None or step.new not in schema:
        nxt = _BY_OLD.get(step.new)
        hops += 1
        if nxt is None or hops > len(RENAMES):
            if schema is None:
                break
            return None
        step = nxt
    if step is first:
        return first
    return first.model_copy(update={"new": step.new, "value": step.value})
