"""The output error of every plan option of one head, as executed, on sampled rows (calibration).

For a head with queries q_i, keys k_j, values v_j and output projection W_h (o_proj's columns of the
head), an option (s, w, g) runs

    S(i) = {j ≤ i : i − j ≤ w}  ∪  {j < s : j ≤ i}  ∪  {j ∈ C_g : j ≤ i}

with s ∈ {0, SINKS} fixed sink columns and C_g the g keys of largest last-query estimate
(``estimate_columns``) that are neither sinks kept by s nor among the last w + 1 positions — exactly
``LayerRunner.choose_columns``.  Its error on row i is the change of the head's contribution to the
residual stream,

    ε_i(s, w, g) = ‖W_h (o_S,i − o_i)‖²,   o_S,i = Σ_{j ∈ S(i)} e_ij v_j / Σ_{j ∈ S(i)} e_ij,
    e_ij = exp(q_i·k_j·scaling − max_j),

and the table holds its mean over R rows spread evenly over the window (``sample_rows``), together
with the executed mass m_i = Σ_{j ∈ S(i)} a_ij.  ‖W_h x‖² = ‖U_h x‖² with U_h = Λ^{1/2} Qᵀ from
W_hᵀW_h = QΛQᵀ, so the values are projected once (v'_j = U_h v_j) and every sum stays d-dimensional.

With the loss gradient g_i = ∂L/∂x_i of the residual stream where the layer adds its output (one
backward pass of the calibration text), the table δ holds the squared first-order change of the loss,

    δ_i(s, w, g) = (g_i · W_h (o_S,i − o_i))² = (u_hi · (o_S,i − o_i))²,   u_hi = W_hᵀ g_i,

whose sums over the band and columns are scalars (u_hi · v_j), as cheap as the denominators.

Cost per head: the band sums are suffix sums from the diagonal (O(R·n·d), no cancellation when the
band holds a tiny share of the row), the column sums O(R·g·d) per
(s, w); nothing n×n is formed.
"""

from __future__ import annotations

import torch

from attnlab.masks import hidden

__all__ = ["sample_rows", "projection_factor", "head_gradients", "option_errors"]


def sample_rows(n: int, count: int) -> torch.Tensor:
    """R = min(count, n) query positions spread evenly: i_r = ⌊(r + ½)·n / R⌋, r = 0 … R − 1."""
    R = max(1, min(count, n))
    return ((torch.arange(R, dtype=torch.float64) + 0.5) * n / R).floor().long()


def head_gradients(weight: torch.Tensor | None, grads: torch.Tensor | None, num_heads: int, head_dim: int):
    """u (H, R, d): u_hr = W_hᵀ g_r, the gradient g_r = ∂L/∂x_r (R, hidden) as seen by head h's output;
    None if absent."""
    if weight is None or grads is None:
        return None
    W = weight.detach().double().reshape(weight.shape[0], num_heads, head_dim)      # (hidden, H, d)
    return torch.einsum("ohd,ro->hrd", W, grads.double())


def projection_factor(weight: torch.Tensor | None, num_heads: int, head_dim: int) -> torch.Tensor:
    """U_h (H, d, d) with U_hᵀU_h = W_hᵀW_h, W_h = weight[:, h·d:(h+1)·d] (o_proj, (hidden, H·d)); identity if None."""
    if weight is None:
        return torch.eye(head_dim, dtype=torch.float64).expand(num_heads, head_dim, head_dim)
    W = weight.detach().double().reshape(weight.shape[0], num_heads, head_dim).transpose(0, 1)  # (H, hidden, d)
    lam, Q = torch.linalg.eigh(W.transpose(-1, -2) @ W)                                         # (H, d), (H, d, d)
    return lam.clamp_min(0).sqrt()[..., None] * Q.transpose(-1, -2)


def _columns(est_scores: torch.Tensor, n: int, w: int, s: int, gmax: int) -> torch.Tensor:
    """C (H, gmax): keys by decreasing estimate among s ≤ j < n − w − 1 (−1 where fewer), as choose_columns."""
    H = est_scores.shape[0]
    sc = est_scores.double().clone()
    sc[:, max(0, n - w - 1):] = -1.0
    sc[:, :s] = -1.0
    top = torch.topk(sc, min(gmax, n), dim=-1)
    C = torch.where(top.values >= 0, top.indices, torch.full_like(top.indices, -1))
    if C.shape[-1] < gmax:
        C = torch.cat([C, torch.full((H, gmax - C.shape[-1]), -1, dtype=C.dtype)], -1)
    return C


