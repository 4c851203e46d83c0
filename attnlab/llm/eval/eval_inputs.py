"""``attnlab eval``'s files and output folder, checked before the model loads and before anything is written.

    an input file (--haystack FILE, --calibrate, --ppl):  exists · a file, not a folder · UTF-8 text, not empty,
            not binary
    --out:  new · an empty folder · an eval folder (``config.json`` of format attnlab-eval/1, read through its schema
            ``attnlab.schemas.eval_config``) of the same model and
            settings (a later run may add tasks, lengths, methods and budgets: ``GROWS``) — never a folder of a user's
            files, nor a place that cannot be written
    the texts against the tokenizer (``run_eval``, before ``config.json``): --calibrate and --ppl, read once before
            the model loads (``read_input_text``, by ``check_settings``) and tokenised once (``token_texts``), hold one
            window of n tokens at every length n

Each refusal is one ``UserError`` line naming the option; none of these checks writes anything.  A folder continued has
its config.json, results rows and wall lines read through their schemas (``attnlab.schemas``) here, before the model
loads: a hand-edited line is refused before a row is added to it.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from attnlab.errors import UserError

if TYPE_CHECKING:   # torch: imported once the model loads, never by the checks before it
    from attnlab.llm.models.text_windows import TokenText

__all__ = ["GridTexts", "check_eval_folder", "check_input_file", "read_input_text", "token_texts"]


def check_input_file(option: str, path) -> Path:
    """``path`` when it is a readable UTF-8 text file (plain or .gz); a one-line refusal naming ``option`` otherwise."""
    read_input_text(option, path)
    return Path(path)


def read_input_text(option: str, path) -> str:
    """The text of the file ``path`` that ``option`` names (plain or .gz), read once; a one-line refusal naming
    ``option`` when it is missing, a folder, a FIFO or device (never opened), empty, binary, not UTF-8 or unreadable."""
    from attnlab.option_paths import input_file
    from attnlab.textfile import read_text_file

    p = input_file(option, path)           # missing, a folder, a FIFO or device: named as such, never opened
    try:
        return read_text_file(p)
    except (UserError, OSError) as err:   # empty, binary, not UTF-8, a corrupt gzip, unreadable
        raise UserError(f"{option} {err}") from None


def check_eval_folder(out, settings) -> dict | None:
    """The ``config.json`` of the eval run already in ``out`` (None: a new or empty folder), after checking that
    ``settings`` may continue it: same format, same model, same settings but those a later run may grow."""
    from attnlab.llm.eval.results_file import FORMAT, GROWS
    from attnlab.lock import LOCK_NAME
    from attnlab.outputs import _check_writable
    from attnlab.schemas import eval_config

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: is a file, not a run folder")
    _check_writable(out, "--out")                     # below a file, or in a folder that cannot be written
    held = [e for e in out.iterdir() if e.name != LOCK_NAME] if out.is_dir() else []
    if all(re.fullmatch(r"calibration-\d+\.npz", e.name) for e in held):   # new, empty, or eval's own calibration
        return None                                                          # cache put there first (a recipe's copy)
    path = out / "config.json"
    if not path.is_file():
        raise UserError(f"--out {out}: holds files that are not an attnlab eval run (no config.json of format "
                        f"{FORMAT}); give a new or empty folder")
    try:
        old = eval_config.load(path).model_dump()          # every field, range and rule of the folder's settings
    except UserError as err:
        raise UserError(f"--out {out}: not an attnlab eval run of format {FORMAT} that can continue ({err})") from None
    if old.get("model") != settings.model:
        raise UserError(f"--out {out}: holds the eval of model {old.get('model')!r}, not {settings.model!r}; "
                        "use another --out")
    cfg = {"format": FORMAT, **asdict(settings)}
    diff = sorted(k for k in cfg if k not in GROWS and old.get(k) != cfg[k])
    if diff:
        raise UserError(f"--out {out}: holds an eval run with other settings ({', '.join(diff)}); use another --out")
    from attnlab.schemas.result_row import ROW, WALL, read_rows

    for rows in [out / "results.jsonl", *sorted(out.glob("results.rank*.jsonl"))]:
        read_rows(rows, ROW, "--out")      # the rows it continues, through their schema (a torn last one: a kill)
    read_rows(out / "wall.jsonl", WALL, "--out")                       # nothing written before a bad line is refused
    return old


class GridTexts(NamedTuple):
    """The texts the grid reads, each read and tokenised once (``TokenText``): ``calibration`` (--calibrate, when a
    method is calibrated) and ``ppl`` (--ppl); None where not read."""

    calibration: TokenText | None
    ppl: TokenText | None


def token_texts(tokenizer, lengths: list[int], texts: dict, calibrate: str | None, ppl: str | None) -> GridTexts:
    """--calibrate (None unless a method is calibrated) and --ppl, their ``texts`` (read once, ``check_settings``)
    tokenised once, each holding one window of n tokens at every length n (the longest checked: the shorter ones fit
    too); a one-line UserError naming the option."""
    from attnlab.llm.models.text_windows import TokenText

    tokens = {}
    for option, path in (("--calibrate", calibrate), ("--ppl", ppl)):
        try:
            tokens[option] = TokenText.of_text(tokenizer, texts[option], path) if path else None
            if path:
                tokens[option].windows(max(lengths), 1)
        except UserError as err:
            raise UserError(f"{option} {err}") from None
    return GridTexts(tokens["--calibrate"], tokens["--ppl"])
