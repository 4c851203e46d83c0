"""Peak memory of an attention capture, estimated before the run; an input that cannot fit is refused.

Streamed capture (``attnlab.llm.heads.long_capture``), bytes, float32 activations:

    weights      Σ parameters · 4
    activations  n · 4 · (4·d_model + 3·d_ff + 2·(H + 2·H_kv)·d_k)      (one layer's forward at a time)
    block        7 · H · r · n · 4                                        (scores, softmax, skew buffer, products)
    statistics   L · H · n · 8 · (|ws| + 6)                               (profile, columns, in-band columns,
                                                                          histograms)
    runtime      ≈ 0.45 GiB                                               (Python, torch, transformers)

Eager capture (``output_attentions=True``) keeps every layer's weights:

    attentions   L · H · n² · 4,   plus 3 · H · n² · 4 for the layer being computed

``check_fits`` compares the estimate with the memory available
(``MemAvailable`` of /proc/meminfo, or a given limit) and raises a one-line
``UserError`` saying how much is needed and what to pass instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.errors import UserError

__all__ = ["MemoryEstimate", "estimate_streamed", "estimate_eager", "available_bytes", "check_fits", "gib"]

RUNTIME = int(0.45 * 2**30)


def gib(x: float) -> str:
    return f"{x / 2**30:.2f} GiB"


@dataclass(frozen=True)
class MemoryEstimate:
    weights: int
    activations: int
    attention: int
    statistics: int

    @property
    def total(self) -> int:
        return self.weights + self.activations + self.attention + self.statistics + RUNTIME

    def __str__(self) -> str:
        return (f"{gib(self.total)} (weights {gib(self.weights)}, activations {gib(self.activations)}, "
                f"attention {gib(self.attention)}, statistics {gib(self.statistics)})")


def _dims(model) -> tuple[int, int, int, int, int, int]:
    own = getattr(model, "cfg", None)  # an attnlab model (attnlab.config.ModelConfig)
    if own is not None and hasattr(own, "d_model"):
        return own.layers, own.heads, own.heads, own.d_model, own.d_k, own.ff
    cfg = model.config
    cfg = getattr(cfg, "text_config", None) or cfg
    H = cfg.num_attention_heads
    H_kv = getattr(cfg, "num_key_value_heads", None) or H
    d_model = cfg.hidden_size
    d_k = getattr(cfg, "head_dim", None) or d_model // H
    d_ff = getattr(cfg, "intermediate_size", None) or 4 * d_model
    return cfg.num_hidden_layers, H, H_kv, d_model, d_k, d_ff


def _weights(model) -> int:
    return (sum(p.numel() * p.element_size() for p in model.parameters())
            + sum(b.numel() * b.element_size() for b in model.buffers()))


def estimate_streamed(model, n: int, block_rows: int, *, n_layers: int | None = None, n_ws: int = 13) -> MemoryEstimate:
    """Estimated peak of a streamed capture of ``n`` tokens in blocks of ``block_rows`` rows."""
    L, H, H_kv, d_model, d_k, d_ff = _dims(model)
    L = L if n_layers is None else n_layers
    act = n * 4 * (4 * d_model + 3 * d_ff + 2 * (H + 2 * H_kv) * d_k)
    block = 7 * H * min(block_rows, n) * n * 4
    stats = L * H * n * 8 * (n_ws + 6)
    return MemoryEstimate(_weights(model), act, block, stats)


def estimate_eager(model, n: int) -> MemoryEstimate:
    """Estimated peak of an eager capture (every layer's n×n weights returned)."""
    L, H, H_kv, d_model, d_k, d_ff = _dims(model)
    act = n * 4 * (4 * d_model + 3 * d_ff + 2 * (H + 2 * H_kv) * d_k)
    return MemoryEstimate(_weights(model), act, (L + 3) * H * n * n * 4, 0)


def available_bytes() -> int | None:
    """Memory available to a new allocation now (``MemAvailable``), or None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_fits(estimate: MemoryEstimate, n: int, block_rows: int, *, limit: int | None = None,
               n_layers: int | None = None) -> None:
    """``UserError`` (one line) when ``estimate`` exceeds ``limit`` (default: the memory available now)."""
    given = limit is not None
    limit = available_bytes() if limit is None else limit
    if limit is None or estimate.total <= limit:
        return
    hint = []
    if estimate.attention > estimate.total / 4 and block_rows > 16:
        hint.append(f"a smaller block (--block-rows {max(16, block_rows // 4)})")
    if estimate.statistics > estimate.total / 4 and n_layers != 1:
        hint.append("fewer layers (--layers 0-3)")
    hint.append(f"fewer tokens (--tokens {max(1, n // 2)})")
    raise UserError(f"{n} tokens need about {gib(estimate.total)} but {gib(limit)} is "
                    f"{'allowed' if given else 'available'}; pass "
                    + ", or ".join(hint))
