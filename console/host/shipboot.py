"""The agent's second-stage bootstrap: install the shipped modules as a package, then run the agent.

Stdlib only, Python >= 3.8. ``protocol.BOOTSTRAP`` (the fixed ``python -c`` program) reads one
JSON line ``{"boot": <this file's source>, "modules": {name: source, ...}}``, runs this source
and calls :func:`main`. The modules become ``mtpconsole_remote.<name>`` through a meta-path
finder serving them from memory (nothing is written to disk; tracebacks still show source lines),
so their relative imports (``from .hostlib import now``) resolve exactly as they do inside the
console's ``console.host`` package.
"""

import importlib
import importlib.abc
import importlib.util
import sys

PACKAGE = "mtpconsole_remote"


class ShippedModules(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Finds and loads ``PACKAGE`` and ``PACKAGE.<name>`` from a dict of sources."""

    def __init__(self, sources):
        self.sources = dict(sources)

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
        return compile(self.get_source(fullname), "<mtpconsole>/%s.py" % name, "exec")

    def exec_module(self, module):
        exec(self.get_code(module.__name__), vars(module))


def install(sources):
    """Make the shipped modules importable as ``mtpconsole_remote.<name>`` (idempotent)."""
    for finder in sys.meta_path:
        if isinstance(finder, ShippedModules):
            finder.sources.update(sources)
            return finder
    finder = ShippedModules(sources)
    sys.meta_path.insert(0, finder)
    return finder


def main(sources, stdin, stdout):
    """Install ``sources`` and run the shipped agent on ``stdin``/``stdout``; returns its exit status."""
    install(sources)
    agent = importlib.import_module(PACKAGE + ".agent")
    return agent.main(stdin, stdout, sources)
