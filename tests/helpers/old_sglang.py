"""The SGLang stand-in as another build would be: one flag more in its parser (its --help, hence its flag schema,
differs). For the group preflight's 'different server builds' refusal (tests/test_group.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from console.sim import sglang, sglang_args  # noqa: E402

_build = sglang_args.build_parser


def _older_parser():
    p = _build()
    p.add_argument("--enable-legacy-build-only-flag", action="store_true", help="only in this build")
    return p


sglang.build_parser = _older_parser

if __name__ == "__main__":
    sys.exit(sglang.main())
