"""Immutable data models shared by the data layer, the CLI and the UI.

Everything that crosses a boundary (agent -> console, console -> UI, CLI --json output)
is one of these frozen pydantic models. The agent itself is stdlib-only and speaks plain
JSON; :meth:`HostSnapshot.from_agent` and friends validate what it sends.

Identity rules: a process is (pid, start_ticks) where ``start_ticks`` is field 22 of
``/proc/<pid>/stat``; a session is (host, session_id). Nothing keys on a name.

Longer than ~400 lines on purpose: every boundary model lives here, once (one definition per fact);
splitting by layer would invite copies.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

DEFAULT_SERVER_COMMAND: tuple[str, ...] = ("python3", "-m", "sglang.launch_server")
"""The server command a host launches (and whose flags are learned) when its config names none."""
DEFAULT_PORT = 30000
"""SGLang's own default ``--port``: a server started without one listens there."""

SPECULATIVE_ALGORITHMS: tuple[str, ...] = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK",
                                          "UNO", "FROZEN_KV_MTP")
"""SGLang 0.5.23's built-in speculative algorithms (``SpeculativeAlgorithm`` in
``srt/speculative/spec_info.py``; NEXTN is an alias of EAGLE; names are matched case-insensitively;
plugins may register more). The one list: the planner, the flag form and the flag checker use it."""


class Frozen(BaseModel):
    """Base for every boundary model: immutable, unknown keys ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)


# ---------------------------------------------------------------- GPUs

GpuSourceName = Literal["nvml", "nvidia-smi", "sim", "none"]


class GpuProc(Frozen):
    """A compute process as the GPU driver lists it."""

    pid: int
    used_mib: int | None = None
    name: str | None = None


class GpuSample(Frozen):
    """One GPU at one instant. ``None`` means the driver could not tell (N/A)."""

    index: int
    uuid: str | None = None
    name: str | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    util_pct: float | None = None
    mem_used_mib: int | None = None
    mem_total_mib: int | None = None
    mem_reserved_mib: int | None = None
    """Memory the driver reserves for itself (NVML v2), not usable by processes; None if unknown."""
    temp_c: float | None = None
    procs: list[GpuProc] = Field(default_factory=list)
    errors: dict[str, str] = Field(default_factory=dict)
    """Field name -> why it is missing ("not supported", "permission denied", ...)."""
    throttle_reasons: list[str] | None = None
    """NVML clock event reasons active now (``sw_power_cap``, ``hw_slowdown``, ...); None if unknown."""

    @property
    def mem_free_mib(self) -> int | None:
        if self.mem_used_mib is None or self.mem_total_mib is None:
            return None
        return self.mem_total_mib - self.mem_used_mib - (self.mem_reserved_mib or 0)


# ---------------------------------------------------------------- processes

ProcRole = Literal["launcher", "worker", "supervisor", "other"]
Framework = Literal["sglang", "vllm", "unknown"]


class ProcRef(Frozen):
    """A process that is no server process itself but is the parent, an ancestor or the process-group leader
    of one (a wrapper script, a router, a shell, init): what a verdict about that server process may need."""

    pid: int
    ppid: int = 0
    pgid: int = 0
    sid: int | None = None
    start_ticks: int = 0
    state: str = "?"
    uid: int | None = None
    argv: list[str] = Field(default_factory=list)
    role: ProcRole | None = None
    """What the agent recognised it as (launcher, supervisor, ...), None when no pattern matched: a live
    process that no pattern matched is still a live process."""

    @property
    def title(self) -> str:
        return " ".join(self.argv) if self.argv else f"[{self.pid}]"

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


class ServerProc(Frozen):
    """A server-related process read from /proc on the host."""

    pid: int
    ppid: int
    pgid: int
    sid: int | None = None
    start_ticks: int
    """Field 22 of /proc/<pid>/stat: with pid, the process identity."""
    started_at: float | None = None
    """When the process started (host clock, epoch seconds: boot time + start ticks), None when unknown: a
    hand-started server's uptime."""
    state: str = "?"
    """/proc state letter (R, S, D, Z, ...). Z is dead."""
    user: str | None = None
    uid: int | None = None
    argv: list[str] = Field(default_factory=list)
    role: ProcRole = "other"
    framework: Framework = "unknown"
    cuda_visible_devices: str | None = None
    """From /proc/<pid>/environ where readable; None if unreadable or unset."""
    env_inherited: bool = False
    """``cuda_visible_devices`` and ``session_id`` are the nearest ancestor's: this process's own environ was
    overwritten by its retitle before the agent first read it (a spawned worker inherits its parent's)."""
    session_id: str | None = None
    """MTPCONSOLE_SESSION from the environment: set for processes we launched."""
    reparented_from: ProcRef | None = None
    """The parent this process had when the agent first saw it, seen to die since (the process was adopted by
    init or a subreaper): positive proof that whoever started it is gone."""
    run_dir: str | None = None
    """MTPCONSOLE_RUN_DIR from the environment: the run directory of ``session_id`` as its launch wrote it
    (possibly another console's runs directory)."""
    gpu_mem_mib: dict[int, int] = Field(default_factory=dict)
    """GPU index -> MiB attributed by the driver to this pid."""
    rss_kib: int | None = None
    tp_rank: int | None = None
    """From an SGLang scheduler's title (``sglang::scheduler_TP<n>``; a plain ``sglang::scheduler`` is 0)."""
    dp_rank: int | None = None
    """From an SGLang scheduler's title (``sglang::scheduler_DP<d>_TP<n>``)."""
    metrics_text: str | None = None
    """A launcher started with ``--enable-metrics``: the raw Prometheus text of its ``/metrics`` (fetched
    by the agent off its loop, at most 2 MiB within 0.5 s; never parsed on the host)."""
    metrics_at: float | None = None
    """When ``metrics_text`` was fetched (host clock)."""
    metrics_error: str | None = None
    """Why the last fetch gave no text (refused, timed out, HTTP status), else None."""
    metrics_truncated: bool = False

    @property
    def title(self) -> str:
        return " ".join(self.argv) if self.argv else f"[{self.pid}]"

    @property
    def alive(self) -> bool:
        return self.state != "Z"


