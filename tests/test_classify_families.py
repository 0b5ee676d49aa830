"""How the classifier reads whole failure shapes of SGLang and vLLM, not single messages.

Each case is a few lines in the shape the servers print them (written for this test, after the wording
seen in public issue threads): which line decides, which cause, and what the hint says. Single-line
messages are in ``test_classify_messages.py``.
"""

from __future__ import annotations

from console.core.classify import classify
from console.core.classify.hints import CUT_GUESS


def test_faulthandler_dump_belongs_to_the_fatal_error_line():
    """``Fatal Python error`` then faulthandler's thread dump: the dump is not a traceback of its own."""
    text = (
        "frame #4: <unknown function> + 0x126850 (0x7f0626126850 in /usr/lib/x86_64-linux-gnu/libc.so.6)\n"
        "\n"
        "Fatal Python error: Aborted\n"
        "\n"
        "Thread 0x00007ee43dfff640 (most recent call first):\n"
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1419 in watchdog_thread\n'
        '  File "/usr/lib/python3.10/threading.py", line 953 in run\n'
        "\n"
        "Current thread 0x00007ee43d7fe640 (most recent call first):\n"
        '  File "/sgl/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 114 in forward_thread_func\n'
    )
    got = classify(text)
    assert got.state == "failed" and got.line == "Fatal Python error: Aborted"


def test_faulthandler_frames_say_where_a_segfault_happened():
    text = (
        "[2025-01-01 00:00:00 TP0] Load weight end. type=LlamaForCausalLM, avail mem=60.00 GB\n"
        "Fatal Python error: Segmentation fault\n"
        "\n"
        "Current thread 0x00007f0626126850 (most recent call first):\n"
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1999 in run_scheduler_process\n'
    )
    got = classify(text)
    assert (got.state, got.cause, got.line) == ("failed", "signal_killed", "Fatal Python error: Segmentation fault")


def test_engine_dead_follow_up_yields_to_the_engine_core_traceback():
    """The API server's ``EngineDeadError`` points above; the engine core's own (cut) traceback decides."""
    text = (
        "(APIServer pid=1) ERROR 05-05 12:36:59 [serving.py:1173] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
        "(EngineCore pid=104) Process EngineCore:\n"
        "(EngineCore pid=104) Traceback (most recent call last):\n"
        '(EngineCore pid=104)   File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap\n'
        "(EngineCore pid=104)     self.run()\n"
        '(EngineCore pid=104)   File "/x/vllm/v1/engine/core.py", line 1170, in run_busy_loop\n'
        "(EngineCore pid=104)     self._process_engine_step()\n"
    )
    got = classify(text)
    assert got.state == "failed" and got.line == "(EngineCore pid=104) Traceback (most recent call last):"


def test_engine_core_root_cause_beats_the_init_failed_follow_up():
    text = (
        "(EngineCore_DP0 pid=9) ERROR 10-25 13:08:43 [core.py:708] EngineCore failed to start.\n"
        "(EngineCore_DP0 pid=9) ERROR 10-25 13:08:43 [core.py:708] Traceback (most recent call last):\n"
        '(EngineCore_DP0 pid=9) ERROR 10-25 13:08:43 [core.py:708]   File "/x/vllm/v1/engine/core.py", line 1, in '
        "__init__\n"
        "(EngineCore_DP0 pid=9) ERROR 10-25 13:08:43 [core.py:708] AttributeError: 'Qwen3Config' object has no "
        "attribute 'rope_theta'\n"
        "(APIServer pid=1) Traceback (most recent call last):\n"
        '(APIServer pid=1)   File "/x/vllm/v1/engine/utils.py", line 1, in wait_for_engine_startup\n'
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}\n"
    )
    got = classify(text)
    assert got.state == "failed" and got.cause == "other"
    assert got.line is not None and "AttributeError" in got.line


def test_ray_serve_replica_tag_is_peeled():
    tag = "(ServeReplica:llama3-app:LLMDeployment pid=12249, ip=10.0.155.99) "
    text = "".join(tag + line + "\n" for line in (
        "Traceback (most recent call last):",
        '  File "/opt/ray/lib/python3.11/site-packages/transformers/utils/hub.py", line 543, in cached_files',
        "    raise OSError(",
        "OSError: You are trying to access a gated repo.",
        "Make sure to have access to it at https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct.",
    ))
    got = classify(text)
    assert (got.state, got.cause) == ("failed", "model_not_found")
    assert got.line == tag + "OSError: You are trying to access a gated repo."


