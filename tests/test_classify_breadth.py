"""Failure families of recent SGLang / vLLM releases beyond the corpus: Triton resources, torch.compile, JIT
kernel builds, tokenizers and chat templates, LoRA, quantization on older GPUs, PD transfer engines, grammar
backends, V1 engine-core deaths, disks and permissions - each with its cause, its decisive line and a hint that
names the fix. Also the structural rules these families need (a health probe does not revive a crashed worker,
a handled request error shows a serving server, pydantic's message line under its header) and inputs that must
never make the classifier slow.

The lines are written for this test after the wording the libraries print (seen in public issue threads).
"""

from __future__ import annotations

import time

import pytest

from console.core.classify import classify

START = ("[2025-01-01 00:00:00] Load weight begin. avail mem=70.00 GB\n"
         "Traceback (most recent call last):\n  File \"launch.py\", line 1, in <module>\n    main()\n")

# message line -> (cause, a phrase the hint must contain)
CASES = {
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 135168, Hardware limit: "
    "101376. Reducing block sizes or `num_stages` may help.": ("other", "shared memory"),
    "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:": ("other", "--enable-torch-compile"),
    "torch._inductor.exc.InductorError: AssertionError: expected size 4==8, stride 1==1 at dim=0":
        ("other", "--enforce-eager"),
    "RuntimeError: Sparse Attention Indexer CUDA op requires DeepGEMM to be installed": ("import_error", "DeepGEMM"),
    "Exception: data did not match any variant of untagged enum ModelWrapper at line 250373 column 3":
        ("import_error", "tokenizers"),
    "ValueError: Cannot use chat template functions because tokenizer.chat_template is not set and no template "
    "argument was passed!": ("other", "--chat-template"),
    "jinja2.exceptions.TemplateSyntaxError: unexpected '}'": ("other", "--chat-template"),
    "ValueError: The supplied chat template string (/templates/missing.jinja) appears path-like, but doesn't exist!":
        ("bad_flags", "--chat-template"),
    "ValueError: LoRA rank 64 is greater than max_lora_rank 16.": ("bad_flags", "--max-lora-rank"),
    "ValueError: Loading lora my-adapter failed: No adapter found for /data/lora/checkpoint-57":
        ("model_not_found", "--lora-modules"),
    "RuntimeError: torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0 or 8.9, or "
    "ROCm MI300+": ("bad_flags", "--quantization"),
    "RuntimeError: FlashAttention only supports Ampere GPUs or newer.": ("bad_flags", "newer compute capability"),
    "RuntimeError: Failed to initialize Mooncake TransferEngine: protocol=rdma, ret=-1":
        ("other", "--disaggregation-ib-device"),
    "RuntimeError: Failed to initialize Mooncake engine: -1": ("other", "--disaggregation-ib-device"),
    "RuntimeError: xgrammar compile error: unsupported JSON schema": ("other", "--grammar-backend"),
    "RuntimeError: NCCL communicator was aborted on rank 1.": ("nccl_error", "NCCL_DEBUG=INFO"),
    "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 3/4 clients joined.":
        ("nccl_error", "NCCL_DEBUG=INFO"),
    "OSError: Qwen/Qwen3-8B-Typo is not a local folder and is not a valid model identifier listed on "
    "'https://huggingface.co/models'": ("model_not_found", "repo id"),
    "safetensors_rust.SafetensorError: Error while deserializing header: incomplete metadata, file not fully "
    "covered": ("model_not_found", "download it again"),
    "OSError: [Errno 28] No space left on device": ("other", "disk is full"),
    "OSError: [Errno 24] Too many open files": ("other", "ulimit -n"),
    "triton.compiler.errors.CompilationError: at 12:8: def _fwd_kernel(": ("other", "~/.triton/cache"),
    "huggingface_hub.errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url: "
    "https://huggingface.co/api/models/Qwen/Qwen3-8B/revision/main": ("model_not_found", "rate limit"),
    "PermissionError: [Errno 13] Permission denied: '/data/hf-cache/hub/models--Qwen--Qwen3-8B'":
        ("model_not_found", "permission denied"),
    "PermissionError: [Errno 13] Permission denied: '/tmp/torchinductor_root'": ("other", "writable"),
    "RuntimeError: Ninja build failed. Ninja output:": ("other", "nvcc"),
    "RuntimeError: Assertion error (csrc/apis/../jit_kernels/impls/../../jit/kernel_runtime.hpp:45): exit_code == 0":
        ("other", "JIT kernel build"),
    "ptxas /tmp/tmpxft_0000f5ba-6_marlin_cuda_kernel.ptx, line 709; error   : Feature '.m16n8k16' requires .target "
    "sm_80 or higher": ("other", "newer GPU"),
    "ValueError: The quantization method gptq_marlin is not supported for the current GPU. Minimum capability: 80. "
    "Current capability: 70.": ("bad_flags", "compute capability"),
    "ValueError: User-specified max_model_len (65536) is greater than the derived max_model_len "
    "(max_position_embeddings=32768 or model_max_length=None in model's config.json).": ("bad_flags", "--max-model-len"),
}


