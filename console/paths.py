"""Where the console keeps its files on the operator's machine (the XDG base directories), one definition each.

Ground: stdlib only. ``$XDG_CONFIG_HOME`` (else ``~/.config``) holds the config; ``$XDG_STATE_HOME`` (else
``~/.local/state``) the audit log and the TUI's incident reports; ``$XDG_CACHE_HOME`` (else ``~/.cache``) the
learned flag schemas; ``$XDG_RUNTIME_DIR`` (else the state directory) the persistent demo host. Each is read
when asked (tests and operators change the environment).

Also the one way to read a file the operator names (``--config``, ``--model-config``): :func:`read_user_file`,
bounded and never blocked by a FIFO or a device.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

APP = "mtpconsole"


def _base(var: str, *fallback: str) -> Path:
    return Path(os.environ.get(var) or os.path.join(os.path.expanduser("~"), *fallback))


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/mtpconsole``."""
    return _base("XDG_CONFIG_HOME", ".config") / APP


def state_dir() -> Path:
    """``$XDG_STATE_HOME/mtpconsole``."""
    return _base("XDG_STATE_HOME", ".local", "state") / APP


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/mtpconsole``."""
    return _base("XDG_CACHE_HOME", ".cache") / APP


def config_file() -> Path:
    """The default config file: ``$XDG_CONFIG_HOME/mtpconsole/config.toml``."""
    return config_dir() / "config.toml"


def audit_log() -> Path:
    """The default audit log: ``$XDG_STATE_HOME/mtpconsole/audit.jsonl``."""
    return state_dir() / "audit.jsonl"


def reports_dir() -> Path:
    """Where the TUI writes incident reports: ``$XDG_STATE_HOME/mtpconsole/reports``."""
    return state_dir() / "reports"


def flags_cache_dir() -> Path:
    """Where learned flag schemas are cached: ``$XDG_CACHE_HOME/mtpconsole/flags``."""
    return cache_dir() / "flags"


DEMO_DIR_ENV = "MTPCONSOLE_DEMO_DIR"
"""Overrides where the persistent demo host lives (tests give each test its own)."""


def demo_dir() -> Path:
    """Where the persistent demo host keeps its state and files (a private directory, 0700, created by the demo):
    ``$MTPCONSOLE_DEMO_DIR``, else ``$XDG_RUNTIME_DIR/mtpconsole/demo`` when that runtime directory exists, else
    ``$XDG_STATE_HOME/mtpconsole/demo``."""
    if os.environ.get(DEMO_DIR_ENV):
        return Path(os.environ[DEMO_DIR_ENV])
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime) / APP / "demo"
    return state_dir() / "demo"


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words: ``a regular file``, ``a directory``, ``a FIFO``..."""
    kinds = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


class UnreadableFile(ValueError):
    """A file the operator named that the console will not read: not a regular file, or larger than its limit
    (the message says which, without the path: the caller names the option and the path)."""


def read_user_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of a file the operator named, read the way a shell would find it (symlinks followed), but opened
    without blocking and refused unless it is a regular file — a FIFO never hangs the console, ``/dev/zero`` is
    never read — and never more than ``limit`` bytes read (one more tells a larger file). Raises ``OSError``
    when it cannot be opened or read, :class:`UnreadableFile` for another kind of file or a larger one."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFile(f"is {file_kind(st.st_mode)}, not a regular file")
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise UnreadableFile(f"is larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)
