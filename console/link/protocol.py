"""The wire protocol between the console and the remote agent (JSON lines), and run-dir layout.

Stdlib only. The run-directory layout and every other host-side fact are defined once, in the
shipped module ``hostlib.py``, and re-exported here for the console.

Bootstrap
---------
The console starts ``<python> -u -c BOOTSTRAP`` on the host (over an SSH exec channel
without a pty, or as a local subprocess for ``local``). Line 1 on stdin is the shipped code,
:func:`shipped_payload`: ``{"boot": <source of shipboot.py>, "modules": {name: source}}`` for
every module of ``console/host`` (:func:`shipped_modules`; all stdlib, Python >= 3.8). ``shipboot`` installs them
as the package ``mtpconsole_remote`` and runs ``mtpconsole_remote.agent``. The agent writes the
same modules once per digest under ``<runs_dir>/.lib-<digest>/`` and runs the supervisor from
there, so agent and supervisor share one definition of every fact. Line 2 is the agent's config::

    {"interval": 1.0, "runs_dir": "~/.mtpconsole/runs", "gpu_source": "auto"|"nvml"|"nvidia-smi"|"sim"|"none",
     "sim_dir": null | "/path", "launch_env": {...}, "log_cap_mb": null | MiB, "sim_src": "<source of simgpu.py>"}

After that, every line either way is one JSON object.

Console -> agent (requests)
---------------------------
``{"id": 7, "op": "<name>", "args": {...}}``. The agent answers
``{"type": "reply", "id": 7, "ok": true, "result": ...}`` or
``{"type": "reply", "id": 7, "ok": false, "error": "message", "kind": "<kind>"}``: ``error`` is for the operator,
``kind`` for the console (``hostlib.ERROR_KINDS``; ``console/link/errors.py`` has a class per kind). Above the link
every op is a method of ``console/link/client.py``'s ``HostClient``, returning its model. The ops, one a line
(``tests/test_client_contract.py`` checks this list against the agent's op table)::

``hello``                     -> {agent_version, python, hostname, uid, user, boot_id, pid, gpu_source, gpu_error, clk_tck,
                                 runs_dir, pidfd}
``ping``                      -> the agent's clock (epoch seconds)
``snapshot``                  -> a sample (as pushed, see below), taken now; answered by the loop once a fresh
                                 GPU sample is in (at most 2 s: a hung nvidia-smi shows as ``gpu_error``)
``set_interval {interval}``   -> the interval now (at least 0.05 s); the next sample goes out at once
``sessions {}``               -> [SessionInfo]
``launch {spec, env, preflight}`` -> SessionInfo + {preflight: [{name, ok, detail}]} ; ``refused`` naming who holds
                                 the GPU/port ; ``preflight.check_only``: {preflight, record: null}, nothing created
``kill {pid?, pgid?, start_ticks, signal, session_id?, pids?}`` -> {signalled: [pids; -pgid for a group],
                                 stop_request_error?: why stop-request.json could not be written} ;
                                 ``no_such_process`` when nothing is left, ``refused`` when an identity changed
``proc {pid}``                -> {pid, comm, state, ppid, pgid, sid, start_ticks, rss_kib, wait_status, argv} or null
``watch {pid, start_ticks?, session_id?}`` -> the agent pushes an ``exit`` event when that process ends
``read_log {session_id, offset?, tail_bytes?, max_bytes, tail_lines?}`` -> {offset, end, size, data, file, mtime,
                                 capped?, previous_bytes?} ; a tail starts in ``output.log.1`` when ``output.log`` is
                                 short (``previous_bytes`` of it); offsets, ``end`` and ``size`` are ``output.log``'s,
                                 ``file`` its inode, ``mtime`` its last write
``follow_log {session_id, offset, file?}`` -> the agent pushes ``log`` messages; ``file``: the inode ``offset`` is in
``unfollow_log {session_id}``
``foreign_output {pid, start_ticks?, tail_bytes}`` -> {pid, start_ticks, path, size, mtime, offset, data}: a
                                 hand-started server's stdout file (``/proc/<pid>/fd/1``) when it is a regular
                                 file (``refused`` otherwise, nothing read; ``no_such_process`` when gone)
``port_open {port}``          -> bool (something accepts TCP on 127.0.0.1:port)
``port_owner {port}``         -> {pid, argv} of the listening socket's process, or null when nobody listens
``http_get {port, path, timeout}`` -> {status, body} (status 0 = connection refused / error in body)
``read_file {path, max_bytes}`` -> {data}
``run {argv, timeout, env?}``  -> {rc, stdout, stderr} (argv executed without a shell; ``timed_out``, ``not_found``)
``gpu_samples {since?, until?, max_points?}`` -> {points: [{at, gpu, power_w, ...}], error} (the sample ring)
``vmstat``                    -> {oom_kill}
``ack {session_id, by?}``     -> SessionInfo ; writes ``ack.json`` in an ended session's run directory
                                 (``not_ended`` for a live one)
``prune {session_id}``        -> {session_id, run_dir, removed: [names], reason} ; removes a broken run directory
                                 of ours of which nothing runs (``refused`` otherwise, ``not_found`` when absent)

Agent -> console (pushed)
-------------------------
``{"type": "sample", "data": {sampled_at, tick_ms, gpu_source, gpu_error, gpu_sampled_at, gpus: [...], servers: [...], sessions: [...],
  other_sessions: [...], relatives: [...]}}``
  GPUs are sampled in a worker thread (``gpu_sampled_at`` says when); a server started with
  ``--enable-metrics`` carries ``metrics_text`` (raw /metrics), ``metrics_at``, ``metrics_error``;
  a session carries ``exits`` (ProcessExit, oldest first) and ``first_abnormal_exit``.
  ``other_sessions``: sessions of other runs directories that a live process carries (with ``owner_uid``);
  ``relatives``: the parents, ancestors and live group leaders of ``servers`` that are not in it (ProcRef).
  Every sample carries ``seq`` (its number). Between whole samples the agent pushes what changed:
``{"type": "sample_delta", "seq", "base", "patch", "digest"}``: ``patch`` (``console/host/delta.py``'s format)
  turns sample ``base`` into sample ``seq``; ``digest`` is the CRC-32 of the canonical JSON of the top-level values
  it changed (``delta.changed_digest``). A whole sample goes out on connect, every ``delta.FULL_EVERY`` (30) ticks,
  and as the reply to ``snapshot`` (with its ``seq``: the deltas after it build on it). The console applies a delta
  only to sample ``base`` and only when the digest matches; otherwise it keeps the sample it has and asks for a
  whole one with ``snapshot`` (``link/samples.py``).
``{"type": "event", "kind": "exit", "pid", "start_ticks", "at", "exit_code", "signal", "session_id"?}``
  (code/signal None when unknown: the process was not ours and its parent reaped it first)
``{"type": "event", "kind": "session_ended", "session_id", "exit": {...}}``
``{"type": "log", "session_id", "offset", "end", "file", "data"}``  (data decoded as UTF-8 with replacement; offsets
  are bytes of the file whose inode is ``file``)
``{"type": "event", "kind": "log_truncated", "session_id", "size"}``  (output.log shrank: followed from 0 again)
``{"type": "event", "kind": "log_rotated", "session_id", "file", "dropped"}``  (the old segment was read to its
  end, unless ``dropped``: it was rotated away first; the new one, inode ``file``, is followed from 0)
``{"type": "error", "message"}``  (the agent survived a failure it wants logged)

Run directory (``<runs_dir>/<session_id>/``)
--------------------------------------------
``spec.json``       LaunchSpec (env *names* only), written before the supervisor starts
``record.json``     SupervisorRecord, written atomically by the supervisor after spawning
``output.log``      the server's stdout+stderr, created with O_CREAT|O_EXCL by the supervisor
``output.log.1``    with ``log_cap_mb``: the segment before ``output.log`` (the supervisor rotates at the cap)
``output.log.head`` with ``log_cap_mb``: the session's first ~64 KiB, written at the first rotation
``supervisor.log``  the supervisor's own diagnostics
``stop-request.json`` written by the console's kill before signalling (marks "stopped by operator")
``exit.json``       ExitRecord, written atomically by the supervisor after the server ended
``ack.json``        {at, by}: an operator acknowledged the ended session (written once, by the ``ack`` op)
``exits.jsonl``     one line per process of the session that ended (pid, role, GPU, exit code or
                    signal, time, oom_kill delta), appended by the supervisor and the agent
"""

