"""The one list of secret flags and the one set of token patterns, with the maskers built on them.

Stdlib only, Python >= 3.8. Shipped to the host (the supervisor masks argv in its own log with it)
and imported by the console (``console/core/redact.py``, the flag checker), so every masker agrees.

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

NOT_SECRET_FLAGS = ("--ssl-keyfile", "--tokenizer-path", "--tokenizer-mode", "--tokenizer-backend",
                    "--hf-chat-template-name")
"""Real flags that are prefixes of, or share a prefix with, a secret flag: their values are shown."""

MIN_ABBREV = 4
"""The shortest option (dashes included) taken as an abbreviation of a secret flag: ``--ap`` is
SGLang's ``--api-key`` for argparse (a unique prefix), ``--a`` is ambiguous and refused by it."""

SECRET_KEYS = tuple(f[2:].replace("-", "_") for f in SECRET_FLAGS)
"""The same secrets as settings keys / keyword arguments (``api_key``, ``hf_token``...)."""

MASK = "***"

_KEY_ALT = "|".join(re.escape(k) for k in sorted(SECRET_KEYS, key=len, reverse=True))

TOKEN_PATTERNS = (
    # Hugging Face tokens: hf_ + 30+ alphanumerics with both cases (hf_config, hf_transformers stay)
    (re.compile(r"\bhf_(?=[A-Za-z0-9]*[A-Z])(?=[A-Za-z0-9]*[a-z])[A-Za-z0-9]{30,}"), "hf_" + MASK),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "sk-" + MASK),
    (re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{6,}"), r"\1" + MASK),
)
"""Token-shaped secrets, wherever they appear."""

_ABBREV_HEADS = sorted(set(f[:MIN_ABBREV] for f in SECRET_FLAGS))
_OPTION = r"--[A-Za-z][A-Za-z0-9_-]*"

# argv dumped as JSON or a Python list: "--api-key", "V"  /  '--api-ke', 'V' (the flag checked by is_secret_flag)
_JSON_ARGV = re.compile(r"""(["'])(%s)\1(\s*,\s*)(["'])(?:\\.|(?!\4).)*\4""" % _OPTION)
# inline forms in text or a quoted argv element: --api-key=V, --api-ke V, --api-key="V"
_INLINE = re.compile(r"""(?<![\w-])(%s)(=|\s+)(?!-)(?:"(?:\\.|[^"\\])*"|'[^']*'|[^\s"',)\]}]+)""" % _OPTION)

FLAG_PATTERNS = (
    # settings dumps: api_key='V' (ServerArgs repr), 'api_key': 'V' (dict), "api_key": "V" (JSON)
    (re.compile(r"""(?<![\w-])(%s)=(["'])(?:\\.|(?!\2).)*\2""" % _KEY_ALT), r"\1=\2" + MASK + r"\2"),
    (re.compile(r"""(["'])(%s)\1(\s*:\s*)(["'])(?:\\.|(?!\4).)*\4""" % _KEY_ALT), r"\1\2\1\3\4" + MASK + r"\4"),
)
"""Values attached to a secret flag or settings key in free text."""

_MAYBE = re.compile(r"hf_|sk-|(?i:bearer)|api.key|token|keyfile.password|%s" % "|".join(
    re.escape(h) for h in _ABBREV_HEADS))
"""One cheap scan decides whether any pattern can match (most log lines carry no secret)."""


def is_secret_flag(arg, known=None):
    """True when ``arg`` (an option, ``=value`` stripped) names a secret flag or is an abbreviation
    argparse would take for one.

    ``known``: every option string of the server's flag schema, when the caller has it (the console
    does). Then an exact non-secret flag is never secret, and a prefix is secret when the flags it
    abbreviates include a secret one, unless it abbreviates exactly one flag and that one is not
    secret (``--hf`` is SGLang's ``--hf-chat-template-name``). Without a schema (on the host) a
    prefix of a secret flag is secret unless it is also a prefix of a known non-secret flag.
    """
    name = arg.split("=", 1)[0]
    if name in SECRET_FLAGS:
        return True
    if not name.startswith("--") or len(name) < MIN_ABBREV or name in NOT_SECRET_FLAGS:
        return False
    secret = [f for f in SECRET_FLAGS if f.startswith(name)]
    if not secret:
        return False
    if known is None:
        return not any(f.startswith(name) for f in NOT_SECRET_FLAGS)
    if name in known:
        return False
    others = set(f for f in known if f.startswith(name) and f not in SECRET_FLAGS)
    return not (len(others) == 1 and len(set(secret) & set(known)) == 0)


def mask_text(text, known=None):
    """``text`` with every secret value and token-shaped string replaced by ``***`` (``known``: the
    schema's option strings, see :func:`is_secret_flag`)."""
    if not _MAYBE.search(text):
        return text

    def json_argv(m):
        if not is_secret_flag(m.group(2), known):
            return m.group(0)
        return "%s%s%s%s%s%s%s" % (m.group(1), m.group(2), m.group(1), m.group(3), m.group(4), MASK, m.group(4))

    def inline(m):
        if not is_secret_flag(m.group(1), known):
            return m.group(0)
        return m.group(1) + m.group(2) + MASK

    text = _JSON_ARGV.sub(json_argv, text)
    text = _INLINE.sub(inline, text)
    for rx, rep in FLAG_PATTERNS:
        text = rx.sub(rep, text)
    for rx, rep in TOKEN_PATTERNS:
        text = rx.sub(rep, text)
    return text


def mask_argv(argv, known=None):
    """argv with the value of each secret flag (``--api-key V`` or ``--api-key=V``, abbreviations
    included) replaced by ``***`` and tokens masked in every other argument."""
    out, hide = [], False
    for a in argv:
        if hide:
            out.append(MASK)
            hide = False
            continue
        if a.startswith("--") and is_secret_flag(a, known):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=" + MASK)
            else:
                out.append(a)
                hide = True
            continue
        out.append(mask_text(a, known))
    return out