# ---------------------------------------------------------------- sessions

class LaunchSpec(Frozen):
    """What to start, as data. Env *values* never live here: only their names.

    ``argv`` is executed without a shell on the host.
    """

    session_id: str
    argv: list[str]
    env_names: list[str] = Field(default_factory=list)
    gpus: list[int] = Field(default_factory=list)
    port: int | None = None
    cwd: str | None = None
    launched_by: str | None = None
    console_version: str | None = None
    created_at: float | None = None
    profile: str | None = None
    replaces: str | None = None
    """Session id this launch relaunches, if any."""
    deployment: str | None = None
    """The deployment (``[deployments.NAME]``) this session belongs to, if any: membership lives here and in the
    gateway's worker list, never in the config's GPUs (issue 29)."""
    deployment_role: Literal["replica", "gateway"] | None = None
    replica: int | None = None
    """The replica index within the deployment (a roll's new replica takes its old one's)."""
    group: str | None = None
    """The multi-node group this session is a member of (issue 30: ``console.core.group``), if any."""
    node_rank: int | None = None
    """This member's ``--node-rank`` within its group."""
    nnodes: int | None = None
    group_hosts: list[str] | None = None
    """The group's hosts, in rank order, as the launching console named them."""
    group_kill_on_failure: bool | None = None
    """False: the group was launched with ``--no-kill-on-failure`` (no console applies the failure policy to it);
    None or True: the policy applies (a member died: the rest are killed)."""
    log_cap_mb: float | None = None
    """output.log's cap in MiB (the host's ``log_cap_mb``, filled in by the agent); None: no cap."""


class SupervisorRecord(Frozen):
    """Written atomically by the supervisor once the server is spawned (record.json)."""

    supervisor_pid: int
    supervisor_start_ticks: int | None = None
    pid: int
    pgid: int
    start_ticks: int
    started_at: float
    boot_id: str | None = None


class ExitRecord(Frozen):
    """Written atomically by the supervisor when the server has ended (exit.json)."""

    exit_code: int | None = None
    signal: int | None = None
    ended_at: float
    stopped_by_operator: bool = False
    oom_kill_before: int | None = None
    oom_kill_after: int | None = None
    leftovers_killed: list[int] = Field(default_factory=list)
    error: str | None = None
    """Set when the server could not even be started (exec failure)."""

    @property
    def host_oom_killed(self) -> bool:
        return (
            self.oom_kill_before is not None
            and self.oom_kill_after is not None
            and self.oom_kill_after > self.oom_kill_before
        )


