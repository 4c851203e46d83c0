"""What a command may write, and what ``--force`` may remove: one policy for every command.

Every command that writes claims its output first, with the paths of its inputs;
the claim writes nothing and refuses, in one ``UserError`` line naming the option:

- an output that *is* an input of the command (``--out corpus.tsv --data corpus.tsv``),
  with or without ``--force``;
- an existing output without ``--force`` (a file, or a folder that is not empty);
- with ``--force``, a folder that

  * is the current folder or one of its ancestors,
  * contains an input of the command,
  * is not an attnlab output of the expected kind (a run folder has a
    ``config.toml`` with a ``[model]`` table, an experiment its
    ``experiment.json``, an attention folder its ``attention.safetensors``).
- with ``--force``, a file that is not that command's own kind of output
  (``FILE_KINDS``: a plan JSON for ``plan``, a skip-gram safetensors file for
  ``embeddings``, a PNG drawn by attnlab, a sweep table): a user's notes under
  the output's name are never replaced.

The claim only *decides*.  ``Claim.clear()`` removes the old content, and the
command calls it after every input and option has been validated, just before
its first write, holding the folder's lock (``attnlab.lock``, ``attnlab.lock``
module), which ``write_folder`` takes for it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from attnlab.errors import UserError
from attnlab.lock import LOCK_NAME

# kind of folder -> (what marks it as attnlab's, check of that mark)
_RUN_MARK = "config.toml"


def _is_run(folder: Path) -> bool:
    try:
        import tomllib

        return "model" in tomllib.loads((folder / _RUN_MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


FOLDER_KINDS = {
    "run": ("an attnlab run folder (no config.toml with a [model] table)", _is_run),
    "experiment": ("an experiment run folder (no experiment.json)", lambda f: (f / "experiment.json").is_file()),
    "attention": ("an attnlab attention folder (no attention.safetensors or long-attention.safetensors)",
                  lambda f: (f / "attention.safetensors").is_file() or (f / "long-attention.safetensors").is_file()),
    "heads": ("an attnlab heads folder (no heads.json)", lambda f: (f / "heads.json").is_file()),
}

def _head(path: Path, size: int = 4096) -> bytes:
    with open(path, "rb") as f:
        return f.read(size)


def _is_plan(path: Path) -> bool:
    import json

    from attnlab.schemas.plan import FORMATS as PLAN_FORMATS  # every version of the plan file

    try:
        return json.loads(path.read_text(encoding="utf-8")).get("format") in PLAN_FORMATS
    except (OSError, ValueError, AttributeError):
        return False


def _is_skipgram(path: Path) -> bool:
    """A safetensors file (8-byte header length, JSON header) whose metadata says attnlab-skipgram."""
    import json

    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if not 2 <= size <= 100 * 2**20:
                return False
            return json.loads(f.read(size)).get("__metadata__", {}).get("format") == "attnlab-skipgram"
    except (OSError, ValueError, AttributeError):
        return False


def _is_calibration(path: Path) -> bool:
    """A calibration archive of ``attnlab calibrate`` (safetensors whose metadata holds an attnlab-calibration
    header)."""
    import json

    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if not 2 <= size <= 100 * 2**20:
                return False
            header = json.loads(json.loads(f.read(size)).get("__metadata__", {}).get("attnlab", "{}"))
            return header.get("format") == "attnlab-calibration/1"
    except (OSError, ValueError, AttributeError):
        return False


FILE_KINDS = {
    "plan": ("an attnlab plan file (no format 'attnlab-plan/…')", _is_plan),
    "embeddings": ("an attnlab embeddings file (no 'attnlab-skipgram' metadata)", _is_skipgram),
    "png": ("a PNG image drawn by attnlab (matplotlib)",
            lambda p: _head(p).startswith(b"\x89PNG") and b"Matplotlib" in _head(p)),
    "calibration": ("an attnlab calibration archive (no 'attnlab-calibration/1' header)", _is_calibration),
    "sweep-csv": ("an attnlab sweep table (its header is not w,num_pos,...)",
                  lambda p: _head(p, 64).startswith(b"w,num_pos,")),
}

Inputs = Iterable[tuple[str, os.PathLike | str | None]]  # (option naming it, path) pairs


@dataclass
class Claim:
    """The decision on one output: ``replace`` when earlier content will be removed by ``clear()``."""

    path: Path
    is_folder: bool
    replace: bool

    def clear(self) -> None:
        """Remove the earlier output (a folder's entries, but its lock file); call once all is validated."""
        if not self.replace:
            return
        if not self.is_folder:  # a file is replaced by its atomic write (attnlab.atomic), never removed first
            return
        for entry in self.path.iterdir():
            if entry.name == LOCK_NAME:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self.replace = False


def _resolved(path: os.PathLike | str) -> Path:
    return Path(path).expanduser().resolve()


def _existing_inputs(inputs: Inputs) -> list[tuple[str, Path]]:
    return [(option, _resolved(p)) for option, p in inputs if p is not None and Path(p).expanduser().exists()]


def _content(folder: Path) -> list[Path]:
    return [e for e in folder.iterdir() if e.name != LOCK_NAME]


def _check_writable(path: Path, option: str) -> None:
    probe = path if path.is_dir() else path.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{option} {path}: cannot write in {probe} (a file, not a folder)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path}: cannot write in {probe}")


