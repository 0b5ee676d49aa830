"""`mtpconsole load`: send concurrent OpenAI chat requests to a server on 127.0.0.1 and print the throughput."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from console.errors import UserError

if TYPE_CHECKING:
    from console.commands.context import CliContext

def configure(p: argparse.ArgumentParser) -> None:
    from console.commands._ops import port_arg

    p.add_argument("--port", type=port_arg, required=True, help="server port on 127.0.0.1 (1-65535)")
    p.add_argument("--target", default="127.0.0.1", metavar="ADDR",
                   help="127.0.0.1 (default), localhost or ::1; nothing else is allowed")
    p.add_argument("--concurrency", type=int, default=4, metavar="N", help="parallel requests (default 4)")
    p.add_argument("--requests", type=int, default=None, metavar="N", help="total requests (default 8)")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="stop issuing after S seconds")
    p.add_argument("--max-tokens", type=int, default=64, metavar="N", help="tokens per request (default 64)")
    p.add_argument("--model", default="default", metavar="NAME",
                   help="the request's model (default 'default'; a gateway routes by it: give the served model name)")


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from console.sim.loadgen import run_load

    try:
        res = run_load(args.port, host=args.target, concurrency=args.concurrency, requests=args.requests,
                       duration=args.duration, max_tokens=args.max_tokens, model=args.model)
    except ValueError as e:
        raise UserError(str(e)) from None
    if ctx.json_output:
        print(json.dumps(res.model_dump(), indent=2))
    else:
        per = f", {res.per_request_tokens_per_s:.1f} tok/s per request" if res.per_request_tokens_per_s else ""
        print(f"{res.requests_ok} ok, {res.requests_failed} failed, {res.completion_tokens} tokens in "
              f"{res.elapsed_s:.1f} s: {res.tokens_per_s:.1f} tok/s{per}")
        for err in res.errors:
            print(f"  error: {err}")
    return 0 if res.requests_ok and not res.requests_failed else 1
