"""One raw log line -> what the classifier reads: the body without wrappers, its level, its style.

Real logs arrive wrapped: Docker/compose (``vllm-1  | ``), Kubernetes/containerd
(``2025-07-25T07:53:08.2+08:00 stdout F ``), ``kubectl logs --prefix`` (``[pod/web-0/server] ``),
journald (``Dec 01 02:00:00 host python3[123]: ``) and a bare syslog tag (``sglang[123]: ``),
Python logging's ``2025-07-25 07:53:08,123 `` timestamps, CI (``  | [2025-03-10T15:07:20Z] ``), RFC 3339
timestamps, Ray/vLLM process tags (``(EngineCore_DP0 pid=17374) ``, nested), torch's
``[rank0]: ``, Ray's ``(pid=123) ``, OpenMPI's ``[1,0]<stdout>:``, ``srun -l``'s ``0: ``, SGLang's ``[2025-10-22 10:29:28 DP1 TP4] ``
(early SGLang: ``[gpu_id=0] ``), vLLM's ``ERROR 09-28 15:47:24 [core.py:718] `` and glog's ``[F1019 01:14:03.358 File.cpp:1] ``
(torch's C++ code; ``F`` is FATAL). :func:`read_line` peels them in that order and keeps the
body's own indentation, so a traceback frame stays a frame whatever wraps it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
ORPHAN_SGR = re.compile(r"(?<![\w\]])\[[0-9;]{1,12}m")
"""A colour code whose ESC byte was lost when the log was pasted (``[36m(WorkerDict pid=..)[0m``)."""

_COMPOSE = re.compile(r"[\w.\-]{1,80} {1,40}\| ")
_POD_CONTAINER = re.compile(r"[a-z0-9][a-z0-9.\-]{0,200}-[a-z0-9]{6,10}-[a-z0-9]{5} [a-z0-9][a-z0-9\-]{0,62} ")
"""A multi-pod log tailer's prefix (stern, kubetail: ``<pod> <container> ``): a Deployment's pod name ends in its
replica set's hash (6-10 characters) and a 5-character suffix (``decode-6c8f9c4df6-vh88z vllm ``)."""
_CI = re.compile(r" {0,4}\| \[\d{4}-\d\d-\d\dT[\d:.]+Z?\] ")
_BRACKET_ISO = re.compile(r"\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\] ")
_K8S = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)? (?:stdout|stderr) [FP] ")
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)? (?:[|-] )?")
_JOURNALD = re.compile(
    r"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
    r" [\w.\-]{1,64} [\w.\-/@]{1,64}\[\d{1,10}\]: ")
_SYSLOG_TAG = re.compile(r"[A-Za-z][\w.\-/@]{0,63}\[\d{1,10}\]: ")
_KUBECTL = re.compile(r"\[pod/[\w.\-]{1,253}/[\w.\-]{1,63}\] ")
_PROC_TAG = re.compile(r"_?\(?[A-Za-z_][\w.\-:]{0,127}(?: [\w.\-]+=[\w.\-:]+,?){1,4}\) ?")
"""A process tag: ``(EngineCore_DP0 pid=1)``, Ray's ``(RayWorkerWrapper pid=1, ip=...)``, Ray Serve's
``(ServeReplica:app:Deployment pid=1, ip=...)``."""
_RANK = re.compile(r"\[rank\d+\]: ?|\[\d{1,5},\d{1,5}\]<std(?:out|err)>: ?")
_RAY_PID = re.compile(r"\((?:pid=\d{1,10}(?:, ip=[\w.:\-]{1,64})?|raylet|gcs_server|autoscaler)\) ")
_SRUN = re.compile(r"\d{1,5}: ")
SGLANG_PREFIX = re.compile(
    r"\[(?:\d{4}-\d\d-\d\d |\d\d-\d\d )?\d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z]{1,4}\d+){0,6}\] ?")
