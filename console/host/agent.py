"""The remote agent: one long-lived process per host, speaking JSON lines on stdin/stdout.

Stdlib only; runs on the host's ``python3`` >= 3.8 with nothing installed. It is shipped as
source with its sibling modules over the connection (see ``protocol.BOOTSTRAP`` and
``shipboot.py``) and never imports ``console``: its imports are relative to the shipped package.

This module is the main loop and the op table; the work is done by its siblings:
``gpus`` (GPU sources), ``procscan`` (server processes), ``runs`` (sessions and run directories),
``logfollow`` (session logs), ``watch`` (exit events), ``launch`` (the launch op).

Per tick it samples every GPU, the server processes from /proc, and the launch sessions in the
runs directory, and pushes one ``sample`` message. Process exits are pushed as ``event``
messages as they happen (pidfd where the kernel has it, else 50 ms polling); followed session
logs are pushed as ``log`` messages by byte offset. Every failure becomes a value in the sample,
never a dead agent.

Longer than ~400 lines on purpose: it is the shipped agent's main loop and op table; each op is a
few lines that delegate to the sibling modules.
"""

import json
import os
import queue
import selectors
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import traceback
from typing import Any, Dict, Set

from .delta import DeltaSender
from .foreign import file_kind, foreign_output
from .gpus import GpuSampler, open_gpu_source
from .hostlib import (
    AGENT_VERSION,
    CLK_TCK,
    RUN_LOG,
    RUN_STOP_REQUEST,
    OpError,
    boot_id,
    listening_ports,
    now,
    pid_of_socket_inode,
    port_open,
    proc_alive,
    proc_cmdline,
    proc_stat,
    read_oom_kill,
    user_name,
)
from .launch import Launcher
from .logfollow import MAX_LOG_CHUNK, LogFollower, read_log
from .metrics import HttpError, MetricsFetcher, http_get, metrics_port
from .otherruns import OtherRuns, remember_runs_dir
from .procscan import ProcScanner
from .rundir import expand_runs_dir, real_session_dir
from .runs import SessionStore
from .samplering import SampleRing, read_samples
from .watch import STOP_SIGNAL, ExitWatcher, process_gpus

GPU_STALL_S = 5.0
"""A GPU sample in flight longer than this (or 3 intervals) is reported as not answering."""


