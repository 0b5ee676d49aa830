"""SSH transport: host specs, the SSH config, verified host keys, one connection per host.

A host spec is ``local``, an SSH config alias, or ``user@host[:port]`` (``[v6addr]:port``).
Host keys are always verified against known_hosts (never ``known_hosts=None``); an unknown
or changed key raises :class:`HostKeyError` with the SHA256 fingerprint and the command
that trusts it.
"""

from __future__ import annotations

import getpass
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from console.errors import HostError, HostKeyError, UserError

_SPEC = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^:@\s\[\]]+)(?::(?P<port>\d{1,5}))?$")


_OPENSSH_REFUSES = set("'`\"$\\;&<>|(){},")
"""Characters OpenSSH refuses in a host or user name given on its command line ("hostname contains
invalid characters"), besides whitespace and control characters: a ProxyCommand's ``%h`` is expanded
into a shell line, so such a name would reach that shell."""
_PATTERN_CHARS = set("*?!")
"""SSH config pattern characters: a host is one name, never a pattern."""


def invalid_host_chars(text: str) -> str:
    """The characters of ``text`` a host name may not hold (shown escaped), or ``""`` when it is fine.

    Refused: what OpenSSH refuses (see ``_OPENSSH_REFUSES``), whitespace, control characters (an escape
    sequence in a name would drive the operator's terminal), other unprintable characters, and patterns.
    """
    bad = []
    for c in text:
        if (c in _OPENSSH_REFUSES or c in _PATTERN_CHARS or c.isspace() or not c.isprintable()) and c not in bad:
            bad.append(c)
    return " ".join(repr(c) for c in bad)


class HostSpec(BaseModel):
    """A parsed ``--host`` value."""

    model_config = ConfigDict(frozen=True)

    name: str
    local: bool = False
    host: str | None = None
    user: str | None = None
    port: int | None = None


def parse_host_spec(text: str) -> HostSpec:
    """Parse ``local``, an alias, or ``user@host[:port]``; reject anything else clearly."""
    t = text.strip()
    if t == "local":
        return HostSpec(name="local", local=True)
    if not t or t.startswith("-"):
        raise UserError(f"invalid host {text!r}: expected an SSH alias, user@host[:port] or 'local'")
    bad = invalid_host_chars(t)
    if bad:
        raise UserError(f"invalid host {text!r}: hostname contains invalid characters ({bad})")
    m = _SPEC.match(t)
    if not m:
        raise UserError(f"invalid host {text!r}: expected an SSH alias, user@host[:port] or 'local'")
    port = int(m["port"]) if m["port"] else None
    if port is not None and not 1 <= port <= 65535:
        raise UserError(f"invalid host {text!r}: port {port} out of range")
    return HostSpec(name=t, host=m["host"].strip("[]"), user=m["user"], port=port)


def default_ssh_config() -> str | None:
    p = Path("~/.ssh/config").expanduser()
    return str(p) if p.exists() else None


_RESOLVED: dict[tuple, dict] = {}
"""resolve()'s answers by (spec, config file, the file's mtime/size/inode, local user): a connection parsed the SSH
config twice (here on the event loop, then asyncssh in its executor), and every reconnect again; now this side parses
a file once per host until it changes."""
_RESOLVED_MAX = 4096


def resolve(spec: HostSpec, ssh_config: str | None) -> dict:
    """What the SSH config says about this host: hostname, port, user, known_hosts files, keepalive.

    Cached per host while the config file's mtime, size and inode stay the same (see ``_RESOLVED``)."""
    try:
        st = os.stat(ssh_config) if ssh_config else None
    except OSError:
        raise UserError(f"SSH config {ssh_config} does not exist") from None
    key = (spec, ssh_config, st and (st.st_mtime_ns, st.st_size, st.st_ino), getpass.getuser())
    hit = _RESOLVED.get(key)
    if hit is None:
        if len(_RESOLVED) >= _RESOLVED_MAX:
            _RESOLVED.clear()
        hit = _RESOLVED[key] = _resolve(spec, ssh_config)
    return dict(hit, known_hosts=list(hit["known_hosts"]))


def _resolve(spec: HostSpec, ssh_config: str | None) -> dict:
    from asyncssh.config import SSHClientConfig

    cfg_paths = [ssh_config] if ssh_config else []
    try:
        cfg: Any = SSHClientConfig.load(None, cfg_paths, False, False, False, getpass.getuser(),
                                   spec.user or (), spec.host, spec.port or ())
    except Exception as e:  # asyncssh raises ConfigParseError with the line
        raise UserError(f"SSH config {ssh_config}: {e}") from None
    known = cfg.get("UserKnownHostsFile") or ["~/.ssh/known_hosts"]
    if isinstance(known, str):
        known = known.split()
    given = cfg.get("Port")
    port = int(given if given is not None else (spec.port or 22))
    if not 1 <= port <= 65535:
        raise UserError(f"SSH config {ssh_config}: Port {port} for {spec.name} is not a TCP port (1-65535)")
    return {
        "hostname": cfg.get("Hostname") or spec.host,
        "port": port,
        "user": cfg.get("User") or spec.user or getpass.getuser(),
        "known_hosts": [os.path.expanduser(k) for k in known],
        "keepalive_interval": cfg.get("ServerAliveInterval"),
        "keepalive_count_max": cfg.get("ServerAliveCountMax"),
        "connect_timeout": cfg.get("ConnectTimeout"),
        "ciphers_given": cfg.get("Ciphers") is not None,
    }


