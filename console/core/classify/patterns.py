"""What the classifier knows about log lines, as data: one table per framework plus the causes.

Each :class:`Framework` lists the lines that mean *ready*, *serving*, *startup progress*,
*metrics*, an operator's *stop*, and the *going-down* lines its launcher prints when a child
dies. :data:`CAUSES` maps failure messages (CUDA, NCCL, Hugging Face, argparse ... shared by
both servers) to a cause with a specificity score. For a traceback cut before its exception
line, :data:`CUT_WHERE` (the deepest frame), :data:`STEP_CAUSES` (the step a launcher names),
:data:`PHASES` (the last start-up step, or a :data:`SYMPTOMS` warning after it) and
:data:`SPEC_CONTEXT` say, in that order, what most likely failed. Only what the file *shows* becomes
the cause (an import chain, CUDA-graph capture, a KV cache with no room, a named warning); what a step
only *suggests* (:data:`GUESSED_FROM_FRAMES`, the guessed :data:`PHASES`, :data:`SPEC_CONTEXT`) leaves the
cause ``other`` and goes to the hint as a guess. Nothing here decides a state: that is ``rules.py``;
nothing here reads a line: that is ``events.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from console.model import FailureCause


def _rx(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(alternatives))


@dataclass(frozen=True, slots=True)
class Metric:
    """A serving figure on a line: which field, the pattern (group 1 is the number), a scale."""

    field: str
    rx: re.Pattern[str]
    scale: float = 1.0
    integer: bool = False


@dataclass(frozen=True, slots=True)
class Framework:
    """The lines of one server framework that are not failures."""

    name: str
    ready: re.Pattern[str]
    """The server says it is up (an explicit ready line)."""
    serving: re.Pattern[str]
    """Evidence of serving even when the ready line scrolled away."""
    progress: re.Pattern[str]
    """Normal start-up steps: a failure seen before one of these did not stop the process."""
    metrics_line: re.Pattern[str]
    """Lines that carry the metrics below."""
    metrics: tuple[Metric, ...]
    stop: re.Pattern[str]
    """An operator's stop (a signal from outside, Ctrl-C, an orderly shutdown)."""


_NUM = r"(\d+(?:\.\d+)?)"

SIGNAL_STOP = (r"\b[Ss]ignal [Rr]eceived: ?(?:15|2)\b(?!\.\d)", r"\b(?:[Cc]aught|[Rr]eceived|[Gg]ot) signal:? ?(?:15|2)\b(?!\.\d)",
               r"\b(?:[Cc]aught|[Gg]ot) (?:signal )?SIG(?:TERM|INT)\b")
"""A crash handler's or runtime's report of SIGTERM/SIGINT by number or name (``Signal Received: 15 (Terminated)``, then
its backtrace; ``Caught SIGTERM``): the process was told to stop from outside, whichever server runs it."""
SIGTERM_NUMBER = re.compile(r"\b[Ss]ignal(?: [Rr]eceived)?:? ?15\b(?!\.\d)")
"""SIGTERM named by its number (``signal 15``)."""

SGLANG = Framework(
    name="sglang",
    ready=_rx(r"fired up and ready to roll"),
    # (diffusion: a request's ``Sampling params:`` block, then its pipeline stages)
    # (a retraction: SGLang takes back running requests when its KV pool fills mid-decode, so it was decoding)
    serving=_rx(r"\b(?:Decode|Prefill) batch[.,]", r"\bRetract requests\b", r"#retracted_reqs: \d+", r"^\[\w+Stage\] (?:finished in|average time per step)", r"^Sampling params:$",
                r"^new fill batch\.", r"^#running-req: \d+, #token: "),
    progress=_rx(
        r"Load weight (?:begin|end)", r"(?:KV )?Cache is allocated", r"Memory pool end",
        r"Capture (?:cuda|\w+ \w+ CUDA) graph (?:begin|end)", r"max_total_num_tokens=",
        r"Init (?:torch distributed|parallel) (?:begin|ends?)", r"Uvicorn running on",
        r"Application startup complete", r"Started server process", r"Waiting for application startup",
        r"server_args=|ServerArgs\(", r"Retrying in \d+s \[Retry \d+/\d+\]", r"Launch DP\d",
        r"Using (?:default HuggingFace )?chat template", r"checkpoint shards",
    ),
    metrics_line=_rx(r"\b(?:Decode|Prefill) batch[.,]", r"^#running-req: \d+, #token: "),
    metrics=(
        Metric("running_req", re.compile(r"#running-req: (\d+)"), integer=True),
        Metric("queue_req", re.compile(r"#queue-req: (\d+)"), integer=True),
        Metric("token_usage", re.compile(r"(?<!swa )(?<!mamba )(?:full )?token[ -]usage: " + _NUM)),
        Metric("gen_throughput", re.compile(r"gen throughput \(token/s\): " + _NUM)),
        Metric("accept_len", re.compile(r"accept len: " + _NUM)),
    ),
    stop=_rx(r"SIGTERM received", r"signum=(?:15|2)\b",
             r"Received SIG(?:TERM|INT)\b", r"Gracefully exiting", *SIGNAL_STOP),
)

VLLM = Framework(
    name="vllm",
    # vLLM builds its engine, then lists its routes, then starts uvicorn: the route list is not ready
    # yet (the port is not bound), uvicorn's own start is.
    ready=_rx(r"Application startup complete", r"Uvicorn running on", r"Started server process"),
    serving=_rx(r"Avg (?:prompt|generation) throughput",
                r"\b(?:Added|Received|Finished|Aborted) request \S"),  # a request's lifecycle: it was served
    progress=_rx(
        r"Loading safetensors checkpoint shards", r"Loading (?:pt |bin )?checkpoint shards",
        r"Loading weights took", r"Model loading took", r"Starting to load model",
        r"init engine \(profile", r"Capturing CUDA graphs", r"Graph capturing finished",
        r"GPU KV cache size", r"Available KV cache memory", r"Maximum concurrency for",
        r"# (?:GPU|cpu|CPU|cuda|CUDA|NPU|npu|XPU|xpu) blocks:", r"memory reserved for KV [Cc]ache is", r"torch\.compile takes", r"Compiling a graph", r"Dynamo bytecode transform",
        r"Found nccl from library", r"vLLM is using nccl", r"Initializing an? (?:V1 )?LLM engine",
        r"non-default args:", r"Waiting for output from MQLLMEngine", r"Starting (?:Startup|Engine) Loop",
        r"Supported_?tasks", r"vLLM API server version", r"Automatically detected platform",
        r"Using \w+ (?:attention )?backend", r"world size \d+ is assigned as",
        r"cache_config_info with initialization", r"Loading drafter model", r"EAGLE head(?:'s)? ",
        r"Starting vLLM (?:API )?server", r"Available routes are", r"^Route: /",
    ),
    metrics_line=_rx(r"throughput: ", r"Mean acceptance length"),
    metrics=(
        Metric("gen_throughput", re.compile(r"Avg generation throughput: " + _NUM)),
        Metric("running_req", re.compile(r"Running: (\d+) reqs"), integer=True),
        Metric("queue_req", re.compile(r"(?:Waiting|Pending): (\d+) reqs"), integer=True),
        Metric("token_usage", re.compile(r"GPU KV cache usage: " + _NUM + "%"), scale=0.01),
        Metric("accept_len", re.compile(r"Mean acceptance length: " + _NUM)),
    ),
    stop=_rx(r"received signal=SIG(?:TERM|INT)", r"Received SIG(?:TERM|INT)\b", r"\[shutdown\]",
             r"^Shutting down$", r"Waiting for application shutdown", r"Application shutdown complete",
             r"Finished server process", r"terminated by shutdown signal", r"Shutting down FastAPI HTTP server",
             # a V1 worker's own report of the SIGTERM/SIGINT it got (older wording of ``terminated by shutdown signal``)
             r"WorkerProc was terminated",
             # a sidecar of the server's pod (klog: ``"shutting down" logger="proxy server"``): the pod is terminated
             r'^"[Ss]hutting down"(?: \w+=|$)', *SIGNAL_STOP),
)

