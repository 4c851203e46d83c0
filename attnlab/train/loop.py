"""The training loop: one process or torchrun/DDP, resumable, deterministic.

For a batch of sentence pairs the loss is the per-token cross-entropy with
label smoothing ε_ls (Szegedy et al. 2016; Vaswani et al. 2017 §5.4),

    L = −(1/T) Σ_t [ (1 − ε_ls) log p(y_t) + (ε_ls / V) Σ_v log p(v) ],

T the number of real (non-padding) target tokens of the *global* batch.
The optimiser is AdamW (or Muon + AdamW, ``attnlab.train.optimizers``) with the inverse-square-root warm-up of
``attnlab.train.schedule`` (or warm-up + cosine decay, ``schedule = "cosine"``)
and gradient clipping ‖g‖₂ ≤ ``clip_norm``.

A language model on contiguous text (``--data`` a ``.txt[.gz]`` file or folder)
trains on random windows (``attnlab.train.text_examples``), with T = the
tokens of the batch; every ``eval_every`` steps (default: at checkpoints) and
at the end its dev loss / bits per char / perplexity go to ``metrics.jsonl``
and the weights of the lowest dev loss to ``checkpoints/best.safetensors``.

Stopping: ``epochs``, ``max_steps`` or ``minutes`` (whichever comes first),
or Ctrl-C / SIGTERM: the step under way is finished, a checkpoint written and
``KeyboardInterrupt`` raised (a second signal aborts at once).
Every ``checkpoint_every`` steps and at the end a checkpoint is written
atomically; ``resume=True`` restarts from the last one with the same data
order, optimiser moments and RNG, so a killed run ends with the parameters of
an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from attnlab.config import ModelConfig, TrainConfig, load_config, save_config
from attnlab.data.text import is_text_spec
from attnlab.errors import UserError
from attnlab.lock import FolderLock
from attnlab.nn import build_model
from attnlab.outputs import Claim, claim_folder
from attnlab.train import distributed
from attnlab.train.checkpoint import (
    BEST_WEIGHTS,
    TrainState,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    save_weights,
)
from attnlab.train.examples import Examples, prepare_examples
from attnlab.train.optimizers import build_optimizer, peak_lrs
from attnlab.train.schedule import inverse_sqrt, warmup_cosine
from attnlab.train.text_examples import prepare_text_examples

console = Console(stderr=True)


def check_out_dir(out: Path, resume: bool, force: bool, inputs=()) -> Claim:
    """Decide what may be written in the run folder (``attnlab.outputs``); nothing is written here."""
    if resume and force:
        raise UserError("--resume and --force exclude each other")
    if resume:
        if not (out / "config.toml").is_file() or not list_checkpoints(out):
            raise UserError(f"--resume: nothing to resume in {out} (no config.toml or no complete checkpoint)")
        return Claim(out, True, False)
    return claim_folder(out, kind="run", inputs=inputs, force=force,
                        hint="use --resume to continue it or --force to replace it")


@dataclass
class TrainResult:
    out: Path
    steps: int
    epochs_done: float
    tokens: int
    seconds: float
    final_loss: float
    dev: dict


def train(
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    out: str | os.PathLike,
    resume: bool = False,
    force: bool = False,
    device: str | None = None,
    init_embeddings: str | None = None,
    quiet: bool = False,
) -> TrainResult:
    """Train a model on ``train_cfg.data``; the run folder is ``out``.

    Nothing in ``out`` is removed or written before the corpus, the tokenizer,
    the options and the memory estimate have passed; the folder is locked
    (``attnlab.lock``) for the whole run, so a second writer is refused.
    """
    from attnlab.data.spec import corpus_paths
    from attnlab.train.resources import check_fits

    out = Path(out)
    ctx = distributed.setup(device)
    lock = FolderLock(out) if ctx.is_main else None
    failed = True
    try:
        inputs = [("--data", p) for p in corpus_paths(train_cfg.data)]
        if init_embeddings:
            inputs.append(("--init-embeddings", init_embeddings))
        claim = check_out_dir(out, resume, force, inputs) if ctx.is_main else None
        if resume:
            model_cfg, saved_train = load_config(out / "config.toml")
            # stopping criteria may be extended on resume; everything else is the run's
            extended = False
            for key in ("epochs", "max_steps", "minutes"):
                if getattr(train_cfg, key) and getattr(train_cfg, key) != getattr(saved_train, key):
                    setattr(saved_train, key, getattr(train_cfg, key))
                    extended = True
            train_cfg = saved_train
        if not (train_cfg.epochs or train_cfg.max_steps or train_cfg.minutes):
            raise UserError("give a stopping criterion: --epochs, --max-steps or --minutes")
        train_cfg.validate()
        check_fits(dataclasses.replace(model_cfg, vocab_size=5), 0, ctx.device)  # the parameters, before the tokenizer
        if lock is not None:
            lock.acquire()
            claim = check_out_dir(out, resume, force, inputs)  # again, under the lock:
                                                               # another writer may have finished meanwhile

        prepare = prepare_text_examples if is_text_spec(train_cfg.data) else prepare_examples
        examples = prepare(model_cfg, train_cfg, out, reuse_tokenizer=resume,
                           log=console.print if ctx.is_main else None, world_size=ctx.world_size)
        model_cfg.vocab_size = examples.tokenizer.vocab_size
        model_cfg.validate()
        if hasattr(examples, "context"):  # text: batch_size windows of context tokens per step
            step_tokens = examples.batch_size * examples.context
        else:
            encoded = examples.encoded
            corpus_tokens = int(encoded.src.offsets[-1] + encoded.tgt.offsets[-1] + 2 * len(encoded))
            step_tokens = min(train_cfg.max_tokens, corpus_tokens)
        check_fits(model_cfg, step_tokens, ctx.device)
        torch.manual_seed(train_cfg.seed)
        model = build_model(model_cfg).to(ctx.device)
        if init_embeddings and not resume:
            from attnlab.train.skipgram import init_embeddings as _init

            weights = {id(p): p for n, p in model.named_parameters()
                       if n.endswith("embedding.weight") or n == "embed.weight"}
            matched = max(_init(w.data, examples.tokenizer, init_embeddings) for w in weights.values())
            if ctx.is_main:
                console.print(f"initialised {matched} embedding rows from {init_embeddings}")
        optimizer = build_optimizer(model, train_cfg)
        state = load_checkpoint(out, model, model_cfg, optimizer) if resume else TrainState()
        # everything is validated: only now is the earlier run removed and the new one written
        if ctx.is_main:
            claim.clear()
            if not resume:
                save_config(out / "config.toml", model_cfg, train_cfg)
                examples.tokenizer.save(out / "tokenizer.json")
            elif extended:
                save_config(out / "config.toml", model_cfg, train_cfg)
        ctx.barrier()
        net = model
        if ctx.distributed:
            device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
            net = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
        final_loss = _loop(net, model, model_cfg, train_cfg, optimizer, examples, state, out, ctx, quiet)
        dev = {}
        if hasattr(examples, "dev_score"):
            dev = {"loss": state.best_dev} if state.best_dev is not None else {}
        elif ctx.is_main and examples.dev is not None and model_cfg.model != "lm" and train_cfg.dev_limit > 0:
            from attnlab.train.evaluate import evaluate_pairs

            model.eval()
            dev = evaluate_pairs(model, examples.tokenizer, examples.dev, limit=train_cfg.dev_limit)
            console.print(f"dev: BLEU {dev['bleu']:.2f}  chrF {dev['chrf']:.2f}  "
                          f"({dev['sentences']} sentences, greedy)")
            with open(out / "metrics.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps({"step": state.step, "dev_bleu": dev["bleu"], "dev_chrf": dev["chrf"]}) + "\n")
        epochs_done = state.epoch + state.batch_in_epoch / max(len(examples.batches(state.epoch)), 1)
        failed = False
        return TrainResult(out, state.step, epochs_done, state.tokens, state.elapsed, final_loss, dev)
    finally:
        if lock is not None:
            lock.release(failed=failed)
        distributed.teardown(ctx)


def _lr_factor(tc: TrainConfig, step: int, total_steps: int, elapsed: float) -> float:
    """lr(t) / lr_peak at optimiser step t under ``tc.schedule``."""
    if tc.schedule == "cosine":
        progress = max(step / total_steps if total_steps else 0.0, elapsed / (60 * tc.minutes) if tc.minutes else 0.0)
        return warmup_cosine(step, tc.warmup, progress)
    if tc.schedule == "inverse_sqrt":
        return inverse_sqrt(step, tc.warmup)
    raise UserError(f"--schedule must be inverse_sqrt or cosine, got {tc.schedule!r}")


def _dev_check(model, cfg: ModelConfig, examples, state: TrainState, out: Path, metrics, device) -> None:
    """Score the dev text; keep the weights if its loss is the lowest so far."""
    score = examples.dev_score(model, device)
    if score is None:
        return
    line = {"step": state.step, "dev_loss": score["loss"], "dev_bpc": score["bpc"],
            "dev_perplexity": score["perplexity"], "dev_tokens": score["tokens"], "elapsed": state.elapsed}
    if state.best_dev is None or score["loss"] < state.best_dev:
        state.best_dev = score["loss"]
        save_weights(out / "checkpoints" / BEST_WEIGHTS, model, cfg)
        line["best"] = True
    metrics.write(json.dumps(line) + "\n")
    metrics.flush()
    console.print(f"step {state.step}: dev loss {score['loss']:.4f}  bpc {score['bpc']:.4f}  "
                  f"perplexity {score['perplexity']:.2f}{'  (best)' if line.get('best') else ''}")


def _loop(net, model, cfg: ModelConfig, tc: TrainConfig, optimizer, examples: Examples, state: TrainState, out: Path,
          ctx, quiet: bool) -> float:
    pad = cfg.pad_id
    start = time.perf_counter() - state.elapsed
    total_steps = tc.max_steps or (tc.epochs * len(examples.batches(0)) if tc.epochs else 0)
    peaks = peak_lrs(optimizer, tc)
    metrics = open(out / "metrics.jsonl", "a", encoding="utf-8") if ctx.is_main else None
    progress = Progress(
        TextColumn("[bold]train"), BarColumn(), TextColumn("step {task.completed}/{task.total}"),
        TextColumn("loss {task.fields[loss]:.3f}"), TextColumn("{task.fields[tps]:,.0f} tok/s"),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, disable=quiet or not ctx.is_main,
    )
    task = progress.add_task("train", total=total_steps or None, completed=state.step, loss=float("nan"), tps=0.0)
    last_loss, window_tokens, window_start = float("nan"), 0, time.perf_counter()
    stop = False
    net.train()
    with progress, _Interruption() as interrupted:
        while not stop:
            if tc.epochs and state.epoch >= tc.epochs:
                break
            batches = examples.batches(state.epoch)
            while state.batch_in_epoch < len(batches):
                global_idx = batches[state.batch_in_epoch]
                src, tgt_in, tgt_out = examples.collate(global_idx, ctx.rank, ctx.device)
                # L = Σ_t ℓ_t / T over the global batch; DDP averages over ranks, hence × world_size
                with torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=tc.precision == "bf16"):
                    logits = net(src, tgt_in) if cfg.model != "lm" else net(tgt_in)
                loss_sum = F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]).float(), tgt_out.reshape(-1),
                    ignore_index=pad, label_smoothing=tc.label_smoothing, reduction="sum",
                )
                n_local = (tgt_out != pad).sum()
                T = ctx.all_sum(n_local.detach().float())
                loss = loss_sum * ctx.world_size / T
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if tc.clip_norm > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip_norm)
                factor = _lr_factor(tc, state.step + 1, total_steps, state.elapsed)
                lr = tc.lr * factor
                for group, peak in zip(optimizer.param_groups, peaks):
                    group["lr"] = peak * factor
                optimizer.step()

                last_loss = float(ctx.all_sum(loss_sum.detach().float()) / T)
                state.step += 1
                state.batch_in_epoch += 1
                state.tokens += int(T)
                state.elapsed = time.perf_counter() - start
                src_tokens = 0 if src is None else (src != pad).sum().float()  # a text LM has no source
                window_tokens += int(ctx.all_sum(src_tokens + n_local.float()))
                if not math.isfinite(last_loss):
                    raise UserError(f"training diverged at step {state.step} (loss {last_loss}); lower --lr")
                if metrics is not None and (state.step % tc.log_every == 0 or state.step == 1):
                    tps = window_tokens / max(time.perf_counter() - window_start, 1e-9)
                    metrics.write(json.dumps({"step": state.step, "epoch": state.epoch, "loss": last_loss, "lr": lr,
                                              "tokens_per_s": tps, "elapsed": state.elapsed}) + "\n")
                    metrics.flush()
                    progress.update(task, completed=state.step, loss=last_loss, tps=tps)
                    window_tokens, window_start = 0, time.perf_counter()
                halt = bool(tc.minutes and state.elapsed >= 60 * tc.minutes) or interrupted.signal is not None
                if ctx.distributed:  # every rank stops at the same step; NCCL reduces device tensors
                    halt = bool(ctx.all_sum(torch.tensor(float(halt), device=ctx.device)) > 0)
                stop = halt or bool(tc.max_steps and state.step >= tc.max_steps)
                evaluate_now = state.step % (tc.eval_every or tc.checkpoint_every) == 0 or stop
                if hasattr(examples, "dev_score") and evaluate_now and ctx.is_main:
                    _dev_check(model, cfg, examples, state, out, metrics, ctx.device)
                if state.step % tc.checkpoint_every == 0 and not stop and ctx.is_main:
                    save_checkpoint(out, model, cfg, optimizer, state)
                if stop:
                    break
            if not stop:
                state.epoch += 1
                state.batch_in_epoch = 0
    if ctx.is_main:
        save_checkpoint(out, model, cfg, optimizer, state)
        metrics.close()
    ctx.barrier()
    if interrupted.signal is not None:
        if ctx.is_main:
            console.print(f"interrupted at step {state.step}: checkpoint written to {out / 'checkpoints'}; "
                          "`--resume` continues")
        raise KeyboardInterrupt
    return last_loss


class _Interruption:
    """The first SIGINT/SIGTERM is noted (``.signal``) and the loop stops after its step; a second one aborts."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signal, self._previous = None, {}

    def _note(self, signum, frame):
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            self._previous = {s: signal.signal(s, self._note) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        return False
