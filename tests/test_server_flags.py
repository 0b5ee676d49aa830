"""One split of a server command line into launcher and flags (console.core.flags.launcher), for every reader:
the advisor, the report's planner check, ``mtpconsole check`` and the flag resolver behind the views."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.core.flags import split_launch_command
from console.core.flags.argv import resolve_cmdline
from console.core.sessions import flag_value, server_port
from console.ops.advice_host import argv_model_path

REPO = Path(__file__).resolve().parents[1]
HELP_0523 = REPO / "console" / "data" / "sglang-0.5.23-launch-server-help.txt"

CASES = [
    # python -m sglang.launch_server
    (["python", "-m", "sglang.launch_server", "--model-path", "/m", "--port", "30001"],
     ["python", "-m", "sglang.launch_server"], ["--model-path", "/m", "--port", "30001"]),
    # sglang serve, by path
    (["/venv/bin/sglang", "serve", "--model-path", "/m"], ["/venv/bin/sglang", "serve"], ["--model-path", "/m"]),
    # python3 -m with environment wrappers and interpreter options in front
    (["env", "-u", "PYTHONPATH", "CUDA_VISIBLE_DEVICES=0,1", "HF_HOME=/h", "python3", "-m", "sglang.launch_server",
      "--tp", "2"],
     ["env", "-u", "PYTHONPATH", "CUDA_VISIBLE_DEVICES=0,1", "HF_HOME=/h", "python3", "-m", "sglang.launch_server"],
     ["--tp", "2"]),
    (["CUDA_VISIBLE_DEVICES=3", "nohup", "/usr/bin/python3.11", "-u", "-X", "dev", "-m", "sglang.launch_server",
      "--port", "1"],
     ["CUDA_VISIBLE_DEVICES=3", "nohup", "/usr/bin/python3.11", "-u", "-X", "dev", "-m", "sglang.launch_server"],
     ["--port", "1"]),
    # the simulator, as the demo and the tests start it
    ([sys.executable, "-m", "console.sim.sglang", "--port", "2"], [sys.executable, "-m", "console.sim.sglang"],
     ["--port", "2"]),
    # a script run by the interpreter
    (["python3", "run_server.py", "--port", "3"], ["python3", "run_server.py"], ["--port", "3"]),
    # vllm serve: the model positional belongs to the command
    (["vllm", "serve", "Qwen/Qwen3-8B", "--port", "8000", "--gpu-memory-utilization", "0.9"],
     ["vllm", "serve", "Qwen/Qwen3-8B"], ["--port", "8000", "--gpu-memory-utilization", "0.9"]),
    (["vllm", "serve", "--model", "Qwen/Qwen3-8B"], ["vllm", "serve"], ["--model", "Qwen/Qwen3-8B"]),
    # flags only (a pasted flag set)
    (["--port", "1", "--model-path", "/m"], [], ["--port", "1", "--model-path", "/m"]),
    # unrecognised launchers: no launcher and no flags, never the program's own arguments read as flags
    (["./run.sh", "--port", "1"], [], []),
    (["torchrun", "--nproc-per-node", "8", "serve.py", "--port", "1"], [], []),
    (["python3", "-c", "import sglang", "--port", "1"], [], []),
    (["sglang"], [], []),
    (["python3"], [], []),
    (["python3", "-m"], [], []),
    # empty
    ([], [], []),
]


@pytest.mark.parametrize("argv,launcher,flags", CASES, ids=lambda x: " ".join(x)[:40] if isinstance(x, list) else x)
def test_split_launch_command(argv, launcher, flags):
    got = split_launch_command(argv)
    assert (got.launcher, got.flags) == (launcher, flags)
    assert got == (launcher, flags)  # still a (launcher, flags) pair
    if got.launcher:
        assert got.launcher + got.flags == argv  # nothing lost, nothing reordered


def test_every_reader_uses_the_same_split():
    """The advisor's model path and the views' flag values read the same flags from one command line."""
    wrapped = ["CUDA_VISIBLE_DEVICES=0", "python3", "-m", "sglang.launch_server", "--model-path", "/models/m",
               "--port", "30007"]
    assert argv_model_path(wrapped) == "/models/m"
    assert flag_value(wrapped, "--port") == "30007" and server_port(wrapped) == 30007
    unknown = ["./run.sh", "--model-path", "/models/m", "--port", "30007"]
    assert argv_model_path(unknown) is None and flag_value(unknown, "--port") is None
    assert list(resolve_cmdline(unknown).pairs()) == []  # none of the program's own arguments read as flags
    vllm = ["vllm", "serve", "/models/v", "--port", "8001"]
    assert server_port(vllm) == 8001


def test_one_definition_of_the_split():
    """No other function in console/ splits a launcher off a server command line."""
    names = {"split_launch_command", "split_launcher", "server_flags"}
    found = []
    for path in sorted((REPO / "console").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
                found.append(f"{path.relative_to(REPO)}:{node.name}")
    assert found == ["console/core/flags/launcher.py:split_launch_command"]


def test_check_refuses_an_unrecognised_command_line(tmp_path):
    """``mtpconsole check -- ./run.sh --port 1`` says it cannot split that line instead of checking nothing."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               MTPCONSOLE_AUDIT_LOG=str(tmp_path / "audit.jsonl"), PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "console", "check", "--help-file", str(HELP_0523), "--",
                        "HF_TOKEN=hf_secret", "./run.sh", "--port", "1"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "not a server command line" in r.stderr and "hf_secret" not in r.stderr + r.stdout