class ProcessExit(Frozen):
    """The end of one process of a launch session (a line of the run directory's ``exits.jsonl``).

    Written by the agent for every member it watched (role, GPUs, OOM counter; the code or signal
    when it read the zombie before its parent reaped it, else ``how="gone"``) and by the supervisor for
    what it reaped itself (the server, orphans: code or signal always known) and the leftovers it killed;
    merged per process (``watch.merge_exits``).
    """

    pid: int
    start_ticks: int | None = None
    at: float | None = None
    """When the end was seen on the host (the agent's pidfd fires at once)."""
    exit_code: int | None = None
    signal: int | None = None
    how: Literal["exited", "signal", "gone"] = "gone"
    role: str | None = None
    """launcher / worker / resource_tracker / other, as the agent or the supervisor classified the process."""
    title: str | None = None
    gpus: list[int] = Field(default_factory=list)
    tp_rank: int | None = None
    dp_rank: int | None = None
    oom_kill_delta: int | None = None
    """How much /proc/vmstat's oom_kill grew between the agent's last tick and this end (>0: OOM killer)."""
    after_stop_request: bool = False
    """The operator had asked the session to stop: an expected end, never 'abnormal'."""
    source: str | None = None
    server: bool = False
    """This is the session's server itself (the process the supervisor started: the launcher)."""
    launcher_alive: bool | None = None
    """Whether the session's launcher still ran when this end was seen: True proves this process ended first;
    False, that it ended after the launcher; None: unknown (an older run directory) or the launcher itself."""
    killed_by_supervisor: bool = False
    """A leftover the supervisor SIGKILLed after the launcher ended: never the first death."""
    followers: list[ProcessExit] = Field(default_factory=list)
    """On a session's first abnormal exit only: the server processes that ended after it, in order."""
    followers_left_out: int = 0

    @property
    def abnormal(self) -> bool:
        if self.after_stop_request or self.killed_by_supervisor:
            return False
        return bool(self.signal) or self.exit_code not in (None, 0) or (self.oom_kill_delta or 0) > 0

    def who(self) -> str:
        """The process in an operator's words: ``the launcher``, ``the TP1 worker``, ``the detokenizer``..."""
        title = self.title or ""
        if self.role == "launcher" or self.server:
            return "the launcher"
        if "detokenizer" in title:
            return "the detokenizer"
        if self.role == "worker":
            if self.tp_rank is None:
                return "a worker"
            return f"the TP{self.tp_rank} worker" if self.dp_rank is None else \
                f"the DP{self.dp_rank} TP{self.tp_rank} worker"
        if self.role == "resource_tracker":
            return "multiprocessing's resource tracker"
        return "a helper process" if self.role == "other" else "a process"

    def how_ended(self) -> str:
        """E.g. ``was killed by SIGKILL``, ``exited with code 1``."""
        import signal as _signal

        if self.signal:
            try:
                name = _signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            what = f"was killed by {name}"
        elif self.exit_code is not None:
            what = f"exited with code {self.exit_code}"
        else:
            what = "ended (exit status unknown)"
        if (self.oom_kill_delta or 0) > 0:
            what += " while the kernel's OOM killer fired"
        return what

    def describe(self) -> str:
        """E.g. ``the TP1 worker (pid 4242, GPU 1) was killed by SIGKILL``; a leftover says who killed it."""
        where = f"pid {self.pid}" + (f", GPU {','.join(map(str, self.gpus))}" if self.gpus else "")
        if self.killed_by_supervisor:
            return f"{self.who()} ({where}) was killed by the supervisor as a leftover after the launcher died"
        what = self.how_ended()
        if self.launcher_alive is False and not self.server and self.role != "launcher":
            what += " after the launcher ended"
        return f"{self.who()} ({where}) {what}"

    def cause_line(self) -> str:
        """The first death and what followed it, e.g. ``the launcher (pid 10) was killed by SIGKILL; then the
        TP0 worker (pid 11, GPU 0) and the detokenizer (pid 12) were killed by SIGKILL; killed by the supervisor
        as a leftover after the launcher died: the TP1 worker (pid 13)``."""
        parts = [self.describe()]
        groups: list[tuple[str, list[str]]] = []  # consecutive followers that ended the same way
        for f in self.followers:
            if f.killed_by_supervisor:
                continue
            name = f"{f.who()} (pid {f.pid}{', GPU ' + ','.join(map(str, f.gpus)) if f.gpus else ''})"
            if groups and groups[-1][0] == f.how_ended():
                groups[-1][1].append(name)
            else:
                groups.append((f.how_ended(), [name]))
        for i, (how, names) in enumerate(groups):
            if len(names) > 1:
                how = how.replace("was killed", "were killed", 1)
            parts.append(("then " if i == 0 else "") + self.join_names(names) + " " + how)
        killed = [f"{f.who()} (pid {f.pid})" for f in self.followers if f.killed_by_supervisor]
        if killed:
            parts.append("killed by the supervisor as " + ("leftovers" if len(killed) > 1 else "a leftover")
                         + " after the launcher died: " + self.join_names(killed))
        if self.followers_left_out:
            parts.append(f"{self.followers_left_out} more processes ended after")
        return "; ".join(parts)

    @staticmethod
    def join_names(names: list[str]) -> str:
        """``a``, ``a and b``, ``a, b and c``."""
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


class SessionInfo(Frozen):
    """A run directory on the host, as the agent reads it."""

    session_id: str
    run_dir: str
    spec: LaunchSpec | None = None
    record: SupervisorRecord | None = None
    exit: ExitRecord | None = None
    acknowledged_at: float | None = None
    """When an operator acknowledged this ended session (``ack.json`` in its run directory)."""
    log_size: int = 0
    server_alive: bool = False
    supervisor_alive: bool = False
    stop_requested: bool = False
    broken: str | None = None
    """Why this run directory cannot be trusted (a file too large, too deep, of the wrong type, not a
    regular file; no record ever written: a full disk, an agent killed mid-launch; another user's): the
    session is listed with the reason, its files are not used, it holds no GPU or port."""
    untrusted: bool = False
    """The run directory is another user's (not owned by the agent's user, or writable by others): listed as
    FOREIGN, never read, never a session of this console (``broken`` says whose)."""
    owner_uid: int | None = None
    """The uid owning the run directory (None when unread): a session proves something about a process
    only when both belong to one user."""
    record_stale: str | None = None
    """Why record.json no longer names this session's processes (the host rebooted; the recorded pids now
    belong to other processes): the session has ended, and nothing it names may be signalled."""
    exits: list[ProcessExit] = Field(default_factory=list)
    """Ends of the session's processes so far, oldest first (see :class:`ProcessExit`)."""
    first_abnormal_exit: ProcessExit | None = None
    """The earliest end that was a failure (signal, non-zero code, OOM kill), not after a stop request:
    the first death decides the cause."""


