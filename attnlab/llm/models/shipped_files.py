"""Files attnlab ships for its known models (package data): one folder a kind, one file a model, found by name.

    GATES = ShippedFiles(FOLDER, ".safetensors")
    GATES.path("smollm2-135m")           → …/smollm2-135m.safetensors, or None (not shipped, or not a known name)
    GATES.path("smollm2-135m", 2048)     → …/smollm2-135m-2048.safetensors (a file per model and length)
    GATES.stems()                        → [(stem, path)] of every shipped file, by stem

A name that is not one of ``loading.MODELS`` (a folder, a hub name, a .gguf path) has no shipped file.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

__all__ = ["ShippedFiles"]


class ShippedFiles(NamedTuple):
    folder: Path     # the package folder of one kind of file (calibrations, gates, head detectors)
    suffix: str      # ".safetensors", ".json"

    def path(self, model, *parts) -> Path | None:
        """The shipped file of the known model ``model`` (and ``parts``, e.g. a length: ``model-n``), or None."""
        from attnlab.llm.models.loading import MODELS

        if str(model) not in MODELS:
            return None
        path = self.folder / ("-".join([str(model), *map(str, parts)]) + self.suffix)
        return path if path.is_file() else None

    def stems(self) -> list[tuple[str, Path]]:
        """(stem, path) of every shipped file, by stem (the name without the suffix)."""
        return sorted((p.name[: -len(self.suffix)], p) for p in self.folder.glob(f"*{self.suffix}"))