class Agent(object):
    """The agent's state and ops; ``run`` is its loop. ``sources`` are the shipped modules (for the supervisor)."""

    GPU_WAIT_S = 0.5
    """A tick waits at most this long (the loop stays live) for the GPU sample it asked for."""
    SNAPSHOT_GPU_WAIT_S = 2.0
    """A ``snapshot`` request waits at most this long for a fresh GPU sample."""

    SLOW_OPS = ("launch", "http_get", "run", "port_open", "port_owner", "read_file", "foreign_output", "prune")
    """Ops answered from a thread: they may block (network, subprocesses, the launch lock)."""
    POOLED_OPS = ("http_get", "port_open", "port_owner", "read_file", "foreign_output")
    """Of those, the short ones (each bounded: a whole-request deadline, a bounded read, never a FIFO): answered
    by at most ``IO_WORKERS`` reused threads, however many are asked at once (a trickling /health, probed every
    few seconds, never leaks a thread per probe)."""
    IO_WORKERS = 8

    def __init__(self, cfg, stdin, stdout, sources=None):
        self.cfg = cfg
        self.stdin = stdin
        self.out = getattr(stdout, "buffer", stdout)
        self.wlock = threading.Lock()
        self.interval = float(cfg.get("interval") or 1.0)
        self.runs_dir = expand_runs_dir(cfg.get("runs_dir") or "~/.mtpconsole/runs")
        self.gpu = open_gpu_source(cfg.get("gpu_source") or "auto", cfg.get("sim_dir"), cfg.get("sim_src"))
        # A simulated host is a namespace on this machine: its process table is its simulation's.
        sim_scope = cfg.get("sim_dir") if self.gpu.name == "sim" else None
        self.inbox: "queue.Queue[Any]" = queue.Queue()  # stdin lines, then None at its end
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake", None))
        self.watcher = ExitWatcher(self.sel, self.send, self.runs_dir, self._session_ended)
        self.sessions = SessionStore(self.runs_dir, self.watcher.ensure)
        self.procs = ProcScanner(self.runs_dir, sim_scope)
        self.other_runs = OtherRuns(self.runs_dir)
        remember_runs_dir(self.runs_dir)
        self.logs = LogFollower(self.runs_dir, self.send)
        self.metrics = MetricsFetcher()  # /metrics of servers started with --enable-metrics, off the loop
        self.workers = Workers(self.IO_WORKERS, "io")
        self.ring = SampleRing(self.runs_dir)  # GPU history for later reports
        self.launcher = Launcher(self.runs_dir, cfg.get("launch_env"), sources, self, cfg.get("log_cap_mb"))
        # GPUs are sampled in a worker thread: a hung driver or nvidia-smi never blocks this loop
        self.sampler = GpuSampler(self.gpu, self._wake, stall_s=max(float(cfg.get("gpu_stall_s") or GPU_STALL_S),
                                                                     3 * self.interval))
        self.tick_gen = None  # the GPU sample generation the pending tick waits for
        self.tick_due = 0.0  # when the pending tick goes out with the GPU data it has
        self.snapshots = []  # [(request id, generation, deadline, perf_counter at request)]
        self.stop = False
        self.next_tick = 0.0
        self.tick_ms = None
        # Samples go out as deltas of the last one sent (a whole one on connect, every ``full_every`` ticks and
        # as the reply to a ``snapshot`` request, which is how the console asks for one after a gap)
        self.deltas = DeltaSender(int(cfg.get("full_every") or 0) or None) if cfg.get("deltas", True) else None

    # -- output
    def send(self, obj):
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8")
        with self.wlock:
            try:
                self.out.write(data)
                self.out.flush()
            except (BrokenPipeError, OSError):
                self.stop = True

    def reply(self, rid, ok, result=None, error=None, kind="failed"):
        """A reply: ``result``, or ``error`` (the operator's text) with its ``kind`` (one of ERROR_KINDS)."""
        msg = {"type": "reply", "id": rid, "ok": ok}
        if ok:
            msg["result"] = result
        else:
            msg["error"], msg["kind"] = error, kind
        self.send(msg)

    # -- input
    def reader(self):
        try:
            for line in self.stdin:
                self.inbox.put(line)
                os.write(self.wake_w, b"x")
        except Exception:
            pass
        self.inbox.put(None)
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass

    def _wake(self):
        try:
            os.write(self.wake_w, b"g")
        except OSError:
            pass

    def run(self):
        threading.Thread(target=self.reader, name="stdin", daemon=True).start()
        while not self.stop:
            t = now()
            if self.tick_gen is None and t >= self.next_tick:
                self.tick_gen = self.sampler.request()
                self.tick_due = t + min(self.GPU_WAIT_S, self.interval / 2.0)
                self.next_tick = t + self.interval
            if self.tick_gen is not None and (self.sampler.done(self.tick_gen) or now() >= self.tick_due):
                self.tick_gen = None
                self.tick()
            self.answer_snapshots()
            timeout = self.next_tick - now()
            if self.tick_gen is not None:
                timeout = min(timeout, self.tick_due - now())
            for _, _, deadline, _ in self.snapshots:
                timeout = min(timeout, deadline - now())
            if self.watcher.pending:
                timeout = min(timeout, 0.005)
            elif self.logs or self.watcher.polling():
                timeout = min(timeout, 0.05)
            if self.logs.behind:  # a followed log has more to push now: no pause (its reads are time-boxed)
                timeout = 0.0
            for key, _ in self.sel.select(max(0.0, timeout)):
                kind, data = key.data
                if kind == "wake":
                    try:
                        os.read(self.wake_r, 4096)
                    except OSError:
                        pass
                elif kind == "pidfd":
                    self.watcher.on_exit(data)
            self.drain_inbox()
            self.watcher.poll()
            self.logs.poll()
            self.watcher.poll_pending()

    def drain_inbox(self):
        while True:
            try:
                line = self.inbox.get_nowait()
            except queue.Empty:
                return
            if line is None:
                self.stop = True
                return
            line = line.strip()
            if not line:
                continue
            try:
                req = json.loads(line)
                rid, op, args = req.get("id"), req["op"], req.get("args") or {}
            except (ValueError, KeyError, AttributeError) as e:
                self.send({"type": "error", "message": "bad request: %s" % e})
                continue
            fn = getattr(self, "op_" + str(op), None)
            if op == "snapshot":  # answered by the loop once the GPU sample it asks for is in
                self.snapshots.append((rid, self.sampler.request(), now() + self.SNAPSHOT_GPU_WAIT_S,
                                       time.perf_counter()))
            elif fn is None:
                self.reply(rid, False, error="unknown op %r" % op, kind="unknown_op")
            elif op in self.POOLED_OPS:
                self.workers.submit(self.call, fn, rid, args)
            elif op in self.SLOW_OPS:
                threading.Thread(target=self.call, args=(fn, rid, args), daemon=True).start()
            else:
                self.call(fn, rid, args)

    @classmethod
    def answered_ops(cls):
        """Every op this agent answers: its ``op_*`` methods and ``snapshot`` (answered by the loop)."""
        return sorted(set(["snapshot"] + [n[3:] for n in dir(cls) if n.startswith("op_")]))

    def call(self, fn, rid, args):
        try:
            self.reply(rid, True, fn(**args))
        except TypeError as e:
            self.reply(rid, False, error="bad arguments: %s" % e, kind="bad_request")
        except OpError as e:
            self.reply(rid, False, error=str(e), kind=e.kind)
        except FileNotFoundError as e:
            self.reply(rid, False, error="%s: %s" % (type(e).__name__, e), kind="not_found")
        except PermissionError as e:
            self.reply(rid, False, error="%s: %s" % (type(e).__name__, e), kind="denied")
        except Exception as e:
            self.reply(rid, False, error="%s: %s" % (type(e).__name__, e))

    def _session_ended(self, session_id, exit_record):
        self.sessions.set_exit(session_id, exit_record)
        self.next_tick = 0.0  # push a fresh sample now

    # -- sampling
    def tick(self):
        t0 = time.perf_counter()
        sample = self.take_sample()
        self.ring.add(sample["gpus"])
        self.tick_ms = (time.perf_counter() - t0) * 1000.0
        sample["tick_ms"] = round(self.tick_ms, 3)
        self.send(self.deltas.message(sample) if self.deltas is not None else {"type": "sample", "data": sample})

    def answer_snapshots(self):
        """Reply to ``snapshot`` requests whose GPU sample is in (or whose wait ran out)."""
        if not self.snapshots:
            return
        t = now()
        ready = [s for s in self.snapshots if self.sampler.done(s[1]) or t >= s[2]]
        if not ready:
            return
        self.snapshots = [s for s in self.snapshots if s not in ready]
        sample = self.take_sample()
        for rid, _, _, t0 in ready:
            sample = dict(sample, tick_ms=round((time.perf_counter() - t0) * 1000.0, 3))
            if self.deltas is None:
                self.reply(rid, True, sample)
                continue
            # the reply is the base of the deltas that follow it on the wire (both go out from this loop)
            self.reply(rid, True, dict(sample, seq=self.deltas.full(sample)["seq"]))

    def current_gpus(self):
        """A fresh GPU sample for a launch's preflight (called from the launch thread, never the loop)."""
        self.sampler.wait(self.sampler.request(), self.sampler.stall_s + 5.0)
        gpus, err, _ = self.sampler.latest()
        return gpus, err

    def take_sample(self):
        gpus, err, gpus_at = self.sampler.latest()
        sessions = self.sessions.scan()
        servers = self.procs.scan(gpus, sessions)
        self.watch_session_members(servers)
        self.attach_metrics(servers)
        shown, others = self.sessions_of(servers, sessions)
        return {
            "sampled_at": now(), "gpu_source": self.gpu.name if gpus or not err else "none",
            "gpu_error": err, "gpus": gpus, "gpu_sampled_at": gpus_at,
            "servers": servers, "sessions": shown, "other_sessions": others, "relatives": self.procs.relatives,
        }

    def sessions_of(self, servers, sessions):
        """(our sessions to show, other runs directories' sessions): the recent ones, plus every session a
        live process carries (an old ended one included: it proves that process orphaned), looked up in
        other runs directories when it is not ours (see ``otherruns``)."""
        shown = self.sessions.visible(sessions)
        have = set(s["session_id"] for s in shown)
        wanted: Dict[str, Set[Any]] = {}
        for p in servers:
            sid = p.get("session_id")
            if not sid or p["state"] in ("Z", "X") or sid in have:
                continue
            if sid in sessions:
                shown.append(sessions[sid])
                have.add(sid)
            else:
                wanted.setdefault(sid, set()).add(p.get("run_dir"))
        return sorted(shown, key=lambda s: s["session_id"]), self.other_runs.lookup(wanted) if wanted else []

    def attach_metrics(self, servers):
        """Ship each metrics-exporting launcher's last /metrics text (raw) and ask for a fresh fetch."""
        targets = {}
        for p in servers:
            port = metrics_port(p["argv"], p["framework"]) if p["role"] == "launcher" else None
            if port is not None:
                key = (p["pid"], p["start_ticks"])
                targets[key] = port
                p.update(self.metrics.latest(key) or {"metrics_text": None, "metrics_at": None,
                                                      "metrics_error": "not fetched yet"})
        self.metrics.request(targets)

    def watch_session_members(self, servers):
        """Watch every live process of a session, so each one's end lands in the session's exits.jsonl."""
        self.watcher.tick()
        for p in servers:
            if p["session_id"] and p["role"] != "supervisor" and p["state"] not in ("Z", "X"):
                self.watcher.ensure(p["pid"], p["start_ticks"], p["session_id"], ends_session=False, meta={
                    "role": p["role"], "title": (p["argv"] or [""])[0][:200], "gpus": process_gpus(p),
                    "tp_rank": p.get("tp_rank"), "dp_rank": p.get("dp_rank")})

    # -- ops
    def op_hello(self):
        return {
            "agent_version": AGENT_VERSION, "python": sys.version.split()[0], "hostname": socket.gethostname(),
            "uid": os.getuid(), "user": user_name(os.getuid()), "boot_id": boot_id(), "pid": os.getpid(),
            "gpu_source": self.gpu.name, "gpu_error": self.gpu.error, "clk_tck": CLK_TCK,
            "runs_dir": self.runs_dir, "pidfd": hasattr(os, "pidfd_open"),
        }

    def op_ping(self):
        return now()

    def op_set_interval(self, interval):
        self.interval = max(0.05, float(interval))
        self.next_tick = 0.0
        return self.interval

    def op_sessions(self):
        return sorted(self.sessions.scan().values(), key=lambda s: s["session_id"])

    def op_read_log(self, session_id, offset=None, tail_bytes=None, max_bytes=MAX_LOG_CHUNK, tail_lines=None):
        out = read_log(self.runs_dir, session_id, offset, tail_bytes, max_bytes, tail_lines)
        try:  # when output.log (the file read, by its inode) was last written; never through a symlink
            st = os.lstat(os.path.join(self.runs_dir, session_id, RUN_LOG))
            out["mtime"] = st.st_mtime if st.st_ino == out.get("file") else None
        except OSError:
            out["mtime"] = None
        return out

    def op_follow_log(self, session_id, offset=0, file=None):
        self.logs.follow(session_id, offset, file)
        return True

    def op_unfollow_log(self, session_id):
        self.logs.unfollow(session_id)
        return True

    def op_watch(self, pid, start_ticks=None, session_id=None):
        self.watcher.ensure(int(pid), start_ticks, session_id)
        return True

    def op_port_open(self, port):
        return port_open(int(port))

    def op_port_owner(self, port):
        inode = listening_ports().get(int(port))
        if inode is None:
            return None
        pid = pid_of_socket_inode(inode)
        return {"pid": pid, "argv": proc_cmdline(pid) if pid else None}

    def op_http_get(self, port, path="/health", timeout=5.0):
        """GET on 127.0.0.1:port, the whole request within ``timeout`` s (at most 120): ``{status, body}``; status 0
        when nothing answered in time (``body`` says why: refused, timed out, not HTTP)."""
        if not isinstance(path, str) or not path.startswith("/") or any(c in path for c in "\r\n "):
            raise OpError("bad path %r: an absolute path without spaces" % (path,), "bad_request")
        try:
            status, body, _ = http_get(int(port), path, min(max(float(timeout), 0.1), 120.0), HTTP_BODY_BYTES)
        except HttpError as e:
            return {"status": 0, "body": "%s" % e}
        return {"status": status, "body": body.decode("utf-8", "replace")}

    def op_gpu_samples(self, since=None, until=None, max_points=2000):
        """The host's recent GPU samples (the ring in the runs directory), for reports."""
        return {"points": read_samples(self.runs_dir, since, until, max_points), "error": self.ring.error}

    def op_read_file(self, path, max_bytes=1 << 20):
        """The first ``max_bytes`` (at most 16 MiB) of a regular file (a symlink to one is followed: model
        directories are full of them). Anything else (a FIFO planted as a model's config.json, a device, a
        directory) is refused without reading: opened non-blocking, so a FIFO never holds an agent thread."""
        return {"data": read_regular(os.path.expanduser(path), min(int(max_bytes), 16 << 20)).decode("utf-8",
                                                                                                     "replace")}

    def op_run(self, argv, timeout=60, env=None):
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise OpError("argv must be a non-empty list of strings", "bad_request")
        full_env = dict(os.environ)
        full_env.update(env or {})
        try:
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=float(timeout), env=full_env, check=False)
        except FileNotFoundError:
            raise OpError("cannot execute %r: not found" % argv[0], "not_found")
        except subprocess.TimeoutExpired:
            raise OpError("%r timed out after %ss" % (argv[0], timeout), "timed_out")
        return {"rc": p.returncode, "stdout": p.stdout.decode("utf-8", "replace")[-4 << 20:],
                "stderr": p.stderr.decode("utf-8", "replace")[-1 << 20:]}

    def op_ack(self, session_id, by=None):
        """An operator acknowledged an ended session: ``ack.json`` in its run directory (see runs.py)."""
        return self.sessions.acknowledge(session_id, by)

    def op_vmstat(self):
        return {"oom_kill": read_oom_kill()}

    def op_proc(self, pid):
        st = proc_stat(int(pid))
        if st is None:
            return None
        st["argv"] = proc_cmdline(int(pid))
        st["pid"] = int(pid)
        return st

    def op_foreign_output(self, pid, start_ticks=None, tail_bytes=256 * 1024):
        """A hand-started server's stdout file: ``{pid, start_ticks, path, size, mtime, offset, data}``.

        See ``foreign.py``: only a regular file, never a pipe, terminal or socket."""
        return foreign_output(int(pid), start_ticks, int(tail_bytes))

    def op_kill(self, start_ticks, signal=15, pid=None, pgid=None, session_id=None, pids=None):
        """Signal a process group (checked against its leader's start time) or one process.

        ``pids`` ([[pid, start_ticks], ...]) additionally signals stragglers outside the group. With a
        ``session_id`` only the session's confirmed members are signalled (see ``kill_targets``).
        """
        sig = int(signal)
        done = []
        stop_error = None
        if session_id:
            pid, pgid, pids, stop_error = self.kill_targets(session_id, pid, pgid, pids, sig)
        for what in (pid, pgid):
            if what is not None and int(what) <= 1:
                raise OpError("refusing to signal %s: not a process of a server" % what, "refused")
        if pid is not None:
            st = proc_stat(int(pid))
            if st is None or st["state"] in ("Z", "X"):
                if not pids:
                    raise OpError("no such process %s (already gone)" % pid, "no_such_process")
            elif start_ticks is not None and st["start_ticks"] != int(start_ticks):
                raise OpError("process %s is not the one targeted (start time changed): refusing" % pid, "refused")
            elif pgid is not None:
                if st["pgid"] != int(pgid):
                    raise OpError("process %s left group %s: refusing to signal the group" % (pid, pgid), "refused")
                if int(pgid) in (os.getpgid(0), os.getsid(0)):
                    raise OpError("refusing to signal group %s: it holds the agent" % pgid, "refused")
                try:
                    os.killpg(int(pgid), sig)
                    done.append(-int(pgid))
                except ProcessLookupError:
                    pass
            else:
                try:
                    os.kill(int(pid), sig)
                    done.append(int(pid))
                except ProcessLookupError:
                    pass
        for p, st_ticks in pids or []:
            if int(p) > 1 and st_ticks is not None and proc_alive(int(p), st_ticks):
                try:
                    os.kill(int(p), sig)
                    done.append(int(p))
                except ProcessLookupError:
                    pass
        out = {"signalled": done}
        if stop_error:
            out["stop_request_error"] = stop_error
        return out

    def kill_targets(self, session_id, pid, pgid, pids, sig):
        """What a kill of ``session_id`` may signal: its server and group only when record.json's
        identity is confirmed now (pid, start time, boot id, the session's mark), and of ``pids`` only
        the processes the agent itself attributes to the session, and why the stop request could not be
        recorded on disk (None when it was). Asks the session to stop first (see ``request_stop``). A stale
        or broken record signals nothing: an OpError says why."""
        try:
            d = real_session_dir(self.runs_dir, session_id)
        except OSError as e:
            raise OpError(str(e), "refused")
        self.sessions.forget(session_id)
        s = self.sessions.scan().get(session_id) or {}
        if s.get("broken"):
            raise OpError("session %s is broken (%s): nothing signalled" % (session_id, s["broken"]), "refused")
        if s.get("record_stale"):
            raise OpError("session %s ended (%s): nothing signalled" % (session_id, s["record_stale"]), "refused")
        rec = s.get("record") or {}
        gpus = self.sampler.latest()[0]
        members = set((p["pid"], p["start_ticks"]) for p in self.procs.scan(gpus, {session_id: s})
                      if p["session_id"] == session_id and p["role"] != "supervisor")
        stop_error = None
        if s.get("exit") is None and (members or s.get("server_alive") or s.get("supervisor_alive")):
            stop_error = request_stop(d, rec if s.get("supervisor_alive") else None, sig)
        if not s.get("server_alive") or pid != rec.get("pid"):
            pid = pgid = None  # not confirmed: neither the recorded pid nor its group is signalled
        pids = [[p, t] for p, t in (pids or []) if (int(p), t) in members]
        if pid is None and not pids:
            raise OpError("no such process of session %s (already gone)" % session_id, "no_such_process")
        return pid, pgid, pids, stop_error

    def op_launch(self, spec, env=None, preflight=None):
        return self.launcher.launch(spec, env, preflight)

    def op_prune(self, session_id):
        """Remove a broken run directory of ours (re-checked under the launch lock: see ``Launcher.prune``)."""
        return self.launcher.prune(session_id)


