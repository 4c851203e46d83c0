"""Stages 1–2: train the thesis models, then score them (BLEU, chrF, sample translations).

Training goes through ``attnlab.train.loop.train`` into ``OUT/models/NAME``;
a training stage interrupted after a checkpoint continues from it on
``--resume`` (``train(..., resume=True)``), else it starts again.  Scores are
sacrebleu's corpus BLEU and chrF of greedy translations of the first
``eval_sentences`` sources of the evaluation split, against all their
references.
"""

from __future__ import annotations

from attnlab.experiment.corpus import eval_corpus, training_data
from attnlab.experiment.stages import Context
from attnlab.experiment.thesis_models import ThesisModel, model_config, train_config
from attnlab.train.checkpoint import list_checkpoints, load_run
from attnlab.train.stopping import stop_reason

__all__ = ["train_stage", "evaluate_stage", "load_model", "eval_pairs", "stop_reason"]


def load_model(ctx: Context, name: str):
    """The trained run ``OUT/models/NAME`` (cached for the process)."""
    key = f"run:{name}"
    if key not in ctx.cache:
        ctx.cache[key] = load_run(ctx.out / "models" / name)
    return ctx.cache[key]


def eval_pairs(ctx: Context):
    """(evaluation pairs, split name), cached."""
    if "eval" not in ctx.cache:
        ctx.cache["eval"] = eval_corpus(ctx.settings)
    return ctx.cache["eval"]


def train_stage(m: ThesisModel):
    def run(ctx: Context) -> dict:
        from attnlab.train.loop import train

        out = ctx.out / "models" / m.name
        resume = ctx.resume and (out / "config.toml").is_file() and bool(list_checkpoints(out))
        tc = train_config(ctx.settings)
        tc.data = training_data(ctx.settings, ctx.out)
        result = train(model_config(m, ctx.settings), tc, out, resume=resume, force=not resume, quiet=True)
        ctx.cache.pop(f"run:{m.name}", None)
        run_ = load_model(ctx, m.name)
        params = sum(p.numel() for p in run_.model.parameters())
        return {
            "name": m.name, "title": m.title, "layers": m.layers, "heads": m.heads, "d_model": run_.cfg.d_model,
            "d_k": run_.cfg.d_k, "ff": run_.cfg.ff, "vocab_size": run_.cfg.vocab_size, "parameters": int(params),
            "steps": result.steps, "epochs": round(result.epochs_done, 2), "train_seconds": round(result.seconds, 1),
            "final_loss": result.final_loss, "resumed": resume,
            "max_steps": tc.max_steps, "minutes": tc.minutes,
            "stopped": stop_reason(result.steps, tc.max_steps, tc.minutes),
            "_note": f"{result.steps} steps, loss {result.final_loss:.2f}",
        }

    return run


def evaluate_stage(models: list[ThesisModel]):
    def run(ctx: Context) -> dict:
        from attnlab.train.evaluate import evaluate_pairs

        pairs, split = eval_pairs(ctx)
        out = {"split": split, "models": {}}
        for m in models:
            r = load_model(ctx, m.name)
            scores = evaluate_pairs(r.model, r.tokenizer, pairs, limit=ctx.settings.eval_sentences)
            out["models"][m.name] = {"title": m.title, **scores}
        out["_note"] = "  ".join(f"{k}: BLEU {v['bleu']:.1f}" for k, v in out["models"].items())
        return out

    return run
