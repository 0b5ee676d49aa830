"""Server processes from /proc: launchers, workers, supervisors and every member of a launch session.

Stdlib only, Python >= 3.8; shipped with the agent. A process is classified from its title
(argv) and its place in the process tree, and re-classified whenever its title changes: real
SGLang workers start as ``python -c from multiprocessing.spawn import spawn_main ...
--multiprocessing-fork`` and retitle to ``sglang::scheduler[_DP<d>][_TP<n>]`` seconds later.
The classification is cached by (pid, start time, title hash), never by pid alone. The parent a process had
when first seen is kept too: a parent that dies while the agent watches is reported (``reparented_from``),
the strongest proof that a worker's launcher is gone.

A process's environment (CUDA_VISIBLE_DEVICES, the launch session) is read once and kept: a worker's
retitle writes over its environ area. A worker first seen after its retitle (a slow tick on a busy host)
takes the environment of its nearest ancestor whose own is readable, as a spawned child inherits it,
and is reported with ``env_inherited``.
"""

import hashlib
import os
import re
from typing import Any, Dict, List, Set

from .hostlib import (
    ENV_NAMES,
    RUN_DIR_ENV,
    SESSION_ENV,
    SIM_DIR_ENV,
    proc_cmdline,
    proc_environ,
    proc_stat,
    proc_uid,
    process_started_at,
    user_name,
)

SERVER_PATTERNS = [
    (re.compile(r"^(sglang|sgl_diffusion)::"), "sglang", "worker"),
    (re.compile(r"^VLLM::"), "vllm", "worker"),
    (re.compile(r"(^|\s|/)sglang(\.launch_server|\s+serve)\b|-m\s+sglang\.launch_server"), "sglang", "launcher"),
    (re.compile(r"-m\s+console\.sim\.sglang(\s|$)"), "sglang", "launcher"),
    (re.compile(r"(^|\s|/)vllm(\s+serve|\.entrypoints)"), "vllm", "launcher"),
    (re.compile(r"-m\s+sglang_router\.launch_server\b"), "sglang", "launcher"),  # router + its own workers
    (re.compile(r"-m\s+dynamo\.sglang(\.\w+)*(\s|$)"), "sglang", "launcher"),  # a Dynamo SGLang worker
    (re.compile(r"sglang\.(srt|data_parallel|bench)"), "sglang", "worker"),
]
"""(title pattern, framework, role), first match wins."""

SPAWN_CHILD = re.compile(r"multiprocessing\.spawn|--multiprocessing-fork")
"""A multiprocessing 'spawn' child before it retitles: under a launcher, a worker from its start."""

RESOURCE_TRACKER = re.compile(r"multiprocessing\.resource_tracker")
"""multiprocessing's resource tracker, a child of every launcher that uses 'spawn': shown as 'other'."""

ENV_ANCESTORS = 8
"""How far up the tree a process whose own environ is unreadable takes its environment from."""

MAX_ANCESTRY = 32
"""How far up from a server process its ancestors are reported (pid 1 is reached long before on real hosts)."""
TITLE_CHARS = 240
"""A relative's command line is cut to this many characters (it only names the process)."""

TP_RANK = re.compile(r"_TP(\d+)(?!\d)")
DP_RANK = re.compile(r"_DP(\d+)(?!\d)")


def classify_title(argv, runs_dir=None):
    """(framework, role) of a process from its argv alone; role None when nothing matched."""
    line = " ".join(argv)
    for rx, fw, role in SERVER_PATTERNS:
        if rx.search(line):
            return fw, role
    if "supervisor" in line and ("mtpconsole" in line or (runs_dir and runs_dir in line)):
        return "unknown", "supervisor"
    return "unknown", None


def title_ranks(argv):
    """(dp_rank, tp_rank) from an SGLang worker title (``sglang::scheduler_DP1_TP3``), None where absent.

    SGLang names the TP rank only when tp > 1: a plain ``sglang::scheduler`` is rank 0.
    """
    if not argv or not argv[0].startswith("sglang::scheduler"):
        return None, None
    dp, tp = DP_RANK.search(argv[0]), TP_RANK.search(argv[0])
    return (int(dp.group(1)) if dp else None), (int(tp.group(1)) if tp else 0)


def _digest(argv):
    return hashlib.sha1("\0".join(argv).encode("utf-8", "replace")).hexdigest()


