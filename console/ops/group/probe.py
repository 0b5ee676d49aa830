"""One small stdlib program run on a node (``HostClient.run``, argv as data, no shell) for the group's checks.

Its one argument is a JSON object: ``{"env": [names], "paths": [paths], "resolve": host, "free_port": bool,
"derived": [offsets], "listen": port, "expect": n, "connect": [host, port], "say": text, "for": s,
"generate": {"port": p, "timeout": s}}``; it prints one JSON object back: the named environment variables of
the agent's environment, which paths exist, whether ``resolve`` resolves here, a free port whose ``+offsets``
are free too (below the ephemeral range: ``console.host.ports``), what a listener on ``listen`` heard from ``expect`` peers within ``for`` seconds (the head), whether
``connect`` reached it (the others: the dist-init address reachable from every node), and a one-token
``POST /generate`` on 127.0.0.1's answer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from console.host import ports
from console.link.client import HostClient
from console.link.link import HostLink

_BODY = r"""
import json, os, socket, sys, urllib.request
a = json.loads(sys.argv[1]); out = {}
out["env"] = {k: os.environ.get(k) for k in a.get("env", [])}
out["paths"] = {p: os.path.exists(os.path.expanduser(p)) for p in a.get("paths", [])}
if a.get("resolve"):
    try:
        socket.getaddrinfo(a["resolve"], None); out["resolves"] = True
    except OSError as e:
        out["resolves"] = False; out["resolve_error"] = str(e)
if a.get("free_port"):
    p = listen_port([0] + list(a.get("derived", [])))
    if p is not None:
        out["free_port"] = p
if a.get("listen"):
    import time
    port, until = a["listen"], time.monotonic() + float(a.get("for", 5))
    try:
        srv = socket.create_server(("", port)); srv.settimeout(0.2); out["listened"] = True; out["heard"] = []
        while time.monotonic() < until and len(out["heard"]) < a.get("expect", 0):
            try:
                c, peer = srv.accept()
            except OSError:
                continue
            try:
                c.settimeout(2); out["heard"].append(c.recv(200).decode("utf-8", "replace").strip())
            except OSError:
                pass
            c.close()
        srv.close()
    except OSError as e:
        out["listened"] = False; out["listen_error"] = str(e)
if a.get("connect"):
    import time
    host, port, until = a["connect"][0], a["connect"][1], time.monotonic() + float(a.get("for", 5))
    out["connected"] = False
    while time.monotonic() < until and not out["connected"]:
        try:
            with socket.create_connection((host, port), timeout=1) as c:
                c.sendall(a.get("say", "").encode()); out["connected"] = True
        except OSError as e:
            out["connect_error"] = str(e); time.sleep(0.1)
g = a.get("generate")
if g:
    body = json.dumps({"text": "Hi", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}).encode()
    hdr = {"Content-Type": "application/json"}
    key = os.environ.get("MTPCONSOLE_GENERATE_KEY")
    if key:
        hdr["Authorization"] = "Bearer " + key
    req = urllib.request.Request("http://127.0.0.1:%d/generate" % g["port"], data=body, headers=hdr)
    try:
        with urllib.request.urlopen(req, timeout=g.get("timeout", 30)) as r:
            out["generate"] = {"status": r.status, "body": r.read(2000).decode("utf-8", "replace")}
    except Exception as e:
        out["generate"] = {"status": getattr(e, "code", 0) or 0, "body": str(e)[:300]}
print(json.dumps(out))
"""
PROGRAM = Path(ports.__file__).read_text(encoding="utf-8") + _BODY
"""The probe: the port chooser of ``console.host.ports`` (one definition, shipped as text) and the checks."""


async def probe(link: HostLink, args: dict[str, Any], *, timeout: float = 40.0,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the probe on ``link``'s host with ``args``; its JSON answer (``{"error": ...}`` when it gave none)."""
    python = link.cfg.python or sys.executable
    try:
        r = await HostClient.of(link).run([python, "-c", PROGRAM, json.dumps(args)], timeout=timeout, env=env,
                                          audit=True)
    except Exception as e:  # a lost link, a timeout: the check could not be made, and says why
        return {"error": f"the probe did not run: {e}"}
    if r.rc != 0:
        return {"error": f"the probe exited {r.rc}: {r.stderr.strip()[-300:]}"}
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"the probe printed no answer: {r.stdout[-200:]!r}"}
    return out if isinstance(out, dict) else {"error": "the probe's answer is no object"}