def claim_folder(path: os.PathLike | str, *, kind: str, inputs: Inputs = (), force: bool = False,
                 option: str = "--out", hint: str = "use --force to replace it") -> Claim:
    """Decide whether the folder ``path`` may be written (and replaced); writes nothing."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path}: exists and is not a folder")
    _check_writable(path, option)
    where = _resolved(path)
    for name, inp in _existing_inputs(inputs):
        if inp == where:
            raise UserError(f"{option} {path}: is the input of {name}; choose another folder")
    if not path.is_dir() or not _content(path):
        return Claim(path, True, False)
    if not force:
        raise UserError(f"{option} {path}: folder exists and is not empty ({hint})")
    cwd = Path.cwd().resolve()
    if where == cwd or where in cwd.parents:
        raise UserError(f"--force: {path} is the current folder or one of its ancestors; refusing to delete it")
    for name, inp in _existing_inputs(inputs):
        if where in inp.parents:
            raise UserError(f"--force: {path} contains {inp.relative_to(where)}, the input of {name}; "
                            "refusing to delete it")
    what, is_kind = FOLDER_KINDS[kind]
    if not is_kind(path):
        raise UserError(f"--force: {path} is not {what}; refusing to delete it")
    return Claim(path, True, True)


def claim_file(path: os.PathLike | str, *, kind: str, inputs: Inputs = (), force: bool = False, option: str = "--out",
               new_folder: bool = False) -> Claim:
    """Decide whether the file ``path`` may be written (and replaced); writes nothing.

    ``kind``: what the command writes (``FILE_KINDS``); ``--force`` replaces only a file of that kind.
    ``new_folder``: the command creates the file's folder when it does not exist.
    """
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{option} {path}: is a folder, expected a file name")
    if path.parent.exists() and not path.parent.is_dir():
        raise UserError(f"{option}: {path.parent} exists and is not a folder")
    if not new_folder and not path.parent.is_dir():
        raise UserError(f"{option} {path}: the folder {path.parent} does not exist")
    _check_writable(path, option)
    where = _resolved(path)
    for name, inp in _existing_inputs(inputs):
        if inp == where or where in inp.parents:
            raise UserError(f"{option} {path}: is the input of {name}; writing it would destroy it")
    if path.exists() and not force:
        raise UserError(f"{option} {path}: exists (use --force to replace it)")
    what, is_kind = FILE_KINDS[kind]
    if path.exists() and not is_kind(path):
        raise UserError(f"--force: {path} is not {what}; refusing to replace it")
    return Claim(path, False, path.exists())


def write_folder(claim: Claim, write, option: str = "--out"):
    """Lock the claimed folder, clear the earlier output, then ``write()``; returns what ``write`` returns."""
    from attnlab.lock import FolderLock

    with FolderLock(claim.path, option):
        claim.clear()
        return write()


def claim_files(paths: dict[str, os.PathLike | str], **kw) -> list[Claim]:
    """``claim_file`` for each of several outputs, kind → path (all checked before any is written)."""
    return [claim_file(p, kind=kind, **kw) for kind, p in paths.items()]
