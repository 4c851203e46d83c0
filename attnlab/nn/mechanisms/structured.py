"""The structured formulation as a trainable attention: band + key columns + sparse residual.

    A = softmax(QKᵀ/√d_k + G + M),   M_ij = 0 if (i, j) ∈ S else −∞,
    S = {|j − i − o| ≤ w}  ∪  {j ∈ T}  ∪  R_s(i)

the support of the structured matrix that ``attnlab.analysis.structured_fit``
fits (band_w + Σ_{t∈T} columns + Ẽ_s), with the softmax restricted to it:

* band of half-width w around the diagonal shifted by o = ``offset``;
* T: g = ``num_pos`` key columns (the thesis's Σ3 rare-token / positional
  columns), either fixed positions (default: the first g tokens) or, with
  ``columns="learned"``, chosen per batch entry and head as the top-g keys by
  a learned salience r_j = u_h·k_j/√d_k; then the column entries off the band
  get the gate G_ij = log σ(r_j) (so u_h is trained: G = 0 otherwise, and the
  weights are then exactly the restricted softmax);
* R_s(i): the s = ``sparse`` largest remaining scores of row i (top-s
  residual, outside band ∪ T, allowed keys only).

Cost: band and columns O(n·(2w+1+g)) through the chunked kernel (the columns
are extra keys shared by a chunk).  The residual needs the scores of every key
to find its top s: that selection is a dense, gradient-free pass done in
blocks of queries (time O(n·m·d), memory O(block·m)); the s chosen keys per
query then join the chunked kernel as extra keys (memory O(n·(2w+1+g+c·s))).
Sequences shorter than g simply use all their keys as columns.

On CUDA (fixed columns, no residual) the forward and backward run through
compiled FlexAttention with the ``BlockMask`` of ``Support.mask_mod()`` —
the same support object, drawn as FlexAttention's predicate; learned columns
(a data-dependent gate) and the residual keep the kernel path there.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.masks import hidden
from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.base import Mechanism
from attnlab.nn.mechanisms.flex import flex_attention_compiled, flex_available, flex_block_mask
from attnlab.nn.mechanisms.mask_mods import MaskMod
from attnlab.nn.mechanisms.sliding_window import kernel_chunk, sliding_window_attention
from attnlab.nn.mechanisms.sparse import scaled_scores
from attnlab.nn.softmax import masked_softmax
from attnlab.support import Support, band_of, check_num_pos, check_w

COLUMN_MODES = ("fixed", "learned")
RESIDUAL_BLOCK = 256  # queries per block in the residual selection


class Structured(Mechanism):
    name = "structured"

    def __init__(
        self, w: int, num_pos: int, sparse: int = 0, columns: str = "fixed", heads: int = 1, d_k: int = 1,
        positions: list[int] | None = None, offset: int = 0,
    ):
        super().__init__()
        check_w(w), check_num_pos(num_pos)
        if sparse < 0:
            raise ValueError(f"sparse: residual entries per row must be >= 0, got {sparse}")
        if columns not in COLUMN_MODES:
            raise ValueError(f"columns must be one of {', '.join(COLUMN_MODES)}, got {columns!r}")
        if positions is not None and (len(positions) != num_pos or len(set(positions)) != num_pos
                                      or min(positions, default=0) < 0):
            raise ValueError(f"positions: expected {num_pos} distinct non-negative key positions, got {positions}")
        self.w, self.num_pos, self.sparse = int(w), int(num_pos), int(sparse)
        self.columns, self.offset = columns, int(offset)
        self._block_masks: dict = {}
        self.register_buffer("positions", torch.tensor(positions if positions is not None else list(range(num_pos)),
                                                       dtype=torch.long), persistent=False)
        self.u = nn.Parameter(torch.randn(heads, d_k) / math.sqrt(d_k)) if columns == "learned" else None

    # --- the support S and the gate G -------------------------------------------------
    def support(self, m: int) -> Support:
        """S = B_w ∪ (rows × T) with the fixed columns T (positions < m); s = ``sparse`` residual entries per row."""
        return Support(w=self.w, columns=self.positions[self.positions < m], residual=self.sparse)

    def pattern(self, n: int, m: int) -> MaskMod:
        """The FlexAttention predicate of S: ``Support.mask_mod()`` (``flex.flex_forward(q, k, v, pattern, mask)``).

        Only a support fixed before the scores are seen has one: fixed columns and no residual.
        """
        if self.sparse:
            raise ValueError("sparse: the residual R_s is chosen from the scores, no FlexAttention pattern "
                             f"(got sparse={self.sparse})")
        if self.u is not None:
            raise ValueError("columns: learned columns are chosen from the keys and gated, no FlexAttention pattern")
        return self.support(m).mask_mod()

    def key_columns(self, k: Tensor, mask: Mask) -> tuple[Tensor, Tensor | None]:
        """T: (B|1, H|1, g) column positions and the gate log σ(r_T): (B, H, g), or None."""
        # k: (B, H, m, d_k)
        m = k.shape[-2]
        if self.u is None:
            return self.support(m).columns.view(1, 1, -1), None
        if k.shape[1] != self.u.shape[0] or k.shape[-1] != self.u.shape[1]:
            raise ValueError(f"k: learned columns were built for {self.u.shape[0]} heads of size {self.u.shape[1]}, "
                             f"got k of shape {tuple(k.shape)}")
        g = min(self.num_pos, m)
        r = torch.einsum("bhmd,hd->bhm", k, self.u) / math.sqrt(k.shape[-1])  # salience r_j
        ranked = r if mask.key_keep is None else r.masked_fill(~mask.key_keep[:, None, :], float("-inf"))
        cols = ranked.topk(g, dim=-1).indices  # (B, H, g)
        return cols, F.logsigmoid(torch.gather(r, -1, cols))

    def residual(self, q: Tensor, k: Tensor, mask: Mask, cols: Tensor) -> tuple[Tensor, Tensor]:
        """R_s(i): the top-s allowed scores off band ∪ T → idx (B, H, n, s), valid (B, H, n, s)."""
        # q: (B, H, n, d_k), k: (B, H, m, d_k), cols: (B|1, H|1, g)
        B, H, n, _ = q.shape
        m = k.shape[-2]
        s = min(self.sparse, m)
        idx, valid = [], []
        with torch.no_grad():
            j = torch.arange(m, device=q.device)
            S = Support(w=self.w, offset=self.offset, columns=cols)
            is_col = S.column_mask(m)[..., None, :]  # (B|1, H|1, 1, m)
            for i0 in range(0, n, RESIDUAL_BLOCK):
                i = torch.arange(i0, min(n, i0 + RESIDUAL_BLOCK), device=q.device)[:, None]
                # (·, ·, b, m) already in S: rows i0… of the band
                out = band_of(i.shape[0], m, self.w, i0 + self.offset, like=q) | is_col
                if mask.causal:
                    out = out | hidden(i, j)
                if mask.key_keep is not None:
                    out = out | ~mask.key_keep[:, None, None, :]
                scores = scaled_scores(q[:, :, i0 : i0 + i.shape[0]], k).masked_fill(out, float("-inf"))
                top = scores.topk(s, dim=-1)
                idx.append(top.indices)
                valid.append(top.values > float("-inf"))
        return torch.cat(idx, dim=2), torch.cat(valid, dim=2)

    def weights(self, q: Tensor, k: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k) → A: (B, H, n, m)
        B, H, n, _ = q.shape
        m = k.shape[-2]
        cols, gate = self.key_columns(k, mask)
        S = Support(w=self.w, offset=self.offset, columns=cols, residual=self.sparse)  # attnlab.support:
                                                                                       # band ∪ columns ∪ R_s
        in_band = S.band(n, m)  # (n, m)
        is_col = S.column_mask(m)[..., None, :]  # (B|1, H|1, 1, m)
        res = None
        if self.sparse > 0:
            idx, valid = self.residual(q, k, mask, cols)
            res = torch.zeros(B, H, n, m, dtype=torch.bool, device=q.device).scatter_(-1, idx, valid)
        support = S.dense(n, m, residual=res)
        allowed = mask.allowed(n, m, q.device)
        allowed = support if allowed is None else support & allowed
        s = scaled_scores(q, k)
        if gate is not None:  # G_ij = log σ(r_j) on the column entries off the band
            g_dense = torch.zeros(B, H, m, dtype=s.dtype, device=q.device).scatter(-1, cols, gate)[..., None, :]
            s = s + torch.where(is_col & ~in_band, g_dense, torch.zeros((), dtype=s.dtype, device=q.device))
        return masked_softmax(s, allowed)

    # --- the efficient forward ----------------------------------------------------------
    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v)
        B, H, n, _ = q.shape
        if q.is_cuda and self.u is None and self.sparse == 0 and flex_available():
            return self.flex_forward(q, k, v, mask)
        c = kernel_chunk(self.w)
        T = -(-n // c)
        cols, gate = self.key_columns(k, mask)
        g = cols.shape[-1]
        idx = Support(w=self.w, offset=self.offset, columns=cols).kernel_extra_idx(n, c)  # (B|1, H|1, T, g)
        own = logit = None
        if gate is not None:
            logit = gate[..., None, :].expand(B, H, T, g)
        if self.sparse > 0:
            r_idx, valid = self.residual(q, k, mask, cols)  # (B, H, n, s)
            s = r_idx.shape[-1]
            r_idx = F.pad(r_idx, (0, 0, 0, T * c - n)).view(B, H, T, c * s)  # the chunk's picks, side by side
            valid = F.pad(valid, (0, 0, 0, T * c - n)).view(B, H, T, 1, c * s)
            # (c, c·s): query a owns its s slots
            mine = torch.eye(c, dtype=torch.bool, device=q.device).repeat_interleave(s, dim=1)
            idx = torch.cat([idx.expand(B, H, T, g), r_idx], dim=-1)
            own = torch.cat([torch.ones(B, H, T, c, g, dtype=torch.bool, device=q.device), mine & valid], dim=-1)
            if logit is not None:
                logit = torch.cat([logit, torch.zeros(B, H, T, c * s, dtype=logit.dtype, device=q.device)], dim=-1)
        out = sliding_window_attention(
            q, k, v, self.w, causal=mask.causal, key_keep=mask.key_keep,
            extra_idx=idx, extra_own=own, extra_logit=logit, unique=True, chunk=c, offset=self.offset,
        )
        return out

    def flex_forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        """softmax restricted to S ∩ mask through compiled FlexAttention (CUDA: forward and backward).

        The BlockMask of ``Support.mask_mod()`` ∧ causal ∧ padding is built once per (n, m, causal)
        when there is no padding (it then depends on nothing else), per call otherwise.
        """
        # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v)
        B, H, n, _ = q.shape
        m = k.shape[-2]
        cols, _ = self.key_columns(k, mask)
        pattern = Support(w=self.w, offset=self.offset, columns=cols.view(-1)).mask_mod(q.device)
        key = (n, m, mask.causal, str(q.device))
        block_mask = self._block_masks.get(key) if mask.key_keep is None else None
        if block_mask is None:
            block_mask = flex_block_mask(pattern, mask, B, H, n, m, q.device)
            if mask.key_keep is None:
                self._block_masks[key] = block_mask
        return flex_attention_compiled(q, k, v, block_mask)

    def extra_repr(self) -> str:
        return f"w={self.w}, offset={self.offset}, num_pos={self.num_pos}, sparse={self.sparse}, columns={self.columns}"
