"""Learn a host's server flags by running its ``--help`` there, with a per-version cache.

``link`` is a host's :class:`~console.link.client.HostClient` (or a link it wraps: anything with the link's
``request``); only its ``run`` op is used (``argv`` without a shell, see console/link/protocol.py), and its
``name`` (the host).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from console import paths
from console.core.flags.help import HelpParseError, parse_help
from console.core.flags.models import FlagSchema
from console.core.flags.sources import (
    BUNDLED_VERSION,
    PROBE_SOURCE,
    bundled_schema,
    merge_help,
    parse_probe_output,
)
from console.errors import HostError, UserError
from console.link.client import HostClient, Wire

SCHEMA_FORMAT = 2
"""Bumped when a cached schema's content changes meaning (2: completed by the parser probe)."""
HELP_TIMEOUT_S = 120
VERSION_TIMEOUT_S = 60
VERSION_SNIPPET = "import importlib.metadata as m; print(m.version('sglang'))"
_VERSION_RE = re.compile(r"^[0-9A-Za-z.+!_-]{1,64}$")


Link = Wire | HostClient
"""What this module is given for a host: its client, or a link (``HostClient.of`` makes it a client)."""


class CachedSchema(BaseModel):
    """A schema as cached on disk, with what it was learned from."""

    model_config = ConfigDict(frozen=True)

    host: str
    command: list[str]
    version: str | None
    learned_at: str
    flag_schema: FlagSchema


def default_cache_dir() -> Path:
    """Where learned schemas are cached (:func:`console.paths.flags_cache_dir`)."""
    return paths.flags_cache_dir()


def version_command(command: list[str]) -> list[str] | None:
    """``[python, "-c", snippet]`` when ``command`` is ``python… -m sglang…``, else None."""
    if len(command) >= 3 and Path(command[0]).name.startswith("python") and command[1] == "-m" \
            and command[2].split(".")[0] == "sglang":
        return [command[0], "-c", VERSION_SNIPPET]
    return None


def cache_path(cache_dir: Path, host: str, command: list[str], version: str | None) -> Path:
    """``cache_dir/<host>-<sha1(command + version)>.json`` (host made filename-safe)."""
    digest = hashlib.sha1(json.dumps([list(command), version, SCHEMA_FORMAT]).encode()).hexdigest()
    safe_host = re.sub(r"[^A-Za-z0-9._@-]", "_", host)[:100] or "host"
    return Path(cache_dir) / f"{safe_host}-{digest}.json"


async def _run(link: Link, argv: list[str], timeout: int, what: str) -> tuple[int, str, str]:
    """``run`` on the host; the reply is awaited a little longer than the command may run."""
    client = HostClient.of(link)
    try:
        r = await client.run(argv, timeout, reply_timeout=timeout + 15)
    except UserError:
        raise
    except TimeoutError:
        raise HostError(f"{client.name}: {what} timed out after {timeout} s") from None
    except Exception as e:  # noqa: BLE001 - the link's own errors (connection lost, agent refused, bad reply)
        raise HostError(f"{client.name}: {what} failed: {e}") from None
    return r.rc, r.stdout, r.stderr


async def server_version(link: Link, command: list[str]) -> str | None:
    """The installed sglang version next to ``command``'s Python, or None when not knowable."""
    argv = version_command(command)
    if argv is None:
        return None
    try:
        rc, out, _ = await _run(link, argv, VERSION_TIMEOUT_S, "the sglang version check")
    except HostError:
        return None  # unknown version: no cache reuse; the --help run reports a dead link itself
    lines = out.strip().splitlines()
    if rc != 0 or not lines or not _VERSION_RE.match(lines[-1].strip()):
        return None
    return lines[-1].strip()


