"""A server's flags edited as ``relaunch --set/--unset`` edits them, and its secret values taken back from the live
launcher: one definition for ``relaunch``, ``group relaunch``, ``deploy roll`` and the TUI's roll of a deployment."""

from __future__ import annotations

from console.core.redact import redact_argv
from console.errors import UserError
from console.host.hostsecrets import MASK
from console.model import HostSnapshot, SessionInfo


def edit_flags(argv: list[str], sets: list[str], unsets: list[str]) -> list[str]:
    """Apply --set/--unset edits to an argv: replace a flag's value in place, or append it."""
    out = list(argv)

    def remove(name: str) -> int | None:
        for i, a in enumerate(out):
            if a == name or a.startswith(name + "="):
                takes = a == name and i + 1 < len(out) and not out[i + 1].startswith("--")
                del out[i:i + (2 if takes else 1)]
                return i
        return None

    for name in unsets:
        if not name.startswith("--"):
            raise UserError(f"--unset {name!r}: expected a flag like --max-running-requests")
        while remove(name) is not None:
            pass
    for item in sets:
        name, sep, value = item.partition("=")
        if not name.startswith("--"):
            raise UserError(f"--set {item!r}: expected --flag=value or --flag")
        at = remove(name)
        new = [name, value] if sep else [name]
        out[at if at is not None else len(out):at if at is not None else len(out)] = new
    return out


def unmask_from_live(s: SessionInfo, snap: HostSnapshot) -> list[str]:
    """The session's argv with the secret values spec.json holds masked (``***``) taken back from its live
    launcher's own argv (same length, same flags), when it still runs; else as stored."""
    argv = list(s.spec.argv) if s.spec else []
    if MASK not in argv or s.record is None:
        return argv
    live = next((p.argv for p in snap.servers if p.pid == s.record.pid and p.start_ticks == s.record.start_ticks), None)
    if not live or len(live) != len(argv) or redact_argv(live)[1:] != redact_argv(argv)[1:]:
        return argv
    return [live[i] if a == MASK else a for i, a in enumerate(argv)]


def masked_secret_flags(argv: list[str]) -> list[str]:
    """The secret flags of ``argv`` whose value is the mask (``--api-key ***`` or ``--api-key=***``)."""
    out = []
    for i, a in enumerate(argv):
        if a.startswith("--") and (a.endswith("=" + MASK) or (i + 1 < len(argv) and argv[i + 1] == MASK)):
            out.append(a.split("=", 1)[0])
    return out
