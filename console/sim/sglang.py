"""A stand-in for SGLang 0.5.23's server (``python -m console.sim.sglang <sglang flags>``).

It parses SGLang's command line for the flags it models (argparse ``prog="sglang serve"``,
abbreviations on, so unknown and ambiguous flags fail exactly like SGLang with exit code 2),
writes SGLang's startup log in order with scaled timings, sizes GPU memory by its own numbers
(:mod:`console.sim.sglang_memory`: the GPU file's, else the model's config.json; never the console's
planner) on a simulated GPU, starts real worker processes titled ``sglang::scheduler_TP<n>``
and ``sglang::detokenizer``, and serves SGLang's HTTP endpoints with simulated token rates.

Simulation knobs, environment only (never flags):

``MTPCONSOLE_SIM_DIR``         simulated GPUs (``gpus.json``, with optional memory numbers for the stand-in, see
                               sglang_memory) and allocations (``alloc/<pid>.json``), see simgpu
``MTPCONSOLE_SIM_SPEED``       time scale; default 5 (a full start takes ~3.5 s, an OOM fails after ~2 s)
``MTPCONSOLE_SIM_FAULT``       ``orphan`` (scheduler TP0 escapes with setsid and keeps its GPU memory after
                               the launcher dies), ``ignore_sigterm``, or ``no_info`` (``/server_info`` and
                               ``/model_info`` answer 404, as an older release)
``MTPCONSOLE_SIM_LATENCY_S``   each request's least duration in seconds (default 0), see sglang_http
``MTPCONSOLE_SIM_WEIGHTS_GB``  size of the whole model's weights, instead of the config.json estimate (a GPU's
                               ``weights_mib`` in gpus.json wins over both)

Exit behaviour: bad flags exit 2 (argparse); a missing model or config error exits 1 with a
traceback; a memory failure prints the scheduler's traceback ending in
``RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.`` then the
launcher logs ``Received sigquit from a child process. It usually means the child failed.`` and
kills its tree and itself with SIGKILL (exit status -9 / 137), like SGLang's kill_process_tree.
SIGTERM while loading: the default action (immediate death). SIGTERM once serving: drain, exit 0.
Multi-node (``--nnodes N --node-rank R --dist-init-addr HOST:PORT``): see :mod:`console.sim.sglang_group`
(the rendezvous, rank >= 1's dummy health server and ignored SIGTERM, survivors that hang on a dead peer).

Longer than ~400 lines on purpose: the stand-in is one program mirroring one real one (argparse from
the recorded schema, the start-up log in order, memory sizing, serving, teardown); it runs as
``python -m console.sim.sglang`` and is compared with the real package as a whole.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from console.model import SPECULATIVE_ALGORITHMS
from console.sim import sglang_args, sglang_group, sglang_memory, simgpu

if TYPE_CHECKING:
    from console.sim.sglang_http import Engine, SimServer

VERSION = "0.5.23"
SPEC_BUILTINS = SPECULATIVE_ALGORITHMS
RETITLE_S_DEFAULT = 0.5
"""Seconds a worker runs under its multiprocessing 'spawn' command line before it retitles
(``$MTPCONSOLE_SIM_RETITLE_S``; real SGLang takes ~10 s, the demo wants it short)."""
SPAWN_CODE = ("from multiprocessing.spawn import spawn_main; import sys; from console.sim.sglang_worker import main; "
              "sys.exit(main())")
TRACKER_CODE = ("from multiprocessing.resource_tracker import main; import sys; "
                "from console.sim.sglang_worker import main; sys.exit(main())")
DEFAULT_GPU = {"index": 0, "uuid": None, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
               "mem_total_mib": 97887, "power_limit_w": 600.0}
SITE = "/usr/local/lib/python3.12/dist-packages/sglang"
GIB = 1 << 30
MIB = 1 << 20

# timeline in simulated seconds (divided by MTPCONSOLE_SIM_SPEED)
T_INIT = 1.0
T_LOAD = 8.0
T_POOL = 0.5
T_GRAPH = 5.0
T_WARMUP = 2.0
T_DRAIN_MAX = 10.0


def human_int(s: str) -> int:
    """SGLang's human_readable_int: 32768, 32k, 1M."""
    t = s.strip().lower()
    mul = 1
    if t.endswith("k"):
        mul, t = 1000, t[:-1]
    elif t.endswith("m"):
        mul, t = 1000 * 1000, t[:-1]
    try:
        return int(float(t) * mul) if mul > 1 else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid human readable int value: '{s}'") from None


def build_parser() -> argparse.ArgumentParser:
    """SGLang 0.5.23's own parser (every flag, choice and alias), generated from the bundled real schema."""
    return sglang_args.build_parser()


def retitle_delay() -> float:
    """Seconds before a worker retitles ($MTPCONSOLE_SIM_RETITLE_S, default RETITLE_S_DEFAULT)."""
    try:
        v = float(os.environ.get("MTPCONSOLE_SIM_RETITLE_S", RETITLE_S_DEFAULT))
    except ValueError:
        v = RETITLE_S_DEFAULT
    return min(max(v, 0.0), 60.0)