SGLANG_GPU_ID = re.compile(r"\[gpu_id=\d{1,5}\] ?")
"""Early SGLang's rank tag (0.1/0.2: ``[gpu_id=0] Load weight begin.``), before it printed timestamps."""
_VLLM_LEVEL = re.compile(
    r"(INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:\[[^\]]{0,200}\]|[\w.\-]{1,80}:\d+\]) ?")
_UVICORN_LEVEL = re.compile(r"(INFO|WARNING|ERROR|DEBUG|CRITICAL):(?: +|$)")
_PYLOG_LEVEL = re.compile(r"(INFO|WARNING|ERROR|DEBUG|CRITICAL):[A-Za-z_][\w.]{0,120}:")
"""Python logging's default format, ``WARNING:sglang.srt.models.registry:message`` (an in-process engine)."""
_GLOG = re.compile(r"\[?([IWEF])\d{3,4} \d\d:\d\d:\d\d\.\d{1,9}(?: +\d{1,10})? ([\w.\-]{1,120}):\d{1,6}\] ?")
"""glog's prefix, as torch's C++ code (c10d, ProcessGroupNCCL) writes it: severity letter, ``MMDD time [thread]
file:line]`` (``[F1019 01:14:03.358291284 ProcessGroupNCCL.cpp:1224] ``); ``F`` is FATAL: glog aborts after it.
torch's own writer drops the month's leading zero (``[E416 13:29:57.33 ProcessGroupNCCL.cpp:2057] ``: April 16)."""
GLOG_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "FATAL"}
_CARET_C = "^C"
_RANKED = re.compile(r" (?:TP|DP|PP|EP)\d{1,5}\]")

_PASTE_WRAPPED = re.compile(
    r"\[(?:\d{4}-\d\d-\d\d |\d\d-\d\d )?\d\d:\d\d:\d\d|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)[ :]"
    r"|\((?:APIServer|EngineCore|VllmWorker|Worker|SGLang|RayWorker)\w* pid=|\d{4}-\d\d-\d\d[T ]\d\d:\d\d")
"""What an indented paste's lines start with once their indentation is off: a server's own prefix (never a
traceback frame, whose indentation is its meaning)."""
QUIET_LEVELS = frozenset(("INFO", "WARNING", "DEBUG"))


@dataclass(slots=True)
class Line:
    """A log line as the classifier reads it."""

    raw: str
    """The line as shown to the operator (ANSI and NULs removed)."""
    body: str
    """The message without wrappers, stripped."""
    level: str | None
    """INFO / WARNING / ERROR ... when a vLLM, uvicorn or glog prefix gave one (glog's ``F``: FATAL)."""
    indented: bool
    """The message itself starts with whitespace (a traceback frame or continuation)."""
    sglang: bool
    """An SGLang ``[date time TPn]`` prefix was present."""
    vllm: bool
    """A vLLM level prefix or a vLLM process tag (``(APIServer pid=..)``, ``(EngineCore ..)``) was present."""
    interrupt: bool
    """The line starts with a terminal's ``^C``."""
    tag: str | None = None
    """The process tag the line carried (``(EngineCore pid=104)``): lines of one process share it."""
    sglang_rank: bool = False
    """The SGLang prefix named a rank (``[... TP0]``, ``[... DP1 TP4]``): only SGLang prints that."""
    glog: bool = False
    """A glog prefix gave the level (torch's C++ code: ``[W1119 17:59:26.27 TCPStore.cpp:125] ``)."""
    glog_source: str | None = None
    """The source file a glog prefix named (``TCPStore.cpp``): the component that reports the message."""