@pytest.mark.parametrize("line", sorted(CASES))
def test_family_line_names_its_cause_and_fix(line):
    got = classify(START + line + "\n")
    cause, phrase = CASES[line]
    assert (got.state, got.cause, got.line) == ("failed", cause, line)
    assert got.hint is not None and phrase in got.hint


def test_compiler_failure_inside_backend_compiler_failed_is_the_decisive_line():
    """torch.compile's wrapper prints the compiler's failure as its message: that line names the problem."""
    gcc = ("(VllmWorkerProcess pid=802) ERROR 04-23 00:04:19 multiproc_worker_utils.py:240] CalledProcessError: "
           "Command '['/usr/bin/gcc', '/tmp/tmpab/main.c', '-O3', '-shared', '-fPIC', '-o', '/tmp/tmpab/cuda_utils.so', "
           "'-lcuda']' returned non-zero exit status 1.")
    text = (
        "(VllmWorkerProcess pid=802) ERROR 04-23 00:04:19 multiproc_worker_utils.py:240] "
        "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n" + gcc + "\n"
        "(VllmWorkerProcess pid=802) ERROR 04-23 00:04:19 multiproc_worker_utils.py:240]\n"
        "(VllmWorkerProcess pid=802) ERROR 04-23 00:04:19 multiproc_worker_utils.py:240] Set TORCH_LOGS=\"+dynamo\" "
        "and TORCHDYNAMO_VERBOSE=1 for more information\n"
    )
    got = classify(text)
    assert (got.state, got.cause, got.line) == ("failed", "other", gcc)
    assert got.hint is not None and "JIT kernel build" in got.hint


def test_jit_build_names_the_compiler_error_not_ninja_summary():
    """A JIT kernel build failure has no table cause (``other``, as the corpus labels it), but the compiler's own
    complaint is its decisive line and the hint names the toolchain."""
    text = (
        "[2025-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/x/flashinfer/jit/cpp_ext.py", line 1, in run_ninja\n    subprocess.run(command, check=True)\n'
        "RuntimeError: Ninja build failed. Ninja output:\n"
        "[1/3] /usr/local/cuda/bin/nvcc -c batch_prefill.cu -o batch_prefill.cuda.o\n"
        "FAILED: batch_prefill.cuda.o\n"
        "nvcc fatal   : Unsupported gpu architecture 'compute_120a'\n"
        "ninja: build stopped: subcommand failed.\n"
    )
    got = classify(text)
    assert (got.state, got.cause, got.line) == ("failed", "other",
                                                 "nvcc fatal   : Unsupported gpu architecture 'compute_120a'")
    assert got.hint is not None and "JIT kernel build" in got.hint


