"""The real app on a real terminal driver with the tests' FakeBackend (no SSH): for first-frame timing.

It starts the way ``mtpconsole`` does (console/commands/tui.py): the cyclic garbage collector is paused
while the UI is imported and draws its first frames, then runs again.
"""

import gc
import sys
import threading
from pathlib import Path

gc.disable()

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ui_fakes import FakeBackend, view_a, view_b  # noqa: E402

from console.commands.tui import GC_PAUSE_S  # noqa: E402
from console.ui.app import make_app  # noqa: E402

if __name__ == "__main__":
    resume = threading.Timer(GC_PAUSE_S, gc.enable)
    resume.daemon = True  # a quit before it fires must not wait for it
    resume.start()
    make_app(FakeBackend([view_a(), view_b()])).run()
