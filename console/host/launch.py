"""The agent's ``launch`` op: validate, preflight under a host-wide lock, start the supervisor.

Stdlib only, Python >= 3.8; shipped with the agent. The supervisor runs from the shipped modules
written once per content digest under ``<runs_dir>/.lib-<digest>/mtpconsole_remote/`` (the same
sources the agent runs from), so agent and supervisor share one definition of every fact.
"""

import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time

from .hostlib import (
    RUN_EXIT,
    RUN_LOG,
    RUN_RECORD,
    RUN_SPEC,
    RUNS_LOCK,
    SESSION_ENV,
    SESSION_ID_RE,
    SIM_DIR_ENV,
    SUPERVISOR_NO_SPACE,
    OpError,
    atomic_write_json,
    disk_full,
    listening_ports,
    load_json,
    no_space_text,
    port_open,
    proc_environ,
    proc_stat,
)
from .hostsecrets import mask_argv
from .rundir import session_dir_problem, session_pids

PACKAGE = "mtpconsole_remote"
"""The package name the shipped modules live under on the host."""

SUPERVISOR_BOOT = ("import sys;sys.path.insert(0,sys.argv.pop(1));"
                   "from mtpconsole_remote.supervisor import main;sys.exit(main())")
"""The fixed program that runs the supervisor from a written package: argv is [lib_root, run_dir]."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def materialize(sources, root):
    """Write the shipped modules as the package ``<root>/.lib-<digest>/mtpconsole_remote``; return the
    directory to put on ``sys.path``. Written once per content (temp dir + rename: never half-written); an
    existing one is used only when it is verified (see :func:`lib_problem`): a planted or altered copy is
    moved aside and written fresh, never executed."""
    digest = hashlib.sha256(json.dumps(sorted(sources.items())).encode("utf-8")).hexdigest()[:16]
    lib_root = os.path.join(root, ".lib-%s" % digest)
    if os.path.lexists(lib_root):
        if lib_problem(lib_root, sources) is None:
            return lib_root
        aside = "%s.untrusted.%d.%d" % (lib_root, os.getpid(), int(time.time() * 1000))
        try:
            os.rename(lib_root, aside)
        except OSError as e:
            raise OpError("cannot replace the untrusted %s: %s" % (lib_root, e.strerror or e))
    tmp = "%s.tmp.%d" % (lib_root, os.getpid())
    try:
        pkg = os.path.join(tmp, PACKAGE)
        os.makedirs(pkg, 0o700)
        files = dict(("%s.py" % name, src) for name, src in sources.items())
        files["__init__.py"] = INIT_SOURCE
        for name, src in files.items():
            fd = os.open(os.path.join(pkg, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(src)
        os.chmod(tmp, 0o700)
        try:
            os.rename(tmp, lib_root)
        except OSError:
            if lib_problem(lib_root, sources) is not None:  # not a concurrent writer's good copy
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return lib_root


INIT_SOURCE = '"""mtpconsole modules shipped to this host (written by the agent)."""\n'


def lib_problem(lib_root, sources):
    """Why the written package at ``lib_root`` must not be run (None when it may): each path a real directory
    or regular file (no symlink) owned by us and writable by nobody else, holding exactly the shipped
    sources (compared byte for byte) and nothing else."""
    uid = os.getuid()
    expected = dict(("%s.py" % name, src.encode("utf-8")) for name, src in sources.items())
    expected["__init__.py"] = INIT_SOURCE.encode("utf-8")
    pkg = os.path.join(lib_root, PACKAGE)
    for path in (lib_root, pkg):
        try:
            st = os.lstat(path)
        except OSError as e:
            return "%s: %s" % (path, e.strerror)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022:
            return "%s is not a private directory of ours" % path
    try:
        names = set(os.listdir(pkg)) - set(["__pycache__"])
    except OSError as e:
        return "%s: %s" % (pkg, e.strerror)
    if names != set(expected):
        return "%s holds other files" % pkg
    for name, data in expected.items():
        try:
            fd = os.open(os.path.join(pkg, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            return "%s: %s" % (name, e.strerror)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022 or st.st_size != len(data):
                return "%s is not the shipped file" % name
            got = b""
            while len(got) < len(data):
                chunk = os.read(fd, len(data) - len(got))
                if not chunk:
                    break
                got += chunk
        finally:
            os.close(fd)
        if got != data:
            return "%s differs from the shipped source" % name
    return None


USER_LOCK = os.path.join(os.path.expanduser("~"), ".mtpconsole", RUNS_LOCK)
"""Serializes launches of every console of this host user, whatever their runs directories."""


def lock_file(path):
    """An fd to ``flock`` on ``path`` (created 0600, never through a symlink); None when it cannot be made."""
    try:
        os.makedirs(os.path.dirname(path), 0o700, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        if path.endswith(os.path.join(".mtpconsole", RUNS_LOCK)):
            return None  # no writable home: the runs directory's lock still serializes this console's launches
        raise


def session_processes(sim_scope=None):
    """(session id, pid, GPU indexes) of every live process (readable to us) started by an mtpconsole
    supervisor (``MTPCONSOLE_SESSION`` in its environment), whichever runs directory it belongs to. A
    simulated host (``sim_scope``) sees only its simulation's processes; a real one none of any simulation."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        env = proc_environ(int(name), (SESSION_ENV, "CUDA_VISIBLE_DEVICES", SIM_DIR_ENV))
        if not env or SESSION_ENV not in env or env.get(SIM_DIR_ENV) != sim_scope:
            continue
        st = proc_stat(int(name))
        if st is None or st["state"] in ("Z", "X"):
            continue
        devices = set(int(x) for x in (env.get("CUDA_VISIBLE_DEVICES") or "").split(",") if x.strip().isdigit())
        out.append((env[SESSION_ENV], int(name), devices))
    return out