@pytest.mark.parametrize("exc", [
    "torch._inductor.exc.InductorError: LoweringException: AssertionError: size mismatch",
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, Hardware limit: 65536.",
])
def test_compile_or_kernel_resource_failure_inside_capture_is_cuda_graph(exc):
    text = (
        "[2025-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 300, in capture\n'
        "    self.capture_one_batch_size(bs)\n"
        '  File "/x/torch/_dynamo/eval_frame.py", line 1, in _fn\n    return fn(*args)\n' + exc + "\n"
    )
    got = classify(text)
    assert (got.state, got.cause, got.line) == ("failed", "cuda_graph", exc)


def test_graph_init_cut_at_init_device_graphs_is_cuda_graph():
    """Newer SGLang names the step ``init_device_graphs``: a traceback cut there is the graph set-up's."""
    head = "[2025-01-01 00:00:01 DP1 TP1] Scheduler hit an exception: Traceback (most recent call last):"
    text = (head + "\n"
            '  File "/x/sglang/srt/model_executor/model_runner.py", line 440, in initialize\n'
            "    self.init_device_graphs()\n"
            '  File "/x/sglang/srt/model_executor/model_runner.py", line 1842, in init_device_graphs\n')
    got = classify(text)
    assert (got.state, got.cause, got.line) == ("failed", "cuda_graph", head)


def test_cut_graph_init_takes_the_exception_line_another_rank_showed():
    """One rank's traceback shows its exception (no cause of its own), the next rank's is cut inside graph init:
    the cause comes from where the cut one stopped, the decisive line from the exception the first one shows."""
    exc = "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, Hardware limit: 65536."
    text = (
        "[2025-01-01 00:00:00 TP1] Load weight end. type=X, avail mem=10 GB\n"
        '  File "/x/triton/compiler/compiler.py", line 385, in _init_handles\n'
        '    raise OutOfResources(self.metadata.shared, max_shared, "shared memory")\n' + exc + "\n"
        "[2025-01-01 00:00:01 TP5] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/model_executor/model_runner.py", line 180, in __init__\n'
        "    self.init_cuda_graphs()\n"
    )
    got = classify(text)
    assert (got.state, got.cause, got.line) == ("failed", "cuda_graph", exc)


def test_v1_engine_core_fatal_error_then_output_handler_follow_up():
    exc = ("(EngineCore_DP0 pid=2) ERROR 05-05 12:36:59 [core.py:710] RuntimeError: CUDA error: an illegal memory "
           "access was encountered")
    text = (
        "(APIServer pid=1) INFO:     Application startup complete.\n"
        "(EngineCore_DP0 pid=2) ERROR 05-05 12:36:59 [core.py:710] EngineCore encountered a fatal error.\n"
        "(EngineCore_DP0 pid=2) ERROR 05-05 12:36:59 [core.py:710] Traceback (most recent call last):\n"
        '(EngineCore_DP0 pid=2) ERROR 05-05 12:36:59 [core.py:710]   File "/x/vllm/v1/engine/core.py", line 701, '
        "in run_engine_core\n"
        "(EngineCore_DP0 pid=2) ERROR 05-05 12:36:59 [core.py:710]     engine_core.run_busy_loop()\n" + exc + "\n"
        "(APIServer pid=1) ERROR 05-05 12:36:59 [async_llm.py:480] AsyncLLM output_handler failed.\n"
        "(APIServer pid=1) ERROR 05-05 12:36:59 [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
    )
    got = classify(text)
    assert (got.state, got.cause, got.line) == ("failed", "cuda_driver", exc)


def test_v1_engine_core_fatal_error_cut_after_ready_is_a_crash():
    head = "(EngineCore_DP0 pid=2) ERROR 05-05 12:36:59 [core.py:710] EngineCore encountered a fatal error."
    text = (
        "(APIServer pid=1) INFO:     Application startup complete.\n" + head + "\n"
        "(EngineCore_DP0 pid=2) ERROR 05-05 12:36:59 [core.py:710] Traceback (most recent call last):\n"
        '(EngineCore_DP0 pid=2) ERROR 05-05 12:36:59 [core.py:710]   File "/x/vllm/v1/engine/core.py", line 701, '
        "in run_engine_core\n"
    )
    got = classify(text)
    assert (got.state, got.line) == ("failed", head)


