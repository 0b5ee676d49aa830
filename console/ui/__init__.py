"""The Textual UI. ``from console.ui import make_app`` (imports Textual lazily)."""


def make_app(*args, **kwargs):
    from console.ui.app import make_app as _make_app

    return _make_app(*args, **kwargs)
