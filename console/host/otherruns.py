"""Sessions of other runs directories: where a process's launch session lives when it is not ours.

Stdlib only, Python >= 3.8; shipped with the agent. Two consoles (or two configs) of one user may serve
different runs directories on one host; a process carrying a session id that is not in this agent's runs
directory is not thereby an orphan. Every launch puts its run directory's path in the server's environment
(``MTPCONSOLE_RUN_DIR``), and every agent adds its runs directory to a small per-user list
(``~/.mtpconsole/runs-dirs.json``, the most recent :data:`MAX_KNOWN`). A session is looked up first where
its process says it lives, then in each listed runs directory; what is found is read like our own
sessions (``runs.SessionStore``: bounded, typed, never following a link) with its directory's owner uid,
so the console can require that a session proving a process orphaned is owned by that process's user.
A session id found nowhere proves nothing: it is reported as not found, never as ended.
"""

import json
import os

from .hostlib import SESSION_ID_RE, atomic_write_json
from .rundir import session_dir_problem
from .runs import SessionStore

KNOWN_FILE = os.path.join("~", ".mtpconsole", "runs-dirs.json")
"""The per-user list of runs directories agents of this user have served (newest first)."""
MAX_KNOWN = 16
MAX_LOOKUPS = 32
"""At most this many foreign session ids are looked up per sample (the rest wait for later ticks)."""


def known_file():
    return os.path.expanduser(KNOWN_FILE)


def known_runs_dirs(path=None):
    """The runs directories listed for this user (absolute paths, newest first); [] when none or unreadable."""
    try:
        with open(path or known_file(), "rb") as f:
            data = json.loads(f.read(1 << 16).decode("utf-8", "replace"))
    except (OSError, ValueError):
        return []
    dirs = data.get("runs_dirs") if isinstance(data, dict) else None
    if not isinstance(dirs, list):
        return []
    return [d for d in dirs if isinstance(d, str) and os.path.isabs(d)][:MAX_KNOWN]


def remember_runs_dir(runs_dir, path=None):
    """Put ``runs_dir`` first in the user's list (dropping directories that no longer exist); best effort."""
    path = path or known_file()
    runs_dir = os.path.abspath(runs_dir)
    dirs = [runs_dir] + [d for d in known_runs_dirs(path) if d != runs_dir and os.path.isdir(d)]
    try:
        os.makedirs(os.path.dirname(path), 0o700, exist_ok=True)
        atomic_write_json(path, {"runs_dirs": dirs[:MAX_KNOWN]})
    except OSError:
        pass  # no writable home: lookups still use each process's own MTPCONSOLE_RUN_DIR


class OtherRuns(object):
    """Looks up sessions of runs directories other than ``own`` (one SessionStore per runs directory)."""

    def __init__(self, own, known_path=None):
        self.own = os.path.abspath(own)
        self.known_path = known_path
        self.stores = {}

    def _store(self, runs_dir):
        st = self.stores.get(runs_dir)
        if st is None:
            if len(self.stores) >= 4 * MAX_KNOWN:
                self.stores.clear()
            st = self.stores[runs_dir] = SessionStore(runs_dir, own=False)  # read for evidence, owner kept
        return st

    def candidates(self, session_id, hinted, known):
        """Runs directories that may hold ``session_id``: the process's own word first, then ``known`` (the
        user's list)."""
        out = []
        for run_dir in hinted:
            if isinstance(run_dir, str) and os.path.isabs(run_dir) and os.path.basename(run_dir) == session_id:
                out.append(os.path.dirname(os.path.normpath(run_dir)))
        out.extend(known)
        seen, uniq = set(), []
        for d in out:
            d = os.path.abspath(d)
            if d != self.own and d not in seen:
                seen.add(d)
                uniq.append(d)
        return uniq

    def lookup(self, wanted):
        """Sessions (agent dicts + ``owner_uid``) for ``wanted``: session id -> run dirs its processes name.

        Ids found in no runs directory are left out: the console reads their absence as "not found"."""
        out = []
        known = known_runs_dirs(self.known_path)  # read once per sample, not once per session looked up
        for sid in sorted(wanted)[:MAX_LOOKUPS]:
            if not isinstance(sid, str) or not SESSION_ID_RE.match(sid):
                continue
            for runs_dir in self.candidates(sid, wanted[sid], known):
                if session_dir_problem(runs_dir, sid):
                    continue
                found = self._store(runs_dir).scan(only=[sid]).get(sid)
                if found is not None:
                    out.append(found)
                    break
        return out