FRAMEWORKS = (SGLANG, VLLM)
PROGRESS_ANY = re.compile(SGLANG.progress.pattern + "|" + VLLM.progress.pattern)
STOP_ANY = re.compile(SGLANG.stop.pattern + "|" + VLLM.stop.pattern)
STOP_GATE = ("SIG", "ignal", "signum=", "kill_process_tree", "shutdown", "hutting down", "Finished server", "Gracefully",
             "was terminated")
READY_GATE = ("ready to roll", "startup complete", "Uvicorn running", "Started server process")
SERVING_GATE = (" batch", "throughput", " request ", "Stage] ", "#running-req: ", "Sampling params", "etract")

RETRYING = re.compile(r"\b[Rr]etrying\b|\b[Ww]ill (?:be )?retr(?:y|ied)\b|\b[Rr]etry(?:ing)? \d+ ?(?:/|of) ?\d+\b")
"""A line saying that what just failed is tried again (``..., retrying 1 of 2``): the error was handled."""
GIVING_UP = re.compile(r"\bgiv(?:ing|e) up\b|\bgave up\b|\bexhausted\b|\bno (?:more )?retries left\b")
"""... unless the same line says the retries are over."""

RESTART_LINE = re.compile(r"^Started server process \[\d+\]|^Waiting for application startup")
"""uvicorn starting (again): after a stop, the server is being started anew (loading, not stopped)."""

START_BANNERS = ("server_args=", "vLLM API server version ")
"""The first line a server start prints (the message, wrappers peeled): SGLang's launcher logs its resolved
``server_args=ServerArgs(...)`` (0.5.23: a dict), vLLM's API server its version. A new server run of the same
log begins there - but only once the previous run reached ready or went down (several ranks or nodes of one
start print the same banner)."""

# ---------------------------------------------------------------- lines that are neither

BENIGN = _rx(
    r"^Ignore import error", r"^\S+\.py:\d+: \w*Warning: ", r"^warnings\.warn\(",
    r"^Failed to import .{0,200}(?:ModuleNotFoundError|ImportError)",
)
"""Warnings that look like failures and are not (python warnings, SGLang's optional imports)."""

USAGE_START = re.compile(r"^usage: \S")
USAGE_SHAPE = re.compile(r"^usage: [\w.\-/]{1,200}(?: [\w.\-/]{1,200}){0,3} [\[{<-]")
"""argparse's own usage line: the program (and sub-command), then its options (``usage: vllm serve [model_tag] ...``)."""
USAGE_CONTINUED = re.compile(r"^\[?-{1,2}\w|^\{[\w-]+,")
"""A usage line's continuation that lost its indentation in a paste (``[--port PORT] [--host HOST]``)."""
ARGPARSE_ERROR = re.compile(r"^[\w.\-/ ]{1,100}: error: ")
HTTP = re.compile(r'"(POST|GET|PUT) (\S{1,300}) HTTP/[\d.]+" (\d{3})')
TRACEBACK = "Traceback (most recent call last)"
FRAME_LINE = re.compile(r'File "[^"\n]{1,1000}", line \d+, in \S')
"""A traceback frame, also when a paste lost its indentation."""
WRAPPED_FRAME_TAIL = re.compile(r'^[\w.\-/]{0,300}\.py", line \d+, in \S')
"""The rest of a frame line that the terminal wrapped at its width (``enai/serving_chat.py", line 227, in ...``
under ``File ".../entrypoints/op``): still the frame, and its path says where the traceback runs."""
CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
EXCEPTION = re.compile(
    r"((?:[A-Za-z_]\w{0,80}\.){0,8}(?:[A-Za-z_]\w{0,80}?)?(?:Error|Exception|Exit|Interrupt|Failure)"
    # a class of an errors/exceptions module, whatever its name (``triton.runtime.errors.OutOfResources``,
    # ``torch._dynamo.exc.BackendCompilerFailed``)
    r"|(?:[A-Za-z_]\w{0,80}\.){1,8}(?:errors?|exceptions?|exc)\.[A-Z]\w{0,80})"
    r"(?:\(\w{1,80}\))?(?::|$)")
VALIDATION_HEADER = re.compile(r"\d+ validation errors? for \w+")
"""pydantic's exception line: a header, the message is on the lines after it."""
VALIDATION_MESSAGE = re.compile(r"^(?:Value error|Assertion failed), ")
"""pydantic's message line for a validator that raised (``Value error, Expecting value: line 1 ...``)."""
REQUEST_REFUSED = _rx(
    r"This model's maximum context length is \d+ tokens", r"is longer than the maximum model length of \d+",
    r"is longer than the model's context length", r"exceeds the model's maximum context length",
    r"[Pp]lease reduce the length of the (?:messages|input|prompt)")
"""One request refused for its length (answered 400; the server keeps serving): a traceback of it, outside the
engine's loop, is a handled request error - and evidence that the server was serving."""
CONNECTION_EXCEPTIONS = ("ConnectionResetError", "BrokenPipeError", "ConnectionAbortedError")
"""A socket dropped by its peer: between ranks when raised in torch.distributed's frames (``FRAME_FLAGS`` dist)."""
IGNORED_EXCEPTIONS = ("SystemExit", "CancelledError", "GeneratorExit")
EXCEPTION_IGNORED = "Exception ignored in"
"""Python's unraisable-exception report (``Exception ignored in atexit callback: <function ...>``, ``Exception ignored
in: <function __del__ ...>``): the traceback under it was printed and dropped; nothing went down because of it."""
RESPONSE_EXCEPTIONS = ("HTTPException", "RequestValidationError", "WebSocketException")
"""Exceptions a web framework (FastAPI, Starlette) raises to answer one request with an error status
(``fastapi.exceptions.HTTPException: 500: ...``): a request's error, whatever status it carries; the server serves."""
STOP_EXCEPTIONS = ("KeyboardInterrupt",)

