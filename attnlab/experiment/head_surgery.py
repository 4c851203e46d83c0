"""Stage 8b: head surgery — the trained models with every head replaced by its structured fit.

With the per-head (w_h, num_pos_h) of stage 6a (heads that reach no grid
point keep their full weights), ``attnlab.nn.surgery`` swaps each
MultiHeadAttention's mechanism for the band + columns fit of its own weights
(renormalised rows) and the model translates the evaluation sources again:
BLEU/chrF before and after, and the fraction of attention entries kept
(over every attention computed while translating).  Two more variants on the
8-head model: one (w, num_pos) for all heads of a kind (the per-model
choice), and the efficient ``structured`` mechanism itself at inference
(band w + the first num_pos tokens as fixed columns, no retraining) — the
cheap forward the fit argues for, applied to a model trained with full
attention.
"""

from __future__ import annotations

from attnlab.experiment.stages import Context
from attnlab.experiment.thesis_models import ThesisModel
from attnlab.experiment.training import eval_pairs, load_model
from attnlab.nn.mechanisms.structured import Structured
from attnlab.nn.surgery import attention_modules, kept_fraction, surgery

__all__ = ["surgery_choices", "surgery_stage"]


def surgery_choices(kinds: dict, per_model: bool = False) -> dict:
    """{(kind, layer): (w per head, num_pos per head)} from a stage-6a entry; unreached heads → -1 (untouched)."""
    out = {}
    for kind, c in kinds.items():
        for l, (ws, ps, ok) in enumerate(zip(c["w"], c["num_pos"], c["reached"])):
            if per_model:
                ws, ps, ok = [c["model_w"]] * len(ws), [c["model_num_pos"]] * len(ws), [c["model_w"] >= 0] * len(ws)
            out[(kind, l)] = ([w if o else -1 for w, o in zip(ws, ok)], [p if o else 0 for p, o in zip(ps, ok)])
    return out


def _score(ctx: Context, r) -> dict:
    from attnlab.train.evaluate import evaluate_pairs

    pairs, _ = eval_pairs(ctx)
    s = evaluate_pairs(r.model, r.tokenizer, pairs, limit=ctx.settings.eval_sentences)
    return {"bleu": s["bleu"], "chrf": s["chrf"], "samples": s["samples"][:3]}


def _structured_mechanism(ctx: Context, r, kinds: dict) -> dict:
    """BLEU with the efficient Structured mechanism (model-wide w, num_pos per kind) swapped in."""
    modules = attention_modules(r.model)
    saved = {key: mod.mechanism for key, mod in modules.items()}
    try:
        for (kind, l), mod in modules.items():
            c = kinds[kind]
            w, g = (c["model_w"], c["model_num_pos"]) if c["model_w"] >= 0 else (10, 4)
            mod.mechanism = Structured(w, g)
        return _score(ctx, r)
    finally:
        for key, mod in modules.items():
            mod.mechanism = saved[key]


def surgery_stage(models: list[ThesisModel]):
    def run(ctx: Context) -> dict:
        before = ctx.results["evaluate"]["models"]
        choices = ctx.results["choices"]["models"]
        out = {"models": {}}
        for m in (models if ctx.settings.surgery_variants else [x for x in models if x.heads > 1][:1]):
            r = load_model(ctx, m.name)
            entry = {"before": {"bleu": before[m.name]["bleu"], "chrf": before[m.name]["chrf"]}}
            variants = {"per_head": surgery_choices(choices[m.name])}
            if m.heads > 1 and ctx.settings.surgery_variants:
                variants["per_model"] = surgery_choices(choices[m.name], per_model=True)
            for variant, chosen in variants.items():
                with surgery(r.model, chosen) as mechs:
                    score = _score(ctx, r)
                    kept = kept_fraction(mechs)
                entry[variant] = {**score, "kept": kept,
                                  "w": {f"{k}{l}": v[0] for (k, l), v in chosen.items()},
                                  "num_pos": {f"{k}{l}": v[1] for (k, l), v in chosen.items()}}
            if m.heads > 1 and ctx.settings.surgery_variants:
                entry["structured_mechanism"] = _structured_mechanism(ctx, r, choices[m.name])
            out["models"][m.name] = entry
        e = out["models"][models[-1].name]
        out["_note"] = (f"{models[-1].name}: BLEU {e['before']['bleu']:.1f} → {e['per_head']['bleu']:.1f}, "
                        f"{100 * e['per_head']['kept']['all']:.0f} % of entries kept")
        return out

    return run