@pytest.mark.parametrize("who", ["DataParallelController", "DetokenizerManager"])
def test_sglang_controller_or_detokenizer_death_after_ready_fails(who):
    exc = "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe4 in position 0: unexpected end of data"
    text = (
        "[2025-01-01 00:00:00] The server is fired up and ready to roll!\n"
        f"[2025-01-01 00:00:05] {who} hit an exception: Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/managers/x.py", line 1, in run_process\n    manager.event_loop()\n' + exc + "\n"
    )
    got = classify(text)
    assert (got.state, got.cause, got.line) == ("failed", "other", exc)


def test_pydantic_message_line_beats_its_header():
    msg = ("(APIServer pid=9)   Value error, Expecting value: line 1 column 1 (char 0) [type=value_error, "
           "input_value=ArgsKwargs((), {'model': 'm'}), input_type=ArgsKwargs]")
    text = (
        "(APIServer pid=9) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        + msg + "\n"
        "(APIServer pid=9)     For further information visit https://errors.pydantic.dev/2.12/v/value_error\n"
    )
    got = classify(text)
    assert (got.state, got.cause, got.line) == ("failed", "other", msg)


def test_health_probes_do_not_revive_a_crashed_worker():
    """A front end keeps answering /health after its GPU worker died: the server failed."""
    exc = "RuntimeError: Scheduler terminated after 3 consecutive errors. Last error: boom"
    probe = '[2025-01-01 00:00:10] INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n'
    text = (
        probe + "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap\n    self.run()\n'
        '  File "/x/sglang/multimodal_gen/runtime/managers/gpu_worker.py", line 334, in run_scheduler_process\n'
        "    scheduler.event_loop()\n" + exc + "\n" + probe * 3
    )
    got = classify(text)
    assert (got.state, got.cause, got.line) == ("failed", "other", exc)


def test_health_probe_alone_still_shows_a_server_up():
    got = classify('[2025-01-01 00:00:10] INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n')
    assert got.state == "ready"


def test_handled_request_error_shows_a_serving_server():
    """vLLM's request handler (``entrypoints/openai/<api>/serving.py``) logs a request's traceback: serving."""
    text = (
        "(APIServer pid=9) ERROR 02-21 11:34:27 [serving.py:120] Error in preprocessing prompt inputs\n"
        "(APIServer pid=9) ERROR 02-21 11:34:27 [serving.py:120] Traceback (most recent call last):\n"
        '(APIServer pid=9) ERROR 02-21 11:34:27 [serving.py:120]   File "/x/vllm/entrypoints/openai/completion/'
        'serving.py", line 114, in render_completion_request\n'
        "(APIServer pid=9) ERROR 02-21 11:34:27 [serving.py:120]     engine_prompts = await renderer.render(\n"
    )
    assert classify(text).state == "ready"


@pytest.mark.parametrize(("frame", "cause"), [
    ('  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 4159, in barrier\n'
     "    work = default_pg.barrier(opts=opts)\n", "nccl_error"),
    ('  File "/usr/lib/python3/site-packages/urllib3/connectionpool.py", line 789, in urlopen\n'
     "    response = self._make_request(\n", "other"),
])
def test_connection_reset_is_between_ranks_only_in_distributed_frames(frame, cause):
    exc = "ConnectionResetError: [Errno 104] Connection reset by peer"
    got = classify("Traceback (most recent call last):\n" + frame + exc + "\n")
    assert (got.state, got.cause, got.line) == ("failed", cause, exc)


