"""Contract: the console reads flags exactly as the real sglang 0.5.23 parser does (marker real_sglang)."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from console.core.flags import check_all, parse_help, validate
from console.core.flags.argv import resolve_argv
from console.core.flags.check import argparse_error
from console.core.flags.sources import bundled_schema
from console.ops.flag_learning import learn_schema
from tests.contract.conftest import offline_env
from tests.contract.flag_cases import CASES

pytestmark = pytest.mark.real_sglang


class LocalRun:
    """The agent's ``run`` op, done here with subprocess (argv as data, no shell)."""

    name = "local"

    async def request(self, op: str, args: dict, **kw) -> dict:
        assert op == "run"
        r = await asyncio.to_thread(subprocess.run, args["argv"], capture_output=True, text=True,
                                    timeout=args["timeout"], env=offline_env())
        return {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}


@pytest.fixture(scope="module")
def learned(sglang_python, tmp_path_factory):
    cmd = [str(sglang_python), "-m", "sglang.launch_server"]
    return asyncio.run(learn_schema(LocalRun(), cmd, tmp_path_factory.mktemp("flags")))


@pytest.fixture(scope="module")
def real_help(sglang_python) -> str:
    r = subprocess.run([str(sglang_python), "-m", "sglang.launch_server", "--help"], capture_output=True,
                       text=True, timeout=300, env=offline_env())
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_learned_schema_is_the_real_parser(learned, real_verdicts, sglang_python):
    """Every option string of the real parser, hidden ones included, in its order, with its actions."""
    dump = subprocess.run([str(sglang_python), "-c", "import argparse\nfrom sglang.srt.server_args import ServerArgs\n"
                           "p = argparse.ArgumentParser(prog='sglang serve'); ServerArgs.add_cli_args(p)\n"
                           "print('\\n'.join(s for a in p._actions for s in a.option_strings))\n"
                           "print('HIDDEN ' + ' '.join(a.option_strings[0] for a in p._actions "
                           "if a.help == argparse.SUPPRESS))"],
                          capture_output=True, text=True, timeout=300, env=offline_env())
    lines = dump.stdout.splitlines()
    real = [ln for ln in lines if not ln.startswith("HIDDEN ")]
    hidden = lines[-1].split()[1:]
    assert learned.option_strings() == real
    assert [f.name for f in learned.flags if f.hidden] == hidden == ["--forward-pass-metrics-worker-id",
                                                                     "--forward-pass-metrics-ipc-name"]
    assert learned.prog == "sglang serve" and learned.version == "0.5.23"
    # the bundled fallback is the same parser
    assert bundled_schema().option_strings() == real


def test_help_learning_sees_every_visible_option(real_help, learned):
    helped = parse_help(real_help)
    visible = [s for f in learned.flags if not f.hidden for s in f.option_strings]
    assert sorted(helped.option_strings()) == sorted(visible)


@pytest.mark.parametrize("source", ["learned", "bundled"])
def test_check_verdicts_equal_real_argparse(source, learned, real_verdicts):
    schema = learned if source == "learned" else bundled_schema()
    assert len(CASES) >= 40
    real = real_verdicts(list(CASES.values()))
    wrong = []
    for (name, argv), rv in zip(CASES.items(), real):
        res = resolve_argv(argv, schema)
        errors = [p for p in validate(argv, schema) if p.severity == "error"]
        line = argparse_error(argv, schema)
        expected = None if rv["rc"] == 0 else f"sglang serve: error: {rv['error']}"
        if res.error != rv["error"] or bool(errors) != (rv["rc"] != 0) or line != expected:
            wrong.append((name, rv["error"], res.error, [p.message for p in errors]))
        elif rv["rc"] == 0 and name != "deprecated const with choice":
            for dest, value in rv["values"].items():
                if repr(res.values.get(dest)) != value:
                    wrong.append((name, dest, value, repr(res.values.get(dest))))
    assert wrong == []


def test_hidden_flag_accepted_and_unknown_speculative_algorithm_reported(learned):
    argv = ["--model-path", "/m", "--forward-pass-metrics-worker-id", "w1"]
    assert [p for p in check_all(argv, learned) if p.severity == "error"] == []
    probs = check_all(["--model-path", "/m", "--speculative-algorithm", "FOO"], learned)
    assert any(p.severity == "error" and "Unknown speculative algorithm name: FOO" in p.message for p in probs)
    ok = check_all(["--model-path", "/m", "--speculative-algorithm", "eagle3", "--max-running-requests", "8"], learned)
    assert [p for p in ok if p.severity == "error"] == []


def test_real_server_raises_what_check_reports(sglang_python, tmp_path):
    """The semantic error check reports is the one the real server stops with."""
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama", '
                                       '"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, '
                                       '"num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256, '
                                       '"max_position_embeddings": 512, "torch_dtype": "float32"}')
    r = subprocess.run([str(sglang_python), "-m", "sglang.launch_server", "--model-path", str(model),
                        "--speculative-algorithm", "FOO", "--device", "cpu", "--skip-tokenizer-init",
                        "--load-format", "dummy", "--max-total-tokens", "256"],
                       capture_output=True, text=True, timeout=300, env=offline_env())
    assert r.returncode != 0
    assert "ValueError: Unknown speculative algorithm name: FOO" in r.stderr + r.stdout
