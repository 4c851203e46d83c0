"""``attnlab bpe-steps``: the BPE merge procedure of the text, step by step.

    attnlab bpe-steps abacabbcc --vocab-size 6
    attnlab bpe-steps --file corpus.txt --vocab-size 50 [--words]

Prints, for each merge t, the pair merged, its count in C_{t−1}, whether it won
a tie (first occurrence), and C_t.  Reference only: training uses the HF
``tokenizers`` trainer (``attnlab.data``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from attnlab.cli.options import checked


@checked("bpe-steps")
def bpe_steps_command(
    text: Optional[str] = typer.Argument(None, help="the corpus, as one string"),
    file: Optional[Path] = typer.Option(None, "--file", help="read the corpus from a text file instead"),
    vocab_size: int = typer.Option(..., "--vocab-size", help="stop when |V| reaches this size"),
    words: bool = typer.Option(False, "--words", help="split on whitespace; merges never cross words"),
    show_corpus: int = typer.Option(200, "--show", help="print C_t when it has at most this many symbols"),
) -> None:
    """Run BPE exactly as defined (most frequent adjacent pair, ties by first occurrence)."""
    from attnlab.data.bpe_reference import learn_bpe
    from attnlab.errors import UserError

    if (text is None) == (file is None):
        raise UserError("give the corpus as TEXT or with --file, exactly one of them")
    corpus = file.read_text(encoding="utf-8") if file is not None else text
    if not words:
        corpus = corpus.replace("\n", "")
    r = learn_bpe(corpus.split() if words else corpus, vocab_size)
    typer.echo(f"V_0 = {{{', '.join(r.alphabet)}}}")
    for t, s in enumerate(r.steps, start=1):
        c_t = r.corpus(t)
        n = sum(len(w) for w in c_t)
        shown = " | ".join(" ".join(w) for w in c_t) if n <= show_corpus else f"({n} symbols)"
        typer.echo(f"merge {t}: {s.pair[0]} + {s.pair[1]} → {s.symbol}  "
                   f"(count {s.count}{', tie: first occurrence' if s.tie else ''})  C_{t} = {shown}")
    typer.echo(f"V_{len(r.steps)} = {{{', '.join(r.vocabulary())}}}")


def register(app: typer.Typer) -> None:
    app.command("bpe-steps")(bpe_steps_command)