def test_sglang_log_with_vllm_module_lines_is_still_sglang():
    """Old SGLang logs vLLM modules it uses (custom all-reduce) in vLLM's format; its rank-tagged prefix says
    whose log it is, so uvicorn's start before SGLang's own warmup is still loading."""
    text = (
        "[2024-12-06 16:06:48 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
        "INFO 12-06 16:07:01 custom_all_reduce.py:233] Registering 2967 cuda graph addresses\n"
        "[2024-12-06 16:07:01 TP0] max_total_num_tokens=1058405, max_prefill_tokens=32768\n"
        "[2024-12-06 16:07:02] INFO:     Started server process [17965]\n"
        "[2024-12-06 16:07:02] INFO:     Waiting for application startup.\n"
        "[2024-12-06 16:07:02] INFO:     Application startup complete.\n"
    )
    assert classify(text).state == "loading"


def test_interleaved_worker_announcements_first_process_decides():
    """Two workers announce the same failure and their tracebacks interleave (cut before any exception): the
    first worker's announcing line is decisive, not the one that happened to collect a traceback header."""
    first = "(Worker_TP0 pid=1) ERROR 05-02 04:19:47 [multiproc_executor.py:870] WorkerProc failed to start."
    text = (
        first + "\n"
        "(Worker_TP1 pid=2) ERROR 05-02 04:19:47 [multiproc_executor.py:870] WorkerProc failed to start.\n"
        "(Worker_TP0 pid=1) ERROR 05-02 04:19:47 [multiproc_executor.py:870] Traceback (most recent call last):\n"
        "(Worker_TP1 pid=2) ERROR 05-02 04:19:47 [multiproc_executor.py:870] Traceback (most recent call last):\n"
        '(Worker_TP0 pid=1) ERROR 05-02 04:19:47 [multiproc_executor.py:870]   File "/x/vllm/v1/executor/'
        'multiproc_executor.py", line 837, in worker_main\n'
    )
    got = classify(text)
    assert (got.state, got.line) == ("failed", first)


@pytest.mark.parametrize("exc", [
    "ValueError: This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the "
    "messages, 1000 in the completion). Please reduce the length of the messages or completion.",
    "ValueError: The decoder prompt (length 9000) is longer than the maximum model length of 8192.",
    "ValueError: The input (40000 tokens) is longer than the model's context length (32768 tokens).",
])
def test_request_refused_for_its_length_is_no_server_failure(exc):
    """A request too long for the context is answered 400 and the server keeps serving."""
    text = ("ERROR 01-01 00:00:00 [serving_chat.py:1] Error in preprocessing prompt inputs\n"
            "Traceback (most recent call last):\n  File \"/x/y.py\", line 1, in f\n    g()\n" + exc + "\n")
    assert classify(text).state == "ready"


def test_length_error_inside_the_engine_loop_still_fails():
    exc = "ValueError: The decoder prompt (length 9000) is longer than the maximum model length of 8192."
    text = ("Traceback (most recent call last):\n"
            '  File "/x/vllm/v1/engine/core.py", line 1, in run_engine_core\n    g()\n' + exc + "\n")
    got = classify(text)
    assert (got.state, got.line) == ("failed", exc)


# ---------------------------------------------------------------- never slow

@pytest.mark.parametrize("line", [
    "draft" + "a" * 60000,  # a word-run with a speculative keyword (the config-dump filter once went quadratic)
    "speculative_" * 5000,
    "(a b=c, " * 8000,
    "ProcessGroupNCCL " * 3800,
    ".cu:1: Assertion " * 3800,
    "a." * 32000,
    "File \"" + "x" * 64000,
])
def test_long_lines_stay_fast(line):
    t = time.monotonic()
    classify(("Traceback (most recent call last):\n" + line + "\n") * 3)
    assert time.monotonic() - t < 10.0


def test_binary_garbage_never_crashes():
    blob = bytes(range(256)) * 400
    text = blob.decode("latin-1")
    got = classify(text + "\n" + text[::-1])
    assert got.state in ("ready", "loading", "failed", "stopped")