async def _with_parser_probe(link: Link, command: list[str], helped: FlagSchema, version: str | None) -> FlagSchema:
    """``helped`` completed from the host's own parser (hidden flags, exact actions and order), when it can be read.

    Runs :data:`~console.core.flags.sources.PROBE_SOURCE` with the command's Python (only for
    ``python -m sglang...``); any failure keeps the ``--help`` schema as it is.
    """
    vc = version_command(command)
    if vc is None:
        return helped
    try:
        rc, out, _ = await _run(link, [vc[0], "-c", PROBE_SOURCE], HELP_TIMEOUT_S, "the server's parser probe")
    except HostError:
        return helped
    probed = parse_probe_output(out, version=version) if rc == 0 else None
    if probed is None or not probed.flags:
        return helped
    return merge_help(probed, helped)


def _read_cache(path: Path) -> FlagSchema | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return CachedSchema.model_validate(data).flag_schema
    except (OSError, ValueError, ValidationError):
        return None


def _write_cache(path: Path, entry: CachedSchema) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(entry.model_dump_json(), encoding="utf-8")
    os.replace(tmp, path)


async def learn_schema(link: Link, command: list[str], cache_dir: Path) -> FlagSchema:
    """The flags of ``command`` on the host behind ``link``, learned from its ``--help``.

    Asks for the server's version first (only for ``python -m sglang...``); with a known
    version, a cached schema for the same host, command and version is reused. Otherwise
    runs ``command + ["--help"]`` on the host, parses stdout (or stderr + stdout when the
    help went to stderr), and caches the result when the version is known. Raises
    :class:`HostError` when the help cannot be run or read.
    """
    command = [str(c) for c in command]
    if not command:
        raise HostError("no server command to learn flags from")
    return await _learn(link, command, cache_dir, await server_version(link, command))


async def _learn(link: Link, command: list[str], cache_dir: Path, version: str | None) -> FlagSchema:
    host = str(getattr(link, "name", None) or "host")
    path = cache_path(Path(cache_dir), host, command, version)
    if version is not None:
        cached = _read_cache(path)
        if cached is not None:
            return cached
    rc, out, err = await _run(link, [*command, "--help"], HELP_TIMEOUT_S, f"{' '.join(command)} --help")
    text = out if "usage:" in out.lower() else err + "\n" + out
    try:
        schema = parse_help(text, version=version)
    except HelpParseError as e:
        tail = (err.strip() or out.strip())[-400:]
        raise HostError(f"{host}: could not read the flags of {' '.join(command)} (--help exit code {rc}): "
                        f"{e}" + (f"; it printed: {tail}" if tail else "")) from None
    schema = await _with_parser_probe(link, command, schema, version)
    if version is not None:
        entry = CachedSchema(host=host, command=command, version=version,
                             learned_at=datetime.now(UTC).isoformat(timespec="seconds"), flag_schema=schema)
        try:
            _write_cache(path, entry)
        except OSError:
            pass  # a cache we cannot write only costs a --help run next time
    return schema


_UNVERSIONED_TTL_S = 300.0
_unversioned: dict[tuple[str, tuple[str, ...]], tuple[float, FlagSchema]] = {}


async def launch_schema(link: Link, command: list[str], cache_dir: Path | None = None) -> FlagSchema:
    """The schema to check a launch against, as cheaply as it can be known for certain.

    A cached schema for the host's server version; for sglang 0.5.23 the bundled schema
    (recorded from that parser; tests/contract checks they are equal); for a server whose version
    cannot be asked, the ``--help`` learned in this process within the last 5 minutes; else
    :func:`learn_schema`. Raises :class:`HostError` when none can be had.
    """
    command = [str(c) for c in command]
    if not command:
        raise HostError("no server command to check flags for")
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    host = str(getattr(link, "name", None) or "host")
    version = await server_version(link, command)
    if version is not None:
        cached = _read_cache(cache_path(cache_dir, host, command, version))
        if cached is not None:
            return cached
        if version == BUNDLED_VERSION and version_command(command) is not None:
            return bundled_schema()
        return await _learn(link, command, cache_dir, version)
    key = (host, tuple(command))
    hit = _unversioned.get(key)
    if hit is not None and time.monotonic() - hit[0] < _UNVERSIONED_TTL_S:
        return hit[1]
    schema = await _learn(link, command, cache_dir, None)
    _unversioned[key] = (time.monotonic(), schema)
    return schema
