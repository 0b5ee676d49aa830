"""The one masker (console/host/hostsecrets.py, shipped to hosts and used by console/core/redact.py) on
real-looking lines: SGLang's settings dump in both forms, argv as JSON, tokens; no over-masking."""

from __future__ import annotations

import json

import pytest

from console.core.redact import redact_argv, redact_obj, redact_text
from console.host.hostsecrets import SECRET_FLAGS, is_secret_flag, mask_argv, mask_text

HF = "hf_" + "QzTkVbNwLpRs" + "XyMaGhJdEcUf" + "oiWvBnKt39"  # the shape of a real token: 34 mixed-case chars
KEY = "sglang-demo-" + "5f3c2a9e"


def test_secret_flags_cover_the_bundled_schema():
    """Every flag of SGLang 0.5.23 whose value is a secret is in the one list."""
    from pathlib import Path

    schema = json.loads((Path(__file__).resolve().parents[1] / "console" / "data"
                         / "sglang-0.5.23-flags.json").read_text())
    secret_words = ("api-key", "password", "hf-token", "secret")
    for flag in schema:
        names = [flag["flag"], *(flag.get("aliases") or [])]
        for name in names:
            if any(w in name for w in secret_words):
                assert name in SECRET_FLAGS, name
    for name in ("--api-key", "--admin-api-key", "--hf-token", "--token", "--ssl-keyfile-password"):
        assert name in SECRET_FLAGS


DICT_DUMP = ("[2026-01-12 09:14:03] server_args={'model_path': 'meta-llama/Llama-3.1-8B-Instruct', "
             "'tokenizer_path': 'meta-llama/Llama-3.1-8B-Instruct', 'host': '127.0.0.1', 'port': 30000, "
             f"'api_key': '{KEY}', 'admin_api_key': 'adm-{KEY}', 'hf_token': '{HF}', "
             "'ssl_keyfile': None, 'ssl_keyfile_password': 'pem-pass', 'served_model_name': 'llama', "
             "'hf_config': None, 'tp_size': 2}")
REPR_DUMP = ("[2025-06-02 11:20:41] server_args=ServerArgs(model_path='/models/qwen', host='0.0.0.0', "
             f"port=30000, api_key='{KEY}', admin_api_key=None, hf_token=\"{HF}\", tp_size=1)")


@pytest.mark.parametrize("line", [DICT_DUMP, REPR_DUMP])
def test_settings_dump_is_masked_in_both_forms(line):
    out = redact_text(line)
    assert KEY not in out and HF not in out and "pem-pass" not in out
    assert "'port': 30000" in out or "port=30000" in out
    assert "meta-llama/Llama-3.1-8B-Instruct" in out or "/models/qwen" in out
    if line is DICT_DUMP:
        assert "'api_key': '***'" in out and "'hf_config': None" in out and "'ssl_keyfile': None" in out


def test_argv_dumped_as_json_is_masked():
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--api-key", KEY,
            f"--hf-token={HF}", "--ssl-keyfile", "/etc/k.pem", "--ssl-keyfile-password", "pem-pass"]
    for text in (json.dumps(argv), json.dumps({"argv": argv}), repr(argv)):
        out = mask_text(text)
        assert KEY not in out and HF not in out and "pem-pass" not in out, out
        assert "/etc/k.pem" in out and "/m" in out
    out = mask_text(json.dumps(argv))
    assert '"--api-key", "***"' in out and '"--hf-token=***"' in out
    assert json.loads(out)[6] == "***"  # still valid JSON


def test_argv_and_audit_objects():
    argv = ["sglang", "serve", "--api-k", KEY, "--admin-api-key=" + KEY, "--token", "t0k", "--tokenizer-path", "/t"]
    out = mask_argv(argv)
    assert out == ["sglang", "serve", "--api-k", "***", "--admin-api-key=***", "--token", "***",
                   "--tokenizer-path", "/t"]
    assert redact_argv(argv) == out
    obj = redact_obj({"result": {"argv": argv, "log": DICT_DUMP}, "env": {"HF_TOKEN": HF}})
    assert KEY not in json.dumps(obj) and HF not in json.dumps(obj)
    assert is_secret_flag("--api-key=x") and not is_secret_flag("--ssl-keyfile") and not is_secret_flag("--port")


@pytest.mark.parametrize("line", [
    'File "/usr/lib/python3.10/site-packages/sglang/srt/hf_transformers_utils.py", line 88, in get_config',
    "    hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)",
    "AttributeError: 'NoneType' object has no attribute 'hf_text_config'",
    "[2026-01-12 09:14:05] Init parallel begin. hf_overrides={} max_total_tokens=4096",
    "task-scheduler started; disk-cache enabled",
    "cache key sha256=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
])
def test_identifiers_are_not_masked(line):
    assert redact_text(line) == line


@pytest.mark.parametrize("text,gone", [
    (f"Using token {HF} from the environment", HF),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJIUzI1NiJ9"),
    ("OPENAI_API_KEY=sk-proj-AbCdEf0123456789XyZ", "AbCdEf0123456789XyZ"),
    (f"launch_server.py --api-key {KEY} --port 30000", KEY),
    (f"token='{KEY}'", KEY),
])
def test_tokens_are_masked(text, gone):
    assert gone not in redact_text(text)
