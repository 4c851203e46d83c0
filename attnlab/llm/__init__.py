"""Real pretrained LLMs (transformers): loading (GGUF wheels, HF folders), long-input attention statistics,
per-head structured plans (data: ``plan``; made by ``calibration`` + ``selection`` or a baseline; run by ``attention``,
``kv_cache``), and the methods compared (``methods``: one file each, a registry by name).

    from attnlab.llm.loading import load_causal_lm      # (model, tokenizer)
    from attnlab.llm import Plan, apply_plan, PlanCache
    apply_plan(model, Plan.load("plan.json"))           # every head runs its plan
"""

from attnlab.llm.attention import apply_plan
from attnlab.llm.calibration import Calibration
from attnlab.llm.kv_cache import PlanCache
from attnlab.llm.loading import MODELS, fetch_model, load_causal_lm
from attnlab.llm.plan import HeadPlan, Plan
from attnlab.llm.selection import choose_plan

__all__ = ["MODELS", "Calibration", "HeadPlan", "Plan", "PlanCache", "apply_plan", "choose_plan", "fetch_model", "load_causal_lm"]