# ---------------------------------------------------------------- the wire: the agent's replies and pushes
# One model per reply of an op (``console/link/client.py`` returns them) and per pushed message.


class AgentHello(Frozen):
    """The agent's ``hello``: who and where it runs."""

    agent_version: int | None = None
    python: str | None = None
    hostname: str | None = None
    uid: int | None = None
    user: str | None = None
    boot_id: str | None = None
    pid: int | None = None
    gpu_source: str | None = None
    gpu_error: str | None = None
    clk_tck: int | None = None
    runs_dir: str | None = None
    pidfd: bool = False


class ProcInfo(Frozen):
    """One process as ``/proc/<pid>/stat`` and ``cmdline`` read it now (the ``proc`` op)."""

    pid: int
    comm: str = ""
    state: str = "?"
    ppid: int = 0
    pgid: int = 0
    sid: int | None = None
    start_ticks: int
    rss_kib: int | None = None
    wait_status: int | None = None
    """A zombie's raw wait status (0 while it runs)."""
    argv: list[str] | None = None
    """None when the command line could not be read (gone, another user's)."""

    @property
    def alive(self) -> bool:
        """Running (not a zombie, not dead)."""
        return self.state not in ("Z", "X")

    def same(self, start_ticks: int | None) -> bool:
        """Still the process of ``start_ticks`` (None: any), and alive."""
        return self.alive and (start_ticks is None or self.start_ticks == start_ticks)


class LogChunk(Frozen):
    """Bytes of a session's ``output.log``: a ``read_log`` reply or a pushed ``log`` message.

    ``offset``/``end`` are byte offsets of the file whose inode is ``file`` (``end`` is where the next read
    starts; the text was decoded with replacement, so its length is no offset)."""

    session_id: str
    offset: int = 0
    end: int = 0
    size: int | None = None
    """The file's size when read (``read_log`` only)."""
    file: int | None = None
    data: str = ""
    capped: bool = False
    """A ``tail_lines`` read stopped at ``cap_bytes`` before it had the lines asked for."""
    cap_bytes: int | None = None
    previous_bytes: int | None = None
    """How much of ``data`` came from ``output.log.1`` (a tail reaching back over a rotation)."""
    mtime: float | None = None
    """When the file was last written (host clock, ``read_log`` only)."""

    @property
    def lines(self) -> list[str]:
        return self.data.splitlines()


class Signalled(Frozen):
    """What a ``kill`` signalled: pids, and process groups as negative numbers."""

    signalled: list[int] = Field(default_factory=list)
    stop_request_error: str | None = None
    """Why ``stop-request.json`` could not be written (a full disk); the signals were sent all the same, and the
    session's supervisor was told of the stop by signal. None when it was recorded."""


class PortOwner(Frozen):
    """Who listens on a port (``port_owner``); ``pid`` None when the socket's process is not visible."""

    pid: int | None = None
    argv: list[str] | None = None


class HttpResult(Frozen):
    """A GET on 127.0.0.1 of the host (``http_get``): status 0 when it did not connect (``body`` says why)."""

    status: int = 0
    body: str = ""


class RunResult(Frozen):
    """A command run on the host without a shell (``run``)."""

    rc: int = -1
    stdout: str = ""
    stderr: str = ""


class GpuPoint(Frozen):
    """One GPU reading from the host's sample ring."""

    at: float
    gpu: int
    power_w: float | None = None
    power_limit_w: float | None = None
    mem_used_mib: int | None = None
    mem_total_mib: int | None = None
    util_pct: float | None = None


class GpuSamples(Frozen):
    """The host's recent GPU readings (``gpu_samples``); ``error`` when the ring cannot be written."""

    points: list[GpuPoint] = Field(default_factory=list)
    error: str | None = None


class VmStat(Frozen):
    """The kernel's OOM-kill counter (``vmstat``; None where /proc/vmstat has none)."""

    oom_kill: int | None = None


class PreflightCheck(Frozen):
    """One of the host's launch checks: ``ok`` None when it could not be judged (skipped)."""

    name: str
    ok: bool | None = None
    detail: str = ""


class Pruned(Frozen):
    """What a ``prune`` removed: a broken run directory and the names it held."""

    session_id: str
    run_dir: str
    removed: list[str] = Field(default_factory=list)
    """The entries of the run directory, removed with it."""
    reason: str = ""
    """Why it was broken."""


class LaunchResult(Frozen):
    """A ``launch`` reply: the new session as scanned (None for ``check_only``) and the host's checks."""

    session: SessionInfo | None = None
    preflight: list[PreflightCheck] = Field(default_factory=list)


