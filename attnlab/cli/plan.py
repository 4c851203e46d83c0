"""``attnlab plan`` and ``attnlab plan-run``: per-head structured plans of a real LLM.

    attnlab plan --hf MODEL --calibrate train.txt.gz --budget 0.1 [--n 2048] [--windows 2]
        [--method attnlab-band|attnlab|…] [--pages K] [--slashes S] [--out PLAN.json]
    attnlab plan-run --hf MODEL --plan PLAN.json --file test.txt.gz [--n 2048] [--windows 1]

``plan`` calibrates on the text (exact attention, streamed in blocks of rows), chooses one
support per (layer, head) under the budget and writes the plan as JSON (by default next to the
model: ``MODEL/attnlab-plan-<method>-<budget>-<n>.json`` for a model folder).  ``plan-run``
applies a plan file and prints the perplexity of the planned and of the full model.
``--pages K``: the plan's planned heads read back K pages of evicted keys per decoding query
(``Plan.pages``; the method option ``pages=K`` says the same; the prefill, and so plan-run, is unchanged).
``--slashes S``: every planned head also reads, at the prefill, the S diagonals beyond its band of largest mass from
the last queries, chosen per input (``HeadPlan.slashes``); the method option ``slashes=S`` says the same: the method
takes their entries from the budget before choosing the rest (attnlab and attnlab-retrieval take it).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional

import typer

from attnlab.cli.options import checked
from attnlab.outputs import claim_file


def check_model_fits(model, n: int, device, what: str, batch: int = 1) -> None:
    """Refuse before the run (one line: bytes needed and free) a length whose caches and masks will not fit the
    device."""
    from attnlab.llm.models.device import check_fits, plan_bytes
    from attnlab.llm.plans.plan import model_shape

    check_fits(plan_bytes(model_shape(model), n, batch, next(model.parameters()).element_size()), device, what)


def make_plan(model, tokenizer, calibrate: Path, budget: float, n: int, windows: int, method: str,
              mix: str | None = None, slashes: int = 0, progress=None):
    """The plan of the registered ``method`` at ``budget`` and length n; a calibrated method first calibrates
    ``model`` on ``windows`` windows of n tokens of ``calibrate`` (with the candidates and gradients it asks for),
    and on the synthetic retrieval prompts of ``mix`` (``calibration.mix``), written into the plan's meta.
    ``slashes`` > 0: the method's option ``slashes`` (a method without it refuses); ``progress``:
    the calibration's bar."""
    from attnlab.llm import methods
    from attnlab.llm.calibration.build import build_calibration
    from attnlab.llm.calibration.mix import parse_mix
    from attnlab.llm.eval.eval_settings import parse_method
    from attnlab.llm.models.text_windows import token_windows
    from attnlab.progress import SILENT

    name, opts = parse_method(method)
    m = methods.get(name, budget, **opts, **({"slashes": slashes} if slashes else {}))
    cal = None
    if m.calibrated:
        cal, _ = build_calibration(model, tokenizer, [m], n, calibrate, windows, parse_mix(mix),
                                   progress=progress or SILENT)
    else:
        token_windows(tokenizer, calibrate, n, windows)   # the calibration text is checked for every method
    p = m.make_plan(model, n, cal)
    if mix and hasattr(p, "meta"):
        p.meta["calibrate_mix"] = mix
    return p


