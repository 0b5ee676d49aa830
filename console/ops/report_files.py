"""Writing a report's two files — the Markdown and the panel's SVG beside it — into a directory trusted in nothing.

``mtpconsole report --out FILE`` (and the TUI's ``p``, under the console's own reports directory) may be run by
root in a world-writable directory where another user planted a symlink, a FIFO or a file of their own. So:

- the SVG is named from the Markdown's name (``x.md`` -> ``x.svg``); ``--out x.svg`` (the SVG would be the
  Markdown itself) is refused;
- each target is checked before anything is gathered or written, and a bad one is one clear line naming it: a
  symlink (never followed), a directory, a FIFO or a device, a missing directory, an existing file (replaced
  only when the caller says ``overwrite``);
- the text is first written to a private temporary file (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600) in the
  target's own directory, so a full disk or a write error leaves nothing behind, and then put in place without
  following anything: a hard link (which never replaces an existing name: a new file stays exclusive) or, to
  overwrite, a rename (which replaces the name itself, never what a symlink planted meanwhile points to).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from console.core.report import ReportInputs, build_report
from console.core.report_svg import panel_svg
from console.errors import UserError
from console.paths import file_kind

MODE = 0o600
"""Report files are private: they hold the session's flags and log lines."""


def report_paths(out: str | os.PathLike[str]) -> tuple[Path, Path]:
    """(the Markdown file, the SVG beside it) for ``--out``; the SVG is the Markdown's name with ``.svg``."""
    md = Path(out)
    svg = md.with_suffix(".svg") if md.name not in ("", ".", "..") else md / "report.svg"
    if svg == md:
        raise UserError(f"{md}: the panel's SVG is written beside the Markdown with the suffix .svg, so the "
                        f"Markdown cannot be {md.name}: name the Markdown file (e.g. {md.with_suffix('.md')})")
    return md, svg


def check_target(path: Path, *, overwrite: bool) -> None:
    """Raise :class:`UserError` (one line naming ``path``) unless ``path`` can be written as a report file: its
    directory exists, and it is absent or (with ``overwrite``) a regular file — never a symlink."""
    parent = path.parent
    try:
        pst = os.stat(parent)
    except FileNotFoundError:
        raise UserError(f"{path}: the directory {parent} does not exist") from None
    except OSError as e:
        raise UserError(f"{path}: cannot use the directory {parent}: {e.strerror or e}") from None
    if not stat.S_ISDIR(pst.st_mode):
        raise UserError(f"{path}: {parent} is not a directory")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise UserError(f"{path}: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UserError(f"{path} is a symbolic link: a report is never written through one (remove it or name "
                        "another file)")
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{path} is a directory: name the report's file (e.g. {path / 'report.md'})")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{path} is {file_kind(st.st_mode)}: a report is written only to a new file or, with --overwrite, over a "
                        "regular one")
    if not overwrite:
        raise UserError(f"{path} already exists: --overwrite replaces it")


def check_targets(out: str | os.PathLike[str], *, overwrite: bool) -> tuple[Path, Path]:
    """:func:`report_paths` of ``out``, each checked with :func:`check_target` (before anything is gathered)."""
    md, svg = report_paths(out)
    for path in (md, svg):
        check_target(path, overwrite=overwrite)
    return md, svg


def _temp_beside(path: Path, text: str) -> Path:
    """``text`` in a new private file beside ``path`` (removed again when writing it fails)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, MODE)
    try:
        with os.fdopen(fd, "wb", closefd=True) as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _place(tmp: Path, path: Path, *, overwrite: bool) -> None:
    """Give ``tmp`` the name ``path`` without following a symlink: rename (``overwrite``), else a hard link that
    fails on any existing name (or, where the filesystem has no hard links, an exclusive create)."""
    if overwrite:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path, follow_symlinks=False)
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
            raise  # EEXIST among them: an exclusive create never replaces a name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, MODE)
        try:
            with os.fdopen(fd, "wb", closefd=True) as f:
                f.write(tmp.read_bytes())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
    os.unlink(tmp)


def write_files(files: list[tuple[Path, str]], *, overwrite: bool) -> None:
    """Write each (path, text), mode 0600, all or none: every text goes to a temporary file first, so a full disk
    leaves nothing; then each is put in place (see :func:`_place`). Raises :class:`UserError` naming the file."""
    for path, _ in files:
        check_target(path, overwrite=overwrite)
    temps: list[tuple[Path, Path]] = []
    try:
        for path, text in files:
            try:
                temps.append((_temp_beside(path, text), path))
            except OSError as e:
                raise UserError(f"cannot write {path}: {e.strerror or e}") from None
        placed: list[Path] = []
        for tmp, path in temps:
            try:
                _place(tmp, path, overwrite=overwrite)
            except OSError as e:
                for p in placed if not overwrite else []:  # all or none: the new files of this call go again
                    with contextlib.suppress(OSError):
                        os.unlink(p)
                if isinstance(e, FileExistsError):
                    raise UserError(f"{path} already exists (it appeared while the report was written): "
                                    "--overwrite replaces it") from None
                raise UserError(f"cannot write {path}: {e.strerror or e}") from None
            placed.append(path)
    finally:
        for tmp, _ in temps:
            with contextlib.suppress(FileNotFoundError, OSError):
                os.unlink(tmp)


def write_report(inp: ReportInputs, out: str | os.PathLike[str], *, overwrite: bool) -> tuple[Path, Path]:
    """Write the report of ``inp`` to ``out`` and its panel's SVG beside it (see the module's rules); returns
    (the Markdown file, the SVG file)."""
    md, svg = check_targets(out, overwrite=overwrite)
    write_files([(svg, panel_svg(inp)), (md, build_report(inp.model_copy(update={"panel_svg": svg.name})))],
                overwrite=overwrite)
    return md, svg
