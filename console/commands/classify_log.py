"""``mtpconsole classify-log FILE...``: state, failure cause, decisive line, hint and metrics.

With no failure line in the log, ``line`` says so and what ended the server (``line_in_log`` false); a file
holding several server runs is read from the last run's start banner (``runs_skipped`` says how many came
before).

Files are read as bytes and decoded as UTF-8 with replacement; a big file is classified from
its tail plus a light scan of its head (see :func:`console.core.classify.classify_file`), so a
1 GB log is never loaded. An exit record can be supplied with ``--exit-code``/``--signal``
(and friends) or ``--exit-json`` (a run directory's ``exit.json``). Exit status: 0, or 1 when
a file could not be read (its entry carries ``error``), 2 for bad options.
"""

from __future__ import annotations

import argparse
import json
import os
import signal as _signal
import stat
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from console.errors import UserError
from console.host.rundir import MAX_SMALL_JSON_BYTES, json_depth_ok
from console.model import Classification, ExitRecord
from console.paths import UnreadableFile, file_kind, read_user_file

if TYPE_CHECKING:
    from console.commands.context import CliContext

_METRIC_KEYS = ("gen_throughput", "accept_len", "running_req", "queue_req", "token_usage")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add classify-log's own options."""
    parser.add_argument("files", nargs="+", metavar="FILE", help="log file(s) to classify")
    parser.add_argument("--exit-code", type=int, metavar="N", default=None,
                        help="the server exited with this code (applies to every FILE)")
    parser.add_argument("--signal", metavar="N", default=None,
                        help="the server was ended by this signal (number or name, e.g. 9 or KILL)")
    parser.add_argument("--stopped-by-operator", action="store_true", default=False,
                        help="the server was stopped on purpose (not a failure by itself)")
    parser.add_argument("--oom-kill-before", type=int, metavar="N", default=None,
                        help="/proc/vmstat oom_kill before the server started")
    parser.add_argument("--oom-kill-after", type=int, metavar="N", default=None,
                        help="/proc/vmstat oom_kill after the server ended")
    parser.add_argument("--exit-json", metavar="FILE", default=None,
                        help="read the exit record from this exit.json (overrides the options above)")


def _parse_signal(text: str) -> int:
    t = text.strip().upper()
    if t.lstrip("-").isdigit():
        n = abs(int(t))
        if 0 < n < 128:
            return n
        raise UserError(f"--signal {text!r}: a signal number is between 1 and 127")
    name = t if t.startswith("SIG") else "SIG" + t
    try:
        return int(_signal.Signals[name])
    except KeyError:
        raise UserError(f"--signal {text!r}: not a signal number or name (e.g. 9, KILL, SIGTERM)") from None


def exit_record_from_args(args: argparse.Namespace) -> ExitRecord | None:
    """The exit record the options describe, or None when none was given."""
    if args.exit_json:
        path = Path(args.exit_json)
        try:  # bounded, never a FIFO or a device (paths.read_user_file); nesting bounded before parsing
            raw = read_user_file(path, MAX_SMALL_JSON_BYTES)  # as the agent reads one
            if not json_depth_ok(raw):
                raise ValueError("nested too deeply")
            data = json.loads(raw.decode("utf-8", errors="replace"))
        except OSError as e:
            raise UserError(f"--exit-json {path}: cannot read: {e.strerror or e}") from None
        except UnreadableFile as e:
            raise UserError(f"--exit-json {path}: {e}") from None
        except (ValueError, RecursionError) as e:
            raise UserError(f"--exit-json {path}: not JSON: {e}") from None
        if not isinstance(data, dict):
            raise UserError(f"--exit-json {path}: expected a JSON object")
        data.setdefault("ended_at", 0.0)
        try:
            return ExitRecord.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ())) or "record"
            raise UserError(f"--exit-json {path}: {where}: {first.get('msg')}") from None
    given = (args.exit_code is not None or args.signal is not None or args.stopped_by_operator
             or args.oom_kill_before is not None or args.oom_kill_after is not None)
    if not given:
        return None
    sig = _parse_signal(args.signal) if args.signal is not None else None
    return ExitRecord(
        exit_code=args.exit_code,
        signal=sig,
        ended_at=time.time(),
        stopped_by_operator=bool(args.stopped_by_operator),
        oom_kill_before=args.oom_kill_before,
        oom_kill_after=args.oom_kill_after,
    )


def _entry(name: str, c: Classification | None, error: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "file": name,
        "state": c.state if c else None,
        "cause": c.cause if c else None,
        "line": c.line if c else None,
        "hint": c.hint if c else None,
        "metrics": None,
        "line_in_log": c.line_in_log if c else False,
        "runs_skipped": c.runs_skipped if c else 0,
        "run_started_line": c.run_started_line if c else None,
    }
    if c is not None and c.metrics is not None:
        entry["metrics"] = {k: getattr(c.metrics, k) for k in _METRIC_KEYS}
    if error is not None:
        entry["error"] = error
    return entry


def _classify_one(name: str, exit: ExitRecord | None) -> dict[str, Any]:
    from console.core.classify import classify_file

    path = Path(name)
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):  # a FIFO would block and /dev/zero never end
            return _entry(name, None, f"is {file_kind(mode)}, not a regular file")
        return _entry(name, classify_file(path, exit))
    except OSError as e:
        return _entry(name, None, e.strerror or str(e))


def _fmt_metrics(m: dict[str, Any]) -> str:
    parts = []
    if m["gen_throughput"] is not None:
        parts.append(f"gen {m['gen_throughput']:.1f} tok/s")
    if m["accept_len"] is not None:
        parts.append(f"accept {m['accept_len']:.2f}")
    if m["running_req"] is not None:
        parts.append(f"running {m['running_req']}")
    if m["queue_req"] is not None:
        parts.append(f"queue {m['queue_req']}")
    if m["token_usage"] is not None:
        parts.append(f"token usage {m['token_usage']:.2f}")
    return " · ".join(parts)


def _short(line: str | None, limit: int = 160) -> str:
    if not line:
        return "its start banner"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _print_text(entries: list[dict[str, Any]]) -> None:
    out = sys.stdout
    for i, e in enumerate(entries):
        if i:
            out.write("\n")
        if "error" in e:
            out.write(f"{e['file']}: ERROR: {e['error']}\n")
            continue
        head = e["state"].upper()
        if e["cause"]:
            head += f" ({e['cause']})"
        out.write(f"{e['file']}: {head}\n")
        if e["runs_skipped"]:
            out.write(f"  run:     the last of {e['runs_skipped'] + 1} server runs in the file "
                      f"({e['runs_skipped']} earlier skipped), from: {_short(e['run_started_line'])}\n")
        if e["line"]:
            out.write(f"  line:    {e['line']}\n")
        if e["hint"]:
            out.write(f"  hint:    {e['hint']}\n")
        if e["metrics"]:
            out.write(f"  metrics: {_fmt_metrics(e['metrics'])}\n")


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    """Classify each file in order; print a JSON array with --json, else readable text."""
    exit = exit_record_from_args(args)
    entries = [_classify_one(name, exit) for name in args.files]
    if ctx.json_output:
        sys.stdout.write(json.dumps(entries, indent=2) + "\n")
    else:
        if hasattr(sys.stdout, "reconfigure"):
            sys.stdout.reconfigure(errors="replace")
        _print_text(entries)
    sys.stdout.flush()
    return 1 if any("error" in e for e in entries) else 0