# Frames and source lines that tell what a traceback was doing.
FRAME_FLAGS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("spec", _rx(r"speculative|eagle|draft|spec_decode|mtp_|nextn|medusa|proposer")),
    ("graph", _rx(r"cuda_graph_runner|capture_one_batch|def capture|in capture\b|graph_capture|cudagraph",
                  r"in init_(?:cuda|device)_graphs?\b|init_(?:cuda|device)_graphs?\(", r"piecewise_cuda_graph")),
    ("engine", _rx(r"multiprocessing/process\.py|event_loop|run_busy_loop|run_engine_core|worker_busy_loop",
                   r"run_scheduler_process|run_detokenizer|_run_worker_process|EngineCoreProc|launch_server",
                   r"api_server\.py|entrypoints/cli|<module>|run_server|from_engine_args|_bootstrap")),
    ("warmup", _rx(r"_wait_and_warmup|_execute_server_warmup|def warmup|in warmup\b")),
    # the command line being parsed (argparse, a CLI's parse_args): what it raises refuses the flags
    ("args", _rx(r"in parse_(?:known_)?args\b|/argparse\.py\"")),
    # the KV-cache size checks raise only when the memory is not there (profiling, which runs the model, is a guess)
    ("kv_check", _rx(r"raise_if_cache_size_invalid|check_enough_kv_cache_memory")),
    # torch.distributed's own code (the c10d store, gloo, process groups): a dropped socket here is between ranks
    ("dist", _rx(r"torch/distributed/|distributed_c10d|/c10d/|rendezvous|in (?:barrier|all_reduce|broadcast_object)\b")),
    # the HTTP server's start-up (its lifespan hook) is no request: a traceback there ends the start
    ("lifespan", _rx(r"in lifespan\b|lifespan_context|in startup\b|in _?run_startup\b")),
    ("request", _rx(r"serving_chat|serving_completion|starlette|fastapi|uvicorn/protocols|h11_impl",
                    r"entrypoints/openai/(?:\w+/)?serving\w*\.py.{0,80}in (?:render_|create_|_preprocess|preprocess)",
                    r"chat_completion_stream_generator|handle_generate_request")),
)

# Where a traceback cut before its exception line stopped: the last frame (or source line) names
# the step that failed when nothing else in the file does.
CUT_WHERE: tuple[tuple[FailureCause, re.Pattern[str]], ...] = (
    ("import_error", _rx(r"^from \S+ import |^import \S+", r"importlib/__init__\.py.{0,40}import_module",
                         r"<frozen importlib\._bootstrap>", r"_gcd_import", r"/__init__\.py\", line \d+, in <module>")),
    ("nccl_error", _rx(r"init_process_group|distributed_c10d|rendezvous|pynccl|PyNcclCommunicator|ncclCommInit",
                       r"init_distributed_environment|initialize_model_parallel|init_model_parallel_group",
                       r"GroupCoordinator\(|TCPStore\(")),
    ("cuda_driver", _rx(r"torch/cuda/__init__\.py.{0,40}(?:_lazy_init|set_device|current_device)",
                        r"cuda\.set_device\(|_cuda_init\(")),
    # Sizing the KV pool / profiling free memory raises only when the memory is not there.
    ("gpu_oom", _rx(r"in (?:init_memory_pool|profile_max_num_token|profile_run|determine_available_memory"
                    r"|determine_num_available_blocks|_initialize_kv_caches|initialize_cache)\b")),
    # The deepest frame is fetching the checkpoint from the Hub: the model cannot be obtained.
    ("model_not_found", _rx(r"huggingface_hub/|in (?:snapshot_download|hf_hub_download|cached_file)\b")),
    # The deepest line calls into CUDA-graph set-up or capture (SGLang's init_cuda_graphs / init_device_graphs,
    # vLLM's capture_model): a failure cut there is the capture's (memory only when said).
    ("cuda_graph", _rx(r"init_(?:cuda|device|piecewise_cuda)_graphs?\(", r"\bcapture_model\(",
                       r"in init_(?:cuda|device)_graphs?\b")),
)

# The step a launcher names when it reports a worker's failure (vLLM: ``Exception in worker ...
# while processing method init_device``): for a failure cut before its exception line, the step
# says what failed much as the deepest frame would.
ANNOUNCED_STEP = re.compile(r"(?:while processing|Error executing) method (\w+)")
STEP_CAUSES: tuple[tuple[FailureCause, re.Pattern[str]], ...] = (
    # init_device builds the worker's process group (NCCL) once its GPU is set.
    ("nccl_error", _rx(r"^init_device$", r"distributed")),
    # Profiling free memory and sizing the KV cache raise only when the memory is not there.
    ("gpu_oom", _rx(r"determine_num_available_blocks|determine_available_memory|initialize_cache",
                    r"initialize_from_config|profile")),
    # Capturing the model's CUDA graphs (with its compile warm-up).
    ("cuda_graph", _rx(r"capture_model|compile_or_warm_up_model")),
)

