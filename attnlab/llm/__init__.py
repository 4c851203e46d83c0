"""Real pretrained LLMs (transformers): loading, long-input statistics, per-head structured plans.

    from attnlab.llm import Plan, apply_plan, PlanCache
    apply_plan(model, Plan.load("plan.json"))          # every head runs its plan
"""

from attnlab.llm.attention import apply_plan
from attnlab.llm.kv_cache import PlanCache
from attnlab.llm.plan import Calibration, HeadPlan, Plan, choose_plan

__all__ = ["Calibration", "HeadPlan", "Plan", "PlanCache", "apply_plan", "choose_plan"]

try:  # the loading module of the LLM-capture issue (branch llm)
    from attnlab.llm.loading import MODELS, fetch_model, load_causal_lm  # noqa: F401

    __all__ += ["MODELS", "fetch_model", "load_causal_lm"]
except ImportError:  # pragma: no cover - before that branch is merged
    pass
