"""Structural rules of issue 28, each on the general shape of a line family rather than one thread's wording.

Each case is the shape a family takes in real logs (prefixes, ranks, wrappers), written here; the corpus in
``tests/data/real-logs`` measures the rules on real files (dev, test and the later test2 split)."""

from __future__ import annotations

import pytest

from console.core.classify import classify

BANNER = "[2026-11-30 10:00:00 TP0] server_args=ServerArgs(model_path='/m')\n"
LOAD = "[2026-11-30 10:00:01 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=60.00 GB\n"
UVICORN = "[2026-11-30 10:00:00] INFO:     Started server process [1234]\n"
READY = BANNER + LOAD + "[2026-11-30 10:00:09] The server is fired up and ready to roll!\n"
DECODE = ("[2026-11-30 10:00:10 TP0] Decode batch. #running-req: 3, #token: 1200, token usage: 0.01, cuda graph: True, "
          "gen throughput (token/s): 140.2, #queue-req: 0, \n")
TB = 'Traceback (most recent call last):\n  File "/srv/x.py", line 3, in f\n    g()\n'

CASES = {
    # going-down lines, whatever the family: they end the server
    "uvicorn lifespan traceback, then startup failed": (UVICORN + LOAD + (
        'ERROR:    Traceback (most recent call last):\n'
        '  File "/usr/lib/python3/site-packages/starlette/routing.py", line 693, in lifespan\n'
        '    async with self.lifespan_context(app) as maybe_state:\n'
        'RuntimeError: tokenizer manager failed to start\n\nERROR:    Application startup failed. Exiting.\n'),
        "failed", "other"),
    "a wrapper reports the process's exit code": (BANNER + LOAD + "2026-11-30 10:00:05 wrapper.worker ERROR process "
                                                "exited with code 1\n", "failed", "other"),
    "a start-up that gives up": (BANNER + LOAD + "[2026-11-30 10:00:05] Server warmup failed; aborting startup\n",
                                 "failed", None),
    "bare argparse refusal, no usage, no program": ("error: unrecognized arguments: --foo-bar 3\n", "failed",
                                                    "bad_flags"),
    "bare argparse value refusal": ("error: argument --tp-size: invalid int value: 'x'\n", "failed", "bad_flags"),
    # a stale stats line after a death is not serving
    "a rank's death, then one more buffered stats line": (READY + DECODE + (
        "[2026-11-30 10:00:11] Rank 1 scheduler is dead. Please check if there are relevant logs.\n") + DECODE,
        "failed", None),
    # serving evidence in other shapes
    "retractions from many ranks of a busy server": (READY + "".join(
        f"[2026-11-30 10:00:1{i} DP{i} TP{i} EP{i}] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#new_token_ratio: 0.5100 -> 0.8000\n" for i in range(4)), "ready", None),
    "Decode batch, with a comma, ms timestamps and DP/TP/EP tags": (BANNER + LOAD + (
        "[2026-11-30 10:00:10.123 DP0 TP0 EP0] Decode batch, #running-req: 3, #token: 1200, token usage: 0.01, "
        "accept len: 2.31, accept rate: 0.77, cuda graph: True, gen throughput (token/s): 140.2, #queue-req: 0, \n"),
        "ready", None),
    "another graph backend in the batch line": (BANNER + LOAD + DECODE.replace("cuda graph", "npu graph"), "ready",
                                                None),
    "#pending-token in a prefill line": (BANNER + LOAD + (
        "[2026-11-30 10:00:10 TP0] Prefill batch, #new-seq: 1, #new-token: 1024, #cached-token: 0, token usage: "
        "0.00, #running-req: 0, #queue-req: 0, #pending-token: 512, \n"), "ready", None),
    "an indented paste with debug lines between": ("".join("    " + x + "\n" for x in (BANNER + LOAD).splitlines())
                                                   + "DEBUG 11-30 10:00:10 [x.py:1] poll\n    " + DECODE, "ready", None),
    # a restart after a shutdown is loading, not stopped
    "SIGTERM, drained, then uvicorn starts again": (READY + (
        "[2026-11-30 10:01:00] SIGTERM received. signum=15, frame=None. Draining requests and shutting down...\n"
        "[2026-11-30 10:01:01] Gracefully exiting... Remaining number of requests 0\n"
        "INFO:     Started server process [99]\nINFO:     Waiting for application startup.\n"), "loading", None),
    "SIGTERM, then the start-up steps again": (READY + (
        "[2026-11-30 10:01:00] SIGTERM received. signum=15, frame=None. Draining requests and shutting down...\n")
        + UVICORN + LOAD, "loading", None),
    # 2026 lines
    "SIGQUIT: one child failed, crash diagnostics": (READY + (
        "[2026-11-30 10:01:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n"
        "[2026-11-30 10:01:00] Sleeping 5 seconds before crash diagnostics to let GPU activity settle.\n"),
        "failed", None),
    "hard scheduler watchdog after its debug info": (READY + (
        "[2026-11-30 10:05:00 TP0] Scheduler debug info:\n  running: 3, waiting: 0\n"
        "[2026-11-30 10:05:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)\n\n"),
        "failed", "watchdog_timeout"),
    "a scheduler exiting normally on SIGTERM": (READY + "[2026-11-30 10:01:00 TP0] SIGTERM received in scheduler "
                                                "process (pid 222); exiting normally\n", "stopped", None),
    "no common_ops library, then a bare ImportError": (BANNER + LOAD + (
        "CRITICAL: Could not load any common_ops library!\n" + TB.replace("g()", "from sgl_kernel import common_ops")
        + "ImportError:\n"), "failed", "import_error"),
    "torch.AcceleratorError": (BANNER + LOAD + "[2026-11-30 10:00:02 TP0] Scheduler hit an exception: " + TB
                               + "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n",
                               "failed", "cuda_driver"),
    "Python 3.13 carets under a source line": (BANNER + LOAD + "[2026-11-30 10:00:02 TP0] Scheduler hit an exception: "
                                               + TB + "        ^^^^^^^^^^\nValueError: unsupported architecture Foo\n",
                                               "failed", "other"),
    # device memory off CUDA
    "NPU out of memory": (BANNER + LOAD + "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n", "failed",
                          "gpu_oom"),
    "HIP out of memory": (BANNER + LOAD + "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.00 GiB.\n",
                          "failed", "gpu_oom"),
    "XPU out of memory": (BANNER + LOAD + "RuntimeError: XPU out of memory. Tried to allocate 512.00 MiB\n", "failed",
                          "gpu_oom"),
    # vLLM 0.2x-0.33
    "vLLM [shutdown] after startup": ("(APIServer pid=1) INFO 11-30 10:00:00 [api_server.py:1] vLLM API server version "
                                      "0.31.0\n(APIServer pid=1) INFO:     Application startup complete.\n(APIServer "
                                      "pid=1) INFO 11-30 10:05:00 [launcher.py:1] [shutdown] Shutting down FastAPI "
                                      "HTTP server.\n", "stopped", None),
    "vLLM EngineCore without _DP0, graph memory profiling": (
        "(APIServer pid=1) INFO 11-30 10:00:00 [api_server.py:1] vLLM API server version 0.31.0\n(EngineCore pid=22) "
        "INFO 11-30 10:00:01 [core.py:1] Waiting for init message from front-end.\n(EngineCore pid=22) INFO 11-30 "
        "10:00:05 [gpu_model_runner.py:1] CUDA graph memory profiling is enabled\n", "loading", None),
    "vLLM-Omni stage initialization failed": ("INFO 11-30 10:00:00 [omni.py:1] starting\nERROR 11-30 10:00:05 "
                                              "[stage_runtime.py:1] [StageRuntime] Stage initialization failed: CUDA "
                                              "out of memory. Tried to allocate 2.00 GiB\n", "failed", "gpu_oom"),
    "vLLM: Rank N scheduler is dead / Exit code: -9": (
        "(APIServer pid=1) INFO 11-30 10:00:00 [api_server.py:1] vLLM API server version 0.33.0\nERROR 11-30 10:00:10 "
        "[core.py:1] Rank 1 scheduler is dead. Please check if there are relevant logs.\nERROR 11-30 10:00:10 "
        "[core.py:1] Exit code: -9\n", "failed", "signal_killed"),
    # dev2 (2026-12-02): glog's FATAL severity aborts the process, whatever its message
    "glog FATAL from torch's C++ code, an unknown message": (
        BANNER + LOAD + "[rank3]:[F1130 10:00:05.123456789 SomeThing.cpp:42] [PG 0 Rank 3] the frobnicator gave up\n",
        "failed", "other"),
    "glog FATAL: the NCCL watchdog stuck": (
        READY + DECODE + "[rank1]:[F1130 10:20:00.358291284 ProcessGroupNCCL.cpp:1224] [PG 3 Rank 1] "
        "ProcessGroupNCCL's watchdog got stuck for 600 seconds without making progress in monitoring enqueued "
        "collectives.\n", "failed", "nccl_error"),
    "glog ERROR is no abort by itself": (
        READY + DECODE + "[rank1]:[E1130 10:20:00.358291284 ProcessGroupNCCL.cpp:900] [PG 0 Rank 1] some note\n"
        + DECODE, "ready", None),
    "an engine that is already dead, after serving": (
        "INFO 11-30 10:00:00 api_server.py:1] vLLM API server version 0.7.2\nINFO:     Application startup complete."
        "\nINFO 11-30 10:00:05 metrics.py:1] Avg prompt throughput: 20.1 tokens/s, Avg generation throughput: 19.4 "
        "tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 4.8%, CPU KV cache usage: "
        "0.0%.\nCRITICAL 11-30 10:00:09 launcher.py:1] MQLLMEngine is already dead, terminating server process\n",
        "failed", "other"),
    "the client's engine process died": (
        "INFO 11-30 10:00:00 api_server.py:1] vLLM API server version 0.6.6\nERROR 11-30 10:00:09 client.py:1] "
        "RuntimeError('Engine process (pid 77) died.')\n", "failed", "other"),
    "a wrapper's exit report: its own frames name nothing": (
        "[2026-11-30 10:00:05] Received sigquit from a child process. It usually means the child failed.\n"
        'Traceback (most recent call last):\n  File "/opt/bench/bench_speculative_decoding.py", line 3, in main\n'
        "    proc = launch_server(args)\nException: Server process exited with code -9. Check server logs.\n",
        "failed", "other"),
    "piecewise CUDA graph failure, then a rank's cut traceback": (
        BANNER + LOAD + "[2026-11-30 10:00:05 TP7] Piecewise CUDA Graph failed with error: 'Ctx' object has no "
        "attribute 'n'\n[2026-11-30 10:00:05 TP5] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sglang/srt/managers/scheduler.py", line 4048, in run_scheduler_process\n    scheduler = Scheduler('
        "\n", "failed", "cuda_graph"),
    "a request traceback whose frame lines wrapped at the terminal's width": (
        '(APIServer pid=1) ERROR 11-30 10:00:06 [serving_chat.py:251] Traceback (most recent call last):\n'
        '(APIServer pid=1) ERROR 11-30 10:00:06 [serving_chat.py:251]   File "/usr/lib/vllm/entrypoints/op\n'
        'enai/serving_chat.py", line 227, in create_chat_completion\n'
        "(APIServer pid=1) ERROR 11-30 10:00:06 [serving_chat.py:251]     ) = await self._preprocess_chat(\n",
        "ready", None),
    # dev3 (2026-12-02)
    "the hard watchdog's own dump: the stuck batch, then py-spy": (
        READY + DECODE + "[2026-11-30 10:30:00 DP3 TP7] self.cur_batch.batch_size()=1, self.cur_batch.reqs=[Req(rid=ab)]\n"
        "[2026-11-30 10:30:00 DP1 TP3] Pyspy dump for PID 231810:\nProcess 231810: sglang::scheduler_DP1_TP3\n",
        "failed", "watchdog_timeout"),
    "a glog WARNING that a C++ exception carries (c10::Error)": (
        BANNER + LOAD + "[rank1]:[W1130 10:00:05.271588084 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=61"
        ", addr=[localhost]:33850, remote=[localhost]:30005): Failed to recv, got 0 bytes. Connection was likely closed. "
        "Did the remote server shutdown or crash?\nException raised from recvBytes at /pytorch/torch/csrc/distributed/"
        "c10d/Utils.hpp:682 (most recent call first):\nframe #0: c10::Error::Error() + 0x80 (0x7 in libc10.so)\n",
        "failed", "nccl_error"),
    "a glog WARNING alone is a warning": (
        READY + "[rank1]:[W1130 10:00:05.271588084 Something.cpp:12] a passing note about sockets\n" + DECODE,
        "ready", None),
    "batches after SIGTERM are the drain: still stopped": (
        "[2026-11-30 10:13:01] SIGTERM received. signum=None frame=None. Draining requests and shutting down...\n"
        "[2026-11-30 10:13:04] Gracefully exiting... remaining number of requests 3\n" + DECODE, "stopped", None),
    "no accelerator available, another vendor's word": (
        "(EngineCore_DP0 pid=1) ERROR 11-30 10:00:01 [core.py:1] ValueError: Current node has no NPU available. vLLM "
        "engine cannot start without NPU.\n", "failed", "cuda_driver"),
    "a ValueError raised while the command line is parsed": (
        'Traceback (most recent call last):\n  File "/usr/bin/vllm", line 8, in <module>\n    sys.exit(main())\n'
        '  File "/usr/lib/vllm/utils.py", line 1391, in parse_args\n    raise ValueError(\n'
        "ValueError: With `vllm serve`, you should provide the model as a positional argument.\n", "failed",
        "bad_flags"),
    "a call not allowed during CUDA graph capture": (
        BANNER + LOAD + "torch._dynamo.exc.InternalTorchDynamoError: RuntimeError: Cannot call CUDAGeneratorImpl::"
        "current_seed during CUDA graph capture. Current cudaStreamCaptureStatus: cudaStreamCaptureStatusActive\n",
        "failed", "cuda_graph"),
    "Ray's dead actor names no signal": (
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\nThe actor is dead "
        "because its worker process has died. Worker exit type: SYSTEM_ERROR\n", "failed", "other"),
    "a pod sidecar shutting down (klog)": (
        "(EngineCore_0 pid=304) INFO 11-30 10:00:00 [weight_utils.py:1] Using model weights format ['*.safetensors']\n"
        "Loading safetensors checkpoint shards:   2% Completed | 3/163 [00:00<00:07, 21.87it/s]\n"
        'I1130 10:00:08.476800       1 proxy.go:206] "shutting down" logger="proxy server"\n', "stopped", None),
    "a diffusion request's sampling params: serving": (
        "[2026-11-30 10:00:00] INFO:     Application startup complete.\n[11-30 10:07:38] Sampling params:\n"
        "                       width: 1024\n", "ready", None),
}


def reads_as(name: str, text: str, state: str, cause: str | None) -> None:
    """``text`` classifies as ``state`` (and ``cause``, when given)."""
    c = classify(text)
    assert c.state == state, (name, c)
    if cause is not None:
        assert c.cause == cause, (name, c)


@pytest.mark.parametrize("name", list(CASES))
def test_line_family_shapes(name):
    reads_as(name, *CASES[name])


def test_a_decisive_line_is_never_a_source_or_caret_line():
    text = (BANNER + LOAD + "[2026-11-30 10:00:02 TP0] CUDA error: an illegal memory access was encountered\n"
            + TB.replace("g()", "raise RuntimeError") + "        ^^^^^^^^^^^^^^^^^^\n")
    c = classify(text)
    assert c.state == "failed" and c.cause == "cuda_driver"
    assert "raise" not in (c.line or "") and "^^^" not in (c.line or "")


def test_a_cut_traceback_after_a_going_down_line_takes_that_line():
    """A traceback cut before its exception names nothing: the launcher's going-down line just before it (no normal
    event between) is the failure's first line and its decisive line; the cause stays what the file shows."""
    text = ("[2026-01-02 03:04:05] Received sigquit from a child process. It usually means the child failed.\n"
            "wrapper 12 ERROR    could not start model m-0\n"
            "Traceback (most recent call last):\n"
            '  File "/opt/wrap/worker.py", line 10, in start\n'
            "    await ref.load()\n")
    c = classify(text)
    assert c.state == "failed" and c.cause == "other"
    assert c.line is not None and c.line.startswith("[2026-01-02 03:04:05] Received sigquit")


def test_a_faulthandler_dump_without_its_fatal_line_is_headed_by_its_thread_line():
    """faulthandler's thread header opens the failure when the ``Fatal Python error`` line is cut off: the decisive
    line is a line of the file, never an invented traceback header."""
    text = ("Current thread 0x00007f00deadbeef (most recent call first):\n"
            '  File "/venv/site-packages/pkg/comm.py", line 351 in init_rank\n'
            '  File "/venv/site-packages/pkg/worker.py", line 68 in __init__\n')
    c = classify(text)
    assert c.state == "failed"
    assert c.line in text.splitlines()


# ---------------------------------------------------------------- round 5 (test2-4 became development data)

VLLM_LOAD = "(EngineCore_DP0 pid=40) INFO 03-05 08:00:01 [gpu_model_runner.py:1] Model loading took 14.1 GiB\n"
UVICORN_PLAIN = ("INFO:     Started server process [7]\nINFO:     Waiting for application startup.\n"
                 "INFO:     Application startup complete.\nINFO:     Uvicorn running on http://0.0.0.0:30000\n")

ROUND5 = {
    # a C++ component's report: its message decides, the component only when the message names nothing
    "a CUDA error caught by the collective watchdog (3-digit glog date)": (
        "[rank5]:[E305 08:01:02.123456789 ProcessGroupNCCL.cpp:1900] [PG ID 1 PG GUID 1 Rank 5] Process group "
        "watchdog thread terminated with exception: CUDA error: device-side assert triggered\n", "failed",
        "cuda_driver"),
    "a gloo group's complaint naming no cause: the component says it": (
        "[rank2]:[E907 11:12:13.000000001 ProcessGroupGloo.cpp:150] Rank 2 got errors while waiting on rank 0.\n",
        "failed", "nccl_error"),
    "a glog WARNING with a 3-digit date is a warning": (
        READY + "[rank1]:[W305 10:00:05.27 Something.cpp:12] a passing note about sockets\n" + DECODE, "ready", None),
    # a symptom at error severity is the failure itself; at warning severity it stays a symptom
    "a c10d client that gave up connecting, at error severity": (
        BANNER + LOAD + "[E1102 03:04:05.000000123 socket.cpp:900] [c10d] The client socket has timed out after "
        "300000ms while trying to connect to (head-node, 29500).\n", "failed", "nccl_error"),
    "the same c10d line at warning severity only warns": (
        BANNER + LOAD + "[W1102 03:04:05.000000123 socket.cpp:900] [c10d] The client socket has timed out after "
        "300000ms while trying to connect to (head-node, 29500).\n", "loading", None),
    # fatal signals in any handler's or wrapper's words
    "a native crash handler caught a bus error in a worker": (
        VLLM_LOAD + "(RayWorker pid=88) [node7:88 :0:91] Caught signal 7 (Bus error: nonexistent physical address)\n"
        "(RayWorker pid=88) ==== backtrace (tid:     91) ====\n", "failed", "signal_killed"),
    "a supervisor says its child was killed by signal 9": (
        BANNER + LOAD + "supervisor: server child (pid 4242) was killed by signal 9\n", "failed", "signal_killed"),
    "a launcher says a rank exited on SIGSEGV": (
        BANNER + LOAD + "launcher: rank 3 exited on signal SIGSEGV, shutting down the job\n", "failed",
        "signal_killed"),
    "an executor got a fatal signal from its workers, then the shell's Killed": (
        "CRITICAL 03-05 08:00:09 [executor.py:50] Executor got fatal signal from worker processes, shutting down.\n"
        "Killed\n", "failed", "signal_killed"),
    "a handler caught a signal, start-up went on, then the engine failed": (
        VLLM_LOAD + "[node1:50:0:61] Caught signal 11 (Segmentation fault: invalid permissions for mapped object)\n"
        "INFO 03-05 08:00:02 [kv_cache_utils.py:1] GPU KV cache size: 100,000 tokens\n"
        "ERROR 03-05 08:00:03 [core.py:1] EngineCore failed to start.\nERROR 03-05 08:00:03 [core.py:1] Traceback "
        "(most recent call last):\n", "failed", "other"),
    # SIGTERM/SIGINT reported by number: a stop, even with a native backtrace after it
    "a runtime reports signal 15 by number, with its backtrace": (
        "Signal Received: 15 (Terminated)\nSignal Received from pid=900\n*** BACKTRACE ***\n"
        "/opt/rt/lib/liblog.so(+0x1234)[0x7f0000001234]\n/lib64/libc.so.6(+0x3ebf0)[0x7f0000003ebf]\n",
        "stopped", None),
    "a handler caught signal 2 by number": (
        READY + DECODE + "[2026-11-30 10:00:20] caught signal 2, stopping\n", "stopped", None),
    "a wrapper caught SIGTERM by name": (
        READY + DECODE + "supervisor: Caught SIGTERM, stopping the server\n", "stopped", None),
    "glog's failure signal handler": (
        BANNER + LOAD + "*** Aborted at 1767225600 (unix time) try \"date -d @1767225600\" if you are using GNU date ***\n"
        "*** SIGSEGV (@0x0) received by PID 321 (TID 0x7f00000001) from PID 0; stack trace: ***\n", "failed",
        "signal_killed"),
    "a wrapper failed to launch the server": (
        "Error: Failed to start vLLM server on port 8000 (see vllm.log)\n", "failed", "other"),
    # a web framework's error response is a request's error
    "an HTTPException answering one request, then uvicorn's shutdown": (
        '(APIServer pid=9) ERROR 03-05 08:00:05 [serving.py:1] Error in chat completion\n'
        "(APIServer pid=9) starlette.exceptions.HTTPException: 503: engine busy\n"
        "(APIServer pid=9) INFO:     Shutting down\n(APIServer pid=9) INFO:     Waiting for application shutdown.\n"
        "(APIServer pid=9) INFO:     Application shutdown complete.\n", "stopped", None),
    "an HTTPException on a serving server is no crash": (
        READY + DECODE + "fastapi.exceptions.HTTPException: 400: prompt too long\n", "ready", None),
    # a retried error is handled; one that gives up is not
    "an error said to be retried, then its repeat": (
        "ERROR 03-05 08:00:01 [hub.py:9] Error listing files: 503 Server Error: Service Unavailable for url: "
        "https://huggingface.co/api/models/org/m\nWARNING 03-05 08:00:01 [hub.py:9] will retry in 2 s\n"
        "ERROR 03-05 08:00:03 [hub.py:9] Error listing files: 503 Server Error: Service Unavailable for url: "
        "https://huggingface.co/api/models/org/m\n", "loading", None),
    "a retried error whose last report gives up": (
        "ERROR 03-05 08:00:01 [hub.py:9] Error listing files: 503 Server Error: Service Unavailable for url: "
        "https://huggingface.co/api/models/org/m, retrying 1 of 2\n"
        "ERROR 03-05 08:00:03 [hub.py:9] Error listing files: 503 Server Error: Service Unavailable for url: "
        "https://huggingface.co/api/models/org/m, giving up\n", "failed", "model_not_found"),
    # an exception no handler caught in a thread, after serving
    "an uncaught exception in a background thread after serving": (
        READY + DECODE + "Exception in thread Thread-7 (offload_loop):\n", "failed", "other"),
    "an uncaught exception in an unnamed-target thread, with its exception": (
        READY + DECODE + "Exception in thread worker-2:\nTraceback (most recent call last):\n"
        '  File "/usr/lib/python3.12/threading.py", line 1073, in _bootstrap_inner\n'
        "RuntimeError: store connection lost\n", "failed", "other"),
    # a wrapper naming the server it launched
    "a wrapper says the server it launched failed to start": (
        "The SGLang server failed to start; see its log for details.\nCleaning up temporary files\n", "failed",
        "other"),
    # retraction is decoding
    "one retraction line alone": (
        "(Actor pid=5) [2026-11-30 10:00:10 TP3] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#new_token_ratio: 0.3000 -> 0.4000\n", "ready", None),
    "a decode-time retraction report alone": (
        "[2026-11-30 10:00:10 TP0] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.5 -> 0.9\n",
        "ready", None),
    # SGLang's warmup request is loading, whatever hides its prefix
    "uvicorn lines without a prefix, then SGLang's warmup asking for its model info": (
        UVICORN_PLAIN + 'INFO:     127.0.0.1:50000 - "GET /get_model_info HTTP/1.1" 200 OK\n', "loading", None),
    "... and serving after it": (
        UVICORN_PLAIN + 'INFO:     127.0.0.1:50000 - "GET /get_model_info HTTP/1.1" 200 OK\n'
        'INFO:     127.0.0.1:50002 - "POST /generate HTTP/1.1" 200 OK\n', "ready", None),
    # a multi-pod tailer's prefix (pod, container) is a wrapper: the exception line under it is read
    "a pod/container tailer's prefix over a traceback: its frames are read": (
        "web-decode-7d9f8b6c5d-x2k4q server ERROR 03-05 08:00:05 [engine.py:1] Traceback (most recent call last):\n"
        'web-decode-7d9f8b6c5d-x2k4q server ERROR 03-05 08:00:05 [engine.py:1]   File "/srv/model_runner/'
        'cuda_graph_runner.py", line 3, in capture\nweb-decode-7d9f8b6c5d-x2k4q server ERROR 03-05 08:00:05 '
        "[engine.py:1] RuntimeError: kernel launch refused\n", "failed", "cuda_graph"),
    # Python's report of an exception it ignored is no failure
    "an ignored exception's traceback on a serving server": (
        READY + DECODE + "Exception ignored in: <function Pool.__del__ at 0x7f0000000001>\nTraceback (most recent "
        'call last):\n  File "/usr/lib/python3.12/multiprocessing/pool.py", line 268, in __del__\n'
        "ValueError: I/O operation on closed file\n", "ready", None),
    "an ignored atexit exception after the launcher's sigquit (older spelling)": (
        BANNER + LOAD + "[2026-11-30 10:00:05] Received sigquit from a child proces. It usually means the child "
        "failed.\nException ignored in atexit callback: <function cleanup at 0x7f0000000002>\nTraceback (most recent "
        'call last):\n  File "/opt/wrap/run.py", line 20, in cleanup\n    proc.terminate()\n', "failed", "other"),
    "a vLLM server refusing that path (404) stays ready": (
        "(APIServer pid=3) INFO 03-05 08:00:09 [launcher.py:1] Route: /v1/models, Methods: GET\n"
        "(APIServer pid=3) INFO:     Application startup complete.\n"
        '(APIServer pid=3) INFO:     127.0.0.1:50000 - "GET /get_model_info HTTP/1.1" 404 Not Found\n', "ready", None),
    # no room for the KV cache, in other words than the usual ones
    "older wording of negative KV memory, then a cut traceback": (
        "INFO 03-05 08:00:01 worker.py:1] the rest of the memory reserved for KV Cache is -0.40GiB.\n"
        "INFO 03-05 08:00:01 executor_base.py:1] # npu blocks: 0, # CPU blocks: 100\n"
        "INFO 03-05 08:00:01 executor_base.py:2] Maximum concurrency for 2048 tokens per request: 0.00x\n"
        "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"/app/run.py\", line 3, in <module>\n",
        "failed", "gpu_oom"),
}


@pytest.mark.parametrize("name", list(ROUND5))
def test_round5_shapes(name):
    reads_as(name, *ROUND5[name])


def test_an_executors_fatal_signal_then_its_own_cut_traceback_keeps_the_signal_line():
    """The executor's going-down line and its own (untagged) traceback cut before its exception are one failure:
    the going-down line is its decisive line; a worker's tagged traceback is the worker's own failure instead."""
    signal = "CRITICAL 03-05 08:00:09 [executor.py:50] Executor got fatal signal from worker processes, shutting down.\n"
    own = signal + 'Traceback (most recent call last):\n  File "/srv/api.py", line 9, in <module>\n    run()\n'
    c = classify(own)
    assert c.state == "failed" and c.cause == "other"
    assert c.line == signal.strip()
    worker = signal + "(Worker rank=0 pid=77) Traceback (most recent call last):\n"
    c = classify(worker)
    assert c.state == "failed" and c.cause == "other"
    assert c.line == "(Worker rank=0 pid=77) Traceback (most recent call last):"


def test_an_ignored_exception_leaves_the_failure_before_it_decisive():
    """The launcher's going-down line stays the failure's line when Python then reports an exception it ignored."""
    sigquit = "[2026-11-30 10:00:05] Received sigquit from a child proces. It usually means the child failed."
    text = (BANNER + LOAD + sigquit + "\nException ignored in atexit callback: <function cleanup at 0x7f02>\n"
            'Traceback (most recent call last):\n  File "/opt/wrap/run.py", line 20, in cleanup\n')
    c = classify(text)
    assert c.state == "failed" and c.line == sigquit


def test_a_reported_native_signal_hints_at_native_code_not_a_kill():
    c = classify(VLLM_LOAD + "[node2:31:0:31] Caught signal 11 (Segmentation fault: address not mapped to object)\n")
    assert c.state == "failed" and c.cause == "signal_killed"
    assert c.hint is not None and "native code" in c.hint