def test_vllm_v0_worker_death_by_signal():
    text = (
        "INFO 08-19 19:03:50 model_runner.py:1] Loading model weights took 14.9 GB\n"
        "ERROR 08-19 19:05:55 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 839 died, exit code: -9\n"
        "INFO 08-19 19:05:55 multiproc_worker_utils.py:123] Killing local vLLM worker processes\n"
    )
    got = classify(text)
    assert (got.state, got.cause) == ("failed", "signal_killed") and "SIGKILL" in (got.hint or "")


def test_sglang_child_process_exit_code():
    text = (
        "[2025-01-01 00:00:00 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=60.0 GB\n"
        "[2025-01-01 00:00:05] Child process unexpectedly failed with exitcode=-9. pid=1234\n"
    )
    assert classify(text).cause == "signal_killed"


def test_vllm_ctrl_c_shutdown_is_stopped():
    text = (
        "(APIServer pid=1) INFO:     Application startup complete.\n"
        "(APIServer pid=1) INFO 05-05 12:36:59 [loggers.py:1] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        "Avg generation throughput: 12.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%\n"
        "^C(APIServer pid=1) INFO 05-05 12:37:10 [launcher.py:99] Shutting down FastAPI HTTP server.\n"
        "[rank0]:[W505 12:37:11.0 ProcessGroupNCCL.cpp:1538] Warning: WARNING: destroy_process_group() was not "
        "called before program exit, which can leak resources.\n"
    )
    assert classify(text).state == "stopped"


def test_vllm_crash_then_http_shutdown_stays_failed():
    text = (
        "(APIServer pid=1) INFO:     Application startup complete.\n"
        "(EngineCore pid=2) ERROR 05-05 12:37:00 [core.py:1] RuntimeError: CUDA error: an illegal memory access "
        "was encountered\n"
        "(APIServer pid=1) INFO 05-05 12:37:10 [launcher.py:99] Shutting down FastAPI HTTP server.\n"
    )
    got = classify(text)
    assert (got.state, got.cause) == ("failed", "cuda_driver")


def test_pydantic_value_error_line_names_the_refused_value():
    text = (
        "(APIServer pid=7) Traceback (most recent call last):\n"
        '(APIServer pid=7)   File "/x/pydantic/_internal/_dataclasses.py", line 127, in __init__\n'
        "(APIServer pid=7)     s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)\n"
        "(APIServer pid=7) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "(APIServer pid=7)   Value error, User-specified max_model_len (300000) is greater than the derived "
        "max_model_len (max_position_embeddings=131072). [type=value_error, input_value=ArgsKwargs((), {}), "
        "input_type=ArgsKwargs]\n"
        "(APIServer pid=7)     For further information visit https://errors.pydantic.dev/2.11/v/value_error\n"
    )
    got = classify(text)
    assert got.cause == "bad_flags" and got.line is not None and "Value error, User-specified" in got.line
    assert "--max-model-len" in (got.hint or "")


def test_pydantic_value_error_about_the_model_path():
    text = (
        "Traceback (most recent call last):\n"
        '  File "/x/pydantic/_internal/_dataclasses.py", line 121, in __init__\n'
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "  Value error, Invalid repository ID or local directory specified: '/models/qwen3'. [type=value_error, "
        "input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]\n"
    )
    assert classify(text).cause == "model_not_found"


def test_vllm_v0_error_executing_method_names_the_step():
    """A worker's traceback cut after ``Error executing method initialize_cache``: the step sizes the KV cache, so
    memory is the usual cause - a guess, in the hint; the cause stays ``other`` (the file does not show it)."""
    text = (
        "INFO 06-28 06:11:40 distributed_gpu_executor.py:56] # GPU blocks: 378, # CPU blocks: 4096\n"
        "ERROR 06-28 06:11:45 worker_base.py:145] Error executing method initialize_cache. This might cause "
        "deadlock in distributed execution.\n"
        "ERROR 06-28 06:11:45 worker_base.py:145] Traceback (most recent call last):\n"
        'ERROR 06-28 06:11:45 worker_base.py:145]   File "/x/vllm/worker/worker_base.py", line 137, in '
        "execute_method\n"
    )
    got = classify(text)
    assert (got.state, got.cause) == ("failed", "other")
    assert (got.hint or "").startswith(CUT_GUESS) and "memory" in (got.hint or "")


