"""What a deployment runs on its host through the agent's ``run`` op (argv as data, audited like every remote
command): the gateway's key file, an HTTP call to 127.0.0.1 with any method, and the gateway's launcher.

The gateway's control-plane key never leaves the host and never reaches a command line: :data:`KEY_CODE` creates
it there in a 0600 file, :data:`HTTP_CODE` reads it there to authorize a call, and :data:`GATEWAY_CODE` (the
gateway session's argv: ``PYTHON -c GATEWAY_CODE MODULE launch ...``) reads it from the file named by
``$MTPCONSOLE_GATEWAY_KEY_FILE`` and hands it to the module in-process. Each code string is Python >= 3.8, stdlib
only, and takes its inputs from ``sys.argv`` (never formatted into the code).
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass

from console.link.client import HostClient
from console.link.errors import LinkDown, RequestError

KEY_ENV = "MTPCONSOLE_GATEWAY_KEY_FILE"
"""The environment variable naming the gateway's key file (a path, not the key)."""
KEY_ID = "mtpconsole"
"""The key's id and name in the gateway's control-plane key list (role admin)."""

KEY_CODE = r"""
import os, secrets, sys
path = os.path.expanduser(sys.argv[1])
os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
try:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
except FileExistsError:
    st = os.lstat(path)
    if not os.path.isfile(path) or os.path.islink(path) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        sys.exit("the key file %s is not a private regular file of this user" % path)
    print("kept")
else:
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(24))
    print("created")
"""
"""argv: PATH. Creates the key file (0600, its directory 0700) unless it exists; refuses one that others can read."""

HTTP_CODE = r"""
import http.client, json, os, sys
method, port, path, key_file, body, timeout = sys.argv[1:7]
headers = {"Accept": "application/json"}
if key_file:
    with open(os.path.expanduser(key_file)) as f:
        headers["Authorization"] = "Bearer " + f.read().strip()
if body:
    headers["Content-Type"] = "application/json"
try:
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=float(timeout))
    c.request(method, path, body=body.encode() if body else None, headers=headers)
    r = c.getresponse()
    out = {"status": r.status, "body": r.read(1 << 20).decode("utf-8", "replace")}
except (OSError, http.client.HTTPException) as e:
    out = {"status": 0, "body": "%s: %s" % (type(e).__name__, e)}
print(json.dumps(out))
"""
"""argv: METHOD PORT PATH KEY_FILE ('' for none) BODY ('' for none) TIMEOUT. Prints ``{"status", "body"}``."""

GATEWAY_CODE = r"""
import os, runpy, sys, types
module = sys.argv[1]
key_file = os.environ.pop("MTPCONSOLE_GATEWAY_KEY_FILE", "")
args = sys.argv[2:]
if key_file:
    with open(os.path.expanduser(key_file)) as f:
        args += ["--control-plane-api-keys", "mtpconsole:mtpconsole:admin:" + f.read().strip()]
stub = types.ModuleType("setproctitle")
stub.setproctitle = lambda title: None
sys.modules["setproctitle"] = stub
sys.argv = [module] + args
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
"""argv: MODULE ARGS... The gateway's launcher: the key from the file named by ``$MTPCONSOLE_GATEWAY_KEY_FILE`` is
added to the module's own argument list in-process (the process's command line stays as launched, key-free), and
the module keeps that command line (its retitle to ``smg::router`` is left out): the console knows its sessions by
their argv."""


def key_path(runs_dir: str, deployment: str) -> str:
    """Where an owned gateway's key lives on the host: beside the runs directory, never in it (a directory there
    would read as a broken run directory)."""
    return posixpath.join(runs_dir.rstrip("/") + ".gateways", f"{deployment}.key")


@dataclass(frozen=True)
class Answer:
    """An HTTP answer from 127.0.0.1 on the host (status 0: nothing answered; ``body`` says why)."""

    status: int
    body: str

    def json(self) -> object:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


async def ensure_key(client: HostClient, python: str, path: str) -> str:
    """Create the key file on the host unless it exists: 'created' or 'kept'. Raises RequestError."""
    r = await client.run([python, "-c", KEY_CODE, path], timeout=20, audit=True)
    if r.rc != 0:
        raise RequestError(f"the gateway key file {path}: {(r.stderr or r.stdout).strip()[-300:]}")
    return r.stdout.strip()


async def http_call(client: HostClient, python: str, method: str, port: int, path: str, *,
                    key_file: str | None = None, body: object | None = None, timeout: float = 10.0,
                    audit: bool = True) -> Answer:
    """``method path`` on 127.0.0.1:``port`` of the host, authorized by the key in ``key_file`` there (``audit``:
    recorded in the audit log, as every command of an operation is; a periodic reading is not)."""
    argv = [python, "-c", HTTP_CODE, method, str(port), path, key_file or "",
            json.dumps(body) if body is not None else "", str(timeout)]
    try:
        r = await client.run(argv, timeout=timeout + 10, audit=audit)
    except (LinkDown, RequestError) as e:
        return Answer(0, f"the host did not run the call: {e}")
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
        return Answer(int(out["status"]), str(out["body"]))
    except (ValueError, KeyError, IndexError, TypeError):
        return Answer(0, f"the call on the host failed (rc {r.rc}): {r.stderr.strip()[-300:]}")
