"""Roles of the heads of a model over a corpus: capture + frequencies + gold relations + ``head_roles``.

``classify_heads`` is what ``attnlab roles`` does:

(or, with ``maps_file``, the roles of a saved AttentionMaps file.)

1. sentences: the first ``limit`` pairs of the ``split`` of the corpus
   ``data`` (``attnlab.data.load_corpus``), or of a CoNLL-U file;
2. capture their attention (attnlab run folder or HF model); the decoder of
   an encoder–decoder model reads the corpus target (teacher forcing), so that
   gold alignments apply to the cross-attention;
3. token frequencies for the rare-token score: the model's tokens over the
   whole ``train`` split of the corpus (falls back to the split itself; for
   CoNLL-U, the file), capped at ``freq_limit`` sentences;
4. gold relations when present (synthetic corpus: dependencies for "encoder",
   alignments for "cross"; CoNLL-U: dependencies), mapped from words to tokens;
5. ``head_roles`` with ``thresholds``.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Sequence

from attnlab.analysis.capture import capture
from attnlab.analysis.roles import RoleThresholds, corpus_relations, head_roles, read_conllu, token_relations
from attnlab.errors import UserError
from attnlab.llm.heads.hf_capture import capture_hf, load_hf

__all__ = ["classify_heads"]


def classify_heads(
    *,
    run_dir: str | os.PathLike | None = None,
    hf: str | None = None,
    data: str | None = None,
    maps_file: str | os.PathLike | None = None,
    conllu: str | os.PathLike | None = None,
    split: str = "dev",
    limit: int = 200,
    kinds: Sequence[str] | None = None,
    truncate: bool = False,
    freq_limit: int = 20000,
    thresholds: RoleThresholds = RoleThresholds(),
):
    """Scores and roles (``HeadRole`` list) of every head; see the module docstring.

    With ``maps_file`` (a saved ``AttentionMaps``), no model and no corpus:
    the roles of the file's heads, frequencies from its own tokens.
    """
    if maps_file is not None:
        from attnlab.analysis.attention_maps import AttentionMaps

        if run_dir is not None or hf is not None or data is not None or conllu is not None:
            raise UserError("--maps replaces RUN_DIR/--hf and --data/--conllu: give it alone")
        maps = AttentionMaps.load(maps_file)
        kinds = list(kinds or maps.kinds)
        for k in kinds:
            if k not in maps.kinds:
                raise UserError(f"--kind {k}: {maps_file} has only {', '.join(maps.kinds)}")
        return head_roles(maps, kinds, thresholds=thresholds)
    if (run_dir is None) == (hf is None):
        raise UserError("give exactly one of RUN_DIR and --hf MODEL")
    if (data is None) == (conllu is None):
        raise UserError("give exactly one of --data SPEC and --conllu FILE")
    if limit < 1:
        raise UserError(f"--limit must be ≥ 1, got {limit}")
    pairs = None
    if data is not None:
        from attnlab.data import load_corpus

        corpus = load_corpus(data, split)
        pairs = list(corpus)[:limit]
        if not pairs:
            raise UserError(f"--data {data}: split {split!r} is empty")
        sentences, targets = [p.src for p in pairs], [p.tgt for p in pairs]
        try:
            freq_texts = load_corpus(data, "train").sources[:freq_limit]
        except UserError:
            freq_texts = corpus.sources[:freq_limit]
        word_rel = {k: corpus_relations(pairs, k) for k in ("encoder", "cross")}
    else:
        sentences, deps = read_conllu(conllu)
        sentences, deps = sentences[:limit], deps[:limit]
        targets, freq_texts = None, sentences
        word_rel = {"encoder": deps, "decoder": [[(d, h, lab) for d, h, lab in r if h < d] for r in deps]}

    if hf is not None:
        model = load_hf(hf)
        if model.arch != "encoder-decoder":
            targets = None
        maps = capture_hf(model, sentences, targets, truncate=truncate)
        tokenize = model.tokenize
    else:
        from attnlab.train.checkpoint import load_run

        run = load_run(run_dir)
        lm = "DecoderLM" in type(run.model).__name__
        maps = capture(run.model, run.tokenizer, sentences, None if lm else targets, truncate=truncate,
                       name=str(run_dir))
        tokenize = run.tokenizer.pieces
    frequencies = Counter(t for text in freq_texts for t in tokenize(text))

    kinds = list(maps.kinds if not kinds else kinds)
    for k in kinds:
        if k not in maps.kinds:
            raise UserError(f"--kind {k}: this model has only {', '.join(maps.kinds)}")
    out = []
    for k in kinds:
        rel = word_rel.get(k)
        relations = token_relations(maps, k, rel) if rel is not None else None
        out.extend(head_roles(maps, k, frequencies=frequencies, relations=relations, thresholds=thresholds))
    return out

