"""The hint for each cause: what the operator should most likely change."""

from __future__ import annotations

import re
import signal as _signal

from console.core.classify.episode import Failure
from console.core.flags.renames import RENAMES
from console.model import ExitRecord, FailureCause, ProcessExit

_RENAMED = {r.old: r.replacement for r in RENAMES}
_FLAG = re.compile(r"(--[\w-]+)")
_PORT = re.compile(r"\(\s*'[^']*',\s*(\d+)\s*\)|[Pp]ort[ =:]+(\d+)|:(\d{2,5})\b")
_MODULE = re.compile(r"No module named '([^']+)'|cannot import name '([^']+)'|undefined symbol: (\S+)"
                     r"|requires? ([\w\-.]+) to be installed|([\w\-.]+) (?:is|are) not installed")
_AMBIG = re.compile(r"ambiguous option: (--[\w-]+) could match (.*)")
_GPU_COUNT = re.compile(r"available GPUs|visible devices|world_size|World size")
_ARCH = re.compile(r"kernel image|NoKernelImage|invalid device function|code object|NoBinaryForGpu")
_NATIVE_SIGNAL = re.compile(r"\bsignal:? ?(?:11|7|4|8)\b|SIG(?:SEGV|BUS|ILL|FPE)\b", re.IGNORECASE)
"""A signal report naming a crash in native code (SIGSEGV, SIGBUS, SIGILL, SIGFPE), not a kill from outside."""
_MEM_FRACTION = re.compile(r"mem_fraction_static=([\d.]+)")
_BUILD = re.compile(r"ninja: build stopped|Ninja build failed|nvcc fatal|ptxas fatal|nvcc' failed|JIT compil|Error building extension"
                    r"|Python\.h|C compiler|fatal error: \S+\.h|CalledProcessError: Command|jit/kernel_runtime")
_JIT_HINT = ("a JIT kernel build failed (flashinfer / deep_gemm / triton / torch extensions): install a CUDA "
             "toolkit whose nvcc matches torch's CUDA and knows this GPU, set CUDA_HOME, install ninja and the Python "
             "headers, clear the JIT caches (~/.cache/flashinfer, ~/.cache/deep_gemm), or use a prebuilt wheel")
_OTHER_HINTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (_BUILD, _JIT_HINT),
    (re.compile(r"OutOfResources|out of resource: shared memory"),
     "a Triton kernel needs more shared memory than this GPU has (its block sizes are tuned for a bigger GPU): try "
     "another --attention-backend / MoE or sampling backend, a smaller --cuda-graph-max-bs / chunked prefill, or a "
     "release with configs for this GPU"),
    (re.compile(r"triton\.compiler\.errors|CompilationError|triton\.runtime\.errors"),
     "a Triton kernel failed to compile for this GPU: align the triton version with torch, clear ~/.triton/cache, "
     "or pick another --attention-backend / kernel backend"),
    (re.compile(r"Too many open files|\[Errno 24\]"),
     "the process ran out of file descriptors: raise the open-files limit (ulimit -n 65535, docker --ulimit "
     "nofile=65535:65535) before starting the server"),
    (re.compile(r"BackendCompilerFailed|InductorError|torch\._dynamo|torch\._inductor"),
     "torch.compile (dynamo/inductor) failed to compile the model: drop --enable-torch-compile (SGLang) or run "
     "vLLM with --enforce-eager / -O0, clear the torch compile cache (~/.cache/vllm/torch_compile_cache, "
     "/tmp/torchinductor_*), and check that the C compiler and Triton match torch"),
    (re.compile(r"chat.?template|jinja2?|TemplateSyntaxError|TemplateError"),
     "the chat template is missing or broken: pass --chat-template with a template file (base models have none), or "
     "fix the tokenizer_config.json's chat_template"),
    (re.compile(r"(?<![A-Za-z])[Tt]okenizer(?![Mm]anager|_manager)|sentencepiece|tiktoken"),
     "the tokenizer cannot be loaded: check --tokenizer / the model directory's tokenizer files, install "
     "sentencepiece / tiktoken if the model needs them, and align transformers with the model"),
    (re.compile(r"xgrammar|outlines|llguidance|[Gg]rammar"),
     "the structured-output grammar backend failed: try another --grammar-backend (SGLang) / "
     "--guided-decoding-backend (vLLM: xgrammar, outlines, guidance) or align its version with the server"),
    (re.compile(r"[Mm]ooncake|NIXL|[Nn]ixl|UCX|TransferEngine|transfer engine|[Dd]isaggregation"),
     "the PD (prefill/decode) KV transfer engine failed to set up: check --disaggregation-ib-device (the RDMA NICs), "
     "the mooncake/nixl installation and its protocol (tcp when there is no RDMA), and that both sides can reach "
     "each other"),
    (re.compile(r"(?<![A-Za-z])(?:LoRA|[Ll]ora)(?![a-z])"),
     "a LoRA adapter failed to load: check the adapter path and format (--lora-paths / --lora-modules), its rank "
     "against --max-lora-rank and its target modules against the base model"),
    (re.compile(r"No space left on device|\[Errno 28\]"),
     "a disk is full: free space where the model cache, compile caches and /tmp live (HF_HOME, "
     "~/.cache, /tmp), or in a container raise /dev/shm (docker --shm-size)"),
    (re.compile(r"PermissionError|Permission denied|\[Errno 13\]"),
     "permission denied: run the server as a user that can read the model and write the caches (HF_HOME, "
     "~/.cache, TRITON_CACHE_DIR), or point those variables at writable directories"),
)
"""A generic failure (``other``) whose line names what failed: the fix for that family."""
_ORPHANS = "check for orphaned sglang:: processes still holding GPU memory from an earlier server"


