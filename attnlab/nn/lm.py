"""A decoder-only language model (GPT; nanoGPT's layout with ``norm = "pre"``).

    p(x_t | x_<t) = softmax(Block_L ∘ … ∘ Block_1(√d W_E[x] + f)_t W_Eᵀ)

Each block is masked (causal) self-attention followed by the FFN — the
Transformer decoder without cross-attention.  Character-level on any text file
with the char tokenizer.
"""

from __future__ import annotations

from torch import Tensor, nn

from attnlab.config import ModelConfig
from attnlab.nn.blocks import DecoderBlock
from attnlab.nn.embedding import TokenEmbedding, TransformerInput
from attnlab.nn.mask import Mask, padding_keep
from attnlab.nn.mechanisms import build_mechanism


class DecoderLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg.validate()
        d, pre = cfg.d_model, cfg.norm == "pre"
        self.max_len, self.pad_id = cfg.max_len, cfg.pad_id
        embed = TokenEmbedding(cfg.vocab_size, d, cfg.pad_id)
        self.input = TransformerInput(embed, cfg.max_len, cfg.pos_base, cfg.dropout)
        self.blocks = nn.ModuleList(
            DecoderBlock(d, cfg.heads, cfg.ff, build_mechanism(cfg, "decoder", cfg.d_k), None, cfg.dropout, pre,
                         cfg.value_rank)
            for _ in range(cfg.layers)
        )
        self.norm = nn.LayerNorm(d) if pre else nn.Identity()
        self.out = nn.Linear(d, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.out.weight = embed.weight

    def forward(self, x: Tensor, need_weights: bool = False):
        # x: (B, n) → logits (B, n, V) [, {"decoder": [A (B, H, n, n)] × L}]
        mask = Mask(key_keep=padding_keep(x, self.pad_id), causal=True)
        h = self.input(x)
        weights = []
        for block in self.blocks:
            h, a, _ = block(h, mask, need_weights=need_weights)
            weights.append(a)
        logits = self.out(self.norm(h))
        return (logits, {"decoder": weights}) if need_weights else logits