HTTP_BODY_BYTES = 64 * 1024
"""What ``http_get`` returns of a body at most."""


def read_regular(path, limit):
    """At most ``limit`` bytes of ``path`` when it is a regular file; OpError ``refused`` (nothing read) for a FIFO,
    a device, a socket or a directory."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise OpError("no such file: %s" % path, "not_found")
    except PermissionError:
        raise OpError("%s is not readable by the agent's user" % path, "denied")
    if not stat.S_ISREG(st.st_mode):  # never opened: a device's open may act, a FIFO's would wait for a writer
        raise OpError("%s is a %s, not a regular file: not read" % (path, file_kind(st.st_mode)), "refused")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        now_st = os.fstat(fd)
        if not stat.S_ISREG(now_st.st_mode):  # swapped between the look and the open
            raise OpError("%s is a %s, not a regular file: not read" % (path, file_kind(now_st.st_mode)), "refused")
        chunks, size = [], 0
        while size < limit:
            chunk = os.read(fd, min(1 << 20, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class Workers(object):
    """At most ``size`` threads running submitted calls in order, reused: one is started only when more calls
    wait than threads do (and never more than ``size``); they wait for the next call, never end."""

    def __init__(self, size, name):
        self.size, self.name = size, name
        self.jobs: "queue.Queue[Any]" = queue.Queue()
        self.lock = threading.Lock()
        self.threads = 0
        self.waiting = 0

    def submit(self, fn, *args):
        with self.lock:
            self.jobs.put((fn, args))
            if self.jobs.qsize() > self.waiting and self.threads < self.size:
                self.threads += 1
                threading.Thread(target=self._work, name="%s-%d" % (self.name, self.threads), daemon=True).start()

    def _work(self):
        while True:
            with self.lock:
                self.waiting += 1
            fn, args = self.jobs.get()
            with self.lock:
                self.waiting -= 1
            try:
                fn(*args)
            except Exception:
                pass


def request_stop(run_dir, rec, sig):
    """Tell a session an operator stops it, before its server is signalled: ``stop-request.json`` (never through
    a symlink; a failed write leaves no file), and ``STOP_SIGNAL`` to its supervisor (``rec``'s, confirmed by the
    caller; None: none runs), which keeps it in memory for its exit.json whatever the disk says. Returns why the
    file could not be written (None when it was, or already was)."""
    error = None
    data = (json.dumps({"at": now(), "signal": sig}, sort_keys=True) + "\n").encode("utf-8")
    try:
        create_whole(os.path.join(run_dir, RUN_STOP_REQUEST), data)
    except OSError as e:
        error = "%s: %s" % (RUN_STOP_REQUEST, e.strerror or e)
    if rec:
        signal_process(rec.get("supervisor_pid"), rec.get("supervisor_start_ticks"), STOP_SIGNAL)
    return error


def create_whole(path, data):
    """Create ``path`` (0600) holding ``data`` unless something is there already (a file, or a symlink planted to
    redirect the write: ``O_EXCL`` never follows one); False when it was. A write that fails (a full disk) removes
    the file it created, never leaving a zero-byte or torn one, and raises."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        try:
            os.unlink(path)  # ours: O_EXCL created it
        except OSError:
            pass
        raise
    os.close(fd)
    return True


