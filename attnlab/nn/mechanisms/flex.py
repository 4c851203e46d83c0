"""FlexAttention path: the same mask_mod patterns through PyTorch's compiled kernel.

    out = flex_attention(q, k, v, block_mask = create_block_mask(pattern ∧ causal ∧ padding))

``torch.nn.attention.flex_attention`` skips the key blocks the pattern leaves
empty.  On CPU it has no backward and its first call compiles (tens of seconds),
so on CPU it is an optional inference path (``flex_forward``; ``flex_available()``
says whether it works here, ``flex_forward`` raises ``RuntimeError`` when it
does not).  On this project's CPU the sliding-window kernel is faster (see
benchmarks/attention_speed.py).  On CUDA it trains (forward and backward):
the ``structured`` mechanism runs there through ``flex_attention_compiled``.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor

from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.mask_mods import MaskMod, causal, padding

RECOMPILE_LIMIT = 64  # one compilation per (shape, mask kind): dynamo's default 8 is too few for a sweep over n


@lru_cache(maxsize=1)
def _compiled():
    import torch._dynamo
    from torch.nn.attention.flex_attention import flex_attention

    # past dynamo's limit flex_attention runs *unfused*, materialising the n × m scores (at n = 16K,
    # 8 heads: 8.6 GB — the benchmark was killed for memory): raise it rather than fall back silently
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), RECOMPILE_LIMIT))
    return torch.compile(flex_attention, dynamic=False)


def flex_available() -> bool:
    """Can FlexAttention be imported and compiled here (CPU needs a C++ compiler)?"""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except ImportError:
        return False
    import shutil

    return torch.cuda.is_available() or shutil.which("g++") is not None or shutil.which("c++") is not None


def flex_attention_compiled(q: Tensor, k: Tensor, v: Tensor, block_mask, scale: float | None = None,
                            enable_gqa: bool = False) -> Tensor:
    """Compiled FlexAttention with a BlockMask (differentiable on CUDA); ``enable_gqa``: k, v with H_kv | H heads,
    read in place."""
    # q: (B, H, n, d_k), k: (B, H or H_kv, m, d_k), v: (B, H or H_kv, m, d_v) → (B, H, n, d_v)
    return _compiled()(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=enable_gqa)


def flex_attention_lse(q: Tensor, k: Tensor, v: Tensor, block_mask, scale: float | None = None,
                       enable_gqa: bool = False):
    """(out, ℓ): FlexAttention's output and each row's log-sum-exp ℓ_i = log Σ_{j read} exp(q_i·k_j · scale) (natural
    log, fp32), compiled on CUDA; eager on the CPU, where the compiled kernel returns no ℓ (small inputs: tests)."""
    # q: (B, H, n, d_k), k: (B, H or H_kv, m, d_k), v: (B, H or H_kv, m, d_v) → (B, H, n, d_v), (B, H, n)
    import warnings

    from torch.nn.attention import flex_attention as fa

    run = fa.flex_attention if q.device.type == "cpu" else _compiled()
    with warnings.catch_warnings():   # on the CPU eager on purpose: "called without torch.compile()"
        warnings.simplefilter("ignore", UserWarning)
        if hasattr(fa, "AuxRequest"):   # torch ≥ 2.9: return_lse is deprecated
            out, aux = run(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=enable_gqa,
                           return_aux=fa.AuxRequest(lse=True))
            return out, aux.lse
        return run(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=enable_gqa, return_lse=True)


def flex_block_mask(pattern: MaskMod, mask: Mask, B: int, H: int, n: int, m: int, device):
    """FlexAttention's BlockMask of pattern ∧ causal ∧ padding."""
    from torch.nn.attention.flex_attention import create_block_mask

    full = pattern
    if mask.causal:
        full = full & causal()
    if mask.key_keep is not None:
        full = full & padding(mask.key_keep)
    return create_block_mask(full, B if mask.key_keep is not None else None, None, n, m, device=str(device))


def flex_forward(q: Tensor, k: Tensor, v: Tensor, pattern: MaskMod, mask: Mask, block_mask=None) -> Tensor:
    """Softmax attention restricted to ``pattern`` (and the mask) by compiled FlexAttention; no gradient."""
    # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v)
    if not flex_available():
        raise RuntimeError("FlexAttention is not available here (needs torch >= 2.5 and a C++ compiler on CPU)")
    if torch.is_grad_enabled() and q.device.type == "cpu" and any(x.requires_grad for x in (q, k, v)):
        raise RuntimeError("FlexAttention has no backward on CPU: use the chunked forward to train")
    B, H, n, _ = q.shape
    if block_mask is None:
        block_mask = flex_block_mask(pattern, mask, B, H, n, k.shape[-2], q.device)
    return _compiled()(q, k, v, block_mask=block_mask)
