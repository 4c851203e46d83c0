"""``attnlab embeddings`` and ``attnlab neighbours``: skip-gram word vectors.

    attnlab embeddings --data SPEC --side src|tgt --dim d --window c [--negative k]
                       [--min-count 5] [--tokenizer tokenizer.json] [--out FILE] [--plot PNG]
                       [--minutes M | --epochs E] [--seed N]
    attnlab neighbours FILE word [-k 5]

SPEC: ``synthetic``, a TSV path (plain or .gz) or ``hf:NAME:CONFIG``
(see ``attnlab.data.load_corpus``).  ``--negative 0`` forces the full-softmax
loss; without ``--negative`` it is used for vocabularies of ≤ 2000 words,
negative sampling with k = 5 above.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from attnlab.cli.options import checked


@checked("embeddings")
def embeddings_command(
    data: str = typer.Option(..., "--data", help="corpus spec: synthetic, a TSV path, hf:NAME:CONFIG"),
    side: str = typer.Option("src", "--side", help="which side of the pairs: src or tgt"),
    dim: int = typer.Option(100, "--dim", help="dimension d of the word vectors"),
    window: int = typer.Option(5, "--window", help="window c: contexts w_{t±δ}, δ ≤ c"),
    negative: Optional[int] = typer.Option(None, "--negative",
                                           help="k negatives per pair; 0 = full softmax; default: auto"),
    min_count: int = typer.Option(5, "--min-count", help="drop words seen fewer times"),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer",
                                             help="tokenizer json: train on its pieces instead of words"),
    out: Path = typer.Option(Path("embeddings.safetensors"), "--out", help="output safetensors file"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="also draw a 2-D PCA plot with words labelled (PNG)"),
    minutes: Optional[float] = typer.Option(None, "--minutes", help="train for this many minutes"),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="train for this many epochs (default 5)"),
    seed: int = typer.Option(0, "--seed"),
    force: bool = typer.Option(False, "--force", help="replace an existing --out / --plot file"),
) -> None:
    """Train skip-gram word vectors on one side of a corpus."""
    from attnlab.data.spec import corpus_paths
    from attnlab.errors import UserError
    from attnlab.outputs import claim_file

    if minutes is not None and epochs is not None:
        raise UserError("give --minutes or --epochs, not both")
    inputs = [("--data", p) for p in corpus_paths(data)] + [("--tokenizer", tokenizer)]
    claim_file(out, kind="embeddings", inputs=inputs, force=force, option="--out")
    if plot is not None:
        if plot.resolve() == out.resolve():
            raise UserError(f"--plot {plot}: is also --out; give two different files")
        claim_file(plot, kind="png", inputs=inputs, force=force, option="--plot")
    from attnlab.train.skipgram import train_embeddings  # imports torch: after the cheap checks
    wv = train_embeddings(data, side, out=out, plot=plot, tokenizer=tokenizer, dim=dim, window=window,
                          negative=negative, min_count=min_count, minutes=minutes, epochs=epochs, seed=seed,
                          progress=lambda line: typer.echo(line, err=True))
    m = wv.meta
    typer.echo(f"{len(wv.words)} words × d={wv.dim}, {m['loss']}, {m['epochs']} epochs in {m['seconds']} s → {out}"
               + (f", plot → {plot}" if plot else ""))


@checked("neighbours")
def neighbours_command(
    file: Path = typer.Argument(..., help="embeddings file written by attnlab embeddings"),
    word: str = typer.Argument(..., help="the word to look up"),
    k: int = typer.Option(5, "-k", "--k", help="how many neighbours"),
) -> None:
    """The k nearest words by cosine similarity."""
    from attnlab.train.skipgram import neighbours

    for w, c in neighbours(file, word, k):
        typer.echo(f"{w}\t{c:.4f}")


def register(app: typer.Typer) -> None:
    app.command("embeddings")(embeddings_command)
    app.command("neighbours")(neighbours_command)