class ForeignOutput(Frozen):
    """A hand-started server's stdout file (``foreign_output``): its path, size, last write (host clock)
    and last ``tail_bytes`` from ``offset`` (a partial first line dropped)."""

    pid: int
    start_ticks: int
    path: str
    size: int
    mtime: float
    offset: int = 0
    data: str = ""

    @property
    def lines(self) -> list[str]:
        return self.data.splitlines()


class ExitEvent(Frozen):
    """A watched process ended (pushed ``exit``): code and signal None when unknown (not our child)."""

    kind: Literal["exit"] = "exit"
    pid: int
    start_ticks: int | None = None
    at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    session_id: str | None = None


class SessionEnded(Frozen):
    """A session's server ended (pushed once ``exit.json`` is in, or its wait ran out: ``exit`` None)."""

    kind: Literal["session_ended"] = "session_ended"
    session_id: str
    exit: ExitRecord | None = None

    @field_validator("exit", mode="before")
    @classmethod
    def _exit_or_none(cls, v: Any) -> Any:
        """An exit record that is not one (no end time, malformed) reads as unknown, not as a lost event."""
        if v is None:
            return None
        try:
            return ExitRecord.model_validate(v)
        except ValidationError:
            return None


class LogTruncated(Frozen):
    """A followed ``output.log`` shrank (truncated by hand): it is followed from 0 again."""

    kind: Literal["log_truncated"] = "log_truncated"
    session_id: str
    size: int | None = None
    at: float | None = None


class LogRotated(Frozen):
    """A followed log was rotated: the old segment was read to its end (unless ``dropped``), the new one,
    inode ``file``, is followed from 0."""

    kind: Literal["log_rotated"] = "log_rotated"
    session_id: str
    file: int | None = None
    dropped: bool = False
    at: float | None = None


class AgentError(Frozen):
    """The agent survived a failure it wants logged (``error``), or died of one (``fatal``)."""

    kind: Literal["error", "fatal"] = "error"
    message: str = ""


AgentEvent = Annotated[ExitEvent | SessionEnded | LogTruncated | LogRotated | AgentError,
                       Field(discriminator="kind")]
"""What the agent pushes besides samples and log chunks."""


SessionState = Literal[
    "idle", "launching", "loading", "ready", "failed", "stopping", "stopped",
    "foreign", "stale", "unreachable",
]

FailureCause = Literal[
    "gpu_oom", "host_oom_killed", "port_in_use", "model_not_found", "import_error",
    "nccl_error", "bad_flags", "cuda_driver", "signal_killed", "spec_decode_error", "other",
    "cuda_graph", "warmup_failed", "watchdog_timeout",
]


class ServeMetrics(Frozen):
    """The latest serving figures read from a log or /metrics."""

    gen_throughput: float | None = None
    accept_len: float | None = None
    running_req: int | None = None
    queue_req: int | None = None
    token_usage: float | None = None


class Figure(Frozen):
    """One serving figure with where it came from and when it was read (its age is now - at)."""

    value: float
    source: Literal["metrics", "log"]
    at: float


class ServingFigures(Frozen):
    """A server's serving figures, each from ``/metrics`` or the log (None: not known)."""

    gen_throughput: Figure | None = None
    """Generated tokens per second."""
    running: Figure | None = None
    queue: Figure | None = None
    token_usage: Figure | None = None
    """KV-cache usage, 0..1."""
    accept_length: Figure | None = None
    """Speculative decoding: mean accepted tokens per step."""
    accept_rate: Figure | None = None
    spec_steps: Figure | None = None
    """Speculative steps the server runs now (``sglang:spec_num_steps``): the flag's value, or an adaptive
    server's current choice (``--speculative-adaptive``)."""
    ttft_s: Figure | None = None
    """Mean time to first token since the server started (histogram sum / count)."""
    itl_s: Figure | None = None
    """Mean inter-token latency since the server started."""
    retracted_total: Figure | None = None


class Suggestion(Frozen):
    """A flag change the advisor proposes, with what checked it."""

    flags: list[str] = Field(default_factory=list)
    """The server flags to launch with (the whole set, ready for ``e``/relaunch)."""
    change: str = ""
    """The change in words, e.g. ``--max-running-requests 48 -> 96``."""
    valid: bool | None = None
    """The flag validator's verdict on ``flags`` (None: not checked)."""
    planner: str = ""
    """The memory planner's verdict, or why it could not check (no model config)."""


class Advice(Frozen):
    """One piece of advice about a server on a GPU, with the evidence behind it."""

    host: str
    gpu: int | None = None
    session_id: str | None = None
    pid: int | None = None
    kind: str
    message: str
    evidence: list[str] = Field(default_factory=list)
    suggestion: Suggestion | None = None


