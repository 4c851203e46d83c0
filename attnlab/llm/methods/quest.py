"""Quest (Tang et al. 2024, "Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference").

Prefill: full attention; the KV cache keeps every token.  Decoding: the cached keys are cut into
pages of ``page`` consecutive positions (16 in the paper), each summarised by the element-wise
minimum and maximum of its keys; a query q reads only the ⌊tokens / page⌋ pages of largest upper
bound, the current (last) page always:

    m_P = min_{j ∈ P} k_j,   M_P = max_{j ∈ P} k_j                     (element-wise, d_k values each)
    U_P(q) = Σ_d max(q_d · m_{P,d}, q_d · M_{P,d})  ≥  q·k_j  for every j ∈ P
    S(q_i) = {j ≤ i : page(j) ∈ top_K U(q_i) ∪ {page(i)}},  K = ⌊tokens / page⌋

The bound holds because q_d·k_d ≤ max(q_d·m_d, q_d·M_d) for m_d ≤ k_d ≤ M_d.  Each query head picks
its own pages (GQA: the pages of its KV head's keys), and the first two layers read densely, as in
the paper.  Budget: ``tokens``, the tokens a query reads (default β · n, rounded to whole pages, n
the prompt length given to ``prepare``); with tokens ≥ the cache, decoding equals full attention.
The summaries are recomputed from the cache at every step here (Quest keeps them next to the pages):
the accuracy is Quest's, the speed is not.
"""

from __future__ import annotations

# numpy and torch load inside the functions that compute: `attnlab methods` reads this file's class without them
from attnlab.llm.methods import register
from attnlab.llm.methods.base import Method, Option

__all__ = ["Quest"]   # its decoding: ``quest_runner``


@register
class Quest(Method):
    name = "quest"
    baseline = True
    prefill = "every causal entry (full attention)"
    decoding = ("the cache keeps every token; a query reads the ⌊tokens/page⌋ pages of 16 keys of largest min/max "
                "upper bound, the current page always, the first two layers densely")
    options = {"page": Option(16, 1, 1024, "keys per page (min/max summaries kept per page)"),
               "tokens": Option(None, 1, 10**7, "keys a decoding query reads, in whole pages (default: β·n)", kind=int)}
    prefill_reuse = True   # full attention into a DynamicCache: a full prefill's logits and cache are its own

    def __init__(self, budget: float = 1.0, **options):
        super().__init__(budget, **options)
        self.page = int(self.option("page"))

    def tokens(self, n: int) -> int:
        """Tokens a decoding query reads: the ``tokens`` option, else β·n, in whole pages (at least one)."""
        t = self.opts.get("tokens", self.budget * max(n, 1))
        return max(1, int(round(t / self.page))) * self.page

    def kv_tokens(self, n: int) -> int:
        """KV tokens kept per KV head: all of them (Quest reads few, evicts none)."""
        return n

    def _install(self, model) -> None:
        from attnlab.llm.execution.attention import apply_plan
        from attnlab.llm.methods.quest_runner import QuestRunner
        from attnlab.llm.plans.plan import Plan, model_shape

        apply_plan(model, Plan.full(model_shape(model), self.n), QuestRunner, page_size=self.page,
                   read_pages=self.tokens(self.n) // self.page)

    def _uninstall(self, model) -> None:
        from attnlab.llm.execution.attention import remove_plan

        remove_plan(model)

    def describe(self) -> dict:
        return {**super().describe(), "page": self.page, "tokens": self.tokens(self.n)}