@torch.no_grad()
def option_errors(q, k, v, scaling: float, est_scores, rows, w_grid, g_grid, sinks: int, U=None, u=None, sliding=None):
    """Mean ε(s, w, g), mean executed mass and mean δ(s, w, g) over ``rows`` for s ∈ (0, sinks):
    three (H, 2, Gw, Gg) tables.

    q, k: (H, n, d_k), v: (H, n, d) of one window (GQA expanded); est_scores: (H, n); rows: (R,) long;
    U: (H, d, d) from ``projection_factor`` (identity if None); u: (H, R, d) the loss gradient seen by
    each head's output at each row, u_hi = W_hᵀ ∂L/∂x_i, giving δ_i = (u_hi · (o_S,i − o_i))², the
    squared first-order change of the loss (zeros if None); sliding: the layer's window W (row i reads
    keys i − j < W: the exact output and every option are measured under that mask), None for a full layer.
    """
    H, n, d = v.shape
    R = len(rows)
    Gw, Gg = len(w_grid), len(g_grid)
    U = projection_factor(None, H, d) if U is None else U
    vp = torch.einsum("hnd,hed->hne", v.double(), U.double())                     # (H, n, d) v'_j = U_h v_j
    j = torch.arange(n)
    s = (q[:, rows].double() @ k.double().transpose(-1, -2)) * scaling             # (H, R, n)
    far = hidden(rows[:, None], j[None, :], sliding)                                  # (R, n) the model's own mask
    s = s.masked_fill(far[None], float("-inf"))
    e = torch.exp(s - s.amax(-1, keepdim=True))                                     # (H, R, n), 0 beyond the diagonal
    # (H, R, n) u_hi · v_j
    p = torch.zeros(H, R, n, dtype=torch.float64) if u is None else u.double() @ v.double().transpose(-1, -2)
    w_t = torch.tensor([int(w) for w in w_grid])
    t = rows[:, None] - w_t[None, :] - 1                                             # (R, Gw) last key left of the band
    # band sums from the diagonal backwards, Σ_{j = i−w}^{i} e_ij v'_j (suffix sums: no cancellation)
    N_band = torch.empty(H, R, Gw, d, dtype=torch.float64)
    D_band = torch.empty(H, R, Gw, dtype=torch.float64)
    N_full = torch.empty(H, R, d, dtype=torch.float64)
    D_full = torch.empty(H, R, dtype=torch.float64)
    P_band = torch.empty(H, R, Gw, dtype=torch.float64)
    P_full = torch.empty(H, R, dtype=torch.float64)
    for r, i in enumerate(rows.tolist()):
        # keys a row can read (e = 0 before j0)
        j0 = 0 if sliding is None else max(0, i - sliding + 1)
        at = w_t.clamp_max(i - j0)                                                  # (Gw,) w ≥ i − j0: the whole row
        rev = e[:, r, j0 : i + 1].flip(-1)                                          # (H, i + 1 − j0) key i − u at u
        num = (rev[..., None] * vp[:, j0 : i + 1].flip(1)).cumsum(1)               # (H, i + 1 − j0, d)
        den = rev.cumsum(-1)
        N_band[:, r], D_band[:, r] = num[:, at], den[:, at]
        N_full[:, r], D_full[:, r] = num[:, -1], den[:, -1]
        pro = (rev * p[:, r, j0 : i + 1].flip(-1)).cumsum(-1)
        P_band[:, r], P_full[:, r] = pro[:, at], pro[:, -1]
    o = N_full / D_full[..., None]
    # sink columns left of the band: j < sinks, j ≤ t
    js = torch.arange(min(sinks, n))
    sink_on = (js[None, None, :] <= t[:, :, None]).double()                          # (R, Gw, S)
    N_sink = torch.einsum("hrj,hjd,rxj->hrxd", e[..., : len(js)], vp[:, : len(js)], sink_on)
    D_sink = torch.einsum("hrj,rxj->hrx", e[..., : len(js)], sink_on)
    P_sink = torch.einsum("hrj,rxj->hrx", (e * p)[..., : len(js)], sink_on)
    o_p = P_full / D_full                                                            # (H, R) u · o
    gmax = max(g_grid)
    bounds = [0] + [int(g) for g in g_grid]
    err = torch.zeros(H, 2, Gw, Gg, dtype=torch.float64)
    mass = torch.zeros(H, 2, Gw, Gg, dtype=torch.float64)
    delta = torch.zeros(H, 2, Gw, Gg, dtype=torch.float64)
    for z, fixed in enumerate((0, sinks)):
        for x, w in enumerate(w_grid):
            C = _columns(est_scores, n, int(w), fixed, gmax)                         # (H, gmax)
            on = (C[:, None, :] >= 0) & (C[:, None, :] <= t[None, :, x, None])          # (H, R, gmax) off-band, causal
            We = torch.gather(e, 2, C.clamp_min(0)[:, None, :].expand(H, R, gmax)) * on  # (H, R, gmax)
            Vc = torch.gather(vp, 1, C.clamp_min(0)[..., None].expand(H, gmax, d))         # (H, gmax, d)
            Wp = We * torch.gather(p, 2, C.clamp_min(0)[:, None, :].expand(H, R, gmax))   # (H, R, gmax)
            Pn = P_band[:, :, x] + (P_sink[:, :, x] if fixed else 0)
            N = N_band[:, :, x] + (N_sink[:, :, x] if fixed else 0)
            D = D_band[:, :, x] + (D_sink[:, :, x] if fixed else 0)
            for y in range(Gg):
                a, b = bounds[y], bounds[y + 1]
                if b > a:
                    N = N + We[..., a:b] @ Vc[:, a:b]
                    D = D + We[..., a:b].sum(-1)
                    Pn = Pn + Wp[..., a:b].sum(-1)
                err[:, z, x, y] = ((N / D[..., None] - o) ** 2).sum(-1).mean(-1)
                mass[:, z, x, y] = (D / D_full).mean(-1)
                delta[:, z, x, y] = ((Pn / D - o_p) ** 2).mean(-1)
    return err, mass, delta
