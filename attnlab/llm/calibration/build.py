"""What the calibrated methods need at one length, measured on calibration text: statistics, patterns, scores, ranks.

    cal, changed = build_calibration(model, tokenizer, methods, n, text, windows, mix, cal)   # text: file or TokenText

A calibration at length n is made of up to four measurements, each made only when one of the ``methods`` asks for it
and ``cal`` (what an earlier run made) lacks it:

    statistics     ``calibration.calibrate`` on ``windows`` windows of n tokens of the text (+ the ``mix`` prompts,
                   ``calibration.mix``), with the candidates and the gradients the methods ask for
    patterns       MInference's pattern search at the keys per row K the methods read (``pattern_search``)
    retrieval      the retrieval score of every head on ``RETRIEVAL_PROMPTS`` needle prompts (``head_scan``)
    page ranking   read-back's page scores ranked at K pages on the text's first window (``page_ranking``)

``calibration_file`` keeps the result in a file (the eval folder's ``calibration-n.npz``, ``attnlab calibrate --full``):
what it holds is read, what the methods still need is measured, and the file is written again only then.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.progress import SILENT, Progress

__all__ = ["RETRIEVAL_N", "RETRIEVAL_PROMPTS", "RETRIEVAL_SEED", "build_calibration", "calibration_file", "method_of",
           "retrieval_calibration"]

RETRIEVAL_N, RETRIEVAL_PROMPTS, RETRIEVAL_SEED = 512, 6, 7  # needle prompts of the retrieval scores (never the eval's)


def calibration_file(model, tokenizer, methods: list, n: int, path: Path, text, windows: int,
                     mix: list | None = None, progress: Progress = SILENT):
    """``build_calibration`` kept in the file ``path``: what it holds is read, what the methods still need is measured
    and the file written again only then (a later run at the same n reuses it)."""
    from attnlab.llm.calibration.archive import load_calibration

    path = Path(path)
    old = load_calibration(path) if path.exists() else None
    cal, changed = build_calibration(model, tokenizer, methods, n, text, windows, mix, old, progress)
    if changed:
        cal.save(path)
    return cal


def build_calibration(model, tokenizer, methods: list, n: int, text, windows: int, mix: list | None = None,
                      cal=None, progress: Progress = SILENT):
    """What the calibrated ``methods`` need at length n, on ``windows`` windows of the calibration ``text`` (a text
    file, or its ``TokenText`` read once) (+ the ``mix`` prompts, ``calibration.mix``: [(task, count)], parsed where
    the option was given): the statistics (unless ``cal`` holds them), MInference's pattern search at the keys it
    lacks, the retrieval scores, the page ranking.  Returns (calibration, whether anything was measured)."""
    from attnlab.llm.calibration.mix import mix_windows
    from attnlab.llm.calibration.statistics import calibrate
    from attnlab.llm.eval.tasks import Haystack
    from attnlab.llm.models.text_windows import TokenText
    from attnlab.llm.plans.plan import model_shape

    need = [m for m in methods if m.calibrated]
    changed = cal is None
    have = set(cal.pattern_keys) if cal is not None else set()
    keys = sorted({k for m in need for k in (m.calibration_pattern_keys(n) or [])} - have)
    K = max((m.page_ranking_pages for m in need), default=0)
    pages = bool(K) and (cal is None or cal.page_ranking[0] != K)
    if cal is None or keys or pages:   # the text's windows, cut once: the statistics, the pattern search, the ranking
        text = TokenText.of(tokenizer, text)
        cut = text.windows(n, windows)
    if cal is None:
        shape = model_shape(model)
        cands = sorted({c for m in need for c in (m.calibration_candidates(shape, n) or [])})
        hay = Haystack.of_text(tokenizer, text.text, text.path, n) if mix else None   # the text, the mix's haystack
        cal = calibrate(model, cut + mix_windows(tokenizer, hay, n, mix or []), cands or None,
                        grads=any(m.calibration_grads for m in need), progress=progress)
    if keys:   # MInference's pattern search at keys the calibration lacks (one more exact pass over its text, no mix)
        from attnlab.llm.calibration.pattern_search import add_patterns

        add_patterns(cal, model, cut, keys, progress)
        changed = True
    if any(m.needs_retrieval for m in need) and not cal.retrieval.any():
        progress.stage(f"calibration n={n}: retrieval scores of every head on {RETRIEVAL_PROMPTS} needle prompts")
        cal.retrieval = retrieval_calibration(model, tokenizer, n)
        changed = True
    if pages:   # read-back's page scores ranked on the first window of the calibration text (``add_page_ranking``)
        from attnlab.llm.calibration.page_ranking import rank_pages, ranking_array

        progress.stage(f"calibration n={n}: read-back's page scores ranked at K = {K} on one window")
        cal.page_ranking = ranking_array(rank_pages(model, cut[0], K=K))
        changed = True
    return cal, changed


def method_of(spec: str, budget: float):
    """The method ``spec`` (``name[:key=value…]``, a registered method or preset) configured at β = ``budget``."""
    from attnlab.llm import methods as registry
    from attnlab.option_values import split_method

    base, pairs = split_method(spec)            # not key=value, or a key given twice: one line
    return registry.get(base, budget, **dict(pairs))


def retrieval_calibration(model, tokenizer, n: int):
    """Retrieval score per head (L, H) on ``RETRIEVAL_PROMPTS`` synthetic copy prompts of min(n, RETRIEVAL_N) tokens."""
    from attnlab.llm.heads.head_scan import retrieval_scores

    return retrieval_scores(model, tokenizer, n=min(n, RETRIEVAL_N), count=RETRIEVAL_PROMPTS, seed=RETRIEVAL_SEED)
