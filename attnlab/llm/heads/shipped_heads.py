"""The head detectors attnlab ships: one compact ``heads.json`` per known model, found by name.

    shipped("smollm2-135m")   → Path of attnlab/heads_shipped/smollm2-135m.json, or None
    catalogue()               → [(model, path)] of every shipped file
    ship(heads_json, model)   → the compact file written into the package (``benchmarks/recipes/shipped-heads.sh``)

As the calibrations ship (``attnlab.llm.calibration.shipped``), ``attnlab attention --hf MODEL --file TEXT``
reads the shipped file of MODEL when ``--heads`` is not given, so that its explorer names every head the detectors
name (s_lh ≥ θ_d, ``attnlab.llm.heads.heads_file``); a user's ``--heads FILE`` wins.  A shipped file is the
``heads.json`` of ``attnlab heads`` (format ``attnlab-heads/1``, read through ``attnlab.schemas.heads_file``) with
only what the explorer reads: the L × H table of each detector, the thresholds, the named heads, and in ``meta`` the
command that made it and the model's shape read from its configuration (``num_layers``, ``num_heads``), which the
tables cover.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from attnlab.errors import UserError
from attnlab.llm.models.shipped_files import ShippedFiles

__all__ = ["FOLDER", "SUFFIX", "catalogue", "ship", "shipped"]

FOLDER = Path(__file__).resolve().parents[2] / "heads_shipped"   # attnlab/heads_shipped (package data)
SUFFIX = ".json"
META = ("command", "seconds", "samples", "repeats", "seed", "prompts", "copy_accuracy", "exclude_bos",
        "exclude_current")                         # what a shipped file keeps of its meta
DROPPED = {"--out": 1, "--force": 0, "--quiet": 0}   # options of the command that change no score: (option, values)


def shipped(model) -> Path | None:
    """The shipped detectors file of the known model ``model`` (a name of ``attnlab models list``), or None."""
    return ShippedFiles(FOLDER, SUFFIX).path(model)


def catalogue() -> list[tuple[str, Path]]:
    """(model, path) of every shipped detectors file, by model."""
    return ShippedFiles(FOLDER, SUFFIX).stems()


def _command(text: str) -> str:
    """The command without the options that change no score (``DROPPED``: where it was written, --force, --quiet)."""
    words, out = shlex.split(text), []
    while words:
        w = words.pop(0)
        name, eq, _ = w.partition("=")
        if name in DROPPED:
            del words[: 0 if eq else DROPPED[name]]
            continue
        out.append(w)
    return shlex.join(out)


def _shape(model: str) -> dict:
    """{"num_layers", "num_heads"} of the known ``model`` from its configuration in the model cache (no weights)."""
    from attnlab.llm.models.loading import cache_dir

    path = cache_dir() / model / "config.json"
    if not path.is_file():
        raise UserError(f"{model}: no configuration at {path}; run `attnlab heads --hf {model}` first")
    config = json.loads(path.read_text(encoding="utf-8"))
    config = config.get("text_config", config)
    return {"num_layers": int(config["num_hidden_layers"]), "num_heads": int(config["num_attention_heads"])}


def ship(heads_json, model: str, folder: Path | None = None) -> Path:
    """Write ``folder/MODEL.json`` (default: the package's ``FOLDER``): the detectors of ``heads_json`` (written by
    ``attnlab heads --hf MODEL``) for the known ``model``, compact (module docstring); checked by the schema and
    against the model's shape before it is written."""
    from attnlab.llm.heads.heads_file import read_detector_scores
    from attnlab.llm.models.loading import MODELS
    from attnlab.schemas import heads_file as schema

    if model not in MODELS:
        raise UserError(f"{model}: not a known model ({', '.join(MODELS)})")
    d = schema.load(heads_json, detectors=True)
    if d.model != model:
        raise UserError(f"{heads_json}: made for {d.model!r}, not {model!r}")
    shape = _shape(model)
    read_detector_scores(heads_json, shape["num_layers"], shape["num_heads"], option=str(heads_json))  # its shape
    meta = {k: d.meta[k] for k in META if k in d.meta}
    if "command" in meta:
        meta["command"] = _command(meta["command"])
    doc = {"format": d.format, "model": d.model, "n": d.n, "detectors": d.detectors, "thresholds": d.thresholds,
           "named": [x.model_dump() for x in d.named], "meta": {**meta, **shape}}
    path = Path(folder or FOLDER) / f"{model}{SUFFIX}"
    path.parent.mkdir(parents=True, exist_ok=True)
    from attnlab.atomic import write_text_atomic

    write_text_atomic(path, json.dumps(doc, separators=(",", ":")) + "\n")
    schema.load(path, detectors=True)   # as it will be read
    return path
