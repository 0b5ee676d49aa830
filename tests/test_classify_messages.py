"""Failure messages the servers and their libraries print, each read as the README's cause table says.

One line each, at the end of a traceback during start-up: the classifier's pattern tables must name
the cause from the message alone (the real-log corpus measures the rest). The messages are the
shapes torch, NCCL, Hugging Face, SGLang and vLLM print; the cases are ours.
"""

from __future__ import annotations

import pytest

from console.ops.classify import classify

CASES = {
    "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.": "cuda_driver",
    "RuntimeError: No CUDA GPUs are available": "cuda_driver",
    "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).": "cuda_driver",
    "RuntimeError: CUDA error: an illegal memory access was encountered": "cuda_driver",
    "RuntimeError: CUDA error: device-side assert triggered": "cuda_driver",
    "RuntimeError: CUDA error: no kernel image is available for execution on the device": "cuda_driver",
    "torch.AcceleratorError: CUDA error: an illegal memory access was encountered": "cuda_driver",
    "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, "
    "you must use the 'spawn' start method": "cuda_driver",
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
    "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use": "port_in_use",
    "OSError: [Errno 98] Address already in use": "port_in_use",
    "OSError: /models/x does not appear to have a file named config.json.": "model_not_found",
    "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the "
    "Hub and we cannot find the requested files in the local cache.": "model_not_found",
    "RuntimeError: Cannot find any model weights with `/models/x`": "model_not_found",
    "requests.exceptions.ProxyError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded "
    "with url: /api/models/Qwen/Qwen3-8B": "model_not_found",
    "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory": "import_error",
    "ModuleNotFoundError: No module named 'flashinfer'": "import_error",
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled system error "
    "(run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5": "nccl_error",
    "RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value "
    "store by key '0', but store->get('0') got error: Connection reset by peer": "nccl_error",
    "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/2 clients joined.":
        "nccl_error",
    "RuntimeError: DeepEP error: timeout (dispatch CPU)": "nccl_error",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.19 GiB of which 1.02 GiB is free.": "gpu_oom",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.": "gpu_oom",
    "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (9.50 GiB).": "gpu_oom",
    "ValueError: Free memory on device (10.2/79.2 GiB) on startup is less than desired GPU memory utilization "
    "(0.9, 71.3 GiB).": "gpu_oom",
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.00 GiB": "gpu_oom",
    "Exception: Capture cuda graph failed: Triton Error [CUDA]: invalid argument": "cuda_graph",
    "RuntimeError: CUDA error: operation not permitted when stream is capturing": "cuda_graph",
    "launch_server.py: error: unrecognized arguments: --foo": "bad_flags",
    "vllm serve: error: argument --max-model-len: invalid int value: 'abc'": "bad_flags",
    "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0.": "bad_flags",
    "ValueError: Total number of attention heads (32) must be divisible by tensor parallel size (3).": "bad_flags",
    "ValueError: max_model_len (200000) is greater than the derived max_model_len (max_position_embeddings=32768 "
    "or model_max_length=None in model's config.json).": "bad_flags",
    "ValueError: Unknown quantization method: fp4. Must be one of ['awq', 'fp8'].": "bad_flags",
    "RuntimeError: Failed to load the draft model": "spec_decode_error",
    "AssertionError: Speculative decoding is not supported with this attention backend": "spec_decode_error",
    "ValueError: Model architectures ['FooForCausalLM'] are not supported for now.": "other",
    "KeyError: 'qwen3_moe'": "other",
    "OSError: [Errno 28] No space left on device": "other",
}

START = ("[2025-01-01 00:00:00] Load weight begin. avail mem=70.00 GB\n"
         "Traceback (most recent call last):\n  File \"launch.py\", line 1, in <module>\n    main()\n")


@pytest.mark.parametrize("line", sorted(CASES))
def test_message_names_its_cause(line):
    got = classify(START + line + "\n")
    assert (got.state, got.cause) == ("failed", CASES[line])
    assert got.line == line
