"""Are a model's induction heads its retrieval heads?  Read ``heads.json`` files (``attnlab heads``) and compare two detectors.

For the scores x (induction, on repeated random tokens) and y (retrieval, on
needle prompts) of the same L·H heads:

* Spearman's ρ = Pearson correlation of the ranks of x and y (ties: mean rank);
* top-k overlap |top_k(x) ∩ top_k(y)| / k, against its chance level k / (L·H);
* the retrieval rank of each of the top-k induction heads (1 = the best retrieval head).

    attnlab heads --hf smollm2-135m --length 1024 --out heads-smollm2
    python benchmarks/induction_vs_retrieval.py heads-smollm2/heads.json --k 10
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

from attnlab.errors import UserError
from attnlab.schemas import heads_file


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """ρ = corr(rank(x), rank(y)) with mean ranks for ties."""
    return float(np.corrcoef(rankdata(x), rankdata(y))[0, 1])


def compare(doc: dict, a: str = "induction", b: str = "retrieval", k: int = 10) -> dict:
    x, y = np.asarray(doc["detectors"][a], float), np.asarray(doc["detectors"][b], float)  # (L, H) each; null: NaN
    H = x.shape[1]
    xf, yf = x.ravel(), y.ravel()
    top_x, top_y = np.argsort(-xf, kind="stable")[:k], np.argsort(-yf, kind="stable")[:k]
    rank_y = np.empty(yf.size, int)
    rank_y[np.argsort(-yf, kind="stable")] = np.arange(1, yf.size + 1)
    return {
        "model": doc["model"], "heads": int(xf.size), "spearman": round(spearman(xf, yf), 3),
        "k": k, "overlap": int(len(set(top_x) & set(top_y))), "chance": round(k * k / xf.size, 2),
        f"top_{a}": [{"layer": int(i // H), "head": int(i % H), a: round(float(xf[i]), 3), b: round(float(yf[i]), 3),
                      f"{b}_rank": int(rank_y[i])} for i in top_x],
        f"top_{b}": [{"layer": int(i // H), "head": int(i % H), b: round(float(yf[i]), 3), a: round(float(xf[i]), 3)} for i in top_y],
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("heads_json", nargs="+", type=Path)
    ap.add_argument("--k", type=int, default=10)
    a = ap.parse_args(argv)
    for p in a.heads_json:
        doc = heads_file.load(p, detectors=True)                   # through its schema: one line naming the field
        missing = [d for d in ("induction", "retrieval") if d not in doc.detectors]
        if missing:
            raise UserError(f"{p}: no {' or '.join(missing)} detector (attnlab heads --detectors all)")
        r = compare(doc.model_dump(), k=a.k)
        print(f"{r['model']}: {r['heads']} heads; Spearman ρ(induction, retrieval) = {r['spearman']}; "
              f"top-{r['k']} overlap {r['overlap']}/{r['k']} (chance {r['chance']})")
        print("  top induction heads (layer.head: induction, retrieval, retrieval rank): "
              + "; ".join(f"{h['layer']}.{h['head']}: {h['induction']}, {h['retrieval']}, #{h['retrieval_rank']}" for h in r["top_induction"]))
        print("  top retrieval heads (layer.head: retrieval, induction): "
              + "; ".join(f"{h['layer']}.{h['head']}: {h['retrieval']}, {h['induction']}" for h in r["top_retrieval"]))


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)
