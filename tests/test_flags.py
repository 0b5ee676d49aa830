"""Flag intelligence: --help parser, validator, renames, pre-launch notes, resolve/diff, learning."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pytest

from console.core.flags import (
    KEY_FLAGS,
    RENAMES,
    FlagSchema,
    HelpParseError,
    check_all,
    diff_flags,
    find_rename,
    key_flags,
    parse_help,
    resolve,
    search,
    security_notes,
    speculative_notes,
    split_launch_command,
    validate,
)
from console.core.flags.sources import PROBE_SOURCE, bundled_schema
from console.errors import HostError
from console.ops.flag_learning import cache_path, learn_schema

DATA = Path(__file__).resolve().parents[1] / "console" / "data"
HELP_0523 = DATA / "sglang-0.5.23-launch-server-help.txt"
FLAGS_0523 = DATA / "sglang-0.5.23-flags.json"
NAMES_BY_VERSION = Path(__file__).resolve().parent / "data" / "sglang" / "sglang-flag-names-by-version.json"
OLD_HELP = Path(__file__).resolve().parent / "data" / "help" / "sglang-old-style-help.txt"

INCIDENT = ["--model-path", "/models/Qwen3.6-27B", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.90", "--enable-hierarchical-cache", "--hicache-size", "200", "--max-running-requests", "512", "--cuda-graph-max-bs", "512", "--mamba-scheduler-strategy", "extra_buffer"]


@pytest.fixture(scope="module")
def schema() -> FlagSchema:
    return parse_help(HELP_0523.read_text(encoding="utf-8"), version="0.5.23")


@pytest.fixture(scope="module")
def old_schema() -> FlagSchema:
    return parse_help(OLD_HELP.read_text(encoding="utf-8"), version="0.5.9")


@pytest.fixture(scope="module")
def json_flags() -> list[dict]:
    return json.loads(FLAGS_0523.read_text(encoding="utf-8"))


def kinds(problems) -> list[tuple[str, str | None, str]]:
    return [(p.kind, p.flag, p.severity) for p in problems]


# ------------------------------------------------------------------ parser, real 0.5.23 help


def test_real_help_every_visible_flag_matches_the_data(schema, json_flags):
    # 531 flags in the data; two are help=SUPPRESS (empty help) and cannot appear in --help.
    hidden = [x["flag"] for x in json_flags if not x["help"]]
    assert hidden == ["--forward-pass-metrics-worker-id", "--forward-pass-metrics-ipc-name"]
    assert len(json_flags) == 531
    visible = [x for x in json_flags if x["help"]]
    # every visible flag, in help order, plus argparse's own -h/--help
    assert [f.name for f in schema.flags] == ["-h"] + [x["flag"] for x in visible]
    assert len(schema.flags) == 530
    assert schema.prog == "sglang serve"
    for x in visible:
        f = schema.get(x["flag"])
        assert f is not None, x["flag"]
        assert f.aliases == (x["aliases"] or []), x["flag"]
        expected_choices = None if x["choices"] is None else sorted(str(c) for c in x["choices"])
        assert (None if f.choices is None else sorted(f.choices)) == expected_choices, x["flag"]
        assert f.required == x["required"], x["flag"]
        assert f.deprecated == x["deprecated"], x["flag"]
        assert f.nargs == x["nargs"], x["flag"]
        if x["flag"] != "--monokernel-backend":  # help shows '{amd}': argparse formats a value for it
            assert f.takes_value == (not x["type"].startswith(("bool", "flag"))), x["flag"]
        # argparse breaks over-long words without a hyphen; compare without whitespace
        assert "".join(x["help_full"].split()).startswith("".join(f.help.split())[:60].rstrip(".")), x["flag"]
        for alias in x["aliases"] or []:
            assert schema.get(alias) is f


def test_real_help_type_guesses_are_never_wrong(schema, json_flags):
    by_name = {x["flag"]: x for x in json_flags}
    guessed = 0
    for f in schema.flags[1:]:
        t = by_name[f.name]["type"]
        if f.type == "int":
            assert t.startswith("int") or (f.choices and t == "int"), (f.name, t)
            guessed += 1
        elif f.type == "float":
            assert t == "float", (f.name, t)
            guessed += 1
        elif f.type == "bool":
            assert t.startswith("bool"), (f.name, t)
    assert guessed >= 20
    assert schema.get("--mem-fraction-static").type == "float"
    assert schema.get("--speculative-num-steps").type == "int"
    assert schema.get("--context-length").type is None  # human_readable_int: "32k" is fine


def test_real_help_details(schema):
    tf32 = schema.get("--enable-tf32-matmul")
    assert tf32.negatable and tf32.aliases == ["--no-enable-tf32-matmul"] and not tf32.takes_value
    numa = schema.get("--numa-node")
    assert numa.nargs == "+" and numa.metavar == "NUMA_NODE"
    assert schema.get("--uvicorn-access-log-exclude-prefixes").nargs == "*"
    assert schema.get("--model-checksum").nargs == "?"
    assert schema.get("--model").name == "--model-path" and schema.get("--model-path").required
    # argparse broke "--cuda-graph-" / "backend-{decode,prefill}=disabled" across lines
    assert "--cuda-graph-backend-{decode,prefill}=disabled" in schema.get("--disable-cuda-graph").help
    assert schema.get("--mamba-radix-cache-strategy").choices == ["auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"]
    assert schema.get("--speculative-algorithm").choices is None
    assert schema.get("--host").group == "options"
    assert "--mamba-scheduler-strategy" not in schema


def test_schema_round_trips_through_json(schema):
    again = FlagSchema.model_validate_json(schema.model_dump_json())
    assert again == schema and again.get("--tensor-parallel-size").name == "--tp-size"


# ------------------------------------------------------------------ parser, older style


def test_old_style_help(old_schema):
    s = old_schema
    assert s.prog == "launch_server.py"
    assert len(s.flags) == 25
    assert s.get("--mamba-scheduler-strategy").choices == ["auto", "no_buffer", "extra_buffer"]
    assert s.get("--mamba-scheduler-strategy").default == "auto"
    assert s.get("--model-path").required and s.get("--model-path").default is None
    assert s.get("--port").default == "30000" and s.get("--port").type == "int"
    assert s.get("--mamba-track-interval").default == "256"
    assert s.get("--max-running-requests").default is None  # "(default:\n None)" wrapped
    assert s.get("--log-level").default == "info" and s.get("--log-level").type is None
    assert s.get("--json-model-override-args").type == "json"
    assert s.get("--lora-paths").nargs == "*"  # Python 3.8 style [X [X ...]]
    assert s.get("--cuda-graph-bs").nargs == "+"
    assert s.get("--enable-ep-moe").deprecated  # "DEPRECATED: use --ep-size"
    assert s.get("--enable-metrics").negatable and s.get("--enable-metrics").default == "False"
    assert s.get("--tp-size").group == "Memory and scheduling"
    assert s.get("--host").group == "optional arguments"
    assert not s.get("--mem-fraction-static").help.endswith("(default: None)")


def test_old_style_validation(old_schema):
    # the incident's flags were right for this older server
    assert [p for p in validate(INCIDENT, old_schema) if p.severity == "error"] == []
    probs = validate(["--model-path", "m", "--mamba-radix-cache-strategy", "extra_buffer"], old_schema)
    assert kinds(probs) == [("unknown", "--mamba-radix-cache-strategy", "error")]
    probs = validate(["--model-path", "m", "--enable-ep-moe"], old_schema)
    assert kinds(probs) == [("deprecated", "--enable-ep-moe", "warning")]
    assert probs[0].suggestion == "--ep-size"
    probs = validate(["--model-path", "m", "--speculative-algorithm", "MEDUSA"], old_schema)
    assert kinds(probs) == [("bad_choice", "--speculative-algorithm", "error")]


def test_python_313_style_invocation_and_short_options():
    text = ("usage: p [-h] -o OUT [--x | --no-x] [-v]\n\noptions:\n  -h, --help         show this help\n"
            "  -o, --output OUT   where\n  --x, --no-x        toggle\n  -v                 verbose\n")
    s = parse_help(text)
    out = s.get("--output")
    assert out.name == "-o" and out.aliases == ["--output"] and out.metavar == "OUT" and out.required
    assert s.get("--x").negatable and not s.get("-v").takes_value
    assert resolve(["-o", "f", "--no-x", "-v"], s) == {"-o": "f", "--x": False, "-v": True}
    assert kinds(validate(["-o"], s)) == [("missing_value", "-o", "error")]
    assert kinds(validate(["-v"], s)) == [("missing_required", "-o", "error")]


# ------------------------------------------------------------------ parser, garbage


GARBAGE = {
    "empty": "",
    "prose": "hello world\n",
    "binary": "\x00\x01\x02binary\xff",
    "bad-utf8": b"\xff\xfe\x80 usage? no".decode("utf-8", errors="replace"),
    "2MB-of-x": "x" * 2_000_000,
    "usage-only": "usage: prog [-h]\n\nnothing else here\n",
    "traceback": "Traceback (most recent call last):\nModuleNotFoundError: No module named 'sglang'\n",
}


@pytest.mark.parametrize("text", list(GARBAGE.values()), ids=list(GARBAGE))
def test_garbage_gives_a_clear_error(text):
    t0 = time.perf_counter()
    with pytest.raises(HelpParseError) as e:
        parse_help(text)
    assert str(e.value)
    assert time.perf_counter() - t0 < 2


def test_huge_inputs_are_refused_or_skipped_quickly():
    with pytest.raises(HelpParseError, match="refusing"):
        parse_help("usage: p " + "[--x X] " * 200_000)
    with pytest.raises(HelpParseError, match="refusing"):
        parse_help("a" * (16 * 1024 * 1024 + 1))
    text = "usage: p [-h]\n\noptions:\n  -h, --help  help\n  --" + "y" * 300_000 + "\n  --ok OK  fine\n"
    t0 = time.perf_counter()
    s = parse_help(text)
    assert s.names() == ["-h", "--ok"] and time.perf_counter() - t0 < 2


# ------------------------------------------------------------------ validation


def test_incident_flags(schema):
    probs = validate(INCIDENT, schema)
    errors = [p for p in probs if p.severity == "error"]
    assert kinds(errors) == [("ambiguous", "--cuda-graph-max-bs", "error"),
                             ("renamed", "--mamba-scheduler-strategy", "error")]
    amb, ren = errors
    assert amb.message.startswith(
        "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")
    assert amb.candidates == ["--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"]
    assert amb.suggestion == "--cuda-graph-max-bs-decode"
    assert ren.suggestion == "--mamba-radix-cache-strategy" and "sglang 0.5.23" in ren.message
    # the fixed flag set is clean
    fixed = [a.replace("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode")
             .replace("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy") for a in INCIDENT]
    assert validate(fixed, schema) == []


def test_renamed_value_is_checked_against_the_new_flag(schema):
    probs = validate(["--model", "m", "--mamba-scheduler-strategy", "bogus"], schema)
    assert kinds(probs) == [("renamed", "--mamba-scheduler-strategy", "error"),
                            ("bad_choice", "--mamba-radix-cache-strategy", "error")]
    probs = validate(["--model", "m", "--mamba-scheduler-strategy=extra_buffer", "--port", "1"], schema)
    assert kinds(probs) == [("renamed", "--mamba-scheduler-strategy", "error")]
    probs = validate(["--model", "m", "--enable-flashinfer-cutlass-moe", "--port", "1"], schema)
    assert kinds(probs) == [("renamed", "--enable-flashinfer-cutlass-moe", "error")]
    assert probs[0].suggestion == "--moe-runner-backend flashinfer_cutlass"
    assert resolve(["--enable-deepep-moe"], schema) == {"--enable-deepep-moe": "deepep"}


def test_each_problem_kind(schema):
    base = ["--model-path", "m"]
    cases = {
        ("unknown", "--no-such-flag", "error"): ["--no-such-flag", "1"],
        ("ambiguous", "--enable-hi", "error"): ["--enable-hi"],
        ("ambiguous", "--mem-fraction-static", "warning"): ["--mem-frac", "0.8"],
        ("bad_choice", "--tokenizer-mode", "error"): ["--tokenizer-mode", "fast"],
        ("bad_type", "--port", "error"): ["--port", "http"],
        ("bad_type", "--mem-fraction-static", "error"): ["--mem-fraction-static=most"],
        ("missing_value", "--port", "error"): ["--port", "--skip-server-warmup"],
        ("missing_value", "--numa-node", "error"): ["--numa-node"],
        ("unexpected_value", "--skip-server-warmup", "error"): ["--skip-server-warmup=yes"],
        ("deprecated", "--disable-cuda-graph", "warning"): ["--disable-cuda-graph"],
        ("duplicate", "--port", "warning"): ["--port", "1", "--port", "2"],
        ("duplicate", "--enable-tf32-matmul", "warning"): ["--enable-tf32-matmul", "--no-enable-tf32-matmul"],
    }
    for expected, argv in cases.items():
        assert kinds(validate(base + argv, schema)) == [expected], argv
    assert kinds(validate(["--port", "1"], schema)) == [("missing_required", "--model-path", "error")]
    assert kinds(validate(["--config", "c.yaml"], schema)) == [("missing_required", "--model-path", "warning")]
    stray = validate(base + ["extra"], schema)
    assert kinds(stray) == [("unknown", None, "error")] and "extra" in stray[0].message
    unknown = validate(base + ["--mem-fraction-statc", "0.8"], schema)[0]
    assert unknown.suggestion == "--mem-fraction-static"
    dep = validate(base + ["--grpc-mode"], schema)[0]
    assert dep.suggestion == "--smg-grpc-mode"
    bad = validate(base + ["--tokenizer-mode", "slwo"], schema)[0]
    assert bad.suggestion == "slow" and bad.candidates == ["auto", "slow"]


def test_values_and_forms_argparse_accepts(schema):
    ok = [
        ["--model-path=m", "--port=30000", "--host", "127.0.0.1"],
        ["--model", "m", "--tp", "2"][:2] + ["--tensor-parallel-size", "2"],
        ["--model", "m", "--numa-node", "0", "1", "--port", "1"],
        ["--model", "m", "--uvicorn-access-log-exclude-prefixes"],
        ["--model", "m", "--model-checksum"],
        ["--model", "m", "--no-enable-tf32-matmul"],
        ["--model", "m", "--hicache-size", "0", "--mem-fraction-static", "0.85"],
        ["--model", "m", "--log-requests-level", "2"],
        ["-h"],
    ]
    for argv in ok:
        problems = [p for p in validate(argv, schema) if p.kind != "missing_required"]
        assert problems == [], argv


def _argparse_from_data(json_flags) -> argparse.ArgumentParser:
    """An independent oracle: a real argparse parser built from the flags JSON."""
    p = argparse.ArgumentParser(prog="sglang serve")

    def error(message):
        raise ValueError(message)

    p.error = error
    for x in json_flags:
        if not x["help"]:
            continue
        names = [x["flag"], *(x["aliases"] or [])]
        if x["type"].startswith("bool(BooleanOptionalAction"):
            p.add_argument(names[0], action=argparse.BooleanOptionalAction)
        elif x["type"].startswith(("bool", "flag")) and not x["choices"]:
            p.add_argument(*names, action="store_true", required=x["required"])
        else:
            choices = [str(c) for c in x["choices"]] if x["choices"] else None
            p.add_argument(*names, nargs=x["nargs"], choices=choices, required=x["required"])
    return p


@pytest.mark.parametrize("argv", [
    ["--model", "m", "--cuda-graph-max-bs", "512"],
    ["--model", "m", "--cuda-graph-max-bs=512"],
    ["--model", "m", "--cuda-graph", "1"],
    ["--model", "m", "--enable-hi"],
    ["--model", "m", "--spec", "EAGLE"],
    ["--model", "m", "--mem-frac", "0.8"],
    ["--model", "m", "--mamba-scheduler-strategy", "extra_buffer"],
    ["--model", "m", "--port", "1", "--dp", "2"],
    ["--model", "m", "--tokenizer-mode", "fast"],
    ["--model", "m", "--numa-node"],
    ["--model", "m", "stray"],
    ["--port", "1"],
    ["--model", "m", "--", "--port"],
    ["--model", "m", "--enable-metrics", "--enable-metrics"],
])
def test_errors_agree_with_real_argparse(schema, json_flags, argv):
    parser = _argparse_from_data(json_flags)
    try:
        parser.parse_args(argv)
        argparse_error = None
    except ValueError as e:
        argparse_error = str(e)
    errors = [p for p in validate(argv, schema) if p.severity == "error" and p.kind != "bad_type"]
    assert bool(errors) == bool(argparse_error), (argv, argparse_error, errors)
    if argparse_error and argparse_error.startswith("ambiguous option"):
        assert errors[0].kind == "ambiguous" and errors[0].message.startswith(argparse_error)


# ------------------------------------------------------------------ renames


def test_rename_table_matches_the_per_version_names():
    data = json.loads(NAMES_BY_VERSION.read_text(encoding="utf-8"))["versions"]
    releases = list(data)
    names = {v: set(n) for v, n in data.items()}
    assert len(RENAMES) >= 8
    for r in RENAMES:
        since, gone = releases.index(r.new_since), releases.index(r.old_removed_in)
        assert r.new in names[r.new_since], r
        if since > 0:
            assert r.new not in names[releases[since - 1]] or r.value, r
        assert r.old not in names[r.old_removed_in], r
        assert r.old in names[releases[gone - 1]], r
        for v in releases[gone:]:
            assert r.old not in names[v], (r, v)
        assert since <= gone, r


def test_find_rename_follows_chains(schema, old_schema):
    assert find_rename("--nsa-prefill", schema).new == "--dsa-prefill-backend"
    assert find_rename("--nsa-prefill").new == "--dsa-prefill-backend"
    assert find_rename("--mamba-scheduler-strategy", schema).new == "--mamba-radix-cache-strategy"
    assert find_rename("--mamba-scheduler-strategy", old_schema) is None  # new name unknown there
    assert find_rename("--port", schema) is None


def test_old_name_still_accepted_is_a_warning():
    text = OLD_HELP.read_text(encoding="utf-8").replace(
        "  --mamba-track-interval MAMBA_TRACK_INTERVAL",
        "  --mamba-radix-cache-strategy {auto,no_buffer,extra_buffer}\n"
        "                        New name.\n  --mamba-track-interval MAMBA_TRACK_INTERVAL")
    both = parse_help(text, version="0.5.15")
    probs = validate(["--model-path", "m", "--mamba-scheduler-strategy", "extra_buffer"], both)
    assert kinds(probs) == [("renamed", "--mamba-scheduler-strategy", "warning")]


# ------------------------------------------------------------------ speculative + security notes


def notes(argv, schema):
    return [(p.kind, p.flag, p.severity) for p in speculative_notes(argv, schema)]


def test_speculative_rules(schema):
    spec = ["--model", "m", "--speculative-algorithm", "EAGLE"]
    probs = speculative_notes(spec, schema)
    assert kinds(probs) == [("speculative", "--max-running-requests", "warning")]
    assert "reset to 48" in probs[0].message
    with_mrr = spec + ["--max-running-requests", "8"]
    assert notes(with_mrr, schema) == []
    assert notes(with_mrr + ["--speculative-eagle-topk", "1"], schema) == [
        ("speculative", "--speculative-eagle-topk", "error")]
    assert notes(with_mrr + ["--speculative-num-draft-tokens", "4"], schema) == [
        ("speculative", "--speculative-num-draft-tokens", "error")]
    three = with_mrr + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]
    assert notes(three + ["--speculative-num-draft-tokens", "4"], schema) == []
    adj = speculative_notes(three + ["--speculative-num-draft-tokens", "8"], schema)
    assert kinds(adj) == [("speculative", "--speculative-num-draft-tokens", "warning")]
    assert "steps + 1 = 4" in adj[0].message
    # Mamba extra_buffer: track interval (default 256) must be >= draft tokens
    mamba = three + ["--mamba-radix-cache-strategy", "extra_buffer"]
    assert notes(mamba, schema) == []
    assert notes(mamba + ["--mamba-track-interval", "2"], schema) == [
        ("speculative", "--mamba-track-interval", "error")]
    assert notes(mamba + ["--mamba-track-interval", "4"], schema) == []
    # speculative numbers without an algorithm do nothing
    assert notes(["--speculative-num-steps", "3"], schema) == [("speculative", "--speculative-num-steps", "warning")]
    assert notes(["--model", "m"], schema) == []


def test_incident_speculative_notes_with_old_mamba_name(schema):
    argv = [a for a in INCIDENT] + ["--mamba-track-interval", "3"]
    assert ("speculative", "--mamba-track-interval", "error") in notes(argv, schema)


def test_security_warnings_never_show_the_secret(schema):
    token = "hf_" + "A1b2C3d4" * 4
    argv = ["--model", "m", "--host", "0.0.0.0", "--api-key", "s3cr3t-key", "--model-loader-extra-config",
            json.dumps({"token": token}), "--stray-" + token]
    probs = security_notes(argv, schema)
    assert kinds(probs) == [("security", "--host", "warning"), ("security", "--api-key", "warning"),
                            ("security", None, "warning")]
    assert "every network interface" in probs[0].message and "no authentication" not in probs[0].message
    assert all("env value" in p.message for p in probs[1:])
    everything = json.dumps([p.model_dump() for p in check_all(argv, schema)])
    assert "s3cr3t-key" not in everything and token not in everything
    open_api = security_notes(["--host", "0.0.0.0"], schema)
    assert "no authentication" in open_api[0].message
    assert security_notes(["--host", "127.0.0.1"], schema) == []


def test_check_all_orders_errors_first(schema):
    probs = check_all(INCIDENT + ["--host", "0.0.0.0"], schema)
    sev = [p.severity for p in probs]
    assert sev == sorted(sev, key=lambda s: s != "error") and "security" in {p.kind for p in probs}


# ------------------------------------------------------------------ resolve, diff, key flags, search


def test_resolve(schema):
    r = resolve(["--model", "m", "--enable-hicache", "--no-enable-tf32-matmul", "--numa-node", "0", "1",
                 "--mem-frac", "0.8", "--port=1", "--port", "2", "--unknown-x", "v", "--model-checksum"], schema)
    assert r == {"--model-path": "m", "--enable-hierarchical-cache": True, "--enable-tf32-matmul": False,
                 "--numa-node": ["0", "1"], "--mem-fraction-static": "0.8", "--port": "2", "--unknown-x": "v",
                 "--model-checksum": True}


def test_diff_flags(schema):
    old = INCIDENT
    new = ["--model", "/models/Qwen3.6-27B", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
           "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.80",
           "--enable-hicache", "--hicache-size", "200", "--max-running-requests", "48",
           "--cuda-graph-max-bs-decode", "48", "--mamba-radix-cache-strategy", "extra_buffer"]
    assert diff_flags(old, new, schema) == [
        ("--mem-fraction-static", "0.90", "0.80"),
        ("--max-running-requests", "512", "48"),
        ("--cuda-graph-max-bs", "512", None),
        ("--mamba-scheduler-strategy", "extra_buffer", None),
        ("--cuda-graph-max-bs-decode", None, "48"),
        ("--mamba-radix-cache-strategy", None, "extra_buffer"),
    ]
    assert diff_flags(["--model", "m"], ["--model-path", "m"], schema) == []


def test_key_flags_and_search(schema, old_schema):
    assert [f.name for f in key_flags(schema)] == KEY_FLAGS
    assert "--mamba-radix-cache-strategy" not in [f.name for f in key_flags(old_schema)]
    assert search(schema, "hicache-size")[0].name == "--hicache-size"
    assert search(schema, "--port")[0].name == "--port"
    assert search(schema, "enable-hicache")[0].name == "--enable-hierarchical-cache"
    assert search(schema, "mem fraction")[0].name == "--mem-fraction-static"
    assert all("speculative" in f.name or "speculative" in f.help.lower() for f in search(schema, "SPECULATIVE"))
    assert len(search(schema, "")) == len(schema.flags)
    assert search(schema, "zzzz-nothing") == []
    assert len(search(schema, "cuda", limit=3)) == 3


def test_split_launch_command():
    assert split_launch_command(["python3", "-m", "sglang.launch_server", "--port", "1"]) == (
        ["python3", "-m", "sglang.launch_server"], ["--port", "1"])
    assert split_launch_command(["/venv/bin/sglang", "serve", "--model", "m"]) == (
        ["/venv/bin/sglang", "serve"], ["--model", "m"])
    assert split_launch_command(["--port", "1"]) == ([], ["--port", "1"])


# ------------------------------------------------------------------ learning from a host


class FakeLink:
    """Stands in for a host link: answers `run` from a table, records every call."""

    def __init__(self, name="gpu1", version="0.5.23", help_text=None, help_on="stdout", rc=0, probe=None):
        self.name = name
        self.version = version
        self.help_text = HELP_0523.read_text(encoding="utf-8") if help_text is None else help_text
        self.help_on = help_on
        self.rc = rc
        self.probe = probe
        self.calls: list[tuple[str, dict]] = []

    async def request(self, op, args, **kw):
        self.calls.append((op, args))
        assert op == "run" and isinstance(args["argv"], list) and args["timeout"] > 0
        argv = args["argv"]
        if argv[1:3] == ["-c", "import importlib.metadata as m; print(m.version('sglang'))"]:
            if self.version is None:
                return {"rc": 1, "stdout": "", "stderr": "PackageNotFoundError: sglang"}
            return {"rc": 0, "stdout": self.version + "\n", "stderr": ""}
        if argv[1:3] == ["-c", PROBE_SOURCE]:
            if self.probe is None:
                return {"rc": 1, "stdout": "", "stderr": "ModuleNotFoundError: No module named 'sglang'"}
            return {"rc": 0, "stdout": self.probe, "stderr": ""}
        assert argv[-1] == "--help"
        if self.help_on == "stdout":
            return {"rc": self.rc, "stdout": self.help_text, "stderr": "UserWarning: noise\n"}
        return {"rc": self.rc, "stdout": "", "stderr": self.help_text}


CMD = ["/venv/bin/python3", "-m", "sglang.launch_server"]


async def test_learn_schema_runs_help_and_caches_per_version(tmp_path):
    link = FakeLink()
    s = await learn_schema(link, CMD, tmp_path)
    assert s.version == "0.5.23" and len(s.flags) == 530
    assert [c[1]["argv"] for c in link.calls] == [
        ["/venv/bin/python3", "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
        CMD + ["--help"], ["/venv/bin/python3", "-c", PROBE_SOURCE]]
    path = cache_path(tmp_path, "gpu1", CMD, "0.5.23")
    assert path.exists() and path.name.startswith("gpu1-")
    # same version: the cache answers, --help is not run again
    link2 = FakeLink()
    assert await learn_schema(link2, CMD, tmp_path) == s
    assert len(link2.calls) == 1
    # a new version: learned again, into its own file
    link3 = FakeLink(version="0.5.24", help_text=OLD_HELP.read_text(encoding="utf-8"))
    s3 = await learn_schema(link3, CMD, tmp_path)
    assert s3.version == "0.5.24" and "--mamba-scheduler-strategy" in s3 and len(link3.calls) == 3
    assert len(list(tmp_path.glob("gpu1-*.json"))) == 2


async def test_learn_schema_without_version_and_help_on_stderr(tmp_path):
    link = FakeLink(help_on="stderr")
    s = await learn_schema(link, ["sglang", "serve"], tmp_path)
    assert s.version is None and len(s.flags) == 530
    assert [c[1]["argv"] for c in link.calls] == [["sglang", "serve", "--help"]]
    assert list(tmp_path.iterdir()) == []  # nothing to key a cache on
    link = FakeLink(version=None)
    assert (await learn_schema(link, CMD, tmp_path)).version is None


async def test_learn_schema_corrupt_cache_is_relearned(tmp_path):
    path = cache_path(tmp_path, "gpu1", CMD, "0.5.23")
    path.write_text("{not json", encoding="utf-8")
    link = FakeLink()
    assert len((await learn_schema(link, CMD, tmp_path)).flags) == 530
    assert len(link.calls) == 3 and json.loads(path.read_text(encoding="utf-8"))["version"] == "0.5.23"


async def test_learn_schema_adds_hidden_flags_from_the_hosts_parser(tmp_path):
    """The host's own parser (the probe) completes --help: hidden flags, exact actions, registration order."""
    probe = (Path(__file__).resolve().parent / "data" / "sglang" / "sglang-0.5.23-parser-probe.txt").read_text(encoding="utf-8")
    s = await learn_schema(FakeLink(probe="noise\n" + probe), CMD, tmp_path)
    hidden = [f.name for f in s.flags if f.hidden]
    assert hidden == ["--forward-pass-metrics-worker-id", "--forward-pass-metrics-ipc-name"]
    assert len(s.flags) == 532 and s.get("--enable-tf32-matmul").action_kind == "boolean_optional"
    assert s.get("--model-path").help.startswith("The path of the model weights")  # help text kept
    assert validate(["--model", "m", "--forward-pass-metrics-worker-id", "w"], s) == []
    assert s.option_strings() == bundled_schema().option_strings()


