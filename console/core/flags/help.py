"""Parse argparse ``--help`` output into a :class:`~console.core.flags.models.FlagSchema`.

Pure text in, schema out. It reads the usage block (for required flags: an option
outside any ``[...]``) and every options section (``options:``, ``optional arguments:``,
custom group titles), and tolerates what servers print around it: warning lines before
``usage:``, stderr noise after the help, wrapped help lines, argparse's hyphen breaks.

Flags that argparse hides with ``help=SUPPRESS`` are invisible in ``--help`` and so are
not in the schema (SGLang 0.5.23 hides two: ``--forward-pass-metrics-*``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from console.core.flags.models import Flag, FlagSchema, TypeGuess
from console.errors import UserError

MAX_HELP_CHARS = 16 * 1024 * 1024
"""Refuse larger inputs: a real --help is ~150 kB (SGLang 0.5.23, 531 flags)."""

MAX_USAGE_CHARS = 1024 * 1024
_MAX_INVOCATION_CHARS = 20_000
_MAX_INVOCATION_INDENT = 4
_OPTION_RE = re.compile(r"^-{1,2}[^\s,=\[\]{}()|]+$")
_DEPRECATED_RE = re.compile(
    r"^\W*deprecated\b|\(deprecated\b|\bthis (?:flag|option|argument) is deprecated\b",
    re.IGNORECASE,
)
_DEPRECATED_UPPER_RE = re.compile(r"\bDEPRECATED\b")
_INT_RE = re.compile(r"^[+-]?\d+$")
_FLOAT_RE = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+|inf|nan)$", re.IGNORECASE)

# Value types of well-known SGLang flags whose --help shows no default to infer them from.
# Facts from sglang 0.5.23 (console/data/sglang-0.5.23-flags.json, field "type");
# stable names in every release since 0.4.10. Only used for flags that take one plain value.
KNOWN_TYPES: dict[str, TypeGuess] = {
    "--mem-fraction-static": "float",
    "--max-running-requests": "int",
    "--max-queued-requests": "int",
    "--chunked-prefill-size": "int",
    "--tp-size": "int",
    "--dp-size": "int",
    "--pp-size": "int",
    "--ep-size": "int",
    "--nnodes": "int",
    "--node-rank": "int",
    "--base-gpu-id": "int",
    "--port": "int",
    "--page-size": "int",
    "--speculative-num-steps": "int",
    "--speculative-eagle-topk": "int",
    "--speculative-num-draft-tokens": "int",
    "--hicache-size": "int",
    "--hicache-ratio": "float",
    "--mamba-track-interval": "int",
    "--max-mamba-cache-size": "int",
    "--cuda-graph-max-bs-decode": "int",
    "--cuda-graph-max-bs-prefill": "int",
    "--schedule-conservativeness": "float",
    "--decode-log-interval": "int",
    "--random-seed": "int",
}


class HelpParseError(UserError):
    """The text is not argparse ``--help`` output we can read (message says why)."""


_SECTION_RE = re.compile(r"^-{3} Help for (.+?) -{3}\s*$")
_LLM_SECTION_RE = re.compile(r"\blanguage model\b|\bllm\b", re.IGNORECASE)


def llm_section(lines: list[str]) -> list[str]:
    """The language-model part of a sectioned help; ``lines`` unchanged when it has no sections.

    ``sglang serve --help`` (0.5.23 on) prints a general block, then ``--- Help for Standard Language Model
    Server ---`` with the launch server's argparse help, then ``--- Help for Diffusion Model Server ---`` with
    another parser's (or a line saying diffusion is not installed). Only the LLM section is the server the
    console launches; the diffusion flags would otherwise be accepted for it. With sections but none named
    for a language model, the first section is taken (the general block is never argparse help)."""
    heads = [i for i, ln in enumerate(lines) if _SECTION_RE.match(ln)]
    if not heads:
        return lines
    pick = next((i for i in heads if _LLM_SECTION_RE.search(_SECTION_RE.match(lines[i]).group(1))), heads[0])  # type: ignore[union-attr]
    end = next((i for i in heads if i > pick), len(lines))
    return lines[pick + 1:end]


_GENERAL_CHOICE_RE = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*) \{([^{}\s]+)\}")


def _general_flags(lines: list[str]) -> list[Flag]:
    """Options of a sectioned help's general block (before its first section), which the front end reads itself
    before handing the rest to a section's parser: ``sglang serve``'s ``--model-type {auto,llm,diffusion}``."""
    out: list[Flag] = []
    for ln in lines:
        if _SECTION_RE.match(ln):
            break
        for m in _GENERAL_CHOICE_RE.finditer(ln):
            out.append(Flag(name=m.group(1), metavar=m.group(1)[2:].upper().replace("-", "_"), takes_value=True,
                            choices=m.group(2).split(","), type="str", help=ln.strip(), group="general"))
    return out


def parse_help(text: str, *, version: str | None = None) -> FlagSchema:
    """Parse argparse ``--help`` output into a :class:`FlagSchema`.

    Raises :class:`HelpParseError` for text without a ``usage:`` line or without any
    option lines, or for absurdly large input.
    """
    if not isinstance(text, str):
        raise HelpParseError("help text must be a string")
    if len(text) > MAX_HELP_CHARS:
        raise HelpParseError(f"help text is {len(text)} characters; refusing more than {MAX_HELP_CHARS}")
    all_lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    lines = llm_section(all_lines)
    start = next((i for i, ln in enumerate(lines) if ln.lower().startswith("usage:")), None)
    if start is None:
        raise HelpParseError("no 'usage:' line: this does not look like argparse --help output")
    end = start + 1
    while end < len(lines) and lines[end].strip() and lines[end][:1].isspace():
        end += 1
    usage = " ".join(ln.strip() for ln in lines[start:end])[len("usage:"):].strip()
    if len(usage) > MAX_USAGE_CHARS:
        raise HelpParseError(f"usage block is {len(usage)} characters; refusing more than {MAX_USAGE_CHARS}")
    prog, required = _parse_usage(usage)

    flags: list[Flag] = []
    seen: set[str] = set()
    for entry in _option_entries(lines[end:]):
        invocation, help_lines, section = entry
        flag = _make_flag(invocation, help_lines, section, required)
        if flag is None or any(s in seen for s in flag.option_strings):
            continue
        seen.update(flag.option_strings)
        flags.append(flag)
    if lines is not all_lines:
        flags.extend(f for f in _general_flags(all_lines) if f.name not in seen)
    if not flags:
        raise HelpParseError("found a 'usage:' line but no option lines (expected '  --flag ...' under 'options:')")
    return FlagSchema(version=version, prog=prog, flags=flags)


def _parse_usage(usage: str) -> tuple[str | None, set[str]]:
    """Program name and the option strings that appear outside brackets (required)."""
    required: set[str] = set()
    prog_words: list[str] = []
    in_prog = True
    depth = 0
    word = ""
    word_depth = 0

    def flush() -> None:
        nonlocal word, in_prog
        if word:
            if in_prog and not word.startswith("-") and word_depth == 0:
                prog_words.append(word)
            else:
                in_prog = False
                if word_depth == 0 and _OPTION_RE.match(word):
                    required.add(word)
        word = ""

    for ch in usage:
        if ch in "[(":
            flush()
            in_prog = False
            depth += 1
        elif ch in "])":
            flush()
            depth = max(0, depth - 1)
        elif ch.isspace() or ch == "|":
            flush()
        else:
            if not word:
                word_depth = depth
            word += ch
    flush()
    return (" ".join(prog_words) or None), required


def _option_entries(lines: list[str]) -> Iterator[tuple[str, list[str], str | None]]:
    """Yield (invocation, help lines, section title) for every option line after usage."""
    section: str | None = None
    current: tuple[str, list[str], str | None] | None = None
    for raw in lines:
        line = raw.expandtabs(8).rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if indent == 0:
            if current:
                yield current
                current = None
            # "options:", "optional arguments:", "Model:" ... ; anything else is prose/noise
            section = body[:-1].strip() if body.endswith(":") and len(body) < 120 else None
            continue
        if section is None:
            continue
        if indent <= _MAX_INVOCATION_INDENT and body.startswith("-"):
            if current:
                yield current
            invocation, same_line_help = _split_invocation(body)
            current = (invocation, [same_line_help] if same_line_help else [], section)
        elif indent > _MAX_INVOCATION_INDENT and current is not None:
            current[1].append(body)
        else:  # a group description, or noise such as "  warnings.warn(" after the help
            if current:
                yield current
                current = None
    if current:
        yield current


def _split_invocation(body: str) -> tuple[str, str]:
    """Split ``--host HOST           The host ...`` at the first run of 2+ spaces."""
    m = re.search(r"\s{2,}", body)
    if not m:
        return body, ""
    return body[: m.start()], body[m.end():].strip()


def _split_top(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside ``{...}``."""
    parts, depth, cur, i = [], 0, "", 0
    while i < len(text):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(0, depth - 1)
        if depth == 0 and text.startswith(sep, i):
            parts.append(cur)
            cur = ""
            i += len(sep)
            continue
        cur += ch
        i += 1
    parts.append(cur)
    return parts