def test_hints_name_the_fix():
    start = "Traceback (most recent call last):\n  File \"launch.py\", line 1, in <module>\n"
    gpus = classify(start + "ValueError: World size (8) is larger than the number of available GPUs (4) in this node.\n")
    assert "--tensor-parallel-size" in (gpus.hint or "") and "CUDA_VISIBLE_DEVICES" in (gpus.hint or "")
    arch = classify(start + "RuntimeError: HIP error: invalid device function\n")
    assert "architecture" in (arch.hint or "")
    host = classify(start + "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes. "
                    "Error code 12 (Cannot allocate memory)\n")
    assert host.cause == "host_oom_killed" and "host RAM" in (host.hint or "") and "oom_kill rose" not in (host.hint or "")
    flag = classify(start + "ValueError: Invalid attention backend: fa4\n")
    assert "argparse" not in (flag.hint or "")


def test_nccl_last_error_out_of_memory_is_gpu_oom():
    """NCCL's ``unhandled cuda error`` whose last CUDA error was memory: the memory line decides."""
    tag = "(VllmWorker rank=7 pid=240) "
    text = "".join(tag + line + "\n" for line in (
        "Traceback (most recent call last):",
        '  File "/x/torch/distributed/distributed_c10d.py", line 1815, in _shutdown_backend',
        "    backend._shutdown()",
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:133, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        "ncclUnhandledCudaError: Call to CUDA function failed.",
        "Last error:",
        "Cuda failure 'out of memory'",
    ))
    got = classify(text)
    assert (got.cause, got.line) == ("gpu_oom", tag + "Cuda failure 'out of memory'")


def test_c10d_socket_timeouts_explain_a_cut_scheduler_failure():
    text = (
        "[rank1]:[W623 15:37:01.824135523 socket.cpp:485] [c10d] waitForInput: socket SocketImpl(fd=100, "
        "addr=[node-1]:43590, remote=[node-0]:20000) timed out after 1800000ms\n"
        "[2025-06-23 15:37:01 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2546, in run_scheduler_process\n'
    )
    got = classify(text)
    assert (got.state, got.cause) == ("failed", "nccl_error")
    assert got.line == "[2025-06-23 15:37:01 TP1] Scheduler hit an exception: Traceback (most recent call last):"


def test_gloo_errors_echoed_by_every_rank_keep_the_first():
    text = (
        "[2026-06-17 06:48:31 TP6] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/x/torch/distributed/distributed_c10d.py", line 2974, in broadcast\n'
        "    work.wait()\n"
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] Read error [10.0.0.2]:35012: "
        "Connection timed out\n"
        "\n"
        "[2026-06-17 06:48:31 TP4] RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] Read error "
        "[10.0.0.2]:35012: Connection timed out\n"
    )
    got = classify(text)
    assert got.cause == "nccl_error" and got.line is not None and got.line.startswith("RuntimeError: [/pytorch")


def test_python_logging_default_format_is_peeled():
    """An in-process engine logs ``WARNING:logger:message``: SGLang's benign import warnings stay benign."""
    text = (
        "WARNING:sglang.srt.utils:MOE_RUNNER_BACKEND is not initialized, using triton backend\n"
        "WARNING:sglang.srt.models.registry:Ignore import error when loading sglang.srt.models.glm4v_moe: "
        "No module named 'transformers.models.glm4v_moe'\n"
    )
    assert classify(text).state == "loading"


def test_uvicorn_lines_after_sglang_ready_start_no_warmup():
    """SGLang may print its ready line before uvicorn's: a crash after both is no warmup failure."""
    text = (
        "[2026-05-08 15:55:20] The server is fired up and ready to roll!\n"
        "[2026-05-08 15:55:20] INFO:     Application startup complete.\n"
        "[2026-05-08 15:55:20] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)\n"
        "[2026-05-08 15:56:27 TP5] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 3722, in run_scheduler_process\n'
        "    scheduler.run_event_loop()\n"
    )
    got = classify(text)
    assert (got.state, got.cause) == ("failed", "other")


def test_a_follow_up_repeated_by_the_same_process_stays_decisive():
    """The API server's follow-up, then its own next (cut) traceback: one process, one event."""
    text = (
        "(APIServer pid=1) ERROR 05-05 12:36:59 [serving.py:1173] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
        "(APIServer pid=1) Traceback (most recent call last):\n"
        '(APIServer pid=1)   File "/x/vllm/entrypoints/openai/serving_chat.py", line 1, in create_chat_completion\n'
    )
    got = classify(text)
    assert got.state == "failed" and got.line is not None and "EngineDeadError" in got.line


