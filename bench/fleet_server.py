"""Many SSH hosts in one process: N ``asyncssh`` servers on 127.0.0.1, each running the real agent.

    python -m bench.fleet_server DIR N [FIRST]

Writes ``DIR/client_key``, ``DIR/known_hosts``, ``DIR/ssh_config`` (aliases ``fleet-00``…) and
finally ``DIR/ready`` (JSON: ``n`` and ``pidns``); with ``FIRST`` (a shard: hosts ``FIRST`` … ``FIRST+N-1``, the
benchmark runs one server process per 64 hosts so that their SSH work spreads over the cores as N machines' would)
each file name ends in ``.FIRST``. It runs until stdin closes or SIGTERM. A session may only run the
console's fixed agent bootstrap (``python3 -u -c BOOTSTRAP``), which is started as a child process with
its stdin/stdout/stderr redirected to the SSH channel; it ends when the channel closes.

Where ``unshare -pf --mount-proc`` works (root, and ``MTPCONSOLE_BENCH_PIDNS`` is not ``0``), host ``i``'s agent runs
in a PID namespace of its own with its serving stand-in (``bench/ns_host.py``, sim dir ``DIR/host-<i>/sim``, which
the benchmark writes before connecting): ``pidns`` is true, and the benchmark starts no stand-ins itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import asyncssh
from asyncssh.connection import SSHConnection

from console.link.protocol import BOOTSTRAP

ALLOWED_PYTHONS = ("python3", sys.executable)


def pidns_works() -> bool:
    """A PID namespace with its own /proc can be made here (root, a kernel and container that allow it)."""
    if os.environ.get("MTPCONSOLE_BENCH_PIDNS") == "0":
        return False
    try:
        return subprocess.run(["unshare", "-pf", "--mount-proc", "true"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def send_as_openssh() -> None:
    """Make this process's SSH servers send what OpenSSH's sshd sends: one packet per channel write.

    asyncssh puts an empty SSH_MSG_IGNORE before every packet it sends after key exchange (a countermeasure for CBC
    ciphers that it applies to all of them); OpenSSH's sshd sends none in a session without a terminal
    (tests/test_bench_fleet_server.py counts what the real sshd sends per pushed sample: one channel-data packet).
    Left in, every sample would cost the console two packets to decrypt, MAC-check and dispatch where a real host
    costs it one, and the fleet benchmark would charge the console for its stand-in servers' habit.
    """
    ignore = (asyncssh.packet.String(b""),)
    send = SSHConnection.send_packet

    def send_packet(self: SSHConnection, pkttype: int, *args: bytes, handler=None) -> None:
        if pkttype == asyncssh.constants.MSG_IGNORE and args == ignore:
            return
        send(self, pkttype, *args, handler=handler)
    SSHConnection.send_packet = send_packet  # type: ignore[method-assign]


def host_title(i: int) -> str:
    """Host ``i``'s serving stand-in's title (the benchmark's, wherever it is started)."""
    return f"serving-stand-in-{i:02d} --tp-size 8"


def session_factory(d: Path, i: int, pidns: bool):
    """The SSH session handler of host ``i``."""
    async def session(process: asyncssh.SSHServerProcess) -> None:
        await _session(process, ["unshare", "-pf", "--mount-proc", sys.executable, "-m", "bench.ns_host",
                                 str(d / f"host-{i:02d}" / "sim"), host_title(i), "--"] if pidns else [])
    return session


async def _session(process: asyncssh.SSHServerProcess, wrap: list[str]) -> None:
    argv = shlex.split(process.command or "")
    if len(argv) != 4 or argv[0] not in ALLOWED_PYTHONS or argv[1:3] != ["-u", "-c"] or argv[3] != BOOTSTRAP:
        process.stderr.write(b"fleet_server: only the agent bootstrap may run here\n")
        process.exit(126)
        return
    argv = wrap + argv
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        await process.redirect(stdin=proc.stdin, stdout=proc.stdout, stderr=proc.stderr)
        rc = await proc.wait()
        process.exit(rc)
    except Exception:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise


async def main(d: Path, n: int, first: int | None = None) -> None:
    sfx = "" if first is None else f".{first}"
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key.write_private_key(str(d / f"client_key{sfx}"))
    os.chmod(d / f"client_key{sfx}", 0o600)
    authorized = asyncssh.import_authorized_keys(client_key.export_public_key().decode())
    pub = host_key.export_public_key().decode().split()
    servers, known, cfg = [], [], []
    user = os.environ.get("USER") or __import__("getpass").getuser()
    pidns = pidns_works()
    send_as_openssh()
    for i in range(first or 0, (first or 0) + n):
        srv = await asyncssh.create_server(None, "127.0.0.1", 0, server_host_keys=[host_key],
                                           authorized_client_keys=authorized, process_factory=session_factory(d, i, pidns),
                                           encoding=None, allow_scp=False, agent_forwarding=False,
                                           x11_forwarding=False, keepalive_interval=0)
        port = srv.sockets[0].getsockname()[1]
        servers.append(srv)
        known.append(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}")
        cfg.append(f"Host fleet-{i:02d}\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n"
                   f"  IdentityFile {d / f'client_key{sfx}'}\n  UserKnownHostsFile {d / f'known_hosts{sfx}'}\n")
    (d / f"known_hosts{sfx}").write_text("\n".join(known) + "\n")
    (d / f"ssh_config{sfx}").write_text("\n".join(cfg) + "\n")
    (d / f"ready{sfx}.tmp").write_text(json.dumps({"n": n, "pidns": pidns}))
    os.replace(d / f"ready{sfx}.tmp", d / f"ready{sfx}")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not os.read(sys.stdin.fileno(), 1) else None)
    await stop.wait()
    for s in servers:
        s.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None))
