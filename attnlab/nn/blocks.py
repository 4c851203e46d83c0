"""Encoder and decoder blocks, with the LayerNorm after or before each sublayer.

    post-LN (Vaswani et al. 2017):  x ← LN(x + Dropout(Sublayer(x)))
    pre-LN  (nanoGPT, Xiong 2020):  x ← x + Dropout(Sublayer(LN(x)))

Encoder block: self-attention, then FFN.  Decoder block: masked (causal)
self-attention, cross-attention over the encoder output (queries from the
decoder, keys and values from the encoder), then FFN.
LN(x) = γ ⊙ (x − μ) / √(σ² + ε) + β over the feature axis (torch.nn.LayerNorm).
"""

from __future__ import annotations

from torch import Tensor, nn

from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.feedforward import FeedForward
from attnlab.nn.mask import Mask


class Residual(nn.Module):
    """One sublayer with its residual connection and LayerNorm (post or pre)."""

    def __init__(self, d: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, x: Tensor, sublayer) -> tuple[Tensor, Tensor | None]:
        # x: (B, n, d); sublayer(y) → (out (B, n, d), extra)
        if self.pre_norm:
            out, extra = sublayer(self.norm(x))
            return x + self.dropout(out), extra
        out, extra = sublayer(x)
        return self.norm(x + self.dropout(out)), extra


class EncoderBlock(nn.Module):
    def __init__(self, d: int, heads: int, d_ff: int, mechanism, dropout: float, pre_norm: bool, value_rank: int = 0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d, heads, mechanism, value_rank)
        self.ffn = FeedForward(d, d_ff)
        self.res_attn = Residual(d, dropout, pre_norm)
        self.res_ffn = Residual(d, dropout, pre_norm)

    def forward(self, x: Tensor, mask: Mask, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        # x: (B, n, d) → (B, n, d), A (B, H, n, n)
        x, a = self.res_attn(x, lambda y: self.self_attn(y, y, mask, need_weights))
        x, _ = self.res_ffn(x, lambda y: (self.ffn(y), None))
        return x, a


class DecoderBlock(nn.Module):
    def __init__(
        self, d: int, heads: int, d_ff: int, self_mechanism, cross_mechanism, dropout: float, pre_norm: bool,
        value_rank: int = 0
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d, heads, self_mechanism, value_rank)
        self.res_self = Residual(d, dropout, pre_norm)
        self.cross_attn = (MultiHeadAttention(d, heads, cross_mechanism, value_rank) if cross_mechanism is not None
                           else None)
        self.res_cross = Residual(d, dropout, pre_norm) if cross_mechanism is not None else None
        self.ffn = FeedForward(d, d_ff)
        self.res_ffn = Residual(d, dropout, pre_norm)

    def forward(
        self, y: Tensor, self_mask: Mask, memory: Tensor | None = None, cross_mask: Mask | None = None,
        need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        # y: (B, m, d), memory: (B, n, d) → (B, m, d), A_self (B, H, m, m), A_cross (B, H, m, n)
        y, a_self = self.res_self(y, lambda z: self.self_attn(z, z, self_mask, need_weights))
        a_cross = None
        if self.cross_attn is not None:
            y, a_cross = self.res_cross(y, lambda z: self.cross_attn(z, memory, cross_mask, need_weights))
        y, _ = self.res_ffn(y, lambda z: (self.ffn(z), None))
        return y, a_self, a_cross