class Classification(Frozen):
    """Result of classifying a session's log (plus its exit record)."""

    state: Literal["ready", "loading", "failed", "stopped"]
    """``stopped``: the log (or the exit record) shows an operator's stop and no crash before it."""
    cause: FailureCause | None = None
    line: str | None = None
    """The decisive log line; with no failure line in the log, a sentence saying so and what ended the server
    (``no failure line in the log; the launcher (pid 7) was killed by SIGKILL``)."""
    hint: str | None = None
    metrics: ServeMetrics | None = None
    line_in_log: bool = False
    """``line`` is a line of the log (a failure's decisive line, the ready or stop line); False: the classifier's
    own sentence (what the exit record or the first death shows) or no line."""
    runs_skipped: int = 0
    """Earlier server runs in the log that were not read: only the last run (from its start banner) decides."""
    run_started_line: str | None = None
    """The start banner of the run that was read, when earlier runs were skipped."""


# ---------------------------------------------------------------- steps

StepState = Literal["pending", "running", "ok", "failed", "skipped", "warning"]
"""``warning``: passed, but only because the operator overrode a check (a forced launch that does not fit)."""


class Step(Frozen):
    """One confirmation step of an operation, as data (the CLI prints it, the UI draws it)."""

    name: str
    state: StepState = "pending"
    started_at: float | None = None
    elapsed_s: float | None = None
    evidence: str | None = None
    """What proved it (the pid, the log line, the HTTP code) or why it failed."""
    phase: Literal["kill", "launch"] | None = None
    """The operation part it belongs to: a relaunch's steps are its kill's, then its launch's."""


ABORTED = "aborted by the operator"
"""What a launch reports when an operator stopped its session while it was under way (:attr:`OperationResult.aborted`)."""


class OperationResult(Frozen):
    """Outcome of launch / kill / relaunch."""

    op: Literal["launch", "kill", "relaunch", "preflight", "deploy-roll"]
    host: str
    ok: bool
    session_id: str | None = None
    state: SessionState | None = None
    steps: list[Step] = Field(default_factory=list)
    cause: FailureCause | None = None
    line: str | None = None
    hint: str | None = None
    error: str | None = None
    log_tail: list[str] = Field(default_factory=list)
    left: list[str] = Field(default_factory=list)
    """For an unconfirmed kill: exactly what is left (pid, title, GPU memory)."""
    refused: str | None = None
    """Set when the operation was refused before anything was started or stopped (its preflight failed): why,
    every failure at once. A refusal has no ``cause``: nothing ran that could have failed."""
    refusals: list[str] = Field(default_factory=list)
    """Each preflight failure of a refusal, one per check (``refused`` joins them)."""
    aborted: str | None = None
    """Set when an operator stopped the launch's session while it was under way (``x`` in the console, or
    ``kill SESSION`` from any console): what happened, said instead of a failure. An aborted launch has no
    ``cause`` (nothing failed) and ``ok`` False (it did not reach READY)."""


# ---------------------------------------------------------------- deployments (issue 29), as the TUI's row shows one

GatewayState = Literal["up", "down", "unreachable"]
"""``up``: its /health answers 200; ``down``: the host answered but the gateway did not (or not 200);
``unreachable``: the host could not be asked (the reading shown is the last one, and ages)."""


class RowReplica(Frozen):
    """One live replica session of a deployment row: what a roll of it hits and the traffic it carries."""

    session_id: str
    replica: int
    role: str
    """``current``; during a roll ``old``, ``new`` or ``draining`` (``console.ops.deploy.models.ReplicaRole``)."""
    state: str
    gpus: list[int] = Field(default_factory=list)
    port: int | None = None
    ready_at_gateway: bool = False
    running: int | None = None
    queued: int | None = None
    requests_per_s: float | None = None


class RollStepNow(Frozen):
    """Where a roll is for one replica: its step under way (else its last one) and that step's state."""

    replica: int
    step: str
    """The step's name within the replica: ``new: generate``, ``old: drained``, ``placement``."""
    state: StepState


class DeploymentRow(Frozen):
    """One configured deployment as the TUI shows it above its host's GPU panels: built by
    ``console.ops.deploy.watch`` from ``deploy status``'s reading (read every few seconds, never per frame) and the
    steps of a roll this console runs."""

    name: str
    host: str
    gateway: GatewayState
    detail: str | None = None
    """Why the gateway is down or unreachable (or why a rate is unknown)."""
    read_at: float | None = None
    """When the reading shown was taken (epoch seconds); None: none yet."""
    stale_after_s: float = 10.0
    """A reading older than this is stale (shown as such)."""
    ready: int = 0
    """Replicas serving: those with a session READY and ready at the gateway (during a roll an old and a new
    session of one replica count once)."""
    total: int = 0
    requests_per_s: float | None = None
    """Through the gateway, between its last two readings."""
    replicas: list[RowReplica] = Field(default_factory=list)
    rolling: bool = False
    """A roll runs (this console's), or the replicas' roles say one is under way or was interrupted."""
    roll: list[RollStepNow] = Field(default_factory=list)
    """This console's roll: each replica's current step (empty for another console's roll: see the roles)."""

    def age(self, now: float) -> float | None:
        return None if self.read_at is None else max(0.0, now - self.read_at)

    def stale(self, now: float) -> bool:
        a = self.age(now)
        return a is None or a > self.stale_after_s


# ---------------------------------------------------------------- hosts

ConnState = Literal["connecting", "connected", "stale", "reconnecting", "unreachable", "failed", "closed"]
"""``stale``: the channel is open but the agent answered no ping (and sent nothing) within its bound."""