def scheduler_title(rank: int, tp: int, dp: int) -> str:
    """SGLang's title: ``sglang::scheduler`` at tp 1, ``_TP<n>`` when tp > 1, ``_DP<d>_TP<n>`` with dp > 1."""
    if dp > 1:
        return "sglang::scheduler_DP%d_TP%d" % (rank // max(tp, 1), rank % max(tp, 1))
    return "sglang::scheduler_TP%d" % rank if tp > 1 else "sglang::scheduler"


def spawn_argv() -> list[str]:
    """A multiprocessing 'spawn' child's command line, as SGLang's workers start (fds go by environment)."""
    return [sys.executable, "-c", SPAWN_CODE, "--multiprocessing-fork"]


def ts(prefix: str = "") -> str:
    return "[%s%s]" % (time.strftime("%Y-%m-%d %H:%M:%S"), prefix)


def log(msg: str, prefix: str = "") -> None:
    """One SGLang log line on stderr (where SGLang's logging goes)."""
    try:
        os.write(2, ("%s %s\n" % (ts(prefix), msg)).encode("utf-8", "replace"))
    except OSError:
        pass


def raw(text: str) -> None:
    try:
        os.write(2, (text if text.endswith("\n") else text + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def traceback_text(frames: list[tuple[str, int, str, str]], exc: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for f, n, fn, code in frames:
        lines.append('  File "%s/%s", line %d, in %s' % (SITE, f, n, fn))
        lines.append("    " + code)
    lines.append(exc)
    return "\n".join(lines)


def fail(exc: str, frames: list[tuple[str, int, str, str]] | None = None, code: int = 1) -> None:
    raw(traceback_text(frames or [("launch_server.py", 32, "<module>", "server_args = prepare_server_args(sys.argv[1:])"),
                                  ("srt/server_args.py", 6120, "prepare_server_args", "return ServerArgs.from_cli_args(raw_args)"),
                                  ("srt/server_args.py", 1080, "__post_init__", "self._handle_model_specific_adjustments()")],
                        exc))
    sys.exit(code)


def speed() -> float:
    try:
        s = float(os.environ.get("MTPCONSOLE_SIM_SPEED", "5") or 5)
    except ValueError:
        s = 5.0
    return min(10000.0, max(0.01, s))


def load_config(model_path: str) -> dict[str, Any]:
    """The model's config.json, failing like transformers/SGLang when it is missing or unreadable."""
    p = Path(model_path)
    cfg_file = p / "config.json" if p.is_dir() else p
    hint = ("OSError: Can't load the configuration of '%s'. If you were trying to load it from "
            "'https://huggingface.co/models', make sure you don't have a local directory with the same name. "
            "Otherwise, make sure '%s' is the correct path to a directory containing a config.json file" % (model_path, model_path))
    frames = [("srt/server_args.py", 1080, "__post_init__", "self._handle_model_specific_adjustments()"),
              ("srt/utils/hf_transformers_utils.py", 412, "get_config", "config = AutoConfig.from_pretrained(")]
    if not cfg_file.is_file():
        fail(hint, frames)
    try:
        data = json.loads(cfg_file.read_bytes()[: 4 * MIB].decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        fail("OSError: It looks like the config file at '%s' is not a valid JSON file. (%s)" % (cfg_file, e), frames)
    return data


class Launcher:
    """The main process: args, startup sequence, worker processes, HTTP serving, signals."""

    def __init__(self, args: argparse.Namespace, argv: list[str]) -> None:
        self.args = args
        self.argv = argv
        self.speed = speed()
        self.fault = os.environ.get("MTPCONSOLE_SIM_FAULT", "").strip()
        self.sim_dir = os.environ.get("MTPCONSOLE_SIM_DIR") or None
        self.children: list[subprocess.Popen] = []
        self.cmd_fds: list[int] = []
        self.events_r = -1
        self.phase = "loading"
        self.draining = False
        self.ready = False
        self.httpd: SimServer | None = None
        self.engine: Engine | None = None
        self.shutdown = threading.Event()
        self.send_lock = threading.Lock()
        self.internal: dict[str, Any] = {}
        self.rust = os.environ.get("SGLANG_RUST_SERVER", "").strip().lower() in ("1", "true", "yes", "on")
        """SGLang's Rust front end (``SGLANG_RUST_SERVER=1``): HTTP, tokenizer and detokenizer live in the rank-0
        scheduler process - no detokenizer process, and the listening socket is that scheduler's."""
        self.group: sglang_group.Rendezvous | None = None
        """``--nnodes`` > 1: this node's rendezvous with the others (see sglang_group)."""
        self.n_local = 1
        """Schedulers on this node (tp_size / nnodes; the first ``n_local`` of self.children)."""

    # ------------------------------------------------------------ helpers
    def sleep(self, sim_s: float) -> None:
        time.sleep(max(0.0, sim_s / self.speed))

    def access(self, line: str) -> None:
        try:
            os.write(1, ("%s INFO:     %s\n" % (ts(), line)).encode())
        except OSError:
            pass

    def send_all(self, msg: dict) -> None:
        """To every scheduler; a 'log' only to TP0 (which prints decode/prefill lines)."""
        with self.send_lock:
            for i, fd in enumerate(self.cmd_fds):
                m = msg if i == 0 else {k: v for k, v in msg.items() if k != "log"}
                if not m:
                    continue
                try:
                    os.write(fd, (json.dumps(m) + "\n").encode())
                except OSError:
                    pass

    def healthy(self) -> bool:
        return self.ready and not self.draining

    def accepting(self) -> bool:
        return self.phase in ("warmup", "serving") and not self.draining

    # ------------------------------------------------------------ startup
    def run(self) -> int:
        a = self.args
        if self.fault == "ignore_sigterm":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raw("%s/launch_server.py:71: UserWarning: 'python -m sglang.launch_server' is still supported, but "
            "'sglang serve' is the recommended entrypoint.\n  Example: sglang serve --model-path <model> [options]\n"
            "  warnings.warn(" % SITE)
        cfg = load_config(a.model_path)
        try:
            self.shape = sglang_memory.read_model(cfg)
        except ValueError as e:
            fail("ValueError: Unsupported model config: %s" % e)
        self.arch = self.shape.architecture or "LlamaForCausalLM"
        if a.attention_backend is None:
            log("Attention backend not specified. Use flashinfer backend by default.")
            a.attention_backend = "flashinfer"
        self.resolve_spec()
        if a.tp_size < 1:
            fail("ValueError: tp_size must be >= 1, got %d" % a.tp_size)
        self.served_name = a.served_model_name or a.model_path
        self.context_len = a.context_length or self.shape.max_position_embeddings or 32768
        log("server_args=%r" % dict(self.args_items()))  # a dict, as sglang 0.5.23 logs it (secrets included)
        self.n_local = self.setup_group()
        plans = self.plan_ranks()
        self.install_signals()
        self.spawn(plans)
        if self.group is not None:
            self.group.start()
        ok = self.wait_schedulers()
        if not ok:
            return 1
        if self.group is not None and a.node_rank >= 1:
            self.follow()
        self.serve()
        return 0

    def setup_group(self) -> int:
        """``--nnodes`` > 1: SGLang's checks, then bind (rank 0) the rendezvous; the number of local schedulers."""
        a = self.args
        if a.nnodes <= 1:
            return a.tp_size
        if (a.tp_size * a.pp_size) % a.nnodes:
            fail("AssertionError: tp_size must be divisible by number of nodes",
                 [("srt/server_args.py", 1080, "__post_init__", "self._handle_arg_groups()"),
                  ("srt/arg_groups/validation_hook.py", 179, "check_server_args",
                   "assert (cfg.tp_size * cfg.pp_size) % cfg.nnodes == 0, (")])
        if not 0 <= a.node_rank < a.nnodes:  # the stand-in's own check (real SGLang fails later, in torch)
            fail("ValueError: --node-rank %d is outside 0..%d (--nnodes %d)" % (a.node_rank, a.nnodes - 1, a.nnodes))
        addr = None
        if a.dist_init_addr:
            try:
                addr = sglang_group.split_addr(a.dist_init_addr)
            except ValueError as e:
                fail("ValueError: %s" % e)
        self.group = sglang_group.Rendezvous(a.nnodes, a.node_rank, addr, log,
                                             on_joined=lambda: self.send_all({"go": True}))
        try:
            self.group.bind()
        except OSError as e:
            assert addr is not None  # only rank 0 with an address binds
            raw("%s Scheduler hit an exception: %s" % (ts(" TP0"), traceback_text([
                ("srt/managers/scheduler.py", 3412, "run_scheduler_process", "scheduler = Scheduler("),
                ("srt/distributed/bootstrap.py", 152, "init_parallel_runtime", "_init_parallel_groups("),
            ], "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
               "address. port: %d, useIpv6: false, code: -%d, name: EADDRINUSE, message: %s"
               % (addr[1], e.errno or 98, (e.strerror or "address already in use").lower()))))
            log("Received sigquit from a child process. It usually means the child failed.")
            self.kill_tree_and_die()
        return a.tp_size // a.nnodes

    def follow(self) -> None:
        """Node rank >= 1 once its schedulers are ready: the dummy health server, then block until they exit."""
        a = self.args

        def on_sigterm(signum: int, frame: Any) -> None:
            log("SIGTERM received on node_rank %d; waiting for the rank-0 ShutdownReq broadcast to stop the "
                "schedulers." % a.node_rank)

        if self.fault != "ignore_sigterm":
            signal.signal(signal.SIGTERM, on_sigterm)
        self.phase = "serving"
        sglang_group.dummy_health_server(a.host, a.port, log)
        group = self.group
        assert group is not None
        deadline = time.monotonic() + sglang_group.HANG_MAX_S
        while time.monotonic() < deadline:
            if group.shutdown.is_set():
                self.exit(0)
            dead = next((c for c in self.children[: self.n_local] if c.poll() is not None), None)
            if dead is not None:
                log("Subprocess scheduler (pid=%d) crashed with exit code %s. Triggering SIGQUIT for cleanup..."
                    % (dead.pid, dead.returncode))
                self.kill_tree_and_die()
            time.sleep(0.2)
        self.exit(0)

    def hang(self) -> None:
        """A peer died: NCCL's survivors neither exit nor log; only a signal ends this (bounded)."""
        deadline = time.monotonic() + sglang_group.HANG_MAX_S
        while time.monotonic() < deadline and not self.shutdown.is_set():
            time.sleep(0.5)
        self.exit(0)

    def resolve_spec(self) -> None:
        a = self.args
        algo = a.speculative_algorithm
        self.spec = False
        self.accept_len = 1.0
        if algo is None or str(algo).upper() == "NONE":
            a.speculative_algorithm = None
            if a.speculative_eagle_topk is not None or a.speculative_num_draft_tokens is not None \
                    or a.speculative_num_steps is not None:
                pass  # ignored without an algorithm, as in SGLang
            return
        name = str(algo).upper()
        if name not in SPEC_BUILTINS:
            fail("ValueError: Unknown speculative algorithm name: %s" % algo,
                 [("srt/server_args.py", 1080, "__post_init__", "self._handle_speculative_decoding()"),
                  ("srt/speculative/spec_info.py", 88, "from_string", "raise ValueError(")])
        a.speculative_algorithm = "EAGLE" if name == "NEXTN" else name
        if a.speculative_num_steps is None and (a.speculative_eagle_topk is not None
                                                or a.speculative_num_draft_tokens is not None):
            fail("AssertionError: speculative_num_steps must be set when speculative_eagle_topk or "
                 "speculative_num_draft_tokens is set",
                 [("srt/server_args.py", 1080, "__post_init__", "self._handle_speculative_decoding()"),
                  ("srt/server_args.py", 2890, "_handle_speculative_decoding", "assert (")])
        if a.speculative_algorithm in ("EAGLE", "EAGLE3", "STANDALONE") and not a.speculative_draft_model_path \
                and not self.shape.mtp_layers:
            fail("ValueError: --speculative-draft-model-path is required for %s: %s has no MTP layers"
                 % (a.speculative_algorithm, self.arch))
        if a.max_running_requests is None:
            a.max_running_requests = 48
            log("Max running requests is reset to 48 for speculative decoding. You can override this by "
                "explicitly setting --max-running-requests.")
        if a.speculative_num_steps is None:
            a.speculative_num_steps, a.speculative_eagle_topk, a.speculative_num_draft_tokens = 3, 1, 4
        a.speculative_eagle_topk = a.speculative_eagle_topk or 1
        if a.speculative_eagle_topk == 1 and a.speculative_num_draft_tokens != a.speculative_num_steps + 1:
            if a.speculative_num_draft_tokens is not None:
                log("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                    "speculative_eagle_topk == 1")
            a.speculative_num_draft_tokens = a.speculative_num_steps + 1
        if self.shape.hybrid and a.mamba_radix_cache_strategy in ("auto", "extra_buffer") \
                and a.mamba_track_interval < a.speculative_num_draft_tokens:
            fail("ValueError: --mamba-track-interval (%d) must be >= speculative_num_draft_tokens (%d) with the "
                 "extra_buffer strategy" % (a.mamba_track_interval, a.speculative_num_draft_tokens))
        self.spec = True
        steps = a.speculative_num_steps
        if a.speculative_algorithm == "NGRAM":
            self.accept_len = 1.3
        else:
            self.accept_len = min(float(a.speculative_num_draft_tokens), 1.0 + 0.67 * steps)

    def args_items(self) -> list[tuple[str, Any]]:
        a = vars(self.args)
        order = ["model_path", "tokenizer_path", "trust_remote_code", "context_length", "dtype", "kv_cache_dtype",
                 "served_model_name", "host", "port", "skip_server_warmup", "mem_fraction_static",
                 "max_running_requests", "max_total_tokens", "chunked_prefill_size", "max_prefill_tokens",
                 "page_size", "tp_size", "dp_size", "base_gpu_id", "random_seed", "log_level", "enable_metrics",
                 "decode_log_interval", "api_key", "reasoning_parser", "tool_call_parser", "attention_backend",
                 "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
                 "speculative_eagle_topk", "speculative_num_draft_tokens", "mamba_ssm_dtype",
                 "max_mamba_cache_size", "mamba_radix_cache_strategy", "mamba_track_interval",
                 "disable_radix_cache", "disable_overlap_schedule", "cuda_graph_max_bs_decode",
                 "cuda_graph_max_bs_prefill", "disable_cuda_graph", "enable_hierarchical_cache",
                 "hicache_ratio", "hicache_size", "watchdog_timeout"]
        out = []
        for k in order:
            v = a.get(k)
            if k == "tokenizer_path" and v is None:
                v = a["model_path"]
            if k == "served_model_name" and v is None:
                v = a["model_path"]
            out.append((k, v))
        return out

    # ------------------------------------------------------------ memory
    def gpus(self) -> list[dict]:
        if not self.sim_dir:
            return []
        try:
            return simgpu.read_gpus(self.sim_dir)
        except ValueError:
            return []

    def launch_numbers(self) -> sglang_memory.Launch:
        """The resolved flags that size memory."""
        a = self.args
        return sglang_memory.Launch(
            tp_size=a.tp_size, mem_fraction_static=a.mem_fraction_static, max_running_requests=a.max_running_requests,
            kv_cache_dtype=str(a.kv_cache_dtype or "auto"), speculative_algorithm=a.speculative_algorithm,
            speculative_num_draft_tokens=a.speculative_num_draft_tokens or 0,
            draft_model_path=bool(a.speculative_draft_model_path),
            mamba_strategy=("extra_buffer" if a.mamba_radix_cache_strategy == "auto" else a.mamba_radix_cache_strategy),
            disable_radix_cache=bool(a.disable_radix_cache), chunked_prefill_size=a.chunked_prefill_size,
            cuda_graph_max_bs=a.cuda_graph_max_bs_decode)

    def plan_ranks(self) -> list[dict]:
        """Per rank: the physical GPU and its memory by the stand-in's own numbers (sglang_memory), the script's input."""
        a = self.args
        gpus = self.gpus()
        weights_env = os.environ.get("MTPCONSOLE_SIM_WEIGHTS_GB")
        weights = None
        if weights_env:
            try:
                weights = int(float(weights_env) * GIB)
            except ValueError:
                weights = None
        out = []
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ranks = sglang_group.local_ranks(a.tp_size, a.nnodes, a.node_rank) if self.group else range(a.tp_size)
        for rank in ranks:
            run = self.launch_numbers()  # after rank 0 the automatic --mem-fraction-static is the flag's value
            try:
                phys = simgpu.physical_gpu(rank - ranks.start, visible, gpus, a.base_gpu_id)  # the node's own GPUs
            except ValueError as e:
                fail("RuntimeError: CUDA error: invalid device ordinal (%s)" % e)
            g = next((x for x in gpus if x.get("index") == phys), None)
            if gpus and g is None:
                fail("RuntimeError: CUDA error: invalid device ordinal (no GPU %d)" % phys)
            g = g or dict(DEFAULT_GPU, index=phys)
            others = simgpu.used_by_others_mib(self.sim_dir, phys) * MIB if self.sim_dir else 0
            m = sglang_memory.rank_memory(self.shape, run, g, others, weights)
            if rank == ranks.start and a.mem_fraction_static is None:
                a.mem_fraction_static = m.mem_fraction_static
            out.append({"rank": rank, "gpu": phys if self.sim_dir else None, "mem": m})
        return out

    def script(self, r: dict) -> dict:
        """The scheduler's log lines, memory steps and outcome for one rank."""
        a = self.args
        p: sglang_memory.RankMemory = r["mem"]
        rank = r["rank"]
        prefix = " TP%d" % rank if a.tp_size > 1 else ""
        ctx = p.context_bytes
        usable = p.usable_bytes
        steps: list[dict] = []
        gb = lambda b: b / GIB  # noqa: E731
        steps.append({"delay": 0.2, "log": "Init parallel begin.", "mem_mib": ctx // MIB})
        steps.append({"delay": T_INIT, "log": "Init parallel ends. elapsed=%.2f s" % T_INIT})
        steps.append({"delay": 0.1, "log": "Load weight begin. avail mem=%.2f GB" % gb(usable)})
        weights = p.weights_bytes
        failure = None
        if p.outcome == "weights_exceed_gpu":
            # torch's own OOM while loading
            n = 4
            for i in range(1, n):
                steps.append({"delay": T_LOAD / n, "mem_mib": (ctx + min(usable, weights * i // n)) // MIB})
            failure = [
                "%%TS%% Scheduler hit an exception: %s" % (traceback_text([
                    ("srt/managers/scheduler.py", 3412, "run_scheduler_process", "scheduler = Scheduler("),
                    ("srt/model_executor/model_runner.py", 901, "load_model", "self.model = self.loader.load_model("),
                    ("srt/model_loader/loader.py", 640, "load_model", "model = _initialize_model("),
                ], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU %d has a total "
                   "capacity of %.2f GiB of which %.2f GiB is free. Including non-PyTorch memory, this process has "
                   "%.2f GiB memory in use." % (rank, gb(p.total_bytes), 0.2, gb(usable)))),
            ]
            return {"prefix": prefix, "steps": steps, "outcome": "fail", "failure": failure}
        steps.append({"delay": T_LOAD / 2, "mem_mib": (ctx + weights // 2) // MIB})
        steps.append({"delay": T_LOAD / 2, "mem_mib": (ctx + weights) // MIB,
                      "log": "Load weight end. elapsed=%.2f s, type=%s, avail mem=%.2f GB, mem usage=%.2f GB."
                      % (T_LOAD, self.arch, gb(usable - weights), gb(weights))})
        used = ctx + weights
        if p.draft_weights_bytes:
            used += p.draft_weights_bytes
            steps.append({"delay": 0.3, "mem_mib": used // MIB,
                          "log": "Load weight end. elapsed=%.2f s, type=%s, avail mem=%.2f GB, mem usage=%.2f GB."
                          % (0.3, self.arch + ("MTP" if self.shape.mtp_layers and not a.speculative_draft_model_path
                                               else "Eagle"), gb(usable - weights - p.draft_weights_bytes),
                             gb(p.draft_weights_bytes))})
        if p.outcome == "no_room_for_kv":
            failure = ["%%TS%% Scheduler hit an exception: %s" % (traceback_text([
                ("srt/managers/scheduler.py", 3412, "run_scheduler_process", "scheduler = Scheduler("),
                ("srt/model_executor/model_runner.py", 560, "initialize", "self.init_memory_pool(min_per_gpu_memory)"),
                ("srt/model_executor/model_runner_kv_cache_mixin.py", 205, "profile_max_num_token", "raise ValueError("),
            ], "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=%s. "
               "Raise --mem-fraction-static above %.4f or use more GPUs (--tp-size)."
               % (p.mem_fraction_static, (weights + p.draft_weights_bytes) / max(1, usable) + 0.005)))]
            return {"prefix": prefix, "steps": steps, "outcome": "fail", "failure": failure}
        if p.outcome == "not_enough_memory":
            failure = ["%%TS%% Scheduler hit an exception: %s" % (traceback_text([
                ("srt/managers/scheduler.py", 3412, "run_scheduler_process", "scheduler = Scheduler("),
                ("srt/managers/scheduler.py", 402, "__init__", "self.init_model_worker()"),
                ("srt/managers/tp_worker.py", 263, "__init__", "self._model_runner = ModelRunner("),
                ("srt/model_executor/model_runner.py", 560, "initialize", "self.init_memory_pool(min_per_gpu_memory)"),
                ("srt/model_executor/model_runner_kv_cache_mixin.py", 431, "init_memory_pool", "raise RuntimeError("),
            ], "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."))]
            steps.append({"delay": T_POOL})
            return {"prefix": prefix, "steps": steps, "outcome": "fail", "failure": failure}
        kv_bytes = p.kv_tokens * p.kv_bytes_per_token
        used += kv_bytes
        dtype = "torch.bfloat16" if p.kv_dtype_bytes == 2 else "torch.float8_e4m3fn"
        steps.append({"delay": T_POOL, "mem_mib": used // MIB,
                      "log": "KV Cache is allocated. dtype: %s, #tokens: %d, K size: %.2f GB, V size: %.2f GB"
                      % (dtype, p.kv_tokens, gb(kv_bytes / 2), gb(kv_bytes / 2))})
        if p.mamba_bytes:
            used += p.mamba_bytes
            lin = self.shape.linear
            assert lin is not None  # mamba state only for models with linear-attention layers
            conv_share = ((lin.conv_dim * (lin.conv_kernel - 1) * lin.conv_dtype_bytes) /
                          max(1, lin.conv_dim * (lin.conv_kernel - 1) * lin.conv_dtype_bytes
                              + lin.num_heads * lin.key_head_dim * lin.value_head_dim * lin.ssm_dtype_bytes))
            steps.append({"delay": 0.1, "mem_mib": used // MIB,
                          "log": "Mamba Cache is allocated. max_mamba_cache_size: %d, conv_state size: %.2fGB, "
                                 "ssm_state size: %.2fGB " % (p.mamba_slots, gb(p.mamba_bytes * conv_share),
                                                               gb(p.mamba_bytes * (1 - conv_share)))})
        if p.kv_tokens < self.context_len:
            steps.append({"delay": 0.0, "log": "KV pool holds %d tokens, fewer than --context-length %d."
                          % (p.kv_tokens, self.context_len)})
        steps.append({"delay": 0.05, "log": "Memory pool end. avail mem=%.2f GB" % gb(usable - (used - ctx))})
        graph_bs = a.cuda_graph_max_bs_decode or (256 if p.total_bytes > 80 * GIB else 160)
        bss = [1, 2, 4, 8] + list(range(16, graph_bs + 1, 16))
        graph_mem = p.graph_bytes
        if not a.disable_cuda_graph:
            steps.append({"delay": 0.05, "log": "Capture cuda graph begin. This can take up to several minutes. "
                                                "avail mem=%.2f GB" % gb(usable - (used - ctx))})
            parts = [("target", "decode")] + ([("draft", "decode"), ("target", "verify")] if self.spec else [])
            for tgt, kind in parts:
                used += graph_mem // len(parts)
                steps.append({"delay": T_GRAPH / len(parts), "mem_mib": used // MIB,
                              "log": "Capture %s %s CUDA graph end. bs=%s, elapsed=%.2f s, mem usage=%.2f GB, "
                                     "avail mem=%.2f GB." % (tgt, kind, bss, T_GRAPH / len(parts),
                                                             gb(graph_mem / len(parts)), gb(usable - (used - ctx)))})
        if rank == 0:
            mr = p.max_running_requests or min(2048, max(1, p.kv_tokens // 2))
            self.internal = {"max_total_num_tokens": p.kv_tokens, "max_running_requests": mr,
                             "weights_gb": gb(weights), "kv_gb": gb(kv_bytes), "mamba_gb": gb(p.mamba_bytes),
                             "graph_gb": gb(graph_mem), "mamba_slots": p.mamba_slots}
            chunk = a.chunked_prefill_size or (8192 if p.total_bytes > 60 * GIB else 2048)
            steps.append({"delay": 0.05, "log": "max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, "
                                                "max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB"
                          % (p.kv_tokens, chunk, a.max_prefill_tokens, mr, self.context_len,
                             gb(usable - (used - ctx)))})
        return {"prefix": prefix, "steps": steps, "outcome": "ready"}

    # ------------------------------------------------------------ processes
    def spawn(self, plans: list[dict]) -> None:
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        ev_r, ev_w = os.pipe()
        self.events_r = ev_r
        scripts = [self.script(r) for r in plans]
        retitle = retitle_delay()
        for r, sc in zip(plans, scripts):
            cmd_r, cmd_w = os.pipe()
            cfg = {"role": "scheduler", "rank": r["rank"], "parent_pid": os.getpid(), "sim_dir": self.sim_dir,
                   "gpu": r["gpu"], "spec": self.spec, "fault": self.fault, "events_fd": ev_w, "cmd_fd": cmd_r,
                   "title": scheduler_title(r["rank"], self.args.tp_size, self.args.dp_size), "retitle_s": retitle,
                   **sc}
            if self.group is not None:  # torch.distributed's rendezvous: every node's ranks, or nobody goes on
                cfg["steps"].insert(1, {"delay": 0.0, "gate": True})
            env["MTPCONSOLE_SIM_WORKER"] = json.dumps(cfg)
            # scale the script's delays here so the worker stays dumb
            for st in cfg["steps"]:
                st["delay"] = st.get("delay", 0.0) / self.speed
            env["MTPCONSOLE_SIM_WORKER"] = json.dumps(cfg)
            self.children.append(subprocess.Popen(spawn_argv(), env=env, pass_fds=(ev_w, cmd_r),
                                                  stdin=subprocess.DEVNULL, close_fds=True))
            os.close(cmd_r)
            self.cmd_fds.append(cmd_w)
        if not self.rust and self.args.node_rank == 0:  # node ranks >= 1 run no detokenizer (group members)
            env["MTPCONSOLE_SIM_WORKER"] = json.dumps({"role": "detokenizer", "parent_pid": os.getpid(),
                                                       "fault": self.fault, "title": "sglang::detokenizer",
                                                       "retitle_s": retitle})
            self.children.append(subprocess.Popen(spawn_argv(), env=env, stdin=subprocess.DEVNULL,
                                                  close_fds=True))
        # multiprocessing's resource tracker (last in self.children: schedulers come first there)
        env["MTPCONSOLE_SIM_WORKER"] = json.dumps({"role": "resource_tracker", "parent_pid": os.getpid()})
        self.children.append(subprocess.Popen([sys.executable, "-c", TRACKER_CODE], env=env,
                                              stdin=subprocess.DEVNULL, close_fds=True))
        os.close(ev_w)

    def wait_schedulers(self) -> bool:
        """Wait for every scheduler's ready event (a failing one SIGQUITs us instead)."""
        n = self.n_local  # this node's schedulers (a group member's share of tp_size)
        ready = 0
        buf = b""
        deadline = time.monotonic() + 600.0
        while ready < n and time.monotonic() < deadline:
            try:
                r, _, _ = select.select([self.events_r], [], [], 0.2)
            except InterruptedError:
                continue
            if not r:
                for c in self.children[:n]:
                    if c.poll() is not None and c.returncode != 0:
                        # died without SIGQUIT (killed): SGLang reports the crash and cleans up
                        log("Rank %d scheduler died during initialization (exit code: %d). If exit code is -9 "
                            "(SIGKILL), a common cause is the OS OOM killer." % (self.children.index(c), c.returncode))
                        self.kill_tree_and_die()
                continue
            chunk = os.read(self.events_r, 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if b'"ready"' in line:
                    ready += 1
        return ready >= n

    def kill_tree_and_die(self) -> None:
        log("kill_process_tree called: parent_pid=%d, include_parent=True, pid=%d" % (os.getpid(), os.getpid()))
        for c in self.children:
            try:
                c.kill()
            except OSError:
                pass
        os.kill(os.getpid(), signal.SIGKILL)

    # ------------------------------------------------------------ signals
    def install_signals(self) -> None:
        def on_sigquit(signum: int, frame: Any) -> None:
            log("Received sigquit from a child process. It usually means the child failed.")
            self.kill_tree_and_die()

        def on_sigterm(signum: int, frame: Any) -> None:
            if self.phase == "loading":
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            if not self.draining:
                log("SIGTERM received. signum=%d frame=%s. Draining requests and shutting down..." % (signum, frame))
                self.draining = True
                threading.Thread(target=self.drain, name="drain", daemon=True).start()

        signal.signal(signal.SIGQUIT, on_sigquit)
        if self.fault != "ignore_sigterm":
            signal.signal(signal.SIGTERM, on_sigterm)
            signal.signal(signal.SIGINT, on_sigterm)

    def drain(self) -> None:
        deadline = time.monotonic() + min(2.0, T_DRAIN_MAX / self.speed)
        while time.monotonic() < deadline and self.engine is not None and not self.engine.idle():
            time.sleep(0.05)
        self.shutdown.set()

    # ------------------------------------------------------------ serving
    def serve(self) -> None:
        from console.sim.sglang_http import Engine, SimServer
        a = self.args
        if self.group is not None and self.group.lost.is_set():
            self.hang()  # a group member died while loading: the rest never comes up, nor exits
        info = self.internal
        engine = self.engine = Engine(max_running=info.get("max_running_requests", 48), accept_len=self.accept_len,
                             spec=self.spec, hybrid=self.shape.hybrid,
                             max_total_tokens=info.get("max_total_num_tokens", 1),
                             mamba_slots=info.get("mamba_slots", 1), send=self.send_all)
        try:
            # Rust front end: the engine's HTTP answers on a private loopback port; the rank-0 scheduler owns the
            # public socket and relays to it (so /proc shows the port held by a scheduler child, as in SGLang)
            httpd = self.httpd = SimServer(("127.0.0.1", 0) if self.rust else (a.host, a.port), self)
            if self.rust:
                self.open_rust_front(httpd.server_address[1])
        except OSError as e:
            raw("%s ERROR:    [Errno %d] error while attempting to bind on address ('%s', %d): %s"
                % (ts(), e.errno or 98, a.host, a.port, (e.strerror or str(e)).lower()))
            for c in self.children:
                c.kill()
            return self.exit(1)
        if self.rust:
            log("Rust HTTP server listening on http://%s:%d (scheduler process)" % (a.host, a.port))
        else:
            self.access("Started server process [%d]" % os.getpid())
            self.access("Waiting for application startup.")
            self.access("Application startup complete.")
            self.access("Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (a.host, a.port))
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="http",
                         daemon=True).start()
        engine.start()
        self.phase = "warmup"
        if not a.skip_server_warmup:
            self.sleep(T_WARMUP / 2)
            self.access('127.0.0.1:%d - "GET /model_info HTTP/1.1" 200 OK' % (a.port + 1000))
            self.send_all({"log": "Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, %s, #running-req: 0, "
                                  "#queue-req: 0" % ("full token usage: 0.00, mamba usage: 0.00" if self.shape.hybrid
                                                     else "token usage: 0.00")})
            self.sleep(T_WARMUP / 2)
            self.access('127.0.0.1:%d - "POST /generate HTTP/1.1" 200 OK' % (a.port + 1001))
        self.ready = True
        self.phase = "serving"
        log("The server is fired up and ready to roll!")
        stalled = False
        while not self.shutdown.wait(0.5 if self.group is None else 0.1):
            if self.group is not None and self.group.lost.is_set() and not stalled:
                sglang_group.stall(engine)  # a group member died: requests hang, /health still answers 200
                stalled = True
            if any(c.poll() is not None for c in self.children[: self.n_local]) and not self.draining:
                dead = next(c for c in self.children[: self.n_local] if c.poll() is not None)
                log("Subprocess scheduler (pid=%d) crashed with exit code %s. Triggering SIGQUIT for cleanup..."
                    % (dead.pid, dead.returncode))
                log("SIGQUIT received. signum=3, frame=None. It usually means one child failed.")
                self.kill_tree_and_die()
        self.exit(0)

    def open_rust_front(self, backend_port: int) -> None:
        """Have the rank-0 scheduler bind the public port and relay to ``backend_port``; OSError when it cannot."""
        a = self.args
        with self.send_lock:
            os.write(self.cmd_fds[0], (json.dumps({"front": {"host": a.host, "port": a.port,
                                                             "backend": backend_port}}) + "\n").encode())
        buf, deadline = b"", time.monotonic() + 10.0
        while time.monotonic() < deadline:
            r, _, _ = select.select([self.events_r], [], [], 0.2)
            if not r:
                continue
            chunk = os.read(self.events_r, 65536)
            if not chunk:
                break
            buf += chunk
            for line in buf.split(b"\n"):
                if b'"front"' in line:
                    ev = json.loads(line.decode("utf-8"))
                    if ev.get("ok"):
                        return
                    raise OSError(int(ev.get("errno") or 98), str(ev.get("error") or "address already in use"))
        raise OSError(110, "the rank-0 scheduler did not open the HTTP port")

    def exit(self, code: int) -> None:
        if self.engine is not None:
            self.engine.stop.set()
        self.send_all({"exit": True})
        if self.group is not None and self.args.node_rank == 0:
            self.group.stop_peers()
        for c in self.children[self.n_local:]:
            c.kill()  # the detokenizer: killed with the tree, as kill_process_tree does
        deadline = time.monotonic() + 2.0
        for c in self.children:
            try:
                c.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                c.kill()
        if self.httpd is not None:
            threading.Thread(target=self.httpd.shutdown, daemon=True).start()
        os._exit(code)

    # ------------------------------------------------------------ endpoints' data
    def deprecated(self, old: str, new: str) -> None:
        """SGLang 0.5.23 warns on every call of a deprecated endpoint alias (its http_server)."""
        log("Endpoint '%s' is deprecated and will be removed in a future version. Please use '%s' instead."
            % (old, new))

    def model_info(self) -> dict:
        return {"model_path": self.args.model_path, "tokenizer_path": self.args.tokenizer_path or self.args.model_path,
                "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
                "has_image_understanding": False, "has_audio_understanding": False,
                "model_type": self.shape.model_type, "architectures": [self.arch],
                "served_model_name": self.served_name}

    def server_info(self) -> dict:
        info = dict(self.args_items())
        running, queued, tokens = self.engine.counts() if self.engine else (0, 0, 0)
        info.update({
            "version": VERSION, "launch_command": " ".join(["python3", "-m", "sglang.launch_server"] + self.redacted_argv()),
            "max_total_num_tokens": self.internal.get("max_total_num_tokens"),
            "internal_states": [{
                "last_gen_throughput": round(self.engine.last_gen_throughput, 2) if self.engine else 0.0,
                "memory_usage": {"weight": round(self.internal.get("weights_gb", 0), 2),
                                 "kvcache": round(self.internal.get("kv_gb", 0) + self.internal.get("mamba_gb", 0), 2),
                                 "token_capacity": self.internal.get("max_total_num_tokens"),
                                 "graph": round(self.internal.get("graph_gb", 0), 2)},
                "avg_spec_accept_length": round(self.accept_len, 2) if self.spec else None,
                "num_running_reqs": running, "num_queue_reqs": queued,
                "effective_max_running_requests_per_dp": self.internal.get("max_running_requests"),
            }],
        })
        return info

    def redacted_argv(self) -> list[str]:
        out, hide = [], False
        for t in self.argv:
            if hide:
                out.append("***")
                hide = False
                continue
            if t.startswith("--api-key"):
                if "=" in t:
                    out.append("--api-key=***")
                else:
                    out.append(t)
                    hide = True
                continue
            out.append(t)
        return out

    def loads(self) -> dict:
        """``GET /v1/loads`` (and ``/get_loads``): this server's load per DP rank, as SGLang 0.5.23 answers it."""
        running, queued, tokens = self.engine.counts() if self.engine else (0, 0, 0)
        total = max(1, self.internal.get("max_total_num_tokens") or 1)
        load = {"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": queued, "num_reqs": running + queued,
                "num_total_tokens": tokens, "max_total_num_tokens": total, "token_usage": round(tokens / total, 4),
                "gen_throughput": round(self.engine.last_gen_throughput, 2) if self.engine else 0.0}
        return {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "version": VERSION,
                "dp_rank_count": 1, "loads": [load]}

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.served_name, "object": "model", "created": int(time.time()),
                                            "owned_by": "sglang", "root": self.served_name,
                                            "max_model_len": self.context_len}]}

    def metrics_text(self) -> str:
        engine = self.engine
        assert engine is not None  # /metrics is served only once the engine runs
        running, queued, tokens = engine.counts()
        total = max(1, self.internal.get("max_total_num_tokens") or 1)
        labels = 'engine_type="unified",model_name="%s",moe_ep_rank="0",pp_rank="0",tp_rank="0"' % self.served_name
        tlabels = 'engine_type="unified",is_streaming="false",model_name="%s"' % self.served_name
        gauges = [
            ("sglang:num_running_reqs", "The number of running requests.", running),
            ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", queued),
            ("sglang:gen_throughput", "The generation throughput (token/s).", round(engine.last_gen_throughput, 2)),
            ("sglang:token_usage", "The token usage.", round(tokens / total, 4)),
            ("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.0),
            ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", total),
        ]
        if self.shape.hybrid:
            gauges.append(("sglang:full_token_usage", "The token usage for full attention layers.", round(tokens / total, 4)))
        if self.spec:
            gauges.append(("sglang:spec_accept_length", "Mean acceptance length of speculative decoding (accepted "
                           "drafts + bonus token per forward).", round(self.accept_len, 2)))
            gauges.append(("sglang:spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed "
                           "drafts` in batch).", round((self.accept_len - 1) / max(1.0, self.accept_len), 2)))
            steps = self.args.speculative_num_steps or 0
            gauges.append(("sglang:spec_num_steps", "Currently active speculative_num_steps.", steps))
            gauges.append(("sglang:spec_num_draft_tokens", "Currently active speculative_num_draft_tokens (decouples "
                           "from steps under topk>1).", self.args.speculative_num_draft_tokens or steps + 1))
        lines = []
        for name, help_, val in gauges:
            lines += ["# HELP %s %s" % (name, help_), "# TYPE %s gauge" % name, "%s{%s} %s" % (name, labels, float(val))]
        for name, help_, val in [
            ("sglang:prompt_tokens_total", "Number of prefill tokens processed.", engine.prompt_tokens_total),
            ("sglang:generation_tokens_total", "Number of generation tokens processed.", engine.generation_tokens_total),
            ("sglang:num_requests_total", "Number of requests processed.", engine.requests_total),
        ]:
            lines += ["# HELP %s %s" % (name, help_), "# TYPE %s counter" % name, "%s{%s} %s" % (name, tlabels, float(val))]
        return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)  # exits 2 with argparse's message on bad flags
    return Launcher(args, argv).run()


if __name__ == "__main__":
    sys.exit(main())
