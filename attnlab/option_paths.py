"""One checker for the paths options name, run before any model loads or any file is written.

    input_file("--haystack", path)           a regular file that can be read (a folder, a FIFO, /dev/null named as such)
    output_folder("--out", path)             a folder that is new or a folder, under a folder this user can write in
    output_file("--out", path)               a file that is new or a regular file, in a folder this user can write in
    contained("--collect", path, root)       path (``..`` and links resolved) lies under root

Every message names the option and the path, on one line (``UserError``).  What a file holds (UTF-8 text, a schema)
is its reader's to check (``attnlab.schemas.schema_file``, ``attnlab.textfile``); this module says only whether the
path is the kind of thing the option needs, without opening it: a FIFO opened to be read would wait for a writer
for ever, and a device would be read as if it were text.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from attnlab.errors import UserError

__all__ = ["contained", "input_file", "kind_of", "output_file", "output_folder"]

KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words ("a file" when regular, "a folder", "a FIFO (named pipe)", …)."""
    return next((name for test, name in KINDS if test(mode)), "a file")


def _stat(option: str, path: Path):
    """``os.stat`` of ``path`` (links followed), None when nothing is there; a path that cannot be looked at:
    refused."""
    try:
        return path.stat()
    except FileNotFoundError:
        return None
    except NotADirectoryError:  # a/b where a is a file
        raise UserError(f"{option} {path}: a path below a file, not a folder") from None
    except OSError as err:
        raise UserError(f"{option} {path}: cannot be looked at ({err.strerror})") from None


def input_file(option: str, path: str | os.PathLike, what: str = "file") -> Path:
    """``path`` when it is a regular file this user can read; one UserError line naming ``option`` otherwise."""
    path = Path(path)
    st = _stat(option, path)
    if st is None:
        raise UserError(f"{option} {path}: no such {what}")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{option} {path}: is {kind_of(st.st_mode)}, not a {what}")
    if not os.access(path, os.R_OK):
        raise UserError(f"{option} {path}: cannot be read (permission denied)")
    return path


def _writable_parent(option: str, path: Path) -> None:
    """The nearest existing folder above ``path`` is a folder this user can write in."""
    probe = path.parent
    while _stat(option, probe) is None and probe != probe.parent:
        probe = probe.parent
    st = _stat(option, probe)
    if st is None or not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{option} {path}: {probe} is {kind_of(st.st_mode) if st else 'missing'}, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path}: cannot write in {probe} (permission denied)")


def output_folder(option: str, path: str | os.PathLike) -> Path:
    """``path`` when a run may write its files there: new (creatable) or a folder this user can write in."""
    path = Path(path)
    st = _stat(option, path)
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise UserError(f"{option} {path}: is {kind_of(st.st_mode)}, not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise UserError(f"{option} {path}: cannot write in this folder (permission denied)")
        return path
    _writable_parent(option, path)
    return path


def output_file(option: str, path: str | os.PathLike) -> Path:
    """``path`` when a file may be written there: new, or a regular file, in a folder this user can write in."""
    path = Path(path)
    st = _stat(option, path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UserError(f"{option} {path}: is {kind_of(st.st_mode)}, not a file")
    if st is not None and not os.access(path, os.W_OK):
        raise UserError(f"{option} {path}: cannot be written (permission denied)")
    _writable_parent(option, path)
    return path


def contained(option: str, path: str | os.PathLike, root: str | os.PathLike, root_option: str = "") -> Path:
    """``path`` when, ``..`` and links resolved, it lies under ``root`` (``root_option`` names where root came from)."""
    inside, top = Path(path).resolve(), Path(root).resolve()
    if inside != top and top not in inside.parents:
        under = f"{root_option} {root}" if root_option else str(root)
        raise UserError(f"{option} {path}: leads outside {under} (to {inside})")
    return Path(path)