@checked("plan")
def plan_command(
    hf: str = typer.Option(..., "--hf",
                           help="model: a HF folder, a .gguf file or a known name (smollm2-135m, gemma3-270m)"),
    calibrate: Path = typer.Option(..., "--calibrate", help="calibration text (plain or .gz)"),
    budget: float = typer.Option(0.1, "--budget", help="fraction of causal attention entries kept, in (0, 1]"),
    n: int = typer.Option(2048, "--n", help="window length in tokens (the length the budget refers to)"),
    windows: int = typer.Option(2, "--windows", help="calibration windows"),
    calibrate_mix: Optional[str] = typer.Option(None, "--calibrate-mix",
                                                help="synthetic retrieval prompts added to the calibration, "
                                                     "a comma list of task:count (tasks of --task); "
                                                     "errors on their answer rows"),
    method: str = typer.Option("attnlab-band", "--method",
                               help="a registered method or preset with a plan file, options as name:key=value, "
                                    "e.g. attnlab (the recommended default) or attnlab-retrieval:tail=T"),
    pages: int = typer.Option(0, "--pages",
                              help="pages of 16 evicted keys each planned head reads back per decoding query "
                                   "(0 = none)"),
    slashes: int = typer.Option(0, "--slashes",
                                help="diagonals beyond its band each planned head reads at the prefill, "
                                     "chosen per input from the last queries; their entries come out of the budget "
                                     "(0 = none)"),
    out: Optional[Path] = typer.Option(None, "--out", help="plan file (.json) [default: next to the model]"),
    force: bool = typer.Option(False, "--force", help="replace an existing plan file"),
    device: str = typer.Option("cpu", "--device",
                               help="cpu (float32), cuda (bfloat16, FlexAttention) or auto (cuda when one is visible)"),
    quiet: bool = typer.Option(False, "--quiet",
                               help="no progress (bars in a terminal, a line per stage otherwise); errors still said"),
) -> None:
    """Choose one structured support per (layer, head) from calibration text under a budget; write it as JSON."""
    from attnlab.llm.eval.eval_settings import parse_method
    from attnlab.llm.models.loading import check_length
    from attnlab.llm.plans.limits import check_budget

    try:
        check_budget(budget)
    except ValueError:
        raise ValueError(f"--budget: must be a fraction in (0, 1], got {budget}") from None
    from attnlab.llm.models.device import check_device

    name, opts = parse_method(method)         # the options first: they need no file and no model
    if pages and "pages" in opts:
        raise ValueError(f"--pages {pages}: --method {method} gives its pages already (give one of them)")
    if slashes and "slashes" in opts:
        raise ValueError(f"--slashes {slashes}: --method {method} gives its slashes already (give one of them)")
    if pages or slashes:   # a method without the option, or a preset fixing another value, refuses here
        from attnlab.errors import UserError
        from attnlab.llm import methods

        extra = {**({"pages": pages} if pages else {}), **({"slashes": slashes} if slashes else {})}
        try:
            methods.get(name, budget, **opts, **extra)
        except UserError as e:
            flag = "--pages" if pages and "pages" in str(e) else "--slashes" if slashes else "--pages"
            raise ValueError(f"{flag}: {str(e).removeprefix('--option ').removeprefix('--method ')}") from None
    dev = check_device(device)                # cuda without CUDA:
                                              # one line, before anything is read or written (torch: cuda, auto)
    from attnlab.llm.eval.eval_inputs import check_input_file
    from attnlab.llm.models.loading import resolve_spec

    resolve_spec(hf)                          # an unknown model: one line, no download tried
    check_input_file("--calibrate", calibrate)   # missing, a folder, empty, binary: one line before the model loads
    if out is None:
        folder = Path(hf) if Path(hf).is_dir() else Path(".")
        out = folder / f"attnlab-plan-{method.replace(':', '-').replace('=', '')}-{budget:g}-{n}.json"
    from attnlab.option_paths import output_file

    output_file("--out", out)                 # a folder, a FIFO or device, an unwritable folder: named, one line
    # refused before the model loads
    claim_file(out, kind="plan", inputs=[("--calibrate", calibrate), ("--hf", hf)], force=force)
    check_length(hf, n, "--n")  # from the model's configuration: no weights loaded, no text read
    from attnlab.progress import Progress

    progress = Progress.for_command(quiet)
    from attnlab.llm.models.loading import load_causal_lm

    model, tokenizer = load_causal_lm(hf, progress=progress, device=dev)
    check_model_fits(model, n, dev, f"--n {n} on {dev}")
    p = make_plan(model, tokenizer, calibrate, budget, n, windows, method, calibrate_mix, slashes, progress)
    if pages:
        p.pages = pages
    p.save(out)
    most = max(h.slashes for r in p.heads for h in r) if p.slash_heads() else 0
    lines = f"{p.slash_heads()} with {most} slash lines, " if p.slash_heads() else ""
    # K → heads (retrieval, others)
    counts = Counter(h.blocks for r in p.heads for h in r if h.blocks and not h.is_full)
    lines += "".join(f"{c} with {K} key blocks, " for K, c in sorted(counts.items(), reverse=True))
    voting = [h.kept for r in p.heads for h in r if h.kept]   # retrieval heads decoding from their tail's voted keys
    lines += f"{len(voting)} decoding from {max(voting)} voted keys, " if voting else ""
    lines += f"{p.pages} pages read back a step, " if p.pages else ""
    typer.echo(f"{out}: {p.num_layers}×{p.num_heads} heads, {p.full_heads()} full, {lines}"
               f"{100 * p.fraction(n):.1f} % of the causal entries at n = {n}")