def test_warmup_failure_after_the_model_info_request_still_fails():
    text = (
        "[2025-02-25 12:05:39] INFO:     Uvicorn running on http://0.0.0.0:40000 (Press CTRL+C to quit)\n"
        '[2025-02-25 12:05:40] INFO:     127.0.0.1:59048 - "GET /get_model_info HTTP/1.1" 200 OK\n'
        "[2025-02-25 12:07:40] Initialization failed. warmup error: Traceback (most recent call last):\n"
        '  File "/sgl/python/sglang/srt/entrypoints/http_server.py", line 1, in _wait_and_warmup\n'
        "AssertionError: res=<Response [502]>, res.text=''\n"
    )
    got = classify(text)
    assert (got.state, got.cause) == ("failed", "warmup_failed")


def test_ctrl_c_behind_a_wrapper_is_an_operator_stop():
    text = (
        "sglang-1  | ^C^C2025-07-08 19:58:04  INFO sglang_router_rs::router: src/router.rs:354: Worker is not ready yet\n"
        "sglang-1  | 2025-07-08 19:58:04  INFO sglang_router_rs::router: src/router.rs:354: Worker is not ready yet\n"
    )
    assert classify(text).state == "stopped"


def test_pydantic_value_error_refusing_a_combination_is_bad_flags():
    text = (
        "Traceback (most recent call last):\n"
        '  File "/x/pydantic/_internal/_dataclasses.py", line 121, in __init__\n'
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig\n"
        "Value error, Model Runner V2 does not yet support: ngram speculative decoding [type=value_error, "
        "input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]\n"
    )
    got = classify(text)
    assert got.cause == "bad_flags" and got.line is not None and got.line.startswith("Value error, Model Runner V2")


def test_engine_core_failing_right_after_the_eagle_head_is_set_up():
    tag = "(EngineCore_DP0 pid=7) "
    text = (
        tag + "INFO 09-18 12:03:11 [default_loader.py:268] Loading weights took 0.42 seconds\n"
        + tag + "INFO 09-18 12:03:11 [eagle.py:644] Assuming the EAGLE head shares the same vocab embedding with the "
        "target model.\n"
        + tag + "ERROR 09-18 12:03:12 [core.py:712] EngineCore failed to start.\n"
        + tag + "ERROR 09-18 12:03:12 [core.py:712] Traceback (most recent call last):\n"
        + tag + 'ERROR 09-18 12:03:12 [core.py:712]   File "/x/vllm/v1/engine/core.py", line 703, in run_engine_core\n'
    )
    assert classify(text).cause == "spec_decode_error"


def test_torch_arch_warning_explains_a_later_cut_engine_failure():
    """torch's own warning that its build has no kernels for this GPU outlasts later start-up steps."""
    text = (
        "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:235: UserWarning:\n"
        "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
        "(EngineCore_0 pid=2) INFO 05-26 07:50:20 [gpu_model_runner.py:1] Model loading took 14.9 GiB\n"
        "(EngineCore_0 pid=2) ERROR 05-26 07:50:26 [core.py:396] EngineCore failed to start.\n"
        "(EngineCore_0 pid=2) ERROR 05-26 07:50:26 [core.py:396] Traceback (most recent call last):\n"
        '(EngineCore_0 pid=2) ERROR 05-26 07:50:26 [core.py:396]   File "/x/vllm/v1/engine/core.py", line 387, in '
        "run_engine_core\n"
    )
    got = classify(text)
    assert (got.state, got.cause) == ("failed", "cuda_driver")
    assert got.line == "(EngineCore_0 pid=2) ERROR 05-26 07:50:26 [core.py:396] EngineCore failed to start."


def test_torch_arch_warning_alone_is_no_failure():
    text = ("NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch "
            "installation.\n[2025-01-01 00:00:00 TP0] Load weight begin. avail mem=30.00 GB\n")
    assert classify(text).state == "loading"


def test_usage_dump_cut_before_its_error_line_is_an_argparse_refusal():
    """argparse prints the usage, then ``error:``, then exits: a log that stops inside the usage was refused."""
    first = "usage: launch_server.py [-h] --model-path MODEL_PATH [--host HOST] [--port PORT]"
    text = (
        "INFO 03-06 10:05:08 __init__.py:190] Automatically detected platform cuda.\n"
        + first + "\n"
        "                        [--tokenizer-mode {auto,slow}] [--trust-remote-code]\n"
        "                        [--dtype {auto,half,float16,bfloat16}]\n"
    )
    got = classify(text)
    assert (got.state, got.cause, got.line) == ("failed", "bad_flags", first)
    assert "argparse" in (got.hint or "")
    # a continuation pasted without its indentation is still the usage
    assert classify(first + "\n[--dtype {auto,half}] [--kv-cache-dtype {auto,fp8}]\n").cause == "bad_flags"
    # with its error line, the error line decides
    err = "launch_server.py: error: unrecognized arguments: --enable-foo"
    got = classify(text + err + "\n")
    assert (got.cause, got.line) == ("bad_flags", err)


