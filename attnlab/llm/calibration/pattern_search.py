"""MInference's offline pattern search (Jiang et al. 2024, §3.2 "Kernel-Aware Optimal Sparse Pattern Search").

On one calibration prompt, for every (layer, head) and every pattern p ∈ {Λ, vertical-slash, block-sparse}
at the same cost (K keys per row, ``sparse_patterns.settings``), the recall of its support S_p:

    recall_p = mean_{i ≥ n/2} Σ_{j ∈ S_p(i)} a_ij,     a = softmax_{j ≤ i}(q_i·k_j · scaling)   (the full attention)

with the per-input patterns estimated on that same prompt as at run time (vs: the last 64 queries;
block: pooled q/k).  The head runs the pattern of highest recall (ties: Λ, then vs, then block).
The reference (``search_pattern`` in MInference's ``minference_forward.py``) scores rows ≥ 2500 of its
prompt; at attnlab's lengths the last half of the rows.  The early rows read every key under any
pattern (K ≥ i + 1) and add the same constant to all three.

``measure`` runs the model once per window with exact attention and fills the table
``recall[l, h, x, p]`` for the budgets K_x asked; ``Calibration.pattern_recall`` stores it (mean over
windows) and ``choose`` turns it into the per-head choice, written by ``save_choice`` as JSON.
"""

from __future__ import annotations

import json

import numpy as np
import torch

from attnlab.llm.execution import sparse_patterns as sp
from attnlab.progress import SILENT, Progress

__all__ = ["PatternRecorder", "add_patterns", "choose", "counts", "head_recall", "measure", "save_choice"]


def head_recall(a, q, k, scaling: float, K: int, rows_from: int | None = None) -> np.ndarray:
    """(recall_Λ, recall_vs, recall_block) of one head: a (n, n) its attention rows, q, k (n, d) → (3,)."""
    from attnlab.support import Support

    n = a.shape[-1]
    r0 = n // 2 if rows_from is None else rows_from
    lam = sp.settings("lambda", K)
    vs = sp.settings("vs", K)
    w, cols, diags = sp.vertical_slash(None, None, scaling, vs["vertical"], vs["slash"],
                                       a=a[None, n - min(sp.LAST_Q, n):])
    rows_only = Support(w=w, offset=r0, columns=cols[0], diagonals=diags[0] + r0)  # rows i = r0 + i′: |j − i′ − r0| ≤ w
    masks = (sp.lambda_mask(n, lam["sinks"], lam["w"], a.device)[r0:],
             torch.as_tensor(rows_only.dense(n - r0, n)).to(a.device),             # (n − r0, n), no (n, n) mask
             sp.block_mask(sp.block_choice(q[None], k[None], sp.settings("block", K)["blocks"]), n)[0, r0:])
    rows = a[r0:].double()                                                       # (n − r0, n)
    return np.array([float((rows * m).sum(-1).mean()) for m in masks])


class PatternRecorder:
    """A calibration recorder (``LayerRunner.recorder``): exact attention of each layer, and every head's recall."""

    def __init__(self, shape: dict, n: int, keys: list[int], bar=None):
        self.keys = list(keys)
        self.bar = bar              # ``attnlab.progress`` bar: one step a layer of a window, or None
        self.recall = np.zeros((shape["num_layers"], shape["num_heads"], len(self.keys), 3))   # summed over windows
        self.windows = np.zeros(shape["num_layers"])

    @torch.no_grad()
    def observe(self, layer: int, q, k, v, scaling: float, sliding: int | None = None):
        """q: (B, H, n, d_k), k, v: (B, H, n, ·) (GQA expanded) → the exact output (B, H, n, d_v)."""
        from attnlab.masks import hidden

        B, H, n, _ = q.shape
        out = torch.empty_like(q[..., : v.shape[-1]])
        i = torch.arange(n, device=q.device)
        far = hidden(i[:, None], i[None, :], sliding)                                # (n, n) the model's own mask
        for b in range(B):
            for h in range(H):
                # (n, n)
                a = torch.softmax(((q[b, h] @ k[b, h].T) * scaling).float().masked_fill(far, float("-inf")), -1)
                out[b, h] = (a @ v[b, h].float()).to(out.dtype)
                for x, K in enumerate(self.keys):
                    self.recall[layer, h, x] += head_recall(a, q[b, h], k[b, h], scaling, K)
            self.windows[layer] += 1
        if self.bar is not None:
            self.bar.advance()
        return out

    def mean(self) -> np.ndarray:
        """recall[l, h, x, p] averaged over the windows: (L, H, len(keys), 3)."""
        return self.recall / np.maximum(self.windows, 1)[:, None, None, None]


