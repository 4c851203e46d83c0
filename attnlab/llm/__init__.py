"""Real pretrained LLMs (transformers), one sub-package per step of the path:

    models/     loading (GGUF wheels, HF folders, hub names), memory bounds, text windows
    heads/      every head on long input: streamed capture, statistics, detectors, the explorer's data
    plans/      the per-head plan (record), the knapsack selection from a calibration, the baselines' plans
    execution/  the execution seam: a layer's prefill and decoding step per backend, the KV cache, pages
    calibration/  the model run with exact attention on text: statistics, pattern search, page ranking, archives
    methods/    the methods compared, one file each, a registry by name
    eval/       ``attnlab eval``: tasks, the resumable grid, perplexity, the report

    from attnlab.llm.models.loading import load_causal_lm      # (model, tokenizer)
    from attnlab.llm import Plan, apply_plan, PlanCache
    apply_plan(model, Plan.load("plan.json"))                  # every head runs its plan

The names below are imported on first use (torch and transformers load only when needed).
"""

import importlib

_WHERE = {
    "apply_plan": "attnlab.llm.execution.attention",
    "Calibration": "attnlab.llm.calibration.statistics",
    "PlanCache": "attnlab.llm.execution.kv_cache",
    "MODELS": "attnlab.llm.models.loading",
    "fetch_model": "attnlab.llm.models.loading",
    "load_causal_lm": "attnlab.llm.models.loading",
    "HeadPlan": "attnlab.llm.plans.plan",
    "Plan": "attnlab.llm.plans.plan",
    "choose_plan": "attnlab.llm.plans.selection",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'attnlab.llm' has no attribute {name!r}")
