"""`mtpconsole trust-host HOST`: show the host key's SHA256 fingerprint, ask, append to known_hosts."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from console.errors import UserError
from console.link import ssh

if TYPE_CHECKING:
    from console.commands.context import CliContext

def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", help="SSH alias or user@host[:port]")
    p.add_argument("--yes", action="store_true", help="trust without asking (after you verified the fingerprint)")


async def run(ctx: CliContext, args: argparse.Namespace) -> int:
    spec = ssh.parse_host_spec(args.host)
    if spec.local:
        raise UserError("'local' needs no host key")
    cfg = ctx.ssh_config
    r = ssh.resolve(spec, cfg)
    key = await ssh.fetch_host_key(spec, cfg)
    fp = key.get_fingerprint("sha256")
    status = ssh.known_key_status(key, r["known_hosts"], r["hostname"], r["port"])
    name = ssh.known_hosts_name(r["hostname"], r["port"])
    print(f"{args.host} ({name}) offers {key.get_algorithm()} {fp}")
    if status == "trusted":
        print("already trusted")
        return 0
    if status == "changed":
        raise UserError(f"the key differs from the one in known_hosts for {name}: refusing. If the change is "
                        f"expected, remove the old entry (ssh-keygen -R '{name}') and run this again", exit_code=1)
    if not args.yes:
        if not sys.stdin.isatty():
            raise UserError("not a terminal: re-run with --yes after verifying the fingerprint")
        if input("Trust this key? [y/N] ").strip().lower() not in ("y", "yes"):
            print("not trusted")
            return 1
    path = r["known_hosts"][0]
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    line = f"{name} {' '.join(key.export_public_key('openssh').decode().split()[:2])}\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
    print(f"added to {path}")
    return 0