def signal_process(pid, start_ticks, sig):
    """Send ``sig`` to ``pid`` only while it is the process started at ``start_ticks`` (a pidfd holds it between the
    check and the signal where the kernel and Python have one). True when sent."""
    if not isinstance(pid, int) or pid <= 1 or start_ticks is None:
        return False
    pidfd = None
    if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return False
    try:
        if not proc_alive(pid, start_ticks):
            return False
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
        return True
    except OSError:
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)


def main(stdin=None, stdout=None, sources=None):
    """Run the agent on ``stdin``/``stdout`` (line 1 of stdin: the config object); returns the exit status."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    cfg_line = stdin.readline()
    try:
        cfg = json.loads(cfg_line) if cfg_line.strip() else {}
    except ValueError:
        cfg = {}
    try:
        agent = Agent(cfg, stdin, stdout, sources)
    except Exception as e:
        out = getattr(stdout, "buffer", stdout)
        out.write((json.dumps({"type": "fatal", "message": "agent start failed: %s" % e}) + "\n").encode())
        out.flush()
        return 1
    agent.send({"type": "ready", "hello": agent.op_hello()})
    try:
        agent.run()
    except Exception:
        agent.send({"type": "fatal", "message": traceback.format_exc()[-2000:]})
        return 1
    return 0