async def test_learn_schema_failures_are_clear(tmp_path):
    link = FakeLink(version=None, help_text="/usr/bin/python3: No module named sglang\n", help_on="stderr", rc=1)
    with pytest.raises(HostError, match="No module named sglang"):
        await learn_schema(link, CMD, tmp_path)

    class Down:
        name = "gpu2"

        async def request(self, op, args, *, timeout=30.0, audit=True):
            raise ConnectionError("connection lost")

    with pytest.raises(HostError, match="gpu2: .*connection lost"):
        await learn_schema(Down(), CMD, tmp_path)

    seen = {}

    class Slow(FakeLink):
        async def request(self, op, args, *, timeout=30.0, audit=True):
            seen.setdefault("timeouts", []).append(timeout)
            return await super().request(op, args)

    await learn_schema(Slow(), CMD, tmp_path / "x")
    assert all(t > args_t for t, args_t in zip(seen["timeouts"], (60, 120)))


async def test_launch_preflight_uses_the_bundled_schema_for_0_5_23_and_reports_argparse_line(tmp_path, monkeypatch):
    from console.ops.flag_preflight import check_launch_flags

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    link = FakeLink()
    v = await check_launch_flags(link, CMD, ["--model", "m", "--cuda-graph-max-bs", "8"])
    assert not v.ok and v.checked
    assert v.error == ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
                       "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")
    assert [c[1]["argv"][-1] for c in link.calls] == ["import importlib.metadata as m; print(m.version('sglang'))"]
    ok = await check_launch_flags(link, CMD, ["--model", "m", "--forward-pass-metrics-worker-id", "w"])
    assert ok.ok and ok.checked  # a hidden flag the real parser accepts
    spec = await check_launch_flags(link, CMD, ["--model", "m", "--speculative-algorithm", "FOO"])
    assert not spec.ok and "Unknown speculative algorithm name: FOO" in (spec.error or "")
    down = await check_launch_flags(FakeLink(version=None, help_text="boom", rc=1), CMD, ["--model", "m"])
    assert down.ok and not down.checked and down.note.startswith("flags not checked:")


async def test_relaunch_with_bad_flags_stops_nothing(tmp_path, monkeypatch):
    """A relaunch whose new flags the server would reject is refused before the old server is killed."""
    from console.model import KillTarget, LaunchRequest
    from console.ops import lifecycle

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    class NoGpuLink(FakeLink):  # the memory plan is also asked (every refusal at once): no GPU info here
        sample: dict = {}

        def snapshot(self):
            from console.model import ConnectionInfo, HostSnapshot

            return HostSnapshot(name=self.name, connection=ConnectionInfo(state="connected"))

    link = NoGpuLink()  # answers only 'run': a kill would fail loudly
    req = LaunchRequest(host="gpu1", command=CMD, flags=["--model", "m", "--mamba-scheduler-strategy", "auto"])
    r = await lifecycle.relaunch(link, KillTarget(host="gpu1", session_id="s-old"), req)
    assert not r.ok and r.cause is None and r.error.endswith("nothing was stopped")  # refused: nothing ran
    assert r.refusals == [r.line]
    assert r.line == "sglang serve: error: unrecognized arguments: --mamba-scheduler-strategy auto"
    assert [c[0] for c in link.calls] == ["run"]  # the version check only