def signal_of(exit: ExitRecord) -> int | None:
    """The signal that ended the process, from the record's signal or its exit code."""
    if exit.signal:
        return exit.signal
    code = exit.exit_code
    if code is not None and code < 0:
        return -code
    if code is not None and 128 < code <= 128 + 64:
        return code - 128
    return None


def signame(n: int) -> str:
    try:
        return _signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def _first(rx: re.Pattern[str], text: str) -> str | None:
    m = rx.search(text)
    return next((g for g in m.groups() if g), None) if m else None


CUT_NOTE = "the log stops before the exception line; judging by where it stopped: "
"""Said before the hint when the cause was inferred from a traceback's step or frames, not read."""
CUT_GUESS = "the log stops before the exception line, so the cause is not shown; failures where it stopped are usually: "
"""Said before the hint of the usual cause at that step (``Failure.guess``) when the log shows none."""


def hint_for(cause: FailureCause, c: Failure | None, exit: ExitRecord | None, *, vllm: bool = False,
             death: ProcessExit | None = None) -> str:
    """One sentence naming the likely fix (saying so when the cause is inferred from a cut log)."""
    hint = _hint_for(cause, c, exit, vllm=vllm, death=death)
    if c is not None and c.rule in ("announce", "traceback") and cause == c.cause and cause != "other":
        return CUT_NOTE + hint
    if c is not None and cause == "other" and c.cause == "other" and c.guess is not None and death is None:
        return CUT_GUESS + _hint_for(c.guess, c, exit, vllm=vllm)
    return hint


