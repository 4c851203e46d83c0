"""DuoAttention's gates, trained as its repository does (Xiao et al. 2024, ``duo_attn/train.py``).

One gate α_{l,g} ∈ [0, 1] per KV head mixes the head's full attention with its streaming attention
(sinks + recent tokens); the model's weights are frozen and only the gates learn:

    out_h   = α_g · Attn_full(q_h, K_g, V_g) + (1 − α_g) · Attn_{sinks ∪ recent}(q_h, K_g, V_g)     (h ∈ G(g))
    loss    = (1/|A|) Σ_{t ∈ A} mean_d (h^full_t − h^gated_t)²  +  λ · mean |α|                 (λ = 0.05)
    α       ← clamp(α − lr · AdamW(∇ loss), 0, 1)                                                  (α₀ = 1)

h: the last hidden states (after the final norm); A: the answer tokens of multi-passkey prompts
(``passkey_prompt``: passkeys inserted at sorted depths into real text, then each asked for and
answered).  A gate stays near 1 where streaming that head changes the answers: a retrieval head.
The gates are saved in safetensors, shape (layers, KV heads) — the model's shape, checked on load — with the training
settings as metadata (``attnlab.schemas.gates``: the file's schema).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from attnlab.errors import UserError
from attnlab.schemas.gates import FORMAT as GATES_FORMAT

__all__ = ["GATED", "GateTraining", "load_gates", "passkey_prompt", "save_gates", "streaming_mask", "train_gates"]

GATED = "attnlab-duo-gated"
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
WORDS = ("apple", "river", "stone", "cloud", "tiger", "candle", "mirror", "garden", "silver", "thunder",
         "violet", "anchor", "forest", "lemon", "castle", "pepper", "harbor", "marble", "falcon", "copper")


@dataclass
class GateTraining:
    """The settings of ``train_gates`` (the repository's defaults where they carry over to CPU and ~1K tokens)."""

    steps: int = 20
    tokens: int = 1024        # prompt length
    passkeys: int = 4         # passkeys per prompt (the repository: 10 at 1K-32K tokens)
    passkey_words: int = 4
    sinks: int = 16           # streaming attention during training (the repository: 64 + 256 at up to 32K)
    recent: int = 64
    lr: float = 0.02
    reg: float = 0.05         # λ, the L1 weight (the repository's --reg_weight)
    seed: int = 0


def streaming_mask(n: int, sinks: int, recent: int, device=None):
    """(n, n) bool: j ≤ i and (j < sinks or i − j < recent) — the repository's ``generate_streaming_mask``."""
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    return (j <= i) & ((j < sinks) | (i - j < recent))


def gated_attention(module, query, key, value, attention_mask=None, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers' attention signature: (B, H, n, d) q, (B, H_kv, n, d) k, v → ((B, n, H, d), None), gated per KV
    head.  A sliding layer (``sliding_window`` w, Gemma-3's) reads j ≤ i with i − j < w in both branches, as the
    model's own attention does: its full branch is its window, its streaming branch the sinks and recent keys in it."""
    # query: (B, H, n, d), key/value: (B, H_kv, n, d)
    B, H, n, _ = query.shape
    H_kv = key.shape[1]
    w = kwargs.get("sliding_window") or getattr(module, "sliding_window", None)
    mask = streaming_mask(n, module.duo_sinks, module.duo_recent, query.device)                     # (n, n)
    if w:
        window = streaming_mask(n, 0, int(w), query.device)                                      # j ≤ i, i − j < w
        full = F.scaled_dot_product_attention(query, key, value, attn_mask=window, scale=scaling, enable_gqa=True)
        mask = mask & window
    else:
        full = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling, enable_gqa=True)
    stream = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling, enable_gqa=True)
    a = module.duo_gate.repeat_interleave(H // H_kv).view(1, H, 1, 1)                   # (1, H, 1, 1)
    return (a * full + (1 - a) * stream).transpose(1, 2).contiguous(), None


def passkey_prompt(tokenizer, haystack: list[int], n: int, passkeys: int, words: int, gen: torch.Generator):
    """(ids (n,), answer mask (n,)): ``passkeys`` passkeys inserted at sorted depths of the haystack, then each asked
    and answered."""
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    keys = [" ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (words,), generator=gen))
            for _ in range(passkeys)]
    needles = [enc(f"\nRemember this sequence of words, it's the {ORDINALS[i]} passkey to the vault: {k}.\n")
               for i, k in enumerate(keys)]
    qa = []
    for i, k in enumerate(keys):
        q, a = enc(f"\nWhat is the {ORDINALS[i]} passkey to the vault?\nPasskey:"), enc(f" {k}")
        qa.append((q, a))
    rest = n - sum(len(x) for x in needles) - sum(len(q) + len(a) for q, a in qa)
    if rest < passkeys or len(haystack) < rest:
        raise UserError(f"--tokens {n}: too short for {passkeys} passkeys (or the text is shorter than that)")
    start = int(torch.randint(0, len(haystack) - rest + 1, (1,), generator=gen))
    hay = haystack[start : start + rest]
    depths = sorted(torch.randperm(rest, generator=gen)[:passkeys].tolist())
    ids, last = [], 0
    for d, needle in zip(depths, needles):
        ids += hay[last:d] + needle
        last = d
    ids += hay[last:]
    answer = [False] * len(ids)
    for q, a in qa:
        ids += q + a
        answer += [False] * len(q) + [True] * len(a)
    return torch.tensor(ids), torch.tensor(answer)


def train_gates(model, tokenizer, text: str, cfg: GateTraining = GateTraining(), log=None, until: float | None = None,
                on_step=None) -> torch.Tensor:
    """Gates (layers, KV heads) in [0, 1] trained on passkey prompts in ``text``; the model is left unchanged.

    ``until``: a ``time.monotonic()`` deadline — training stops after the step that reaches it (at least one
    step runs); ``on_step(step, gates)`` is called after each step (1-based) with the clamped gates.
    """
    import time

    from transformers import AttentionInterface

    from attnlab.llm.execution.attention import attention_modules
    from attnlab.llm.plans.plan import model_shape

    shape = model_shape(model)
    mods = attention_modules(model)
    gates = torch.nn.Parameter(torch.ones(shape["num_layers"], shape["num_kv_heads"]))
    opt = torch.optim.AdamW([gates], lr=cfg.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.seed)
    haystack = tokenizer(text, add_special_tokens=False)["input_ids"]
    before = model.config._attn_implementation
    frozen = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    AttentionInterface.register(GATED, gated_attention)
    for l, mod in enumerate(mods):
        mod.duo_sinks, mod.duo_recent = cfg.sinks, cfg.recent
    try:
        for step in range(cfg.steps):
            ids, answer = passkey_prompt(tokenizer, haystack, cfg.tokens, cfg.passkeys, cfg.passkey_words, gen)
            # the hidden state at t predicts token t + 1: the states before each answer token
            where = answer[1:].nonzero().squeeze(-1)
            model.set_attn_implementation("sdpa")
            with torch.no_grad():
                h_full = model.model(ids[None]).last_hidden_state[0, where]                  # (|A|, D)
            model.set_attn_implementation(GATED)
            for l, mod in enumerate(mods):
                mod.duo_gate = gates[l]
            h_gated = model.model(ids[None]).last_hidden_state[0, where]
            distill = (h_full - h_gated).pow(2).mean(-1).sum() / len(where)
            reg = gates.abs().mean()
            loss = distill + cfg.reg * reg
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                gates.clamp_(0, 1)
            if log:
                log(f"step {step + 1}/{cfg.steps}: distill {distill.item():.4f}  L1 {reg.item():.3f}  "
                    f"gates mean {gates.mean().item():.3f}  > 0.5: {int((gates > 0.5).sum())}/{gates.numel()}")
            if on_step:
                on_step(step + 1, gates.detach())
            if until is not None and time.monotonic() >= until:
                break
    finally:
        for mod in mods:
            for a in ("duo_gate", "duo_sinks", "duo_recent"):
                if hasattr(mod, a):
                    delattr(mod, a)
        for p, f in zip(model.parameters(), frozen):
            p.requires_grad_(f)
        model.set_attn_implementation(before)
    return gates.detach().clone()


def save_gates(path, gates: torch.Tensor, model_name: str, cfg: GateTraining) -> None:
    """Write ``gates`` (layers, KV heads) to safetensors, atomically, with the training settings as metadata."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    meta = {"format": GATES_FORMAT, "model": model_name, **{k: str(v) for k, v in cfg.__dict__.items()}}
    save_file({"gates": gates.float().contiguous()}, str(tmp), metadata=meta)
    tmp.replace(path)


def load_gates(path, shape: dict) -> torch.Tensor:
    """Gates (layers, KV heads) from ``path`` (``attnlab.schemas.gates``: refused in one line naming the file, the field
    and the rule), checked against the model's ``shape``: a file made for another model is one line too."""
    from attnlab.schemas.gates import load

    got = load(path)
    want = (shape["num_layers"], shape["num_kv_heads"])
    if tuple(got.gates.shape) != want:
        raise UserError(f"--option gates: {path} was made for another model ({got.meta.model}: gates "
                        f"{tuple(got.gates.shape)}; this model has {want[0]} layers × {want[1]} KV heads)")
    return got.gates
