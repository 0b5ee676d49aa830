"""The TUI entry point: ``mtpconsole`` with no subcommand."""

from __future__ import annotations

HELP = "open the TUI"


def configure(parser) -> None:
    parser.add_argument("--theme", metavar="NAME", default=None, help="dark, light or high-contrast")


def run(args) -> int:
    """Build the backend (``console.hostctx.make_backend``) and run the app until quit."""
    from console.errors import UserError
    from console.ui.themes import NAMES

    try:
        from console.hostctx import load_args_config, make_backend
    except ImportError as e:
        raise UserError(f"the TUI backend is not available in this build ({e})") from None
    cfg = load_args_config(args)
    theme = getattr(args, "theme", None) or cfg.ui.theme
    if theme not in NAMES:
        raise UserError(f"unknown theme {theme!r} (choose from {', '.join(NAMES)})")
    try:
        backend = make_backend(args)
    except ImportError as e:
        raise UserError(f"the TUI backend is not available in this build ({e})") from None
    from console.ui.app import make_app

    app = make_app(backend, theme=theme, read_only=bool(getattr(args, "read_only", False) or cfg.ui.read_only),
                   interval=getattr(args, "interval", None) or cfg.ui.interval, keymap=cfg.ui.keymap)
    app.run()
    return int(app.return_code or 0)