def _join_help(lines: list[str]) -> str:
    """Undo argparse's wrapping, including its breaks after a hyphen (``--cuda-graph-`` / ``backend``)."""
    out = ""
    for ln in lines:
        if not out:
            out = ln
        elif re.search(r"[A-Za-z0-9]-$", out) and not re.search(r"\s-$", out):
            out += ln
        else:
            out += " " + ln
    return out


def _parse_args_format(tokens: list[str]) -> tuple[bool, str | int | None, str | None, list[str] | None]:
    """(takes_value, nargs, metavar, choices) from the argument part of an invocation."""
    if not tokens:
        return False, None, None, None
    text = " ".join(tokens)
    first = tokens[0].strip("[]")
    if text == "...":
        nargs: str | int | None = "..."
    elif text.startswith("[") and "..." in text:  # [X ...] or py<3.9 [X [X ...]]
        nargs = "*"
    elif text.startswith("[") and text.endswith("]"):
        nargs = "?"
    elif len(tokens) >= 2 and "..." in text:  # X [X ...]
        nargs = "+"
    elif len(tokens) >= 2:
        nargs = len(tokens)
    else:
        nargs = None
    choices = None
    metavar: str | None = first
    if first.startswith("{") and first.endswith("}"):
        choices = [c for c in first[1:-1].split(",") if c != ""]
        metavar = None
    return True, nargs, metavar, choices


