"""Stage 5: the thesis's validation tables beside the optimal structured fit, and the sweep.

On the encoder self-attention of the 16-token sentence (n × n per head), for
each model:

* Table 16 (w = 3, num_pos = 2) and Table 17 (w = 10, num_pos = 1): the
  random-search protocol (``n_attempts`` = 30 draws per family Σ1, Σ2(w),
  Σ3; per head ``Min_distance`` and ``Mean Error`` = Min_distance / n²)
  beside the optimal fit X* = band_w + num_pos columns + s = n sparse entries
  (``attnlab.analysis.comparison.compare_fits``) and the ratio of the mean
  errors;
* the same two comparisons over every captured evaluation sentence with
  n ≥ 2(2w + 1) (not only the figure's sentence): grouped by length n, each group
  one batch ``(S_n·L·H, n, n)``, the mean errors pooled over all heads of
  all sentences — so that the ratio does not rest on one sentence;
* the w × num_pos sweep (w = 0..10, num_pos = 0..4) of the optimal fit,
  written as ``figures/sweep-NAME/sweep.csv`` and ``sweep.png``
  (``attnlab.analysis.error_surface.sweep``).
"""

from __future__ import annotations

import numpy as np

from attnlab.analysis.comparison import compare_fits
from attnlab.analysis.error_surface import sweep
from attnlab.analysis.inputs import check_attention
from attnlab.analysis.structured_fit import structured_fit
from attnlab.analysis.validation import random_search
from attnlab.experiment.attention import load_maps
from attnlab.experiment.stages import Context
from attnlab.experiment.thesis_models import ThesisModel

__all__ = ["THESIS_TABLES", "tables_stage"]

# name -> (w, num_pos), with the thesis's published range of Mean Error for n = 16
THESIS_TABLES = {"table16": (3, 2), "table17": (10, 1)}
THESIS_MEAN_ERROR = (0.062, 0.082)


def default_min_len(w: int) -> int:
    """2(2w + 1): on shorter sentences the band of half-width w alone holds more than half of each row."""
    return 2 * (2 * w + 1)


def over_sentences(maps, w: int, num_pos: int, attempts: int, seed: int = 0, min_len: int | None = None,
                   s_per_row: int = 1) -> dict:
    """Random search vs optimal fit on the encoder heads of every sentence of ``maps`` with n ≥ ``min_len``.

    ``min_len`` defaults to ``default_min_len(w)`` = 2(2w + 1): on shorter
    sentences the band alone holds more than half of each row, and the
    comparison says little about the structure of the heads.

    Sentences of one length n form one batch (no padding: the protocol's
    draws are n × n); returns the pooled mean errors, their ratio, and per
    length the ratio of the pooled means, each sentence's own ratio (mean over
    its heads) and each head's (mean over the sentences).  The fit stores s = ``s_per_row``·n sparse entries
    (the thesis's setting, s = n, by default).
    """
    min_len = default_min_len(w) if min_len is None else min_len
    by_n: dict[int, list[np.ndarray]] = {}
    for sent in maps:
        a = sent.weights["encoder"]  # (L, H, n, n)
        n = a.shape[-1]
        if n >= min_len and num_pos <= n:
            by_n.setdefault(n, []).append(a.reshape(-1, n, n))
    if not by_n:
        return {"sentences": 0, "min_len": min_len}
    random_err, optimal_err, by_length = [], [], {}
    for n, mats in sorted(by_n.items()):
        a, _ = check_attention(np.stack(mats), "encoder attention", square=True, renormalize=True)  # (S_n, L·H, n, n)
        r = random_search(a, w, num_pos, n_attempts=attempts, seed=seed).mean_error  # (S_n, L·H)
        o = structured_fit(a, w, num_pos, s_per_row * n).mean_error
        random_err.append(r.ravel())
        optimal_err.append(o.ravel())
        by_length[str(n)] = {"sentences": len(mats), "ratio_of_means": float(r.mean() / max(o.mean(), 1e-12)),
                             "per_sentence": (r.mean(-1) / np.maximum(o.mean(-1), 1e-12)).tolist(),
                             # layers × heads, flattened
                             "per_head": (r.mean(0) / np.maximum(o.mean(0), 1e-12)).tolist()}
    r, o = np.concatenate(random_err), np.concatenate(optimal_err)
    return {"sentences": int(sum(len(v) for v in by_n.values())), "heads": int(r.size), "min_len": min_len,
            "mean_random_error": float(r.mean()), "mean_optimal_error": float(o.mean()),
            "ratio_of_means": float(r.mean() / max(o.mean(), 1e-12)), "by_length": by_length}


def tables_stage(models: list[ThesisModel]):
    def run(ctx: Context) -> dict:
        out = {"models": {}, "thesis_mean_error": THESIS_MEAN_ERROR}
        notes = []
        for m in models:
            maps = load_maps(ctx, m.name, "sentence")
            a = maps.weights(0, "encoder")  # (L, H, n, n)
            L, H, n, _ = a.shape
            heads = a.reshape(L * H, n, n)
            entry = {"n": n, "layers": L, "heads": H, "tables": {}}
            for name, (w, num_pos) in THESIS_TABLES.items():
                if w >= n or num_pos > n:
                    entry["tables"][name] = {"w": w, "num_pos": num_pos, "skipped": f"the sentence has only {n} tokens"}
                    continue
                rows = compare_fits(heads, w, num_pos, n_attempts=ctx.settings.attempts, seed=0, renormalize=True)
                for r in rows:
                    r["layer"], r["head"] = divmod(r["head"], H)
                ratio = np.array([r["random_mean_error"] for r in rows]).mean() / max(
                    np.array([r["optimal_mean_error"] for r in rows]).mean(), 1e-12)
                entry["tables"][name] = {
                    "w": w, "num_pos": num_pos, "s": n, "attempts": ctx.settings.attempts, "rows": rows,
                    "mean_random_error": float(np.mean([r["random_mean_error"] for r in rows])),
                    "mean_optimal_error": float(np.mean([r["optimal_mean_error"] for r in rows])),
                    "ratio_of_means": float(ratio),
                    "min_ratio": float(min(r["ratio"] for r in rows)),
                    "eval": over_sentences(load_maps(ctx, m.name, "eval"), w, num_pos, ctx.settings.attempts),
                }
            ws = [w for w in range(0, 11) if w < n]
            ps = [p for p in range(0, 5) if p <= n]
            rows, csv_path, png_path = sweep(heads, ws, ps, ctx.out / "figures" / f"sweep-{m.name}", renormalize=True)
            entry["sweep"] = {"rows": rows, "csv": str(csv_path.relative_to(ctx.out)),
                              "png": str(png_path.relative_to(ctx.out))}
            out["models"][m.name] = entry
            t16 = entry["tables"].get("table16", {})
            if "ratio_of_means" in t16:
                ev = t16["eval"]
                over = f" ({ev['ratio_of_means']:.1f}× over {ev['sentences']} sentences)" if ev.get("sentences") else ""
                notes.append(f"{m.name}: ratio {t16['ratio_of_means']:.1f}×" + over)
        out["_note"] = "  ".join(notes)
        return out

    return run