@checked("plan-run")
def plan_run_command(
    hf: str = typer.Option(..., "--hf", help="model: a HF folder, a .gguf file or a known name"),
    plan: Path = typer.Option(..., "--plan", help="plan file made by `attnlab plan`"),
    file: Path = typer.Option(..., "--file", help="text to score (plain or .gz)"),
    n: int = typer.Option(2048, "--n", help="window length in tokens"),
    windows: int = typer.Option(1, "--windows", help="windows scored"),
    device: str = typer.Option("cpu", "--device",
                               help="cpu (float32), cuda (bfloat16, FlexAttention) or auto (cuda when one is visible)"),
    backend: str = typer.Option("auto", "--backend",
                                help="the execution seam's backend: auto (the device's own: cpu on the CPU, "
                                     "flex on CUDA), cpu or flex"),
    quiet: bool = typer.Option(False, "--quiet",
                               help="no progress (bars in a terminal, a line per stage otherwise); errors still said"),
) -> None:
    """Perplexity of the model with a plan applied, beside the full model's."""
    import math

    from attnlab.llm.methods.attnlab_plan import PlanFile
    from attnlab.llm.models.device import check_device
    from attnlab.llm.models.loading import check_length
    from attnlab.llm.models.text_windows import token_windows

    dev = check_device(device)                # cuda without CUDA: one line, before the plan is read (torch: cuda, auto)
    from attnlab.llm.execution.backend_names import check_backend

    check_backend(backend, dev)               # a backend this device cannot run: one line, before anything is read

    from attnlab.option_paths import input_file

    method = PlanFile(input_file("--plan", plan))   # missing, a folder, a FIFO or device: one line, never opened
    p = method.file_plan.check(name=f"--plan {plan}", n=n)  # its length and columns against --n
    check_length(hf, n, "--n")  # the model's context, from its configuration (an unknown model: one line)
    from attnlab.llm.eval.eval_inputs import check_input_file

    check_input_file("--file", file)   # missing, a folder, empty, binary: one line before the model loads
    import torch

    from attnlab.progress import Progress

    progress = Progress.for_command(quiet)
    from attnlab.llm.execution.backend import use_backend

    use_backend(backend, dev)                 # the device's layers run by the backend named
    from attnlab.llm.models.loading import load_causal_lm

    model, tokenizer = load_causal_lm(hf, progress=progress, device=dev)
    check_model_fits(model, n, dev, f"--plan {plan} at --n {n} on {dev}")
    method.prepare(model, n)   # refuses a plan made for another model
    ids = token_windows(tokenizer, file, n, windows)
    with torch.no_grad(), progress.bar(f"perplexity n={n}, full then the plan", total=2 * len(ids),
                                       unit="windows") as bar:
        def loss(x):
            value = model(x, labels=x).loss.item()
            bar.advance()
            return value

        full = math.exp(sum(loss(x) for x in ids) / len(ids))
        with method.applied(model):
            planned = math.exp(sum(loss(x) for x in ids) / len(ids))
    typer.echo(f"perplexity at n = {n} ({len(ids)} windows): full {full:.3f}, plan {planned:.3f} "
               f"({100 * (planned / full - 1):+.2f} %), {100 * p.fraction(n):.1f} % of the entries")


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)
    app.command("plan-run")(plan_run_command)
