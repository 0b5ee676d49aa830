"""The agent's second-stage bootstrap: install the shipped modules as a package, then run the agent.

Stdlib only, Python >= 3.8. ``protocol.BOOTSTRAP`` (the fixed ``python -c`` program) reads one
JSON line ``{"boot": <this file's source>, "modules": {name: source, ...}}``, runs this source
and calls :func:`main`. The modules become ``mtpconsole_remote.<name>`` through a meta-path
finder serving them from memory (tracebacks still show source lines), so their relative imports
(``from .hostlib import now``) resolve exactly as they do inside the console's ``console.host`` package.

Compiling ~260 kB of source took about 40 % of an agent's start (~100 ms of ~250 ms; with many hosts
connecting at once it is what the console waits for). So the code objects are kept, marshalled, in one
file per content digest and interpreter (:func:`code_cache_path`, under the user's cache directory, mode
0600): a later start with the same sources loads them instead of compiling. The file holds the digest it
was made for and is used only when it matches the sources just received; anything wrong with it (absent,
unreadable, another Python's, truncated) means compiling as before, and a cache that cannot be written is
no error. ``MTPCONSOLE_AGENT_CODE_CACHE=0`` on the host turns it off.
"""

import hashlib
import importlib
import importlib.abc
import importlib.util
import marshal
import os
import sys

PACKAGE = "mtpconsole_remote"


class ShippedModules(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Finds and loads ``PACKAGE`` and ``PACKAGE.<name>`` from a dict of sources."""

    def __init__(self, sources):
        self.sources = dict(sources)
        self.code = {}  # name -> code object, from the cache (or compiled once)

    def _name(self, fullname):
        if fullname == PACKAGE:
            return ""
        pkg, _, name = fullname.rpartition(".")
        return name if pkg == PACKAGE and name in self.sources else None

    def find_spec(self, fullname, path=None, target=None):
        name = self._name(fullname)
        if name is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin="<mtpconsole>/%s.py" % (name or "__init__"),
                                               is_package=(name == ""))

    def get_source(self, fullname):
        name = self._name(fullname)
        if name is None:
            raise ImportError("not a shipped module: %s" % fullname, name=fullname)
        return self.sources[name] if name else ""

    def is_package(self, fullname):
        return fullname == PACKAGE

    def get_code(self, fullname):
        name = self._name(fullname) or "__init__"
        code = self.code.get(name)
        if code is None:
            code = self.code[name] = compile(self.get_source(fullname), "<mtpconsole>/%s.py" % name, "exec")
        return code

    def exec_module(self, module):
        exec(self.get_code(module.__name__), vars(module))


def install(sources):
    """Make the shipped modules importable as ``mtpconsole_remote.<name>`` (idempotent)."""
    for finder in sys.meta_path:
        if isinstance(finder, ShippedModules):
            finder.sources.update(sources)
            for name in sources:
                finder.code.pop(name, None)
            return finder
    finder = ShippedModules(sources)
    sys.meta_path.insert(0, finder)
    return finder


def sources_digest(sources):
    """SHA-256 (hex) of the shipped sources and of this interpreter's bytecode tag: what a cache is for."""
    h = hashlib.sha256((sys.implementation.cache_tag or "").encode() + b"\0" + sys.version.encode())
    for name in sorted(sources):
        h.update(b"\0" + name.encode() + b"\0" + sources[name].encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def code_cache_path(digest):
    """``$XDG_CACHE_HOME/mtpconsole/agent-code-<digest>.marshal`` (``~/.cache`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mtpconsole", "agent-code-%s.marshal" % digest[:32])


def load_code_cache(finder, digest):
    """Fill ``finder.code`` from the cache file made for ``digest``; True when it was used."""
    try:
        with open(code_cache_path(digest), "rb") as f:
            data = marshal.loads(f.read())
        if not isinstance(data, dict) or data.get("digest") != digest or set(data["code"]) != set(finder.sources):
            return False
        finder.code.update(data["code"])
        return True
    except Exception:  # absent, unreadable, another Python's marshal, truncated: compile instead
        return False


def save_code_cache(finder, digest):
    """Compile every shipped module and write the cache file for ``digest`` (atomically, 0600); errors ignored."""
    try:
        code = {}
        for name in finder.sources:
            full = PACKAGE + "." + name
            code[name] = finder.get_code(full)
        path = code_cache_path(digest)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(marshal.dumps({"digest": digest, "code": code}))
        os.replace(tmp, path)
    except Exception:
        pass


def main(sources, stdin, stdout):
    """Install ``sources`` and run the shipped agent on ``stdin``/``stdout``; returns its exit status."""
    finder = install(sources)
    if os.environ.get("MTPCONSOLE_AGENT_CODE_CACHE") != "0":
        digest = sources_digest(sources)
        if not load_code_cache(finder, digest):
            agent = importlib.import_module(PACKAGE + ".agent")
            save_code_cache(finder, digest)
            return agent.main(stdin, stdout, sources)
    agent = importlib.import_module(PACKAGE + ".agent")
    return agent.main(stdin, stdout, sources)
