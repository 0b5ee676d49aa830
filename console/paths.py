"""Where the console keeps its files on the operator's machine (the XDG base directories), one definition each.

Ground: stdlib only. ``$XDG_CONFIG_HOME`` (else ``~/.config``) holds the config; ``$XDG_STATE_HOME`` (else
``~/.local/state``) the audit log and the TUI's incident reports; ``$XDG_CACHE_HOME`` (else ``~/.cache``) the
learned flag schemas; ``$XDG_RUNTIME_DIR`` (else the state directory) the persistent demo host. Each is read
when asked (tests and operators change the environment).
"""

from __future__ import annotations

import os
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