from importlib import resources

from console.host.hostlib import (
    AGENT_VERSION,
    RUN_EXIT,
    RUN_EXITS,
    RUN_LOG,
    RUN_RECORD,
    RUN_SPEC,
    RUN_STOP_REQUEST,
    RUN_SUPERVISOR_LOG,
    SESSION_ENV,
)

__all__ = [
    "AGENT_VERSION", "BOOTSTRAP", "RUN_EXIT", "RUN_EXITS", "RUN_LOG", "RUN_RECORD", "RUN_SPEC",
    "RUN_STOP_REQUEST", "RUN_SUPERVISOR_LOG", "SESSION_ENV", "shipped_modules", "shipped_payload",
    "shipped_sources",
]

NOT_SHIPPED = ("__init__", "shipboot")
"""Modules of ``console/host`` that are not sent as modules (the package marker; the loader goes as line 1)."""


def shipped_modules() -> tuple[str, ...]:
    """Every module of the ``console/host`` folder (stdlib only, Python >= 3.8, relative imports among themselves
    only; checked by tests/test_remote_sources.py): the folder says what is shipped, no list does."""
    names = (p.name[:-3] for p in resources.files("console.host").iterdir() if p.name.endswith(".py"))
    return tuple(sorted(n for n in names if n not in NOT_SHIPPED))

BOOTSTRAP = (
    "import sys,json;"
    "m=json.loads(sys.stdin.readline());"
    "g={'__name__':'mtpconsole_shipboot'};"
    "exec(compile(m['boot'],'mtpconsole-agent/shipboot.py','exec'),g);"
    "sys.exit(g['main'](m['modules'],sys.stdin,sys.stdout))"
)
"""The fixed program passed to ``python -c``: no part of it comes from user input. Its text holds
``mtpconsole-agent``, so an operator (or a test) finds the agent by its command line."""


def _read(name: str) -> str:
    return resources.files("console.host").joinpath(name + ".py").read_text(encoding="utf-8")


def shipped_sources() -> dict[str, str]:
    """{module name: source} of every shipped module, read from this installation."""
    return {name: _read(name) for name in shipped_modules()}


def shipped_payload() -> dict[str, object]:
    """Line 1 of the bootstrap: the second-stage loader and the shipped modules."""
    return {"boot": _read("shipboot"), "modules": shipped_sources()}