# Where start-up had got to when a traceback cut before its exception line began: the last
# progress line names the step that failed, which is the best evidence left when neither the
# exception nor a telling frame is in the file. Applied only to a failure with no exception line
# (``rules.State.failure``); a later progress line not in this table clears it.
PHASES: tuple[tuple[FailureCause, bool, re.Pattern[str]], ...] = (
    # (cause, only a guess, the step's lines). A guess is what failures at that step usually are: the
    # file does not show it, so the cause stays ``other`` and the guess goes to the hint (README of
    # tests/data/real-logs: the file decides).
    # Setting up the process group: NCCL's library is found and the communicators are built next;
    # a crash here is usually the collective set-up (the ports, the fabric, the ranks that never join).
    ("nccl_error", True, _rx(r"Init torch distributed begin", r"Init parallel begin", r"Found nccl from library",
                             r"vLLM is using nccl")),
    # Loading weights is deliberately absent: a load cut mid-way fails as often for memory as for
    # weights the loader cannot map (quantisation, unknown tensor names).
    # Weights are in: the next step profiles the memory left and sizes the KV cache from it, and
    # what fails there is usually the memory (a pool too small for the weights' leftover, the profile run).
    ("gpu_oom", True, _rx(r"Load weight end", r"Model loading took", r"Loading weights took")),
    # The KV cache was sized and found no room: no blocks, or negative memory left for it (shown, not guessed).
    # Any device's word for the blocks (``# cuda blocks: 0``), the older wording of what is left (``the rest of the
    # memory reserved for KV Cache is -1.05GiB``), and the concurrency that follows from no room (``0.00x``).
    ("gpu_oom", False, _rx(r"# (?:GPU|cuda|CUDA|NPU|npu|XPU|xpu) blocks: 0\b", r"Available KV cache memory: (?:-\d|0(?:\.0+)? ?GiB)",
                           r"memory reserved for KV [Cc]ache is (?:-\d|0(?:\.0+)? ?GiB)",
                           r"Maximum concurrency for [\d,]+ tokens per request: 0(?:\.0+)?x")),
    # Capturing CUDA graphs: a failure inside capture is a capture failure (memory only when said).
    ("cuda_graph", False, _rx(r"Capture (?:cuda|\w+ \w+ CUDA) graph begin", r"Capturing CUDA graphs")),
)
GUESSED_FROM_FRAMES: frozenset[FailureCause] = frozenset({"nccl_error", "gpu_oom", "cuda_driver", "model_not_found"})
"""Causes that a cut traceback's deepest frame (``CUT_WHERE``) or its announced step (``STEP_CAUSES``) only
suggests: the frame is where such failures usually happen, not the error. They stay ``other``, with the guess
in the hint. What the frames show (an import chain, CUDA-graph capture) is the cause."""
SPEC_CONTEXT = re.compile(r"[Ss]peculative|EAGLE|[Ee]agle|[Dd]raft|NEXTN|[Nn]ext[Nn]\b|\bMTP\b")
"""The log shows the server runs speculative decoding (its flags, a draft step, a job's name): the
weakest evidence, a guess in the hint of a cut failure that neither its frames nor its step explain,
since the speculative path is then the one part of this server's start-up that plain servers lack."""
CONFIG_DUMP = re.compile(r"server_args=|ServerArgs\(|non-default args:|with config: ")
"""A dump of the whole configuration: it names the speculative settings but is no speculative step."""
SPEC_CONTEXT_OFF = re.compile(r"(?<!\w)\w{0,80}?(?:speculative|draft)\w{0,80}?[=:] ?'?None\b", re.IGNORECASE)
"""The same words in a config dump that says speculative decoding is off (``speculative_config=None``)."""
SGLANG_WARMUP_PATH = "/get_model_info"
"""The first request of SGLang's own warmup (an endpoint vLLM does not serve): before ``fired up``, still starting."""
SGLANG_WARMUP_PHASE: FailureCause = "warmup_failed"
"""SGLang's HTTP server is up and its own warmup request comes next: a crash now is the warmup."""

# ---------------------------------------------------------------- failures


@dataclass(frozen=True, slots=True)
class Cause:
    """A family of failure lines: its cause, how specific it is, how it behaves."""

    name: str
    cause: FailureCause
    score: int
    rx: re.Pattern[str]
    crash: bool = False
    """Fatal even after the server was ready (a crash, not a handled request error)."""
    terminal: bool = False
    """The process is going down, whatever the cause."""
    stop_induced: bool = False
    """Also what an operator's stop produces: no proof of a crash by itself."""
    exception_only: bool = False
    """Counts only on an exception line (``SomeError: ...``)."""
    announce: bool = False
    """Introduces a traceback (its exception, on the following lines, is more specific)."""
    names_line: bool = False
    """A family with no table cause (``other``) whose line is still the most specific one of its failure."""
    follow_up: bool = False
    """Points at a root cause reported elsewhere (``See root cause above``): as an exception line it ranks below
    even a bare, cut traceback of the process that died first."""