class ConnectionInfo(Frozen):
    """State of the link to one host."""

    state: ConnState
    error: str | None = None
    rtt_ms: float | None = None
    since: float | None = None
    attempts: int = 0
    next_retry_at: float | None = None


class HostSnapshot(Frozen):
    """Everything known about one host at one instant. The unit the UI renders."""

    name: str
    connection: ConnectionInfo
    sampled_at: float | None = None
    """Host clock (epoch seconds) of the sample; None if never sampled."""
    received_at: float | None = None
    """Console clock when the sample arrived: the age shown is now - received_at."""
    hostname: str | None = None
    gpu_source: GpuSourceName = "none"
    gpu_error: str | None = None
    """Why there is no GPU information, when gpu_source is "none"."""
    gpus: list[GpuSample] = Field(default_factory=list)
    servers: list[ServerProc] = Field(default_factory=list)
    sessions: list[SessionInfo] = Field(default_factory=list)
    other_sessions: list[SessionInfo] = Field(default_factory=list)
    """Sessions of other runs directories (another console's, another config's) that a live process here
    carries, found where its environment or the user's list of runs directories says."""
    relatives: list[ProcRef] = Field(default_factory=list)
    """The parents, ancestors (up to pid 1) and live process-group leaders of ``servers`` that are not in it."""
    agent_uid: int | None = None
    """The uid the agent runs as: processes of any other user are never this console's to kill."""
    agent_tick_ms: float | None = None
    gpu_sampled_at: float | None = None
    """When the GPU figures were taken on the host (sampled off the agent's loop: may be older than
    ``sampled_at`` when the driver or nvidia-smi is slow; ``gpu_error`` then says so)."""

    def age_s(self, now: float) -> float | None:
        return None if self.received_at is None else max(0.0, now - self.received_at)


class AuditEntry(Frozen):
    """One remote command the console ran, with its result (also written as JSON lines)."""

    at: float
    host: str
    op: str
    args: dict[str, Any] = Field(default_factory=dict)
    ok: bool | None = None
    result: str | None = None
    elapsed_ms: float | None = None


# ---------------------------------------------------------------- a server's own facts

PROBE_EVERY_S = 30.0
"""A session's facts are read once after READY, then at this cadence."""


class ServerFacts(Frozen):
    """The facts one read of a server's ``/server_info`` + ``/model_info`` gave (None: not in the answer); read
    and parsed by ``console/core/server_info.py``, carried to the UI in :attr:`HostView.server_facts`."""

    at: float
    """When they were read (epoch seconds); the age of every fact here is now - at."""
    server_info_offered: bool = False
    model_info_offered: bool = False
    version: str | None = None
    model_path: str | None = None
    served_model_name: str | None = None
    architectures: tuple[str, ...] = ()
    speculative_algorithm: str | None = None
    spec_num_steps: int | None = None
    """The speculative step count the server reports now (under ``--speculative-adaptive``, its current choice)."""
    avg_spec_accept_length: float | None = None
    """Mean accepted tokens per step, averaged over the ``internal_states`` that report one."""

    @property
    def offered(self) -> bool:
        return self.server_info_offered or self.model_info_offered

    def age(self, now: float) -> float:
        return max(0.0, now - self.at)

    def stale(self, now: float) -> bool:
        """Older than three probe periods: shown as stale."""
        return self.age(now) > 3 * PROBE_EVERY_S


# ---------------------------------------------------------------- views and requests

class SessionView(Frozen):
    """A server on a host as the operator sees it: one per session or foreign server.

    Derived from a HostSnapshot (process table + run directories) and the session's
    classified log. A tp>1 server is one view spanning several GPUs.
    """

    host: str
    session_id: str | None = None
    """None for a FOREIGN server (not launched by mtpconsole)."""
    state: SessionState
    gpus: list[int] = Field(default_factory=list)
    port: int | None = None
    pids: list[int] = Field(default_factory=list)
    launcher_pid: int | None = None
    launcher_start_ticks: int | None = None
    argv: list[str] = Field(default_factory=list)
    flags_summary: str = ""
    """Key flags in one line, e.g. ``EAGLE 3/1/4 · mem 0.90 · run 48``."""
    cause: FailureCause | None = None
    line: str | None = None
    hint: str | None = None
    metrics: ServeMetrics | None = None
    step: int | None = None
    """While LAUNCHING: confirmation steps passed so far (of 6)."""
    started_at: float | None = None
    """When this console launched the session (host clock); None for a foreign server."""
    ended_at: float | None = None
    process_started_at: float | None = None
    """A foreign server's (or orphaned worker's) own process start (host clock, from /proc), when known."""
    log_path: str | None = None
    replaces: str | None = None
    """The session this one relaunches (from its launch spec), if any."""
    group: str | None = None
    """The multi-node group this session is a member of (issue 30; from its launch spec), if any."""
    node_rank: int | None = None
    nnodes: int | None = None
    stopped_by: str | None = None
    """For a STOPPED session: who stopped it ("this console", "an operator"), when known."""
    acknowledged: bool = False
    """The operator acknowledged this ended session: it is history, no GPU's current session."""
    acknowledged_at: float | None = None
    """When the acknowledgement was recorded in the run directory (any console), if it was."""
    pending: bool = False
    """A launch request sent by this console whose run directory the host has not reported yet."""
    broken: str | None = None
    """Why the session's run directory cannot be used (:attr:`SessionInfo.broken`): shown BROKEN (FAILED in
    ``state``), or FOREIGN when it is another user's; never any GPU's session."""

    @property
    def up_since(self) -> float | None:
        """The start an age is counted from: the launch, else (a foreign server) its process start."""
        return self.started_at if self.started_at is not None else self.process_started_at


