"""Which layers' supports lose a prompt: each layer of the method's plan restored to full attention, one at a time.

At the row q that predicts v_t (``lost_prompts.answer_row``: prompt ‖ v_<t teacher-forced), with p_X(v_t) the
probability the model gives the token full attention writes there when it runs X:

    ℓ_F = log p_full(v_t),   ℓ_M = log p_M(v_t)
    M ⊕ l                   the method's plan with every head of layer l FULL (a sliding layer: its window, the model's
                            own attention there), every other layer as planned; prefill, cache and decoding steps as M's
    r_l = (ℓ_{M⊕l} − ℓ_M) / (ℓ_F − ℓ_M)        the share of the gap restoring layer l alone closes (causal tracing's
                            restoration, Meng et al. 2022, here on the support instead of the hidden state: r_l ≈ 1,
                            that layer's sparse support alone loses the prompt; Σ_l r_l ≪ 1, no one layer does)
    R = {l_1, …, l_k}       the fewest layers, taken in order of r_l, restored together under which v_t is the method's
                            argmax at row q (tried up to ``most`` layers; none: no such set among them)

With ``heads`` = k, the same one head at a time inside the k layers of largest r_l (``M ⊕ (l, h)``: head h of layer l
FULL, its KV head's cache then whole): r_{l.h} = (ℓ_{M⊕(l,h)} − ℓ_M) / (ℓ_F − ℓ_M), each head named by its part of
the plan (band w, columns, retrieval tail) — which head's support, and what it kept, lost the prompt.

One run of the method per layer (L runs) and up to ``most`` more (and one per head restored); each run is the method's
own prefill of the prompt and its decoding steps of v_<t (``method_row``'s loop, without reading the heads).  Only a
method whose layers run its plan's heads as written (``check_restorable``: a ``PlanMethod`` with the plain
``LayerRunner`` — attnlab's plans, plan files, StreamingLLM, DuoAttention); MInference's patterns, SnapKV's eviction,
Quest's pages and the oracle live in their own runners, where a FULL head in the plan would not restore the layer.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch

from attnlab.errors import UserError

__all__ = ["check_restorable", "head_words", "restored", "row_logprob", "with_full_heads", "with_full_layers"]


def check_restorable(method) -> None:
    """A one-line UserError unless ``method``'s layers run its plan's heads as written (a FULL head there is full
    attention): a ``PlanMethod`` with the plain ``LayerRunner``."""
    from attnlab.llm.methods.base import PlanMethod

    if not (isinstance(method, PlanMethod) and type(method).layer_runner is PlanMethod.layer_runner):
        raise UserError(f"--layers: method {method.name} does not run its layers by a plan's heads (MInference's "
                        f"patterns, SnapKV, Quest and the oracle have their own runners): no layer to restore")


def with_full_heads(method, heads):
    """A copy of the prepared ``method`` whose plan runs every (layer, head) of ``heads`` with full attention."""
    from attnlab.llm.plans.plan import HeadPlan

    check_restorable(method)
    plan = method.plan
    full = set(heads)
    rows = [[HeadPlan.full() if (l, h) in full else hp for h, hp in enumerate(row)] for l, row in enumerate(plan.heads)]
    out = copy.copy(method)
    out.plan = replace(plan, heads=rows, meta=dict(plan.meta))           # a sliding layer: capped to its window again
    return out


def with_full_layers(method, layers):
    """A copy of the prepared ``method`` whose plan runs every head of ``layers`` with full attention (M ⊕ layers)."""
    full = set(layers)
    return with_full_heads(method,
                           [(l, h) for l, row in enumerate(method.plan.heads) if l in full for h in range(len(row))])


def head_words(hp) -> str:
    """A head's part of the plan in a few words: its band, its columns, its retrieval tail and kept keys."""
    if hp.is_full:
        return "full"
    cols = len(hp.columns) + hp.dynamic
    words = [f"w {hp.w}"] + ([f"{cols} columns"] if cols else []) + ([f"tail {hp.tail}"] if hp.tail else [])
    return ", ".join(words + ([f"kept {hp.kept}"] if hp.kept else []))


@torch.no_grad()
def row_logprob(model, method, forced: list[int], q: int, n: int, token: int) -> tuple[float, int]:
    """(log p(token) at row q, the argmax there) when ``model`` runs ``method`` (None: its own attention) on the prompt
    forced[:n] and then the decoding steps forced[n … q], as ``attnlab eval`` runs it."""
    if method is None:
        logits = model(input_ids=torch.tensor([forced[: q + 1]]), logits_to_keep=1).logits
    else:
        with method.applied(model):
            cache = method.new_cache(model)
            logits = model(input_ids=torch.tensor([forced[:n]]), cache=cache, use_cache=True, logits_to_keep=1).logits
            for x in range(n, q + 1):
                logits = model(input_ids=torch.tensor([[forced[x]]]), cache=cache, use_cache=True).logits
    lp = torch.log_softmax(logits[0, -1].float(), -1)
    return float(lp[token]), int(lp.argmax())


def restored(model, method, forced: list[int], q: int, n: int, token: int, top: int = 5, most: int = 8,
             heads: int = 0, progress=None) -> dict:
    """The module docstring's measurement at row q: ℓ_F, ℓ_M, the ``top`` layers by r_l, and R (or None); with
    ``heads`` = k, also the ``top`` heads by r_{l.h} among the planned heads of the k layers of largest r_l."""
    lf, _ = row_logprob(model, None, forced, q, n, token)
    lm, am = row_logprob(model, method, forced, q, n, token)
    gap = lf - lm

    def share(x):
        return round((x - lm) / gap, 4) if gap > 0 else None

    plan = method.plan.heads
    L = len(plan)
    lp = []
    for l in range(L):
        lp.append(row_logprob(model, with_full_layers(method, [l]), forced, q, n, token))
        if progress is not None:
            progress(l + 1, L)
    order = sorted(range(L), key=lambda l: -lp[l][0])
    together = None
    if am != token:
        for k in range(1, min(most, L) + 1):
            got, arg = (lp[order[0]] if k == 1
                        else row_logprob(model, with_full_layers(method, order[:k]), forced, q, n, token))
            if arg == token:
                together = {"layers": sorted(order[:k]), "logp": round(got, 4)}
                break
    out = {"logp_full": round(lf, 4), "logp_method": round(lm, 4), "argmax_method": am,
           "half": sum(1 for x, _ in lp if (share(x) or 0) >= 0.5), "of": L,
           "layers": [{"layer": l, "logp": round(lp[l][0], 4), "share": share(lp[l][0]),
                       "argmax_is_value": lp[l][1] == token}
                      for l in order[:top]],
           "together": together, "tried": min(most, L) if am != token else 0}
    if heads:
        planned = [(l, h) for l in order[:heads] for h, hp in enumerate(plan[l]) if not hp.is_full]
        got = []
        for i, (l, h) in enumerate(planned):
            x, arg = row_logprob(model, with_full_heads(method, [(l, h)]), forced, q, n, token)
            got.append({"layer": l, "head": h, "plan": head_words(plan[l][h]), "logp": round(x, 4), "share": share(x),
                        "argmax_is_value": arg == token})
            if progress is not None:
                progress(i + 1, len(planned), "head")
        got.sort(key=lambda r: -r["logp"])
        out["heads"] = {"in_layers": sorted(order[:heads]), "of": len(planned),
                        "half": sum(1 for r in got if (r["share"] or 0) >= 0.5), "top": got[:top]}
    return out