def read_line(raw: str) -> Line:
    """Peel the wrappers off one line (already without its newline)."""
    if "\x00" in raw:
        raw = raw.replace("\x00", "")
    if "\x1b" in raw:
        raw = ANSI.sub("", raw)
    s = ORPHAN_SGR.sub("", raw) if "m" in raw and "[" in raw else raw
    interrupt = False
    if s.startswith(_CARET_C):
        interrupt = True
        s = s[2:]
    sglang = vllm = ranked = glog = False
    glog_source: str | None = None
    level: str | None = None
    tag: str | None = None
    for i in range(8):  # every wrapper at most once or twice; bounded
        first = i == 0
        while s.startswith(_CARET_C):  # a terminal's ^C, also behind a wrapper (``sglang-1  | ^C...``)
            interrupt = True
            s = s[2:]
        start = s
        c = s[:1]
        if c.isdigit():
            m = _K8S.match(s) or _JOURNALD.match(s) or _RFC3339.match(s) or (_SRUN.match(s) if first else None)
            if m:
                s = s[m.end():]
        elif c.isalpha() and ("]: " in s[:160]):
            m = _JOURNALD.match(s) or _SYSLOG_TAG.match(s)
            if m:
                s = s[m.end():]
        elif c == " " or c == "|":
            m = _CI.match(s)
            if m:
                s = s[m.end():]
            elif first and c == " ":
                t = s.lstrip(" \t")
                if _PASTE_WRAPPED.match(t):  # a whole paste indented (a list item, a quote): peel to its wrapper
                    s = t
        elif c == "(" or c == "_":
            m = _PROC_TAG.match(s) or _RAY_PID.match(s)
            if m:  # a Ray/multiprocessing tag: either server (SGLangEngine, EngineCore ...)
                vllm = vllm or m.group(0).startswith(("(APIServer", "(ApiServer", "(EngineCore", "(VllmWorker", "(Worker_"))
                tag = m.group(0).strip()  # the innermost tag is the process's own
                s = s[m.end():]
        elif c == "[":
            m = _RANK.match(s) or _KUBECTL.match(s) or _BRACKET_ISO.match(s)
            g = None if m else _GLOG.match(s)
            if m:
                s = s[m.end():]
            elif g and level is None:
                level, glog, glog_source = GLOG_LEVELS[g.group(1)], True, g.group(2)
                s = s[g.end():]
            else:
                m = SGLANG_PREFIX.match(s)
                if m:
                    sglang = True
                    ranked = ranked or _RANKED.search(m.group(0)) is not None
                    s = s[m.end():]
                elif s.startswith("[gpu_id="):
                    m = SGLANG_GPU_ID.match(s)
                    if m:
                        sglang = ranked = True
                        s = s[m.end():]
        elif c in "IWEDCF" and level is None:
            m = _VLLM_LEVEL.match(s)
            if m:
                level, vllm = m.group(1), True
                s = s[m.end():]
            else:
                m = _UVICORN_LEVEL.match(s) or _PYLOG_LEVEL.match(s)
                if m:
                    level = m.group(1)
                    s = s[m.end():]
                elif (g := _GLOG.match(s)) is not None:
                    level, glog, glog_source = GLOG_LEVELS[g.group(1)], True, g.group(2)
                    s = s[g.end():]
        if s is start and c.isalnum() and "|" in s[:120]:
            m = _COMPOSE.match(s)
            if m:
                s = s[m.end():]
        if s is start and first and c.isalnum() and c.islower():
            m = _POD_CONTAINER.match(s)
            if m:
                s = s[m.end():]
        if s is start:
            break
    body = s.strip()
    indented = s[:1] in (" ", "\t") and bool(body)
    return Line(raw=raw, body=body, level=level, indented=indented, sglang=sglang, vllm=vllm,
                interrupt=interrupt, tag=tag, sglang_rank=ranked, glog=glog,
                glog_source=glog_source)


def clean(line: str, limit: int) -> str:
    """The line as returned to the operator: no ANSI, no control characters, at most ``limit``."""
    if "\x1b" in line:
        line = ANSI.sub("", line)
    line = CONTROL.sub("", line).strip()
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return line