def _make_flag(invocation: str, help_lines: list[str], section: str | None, required: set[str]) -> Flag | None:
    if len(invocation) > _MAX_INVOCATION_CHARS:
        return None
    option_strings: list[str] = []
    args_tokens: list[str] | None = None
    for part in _split_top(invocation, ", "):
        words = _split_top(part.strip(), " ")
        if not words or not _OPTION_RE.match(words[0]):
            return None
        option_strings.append(words[0])
        if args_tokens is None and len(words) > 1:
            args_tokens = [w for w in words[1:] if w]
    takes_value, nargs, metavar, choices = _parse_args_format(args_tokens or [])
    help_text = _join_help(help_lines)
    default = None
    pos = help_text.rfind("(default: ")
    if pos >= 0 and help_text.endswith(")"):
        default = help_text[pos + len("(default: "):-1]
        help_text = help_text[:pos].rstrip()
        if default == "None":
            default = None
    name, aliases = option_strings[0], option_strings[1:]
    negatable = not takes_value and name.startswith("--") and f"--no-{name[2:]}" in aliases
    deprecated = bool(_DEPRECATED_RE.search(help_text)) or bool(_DEPRECATED_UPPER_RE.search(help_text))
    return Flag(
        name=name,
        aliases=aliases,
        metavar=metavar,
        takes_value=takes_value,
        nargs=nargs,
        choices=choices,
        default=default,
        type=_guess_type(name, takes_value, nargs, metavar, choices, default, help_text),
        required=any(s in required for s in option_strings),
        deprecated=deprecated,
        negatable=negatable,
        help=help_text,
        group=section,
    )


def _guess_type(
    name: str,
    takes_value: bool,
    nargs: str | int | None,
    metavar: str | None,
    choices: list[str] | None,
    default: str | None,
    help_text: str,
) -> TypeGuess | None:
    """A conservative guess; None when the help gives no solid evidence."""
    if not takes_value:
        return "bool"
    if choices:
        return "int" if all(_INT_RE.match(c) for c in choices) else "str"
    if default is not None:
        d = default.strip().strip("'\"")
        if _INT_RE.match(d):
            return "int"
        if _FLOAT_RE.match(d):
            return "float"
        if d[:1] in "{[" and d[-1:] in "}]" and nargs is None:
            return "json"
    if nargs is None and name in KNOWN_TYPES:
        return KNOWN_TYPES[name]
    lowered = help_text.lower()
    if nargs is None and (lowered.startswith("json") or "json-formatted" in lowered or "as a json" in lowered):
        return "json"
    mv = (metavar or "").upper()
    if "-per-" in name:  # --mamba-max-states-per-path is a count
        return None
    if name.endswith(("-path", "-dir", "-file", "-folder")) or mv.endswith(("_PATH", "_DIR", "_FILE")):
        return "path"
    return None
