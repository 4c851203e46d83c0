"""The pre-Transformer baseline: a GRU encoder–decoder with additive attention
(Bahdanau, Cho & Bengio 2014).

    h_j   = [→h_j ; ←h_j]                        bidirectional GRU over the source
    e_ij  = v_aᵀ tanh(W_a s_{i−1} + U_a h_j)     alignment model (additive score)
    α_ij  = exp(e_ij) / Σ_k exp(e_ik)            over the real (non-padding) source tokens
    c_i   = Σ_j α_ij h_j                         context vector
    s_i   = GRU(s_{i−1}, [E y_{i−1} ; c_i])
    p(y_i | y_<i, x) = softmax(W_o tanh(W_s s_i + W_c c_i + W_y E y_{i−1}))

α is the one cross-attention "head" of this model, returned as
{"cross": [A (B, 1, m, n)]} like the Transformer's.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.config import ModelConfig
from attnlab.nn.mask import padding_keep
from attnlab.nn.scoring import Additive
from attnlab.nn.softmax import masked_softmax


class GRUAttentionSeq2Seq(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg.validate()
        d, V = cfg.d_model, cfg.vocab_size
        if d % 2:
            raise ValueError(f"d_model must be even for the bidirectional encoder, got {d}")
        self.max_len, self.pad_id = cfg.max_len, cfg.pad_id
        self.embed = nn.Embedding(V, d, padding_idx=cfg.pad_id)
        self.encoder = nn.GRU(d, d // 2, batch_first=True, bidirectional=True)
        self.init_state = nn.Linear(d // 2, d)  # s_0 = tanh(W_s ←h_1)
        self.score = Additive(heads=1, d_k=d)  # e_ij = v_aᵀ tanh(W_a s + U_a h)
        self.cell = nn.GRUCell(2 * d, d)
        self.readout = nn.Linear(3 * d, d)
        self.out = nn.Linear(d, V, bias=False)
        self.dropout = nn.Dropout(cfg.dropout)
        if cfg.tie_embeddings:
            self.out.weight = self.embed.weight

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor | None, Tensor]:
        # src: (B, n) → h (B, n, d), keep (B, n) or None, s_0 (B, d)
        keep = padding_keep(src, self.pad_id)
        x = self.dropout(self.embed(src))
        lengths = (src != self.pad_id).sum(1).clamp_min(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        h, _ = self.encoder(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=src.shape[1])
        s0 = torch.tanh(self.init_state(h[:, 0, self.cfg.d_model // 2 :]))  # backward state at j = 1
        return h, keep, s0

    def forward(self, src: Tensor, tgt_in: Tensor, need_weights: bool = False):
        # src: (B, n), tgt_in: (B, m) → logits (B, m, V) [, {"cross": [A (B, 1, m, n)]}]
        h, keep, s = self.encode(src)
        allowed = None if keep is None else keep[:, None, None, :]  # (B, 1, 1, n)
        k_a = self.score.project_keys(h[:, None])  # U_a h_j, once: (B, 1, n, d)
        y_emb = self.dropout(self.embed(tgt_in))  # (B, m, d)
        logits, alphas = [], []
        for i in range(tgt_in.shape[1]):
            e = self.score.score_projected(s[:, None, None, :], k_a)  # (B, 1, 1, n)
            alpha = masked_softmax(e, allowed)  # (B, 1, 1, n)
            c = (alpha[:, 0] @ h)[:, 0]  # c_i: (B, d)
            s = self.cell(torch.cat([y_emb[:, i], c], dim=-1), s)  # s_i
            t = torch.tanh(self.readout(torch.cat([s, c, y_emb[:, i]], dim=-1)))
            logits.append(self.out(self.dropout(t)))
            alphas.append(alpha[:, :, 0])
        logits = torch.stack(logits, dim=1)
        if need_weights:
            return logits, {"cross": [torch.stack(alphas, dim=2)]}  # (B, 1, m, n)
        return logits
