"""The experiment as a list of resumable stages, and the run folder they share.

A stage is a named function ``run(ctx) -> dict`` (JSON-ready).  The runner
calls the stages in order; each result is written atomically to
``OUT/stages/NAME.json`` (temporary file, then rename) the moment the stage
ends, so a run killed at any moment has a prefix of finished stages.  With
``resume=True`` a stage whose JSON exists is skipped and its result read back;
the first missing one runs again from its start (training stages continue
from their last checkpoint).

The run folder:

    OUT/experiment.json        the settings (checked on --resume)
    OUT/stages/*.json          one result per finished stage
    OUT/models/h1, h8, ...     the trained models (attnlab run folders)
    OUT/attention/*.safetensors   captured AttentionMaps
    OUT/figures/*.png          figures (embedded in the report)
    OUT/report.html, report.md, results.json
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from attnlab.atomic import write_text_atomic
from attnlab.errors import UserError
from attnlab.experiment.settings import Settings

__all__ = ["Context", "Stage", "run_stages", "check_folder", "prepare_folder", "write_json", "read_json", "MARKER"]

MARKER = "experiment.json"


def write_json(path: Path, obj: Any) -> Path:
    """Write ``obj`` as JSON atomically."""
    return write_text_atomic(path, json.dumps(obj, indent=1, ensure_ascii=False, allow_nan=True))


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@dataclass
class Context:
    """What the stages share: the folder, the settings, and the results so far."""

    out: Path
    settings: Settings
    resume: bool = False
    results: dict[str, dict] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=dict)  # in-memory objects (corpora, runs) of this process
    log: Callable[[str], None] = lambda message: None

    def path(self, *parts: str) -> Path:
        p = self.out.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p


@dataclass(frozen=True)
class Stage:
    name: str
    title: str
    run: Callable[[Context], dict]


def _writable_probe(out: Path) -> Path:
    probe = out if out.is_dir() else out.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def check_folder(out: Path, settings: Settings, resume: bool, force: bool) -> Settings:
    """Check the run folder; writes nothing.  Returns the settings to use (the saved ones on resume).

    Refuses: --resume with --force; an existing non-empty folder without either;
    --resume of a folder that is not an experiment or of a different one;
    --force on a non-empty folder that is not an experiment (never deletes user files);
    a folder that cannot be written.
    """
    out = Path(out)
    if resume and force:
        raise UserError("--resume and --force exclude each other")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    marker = out / MARKER
    probe = _writable_probe(out)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"--out {out}: cannot write in {probe}")
    if resume:
        if not marker.is_file():
            raise UserError(f"--resume: {out} is not an experiment run folder (no {MARKER})")
        saved = Settings.from_dict(read_json(marker))
        if (saved.data, saved.quick, saved.deep) != (settings.data, settings.quick, settings.deep):
            raise UserError(f"--resume: {out} is an experiment with --data {saved.data}"
                            f"{' --quick' if saved.quick else ''}{' --deep' if saved.deep else ''}"
                            "; give the same options")
        return saved
    _claim(out, settings, force)
    return settings


def _claim(out: Path, settings: Settings, force: bool):
    from attnlab.data.spec import corpus_paths
    from attnlab.outputs import claim_folder

    return claim_folder(out, kind="experiment", inputs=[("--data", p) for p in corpus_paths(settings.data)],
                        force=force, hint="use --resume to continue it or --force to replace it")


def prepare_folder(out: Path, settings: Settings, resume: bool, force: bool) -> Settings:
    """``check_folder``, then (not resuming) empty the folder on --force, create it, write the settings."""
    out = Path(out)
    settings = check_folder(out, settings, resume, force)
    if resume:
        return settings
    _claim(out, settings, force).clear()  # force, and an experiment folder (checked)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"--out {out}: cannot create the folder ({err.strerror})") from None
    write_json(out / MARKER, settings.to_dict())
    return settings


def run_stages(stages: list[Stage], ctx: Context,
               on_event: Callable[[str, Stage, float, str], None] | None = None) -> dict[str, dict]:
    """Run (or, on resume, skip) each stage; ``on_event(kind, stage, seconds, note)`` with kind
    in {"start", "done", "skipped"}.  Returns ``ctx.results``."""
    on_event = on_event or (lambda *a: None)
    for stage in stages:
        path = ctx.out / "stages" / f"{stage.name}.json"
        if ctx.resume and path.is_file():
            ctx.results[stage.name] = read_json(path)
            on_event("skipped", stage, ctx.results[stage.name].get("_seconds", 0.0), "done earlier")
            continue
        on_event("start", stage, 0.0, "")
        t0 = time.perf_counter()
        result = stage.run(ctx)
        result["_seconds"] = round(time.perf_counter() - t0, 2)
        write_json(path, result)
        ctx.results[stage.name] = result
        on_event("done", stage, result["_seconds"], result.get("_note", ""))
    return ctx.results
