"""``attnlab generate``: sample text from a language-model run, streamed as it comes."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from attnlab.cli.options import checked
from attnlab.errors import UserError


@checked("generate")
def generate_command(
    run_dir: Path = typer.Argument(..., help="Run folder of attnlab train --model lm."),
    prompt: str = typer.Argument("\n", help="Text to continue (default: a new line)."),
    tokens: int = typer.Option(500, help="Tokens to sample."),
    temperature: float = typer.Option(0.8, help="T in softmax(z / T); 0 = greedy (argmax)."),
    top_k: int = typer.Option(200, help="Sample among the k most likely tokens (0 = all)."),
    seed: int = typer.Option(0, help="Seed of the sampler."),
) -> None:
    """Continue PROMPT with TOKENS tokens sampled from the model (best checkpoint), printed as they come."""
    import torch

    from attnlab.train.checkpoint import load_run
    from attnlab.train.sampling import sample

    run = load_run(run_dir, best=True)
    if run.cfg.model != "lm":
        raise UserError(f"{run_dir}: generate samples from a language model; this run is a {run.cfg.model} "
                        f"(model = {run.cfg.model})")
    from attnlab.data.text import encode_text

    ids, unknown = encode_text(run.tokenizer, prompt) if len(prompt) > 0 else ([], 0)
    ids = ids.tolist()
    if unknown:
        typer.echo(f"attnlab: warning: {unknown} prompt character(s) unknown to the tokenizer", err=True)
    text = run.tokenizer.decode(ids)
    sys.stdout.write(text)
    generator = torch.Generator().manual_seed(seed)
    for i in sample(run.model, ids, tokens, temperature, top_k, generator):
        ids.append(i)
        new = run.tokenizer.decode(ids)
        sys.stdout.write(new[len(text):] if new.startswith(text) else new)
        sys.stdout.flush()
        text = new
    sys.stdout.write("\n")


def register(app: typer.Typer) -> None:
    app.command("generate")(generate_command)