def _hint_for(cause: FailureCause, c: Failure | None, exit: ExitRecord | None, *, vllm: bool = False,
              death: ProcessExit | None = None) -> str:
    rule = c.rule if c else None
    body = (c.detail or c.line) if c else ""
    if death is not None and cause in ("signal_killed", "host_oom_killed", "other"):
        return _death_hint(cause, death)
    if cause == "gpu_oom":
        return _oom_hint(rule, body, vllm)
    if cause == "host_oom_killed" and rule == "killed" and (exit is None or exit.oom_kill_after is None):
        return ("the server got SIGKILL ('Killed') with nothing else in the log: most likely the host's OOM "
                "killer - check dmesg / journalctl -k for 'Out of memory: Killed process'; lower host RAM use "
                "(--hicache-size, fewer servers per host, a container memory limit that fits)")
    if cause == "host_oom_killed" and rule in ("enomem", "host_mem") and (exit is None or exit.oom_kill_after is None):
        return ("host RAM ran out inside the server (it could not allocate CPU memory): lower host memory use - "
                "fewer servers or Ray tasks per host, a smaller --hicache-size / --cpu-offload-gb / --swap-space, "
                "a larger container memory limit; check free -g and dmesg")
    if cause == "host_oom_killed":
        counts = ""
        if exit is not None and exit.oom_kill_before is not None and exit.oom_kill_after is not None:
            counts = f" ({exit.oom_kill_before} -> {exit.oom_kill_after})"
        return (f"the host's OOM killer ended the server: /proc/vmstat oom_kill rose{counts}; host RAM ran out "
                "- lower --hicache-size/--hicache-ratio, run fewer servers per host, check dmesg")
    if cause == "port_in_use":
        port = _first(_PORT, body)
        return (f"port{' ' + port if port else ''} is already taken (another server or an orphaned "
                "sglang::/VLLM:: process): stop it or choose another --port")
    if cause == "model_not_found":
        if "Permission denied" in body:
            return ("the model or its cache cannot be read (permission denied): run the server as a user that can read "
                    "the model directory and write HF_HOME / the HF cache, or fix their ownership")
        if "adapter" in body or "LoRA" in body or "lora" in body:
            return ("the LoRA adapter was not found: check the path given to --lora-paths / --lora-modules (a directory "
                    "with adapter_config.json and the adapter weights) or the adapter's repo id")
        if "429 Client Error" in body or "Server Error" in body:
            return ("the Hugging Face Hub refused or failed the download (rate limit or server error): retry later, set "
                    "HF_TOKEN (higher limits), or download the model once and point --model-path at the directory")
        if "Safetensor" in body or "deserializing header" in body:
            return ("a checkpoint file is cut short or corrupted (an interrupted download): delete it from the HF cache "
                    "or the model directory and download it again; check free disk space")
        return ("the model was not found: check --model-path (a local directory needs config.json), the "
                "repo id's spelling, HF_TOKEN for gated repos, HF_HUB_OFFLINE and the HF cache")
    if cause == "import_error":
        if _BUILD.search(body):
            return _JIT_HINT
        if "untagged enum" in body:
            return ("the installed tokenizers library cannot read this model's tokenizer.json (it is too old): upgrade "
                    "transformers and tokenizers in the server's environment")
        mod = _first(_MODULE, body)
        return (f"the server's Python environment is broken{f' ({mod})' if mod else ''}: install the missing "
                "package in that environment or align sglang / sgl-kernel / flashinfer / vllm / torch versions")
    if cause == "nccl_error":
        return ("multi-GPU communication failed: check CUDA_VISIBLE_DEVICES and --tp-size, stale processes "
                "on those GPUs, /dev/shm size in containers; retry with NCCL_DEBUG=INFO or NCCL_P2P_DISABLE=1")
    if cause == "bad_flags":
        if rule == "usage":
            return ("argparse printed its usage and refused the command line (its error line, naming the flag, is "
                    "not in the log): a flag is unknown or misspelt (underscores for dashes, a renamed flag) - check "
                    "the host's own flags (mtpconsole flags / mtpconsole check)")
        return _flags_hint(body) if rule in ("argparse", None) else _value_hint(body)
    if cause == "cuda_driver":
        if _ARCH.search(body):
            return ("the installed kernels were not built for this GPU's architecture (no kernel image / invalid "
                    "device function): install a torch / sglang / vllm build for this GPU (ROCm for AMD, the CUDA "
                    "arch list for older NVIDIA GPUs) or pick a supported --attention-backend")
        if rule == "cuda_error":
            return ("a CUDA error stopped the server: check nvidia-smi and dmesg (Xid), the driver vs the torch "
                    "CUDA build; for illegal memory access retry with --disable-cuda-graph or another "
                    "--attention-backend")
        return ("CUDA is not usable: check nvidia-smi, CUDA_VISIBLE_DEVICES and that the driver (and the torch "
                "build's GPU architectures) match this GPU")
    if cause == "cuda_graph":
        return ("CUDA-graph capture failed (not for memory): retry with --disable-cuda-graph or a smaller "
                "--cuda-graph-max-bs, drop --enable-torch-compile, or try another --attention-backend")
    if cause == "warmup_failed":
        return ("the server started but its own warmup request failed: usually an HTTP proxy intercepting "
                "127.0.0.1 - set NO_PROXY=127.0.0.1,localhost (and no_proxy) for the server")
    if cause == "watchdog_timeout":
        return ("a scheduler made no progress for --watchdog-timeout seconds (a hung collective or kernel, "
                "a stuck request): check the other ranks' last lines and NCCL, dump stacks with py-spy; "
                "raise --watchdog-timeout only for legitimately slow steps")
    if cause == "spec_decode_error":
        return ("speculative decoding failed to set up: check --speculative-algorithm, set "
                "--speculative-num-steps with --speculative-eagle-topk / --speculative-num-draft-tokens, the "
                "draft model path, and that this model supports the algorithm")
    if cause == "signal_killed" and (rule == "signal_crash" or (rule == "signal_report" and _NATIVE_SIGNAL.search(body))):
        return ("a server process died of a signal (its crash handler or Ray says so): SIGSEGV/SIGILL is a crash "
                "in native code - align torch / CUDA / kernel package versions; SIGBUS in a container is "
                "usually a small /dev/shm (docker --shm-size); relaunch")
    if cause == "signal_killed":
        return _signal_hint(c, exit)
    if rule == "child_exit" and c is not None and c.detail:
        code = re.search(r"exit code:? (-?\d+)", c.detail)
        return (f"a server subprocess exited{f' with code {code.group(1)}' if code else ''}: "
                "read the lines above it in the log")
    if ".target sm_" in body:
        return ("a kernel (Marlin, AWQ, FP8 ...) needs a newer GPU than this one (its build asks for a higher "
                "sm_ target): pick a --quantization / kernel this GPU supports, or use a GPU of that generation")
    for rx, text in _OTHER_HINTS:
        if body and rx.search(body):
            return text
    return "the server failed: read the decisive line and the log around it"


