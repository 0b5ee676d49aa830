"""Failure messages the servers and their libraries print, each read as the README's cause table says.

One line each, at the end of a traceback during start-up: the classifier's pattern tables must name
the cause from the message alone (the real-log corpus measures the rest). The messages are the
shapes torch, NCCL, Hugging Face, SGLang and vLLM print; the cases are ours.
"""

from __future__ import annotations

import pytest

from console.core.classify import classify

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
    # GPU memory: torch, HIP, cuBLAS, Triton and vLLM's sampler warm-up say it in their own words
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "63.98 GiB of which 1.10 GiB is free.": "gpu_oom",
    "RuntimeError: HIP error: out of memory": "gpu_oom",
    "RuntimeError: NPU out of memory. Tried to allocate 3.47 GiB (NPU 0; 60.97 GiB total capacity; 58.92 GiB already "
    "allocated)": "gpu_oom",
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`": "gpu_oom",
    "RuntimeError: Triton Error [CUDA]: out of memory": "gpu_oom",
    "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please try "
    "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.": "gpu_oom",
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine.": "gpu_oom",
    "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88.": "gpu_oom",
    "RuntimeError: Worker failed with error 'CUDA out of memory. Tried to allocate 2.00 GiB', please check the "
    "stack trace above for the root cause": "gpu_oom",
    # host memory, also where the words would say GPU (Ray's OutOfMemoryError is the node's RAM)
    "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you tried to "
    "allocate 1073741824 bytes.": "host_oom_killed",
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.": "host_oom_killed",
    # driver, device, architecture
    "RuntimeError: HIP error: invalid device function": "cuda_driver",
    "RuntimeError: No HIP GPUs are available": "cuda_driver",
    "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
    "NumCudaDevices() that might have already set an error? Error 802: system not yet initialized": "cuda_driver",
    "RuntimeError: CUDA error: unspecified launch failure": "cuda_driver",
    "RuntimeError: CUDA error: uncorrectable ECC error encountered": "cuda_driver",
    "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered": "cuda_driver",
    "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!": "cuda_driver",
    "RuntimeError: CUDA error: cudaErrorNoKernelImageForDevice: no kernel image is available": "cuda_driver",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.": "cuda_driver",
    # collectives
    "RuntimeError: NCCL Error 3: internal error - please report this issue to the NCCL developers": "nccl_error",
    "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error":
        "nccl_error",
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
    "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5": "nccl_error",
    "RuntimeError: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
    "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600065 milliseconds before timing out.": "nccl_error",
    # ports: zmq, Windows, torch's TCPStore
    "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5557')": "port_in_use",
    "OSError: [WinError 10048] Only one usage of each socket address (protocol/network address/port) is normally "
    "permitted": "port_in_use",
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
    "The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).": "port_in_use",
    # the Hub and local model directories
    "huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-6720a1b2-1a2b3c4d5e6f)":
        "model_not_found",
    "huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: "
    "https://huggingface.co/api/models/meta-llama/Llama-3.1-8B-Instruct": "model_not_found",
    "OSError: You are trying to access a gated repo.": "model_not_found",
    "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the cached "
    "files and it looks like Qwen/Qwen3-8B is not the path to a directory containing a file named config.json.":
        "model_not_found",
    "OSError: Can't load tokenizer for 'mistralai/Mistral-7B-v0.1'. If you were trying to load it from "
    "'https://huggingface.co/models', make sure you don't have a local directory with the same name.":
        "model_not_found",
    "OSError: /models/qwen does not appear to have files named ('model-00001-of-00002.safetensors',).":
        "model_not_found",
    "ValueError: No supported config format found in /models/Qwen3-8B.": "model_not_found",
    "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer": "model_not_found",
    "huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/models/Qwen/Qwen3-8B: "
    "offline mode is enabled.": "model_not_found",
    # flags and values a start-up check refuses
    "ValueError: World size (8) is larger than the number of available GPUs (4) in this node.": "bad_flags",
    "ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement group.":
        "bad_flags",
    "ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (32768). Please increase "
    "max_num_batched_tokens or decrease max_model_len.": "bad_flags",
    "TypeError: EngineArgs.__init__() got an unexpected keyword argument 'disable_log_requests'": "bad_flags",
    "ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 89. "
    "Current capability: 86.": "bad_flags",
    "KeyError: 'invalid tool call parser: openai (chose from { hermes, llama3_json })'": "bad_flags",
    "ValueError: Invalid attention backend: fa4": "bad_flags",
    "argparse.ArgumentTypeError: Value abc cannot be converted to <class 'int'>.": "bad_flags",
    "AssertionError: Only EAGLE and DSPARK speculative algorithms are supported for DeepseekV4ForCausalLM":
        "bad_flags",
    # the Python environment
    "ImportError: /usr/local/lib/python3.10/dist-packages/sgl_kernel/common_ops.abi3.so: undefined symbol: "
    "_ZN3c1010Dispatcher17runRecordFunctionERN2at14RecordFunctionE": "import_error",
    "OSError: /usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so: undefined symbol: "
    "ncclCommRegister": "import_error",
    "RuntimeError: Failed to import transformers.models.qwen2 because of the following error (look up to see its "
    "traceback): No module named 'flash_attn'": "import_error",
    "RuntimeError: Error building extension 'fused_adam'": "import_error",
    "RuntimeError: Failed to find C compiler. Please specify via CC environment variable.": "import_error",
    "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.": "cuda_driver",
    "AssertionError: 40 is not divisible by 3": "bad_flags",
    "ValueError: Weight output_partition_size = 1344 is not divisible by weight quantization block_n = 128.":
        "bad_flags",
    # uvicorn's bind: a taken port (98) is not an address the host does not have (99, a bad --host)
    "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use":
        "port_in_use",
    "ERROR:    [Errno 99] error while attempting to bind on address ('::1', 8000, 0, 0): cannot assign requested "
    "address": "bad_flags",
    # vLLM's API server names the engine core that a signal ended
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
    "{'EngineCore_DP0': -9}": "signal_killed",
    "!!!!!!! Segfault encountered !!!!!!!": "signal_killed",
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] Read error [10.0.0.2]:35012: "
    "Connection timed out": "nccl_error",
    "OSError: It looks like the config file at '/data/hf-cache/hub/models--org--m/snapshots/abc/config.json' "
    "is not a valid JSON file.": "model_not_found",
    "RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_LAZY Error, ValidateSyncInputTensors tensor_data is empty.":
        "cuda_driver",
    # generic: no cause of its own (a module's exception class is still an exception line)
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 135168, Hardware limit: 101376.":
        "other",
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig": "other",
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