def test_help_output_after_the_usage_is_no_failure():
    """``--help`` goes on from the usage to its sections: nothing was refused."""
    text = (
        "usage: launch_server.py [-h] --model-path MODEL_PATH [--host HOST]\n"
        "                        [--port PORT]\n"
        "\n"
        "options:\n"
        "  -h, --help            show this help message and exit\n"
        "  --model-path MODEL_PATH\n"
    )
    assert classify(text).state == "loading"
    # a line that only starts like a usage (no program and options after it) is no argparse dump
    assert classify("[2025-01-01 00:00:00 TP0] Load weight begin. avail mem=30.00 GB\nusage: 12% of the pool\n"
                    ).state == "loading"


def test_early_sglang_gpu_id_prefix_makes_uvicorn_lines_loading():
    """Early SGLang tagged its ranks ``[gpu_id=N]``: uvicorn's start before the warmup is still loading."""
    text = (
        "[gpu_id=0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=15.61 GB\n"
        "[gpu_id=1] Memory pool end. avail mem=6.46 GB\n"
        "[gpu_id=0] max_total_num_tokens=328021, max_prefill_tokens=16384, max_running_requests=5124\n"
        "INFO:     Started server process [1802867]\n"
        "INFO:     Waiting for application startup.\n"
        "INFO:     Application startup complete.\n"
    )
    assert classify(text).state == "loading"
    assert classify(text + "The server is fired up and ready to roll!\n").state == "ready"


def test_kv_cache_sized_with_no_room_explains_a_cut_failure():
    """vLLM found no blocks (or negative memory) for the KV cache, then a traceback cut before its exception."""
    v0 = (
        "INFO 04-27 10:13:05 llm_engine.py:275] # GPU blocks: 0, # CPU blocks: 256\n"
        "Traceback (most recent call last):\n"
    )
    assert (classify(v0).state, classify(v0).cause) == ("failed", "gpu_oom")
    tag = "(EngineCore_DP0 pid=5) "
    announce = tag + "ERROR 12-23 23:34:23 [core.py:708] EngineCore failed to start."
    v1 = (
        tag + "INFO 12-23 23:34:23 [gpu_worker.py:298] Available KV cache memory: -1.25 GiB\n"
        + announce + "\n"
        + tag + "ERROR 12-23 23:34:23 [core.py:708] Traceback (most recent call last):\n"
        + tag + 'ERROR 12-23 23:34:23 [core.py:708]   File "/x/vllm/v1/engine/core.py", line 699, in run_engine_core\n'
    )
    got = classify(v1)
    assert (got.state, got.cause, got.line) == ("failed", "gpu_oom", announce)
    # blocks found: the same cut failure names nothing
    fine = v0.replace("# GPU blocks: 0,", "# GPU blocks: 2048,")
    assert classify(fine).cause == "other"


def test_vllm_workers_terminated_during_loading_is_a_stop():
    """A V1 worker reports the SIGTERM/SIGINT it got; with no crash before it the server was stopped."""
    text = (
        "(Worker_DP0_TP0 pid=11) WARNING 04-03 16:05:24 [multiproc_executor.py:866] WorkerProc was terminated\n"
        "Loading safetensors checkpoint shards:  29% Completed | 2/7 [00:05<00:14,  2.96s/it]\n"
        "(Worker_DP1_TP2 pid=12) WARNING 04-03 16:05:24 [multiproc_executor.py:866] WorkerProc was terminated\n"
    )
    assert classify(text).state == "stopped"
    crash = (
        "(Worker_TP1 pid=12) ERROR 04-03 16:05:20 [multiproc_executor.py:1] WorkerProc failed to start.\n"
        "(Worker_TP1 pid=12) ERROR 04-03 16:05:20 [multiproc_executor.py:1] torch.OutOfMemoryError: CUDA out of "
        "memory. Tried to allocate 2.00 GiB.\n"
        "(Worker_TP0 pid=11) WARNING 04-03 16:05:24 [multiproc_executor.py:866] WorkerProc was terminated\n"
    )
    got = classify(crash)
    assert (got.state, got.cause) == ("failed", "gpu_oom")  # the other workers' ends follow a real crash
