"""DuoAttention (Xiao et al. 2024, "DuoAttention: Efficient Long-Context LLM Inference with Retrieval and Streaming
Heads").

Each KV head g of layer l has a learned gate α_{l,g} ∈ [0, 1] (``attnlab.llm.plans.duo_training.train_gates``,
as the repository's ``duo_attn/train.py``).  At deployment the heads of largest gate are retrieval
heads, full in both phases; the others are streaming heads, sinks + recent tokens in both phases:

    retrieval:  S_h(i) = {j ≤ i},                               K(t) = every token
    streaming:  S_h(i) = {j < sinks} ∪ {i − recent < j ≤ i},    K(t) = the sinks + the last recent − 1 tokens
    R = {g : α_g > threshold}                     (option ``threshold``, the repository's deploy rule), or
    R = the largest prefix of the heads sorted by α whose plan keeps ≤ β of the prefill entries.

Options: ``gates`` (the safetensors file, shape (layers, KV heads) — checked against the model; not given: the file
attnlab ships for the model, ``attnlab.llm.plans.shipped_gates``),
``sinks`` (16) and ``recent`` (64): the repository deploys 64 + 256 at 32K+ tokens; attnlab's prompts
are 2K-32K, so the defaults are scaled down (set them for longer prompts).
"""

from __future__ import annotations

from attnlab.errors import UserError
from attnlab.llm.methods import register
from attnlab.llm.methods.base import Option, PlanMethod

TRAIN = "python benchmarks/duo_attention_train.py --hf MODEL --out FILE"


def no_gates(shipped: list[str]) -> str:
    """The one line when no gate file is given and none is shipped for the model: what is shipped, how to train."""
    return (f"--option gates: duo-attention needs a gate file: attnlab ships gates for "
            f"{', '.join(shipped) or 'no model'} only; train one for this model ({TRAIN}) and pass gates=FILE")


@register
class DuoAttention(PlanMethod):
    name = "duo-attention"
    baseline = True
    default_run = False  # needs a gate file (option ``gates``): shipped for the known models only
    prefill = "retrieval heads (largest learned gates) read every causal entry; streaming heads sinks + recent tokens"
    decoding = "retrieval heads keep and read the whole cache; streaming heads keep the sinks + recent tokens"
    options = {"gates": Option(None, kind=str, help="the gate file (default: the one attnlab ships for the model; "
                                                    f"train one: {TRAIN})"),
               "threshold": Option(None, 0.0, 1.0, "KV heads with a gate above it run full (default: the most that fit "
                                   "β)", kind=float),
               "sinks": Option(16, 1, 1 << 20, "sink tokens of a streaming head"),
               "recent": Option(64, 1, 1 << 24, "recent tokens of a streaming head")}

    def __init__(self, budget: float = 1.0, **options):
        super().__init__(budget, **options)
        self.sinks = int(self.option("sinks"))
        self.recent = int(self.option("recent"))

    def check_inputs(self) -> None:
        from attnlab.llm.plans.shipped_gates import catalogue
        from attnlab.option_paths import input_file

        if not self.opts.get("gates"):   # the model's shipped file, found once the model is known (check_model)
            if not catalogue():
                raise UserError(no_gates([]))
            return
        input_file("--option gates", self.opts["gates"], "gate file")   # missing, a folder, a FIFO: before the model

    def check_model(self, model) -> None:
        self._gates(model)

    def _gates(self, model):
        """The gate file's gates (L, H_kv), checked against ``model`` (one-line UserError naming the file); no ``gates``
        given: the file attnlab ships for the model, else one line naming the models it ships gates for."""
        from attnlab.llm.plans.duo_training import load_gates
        from attnlab.llm.plans.plan import model_shape
        from attnlab.llm.plans.shipped_gates import catalogue, known_name, shipped

        path = self.opts.get("gates") or shipped(known_name(model) or "")
        if not path:
            raise UserError(no_gates([name for name, _ in catalogue()]))
        return load_gates(path, model_shape(model))

    def make_plan(self, model, n, calibration):
        import numpy as np

        from attnlab.llm.plans.plan import HeadPlan, Plan, model_shape
        from attnlab.support import Support

        shape = model_shape(model)
        gates = self._gates(model).numpy()                                                # (L, H_kv)
        L, H, H_kv = shape["num_layers"], shape["num_heads"], shape["num_kv_heads"]
        r = H // H_kv
        stream = HeadPlan(support=Support(w=self.recent - 1, columns=np.arange(self.sinks)))

        def plan(full: set) -> Plan:
            heads = [[HeadPlan.full() if (l, h // r) in full else stream for h in range(H)] for l in range(L)]
            return Plan(heads, H_kv, "duo-attention", self.budget, n,
                        {"sinks": self.sinks, "recent": self.recent, "retrieval_kv_heads": len(full)},
                        shape.get("windows"))

        ranked = np.argsort(-gates.reshape(-1), kind="stable")                  # KV heads by gate, largest first
        order = [tuple(int(x) for x in np.unravel_index(o, gates.shape)) for o in ranked]
        if "threshold" in self.opts:
            return plan({lg for lg in order if gates[lg] > self.opts["threshold"]})
        full: set = set()
        if plan(full).fraction(n) > self.budget:
            raise UserError(f"--budget {self.budget}: below DuoAttention's all-streaming plan at n = {n} "
                            f"(sinks {self.sinks} + recent {self.recent})")
        for lg in order:
            if plan(full | {lg}).fraction(n) > self.budget:
                break
            full.add(lg)
        return plan(full)

    def describe(self) -> dict:
        d = super().describe()
        if getattr(self, "plan", None) is not None:
            d["retrieval_kv_heads"] = self.plan.meta.get("retrieval_kv_heads") if hasattr(self.plan, "meta") else None
        return d
