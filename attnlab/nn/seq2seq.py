"""The encoder–decoder Transformer (Vaswani et al. 2017, Figure 1).

    z = Encoder(x)              = Block_L ∘ … ∘ Block_1 (√d W_E[x] + f)
    p(y_t | y_<t, x)            = softmax(Decoder(y_<t, z)_t W_outᵀ)

Source and target share one vocabulary; with ``tie_embeddings`` the source
embedding, the target embedding and the output projection are one matrix
W_E (Vaswani et al. §3.4), otherwise they are three.  Padding (token id
``pad_id``) is masked out of every attention; the decoder's self-attention is
causal.
"""

from __future__ import annotations

from torch import Tensor, nn

from attnlab.config import ModelConfig
from attnlab.nn.blocks import DecoderBlock, EncoderBlock
from attnlab.nn.embedding import TokenEmbedding, TransformerInput
from attnlab.nn.mask import Mask, padding_keep
from attnlab.nn.mechanisms import build_mechanism


class Seq2SeqTransformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg.validate()
        d, V, pre = cfg.d_model, cfg.vocab_size, cfg.norm == "pre"
        self.max_len, self.pad_id = cfg.max_len, cfg.pad_id
        src_embed = TokenEmbedding(V, d, cfg.pad_id)
        tgt_embed = src_embed if cfg.tie_embeddings else TokenEmbedding(V, d, cfg.pad_id)
        self.src_input = TransformerInput(src_embed, cfg.max_len, cfg.pos_base, cfg.dropout)
        self.tgt_input = TransformerInput(tgt_embed, cfg.max_len, cfg.pos_base, cfg.dropout)
        self.encoder = nn.ModuleList(
            EncoderBlock(d, cfg.heads, cfg.ff, build_mechanism(cfg, "encoder", cfg.d_k), cfg.dropout, pre,
                         cfg.value_rank)
            for _ in range(cfg.layers)
        )
        self.decoder = nn.ModuleList(
            DecoderBlock(
                d, cfg.heads, cfg.ff,
                build_mechanism(cfg, "decoder", cfg.d_k), build_mechanism(cfg, "cross", cfg.d_k),
                cfg.dropout, pre, cfg.value_rank,
            )
            for _ in range(cfg.n_dec_layers)
        )
        self.enc_norm = nn.LayerNorm(d) if pre else nn.Identity()  # pre-LN needs a final LN
        self.dec_norm = nn.LayerNorm(d) if pre else nn.Identity()
        self.out = nn.Linear(d, V, bias=False)
        if cfg.tie_embeddings:
            self.out.weight = tgt_embed.weight  # W_out = W_E

    def encode(self, src: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None, list[Tensor]]:
        # src: (B, n) → memory z (B, n, d), keep (B, n) or None, [A_enc (B, H, n, n)] × L
        keep = padding_keep(src, self.pad_id)
        mask = Mask(key_keep=keep)
        x = self.src_input(src)
        weights = []
        for block in self.encoder:
            x, a = block(x, mask, need_weights)
            weights.append(a)
        return self.enc_norm(x), keep, weights

    def decode(
        self, tgt_in: Tensor, memory: Tensor, src_keep: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        # tgt_in: (B, m), memory: (B, n, d) → logits (B, m, V), [A_dec (B,H,m,m)] × L, [A_cross (B,H,m,n)] × L
        self_mask = Mask(key_keep=padding_keep(tgt_in, self.pad_id), causal=True)
        cross_mask = Mask(key_keep=src_keep)
        y = self.tgt_input(tgt_in)
        a_self, a_cross = [], []
        for block in self.decoder:
            y, a_s, a_c = block(y, self_mask, memory, cross_mask, need_weights)
            a_self.append(a_s)
            a_cross.append(a_c)
        return self.out(self.dec_norm(y)), a_self, a_cross

    def forward(self, src: Tensor, tgt_in: Tensor, need_weights: bool = False):
        # src: (B, n), tgt_in: (B, m) → logits (B, m, V) [, {"encoder", "decoder", "cross"}: lists of A]
        memory, keep, a_enc = self.encode(src, need_weights)
        logits, a_dec, a_cross = self.decode(tgt_in, memory, keep, need_weights)
        if need_weights:
            return logits, {"encoder": a_enc, "decoder": a_dec, "cross": a_cross}
        return logits
