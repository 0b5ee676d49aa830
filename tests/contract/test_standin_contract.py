"""Contract: the SGLang stand-in (console/sim/sglang.py) behaves like the real sglang 0.5.23 (marker real_sglang).

Same inputs to both: argparse verdicts on the flag sets of ``flag_cases``; a scheduler that fails at
start-up (real: a config-only tiny Llama on the CPU fails at load; stand-in: a memory fraction too
small), whose log lines the classifier relies on must have the same shape; the worker titles.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.sim.sglang import build_parser
from tests.contract.conftest import REPO, offline_env
from tests.contract.flag_cases import CASES

pytestmark = pytest.mark.real_sglang

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256,
        "max_position_embeddings": 512, "torch_dtype": "float32", "rms_norm_eps": 1e-6}
CPU = ["--device", "cpu", "--load-format", "dummy", "--skip-tokenizer-init", "--max-total-tokens", "256"]

SHAPES = {
    "entrypoint warning": r"launch_server\.py:71: UserWarning: 'python -m sglang\.launch_server' is still supported, "
                          r"but 'sglang serve' is the recommended entrypoint\.$",
    "settings dict": r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] server_args=\{'model_path': '[^']+', ",
    "init parallel begin": r"^\[[^]]+\] Init parallel begin\.$",
    "init parallel ends": r"^\[[^]]+\] Init parallel ends\. elapsed=\d+\.\d\d s$",
    "load weight begin": r"^\[[^]]+\] Load weight begin\. avail mem=\d+\.\d\d GB$",
    "scheduler exception": r"^\[[^]]+\] Scheduler hit an exception: Traceback \(most recent call last\):$",
    "sigquit": r"^\[[^]]+\] Received sigquit from a child process\. It usually means the child failed\.$",
    "kill tree": r"^\[[^]]+\] kill_process_tree called: parent_pid=\d+, include_parent=True, pid=\d+$",
}


def _stand_in_verdict(argv: list[str]) -> tuple[int, str | None]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as e:
        lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("sglang serve: error: ")]
        return int(e.code or 0), (lines[-1][len("sglang serve: error: "):] if lines else None)
    return 0, None


def test_stand_in_argparse_equals_real(real_verdicts):
    real = real_verdicts(list(CASES.values()))
    wrong = [(name, rv["error"], _stand_in_verdict(argv)) for (name, argv), rv in zip(CASES.items(), real)
             if _stand_in_verdict(argv) != (rv["rc"], rv["error"])]
    assert wrong == []


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def _run_and_watch(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, list[str], set[str]]:
    """Run a server to its end; the log lines and every child command line form seen meanwhile."""
    forms: set[str] = set()
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                          start_new_session=True) as p:
        deadline = time.monotonic() + timeout
        while p.poll() is None and time.monotonic() < deadline:
            for c in _children(p.pid):
                cl = _cmdline(c)
                if not cl:
                    continue
                if cl[0].startswith("sglang::"):
                    forms.add(cl[0] + ("" if set(cl[1:]) <= {""} else " +args"))
                elif "--multiprocessing-fork" in cl:
                    forms.add("spawn child")
                elif any("multiprocessing.resource_tracker" in a for a in cl):
                    forms.add("resource tracker")
            time.sleep(0.1)
        if p.poll() is None:
            os.killpg(p.pid, 9)
        out = p.communicate(timeout=30)[0].decode(errors="replace")
    return p.returncode, out.splitlines(), forms


@pytest.mark.slow
def test_stand_in_failing_start_looks_like_real(sglang_python, tmp_path):
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY))
    real_rc, real_lines, real_forms = _run_and_watch(
        [str(sglang_python), "-m", "sglang.launch_server", "--model-path", str(model), *CPU], offline_env(), 300)
    env = dict(os.environ, PYTHONPATH=str(REPO), MTPCONSOLE_SIM_SPEED="50", MTPCONSOLE_SIM_RETITLE_S="1")
    sim_rc, sim_lines, sim_forms = _run_and_watch(
        [sys.executable, "-m", "console.sim.sglang", "--model-path", str(model), *CPU,
         "--mem-fraction-static", "0.001"], env, 60)
    missing = {who: [k for k, rx in SHAPES.items() if not any(re.search(rx, ln) for ln in lines)]
               for who, lines in (("real", real_lines), ("stand-in", sim_lines))}
    assert missing == {"real": [], "stand-in": []}, (missing, real_lines[-20:])
    assert real_rc == sim_rc == -9  # the launcher kills its own tree, itself included
    expected = {"sglang::scheduler", "sglang::detokenizer", "spawn child", "resource tracker"}
    assert expected <= real_forms, real_forms
    assert expected <= sim_forms, sim_forms