CAUSES: tuple[Cause, ...] = (
    # memory
    Cause("kv_pool", "gpu_oom", 95, _rx(
        r"Not enough memory\. Please try to increase --mem-fraction-static",
        r"Loaded weights leave no GPU memory for the KV cache")),
    Cause("cuda_oom", "gpu_oom", 90, _rx(
        r"CUDA out of memory", r"(?:NPU|XPU|MUSA|MPS backend) out of memory", r"OutOfMemoryError", r"(?:CUDA|HIP) (?:driver )?error: out of memory", r"hipErrorOutOfMemory", r"Cuda failure '?out of memory",
        r"cudaErrorMemoryAllocation", r"CUBLAS_STATUS_ALLOC_FAILED", r"CUDA_ERROR_OUT_OF_MEMORY",
        r"HIP out of memory", r"cudaMalloc\w* .{0,60}out of memory", r"Triton Error \[(?:CUDA|HIP)\]: out of memory"),
        crash=True),
    Cause("runtime_oom", "gpu_oom", 90, _rx(
        r"(?:Prefill|Decode) out of memory\. Try to lower", r"\bOut of memory\. Try to lower your batch size",
        r"Not enough space for mamba", r"alloc_req_slots runs out of memory"), crash=True),
    Cause("vllm_oom", "gpu_oom", 92, _rx(
        r"No available memory for the cache blocks", r"larger than the available KV cache memory",
        r"larger than the maximum number of tokens that can be stored in KV cache",
        r"Free memory on device .{0,80} is less than desired GPU memory utilization",
        r"Insufficient memory for KV cache")),
    Cause("mem_generic", "gpu_oom", 60, _rx(r"\bNot enough memory\b")),
    # graph capture (not about memory: memory wins by score)
    Cause("graph", "cuda_graph", 86, _rx(
        r"Capture (?:cuda|CUDA) graph failed", r"during CUDA graph capture", r"cudaStreamCaptureStatus(?:Active|Invalidated)",
        r"\b(?:[Pp]iecewise )?(?:CUDA|[Cc]uda) [Gg]raph (?:capture )?failed",
        r"operation not permitted when stream is capturing",
        r"cudaErrorStreamCaptureUnsupported", r"stream is capturing"), crash=True),
    Cause("enomem", "host_oom_killed", 84, _rx(r"\[Errno 12\] Cannot allocate memory", r"\bENOMEM\b")),
    # Host RAM, said in words that also match the GPU patterns above (Ray's ``OutOfMemoryError``): wins by score.
    Cause("host_mem", "host_oom_killed", 93, _rx(
        r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)", r"node running low on memory",
        r"ray\.exceptions\.OutOfMemoryError", r"Memory cgroup out of memory", r"Out of memory: Kill(?:ed)? process"),
        crash=True),
    # ports
    # A failed bind ends the server (uvicorn exits even after "Application startup complete").
    Cause("port_bind", "port_in_use", 85, _rx(
        r"[Aa]ddress already in use", r"EADDRINUSE", r"\[Errno 98\]", r"error while attempting to bind on address",
        r"\[WinError 10048\]", r"Only one usage of each socket address"),
        crash=True, terminal=True),
    # The same bind failing because the address is not this machine's (``--host``): a bad value, not a taken port.
    Cause("bind_addr", "bad_flags", 86, _rx(r"\[Errno 99\] error while attempting to bind on address"),
          crash=True, terminal=True),
    Cause("port", "port_in_use", 85, _rx(r"\b[Pp]ort \d+ is (?:already )?in use", r"\b[Pp]ort \d+ is not available")),
    # model
    Cause("model", "model_not_found", 85, _rx(
        r"does not appear to have (?:a file|files) named", r"Repository Not Found", r"RepositoryNotFoundError",
        r"HFValidationError", r"is not a local folder and is not a valid model identifier",
        r"GatedRepoError", r"Cannot access gated repo", r"You are trying to access a gated repo",
        r"LocalEntryNotFoundError", r"Revision Not Found", r"RevisionNotFoundError",
        r"Incorrect path_or_model_id", r"Can't load (?:the )?(?:tokenizer|config|configuration|model) for",
        r"Invalid repository ID or local directory", r"Repo id must be",
        r"couldn't connect to 'https://huggingface\.co'", r"outgoing traffic has been disabled",
        r"Cannot find any model weights with", r"host='huggingface\.co'.{0,80}Max retries exceeded",
        r"No supported config format found in", r"config file at '[^']{1,500}' is not a valid JSON file",
        # a checkpoint file cut short or corrupted (an interrupted download)
        r"Error while deserializing header: (?:MetadataIncompleteBuffer|HeaderTooLarge|InvalidHeaderDeserialization)",
        r"enable access to public gated repositories", r"Access to model \S+ is restricted",
        # a LoRA adapter path that holds no adapter (vLLM: ``Loading lora ... failed: No adapter found for /p``)
        r"No adapter found for ", r"LoRA adapter (?:path )?'?[^']{0,300}'? (?:does not exist|not found)",
        # the checkpoint or the HF cache cannot be read or written by this user
        r"\[Errno 13\] Permission denied: '[^']{0,500}(?:huggingface|/hub/|modelscope|\.safetensors|config\.json"
        r"|tokenizer|/models?/|/checkpoints?/)",
        r"is gated\. You must be authenticated")),
    # The Hub client's raw refusals: what transformers or the Hub chains after them (``RepositoryNotFoundError``,
    # ``OSError: ... does not appear to have a file named config.json``) names the problem better.
    Cause("model_http", "model_not_found", 83, _rx(
        r"(?:401|403|404|429) Client Error.{0,40}? for url: https://huggingface\.co",
        r"5\d\d Server Error.{0,40}? for url: https://huggingface\.co", r"Invalid credentials in Authorization header",
        r"(?<!Local)EntryNotFoundError", r"OfflineModeIsEnabled")),
    # safetensors cannot read a checkpoint file (cut short, corrupted, not a safetensors file): re-download it
    Cause("safetensors", "model_not_found", 80, _rx(r"^(?:[\w.]+\.)?SafetensorError\b"), exception_only=True),
    Cause("model_file", "model_not_found", 80, _rx(
        r"(?:FileNotFoundError|No such file or directory).{0,500}?(?:config\.json|tokenizer|\.safetensors)"),
        exception_only=True),
    # drivers and CUDA
    Cause("driver", "cuda_driver", 82, _rx(
        r"CUDA driver version is insufficient", r"no CUDA-capable device is detected", r"Found no NVIDIA driver",
        r"NVIDIA driver on your system is too old", r"No (?:CUDA|HIP|ROCm|XPU) GPUs are available",
        r"Torch not compiled with CUDA", r"Unexpected error from cudaGetDeviceCount", r"GPU has fallen off the bus",
        r"NVRM: Xid", r"hipErrorNoBinaryForGpu", r"cudaErrorNoKernelImageForDevice", r"Unable to find code object for all current devices",
        r"(?:CUDA|HIP) error: invalid device function", r"device kernel image is invalid",
        r"the provided PTX was compiled with an unsupported toolchain",
        r"cudaErrorNoDevice", r"cudaErrorInsufficientDriver", r"CUDA_ERROR_NO_DEVICE", r"CUDA_ERROR_NOT_INITIALIZED",
        r"forward compatibility was attempted on non supported HW", r"libcuda\.so\S*: cannot open shared object",
        r"CUDA unknown error", r"unsupported display driver / cuda driver combination",
        r"no kernel image is available for execution", r"Cannot re-initialize CUDA in forked subprocess",
        r"Failed to infer device type", r"Failed to initialize NVML", r"NVML Shared Library Not Found",
        r"CUDA driver initialization failed",
        # no accelerator the server can use, whatever the vendor's word for it (Ascend's NPU, Intel's XPU, Gaudi's HPU)
        r"\b[Nn]o (?:CUDA |HIP |ROCm )?(?:GPU|NPU|XPU|HPU|MLU|accelerator)s? (?:devices? )?(?:is |are )?(?:available|found|"
        r"detected)\b", r"cannot start without (?:an? )?(?:GPU|NPU|XPU|HPU|accelerator)\b"), crash=True),
    Cause("cuda_error", "cuda_driver", 75, _rx(
        r"CUDA error: ", r"cudaError\w+", r"CUDA_ERROR_\w+", r"device-side assert triggered",
        r"an illegal memory access was encountered", r"illegal instruction was encountered",
        r"Failed to encode tensor map", r"\.cu:\d+: .{0,300}Assertion .{0,300} failed", r"HIP error: ",
        r"hipError\w+", r"HSA_STATUS_ERROR", r"Triton Error \[(?:CUDA|HIP)\]: ", r"Memory access fault by GPU", r"CUBLAS_STATUS_(?!ALLOC)\w+",
        r"CUDNN_STATUS_\w+", r"NVML_SUCCESS == r INTERNAL ASSERT FAILED", r"unspecified launch failure",
        r"FATAL ERROR :: MODULE:\w+"),
        crash=True),
    # distributed
    Cause("nccl", "nccl_error", 76, _rx(
        r"NCCL [Ee]rror", r"nccl(?:Internal|System|UnhandledCuda|InvalidUsage|InvalidArgument|Remote)Error",
        r"DistBackendError", r"Watchdog caught collective operation timeout", r"NCCL communicator was aborted",
        r"ProcessGroupNCCL.{0,300}?(?:[Tt]imeout|[Ee]rror|got stuck|[Aa]bort)", r"DistNetworkError", r"DistStoreError",
        r"ProcessGroupGloo.{0,300}?(?:errors?|[Tt]imeout)", r"Connection closed by peer",
        r"setting up NCCL communicator and retrieving ncclUniqueId", r"DeepEP error: .{0,60}timeout",
        r"Gloo connectFullMesh failed", r"recvValue failed on SocketImpl", r"Connection was likely closed\. Did the remote "
        r"server shutdown or crash", r"Timeout at NCCL work", r"Some NCCL operations have failed or timed out",
        r"gloo/transport/\w+/\w+\.cc:\d+\] (?:Read|Write|Connect\w*|Timed out|Connection)"),
        crash=True),
    Cause("nccl_warn", "nccl_error", 40, _rx(r"NCCL WARN")),
    # SGLang's hard watchdog (``Watchdog timeout (self.watchdog_timeout=300)``, newer: ``Scheduler watchdog
    # timeout (self.watchdog_timeout=300, self.soft=False)``); the soft one (``self.soft=True``) only warns.
    # What SGLang's hard watchdog prints as it fires, before its ``Watchdog timeout`` line and the kill: the stuck
    # batch (``self.cur_batch.batch_size()=1, self.cur_batch.reqs=[...]``) and a py-spy dump of the schedulers.
    Cause("watchdog_dump", "watchdog_timeout", 78, _rx(r"^self\.cur_batch\.batch_size\(\)=\d+",
                                                       r"^Pyspy dump for PID \d+"), crash=True, terminal=True),
    Cause("watchdog", "watchdog_timeout", 80, _rx(r"[Ww]atchdog timeout \(self\.watchdog_timeout=\d+(?:\.\d+)?"
                                                  r"(?:\)|, self\.soft=False)"), crash=True,
          terminal=True),
    # environment
    Cause("import", "import_error", 80, _rx(
        r"^(?:[\w.]+\.)?(?:ModuleNotFoundError|ImportError)\b",
        r"has no attribute '\w+'.{0,40}_OpNamespace|_OpNamespace.{0,80}no attribute"), exception_only=True),
    Cause("native_lib", "import_error", 80, _rx(
        r"undefined symbol: ", r"Could not load any \w+ library", r"cannot open shared object file", r"version `GLIBC\w*_[\d.]+' not found",
        r"No module named '", r"cannot import name '")),
    # A JIT kernel build (flashinfer, deep_gemm, Triton's helpers, torch extensions) fails: the compiler's own
    # complaint names the problem better than ninja's summary or the wrapping exception.
    # A build that lacks a tool or a header of the environment (a missing package).
    Cause("build", "import_error", 66, _rx(
        r"Error building extension '", r"Python\.h: No such file or directory", r"Failed to find C compiler",
        r"fatal error: [\w/.\-]{1,200}\.h(?:pp)?: No such file or directory")),
    # A JIT kernel build (flashinfer, deep_gemm, Triton's helpers, Marlin) that fails to compile: no table cause
    # (``other``), but the compiler's own complaint is the line that names it, over ninja's summary or the wrapper.
    Cause("jit_build", "other", 25, _rx(
        r"nvcc fatal", r"ptxas fatal", r"requires \.target sm_\d+ or higher", r"error: command '\S{0,300}nvcc' failed",
        r"JIT compil\w+ failed",
        r"CalledProcessError: Command '\[?'?\S{0,300}/(?:gcc|g\+\+|cc|c\+\+|clang|nvcc|ninja)'"), names_line=True),
    Cause("jit_summary", "other", 22, _rx(r"ninja: build stopped", r"Ninja build failed"), names_line=True),
    # A kernel package or library the chosen path needs is absent (``... requires DeepGEMM to be installed``), or
    # the installed ``tokenizers`` cannot read this model's tokenizer.json (too old).
    Cause("missing_pkg", "import_error", 78, _rx(
        r"\brequires? [\w\-. ]{1,60} to be installed", r"\b(?:is|are) not installed\b"), exception_only=True),
    Cause("pkg_format", "import_error", 80, _rx(
        r"data did not match any variant of untagged enum (?:ModelWrapper|PyPreTokenizerTypeWrapper|PyDecoderWrapper"
        r"|PyNormalizerTypeWrapper)")),
    # command line
    Cause("argparse", "bad_flags", 95, _rx(
        r"^[\w.\-/ ]{1,100}: error: (?:unrecognized arguments|ambiguous option|argument |invalid choice"
        r"|the following arguments are required|expected |unrecognized)",
        # the same refusal without argparse's program prefix (a wrapper that re-prints it, a paste that cut it)
        r"^error: (?:unrecognized arguments: |ambiguous option: --|argument --?[\w-]+: |the following arguments are "
        r"required: )"), terminal=True),
    Cause("flag_value", "bad_flags", 70, _rx(
        r"[Uu]nknown speculative algorithm", r"is not supported for (?:attention|the) backend",
        r"[Aa]ttention backend '?[\w.-]+'? is not supported",
        r"--[\w-]+ (?:is|are) (?:not supported|required|invalid)", r"(?:cannot|can't|must not) be used (?:together )?with --",
        r"[Ii]nvalid (?:value|choice|argument)[^.]{0,60}--[\w-]+", r"User specified context_length \d+ is greater than",
        r"must be divisible by (?:the )?(?:tensor|pipeline) parallel size", r"divisible by (?:tp_size|tensor parallel)",
        r"[Bb]float16 is only supported on GPUs with compute capability", r"is not supported for the current GPU",
        r"[Ii]nvalid (?:value|choice) for --[\w-]+", r"is greater than the derived max_model_len",
        r"[Ii]nvalid attention backend", r"[Ii]nvalid quantization method",
        r"is not divisible by weight quantization block",
        r"[Uu]nknown quantization method",
        # a LoRA adapter bigger than the server was sized for (``--max-lora-rank``)
        r"LoRA rank \d+ is greater than max_lora_rank",
        # ``--chat-template`` names a file that is not there
        r"chat template string \(.{0,300}\) appears path-like, but doesn't exist",
        # a quantization scheme or kernel this GPU generation lacks (the flags ask for it)
        r"\b(?:[Ff][Pp]8|FP4|NVFP4|MXFP4|[Mm]arlin|AWQ|GPTQ|W8A8|INT8)\b[^.\n]{0,80}\bnot supported on (?:this|the current"
        r"|your) (?:GPU|device|platform|hardware)",
        r"only supports? (?:Ampere|Hopper|Turing|Blackwell) GPUs? or newer",
        r"is only supported on (?:CUDA )?devices with compute capability", r"requires (?:a )?(?:GPU|device)s? with compute capability",
        # more GPUs asked for (tensor x pipeline x data parallel) than the host shows
        r"World size \(\d+\) is larger than the number of available GPUs",
        r"number of required GPUs exceeds the total number of available GPUs",
        r"ensure that world_size \(\d+\) is less than", r"local_world_size must be less than or equal to the number of visible",
        r"is smaller than max_model_len", r"[Ii]nvalid (?:tool call|tool|reasoning) parser: ", r"(?:Async)?(?:EngineArgs|ServerArgs)\.__init__\(\) got an unexpected keyword")),
    # A startup check naming the values it accepts (``Only EAGLE and DSPARK speculative algorithms are supported
    # for ...``), and vLLM's pydantic config validation refusing a combination (``Value error, Model Runner V2 does
    # not yet support: ...`` under ``ValidationError: 1 validation error for VllmConfig``): the flags ask for it.
    Cause("refused", "bad_flags", 72, _rx(
        r"\b[Oo]nly [\w\-/, ]{1,80} (?:algorithms?|backends?|methods?|modes?|values?|dtypes?) (?:are|is) supported",
        r"^(?:[\w.]+\.)?Argument(?:Type)?Error\b"), exception_only=True),
    Cause("config_refused", "bad_flags", 72, _rx(
        r"^Value error, .{0,300}?(?:does(?: not|n't)(?: yet)? support|(?:is|are) not (?:yet )?supported|[Uu]nsupported"
        r"|must be|cannot be|can't be|[Ii]nvalid)")),
    # vLLM's and SGLang's ``divide()`` check: a size (heads, layers, experts) the parallel sizes do not divide
    Cause("divisible", "bad_flags", 68, _rx(r"^(?:\w+\.)*AssertionError: \d+ is not divisible by \d+"),
          exception_only=True),
    # speculative decoding
    Cause("spec", "spec_decode_error", 70, _rx(
        r"[Ss]peculative", r"[Dd]raft[ _]?model", r"\bdraft", r"EAGLE", r"[Ee]agle", r"NEXTN", r"[Nn]ext[Nn]\b",
        r"\bMTP\b"), exception_only=True),
    Cause("spec_msg", "spec_decode_error", 70, _rx(
        r"[Ff]ailed to (?:load|initialize|init) (?:the )?draft", r"[Uu]nsupported speculative",
        r"[Ss]peculative[\w ]{0,40} (?:is )?not supported", r"EagleProposer|eagle_worker|draft_worker")),
    # warmup
    Cause("warmup", "warmup_failed", 80, _rx(r"Initialization failed\. warmup error", r"[Ww]armup (?:request )?failed"),
          terminal=True, announce=True),
    # going down (what a launcher prints after a child failed): low specificity
    Cause("hit_exception", "other", 15, _rx(
        r"hit an exception", r"Exception in worker \S+ while processing method", r"Error executing method",
        r"EngineCore failed to start", r"WorkerProc failed to start", r"Error in inspecting model architecture",
        r"EngineCore encountered an issue", r"WorkerProc hit an exception", r"^Exception in [\w.]+:$",
        # Python's own report of an exception no handler caught in a thread (``threading.excepthook``)
        r"^Exception in thread \S{1,120}(?: \([\w.<>]{1,120}\))?:$",
        r"EngineCore encountered a fatal error"),
        terminal=True, announce=True),
    Cause("engine_dead", "other", 12, _rx(
        r"Engine core initialization failed", r"EngineDeadError", r"Engine loop is not running",
        r"Engine process failed to start", r"AsyncEngineDeadError", r"EngineCore exiting",
        r"Rank \d+ scheduler is dead", r"[Ss]ee (?:the )?(?:stack trace|root cause) \(?above\)?",
        r"check the stack trace above for the root cause", r"AsyncLLM output_handler failed",
        # vLLM's client and launcher once the engine's process is gone (V0's MQLLMEngine, any engine word)
        r"\b(?:MQ)?LLM ?[Ee]ngine is (?:already )?dead\b", r"\b[Ee]ngine process (?:\(pid \d+\) )?died\b"), terminal=True,
        follow_up=True),
    # A worker's death as its executor reports it: the first death, worth more than a bare traceback after it.
    Cause("worker_died", "other", 18, _rx(
        r"Worker proc \S+ died unexpectedly", r"Engine core proc \S+ died unexpectedly"), crash=True, terminal=True),
    # A launcher saying a *signal* came from its workers (vLLM's executor: ``got fatal signal from worker processes``):
    # with no worker traceback in the file, the signal is all it shows of the death (README, rule 6); a traceback of
    # the worker, even cut, says more (it outscores this).
    Cause("worker_signal", "signal_killed", 14, _rx(r"\b[Gg]ot (?:a )?fatal signal from (?:its |the )?(?:worker|child)"),
          crash=True, terminal=True),
    # A process ended by a signal, as its own crash handler reports it: no cause of its own.
    # ``Fatal Python error: ...`` is followed by faulthandler's dump of every thread's stack
    # (``Thread 0x... (most recent call first):``): the dump belongs to that line, whose frames only say where.
    Cause("signal_crash", "signal_killed", 30, _rx(
        r"Fatal Python error: (?:Segmentation fault|Bus error|Floating point exception|Illegal instruction)",
        r"\*\*\* SIG(?:SEGV|BUS|FPE|ILL|KILL) received at time=", r"^Segmentation fault\b", r"^Bus error\b",
        r"!!+ Segfault encountered !!+"),
        terminal=True),
    # Any crash handler's or wrapper's report of a fatal signal, by number or name, whatever its wording (UCX's
    # ``Caught signal 11 (Segmentation fault: ...)``, ``Signal Received: 11``, ``process killed by signal 9``). Such a
    # handler may catch the signal in one thread and the process go on (UCX): when start-up then goes on and a later
    # failure is announced, that announcement (15, fresh +10) outranks this report, which progress demoted.
    Cause("signal_report", "signal_killed", 22, _rx(
        r"\b(?:[Cc]aught|[Rr]eceived|[Gg]ot) (?:fatal )?signal:? ?(?:11|7|4|8)\b(?!\.\d)",
        r"\b[Ss]ignal [Rr]eceived: ?(?:11|7|4|8)\b(?!\.\d)",
        r"\b(?:[Cc]aught|[Rr]eceived|[Gg]ot) (?:fatal )?(?:signal )?SIG(?:SEGV|BUS|ILL|FPE)\b",
        # glog's / folly's failure signal handler: ``*** SIGSEGV (@0x0) received by PID 12 (TID 0x7f..) ...``
        r"\*\*\* SIG(?:SEGV|BUS|ILL|FPE) \(@0x[0-9a-f]+\) received by PID",
        r"\b(?:killed|terminated|died|exited|crashed) (?:by|with|from|of|on|due to) (?:a |the )?(?:fatal )?signal:? ?"
        r"(?:(?:11|7|4|8|9)\b(?!\.\d)|SIG(?:SEGV|BUS|ILL|FPE|KILL)\b)"),
        terminal=True),
    # vLLM's API server names the engine core that died and its exit code; a negative one is a signal.
    Cause("engine_signal", "signal_killed", 30, _rx(r"Failed core proc\(s\): \{'[^']{1,80}': -\d+"), terminal=True),
    # Ray's word for it: the worker is gone; the signal, if any, is in its own lines (which then decide). Ray lists
    # possible causes (the OOM killer, a signal) without knowing which: no cause of its own (README, rule 6).
    Cause("ray_worker_died", "other", 28, _rx(
        r"A worker died or was killed while executing a task by an unexpected system error",
        r"The actor is dead because its worker process has died"), terminal=True),
    # A process announcing its own end, whatever the wording family: uvicorn/starlette after a lifespan traceback,
    # a launcher or wrapper reporting a child's non-zero exit, a start-up that gives up. No cause of its own: the
    # lines before it (the traceback) name it; alone, it still proves the server went down.
    Cause("going_down", "other", 11, _rx(
        r"Application startup failed\. Exiting", r"\b[Ss]tartup failed[,;:.]? (?:[Ee]xiting|[Aa]borting)",
        r"\baborting startup\b", r"\b(?:[Ss]erver|[Ww]orker|[Ee]ngine|[Pp]rocess|[Ss]ubprocess|[Cc]ontainer)"
        r"(?: \S{1,80})? (?:exited|terminated|died) (?:unexpectedly )?with (?:exit )?(?:code|status)[ :=]*-?[1-9]\d*",
        r"\bexited with (?:a )?non-?zero (?:exit )?(?:code|status)", r"\b(?:[Ss]erver|[Ee]ngine) process exited unexpectedly",
        # a wrapper that launched the server reporting, by the server's name, that it never came up (InstructLab's
        # ``vLLM failed to start.``)
        r"^(?:[Tt]he )?(?:vLLM|vllm|SGLang|sglang)(?: [\w-]{1,40}){0,2} (?:server |engine |process )?failed to "
        r"(?:start|launch|come up|initiali[sz]e)\b",
        r"^(?:[Ee]rror: )?[Ff]ailed to (?:start|launch) (?:the )?(?:vLLM|vllm|SGLang|sglang)\b"),
        terminal=True),
    Cause("native_crash", "other", 12, _rx(
        r"Fatal Python error", r"core dumped", r"terminate called after throwing",
        r"^Aborted\b", r"^what\(\): "), terminal=True),
    # (``proces.``: some SGLang releases' own spelling of the same line)
    Cause("sigquit", "other", 10, _rx(r"Received sigquit from a child proces", r"SIGQUIT received"),
          terminal=True, stop_induced=True),
    # The shell's note that the server got SIGKILL. With nothing more specific in the log and no stop
    # request, the kernel's OOM killer is by far the usual sender (the exit record's oom_kill says).
    Cause("killed", "host_oom_killed", 8, _rx(r"^Killed$"), terminal=True, stop_induced=True),
)
CAUSES_BY_NAME = {c.name: c for c in CAUSES}

