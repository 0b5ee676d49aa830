"""The real app on a real terminal driver with the tests' FakeBackend (no SSH): for first-frame timing."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ui_fakes import FakeBackend, view_a, view_b  # noqa: E402

from console.ui.app import make_app  # noqa: E402

if __name__ == "__main__":
    make_app(FakeBackend([view_a(), view_b()])).run()
