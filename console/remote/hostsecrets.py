"""The one list of secret flags and the one set of token patterns, with the maskers built on them.

Stdlib only, Python >= 3.8. Shipped to the host (the supervisor masks argv in its own log with it)
and imported by the console (``console/redact.py``, the flag checker), so every masker agrees.

What is masked:

- the value of a secret flag in argv (``--api-key V``, ``--api-key=V``, an unambiguous abbreviation
  such as ``--api-k V``), and the same in free text and in argv dumped as JSON or a Python list
  (``"--api-key", "V"``);
- SGLang's settings dump, both forms: ``server_args=ServerArgs(api_key='V', ...)`` and
  ``server_args={... 'api_key': 'V', 'hf_token': 'V' ...}`` (and JSON's ``"api_key": "V"``);
- token-shaped strings anywhere: Hugging Face tokens (``hf_`` + 30 or more letters and digits of
  mixed case, so identifiers such as ``hf_config`` or ``hf_transformers`` stay), OpenAI-style
  ``sk-...`` keys, ``Bearer ...`` credentials.
"""

import re

SECRET_FLAGS = ("--api-key", "--admin-api-key", "--hf-token", "--token", "--ssl-keyfile-password")
"""Flags whose value is a secret (SGLang 0.5.23's three, plus the Hugging Face token flags of other
servers and tools): never on a log line, in an audit record or on screen."""

NOT_SECRET_FLAGS = ("--ssl-keyfile", "--tokenizer-path", "--tokenizer-mode", "--tokenizer-backend")
"""Real flags that are prefixes of, or share a prefix with, a secret flag: their values are shown."""

SECRET_KEYS = tuple(f[2:].replace("-", "_") for f in SECRET_FLAGS)
"""The same secrets as settings keys / keyword arguments (``api_key``, ``hf_token``...)."""

MASK = "***"

_FLAG_ALT = "|".join(re.escape(f) for f in sorted(SECRET_FLAGS, key=len, reverse=True))
_KEY_ALT = "|".join(re.escape(k) for k in sorted(SECRET_KEYS, key=len, reverse=True))

TOKEN_PATTERNS = (
    # Hugging Face tokens: hf_ + 30+ alphanumerics with both cases (hf_config, hf_transformers stay)
    (re.compile(r"\bhf_(?=[A-Za-z0-9]*[A-Z])(?=[A-Za-z0-9]*[a-z])[A-Za-z0-9]{30,}"), "hf_" + MASK),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "sk-" + MASK),
    (re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{6,}"), r"\1" + MASK),
)
"""Token-shaped secrets, wherever they appear."""

FLAG_PATTERNS = (
    # argv dumped as JSON or a Python list: "--api-key", "V"  /  '--api-key', 'V'
    (re.compile(r"""(["'])(%s)\1(\s*,\s*)(["'])(?:\\.|(?!\4).)*\4""" % _FLAG_ALT), r"\1\2\1\3\4" + MASK + r"\4"),
    # inline forms in text or a quoted argv element: --api-key=V, --api-key V
    (re.compile(r"""(?<![\w-])(%s)(=|\s+)(?!-)[^\s"',)\]}]+""" % _FLAG_ALT), r"\1\2" + MASK),
    # settings dumps: api_key='V' (ServerArgs repr), 'api_key': 'V' (dict), "api_key": "V" (JSON)
    (re.compile(r"""(?<![\w-])(%s)=(["'])(?:\\.|(?!\2).)*\2""" % _KEY_ALT), r"\1=\2" + MASK + r"\2"),
    (re.compile(r"""(["'])(%s)\1(\s*:\s*)(["'])(?:\\.|(?!\4).)*\4""" % _KEY_ALT), r"\1\2\1\3\4" + MASK + r"\4"),
)
"""Values attached to a secret flag or settings key in free text."""

_MAYBE = re.compile(r"hf_|sk-|(?i:bearer)|api.key|token|keyfile.password")
"""One cheap scan decides whether any pattern can match (most log lines carry no secret)."""


def is_secret_flag(arg):
    """True when ``arg`` (an option, ``=value`` stripped) names a secret flag or abbreviates one."""
    name = arg.split("=", 1)[0]
    if name in SECRET_FLAGS:
        return True
    if not name.startswith("--") or len(name) < 6 or name in NOT_SECRET_FLAGS:
        return False
    return any(f.startswith(name) for f in SECRET_FLAGS) and not any(
        f.startswith(name) for f in NOT_SECRET_FLAGS)


def mask_text(text):
    """``text`` with every secret value and token-shaped string replaced by ``***``."""
    if not _MAYBE.search(text):
        return text
    for rx, rep in FLAG_PATTERNS:
        text = rx.sub(rep, text)
    for rx, rep in TOKEN_PATTERNS:
        text = rx.sub(rep, text)
    return text


def mask_argv(argv):
    """argv with the value of each secret flag (``--api-key V`` or ``--api-key=V``) replaced by ``***``
    and tokens masked in every other argument."""
    out, hide = [], False
    for a in argv:
        if hide:
            out.append(MASK)
            hide = False
            continue
        if a.startswith("--") and is_secret_flag(a):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=" + MASK)
            else:
                out.append(a)
                hide = True
            continue
        out.append(mask_text(a))
    return out
