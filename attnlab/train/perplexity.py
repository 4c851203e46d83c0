"""How well a language model predicts a text: loss, bits per character, perplexity.

The text s_0 … s_N is cut into consecutive windows of n tokens; each window is
read once (nothing overlaps) and every token after the first is scored given
the tokens before it in its window:

    L   = −(1/T) Σ_t ln p(s_t | s_{<t} in its window)      (nats per token)
    bpc = −Σ_t log₂ p(s_t | …) / C,                          C characters of the scored text
    PPL = exp(L)

For a char tokenizer a token is a character, so bpc = L / ln 2; for BPE the
characters are counted from the text (C = T · chars/token of the stream).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnlab.data.text import TextStream, bits_per_char
from attnlab.errors import UserError

EVAL_TOKENS_PER_BATCH = 8192  # windows per forward pass: as many as fit in this many tokens


@torch.no_grad()
def evaluate_lm(model, stream: TextStream, context: int, limit: int = 0,
                device: str | torch.device | None = None) -> dict:
    """{"loss", "bpc", "perplexity", "tokens", "chars", "unknown"} of ``model`` on ``stream``.

    ``context`` is n, the window length (at most the model's ``max_len``);
    ``limit`` > 0 scores only the first ``limit`` tokens.
    """
    if context < 1:
        raise UserError(f"context must be >= 1, got {context}")
    if context > model.max_len:
        raise UserError(f"--context {context} is longer than the model's maximum ({model.max_len} tokens)")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    ids = stream.ids if not limit else stream.ids[: limit + 1]
    N = ids.numel() - 1  # tokens predicted
    if N < 1:
        raise UserError(f"{stream.name} {stream.split}: fewer than 2 tokens to score")
    was_training = model.training
    model.eval()
    loss_sum = 0.0
    full = N // context
    per_batch = max(1, EVAL_TOKENS_PER_BATCH // context)
    x_all = ids[: full * context].view(full, context)  # (W, n)
    y_all = ids[1 : full * context + 1].view(full, context)
    pieces = [(x_all[b : b + per_batch], y_all[b : b + per_batch]) for b in range(0, full, per_batch)]
    if full * context < N:  # the last, shorter window
        pieces.append((ids[full * context : N][None], ids[full * context + 1 : N + 1][None]))
    for x, y in pieces:
        logits = model(x.to(device))  # (b, n, V)
        loss_sum += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1).to(device),
                                          reduction="sum"))
    model.train(was_training)
    chars = N * stream.chars_per_token
    loss = loss_sum / N
    return {"loss": loss, "bpc": bits_per_char(loss_sum, chars), "perplexity": math.exp(min(loss, 700.0)),
            "tokens": N, "chars": round(chars), "unknown": stream.unknown}
