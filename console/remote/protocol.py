"""The wire protocol between the console and the remote agent (JSON lines), and run-dir layout.

This module is stdlib-only so the agent and the supervisor can share its constants
(they are shipped as source; the console inlines what they need).

Bootstrap
---------
The console starts ``<python> -u -c BOOTSTRAP`` on the host (over an SSH exec channel
without a pty, or as a local subprocess for ``local``). Line 1 on stdin is the agent's
source as a JSON string; line 2 is the agent's config object::

    {"interval": 1.0, "runs_dir": "~/.mtpconsole/runs", "gpu_source": "auto"|"nvml"|"nvidia-smi"|"sim"|"none",
     "sim_dir": null | "/path", "supervisor_src": "<source of supervisor.py>"}

After that, every line either way is one JSON object.

Console -> agent (requests)
---------------------------
``{"id": 7, "op": "<name>", "args": {...}}``. The agent answers
``{"type": "reply", "id": 7, "ok": true, "result": ...}`` or
``{"type": "reply", "id": 7, "ok": false, "error": "message"}``. Ops:

``hello``                     -> {agent_version, python, hostname, uid, user, boot_id, pid, gpu_source, gpu_error, clk_tck}
``snapshot``                  -> a sample (as pushed, see below), taken now
``set_interval {interval}``
``sessions {}``               -> [SessionInfo]
``launch {spec, env, preflight}`` -> {session: SessionInfo} ; refuses with ``error`` naming who holds the GPU/port
``kill {pid?, pgid?, start_ticks, signal, session_id?}`` -> {signalled: [pids]}
``read_log {session_id, offset?, tail_bytes?, max_bytes}`` -> {offset, end, size, data}
``follow_log {session_id, offset}`` / ``unfollow_log {session_id}``
``watch {pid, start_ticks}``  -> the agent pushes an ``exit`` event when that process ends
``port_open {port}``          -> bool (something accepts TCP on 127.0.0.1:port)
``http_get {port, path, timeout}`` -> {status, body} (status 0 = connection refused / error in body)
``read_file {path, max_bytes}`` -> {data}
``run {argv, timeout, env?}``  -> {rc, stdout, stderr} (argv executed without a shell)
``vmstat``                    -> {oom_kill}

Agent -> console (pushed)
-------------------------
``{"type": "sample", "data": {sampled_at, tick_ms, gpu_source, gpu_error, gpus: [...], servers: [...], sessions: [...]}}``
``{"type": "event", "kind": "exit", "pid", "start_ticks", "at", "session_id"?}``
``{"type": "event", "kind": "session_ended", "session_id", "exit": {...}}``
``{"type": "log", "session_id", "offset", "data"}``  (data decoded as UTF-8 with replacement; offsets are bytes)
``{"type": "error", "message"}``  (the agent survived a failure it wants logged)

Run directory (``<runs_dir>/<session_id>/``)
--------------------------------------------
``spec.json``       LaunchSpec (env *names* only), written before the supervisor starts
``record.json``     SupervisorRecord, written atomically by the supervisor after spawning
``output.log``      the server's stdout+stderr, created with O_CREAT|O_EXCL by the supervisor
``supervisor.log``  the supervisor's own diagnostics
``stop-request.json`` written by the console's kill before signalling (marks "stopped by operator")
``exit.json``       ExitRecord, written atomically by the supervisor after the server ended
"""

AGENT_VERSION = 1

RUN_SPEC = "spec.json"
RUN_RECORD = "record.json"
RUN_LOG = "output.log"
RUN_SUPERVISOR_LOG = "supervisor.log"
RUN_STOP_REQUEST = "stop-request.json"
RUN_EXIT = "exit.json"

SESSION_ENV = "MTPCONSOLE_SESSION"
"""Set in the server's environment so its processes (and orphaned workers) can be traced back."""

BOOTSTRAP = (
    "import sys,json;"
    "src=json.loads(sys.stdin.readline());"
    "g={'__name__':'__mtpconsole_agent__'};"
    "exec(compile(src,'mtpconsole-agent','exec'),g);"
    "g['main'](sys.stdin,sys.stdout)"
)
"""The fixed program passed to ``python -c``: no part of it comes from user input."""
