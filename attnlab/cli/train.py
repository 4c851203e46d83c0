"""``attnlab train``, ``attnlab translate``, ``attnlab evaluate``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from attnlab.cli.options import check_value, checked
from attnlab.errors import UserError
from attnlab.nn.mechanisms import MECHANISMS, mechanisms_reading

# options that --resume may change (stopping, where and how it runs); every other one is the run's own
RESUMABLE = {"out", "resume", "epochs", "max_steps", "minutes", "device", "quiet"}
FIELD = {"tie": "tie_embeddings"}  # CLI name -> config field, where they differ
# options a model kind does not read (attnlab/nn/gru.py, lm.py): given, they are refused rather than ignored
IGNORED_BY = {
    "gru": {"heads", "layers", "dec_layers", "ff", "norm", "scoring", "value_rank", "attention", "attention_on",
            "w", "num_pos", "sparse", "proj_len", "dilation", "num_random"},
    "lm": {"dec_layers"},
}


def _given(ctx: typer.Context) -> set[str]:
    """The options the user wrote on the command line (or in the environment), not left at their defaults."""
    sources = {name: ctx.get_parameter_source(name) for name in ctx.params}  # typer may carry its own click: by name
    return {name for name, source in sources.items()
            if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")}


def _check_resume(out: Path, given: set[str], values: dict) -> None:
    """--resume continues a run as it was configured: refuse an option that would differ from it."""
    from attnlab.config import load_config

    if not (out / "config.toml").is_file():
        return  # the library says there is nothing to resume
    model_cfg, train_cfg = load_config(out / "config.toml")
    for name in sorted(given - RESUMABLE):
        if name in ("force", "init_embeddings"):
            raise UserError(f"--{name.replace('_', '-')} does not apply to --resume (it starts a new run)")
        field = FIELD.get(name, name)
        cfg = train_cfg if hasattr(train_cfg, field) else model_cfg
        if not hasattr(cfg, field):
            continue
        saved = getattr(cfg, field)
        if values[name] != saved:
            raise UserError(f"--resume: --{name.replace('_', '-')} {values[name]} differs from the run's {field} = "
                            f"{saved!r} in {out / 'config.toml'}; leave it out to continue the run, or start a new one")


def _readers(option: str) -> str:
    """The mechanisms that read a config option, from the registry (for the help)."""
    return ", ".join(mechanisms_reading(option))


@checked("train")
def train_command(
    ctx: typer.Context,
    data: str = typer.Option("synthetic",
                             help="Corpus: synthetic, a TSV/Moses path, hf:NAME:CONFIG, or plain text "
                                  "(.txt[.gz] file or folder; --model lm)."),
    out: Path = typer.Option(..., help="Run folder (config.toml, tokenizer.json, checkpoints/, metrics.jsonl)."),
    model: str = typer.Option("transformer", help="transformer | gru | lm"),
    layers: int = typer.Option(3, help="Encoder (and decoder) layers."),
    dec_layers: int = typer.Option(0, help="Decoder layers (0 = same as --layers)."),
    heads: int = typer.Option(4, help="Attention heads H."),
    d_model: int = typer.Option(256, help="Model width d."),
    ff: int = typer.Option(1024, help="FFN inner width d_ff."),
    dropout: float = typer.Option(0.1, help="Dropout after embeddings and every sublayer."),
    max_len: Optional[int] = typer.Option(None,
                                          help="Longest sequence in tokens (longer sentences are truncated, "
                                               "with a count); default 128, or --context for text."),
    norm: str = typer.Option("post", help="post (Vaswani) | pre (nanoGPT) LayerNorm."),
    scoring: str = typer.Option("dot", help="dot | additive | gaussian."),
    value_rank: int = typer.Option(0, help="Rank r of W_V = V_u V_d (0 = full)."),
    tie: bool = typer.Option(True, "--tie/--no-tie", help="Tie source/target embeddings and output projection."),
    attention: str = typer.Option("full",
                                  help="Attention mechanism: "
                                       + "; ".join(f"{name}: {spec.summary}" for name, spec in MECHANISMS.items())
                                       + "."),
    attention_on: str = typer.Option("all",
                                     help="Which attentions use --attention: all, or a comma list of "
                                          "encoder,decoder,cross."),
    w: int = typer.Option(8, help=f"Band half-width w ({_readers('w')})."),
    num_pos: int = typer.Option(0, help=f"Key columns g ({_readers('num_pos')})."),
    sparse: int = typer.Option(0, help=f"Sparse residual entries per row s ({_readers('sparse')})."),
    proj_len: int = typer.Option(64, help=f"Projection length k' ({_readers('proj_len')})."),
    dilation: int = typer.Option(1, help=f"Band dilation δ, every δ-th key ({_readers('dilation')})."),
    num_random: int = typer.Option(0, help=f"Random keys per query block r ({_readers('num_random')})."),
    tokenizer: str = typer.Option("bpe", help="bpe | word | char."),
    vocab_size: int = typer.Option(8000, help="Tokenizer vocabulary size."),
    max_tokens: int = typer.Option(4096, help="Tokens per (global) batch."),
    lr: float = typer.Option(7e-4,
                             help="Peak learning rate (AdamW; with --optimizer muon, of the embeddings, head, "
                                  "biases and norms)."),
    optimizer: str = typer.Option("adamw",
                                  help="adamw | muon (Muon for the hidden weight matrices at --muon-lr, "
                                       "AdamW for the rest at --lr)."),
    muon_lr: float = typer.Option(0.02, help="Peak learning rate of Muon (--optimizer muon)."),
    warmup: int = typer.Option(1000, help="Warm-up steps."),
    label_smoothing: Optional[float] = typer.Option(None,
                                                    help="Label smoothing ε_ls (default 0.1; "
                                                         "0 for a language model on text)."),
    schedule: str = typer.Option("inverse_sqrt",
                                 help="inverse_sqrt | cosine (warm-up, then cosine decay to lr/10 over --max-steps or "
                                      "--minutes)."),
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
    precision: str = typer.Option("fp32",
                                  help="fp32 | bf16 (autocast forward; faster on CPUs with AVX512-BF16 and on GPUs)."),
    init_embeddings: Optional[Path] = typer.Option(None,
                                                   help="Skip-gram vectors (attnlab embeddings) to initialise W_E."),
    resume: bool = typer.Option(False, help="Continue the run in --out from its last checkpoint."),
    force: bool = typer.Option(False, help="Replace an existing --out."),
    device: Optional[str] = typer.Option(None, help="cpu, cuda, cuda:1 … (default: cuda when available)."),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """Train a model; the same command runs under torchrun --nproc_per_node N."""
    from attnlab.config import ModelConfig, TrainConfig
    from attnlab.data.spec import synthetic_options
    from attnlab.data.text import is_text_spec
    from attnlab.train.loop import train as run_training

    text = is_text_spec(data)
    for name, value in (("--context", context), ("--batch-size", batch_size), ("--eval-every", eval_every),
                        ("--eval-tokens", eval_tokens)):
        if value and not text:
            raise UserError(f"{name} applies to a language model on plain text (--data a .txt[.gz] file or folder)")
    if max_len is None:
        max_len = context if (text and context) else 128
    if label_smoothing is None:
        label_smoothing = 0.0 if text else 0.1
    given = _given(ctx)
    if "muon_lr" in given and optimizer != "muon" and not resume:  # on --resume,
                                                                   # _check_resume compares it with the run's
        raise UserError("--muon-lr applies to --optimizer muon (it would be ignored)")
    ignored = sorted(given & IGNORED_BY.get(model, set()))
    if ignored:
        raise UserError(f"--model {model} does not use --{ignored[0].replace('_', '-')} "
                        f"(it would be ignored); leave it out")
    if resume:
        _check_resume(out, given, ctx.params)
    elif not (epochs or max_steps or minutes):
        raise UserError("give a stopping criterion: --epochs, --max-steps or --minutes")
    if data.split(":")[0] == "synthetic":
        n = synthetic_options(data).get("n")
        if n is not None and "synthetic_pairs" in given and n != synthetic_pairs:
            raise UserError(f"--data {data} asks for n={n} pairs but --synthetic-pairs is {synthetic_pairs}; "
                            "give one of them")
        synthetic_pairs = n or synthetic_pairs
    mcfg = ModelConfig(
        model=model, d_model=d_model, heads=heads, layers=layers, dec_layers=dec_layers, ff=ff, dropout=dropout,
        max_len=max_len, norm=norm, scoring=scoring, value_rank=value_rank, tie_embeddings=tie, attention=attention,
        attention_on=attention_on, w=w, num_pos=num_pos, sparse=sparse, proj_len=proj_len, dilation=dilation,
        num_random=num_random, seed=seed, vocab_size=1,
    )
    mcfg.validate()
    if init_embeddings is not None and not init_embeddings.is_file():
        raise UserError(f"--init-embeddings {init_embeddings}: no such file")
    tcfg = TrainConfig(
        data=data, tokenizer=tokenizer, vocab_size=vocab_size, max_tokens=max_tokens, lr=lr, optimizer=optimizer,
        muon_lr=muon_lr, warmup=warmup,
        label_smoothing=label_smoothing, epochs=epochs, max_steps=max_steps, minutes=minutes, seed=seed,
        checkpoint_every=checkpoint_every, log_every=log_every, synthetic_pairs=synthetic_pairs, precision=precision,
        dev_limit=dev_limit, schedule=schedule, context=context, batch_size=batch_size, eval_every=eval_every,
        eval_tokens=eval_tokens,
    )
    result = run_training(mcfg, tcfg, out, resume=resume, force=force, device=device,
                          init_embeddings=str(init_embeddings) if init_embeddings else None, quiet=quiet)
    best = f"; best dev loss {result.dev['loss']:.4f}" if "loss" in result.dev else ""
    from attnlab.train.stopping import stop_reason

    typer.echo(f"stopped: {stop_reason(result.steps, tcfg.max_steps, tcfg.minutes)}", err=True)
    typer.echo(f"trained {result.steps} steps ({result.epochs_done:.2f} epochs, {result.tokens:,} target tokens) "
               f"in {result.seconds / 60:.1f} min; last loss {result.final_loss:.3f}{best}; run folder {result.out}",
               err=True)


@checked("translate")
def translate_command(
    run_dir: Path = typer.Argument(..., help="Run folder of attnlab train."),
    beam: int = typer.Option(1, help="Beam size K (1 = greedy)."),
    length_penalty: float = typer.Option(1.0, help="α in score / |y|^α."),
) -> None:
    """Translate lines from stdin to stdout."""
    from attnlab.train.checkpoint import load_run
    from attnlab.train.evaluate import translate as run_translate

    run = load_run(run_dir)
    if run.cfg.model == "lm":
        raise UserError(f"{run_dir}: a language model does not translate (model = lm)")
    check_value("translate", "beam", beam, hi=run.tokenizer.vocab_size, why=f"the vocabulary of {run_dir}")
    lines = []
    for number, raw in enumerate(sys.stdin.buffer, start=1):
        try:
            lines.append(raw.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError as err:
            raise UserError(f"stdin:{number}: not UTF-8 "
                            f"(byte {raw[err.start]:#04x} at column {err.start + 1})") from None
    for hyp in run_translate(run.model, run.tokenizer, lines, beam, length_penalty):
        typer.echo(hyp)


@checked("evaluate")
def evaluate_command(
    run_dir: Path = typer.Argument(..., help="Run folder of attnlab train."),
    data: str = typer.Option("synthetic", help="Corpus spec (as for train)."),
    split: str = typer.Option("test", help="train | dev | test"),
    beam: int = typer.Option(1, help="Beam size K (1 = greedy)."),
    length_penalty: float = typer.Option(1.0, help="α in score / |y|^α."),
    limit: int = typer.Option(0, help="Evaluate the first N distinct sources (language model: tokens) only (0 = all)."),
    context: int = typer.Option(0,
                                help="Language model: window length in tokens (default: the run's training context)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """BLEU and chrF (sacrebleu, all references of each source) of a run on a corpus split;
    for a language model on text: loss, bits per character and perplexity (best checkpoint)."""
    from attnlab.data import load_corpus
    from attnlab.train.checkpoint import load_run
    from attnlab.train.evaluate import evaluate_pairs

    run = load_run(run_dir, best=True)
    if run.cfg.model == "lm":
        _evaluate_lm(run, data, split, context, limit, as_json)
        return
    check_value("evaluate", "beam", beam, hi=run.tokenizer.vocab_size, why=f"the vocabulary of {run_dir}")
    corpus = load_corpus(data, split=split)
    result = evaluate_pairs(run.model, run.tokenizer, corpus, beam, length_penalty, limit or None)
    if as_json:
        typer.echo(json.dumps({"bleu": round(result["bleu"], 2), "chrf": round(result["chrf"], 2),
                               "sentences": result["sentences"]}))
    else:
        typer.echo(f"BLEU {result['bleu']:.2f}  chrF {result['chrf']:.2f}  ({result['sentences']} sentences, "
                   f"{data} {split}, beam {beam})")


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)
    app.command("translate")(translate_command)
    app.command("evaluate")(evaluate_command)


def _evaluate_lm(run, data: str, split: str, context: int, limit: int, as_json: bool) -> None:
    """loss / bits per char / perplexity of a language-model run on ``split`` of the text ``data``."""
    from attnlab.data.text import is_text_spec, load_text, shared_files, split_label
    from attnlab.train.perplexity import evaluate_lm

    if not is_text_spec(data):
        raise UserError(f"--data {data}: a language model is evaluated on plain text (a .txt[.gz] file or folder)")
    if context < 0:
        raise UserError(f"--context must be >= 0, got {context}")
    n = context or run.train_cfg.context or run.cfg.max_len
    if n > run.cfg.max_len:
        raise UserError(f"--context {n} is longer than the model's maximum ({run.cfg.max_len} tokens)")
    shared = shared_files(data, split, run.train_cfg.data) if split != "train" else []
    if shared:
        raise UserError(f"--split {split}: {shared[0]} is the run's training text (--data {run.train_cfg.data}; "
                        "a file not named train/dev/test.txt is every split); "
                        f"give held-out text: a {split}.txt beside train.txt, or another file")
    stream = load_text(data, split, run.tokenizer)
    r = evaluate_lm(run.model, stream, n, limit)
    if as_json:
        typer.echo(json.dumps({"loss": round(r["loss"], 5), "bpc": round(r["bpc"], 5),
                               "perplexity": round(r["perplexity"], 4),
                               "tokens": r["tokens"], "chars": r["chars"], "unknown": r["unknown"], "context": n,
                               "split": split_label(data, split)}))
    else:
        unknown = f", {r['unknown']:,} unknown to the tokenizer" if r["unknown"] else ""
        typer.echo(f"loss {r['loss']:.4f} nats/token  bits/char {r['bpc']:.4f}  perplexity {r['perplexity']:.3f}  "
                   f"({r['tokens']:,} tokens{unknown}, {data} {split_label(data, split)}, context {n})")