class GpuCurrent(Frozen):
    """The current session of one GPU, as the one rule in ``console/core/current.py`` decides.

    Everything the UI shows for the GPU (badge, session line, steps, log pane, header counts,
    the targets of kill / relaunch / edit) derives from ``session``; None means IDLE.
    """

    index: int
    session: SessionView | None = None
    why: str = "idle"
    """Which part of the rule chose it: "launch", "live", "ended" or "idle"."""


class HostEvent(Frozen):
    """Something that happened on a host that no badge keeps showing (console clock, epoch s)."""

    at: float
    host: str
    kind: Literal["foreign_appeared", "foreign_vanished", "launch_refused", "session_stopped", "session_failed",
                  "launched", "ready", "exited", "oom_kill", "health_flap", "stop_requested", "acknowledged",
                  "orphan", "action"]
    text: str
    session_id: str | None = None
    gpus: list[int] = Field(default_factory=list)
    pid: int | None = None
    """The process concerned when there is no session (a foreign server, an orphan, an OOM-killed pid)."""
    source: str = "console"
    """Where it was learned: "console" (this console saw it), "run_dir", "exit_record", "kernel_log", "audit"."""


class PendingLaunch(Frozen):
    """A launch request this console has sent; shown as LAUNCHING n/6 from the moment it is sent."""

    host: str
    session_id: str
    gpus: list[int] = Field(default_factory=list)
    argv: list[str] = Field(default_factory=list)
    port: int | None = None
    sent_at: float
    step: int = 0
    replaces: str | None = None


class HostView(Frozen):
    """What the UI renders for one host per tick: the snapshot plus derived sessions."""

    snapshot: HostSnapshot
    sessions: list[SessionView] = Field(default_factory=list)
    current: list[GpuCurrent] = Field(default_factory=list)
    """One entry per GPU of the snapshot: its current session (empty when not computed)."""
    counts: dict[str, int] = Field(default_factory=dict)
    """Header counts: GPUs per badge state of their current session (a tp 2 session counts once)."""
    events: list[HostEvent] = Field(default_factory=list)
    """Recent events, oldest first (bounded)."""
    advice: list[Advice] = Field(default_factory=list)
    """The advisor's findings for this host's servers (``console/core/advisor.py``), newest sample."""
    server_facts: dict[str, ServerFacts] = Field(default_factory=dict)
    """session id -> the latest ``/server_info`` + ``/model_info`` facts of a GPU's current READY session (read
    after READY, then every :data:`PROBE_EVERY_S`; each with its time ``at``); absent: never read."""

    def current_of(self, index: int) -> GpuCurrent | None:
        """The current-session entry of GPU ``index``, if computed."""
        return next((c for c in self.current if c.index == index), None)


class LaunchRequest(Frozen):
    """An operator's launch: command + server flags as argv lists, env values in transit only."""

    host: str
    command: list[str] = Field(default_factory=lambda: list(DEFAULT_SERVER_COMMAND))
    flags: list[str] = Field(default_factory=list)
    gpus: list[int] = Field(default_factory=lambda: [0])
    port: int | None = None
    env: dict[str, str] = Field(default_factory=dict)
    profile: str | None = None
    description: str | None = None
    """The profile's description, for the flag form's picker (never sent to the host)."""
    force: bool = False
    """Launch even when the memory planner says it does not fit."""
    check_flags: bool = True
    """Check the flags against the host's server before spawning it (``launch --no-validate`` skips it)."""
    replaces: str | None = None
    deployment: str | None = None
    deployment_role: Literal["replica", "gateway"] | None = None
    replica: int | None = None
    group: str | None = None
    """Group membership (issue 30), copied into the spec: see :class:`LaunchSpec`."""
    node_rank: int | None = None
    nnodes: int | None = None
    group_hosts: list[str] | None = None
    group_kill_on_failure: bool | None = None


class KillTarget(Frozen):
    """What to kill: a managed session, or a process identified by (pid, start_ticks)."""

    host: str
    session_id: str | None = None
    pid: int | None = None
    start_ticks: int | None = None
    port: int | None = None
    """A port the target is known to hold (e.g. an orphan holding its dead session's port): checked closed."""
    as_orphan: bool = False
    """Killed as an orphan: the kill re-derives the orphan verdict from a fresh snapshot and signals nothing
    unless (pid, start time) is still proven an orphan."""
