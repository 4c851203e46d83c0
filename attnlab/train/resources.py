"""Memory a training run needs, estimated from its configuration before anything is allocated.

With V the vocabulary, d the width, d_ff the FFN width, H heads, L_e encoder
and L_d decoder layers, the parameters number about

    P = V·d·(1 if tied else 3) + L_e·(4d² + 2d·d_ff) + L_d·(8d² + 2d·d_ff),

and a step of T tokens (``max_tokens``, or the whole corpus when it is
smaller) in sequences of n ≤ ``max_len`` holds

    16·P                                 weights, gradients, Adam's two moments (fp32)
  + 4·T·(12d + 2d_ff + 3·H·k)·(L_e+L_d)   activations kept for the backward pass, k scores per query
  + 12·T·V                               logits, their log-softmax and its gradient

bytes, with k = n for full attention and k = min(n, 2w + 1 + num_pos + num_random) for the
sparse mechanisms (their least; linear ones need fewer still, so the scores
term is left out for them).  ``check_fits`` refuses, in one line, a run
whose estimate exceeds the memory the device has available.  The estimate is
meant to be low rather than high: a run it lets through may still be tight,
a run it refuses does not fit.
"""

from __future__ import annotations

import os

import torch

from attnlab.config import ModelConfig
from attnlab.errors import UserError

GB = 1024**3


LINEAR = ("linear", "taylor", "linformer")  # no n×m scores in their forward


def training_bytes(cfg: ModelConfig, max_tokens: int) -> dict[str, int]:
    """The three terms of the estimate (bytes): ``parameters`` (×16), ``activations``, ``logits``.

    ``max_tokens`` is T, the tokens of one step (0: the parameters alone)."""
    V, d, d_ff, H = cfg.vocab_size, cfg.d_model, cfg.ff, cfg.heads
    L_e = 0 if cfg.model == "lm" else cfg.layers
    L_d = cfg.n_dec_layers
    per_dec = 4 * d * d if cfg.model == "lm" else 8 * d * d
    P = V * d * (1 if cfg.tie_embeddings else 3) + L_e * (4 * d * d + 2 * d * d_ff) + L_d * (per_dec + 2 * d * d_ff)
    T = max_tokens
    n = min(cfg.max_len, T)
    if cfg.attention == "full":  # dot-product full attention runs through SDPA (flash-style): no n×n scores kept
        k = 0 if cfg.scoring == "dot" else n
    else:
        k = 0 if cfg.attention in LINEAR else min(n, 2 * cfg.w + 1 + cfg.num_pos + cfg.num_random)
    return {
        "parameters": 16 * P,
        "activations": 4 * T * (12 * d + 2 * d_ff + 3 * H * k) * (L_e + L_d),
        "logits": 12 * T * V,
    }


def available_bytes(device: torch.device) -> int:
    """Free memory of a CUDA device, else the host's available memory (MemAvailable)."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_bytes(need: int, what: str, hint: str, device: torch.device | str = "cpu") -> None:
    """Refuse (``UserError``) ``need`` bytes that ``device`` does not have; ``what`` needs them,
    ``hint`` says what to lower."""
    device = torch.device(device)
    have = available_bytes(device)
    if need > have:
        raise UserError(f"{what} needs about {need / GB:.1f} GB but {device.type} has {have / GB:.1f} GB available; "
                        f"{hint}")


def check_fits(cfg: ModelConfig, tokens: int, device: torch.device | str = "cpu") -> int:
    """Refuse (``UserError``) a run whose estimated memory exceeds what ``device`` has; returns the estimate.

    ``tokens``: T, the tokens of one step (``max_tokens``, or the corpus when smaller; 0 = parameters only)."""
    device = torch.device(device)
    parts = training_bytes(cfg, tokens)
    need, have = sum(parts.values()), available_bytes(device)
    if need > have:
        detail = ", ".join(f"{k} {v / GB:.1f} GB" for k, v in parts.items())
        raise UserError(f"this run needs about {need / GB:.1f} GB ({detail}; vocab_size {cfg.vocab_size}, "
                        f"d_model {cfg.d_model}, ff {cfg.ff}, max_len {cfg.max_len}, {tokens} tokens per step) "
                        f"but {device.type} has {have / GB:.1f} GB available; lower the width, the vocabulary, "
                        f"the sequence length or the batch")
    return need