@torch.no_grad()
def measure(model, windows, keys: list[int], progress: Progress = SILENT) -> np.ndarray:
    """Run ``model`` on each window (1, n) with exact attention; the recall table (L, H, len(keys), 3).

    ``progress``: a bar over the windows' layers (every head of a layer is scored at every K before the next)."""
    from attnlab.llm.execution.attention import apply_plan, attention_modules, remove_plan
    from attnlab.llm.plans.plan import Plan, model_shape

    shape = model_shape(model)
    n = int(windows[0].shape[-1])
    bar = progress.start(f"calibration n={n}: MInference's pattern search at {', '.join(map(str, keys))} keys per row",
                         total=len(windows) * shape["num_layers"], unit="layers")
    rec = PatternRecorder(shape, n, keys, bar)
    previous, implementation = getattr(model, "attnlab_plan", None), model.config._attn_implementation
    apply_plan(model, Plan.full(shape))
    mods = attention_modules(model)
    try:
        for mod in mods:
            mod.attnlab_layer.recorder = rec
        for ids in windows:
            model(ids.to(model.device), use_cache=False, logits_to_keep=1)
    finally:
        for mod in mods:
            mod.attnlab_layer.recorder = None
        if previous is not None:
            apply_plan(model, previous)
        else:
            remove_plan(model)
            model.set_attn_implementation(implementation)
        bar.close()
    return rec.mean()


def add_patterns(cal, model, windows, keys: list[int], progress: Progress = SILENT) -> None:
    """Measure the recall table at ``keys`` on ``windows`` and add it to the calibration ``cal``
    (its other keys kept)."""
    new = measure(model, windows, keys, progress)                                            # (L, H, len(keys), 3)
    cal.pattern_recall = np.concatenate([cal.pattern_recall, new], axis=2)
    cal.pattern_keys = list(cal.pattern_keys) + list(keys)


def choose(recall: np.ndarray, K: int) -> list[list[dict]]:
    """Per layer, per head: {"pattern", its settings at K, "recall"} of the highest recall; recall (L, H, 3)."""
    best = np.argmax(recall, -1)                                                   # first maximum: Λ, vs, block
    out = []
    for l in range(recall.shape[0]):
        row = []
        for h in range(recall.shape[1]):
            p = sp.PATTERNS[int(best[l, h])]
            row.append({"pattern": p, **sp.settings(p, K), "recall": round(float(recall[l, h, best[l, h]]), 6)})
        out.append(row)
    return out


def counts(choice: list[list[dict]]) -> dict:
    """How many heads run each pattern."""
    flat = [hd["pattern"] for row in choice for hd in row]
    return {p: flat.count(p) for p in sp.PATTERNS}


def save_choice(path, choice: list[list[dict]], meta: dict | None = None) -> None:
    """The choice as JSON: {"format", meta…, "counts", "heads": [[{pattern, settings, recall}, …] per layer]}."""
    from attnlab.atomic import write_text_atomic

    doc = {"format": "attnlab.minference_patterns/1", **(meta or {}), "counts": counts(choice), "heads": choice}
    write_text_atomic(path, json.dumps(doc, indent=1) + "\n")
