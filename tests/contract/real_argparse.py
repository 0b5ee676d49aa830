"""Run by the real SGLang venv's Python: parse each argv with SGLang's own parser, print verdicts as JSON.

stdin: a JSON list of argv lists. stdout: one JSON list of ``{"rc", "error", "values"}``: ``rc`` 0 when
argparse accepts the argv (``values``: dest -> repr of what it stored, for the dests it set), 2 with
``error`` = the text after ``sglang serve: error:``. Stdlib + the sglang package only.
"""

import argparse
import contextlib
import io
import json
import sys

from sglang.srt.server_args import ServerArgs


def main():
    cases = json.load(sys.stdin)
    out = []
    for argv in cases:
        p = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(p)
        defaults = {a.dest: a.default for a in p._actions}
        err = io.StringIO()
        rc, error, values = 0, None, {}
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                ns = p.parse_args(argv)
            values = {k: repr(v) for k, v in vars(ns).items()
                      if v is not defaults.get(k, object()) and v != defaults.get(k)}
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
            lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("sglang serve: error: ")]
            error = lines[-1][len("sglang serve: error: "):] if lines else None
        out.append({"rc": rc, "error": error, "values": values})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
