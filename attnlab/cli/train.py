"""``attnlab train``, ``attnlab translate``, ``attnlab evaluate``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from attnlab.errors import UserError


def _choice(value: str, allowed: tuple[str, ...], option: str) -> str:
    if value not in allowed:
        raise UserError(f"{option} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def register(app: typer.Typer) -> None:
    @app.command()
    def train(
        data: str = typer.Option("synthetic", help="Corpus: synthetic, a TSV/Moses path, hf:NAME:CONFIG, or plain text (.txt[.gz] file or folder; --model lm)."),
        out: Path = typer.Option(..., help="Run folder (config.toml, tokenizer.json, checkpoints/, metrics.jsonl)."),
        model: str = typer.Option("transformer", help="transformer | gru | lm"),
        layers: int = typer.Option(3, help="Encoder (and decoder) layers."),
        dec_layers: int = typer.Option(0, help="Decoder layers (0 = same as --layers)."),
        heads: int = typer.Option(4, help="Attention heads H."),
        d_model: int = typer.Option(256, help="Model width d."),
        ff: int = typer.Option(1024, help="FFN inner width d_ff."),
        dropout: float = typer.Option(0.1, help="Dropout after embeddings and every sublayer."),
        max_len: Optional[int] = typer.Option(None, help="Longest sequence in tokens (longer sentences are truncated, with a count); default 128, or --context for text."),
        norm: str = typer.Option("post", help="post (Vaswani) | pre (nanoGPT) LayerNorm."),
        scoring: str = typer.Option("dot", help="dot | additive | gaussian."),
        value_rank: int = typer.Option(0, help="Rank r of W_V = V_u V_d (0 = full)."),
        tie: bool = typer.Option(True, "--tie/--no-tie", help="Tie source/target embeddings and output projection."),
        attention: str = typer.Option("full", help="Attention mechanism: full, band, global, bigbird, linear, taylor, linformer, structured, structured-learned."),
        attention_on: str = typer.Option("all", help="Which attentions use --attention: all, or a comma list of encoder,decoder,cross."),
        w: int = typer.Option(8, help="Band half-width w (band, bigbird, structured)."),
        num_pos: int = typer.Option(0, help="Key columns g (global, bigbird, structured)."),
        sparse: int = typer.Option(0, help="Sparse residual entries per row s (structured)."),
        proj_len: int = typer.Option(64, help="Linformer projection length k'."),
        dilation: int = typer.Option(1, help="Band dilation δ (band: every δ-th key)."),
        num_random: int = typer.Option(0, help="Random keys per query block r (bigbird)."),
        tokenizer: str = typer.Option("bpe", help="bpe | word | char."),
        vocab_size: int = typer.Option(8000, help="Tokenizer vocabulary size."),
        max_tokens: int = typer.Option(4096, help="Tokens per (global) batch."),
        lr: float = typer.Option(7e-4, help="Peak learning rate."),
        warmup: int = typer.Option(1000, help="Warm-up steps."),
        label_smoothing: Optional[float] = typer.Option(None, help="Label smoothing ε_ls (default 0.1; 0 for a language model on text)."),
        schedule: str = typer.Option("inverse_sqrt", help="inverse_sqrt | cosine (warm-up, then cosine decay to lr/10 over --max-steps or --minutes)."),
        context: int = typer.Option(0, help="Text LM: tokens per training window (default --max-len)."),
        batch_size: int = typer.Option(0, help="Text LM: windows per batch (default --max-tokens // --context)."),
        eval_every: int = typer.Option(0, help="Text LM: steps between dev evaluations (default --checkpoint-every)."),
        eval_tokens: int = typer.Option(0, help="Text LM: dev tokens scored at each evaluation (0 = the whole dev text)."),
        epochs: int = typer.Option(0, help="Stop after E epochs."),
        max_steps: int = typer.Option(0, help="Stop after S optimiser steps."),
        minutes: float = typer.Option(0.0, help="Stop after M minutes of training."),
        checkpoint_every: int = typer.Option(500, help="Steps between checkpoints."),
        log_every: int = typer.Option(50, help="Steps between metrics lines."),
        seed: int = typer.Option(0, help="Seed of initialisation, data order and dropout."),
        synthetic_pairs: int = typer.Option(20000, help="Pairs drawn from the synthetic grammar."),
        dev_limit: int = typer.Option(500, help="Distinct dev sources scored at the end (0 = skip)."),
        precision: str = typer.Option("fp32", help="fp32 | bf16 (autocast forward; faster on CPUs with AVX512-BF16 and on GPUs)."),
        init_embeddings: Optional[Path] = typer.Option(None, help="Skip-gram vectors (attnlab embeddings) to initialise W_E."),
        resume: bool = typer.Option(False, help="Continue the run in --out from its last checkpoint."),
        force: bool = typer.Option(False, help="Replace an existing --out."),
        device: Optional[str] = typer.Option(None, help="cpu, cuda, cuda:1 … (default: cuda when available)."),
        quiet: bool = typer.Option(False, help="No progress bar."),
    ) -> None:
        """Train a model; the same command runs under torchrun --nproc_per_node N."""
        from attnlab.config import ModelConfig, TrainConfig
        from attnlab.train.loop import train as run_training

        _choice(tokenizer, ("bpe", "word", "char"), "--tokenizer")
        _choice(precision, ("fp32", "bf16"), "--precision")
        _choice(schedule, ("inverse_sqrt", "cosine"), "--schedule")
        from attnlab.data.text import is_text_spec

        text = is_text_spec(data)
        for name, value in (("--context", context), ("--batch-size", batch_size), ("--eval-every", eval_every), ("--eval-tokens", eval_tokens)):
            if value < 0:
                raise UserError(f"{name} must be >= 0, got {value}")
            if value and not text:
                raise UserError(f"{name} applies to a language model on plain text (--data a .txt[.gz] file or folder)")
        if max_len is None:
            max_len = context if (text and context) else 128
        if label_smoothing is None:
            label_smoothing = 0.0 if text else 0.1
        if not (epochs or max_steps or minutes) and not resume:
            raise UserError("give a stopping criterion: --epochs, --max-steps or --minutes")
        for name, value in (("--epochs", epochs), ("--max-steps", max_steps), ("--minutes", minutes), ("--max-tokens", max_tokens - 1), ("--vocab-size", vocab_size - 1)):
            if value < 0:
                raise UserError(f"{name} must be positive")
        mcfg = ModelConfig(
            model=model, d_model=d_model, heads=heads, layers=layers, dec_layers=dec_layers, ff=ff, dropout=dropout,
            max_len=max_len, norm=norm, scoring=scoring, value_rank=value_rank, tie_embeddings=tie, attention=attention,
            attention_on=attention_on, w=w, num_pos=num_pos, sparse=sparse, proj_len=proj_len, dilation=dilation, num_random=num_random,
            seed=seed, vocab_size=1,
        )
        mcfg.validate()
        from attnlab.nn.mechanisms import MECHANISMS

        _choice(attention, tuple(sorted(MECHANISMS)), "--attention")
        tcfg = TrainConfig(
            data=data, tokenizer=tokenizer, vocab_size=vocab_size, max_tokens=max_tokens, lr=lr, warmup=warmup,
            label_smoothing=label_smoothing, epochs=epochs, max_steps=max_steps, minutes=minutes, seed=seed,
            checkpoint_every=checkpoint_every, log_every=log_every, synthetic_pairs=synthetic_pairs, precision=precision,
            dev_limit=dev_limit, schedule=schedule, context=context, batch_size=batch_size, eval_every=eval_every,
            eval_tokens=eval_tokens,
        )
        result = run_training(mcfg, tcfg, out, resume=resume, force=force, device=device,
                              init_embeddings=str(init_embeddings) if init_embeddings else None, quiet=quiet)
        best = f"; best dev loss {result.dev['loss']:.4f}" if "loss" in result.dev else ""
        typer.echo(f"trained {result.steps} steps ({result.epochs_done:.2f} epochs, {result.tokens:,} target tokens) "
                   f"in {result.seconds / 60:.1f} min; last loss {result.final_loss:.3f}{best}; run folder {result.out}", err=True)

    @app.command()
    def translate(
        run_dir: Path = typer.Argument(..., help="Run folder of attnlab train."),
        beam: int = typer.Option(1, help="Beam size K (1 = greedy)."),
        length_penalty: float = typer.Option(1.0, help="α in score / |y|^α."),
    ) -> None:
        """Translate lines from stdin to stdout."""
        from attnlab.train.checkpoint import load_run
        from attnlab.train.evaluate import translate as run_translate

        if beam < 1:
            raise UserError(f"--beam must be >= 1, got {beam}")
        run = load_run(run_dir)
        if run.cfg.model == "lm":
            raise UserError(f"{run_dir}: a language model does not translate (model = lm)")
        lines = [line.rstrip("\n") for line in sys.stdin]
        for hyp in run_translate(run.model, run.tokenizer, lines, beam, length_penalty):
            typer.echo(hyp)

    @app.command()
    def evaluate(
        run_dir: Path = typer.Argument(..., help="Run folder of attnlab train."),
        data: str = typer.Option("synthetic", help="Corpus spec (as for train)."),
        split: str = typer.Option("test", help="train | dev | test"),
        beam: int = typer.Option(1, help="Beam size K (1 = greedy)."),
        length_penalty: float = typer.Option(1.0, help="α in score / |y|^α."),
        limit: int = typer.Option(0, help="Evaluate the first N distinct sources (language model: tokens) only (0 = all)."),
        context: int = typer.Option(0, help="Language model: window length in tokens (default: the run's training context)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """BLEU and chrF (sacrebleu, all references of each source) of a run on a corpus split;
        for a language model on text: loss, bits per character and perplexity (best checkpoint)."""
        from attnlab.data import load_corpus
        from attnlab.train.checkpoint import load_run
        from attnlab.train.evaluate import evaluate_pairs

        _choice(split, ("train", "dev", "test"), "--split")
        if beam < 1:
            raise UserError(f"--beam must be >= 1, got {beam}")
        if limit < 0:
            raise UserError(f"--limit must be >= 0, got {limit}")
        run = load_run(run_dir, best=True)
        if run.cfg.model == "lm":
            _evaluate_lm(run, data, split, context, limit, as_json)
            return
        corpus = load_corpus(data, split=split)
        result = evaluate_pairs(run.model, run.tokenizer, corpus, beam, length_penalty, limit or None)
        if as_json:
            typer.echo(json.dumps({"bleu": round(result["bleu"], 2), "chrf": round(result["chrf"], 2), "sentences": result["sentences"]}))
        else:
            typer.echo(f"BLEU {result['bleu']:.2f}  chrF {result['chrf']:.2f}  ({result['sentences']} sentences, {data} {split}, beam {beam})")


def _evaluate_lm(run, data: str, split: str, context: int, limit: int, as_json: bool) -> None:
    """loss / bits per char / perplexity of a language-model run on ``split`` of the text ``data``."""
    from attnlab.data.text import is_text_spec, load_text
    from attnlab.train.perplexity import evaluate_lm

    if not is_text_spec(data):
        raise UserError(f"--data {data}: a language model is evaluated on plain text (a .txt[.gz] file or folder)")
    if context < 0:
        raise UserError(f"--context must be >= 0, got {context}")
    n = context or run.train_cfg.context or run.cfg.max_len
    if n > run.cfg.max_len:
        raise UserError(f"--context {n} is longer than the model's maximum ({run.cfg.max_len} tokens)")
    stream = load_text(data, split, run.tokenizer)
    r = evaluate_lm(run.model, stream, n, limit)
    if as_json:
        typer.echo(json.dumps({"loss": round(r["loss"], 5), "bpc": round(r["bpc"], 5), "perplexity": round(r["perplexity"], 4),
                               "tokens": r["tokens"], "chars": r["chars"], "unknown": r["unknown"], "context": n, "split": split}))
    else:
        unknown = f", {r['unknown']:,} unknown to the tokenizer" if r["unknown"] else ""
        typer.echo(f"loss {r['loss']:.4f} nats/token  bits/char {r['bpc']:.4f}  perplexity {r['perplexity']:.3f}  "
                   f"({r['tokens']:,} tokens{unknown}, {data} {split}, context {n})")