CHILD_CRASH = re.compile(r"(?:Subprocess \S+ \(pid=\d+\) crashed with exit code|Worker \S+ pid \d+ died, exit code:"
                         r"|Child process unexpectedly failed with exitcode=) ?(-?\d+)")
"""A launcher reports a child's exit code (SGLang's ``Subprocess ... crashed``, ``Child process unexpectedly failed
with exitcode=-9``, vLLM v0's ``Worker VllmWorkerProcess pid 123 died, exit code: -9``); group 1 is the code."""
EXIT_CODE = re.compile(r"^(Exit) code: (-?\d+)$")
"""SGLang diffusion's launcher after a rank died (``Exit code: -9``)."""
SYMPTOMS: tuple[tuple[FailureCause, bool, re.Pattern[str]], ...] = (
    # torch's c10d store sockets timing out between ranks (a warning, the failure comes next)
    ("nccl_error", False, _rx(r"\[c10d\].{0,300}(?:timed out after \d+|has timed out)",
                              r"\[c10d\] .{0,200}Socket Timeout")),
    # torch warns that its build has no kernels for this GPU: the first kernel launch fails, whatever the step
    ("cuda_driver", True, _rx(r"with CUDA capability sm_\d+ is not compatible with the current PyTorch installation")),
)
"""Warnings that are no failure yet but say what is going wrong: a failure cut before its exception line
after one takes that cause - right after it (as ``PHASES`` does for start-up steps), or, for a *durable*
symptom (True), at any later step."""
FAULTHANDLER_THREAD = re.compile(r"^(?:Current )?[Tt]hread 0x[0-9a-fA-F]+ \(most recent call first\):")
"""A thread's header in faulthandler's dump after ``Fatal Python error``."""
SPEC_PROGRESS = re.compile(r"[Dd]rafter|[Dd]raft model|[Ss]peculative|EAGLE|[Ee]agle|MTP|NEXTN")
"""A start-up step of the speculative path: a generic failure right after it is a speculative failure."""
RANK_DIED = re.compile(r"Rank (\d+) scheduler died during initialization \(exit code: (-?\d+)\)")