def _oom_hint(rule: str | None, body: str, vllm: bool) -> str:
    if vllm:
        return ("GPU memory ran out: lower --max-model-len or --max-num-seqs, adjust "
                "--gpu-memory-utilization; check for leftover VLLM:: processes holding GPU memory")
    if rule == "kv_pool":
        now = _first(_MEM_FRACTION, body)
        return ("no GPU memory left for the KV cache after the weights and Mamba/speculative buffers: "
                f"{_ORPHANS}; lower --max-running-requests or --context-length, or raise "
                f"--mem-fraction-static{f' (now {now})' if now else ''} only if the GPU has headroom")
    if rule == "runtime_oom":
        return ("the KV cache ran out while serving: lower --max-running-requests or --context-length, "
                "or raise --mem-fraction-static if the GPU has headroom")
    if "graph" in body.lower():
        return ("CUDA graph capture ran out of memory: lower --mem-fraction-static or "
                f"--cuda-graph-max-bs (or --disable-cuda-graph); {_ORPHANS}")
    return ("GPU out of memory: lower --mem-fraction-static, --max-running-requests or --context-length; "
            f"{_ORPHANS}")


def _value_hint(body: str) -> str:
    """A start-up check refused a flag's value or a combination (not argparse)."""
    if "[Errno 99]" in body:
        return ("the HTTP server cannot bind to that address (it is not one of this machine's): set --host to "
                "0.0.0.0, 127.0.0.1 or an address the host really has")
    if _GPU_COUNT.search(body):
        return ("more GPUs were asked for than this host shows: lower --tensor-parallel-size / "
                "--pipeline-parallel-size / --data-parallel-size (SGLang: --tp / --pp / --dp), or check "
                "CUDA_VISIBLE_DEVICES and that every GPU is visible in the container")
    if "divisible" in body:
        return ("the parallel sizes do not divide the model's sizes (attention heads, layers, experts, quantization "
                "blocks): pick a --tensor-parallel-size / --pipeline-parallel-size (SGLang: --tp / --pp) that divides "
                "them, e.g. a power of two")
    if "chat template" in body:
        return ("the --chat-template file does not exist (a path that is not a file is read as a template string): "
                "give an existing .jinja file or drop the flag to use the tokenizer's own template")
    if "max_lora_rank" in body:
        return ("the LoRA adapter's rank is larger than the server was sized for: raise --max-lora-rank (SGLang: "
                "--max-lora-rank as well) to at least the adapter's rank")
    if "compute capability" in body or "current GPU" in body or " not supported on " in body or "or newer" in body:
        return ("this GPU is too old for that setting (bfloat16 and FP8 need a newer compute capability): use "
                "--dtype float16, another --quantization, or a newer GPU")
    if "max_model_len" in body or "context_length" in body or "context length" in body:
        return ("the context length does not fit this model or this memory: lower --max-model-len "
                "(SGLang: --context-length) or raise --max-num-batched-tokens to match it")
    flag = _first(_FLAG, body)
    return (f"the server refused {flag or 'a flag value or combination'}: this version, model or GPU does not "
            "support it - change the value or drop the flag; check the host's own flags (mtpconsole flags)")


