"""``attnlab eval``: retrieval (RULER-style tasks, needle grids) and perplexity of a model under methods.

    attnlab eval --hf smollm2-135m --task niah --lengths 2048,4096 --depths 11 --samples 10 \\
        [--method streaming-llm,attnlab --budget 0.1,0.25 --calibrate train.txt.gz | --plan plan.json] \\
        [--haystack noise|FILE] [--ppl test.txt.gz] --out runs/eval

Writes ``OUT/results.jsonl`` (one line per prompt, resumable), ``OUT/table.md``, ``OUT/summary.json`` and
``OUT/heatmap-TASK-METHOD-β.png`` (accuracy by needle depth × length); full attention always runs as the
ceiling.  A killed run started again with the same options continues where it stopped.  Methods whose
prefill is full attention (full, snapkv, quest) share each prompt's prefill, and a prompt reuses the prefix
it shares with the previous one (``--no-reuse``: not; the answers are the same, ``OUT/wall.jsonl`` the times).
``torchrun --nproc_per_node N -m attnlab eval …``: the ranks share the prompts (``llm.eval.ranks``), each writes
``OUT/results.rank{r}.jsonl``, rank 0 folds them into ``OUT/results.jsonl`` and writes the table.  Every option
and input is checked before the model loads and before ``torch.distributed`` starts: an error is said once, by rank
0 (``ranks.says_errors``), and every rank exits 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from attnlab.cli.options import checked

DEFAULT_HAYSTACK = Path("../shared/data/shakespeare/test.txt.gz")


@checked("eval")
def eval_command(
    hf: str = typer.Option(..., "--hf", help="model: a HF folder, a .gguf file or a known name (smollm2-135m, "
                           "gemma3-270m)"),
    task: str = typer.Option("niah", "--task", help="comma list of tasks: niah, niah-words, niah-uuids, niah-multikey, "
                             "niah-multivalue, niah-multiquery, vt, cwe, passkey, passkey-once, passkey-bare, "
                             "passkey-varied"),
    lengths: str = typer.Option("2048", "--lengths", help="comma list of prompt lengths in tokens, e.g. 2048,4096"),
    depths: int = typer.Option(11, "--depths", help="needle depths from 0 to 100 %, evenly spaced"),
    samples: int = typer.Option(10, "--samples", help="prompts per (task, length, depth)"),
    method: str = typer.Option("", "--method", help="comma list of methods besides full (attnlab methods lists them)"),
    budget: str = typer.Option("0.1", "--budget", help="comma list of budgets β, fractions of the causal entries read "
                               "(above zero, at most one), e.g. 0.1,0.25"),
    plan: Optional[Path] = typer.Option(None, "--plan", help="a plan file (attnlab plan) run beside full"),
    haystack: str = typer.Option(str(DEFAULT_HAYSTACK), "--haystack", help="'noise' (RULER's sentences) or a text "
                                 "file (plain or .gz)"),
    calibrate: Optional[Path] = typer.Option(None, "--calibrate", help="calibration text for calibrated methods "
                                             "(never the haystack) [default: the calibration attnlab ships for a "
                                             "known model and length: attnlab calibrations]"),
    calibrate_windows: int = typer.Option(2, "--calibrate-windows", help="calibration windows per length"),
    calibrate_mix: Optional[str] = typer.Option(None, "--calibrate-mix", help="synthetic retrieval prompts added to "
                                                "the calibration, a comma list of task:count (tasks of --task); "
                                                "errors on their answer rows"),
    ppl: Optional[Path] = typer.Option(None, "--ppl", help="text whose perplexity is reported beside (plain or .gz)"),
    ppl_windows: int = typer.Option(1, "--ppl-windows", help="windows of --ppl scored per length"),
    seed: int = typer.Option(0, "--seed", help="seed of the prompts (keys, values, depths of distractors)"),
    max_new: Optional[int] = typer.Option(None, "--max-new", help="answer tokens [default: the task's]"),
    template: str = typer.Option("auto", "--template", help="chat: the model's chat template around the prompt "
                                 "(refused without one); none: plain text; auto: chat where the model has one"),
    question: str = typer.Option("after", "--question", help="the question after the context or before it"),
    out: Path = typer.Option(Path("runs/eval"), "--out", help="run folder (results.jsonl, table.md, heatmaps)"),
    no_reuse: bool = typer.Option(False, "--no-reuse", help="every answer its own prefill: no full-attention prefill "
                                  "shared by full, snapkv and quest, no prefix shared with the previous prompt (same "
                                  "answers, slower)"),
    device: str = typer.Option("cpu", "--device", help="cpu (float32), cuda (bfloat16, FlexAttention) or auto (cuda "
                               "when one is visible); under torchrun each rank takes its local GPU"),
    backend: str = typer.Option("auto", "--backend", help="the execution seam's backend: auto (the device's own: cpu "
                                "on the CPU, flex on CUDA), cpu or flex"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress (bars in a terminal, a line per stage otherwise); "
                               "errors still said"),
) -> None:
    """Retrieval accuracy on a depth × length grid, and perplexity, of a model under methods (resumable)."""
    from attnlab.llm.eval.eval_settings import EvalSettings, check_settings, parse_budgets, parse_lengths, parse_methods
    from attnlab.option_values import items

    settings = EvalSettings(
        model=hf, tasks=items(task, "--task"), lengths=parse_lengths(lengths), depths=depths,
        samples=samples, methods=parse_methods(method), budgets=parse_budgets(budget),
        plan=str(plan) if plan else None, haystack=haystack, seed=seed,
        calibrate=str(calibrate) if calibrate else None, calibrate_windows=calibrate_windows,
        calibrate_mix=calibrate_mix, ppl=str(ppl) if ppl else None, ppl_windows=ppl_windows, max_new=max_new,
        template=template, question=question)
    from attnlab.llm.eval.eval_inputs import check_eval_folder
    from attnlab.llm.models.loading import check_length, resolve_spec

    resolve_spec(hf)                                                      # an unknown model: one line, no download
    if haystack != "noise" and not Path(haystack).exists() and Path(haystack) == DEFAULT_HAYSTACK:
        raise ValueError(f"--haystack {haystack}: no such file (the default Shakespeare text is looked for beside the "
                         f"repository: give --haystack FILE or noise)")
    from attnlab.option_paths import input_file, output_folder

    if plan is not None:
        from attnlab.llm.methods import is_registered
        from attnlab.llm.plans.plan import Plan

        input_file("--plan", plan)                                        # a folder, a FIFO or device: never opened
        the_plan = Plan.load(plan, "--plan", is_registered)               # a malformed file: one line
        for n in settings.lengths:                                        # another length: one line
            the_plan.check_length(n, f"--plan {plan}")
    checked = check_settings(settings)   # every option but the model's context, once, and the texts read once:
    #                                      missing, a folder, empty, binary, not UTF-8 (run_eval takes only this)
    from attnlab.llm.eval.before_model import check_method_inputs, check_text_sizes

    check_method_inputs(settings.methods)                                 # a method's own files (a gate file) present
    check_text_sizes(checked)                                             # a one-sentence text: short in any tokenizer
    output_folder("--out", out)                                           # a file, a FIFO, an unwritable folder: named
    check_eval_folder(out, settings)                                      # a user's folder, another model's eval
    check_length(hf, max(settings.lengths), "--lengths")                  # the model's context, from its configuration
    from attnlab.llm.models.device import check_device

    dev = check_device(device)                                            # cuda without CUDA (torch: cuda, auto only)
    from attnlab.llm.execution.backend_names import check_backend

    check_backend(backend, dev)                                           # a backend this device cannot run: one line
    from attnlab.llm.execution.backend import use_backend

    use_backend(backend, dev)                                             # the device's layers run by the backend named
    from attnlab.llm.eval.ranks import Ranks

    ranks = Ranks.from_env()                                              # torchrun's RANK, WORLD_SIZE (else 0, 1)
    if ranks.world > 1:   # torchrun's ranks share the folder by design: each writes its own rank file, rank 0 folds
        return _run(hf, checked, out, dev, ranks, quiet, no_reuse)
    from attnlab.lock import FolderLock

    with FolderLock(out):                                                 # one eval per folder: a second refused
        return _run(hf, checked, out, dev, ranks, quiet, no_reuse)


def _run(hf, checked, out, dev, ranks, quiet: bool, no_reuse: bool):
    """The checked eval: load the model, run the grid into ``out``, fold the ranks' rows, write the report."""
    import time

    from attnlab.llm.eval.eval_grid import read_results, run_eval
    from attnlab.llm.eval.eval_report import markdown, write_report
    from attnlab.llm.eval.ranks import fold_results
    from attnlab.llm.models.loading import load_causal_lm
    from attnlab.progress import Progress

    settings = checked.settings
    progress = Progress.for_command(quiet or ranks.rank > 0)              # bars in a terminal, else a line per stage
    model, tokenizer = load_causal_lm(hf, progress=progress, device=dev)  # run_eval checks the texts before any write
    from attnlab.cli.plan import check_model_fits

    check_model_fits(model, max(settings.lengths), dev, f"--lengths {max(settings.lengths)} on {dev}")
    ranks.init_group()                                                    # torchrun: a gloo group, the merge's barrier
    t0 = time.time()
    progress.stage("eval: the prompts of every task and length, and the texts, checked before anything is written")
    rows = run_eval(model, tokenizer, checked, out, progress=progress, reuse=not no_reuse)
    ranks.barrier()
    if not ranks.merges():                                                # a rank's share written; rank 0 merges
        typer.echo(f"rank {ranks.rank} of {ranks.world}: {len(read_results(ranks.results_path(out)))} rows in "
                   f"{ranks.results_path(out)}, {time.time() - t0:.0f} s this run")
        return ranks.close()
    rows = fold_results(out)                                              # the rank files folded into results.jsonl
    ranks.close()
    progress.stage(f"writing {out}: table.md, summary.json, heatmaps")
    summary = write_report(rows, out)
    typer.echo(markdown(summary), nl=False)
    typer.echo(f"{out}: {len(rows)} rows ({len(read_results(out / 'results.jsonl'))} in results.jsonl), "
               f"{time.time() - t0:.0f} s this run; table.md, summary.json, {len(summary['figures'])} heatmaps")
    from attnlab.llm import methods as registry
    from attnlab.llm.eval.eval_verdict import verdict_lines

    for line in verdict_lines(rows, out, registry.DEFAULT):               # the default against full; a loss explained
        typer.echo(line)


@checked("methods")
def methods_command(every: bool = typer.Option(False, "--all", help="also the parts and their shares of β, every "
                                                   "option, the presets, the research variants")) -> None:
    """The recommended default as its parts and the methods to compare it against (--all: everything registered)."""
    from attnlab.llm.methods.overview import overview

    for line in overview(every):
        typer.echo(line)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
    app.command("methods")(methods_command)
