"""Sampling text from a language model, one token at a time (nanoGPT's ``generate``).

    p_T(v | x_<t) ∝ exp(z_v / T)   over the k most likely tokens v (top-k), 0 elsewhere
    x_t ~ p_T(· | x_<t),           T = temperature;  T = 0: x_t = argmax_v z_v (greedy)

z = the model's logits for the next token given the last ``max_len`` tokens
(the context window slides once the text is longer).  The special tokens
(pad, bos, eos, unk) are never drawn.  No key/value cache: every step re-reads
the window — the equation as written, fast enough for a few thousand tokens.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch


@torch.no_grad()
def sample(model, prompt: Sequence[int], tokens: int, temperature: float = 1.0, top_k: int = 0,
           generator: torch.Generator | None = None, never: Sequence[int] = (0, 1, 2, 3)) -> Iterator[int]:
    """Yield ``tokens`` new token ids continuing ``prompt`` (ids)."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 = all tokens), got {top_k}")
    if not prompt:
        raise ValueError("prompt: need at least one token")
    model.eval()
    device = next(model.parameters()).device
    x = torch.tensor([list(prompt)], dtype=torch.long, device=device)  # (1, t)
    for _ in range(tokens):
        z = model(x[:, -model.max_len :])[:, -1].float()  # (1, V) logits of the next token
        z[:, list(never)] = float("-inf")
        if temperature == 0:
            nxt = z.argmax(-1, keepdim=True)
        else:
            z = z / temperature
            if top_k:
                kth = torch.topk(z, min(top_k, z.shape[-1]), dim=-1).values[:, -1:]
                z = z.masked_fill(z < kth, float("-inf"))
            nxt = torch.multinomial(torch.softmax(z, dim=-1).cpu(), 1, generator=generator).to(device)
        x = torch.cat([x, nxt], dim=1)
        yield int(nxt)