MIN_FREE_BYTES = 64 << 10
"""A launch is refused before anything is created when the runs directory's filesystem has less free space than
this (its spec, the supervisor's log, the record and the exit record need a few KiB; the server's log more)."""
SESSION_GONE_WAIT_S = 5.0
"""How long a failed spawn waits for its supervisor (and anything it started) to be gone before removing the run
directory it made."""


def space_problem(path):
    """Why the filesystem of ``path`` cannot take a launch (``no space left on PATH (...)``), or None."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None  # cannot tell: the writes themselves will say
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        return "%s (%d KiB free, a launch needs at least %d KiB)" % (
            no_space_text(path), free >> 10, MIN_FREE_BYTES >> 10)
    if st.f_files and not st.f_favail:
        return "%s (no free inodes)" % no_space_text(path)
    return None


def supervisor_argv(lib_root, run_dir):
    """The supervisor's command line (a fixed program; the paths are plain arguments)."""
    return [sys.executable, "-c", SUPERVISOR_BOOT, lib_root, run_dir]


class Launcher(object):
    """Launches sessions in ``runs_dir``; ``host`` is the agent (sessions, GPUs, watches, port owner)."""

    def __init__(self, runs_dir, launch_env, sources, host, log_cap_mb=None):
        self.runs_dir = runs_dir
        self.launch_env = dict(launch_env or {})
        self.sources = sources
        self.host = host
        self.log_cap_mb = log_cap_mb
        """The host's ``log_cap_mb`` (config), written into each spec that does not set its own."""

    def launch(self, spec, env=None, preflight=None):
        """Preflight and spawn under a host-wide lock; return the new session's info.

        Two consoles launching on the same GPU or port serialize on the lock; the second
        one sees the first's live session and is told who holds it. With ``preflight["check_only"]``
        only the checks are run and returned (``{"preflight": [...], "record": None}``), each with its verdict.
        """
        preflight = preflight or {}
        env = dict(self.launch_env, **(env or {}))
        sid = spec.get("session_id") or ""
        if not SESSION_ID_RE.match(sid):
            raise OpError("bad session id %r" % sid, "bad_request")
        argv = spec.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
            raise OpError("argv must be a non-empty list of strings without NUL", "bad_request")
        for k, v in env.items():
            if not _ENV_NAME.match(k) or "\0" in str(v):
                raise OpError("bad environment variable name or value for %r" % k, "bad_request")
        path_env = env.get("PATH", os.environ.get("PATH", ""))
        command = None
        if "/" not in argv[0] and shutil.which(argv[0], path=path_env) is None:
            command = "server command %r not found on the host's PATH" % argv[0]
        if "/" in argv[0] and not os.access(argv[0], os.X_OK):
            command = "server command %r does not exist or is not executable" % argv[0]
        if preflight.get("check_only"):  # every check's verdict, nothing created (a refused launch lists them all)
            return {"preflight": [{"name": "server command", "ok": command is None, "detail": command or argv[0]}]
                    + self.preflight(spec, preflight), "record": None}
        if command:
            raise OpError(command, "refused")
        try:
            os.makedirs(self.runs_dir, exist_ok=True)
        except OSError as e:
            raise OpError("cannot create runs directory %s: %s" % (self.runs_dir, e.strerror))
        # two locks: this runs directory's, and one per host user (consoles with other runs_dirs share it)
        with self.locked(USER_LOCK):
            checks = self.preflight(spec, preflight)
            bad = [c for c in checks if c["ok"] is False]
            if bad:
                raise OpError("preflight failed: " + "; ".join(c["detail"] for c in bad), "refused")
            info = self.spawn(spec, env)
            info["preflight"] = checks
            return info

    def locked(self, *more):
        """The runs directory's launch lock (and the ``more`` lock files), held for a ``with`` block; the
        session store knows it holds it (a run directory without a record is then no other launch's)."""
        return _Locks(self, [lock_file(os.path.join(self.runs_dir, RUNS_LOCK))] + [lock_file(p) for p in more])

    def prune(self, session_id):
        """Remove the broken run directory of ``session_id`` (see ``runs``: never recorded, malformed), re-checked
        under the launch lock: refused for a session that is not broken, another user's run directory, or one
        of which a process still runs. Returns what was removed."""
        if not isinstance(session_id, str) or not SESSION_ID_RE.match(session_id):
            raise OpError("bad session id %r" % (session_id,), "bad_request")
        d = os.path.join(self.runs_dir, session_id)
        if not os.path.lexists(d):
            raise OpError("no session %s in %s" % (session_id, self.runs_dir), "not_found")
        problem = session_dir_problem(self.runs_dir, session_id)
        if problem:
            raise OpError("%s is %s, not a run directory: nothing removed" % (d, problem), "refused")
        with self.locked():
            sessions = self.host.sessions
            sessions.forget(session_id)
            s = sessions.scan(only=[session_id]).get(session_id)
            if s is None:
                raise OpError("no session %s in %s" % (session_id, self.runs_dir), "not_found")
            if s.get("untrusted"):
                raise OpError("session %s is not this console's run directory (%s): nothing removed" % (
                    session_id, s["broken"]), "refused")
            if not s.get("broken"):
                raise OpError("session %s is not broken: only a run directory that cannot be a session is removed "
                              "(kill a live session, acknowledge an ended one)" % session_id, "refused")
            alive = session_pids(d, session_id)
            if alive:
                raise OpError("session %s is broken (%s) but its processes still run (pid %s): nothing removed" % (
                    session_id, s["broken"], ", ".join(map(str, alive))), "refused")
            try:
                names = sorted(os.listdir(d))
            except OSError as e:
                raise OpError("cannot read %s: %s" % (d, e.strerror or e))
            try:
                shutil.rmtree(d)
            except OSError as e:
                raise OpError("could not remove all of %s: %s: %s" % (d, e.filename, e.strerror or e))
            finally:
                sessions.forget(session_id)
            return {"session_id": session_id, "run_dir": d, "removed": names, "reason": s["broken"]}

    def preflight(self, spec, opts):
        """Checks before a launch: no live session on the GPUs/port, port free, GPUs free enough."""
        gpus = [int(g) for g in spec.get("gpus") or []]
        port = spec.get("port")
        checks = []
        holders = []
        share = opts.get("share_gpus_with")  # a roll's new replica beside its old one: the planner says both fit
        for s in self.host.sessions.live():
            sp = s.get("spec") or {}
            shared = sorted(set(gpus) & set(int(g) for g in sp.get("gpus") or []))
            same_port = port is not None and sp.get("port") == port
            if shared and not same_port and share is not None and s["session_id"] == share:
                continue
            if shared or same_port:
                rec = s.get("record") or {}
                what = ("GPU %s" % ",".join(map(str, shared))) if shared else "port %s" % port
                holders.append("%s is held by session %s (pid %s, launched by %s)" % (
                    what, s["session_id"], rec.get("pid", "starting"), sp.get("launched_by") or "?"))
        ours = set(s["session_id"] for s in self.host.sessions.live())
        gpu_known = self.host.gpu.name in ("nvml", "nvidia-smi", "sim")  # indexes name real (or simulated) GPUs
        for sid, pid, devices in session_processes(self.host.procs.sim_scope) if gpu_known else ():
            shared = sorted(set(gpus) & devices)
            if shared and sid not in ours:  # a session of another runs directory (another console's config)
                holders.append("GPU %s is held by session %s (pid %d, started from another runs directory)" % (
                    ",".join(map(str, shared)), sid, pid))
                ours.add(sid)
        checks.append({"name": "no live session on GPU/port", "ok": not holders,
                       "detail": "; ".join(holders) or "free"})
        full = space_problem(self.runs_dir)
        checks.append({"name": "runs directory has space", "ok": full is None,
                       "detail": full or "%s has space" % self.runs_dir})
        if port is not None:
            busy = port_open(int(port)) or int(port) in listening_ports()
            detail = "port %s is free" % port
            if busy:
                owner = self.host.op_port_owner(port)
                detail = "port %s is in use%s" % (port, " by pid %s (%s)" % (
                    owner["pid"], " ".join(owner["argv"] or [])[:120]) if owner and owner.get("pid") else "")
            checks.append({"name": "port free", "ok": not busy, "detail": detail})
        last_gpus, gpu_error = self.host.current_gpus()
        if not last_gpus:
            checks.append({"name": "GPUs free", "ok": None,
                           "detail": "skipped: %s" % (gpu_error or "no GPU information")})
        else:
            by_index = dict((g["index"], g) for g in last_gpus)
            problems, notes = [], []
            need = opts.get("need_mib")
            for i in gpus:
                g = by_index.get(i)
                if g is None:
                    problems.append("GPU %d does not exist on this host (has %s)" % (
                        i, ",".join(str(k) for k in sorted(by_index))))
                    continue
                foreign = [p for p in g.get("procs") or []]
                if foreign and not opts.get("allow_busy"):
                    problems.append("GPU %d has compute processes: %s" % (i, ", ".join(
                        "pid %d (%s MiB)" % (p["pid"], p.get("used_mib")) for p in foreign)))
                free = None
                if g.get("mem_total_mib") is not None and g.get("mem_used_mib") is not None:
                    free = g["mem_total_mib"] - g["mem_used_mib"] - (g.get("mem_reserved_mib") or 0)
                if need and free is not None and free < need:
                    problems.append("GPU %d has %d MiB free, the plan needs %d MiB" % (i, free, need))
                notes.append("GPU %d: %s MiB free" % (i, free))
            checks.append({"name": "GPUs free", "ok": not problems,
                           "detail": "; ".join(problems) or "; ".join(notes)})
        return checks

    def spawn(self, spec, env):
        """Create the run directory and start the supervisor; return the session as scanned."""
        if not self.sources or "supervisor" not in self.sources:
            raise OpError("no supervisor source was shipped to the agent")
        sid = spec["session_id"]
        self.host.sessions.spawning.add(sid)  # LAUNCHING, never broken, until its record is written (or not)
        try:
            return self._spawn(spec, env)
        finally:
            self.host.sessions.spawning.discard(sid)

    def _spawn(self, spec, env):
        run_dir = os.path.join(self.runs_dir, spec["session_id"])
        try:
            os.mkdir(run_dir, 0o700)  # other users of the host read nothing of a session
        except FileExistsError:
            raise OpError("run directory %s already exists: refusing to reuse a session" % run_dir, "refused")
        except OSError as e:
            if disk_full(e):
                raise OpError("%s: cannot create the run directory %s" % (no_space_text(self.runs_dir, e), run_dir))
            raise OpError("cannot create %s: %s" % (run_dir, e.strerror))
        try:
            real = list(spec["argv"])
            spec = dict(spec)
            spec["env_names"] = sorted(env)
            spec["argv"] = mask_argv(real)  # secret flag values never reach the disk: the real argv goes on stdin
            if spec.get("log_cap_mb") is None and self.log_cap_mb:
                spec["log_cap_mb"] = self.log_cap_mb  # the supervisor pipes and rotates output.log (logcap)
            atomic_write_json(os.path.join(run_dir, RUN_SPEC), spec)
            lib_root = materialize(self.sources, self.runs_dir)
        except OSError as e:  # a full or failing disk: say where, leave nothing half-written
            shutil.rmtree(run_dir, ignore_errors=True)
            if disk_full(e):
                raise OpError("%s: cannot write the run directory %s (nothing was started)" % (
                    no_space_text(self.runs_dir, e), run_dir))
            raise OpError("cannot write the run directory %s: %s" % (run_dir, e.strerror or e))
        try:
            p = subprocess.Popen(supervisor_argv(lib_root, run_dir), stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, close_fds=True, cwd=run_dir)
            _, err = p.communicate((json.dumps({"env": env, "argv": real}) + "\n").encode("utf-8"), timeout=30)
        except OSError as e:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise OpError("cannot start the supervisor: %s" % e)
        except subprocess.TimeoutExpired:
            raise OpError("the supervisor did not detach within 30 s (see %s)" % run_dir)
        rec = load_json(os.path.join(run_dir, RUN_RECORD))
        ex = load_json(os.path.join(run_dir, RUN_EXIT))
        if rec is None and ex is None:
            self._unmake(run_dir, spec["session_id"], p.returncode == SUPERVISOR_NO_SPACE)
            if p.returncode == SUPERVISOR_NO_SPACE:
                raise OpError("%s: the supervisor could not record the launch; nothing was started and nothing "
                              "is left running (free some space and launch again)" % no_space_text(self.runs_dir))
            raise OpError("the supervisor exited (%s) without starting the server: %s" % (
                p.returncode, err.decode("utf-8", "replace").strip()[-500:] or "no output"))
        if rec:
            self.host.watcher.ensure(rec["pid"], rec.get("start_ticks"), spec["session_id"])
        self.host.sessions.forget(spec["session_id"])
        return self.host.sessions.scan().get(spec["session_id"])

    def _unmake(self, run_dir, session_id, no_space):
        """After a supervisor that recorded nothing: remove the run directory it was given once nothing of the
        session runs (its supervisor, anything it started), unless its log may say why (a disk that is not full,
        a log that is not empty); what stays is shown broken and ``prune`` removes it."""
        deadline = time.monotonic() + SESSION_GONE_WAIT_S
        while session_pids(run_dir, session_id):
            if time.monotonic() >= deadline:
                return  # something of it still runs: never removed under it
            time.sleep(0.05)
        try:
            log_bytes = os.lstat(os.path.join(run_dir, RUN_LOG)).st_size
        except OSError:
            log_bytes = 0
        if no_space or not log_bytes:
            shutil.rmtree(run_dir, ignore_errors=True)


class _Locks(object):
    """Flocks held for a ``with`` block (None entries skipped); tells the session store it holds them."""

    def __init__(self, launcher, fds):
        self.store = launcher.host.sessions
        self.fds = fds

    def __enter__(self):
        try:
            for fd in self.fds:
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            self.close()
            raise
        self.store.lock_held = True
        return self

    def __exit__(self, *exc):
        self.store.lock_held = False
        self.close()
        return False

    def close(self):
        for fd in self.fds:
            if fd is not None:
                os.close(fd)
        self.fds = []
