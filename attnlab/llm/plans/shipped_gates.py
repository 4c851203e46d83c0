"""The DuoAttention gates attnlab ships: one gate file per known model, found by name.

    shipped("smollm2-135m")   → Path of attnlab/gates/smollm2-135m.safetensors, or None
    catalogue()               → [(model, path)] of every shipped gate file
    known_name(model)         → "smollm2-135m" for a model ``load_causal_lm("smollm2-135m")`` loaded, else None

As DuoAttention's repository ships the gates it trained per model, ``duo-attention`` reads the file of the model it
runs when its option ``gates`` is not given (a user's own ``gates=`` wins).  The files are made by
``benchmarks/duo_attention_train.py`` (``benchmarks/recipes/duo-gates.sh``), each with the settings its metadata names
(``attnlab.schemas.gates``); a loaded model is known by the folder it was read from: the converted folder of a known
name in attnlab's cache (``loading.fetch_model``).
"""

from __future__ import annotations

from pathlib import Path

from attnlab.llm.models.shipped_files import ShippedFiles

__all__ = ["FOLDER", "catalogue", "known_name", "shipped"]

FOLDER = Path(__file__).resolve().parents[2] / "gates"   # attnlab/gates (package data)
SUFFIX = ".safetensors"


def shipped(model: str) -> Path | None:
    """The shipped gate file of the known model ``model``, or None."""
    return ShippedFiles(FOLDER, SUFFIX).path(model)


def catalogue() -> list[tuple[str, Path]]:
    """(model, path) of every shipped gate file, by model."""
    return ShippedFiles(FOLDER, SUFFIX).stems()


def known_name(model) -> str | None:
    """The known name (``loading.MODELS``) of a loaded transformers ``model``: the name of the cache folder it was read
    from (``config._name_or_path``), else None (a user's folder, a .gguf file, a model built in memory)."""
    from attnlab.errors import UserError
    from attnlab.llm.models.loading import MODELS, cache_dir

    where = str(getattr(getattr(model, "config", None), "_name_or_path", "") or "")
    if not where:
        return None
    path = Path(where)
    try:
        home = cache_dir().resolve()
    except UserError:   # the cache cannot exist: nothing was read from it
        return None
    return path.name if path.name in MODELS and path.parent.resolve() == home else None