class ProcScanner(object):
    """Scans /proc each tick; keeps per-process facts between ticks (keyed by identity and title)."""

    def __init__(self, runs_dir, sim_scope=None):
        self.runs_dir = runs_dir
        self.sim_scope = sim_scope
        # pid -> {"start", "comm", "digest", "argv", "fw", "role", "env", "env_inherited", "uid"}
        self.cache: Dict[int, Dict[str, Any]] = {}
        self.hot: Set[int] = set()  # pids reported last tick: their titles are re-read every tick
        self.relatives: List[Dict[str, Any]] = []  # see relatives_of: refreshed by every scan

    def _info(self, pid, st):
        """The cached facts of ``pid``, refreshed when it is new, restarted, retitled or reported."""
        prev = self.cache.get(pid)
        if prev is not None and prev["start"] != st["start_ticks"]:
            prev = None  # a new process under a reused pid: nothing carries over
        if prev is not None and prev["comm"] == st["comm"] and pid not in self.hot:
            return prev
        argv = proc_cmdline(pid)
        if argv is None:
            argv = prev["argv"] if prev is not None else []
        digest = _digest(argv)
        if prev is not None and prev["digest"] == digest:
            prev["comm"] = st["comm"]
            return prev
        fw, role = classify_title(argv, self.runs_dir)
        info = {"start": st["start_ticks"], "comm": st["comm"], "digest": digest, "argv": argv,
                "fw": fw, "role": role, "env": prev["env"] if prev is not None else None,
                "env_inherited": prev.get("env_inherited", False) if prev is not None else False,
                "uid": prev["uid"] if prev is not None else proc_uid(pid),
                "parent0": prev["parent0"] if prev is not None else None}
        return info

    def first_parents(self, stats, cache):
        """Remember, once per process, the parent it had when the agent first saw it (pid, start, title)."""
        for pid, info in cache.items():
            if info["parent0"] is None:
                ppid = stats[pid]["ppid"]
                par = cache.get(ppid)
                info["parent0"] = (ppid, stats[ppid]["start_ticks"] if ppid in stats else None,
                                   par["argv"] if par is not None else [])

    @staticmethod
    def reparented_from(pid, stats, cache):
        """The parent the agent saw die under ``pid`` (a ProcRef dict), or None: a process's parent changes only
        when its parent dies and init or a subreaper adopts it, so a changed ppid proves its starter is gone."""
        first = cache[pid]["parent0"]
        if first is None:
            return None
        ppid0, start0, argv0 = first
        now_parent = stats.get(ppid0)
        if stats[pid]["ppid"] == ppid0 and now_parent is not None and now_parent["start_ticks"] == start0:
            return None
        if now_parent is not None and now_parent["start_ticks"] == start0 and now_parent["state"] not in ("Z", "X"):
            return None  # its first parent still lives: no death seen
        return {"pid": ppid0, "start_ticks": start0 or 0, "state": "X",
                "argv": [" ".join(argv0)[:TITLE_CHARS]] if argv0 else []}

    def scan(self, gpus, sessions):
        """Server processes as dicts (see ``console.model.ServerProc``)."""
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = proc_stat(int(name))
                if st is not None:
                    stats[int(name)] = st
        gpu_mem: Dict[int, Dict[int, int]] = {}
        for g in gpus:
            for p in g.get("procs") or []:
                gpu_mem.setdefault(p["pid"], {})[g["index"]] = p.get("used_mib") or 0
        children: Dict[int, List[int]] = {}
        for pid, st in stats.items():
            children.setdefault(st["ppid"], []).append(pid)
        cache = {}
        for pid, st in stats.items():
            cache[pid] = self._info(pid, st)
        self.first_parents(stats, cache)

        def descendants(root):
            out, stack = [], list(children.get(root, []))
            while stack:
                p = stack.pop()
                out.append(p)
                stack.extend(children.get(p, []))
            return out

        def env_of(pid):
            """(environment, inherited): the process's own, else its nearest ancestor's (see module doc).

            Either is kept with the process's facts: an overwritten environ does not come back, so it is read
            once, not every tick."""
            p = pid
            for depth in range(ENV_ANCESTORS + 1):
                info = cache.get(p)
                if info is None:
                    break
                if info["env"] is None:
                    info["env"] = proc_environ(p, ENV_NAMES)
                if info["env"] is not None:
                    if depth > 0:
                        cache[pid]["env"], cache[pid]["env_inherited"] = info["env"], True
                    return info["env"], cache[pid]["env_inherited"]
                p = stats[p]["ppid"]
            return {}, False

        under: Dict[int, str] = {}  # pid -> session id, for every descendant of a live session's supervisor
        launchers = set(pid for pid, info in cache.items() if info["role"] == "launcher")
        for s in sessions.values():
            rec = s.get("record") or {}
            # only a confirmed supervisor (pid, start time, boot id and run dir match: rundir.confirm_record)
            # has the session's processes below it: a stale record's pid may be anybody's, pid 1 included
            if rec and not s.get("exit") and s.get("supervisor_alive"):
                for p in descendants(rec.get("supervisor_pid")):
                    under.setdefault(p, s["session_id"])
            if rec and not s.get("exit") and s.get("server_alive") and rec["pid"] in cache:  # confirmed too
                launchers.add(rec["pid"])  # what a session's supervisor started is its launcher
        family: Dict[int, str] = {}  # pid -> framework of the launcher it descends from
        for pid in launchers:
            for p in descendants(pid):
                family.setdefault(p, cache[pid]["fw"])
        out = []
        for pid, st in stats.items():
            info = cache[pid]
            fw, role = info["fw"], info["role"]
            if role is None and pid in launchers:
                role = "launcher"
            if pid in family:
                fw = family[pid] if fw == "unknown" else fw
                if role is None:
                    line = " ".join(info["argv"])
                    role = "worker" if SPAWN_CHILD.search(line) else "other" if RESOURCE_TRACKER.search(line) else None
            if role is None and pid not in under and pid not in gpu_mem:
                continue
            envd, inherited = env_of(pid)
            if self.sim_scope and role != "supervisor" and envd.get(SIM_DIR_ENV) != self.sim_scope:
                continue  # a simulated host sees only the processes of its own simulation
            dp, tp = title_ranks(info["argv"])
            out.append({
                "pid": pid, "ppid": st["ppid"], "pgid": st["pgid"], "sid": st["sid"],
                "start_ticks": info["start"], "started_at": process_started_at(info["start"]),
                "state": st["state"], "uid": info["uid"],
                "user": user_name(info["uid"]), "argv": info["argv"], "role": role or "other", "framework": fw,
                "cuda_visible_devices": envd.get("CUDA_VISIBLE_DEVICES"),
                "session_id": envd.get(SESSION_ENV) or under.get(pid), "run_dir": envd.get(RUN_DIR_ENV),
                "gpu_mem_mib": dict((str(k), v) for k, v in gpu_mem.get(pid, {}).items()),
                "rss_kib": st["rss_kib"], "tp_rank": tp, "dp_rank": dp, "env_inherited": inherited,
                "reparented_from": self.reparented_from(pid, stats, cache),
            })
        self.relatives = relatives_of(out, stats, cache)
        self.cache = cache
        self.hot = set(p["pid"] for p in out)
        return out


