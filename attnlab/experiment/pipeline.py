"""``run_experiment``: the whole experiment, stage by stage, into one run folder.

    1  train-h1, train-h8 [, train-deep]   the thesis's models (attnlab.train)
    2  evaluate        BLEU, chrF, sample translations
    3  capture         16-token sentence + evaluation set; Figures 11–12
    4  roles           head roles (Voita et al.)
    5  tables          Tables 16/17: random search vs optimal fit; w × num_pos sweep
    6  choices         automatic (w, num_pos) per head and per model
       estimate-w      per-language ŵ and num_pos; recovery of max_reorder
    7  spectra         singular values, ranks
    8  mechanisms      forward time of every mechanism at the corpus's lengths
       surgery         BLEU before/after head surgery, entries kept
    9  report          report.html, report.md, results.json

Each stage's result is a JSON file in ``OUT/stages`` (see
``attnlab.experiment.stages``); ``resume=True`` skips the finished ones.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from attnlab.experiment.attention import capture_stage, roles_stage
from attnlab.experiment.choices import choices_stage
from attnlab.experiment.corpus import check_corpus
from attnlab.experiment.estimate_w import estimate_w_stage
from attnlab.experiment.head_surgery import surgery_stage
from attnlab.experiment.mechanisms_compare import mechanisms_stage
from attnlab.experiment.settings import Settings, settings_for
from attnlab.experiment.spectra import spectra_stage
from attnlab.experiment.stages import Context, Stage, check_folder, prepare_folder, run_stages
from attnlab.experiment.tables import tables_stage
from attnlab.experiment.thesis_models import thesis_models
from attnlab.experiment.training import evaluate_stage, train_stage
from attnlab.lock import FolderLock

__all__ = ["build_stages", "run_experiment"]


def build_stages(settings: Settings) -> list[Stage]:
    """The stages of an experiment with ``settings``, in order."""
    from attnlab.experiment.report import report_stage

    models = thesis_models(settings)
    h8 = [m for m in models if m.name == "h8"][0]
    stages = [Stage(f"train-{m.name}", f"train {m.name}", train_stage(m)) for m in models]
    stages += [
        Stage("evaluate", "BLEU, chrF, samples", evaluate_stage(models)),
        Stage("capture", "attention, Figs 11–12", capture_stage(models)),
        Stage("roles", "head roles", roles_stage(models)),
        Stage("tables", "Tables 16/17, sweep", tables_stage(models)),
        Stage("choices", "(w, num_pos) per head", choices_stage(models)),
        Stage("estimate-w", "per-language ŵ", estimate_w_stage(models)),
        Stage("spectra", "spectra", spectra_stage(models)),
        Stage("mechanisms", "mechanism speed", mechanisms_stage(h8.name)),
        Stage("surgery", "head surgery", surgery_stage(models)),
        Stage("report", "report", report_stage),
    ]
    return stages


def run_experiment(
    data: str = "synthetic",
    out: str | os.PathLike = "runs/experiment",
    *,
    quick: bool = False,
    resume: bool = False,
    force: bool = False,
    deep: bool = False,
    show_progress: bool = False,
) -> dict:
    """Run the experiment (module docstring) into ``out``; returns the results of every stage.

    Everything the user can get wrong (the folder, the corpus) is checked before
    anything is written: ``UserError`` with a one-line message.
    """
    import dataclasses

    settings = dataclasses.replace(settings_for(data, quick), deep=deep)
    out = Path(out)
    settings = check_folder(out, settings, resume, force)  # nothing written yet
    check_corpus(settings)
    with FolderLock(out):  # one writer: a second experiment on the same folder is refused
        settings = prepare_folder(out, settings, resume, force)
        ctx = Context(out=out, settings=settings, resume=resume)
        stages = build_stages(settings)
        t0 = time.perf_counter()
        if show_progress:
            from attnlab.experiment.display import StageDisplay

            with StageDisplay(stages, out) as display:
                results = run_stages(stages, ctx, display.event)
        else:
            results = run_stages(stages, ctx)
    results["_total_seconds"] = round(time.perf_counter() - t0, 1)
    return results