def _flags_hint(body: str) -> str:
    m = _AMBIG.search(body)
    if m:
        return (f"argparse rejected the ambiguous abbreviation {m.group(1)} (could be {m.group(2).strip()}): "
                "spell the full flag; flag names drift between releases - check the host's own flags "
                "(mtpconsole flags)")
    flag = _first(_FLAG, body.split(": error: ", 1)[-1]) or "a flag"
    renamed = f" (renamed {_RENAMED[flag]})" if flag in _RENAMED else ""
    return (f"argparse rejected {flag}{renamed}: flag names drift between releases - check the host's "
            "own flags (mtpconsole flags / mtpconsole check)")


def _signal_hint(c: Failure | None, exit: ExitRecord | None) -> str:
    sig = None
    proc = re.search(r"': -(\d+)", c.detail or "") if c is not None and c.rule == "engine_signal" else None
    if c is not None and c.rule == "child_signal" and c.detail and c.detail.lstrip("-").isdigit():
        sig = abs(int(c.detail))  # the scheduler's own signal, not the launcher's exit
    elif proc is not None:
        sig = int(proc.group(1))  # vLLM's engine core, as its API server reports it
    elif exit is not None:
        sig = signal_of(exit)
    what = signame(sig) if sig else "a signal"
    if sig not in (None, _signal.SIGKILL):
        return (f"ended by {what} with no cause in the log: something outside mtpconsole sent it "
                "(another operator, a job scheduler, systemd)")
    if exit is not None and exit.oom_kill_before is not None and exit.oom_kill_after is not None:
        oom = "/proc/vmstat oom_kill did not rise, so not the host OOM killer"
    else:
        oom = "often the host OOM killer (compare /proc/vmstat oom_kill, check dmesg)"
    return f"killed by {what} with no cause in the log: {oom}; otherwise someone or a watchdog killed it"


def _death_hint(cause: FailureCause, death: ProcessExit) -> str:
    who = death.describe()
    launcher = death.role == "launcher"
    if cause == "host_oom_killed":
        return (f"{who}: the kernel's OOM killer took it (oom_kill +{death.oom_kill_delta}) - host RAM ran out; "
                "lower --hicache-size/--hicache-ratio, run fewer servers per host, check dmesg")
    first = "first" if launcher else "before its launcher noticed"
    if death.signal == _signal.SIGKILL:
        rest = ("its workers may still hold GPU memory: check for orphans, then relaunch" if launcher else
                "relaunch the server, its remaining processes cannot serve without that rank")
        return (f"{who} {first}: oom_kill did not rise, so not the host OOM killer - "
                f"someone or a watchdog sent SIGKILL (check other operators, job schedulers, dmesg); {rest}")
    if death.signal:
        return (f"{who} {first}: {signame(death.signal)} came from outside the server "
                "(another operator, a job scheduler, a crash in native code for SIGSEGV/SIGABRT); relaunch")
    if launcher:
        return f"{who} first: read the end of the log"
    return f"{who} first: read that process's lines in the log just before the launcher's follow-up lines"
