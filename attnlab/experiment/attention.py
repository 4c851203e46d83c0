"""Stages 3–4: capture the attention of each model, draw the thesis's figures, name the heads.

For every model two ``AttentionMaps`` (``attnlab.analysis.capture``):

* the thesis's sentence: the first evaluation source with 16 tokens
  (``encode(src) + [eos]``), the decoder reading the model's own greedy
  translation — Figures 11 (1 head) and 12 (8 heads) are its encoder
  self-attention, tokens on both axes; the cross-attention is drawn beside;
* the evaluation set: ``capture_sentences`` pairs spread evenly over the
  evaluation split (a corpus file may be sorted by length, as Tatoeba's
  test split is: its first pairs are its shortest), with the decoder reading
  the reference (teacher forcing), so gold alignments and dependencies
  apply — the input of roles, budgets, the w estimate and the spectra.

Roles (``attnlab.analysis.roles.head_roles``): rare-token frequencies are the
model's token counts over the training sources; gold relations (synthetic
corpus) are the dependency arcs for the encoder and the alignments for the
cross-attention.
"""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np

from attnlab.analysis.attention_maps import AttentionMaps
from attnlab.analysis.capture import capture
from attnlab.analysis.roles import corpus_relations, head_roles, token_relations
from attnlab.experiment.corpus import pick_sentence, train_corpus
from attnlab.experiment.stages import Context
from attnlab.experiment.thesis_models import ThesisModel
from attnlab.experiment.training import eval_pairs, load_model
from attnlab.viz.heatmap import plot_grid, plot_head, save_figure

__all__ = ["capture_stage", "roles_stage", "load_maps", "capture_pairs"]

FREQ_LIMIT = 20000


def capture_pairs(ctx: Context) -> list:
    """The evaluation pairs whose attention is captured (the same for every model)."""
    pairs = list(eval_pairs(ctx)[0])
    k = min(ctx.settings.capture_sentences, len(pairs))
    # k distinct indices, evenly spread
    return [pairs[i] for i in np.linspace(0, len(pairs) - 1, k).round().astype(int)]


def load_maps(ctx: Context, name: str, which: str) -> AttentionMaps:
    """``which`` in {"sentence", "eval"}: the saved maps of model ``name`` (cached)."""
    key = f"maps:{name}:{which}"
    if key not in ctx.cache:
        ctx.cache[key] = AttentionMaps.load(ctx.out / "attention" / f"{name}-{which}.safetensors")
    return ctx.cache[key]


def capture_stage(models: list[ThesisModel]):
    def run(ctx: Context) -> dict:
        pairs, split = eval_pairs(ctx)
        sources = [p.src for p in pairs]
        first = load_model(ctx, models[-1].name)
        index, n_tokens = pick_sentence(sources, first.tokenizer, ctx.settings.sentence_length)
        sentence = sources[index]
        chosen = capture_pairs(ctx)
        out = {"sentence": sentence, "sentence_tokens": n_tokens, "split": split, "eval_sentences": len(chosen),
               "models": {}, "figures": {}}
        for m in models:
            r = load_model(ctx, m.name)
            maps = capture(r.model, r.tokenizer, [sentence], name=m.title)
            maps.save(ctx.path("attention", f"{m.name}-sentence.safetensors"))
            with warnings.catch_warnings(record=True) as caught:  # long pairs are cut to max_len: counted, not printed
                warnings.simplefilter("always")
                ev = capture(r.model, r.tokenizer, [p.src for p in chosen], [p.tgt for p in chosen], truncate=True,
                             name=m.title)
            out.setdefault("truncated", {})[m.name] = sum("truncated" in str(w.message) for w in caught)
            ev.save(ctx.path("attention", f"{m.name}-eval.safetensors"))
            ctx.cache[f"maps:{m.name}:sentence"], ctx.cache[f"maps:{m.name}:eval"] = maps, ev
            figs = {}
            for kind in ("encoder", "cross"):
                fig = plot_head(maps, 0, kind, 0, 0) if m.heads == 1 and m.layers == 1 else plot_grid(maps, 0, kind)
                figs[kind] = str(save_figure(fig, ctx.path("figures", f"{m.name}-{kind}.png")).relative_to(ctx.out))
            out["figures"][m.name] = figs
            out["models"][m.name] = {"translation": maps[0].target, "src_tokens": list(maps[0].tokens["src"]),
                                     "tgt_tokens": list(maps[0].tokens["tgt"])}
        out["_note"] = f"{n_tokens}-token sentence + {len(chosen)} {split} pairs"
        return out

    return run


def roles_stage(models: list[ThesisModel]):
    def run(ctx: Context) -> dict:
        chosen = capture_pairs(ctx)
        train_sources = train_corpus(ctx.settings).sources[:FREQ_LIMIT]
        out = {"models": {}}
        for m in models:
            r = load_model(ctx, m.name)
            maps = load_maps(ctx, m.name, "eval")
            freq = Counter(t for s in train_sources for t in r.tokenizer.pieces(s))
            roles = []
            for kind in maps.kinds:
                gold = corpus_relations(chosen, kind)
                rel = token_relations(maps, kind, gold) if gold is not None else None
                roles.extend(head_roles(maps, kind, frequencies=freq, relations=rel))
            out["models"][m.name] = [r_.to_dict() for r_ in roles]
        counts = Counter(r_["role"] for m in out["models"].values() for r_ in m)
        out["_note"] = ", ".join(f"{v} {k}" for k, v in counts.most_common())
        return out

    return run