KEYWORDS = (
    "error", "memory", "sigquit", "crash", "died", "killed", "in use", "eaddrinuse", "nccl", "gloo",
    "cuda", "not found", "notfound", "not a local folder", "does not appear", "can't load", "gated",
    "exception", "fatal", "fault", "abort", "core dumped", "terminate called", "fail", "interrupt",
    "nvidia", "driver", "symbol", "shared object", "speculative", "draft", "engine", "not available",
    "not enough", "no available", "no module", "larger than", "exit", "no such file", "incorrect path",
    "errno", "watchdog", "runs out of", "repo", "capturing", "kernel image", "what():", "proposer",
    "eagle", "connection closed", "tensor map", "warmup", "assertion", "dead", "watchdog", "allocate",
    "mtp", "nextn", "not supported", "glibc", "divisible", "--", "huggingface", "traffic", "ninja", "nvcc",
    "jit", "compute capability", "infer device", "hip", "hsa_", "cublas", "cudnn", "nvml", "cannot import",
    "sigsegv", "sigbus", "sigill", "sigfpe", "sigkill", "bus error", "illegal instruction", "floating point",
    "could not load", "cannot find any", "max_model_len", "quantization", "deepep", "ncclunique",
    "segfault", "signal", "gpus", "world_size", "unexpected keyword", "client error", "credentials", "config format",
    "socket address", "triton error", "adapter", "safetensor", "permission denied", "lora rank", "ampere",
    "hopper", "turing", "blackwell", "available", "without", "cur_batch", "pyspy dump", "output_handler", "ptxas", ".target sm_", "path-like", "installed", "untagged enum", "calledprocesserror", "divisible", "python.h", "compiler", "ptx", "json", "fatal error ::", "deserializing", "xid", "code object", "kernel image", "low on memory",
)
"""A cheap pre-filter: a line without any of these (lower-cased) cannot match a cause."""