def relatives_of(servers, stats, cache):
    """The parents, ancestors (up to pid 1) and live process-group leaders of ``servers`` that are not
    among them, as ``console.model.ProcRef`` dicts: whoever started a server process, recognised or not.

    A verdict such as "orphan" needs these facts positively (a wrapper script or a router that started the
    workers is alive, pid 1 is an init, a group leader is alive), never the absence of a pattern match."""
    listed = set(p["pid"] for p in servers)
    want = []
    for p in servers:
        cur = p["ppid"]
        for _ in range(MAX_ANCESTRY):
            if cur <= 0 or cur not in stats:
                break
            want.append(cur)
            cur = stats[cur]["ppid"]
        if p["pgid"] != p["pid"] and p["pgid"] in stats:
            want.append(p["pgid"])
    out, seen = [], set()
    for pid in want:
        if pid in listed or pid in seen:
            continue
        seen.add(pid)
        st, info = stats[pid], cache.get(pid) or {}
        argv = info.get("argv") or []
        if sum(len(a) for a in argv) > TITLE_CHARS:
            argv = [" ".join(argv)[:TITLE_CHARS]]
        out.append({"pid": pid, "ppid": st["ppid"], "pgid": st["pgid"], "sid": st["sid"],
                    "start_ticks": st["start_ticks"], "state": st["state"], "uid": info.get("uid"),
                    "argv": argv, "role": info.get("role")})
    return out