FAST_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
                "aes256-ctr", "aes192-ctr", "aes128-ctr")
"""The ciphers offered, in this order, when the SSH config names none (``Ciphers``): asyncssh's defaults (the same
set) put chacha20-poly1305 first, which costs the console three cipher set-ups per packet (header, MAC key, body)
where AES-GCM, done in hardware on x86-64 and arm64, costs one: with hundreds of hosts each sending a sample a
second, decryption was about a third of the console's work per sample. Both are AEAD ciphers OpenSSH offers by
default; a config's ``Ciphers`` line is always obeyed instead."""


def describe_os_error(e: BaseException) -> str:
    """A non-empty reason for a connection error (a timeout's str() is empty)."""
    if isinstance(e, TimeoutError):
        return "timed out"
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def known_hosts_name(hostname: str, port: int) -> str:
    return hostname if port == 22 else f"[{hostname}]:{port}"


async def fetch_host_key(spec: HostSpec, ssh_config: str | None, timeout: float = 10.0):
    """The key the server offers (unverified), for fingerprints and trust-host."""
    import asyncio

    import asyncssh

    r = resolve(spec, ssh_config)
    try:
        return await asyncio.wait_for(
            asyncssh.get_server_host_key(r["hostname"], r["port"], config=[ssh_config] if ssh_config else ()),
            timeout)
    except (OSError, asyncio.TimeoutError, asyncssh.Error) as e:
        raise HostError(f"{spec.name}: cannot reach {r['hostname']}:{r['port']}: {describe_os_error(e)}") from None


def known_key_status(key, known_files: list[str], hostname: str, port: int) -> str:
    """'trusted', 'unknown' or 'changed' for the offered key against the known_hosts files."""
    import asyncssh

    name = known_hosts_name(hostname, port)
    offered = key.export_public_key("openssh").split()[:2]
    seen_other = False
    for f in known_files:
        if not os.path.exists(f):
            continue
        try:
            kh = asyncssh.read_known_hosts(f)
        except (OSError, ValueError, asyncssh.Error):
            continue
        trusted, _, revoked, *_ = kh.match(name, "", port)
        for k in trusted:
            if k.export_public_key("openssh").split()[:2] == offered:
                return "trusted"
            if k.algorithm == key.algorithm:
                seen_other = True
        if revoked:
            seen_other = True
    return "changed" if seen_other else "unknown"


async def host_key_error(spec: HostSpec, ssh_config: str | None) -> HostKeyError:
    """Build the operator-facing error for a host key that did not verify."""
    r = resolve(spec, ssh_config)
    try:
        key = await fetch_host_key(spec, ssh_config)
    except HostError as e:
        return HostKeyError(f"{spec.name}: host key not verified, and the key could not be fetched: {e}")
    fp = key.get_fingerprint("sha256")
    status = known_key_status(key, r["known_hosts"], r["hostname"], r["port"])
    if status == "changed":
        return HostKeyError(
            f"{spec.name}: HOST KEY CHANGED for {known_hosts_name(r['hostname'], r['port'])}: the server offers "
            f"{key.get_algorithm()} {fp}, which differs from the key in known_hosts. This may be a "
            f"man-in-the-middle. If the change is expected, remove the old entry "
            f"(ssh-keygen -R '{known_hosts_name(r['hostname'], r['port'])}') and run: mtpconsole trust-host {spec.name}",
            exit_code=1)
    return HostKeyError(
        f"{spec.name}: unknown host key for {known_hosts_name(r['hostname'], r['port'])}: "
        f"{key.get_algorithm()} {fp}. Verify the fingerprint, then run: mtpconsole trust-host {spec.name}",
        exit_code=1)


async def connect(spec: HostSpec, ssh_config: str | None, *, connect_timeout: float = 10.0,
                  keepalive_interval: float = 5.0, keepalive_count_max: int = 3):
    """Open one verified asyncssh connection honouring the SSH config."""
    import asyncssh

    r = resolve(spec, ssh_config)
    kw: dict[str, Any] = dict(
        config=[ssh_config] if ssh_config else (),
        # only files that exist (a missing one must mean "nothing trusted", not a crash)
        known_hosts=[k for k in r["known_hosts"] if os.path.exists(k)] or ([], [], []),
        connect_timeout=float(r["connect_timeout"] or connect_timeout),
        keepalive_interval=float(r["keepalive_interval"] or keepalive_interval),
        keepalive_count_max=int(r["keepalive_count_max"] or keepalive_count_max),
    )
    if not r["ciphers_given"]:
        kw["encryption_algs"] = list(FAST_CIPHERS)
    if spec.user:
        kw["username"] = spec.user
    if spec.port:
        kw["port"] = spec.port
    try:
        return await asyncssh.connect(spec.host, **kw)
    except asyncssh.HostKeyNotVerifiable:
        raise await host_key_error(spec, ssh_config) from None
    except asyncssh.PermissionDenied as e:
        raise HostError(f"{spec.name}: authentication failed for {r['user']}@{r['hostname']}:{r['port']}: "
                        f"{e.reason or 'permission denied'}") from None
    except (OSError, TimeoutError) as e:
        why = describe_os_error(e)
        if why == "timed out":
            why = f"no SSH answer within {kw['connect_timeout']:.0f} s (timed out)"
        raise HostError(f"{spec.name}: cannot connect to {r['hostname']}:{r['port']}: {why}") from None
    except asyncssh.Error as e:
        raise HostError(f"{spec.name}: SSH error: {e.reason if hasattr(e, 'reason') else e}") from None
