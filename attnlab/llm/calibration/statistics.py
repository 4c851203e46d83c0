"""Calibration: the exact attention of a real LLM on text, in blocks of rows, streamed into per-head statistics.

``calibrate(model, windows)`` runs the model with exact attention (never n×n: ``ROW_BLOCK`` rows
at a time) and records, per (layer, head) and for every option of the grid (band half-width w ∈
``W_GRID``, column count g ∈ ``G_GRID``), what ``attnlab.llm.plans.selection.choose_plan`` needs to choose
a plan: the mass the option captures, and the change of the head's output when it is executed
(``attnlab.llm.calibration.plan_error``); MInference's candidates are measured by their output error on the last
``LAST_Q`` queries.  The hooks here read the residual stream, the output projection and (optionally)
the loss gradient where each layer adds its output.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from attnlab.atomic import write_atomic
from attnlab.errors import UserError
from attnlab.llm.calibration.plan_error import head_gradients, option_errors, projection_factor, sample_rows
from attnlab.llm.execution.attention import apply_plan, attention_modules, estimate_columns, remove_plan
from attnlab.llm.plans.limits import G_GRID, W_GRID  # the options' grid, the plans' own (``choose_plan``)
from attnlab.llm.plans.plan import LAST_Q, SINKS, Plan, model_shape
from attnlab.masks import hidden, near
from attnlab.progress import SILENT, Progress
from attnlab.support import top_columns

__all__ = ["ERR_ROWS", "G_GRID", "ROW_BLOCK", "W_GRID", "Calibration", "calibrate", "candidate_columns", "output_gain",
           "output_norms", "row_gradients"]

ROW_BLOCK = 256    # rows of exact attention held at once during calibration
ERR_ROWS = 128     # rows per window on which the options' output errors are measured (dev-chosen, see choose_plan)


class Calibration:
    """Per-head statistics of the exact attention on calibration windows (``observe`` runs inside the model).

    For every layer l, head h, window and grid point (w, g) it accumulates

        fit[l, h, w, g]  = μ(w, g) with the exact fit's columns T_g(w) = top_columns(c(w), g)
        est[l, h, w, g]  = μ(w, g) with the columns an input would get at run time (last-query estimate)
        sink[l, h, w]    = μ of B_w ∪ {0..SINKS−1}            (StreamingLLM / DuoAttention supports)
        fixed[l, h, w, g, t] = windows in which sink position t is among T_g(w)

    and, for ``candidates`` (a list of (w, fixed, dynamic) supports), the relative output error
    ‖o_S − o‖ / ‖o‖ on the last ``LAST_Q`` queries (MInference's search by output error).

    With ``err_rows`` > 0 it also records, for every executed option (s, w, g) — s ∈ {0, SINKS}
    fixed sink columns, band w, g columns chosen per input as at run time — on ``err_rows`` rows
    spread over the window (``attnlab.llm.calibration.plan_error``):

        err[l, h, s, w, g]       = mean_i ‖W_h (o_S,i − o_i)‖²   (the head's change of the residual stream)
        mass_exec[l, h, s, w, g] = mean_i Σ_{j ∈ S(i)} a_ij
        resid[l]                 = mean_i ‖x_i‖², x the residual stream entering layer l (set by ``calibrate``)
        out_scale[l]             = mean_i 1 / rms(y_i)², y = o_proj's output, when the layer normalises it before
                                   adding it to the stream (Gemma-2/3: x + γ ⊙ y / rms(y), so a change δ of y
                                   reaches the stream as ≈ γ ⊙ δ / rms(y); W_h is then diag(γ) W_h); 0: no such norm
        delta[l, h, s, w, g]     = mean_i (g_i · W_h (o_S,i − o_i))²   (g_i = ∂L/∂x_i where layer l adds its output)
        gsq[l]                   = mean_i ‖g_i‖²

    (the last two need the gradients ``row_grads``, set per window by ``calibrate``).
    A sliding-window layer (window W) is measured under its own mask, i − j < W, exact output included.
    """

    def __init__(self, shape: dict, n: int, candidates: list[tuple[int, int, int]] | None = None, err_rows: int = 0):
        L, H = shape["num_layers"], shape["num_heads"]
        self.shape, self.n = shape, n
        self.candidates = list(candidates or [])
        self.w_grid = sorted({w for w in W_GRID if w < n - 1} | {w for w, _, _ in self.candidates if w < n - 1})
        self.g_grid = list(G_GRID)
        Gw, Gg = len(self.w_grid), len(self.g_grid)
        self.fit = np.zeros((L, H, Gw, Gg))
        self.est = np.zeros((L, H, Gw, Gg))
        self.sink = np.zeros((L, H, Gw))
        self.fixed = np.zeros((L, H, Gw, Gg, SINKS))
        self.cand_err = np.zeros((L, H, len(self.candidates)))
        self.cand_mass = np.zeros((L, H, len(self.candidates)))
        self.windows = np.zeros(L)
        self.err_rows = int(err_rows)
        self.err = np.zeros((L, H, 2, Gw, Gg))
        self.mass_exec = np.zeros((L, H, 2, Gw, Gg))
        self.resid = np.zeros(L)
        self.out_scale = np.zeros(L)
        self.delta = np.zeros((L, H, 2, Gw, Gg))
        self.gsq = np.zeros(L)
        # K of MInference's pattern search (``pattern_search.measure``), set by the caller
        self.pattern_keys: list[int] = []
        # recall[l, h, x, (Λ, vs, block)] at K = pattern_keys[x], mean over windows
        self.pattern_recall = np.zeros((L, H, 0, 3))
        # retrieval score per head (head_scan.retrieval_scores), set by the caller; 0: not measured
        self.retrieval = np.zeros((L, H))
        # read-back's page scores ranked on the calibration text (page_ranking.ranking_array: [K, far rows, recall@K and
        # hit@K of the bound, the mean key, the split]), set by the caller; K = 0: not measured
        self.page_ranking = np.zeros(8)
        self.row_grads = [None] * L     # (R, hidden) ∂L/∂x at the sampled rows of the current window, per layer
        self.out_proj = [None] * L      # o_proj weights (hidden, H·d) per layer, set by ``calibrate``
        self.current_rows = None        # rows of the current window when they are not ``sample_rows`` (a mixed window)
        self.bar = None                 # the progress bar ``calibrate`` moves a step per block of rows (``tick``)

    @torch.no_grad()
    def observe(self, layer: int, q, k, v, scaling: float, sliding: int | None = None):
        """Exact causal attention of one layer, block by block of rows, recording the statistics; returns its output.

        q: (B, H, n, d_k), k, v: (B, H, n, d) (GQA already expanded).  Returns (B, H, n, d).
        """
        B, H, n, _ = q.shape
        out = torch.empty_like(q[..., : v.shape[-1]])
        w_grid = self.w_grid
        Gw = len(w_grid)
        dev = q.device                                               # every mask and sum on the input's device
        j = torch.arange(n, device=dev)
        for b in range(B):
            # c_t(w) = Σ_{i − t > w} a_it: off-band column mass
            c = torch.zeros(H, Gw, n, dtype=torch.float64, device=dev)
            for i0 in range(0, n, ROW_BLOCK):
                i1 = min(n, i0 + ROW_BLOCK)
                k0 = 0 if sliding is None else max(0, i0 - sliding + 1)     # a sliding layer's rows read keys ≥ k0 only
                i = torch.arange(i0, i1, device=dev)[:, None]
                jj = j[None, k0:i1]
                # (H, r, i1 − k0), in fp32 (a bf16 model too)
                s = (q[b, :, i0:i1].float() @ k[b, :, k0:i1].float().transpose(-1, -2)) * scaling
                far = hidden(i, jj, sliding)
                a = torch.softmax(s.masked_fill(far, float("-inf")), dim=-1)  # (H, r, i1 − k0), the model's own mask
                out[b, :, i0:i1] = (a @ v[b, :, k0:i1].float()).to(out.dtype)
                colsum = a.sum(-2, dtype=torch.float64)                     # (H, i1 − k0): key t at colsum[:, t − k0]
                for x, w in enumerate(w_grid):
                    # rows i0..i1−1 are all off-band for t ≤ i0 − w − 1, some for i0 − w − 1 < t < i1 − w − 1
                    full_to = max(0, min(i1, i0 - w))
                    if full_to > k0:
                        c[:, x, k0:full_to] += colsum[:, : full_to - k0]
                    t0, t1 = max(full_to, k0), max(full_to, min(i1, i1 - w - 1))
                    if t1 > t0:
                        off = ~near(i, j[None, t0:t1], w)                             # (r, t1 − t0)
                        c[:, x, t0:t1] += (a[:, :, t0 - k0 : t1 - k0] * off).sum(-2, dtype=torch.float64)
                self.tick(("rows", sliding is not None, i0 // ROW_BLOCK))
            band = n - c.sum(-1)                                                   # rows sum to 1: band = n − off-band
            est_scores = self._estimate(q[b], k[b], scaling)                       # (H, n)
            self._reduce(layer, band.cpu(), c.cpu(), est_scores.cpu(), n)   # the tables are numpy, on the host
            if self.err_rows:
                self._option_errors(layer, q[b], k[b], v[b], scaling, est_scores, sliding)
                self.tick(("errors", sliding is not None))
            if self.candidates:
                self._output_errors(layer, q[b], k[b], v[b], scaling, est_scores, sliding)
                self.tick(("candidates", sliding is not None))
        self.windows[layer] += B
        return out

    def steps(self, windows: int, grads: bool = False) -> list:
        """The kind of every step ticked over ``windows`` windows: with ``grads``, first the gradient pass's layers
        (``row_gradients``: each layer's forward, the output head's forward and backward, each layer's backward); then
        per layer, as ``observe`` ticks, its blocks of ROW_BLOCK rows (kind: sliding or not, the block's index — later
        blocks read more keys), its option errors, its candidates."""
        blocks = -(-self.n // ROW_BLOCK)
        layers = self.shape.get("windows") or [None] * self.shape["num_layers"]
        out = ([("gradient", "forward"), ("gradient", "backward")] * len(layers) + [("gradient", "head")] * 2
               if grads else [])
        for W in layers:
            out += [("rows", W is not None, x) for x in range(blocks)]
            out += [("errors", W is not None)] * bool(self.err_rows)
            out += [("candidates", W is not None)] * bool(self.candidates)
        return out * windows

    def tick(self, kind) -> None:
        """One step of ``observe`` done: the bar ``calibrate`` opened moves (a block of rows takes seconds, a window
        minutes)."""
        if self.bar is not None:
            self.bar.update(self.bar.done + 1, kind=kind)

    @staticmethod
    def _estimate(q, k, scaling):
        """Column scores of the last LAST_Q queries: Σ_{i > n−LAST_Q} a_it  (MInference's vertical estimate)."""
        return estimate_columns(q[None], k[None], scaling)[0]  # (H, n)

    def _reduce(self, layer, band, c, est_scores, n):
        # band: (H, Gw), c: (H, Gw, n) → per-window μ tables
        H, Gw, _ = c.shape
        gmax = max(self.g_grid)
        top = top_columns(c, gmax)                                        # (H, Gw, gmax) exact-fit columns, −1 empty
        mass_top = torch.where(top >= 0, torch.gather(c, -1, top.clamp_min(0)), torch.zeros((), dtype=c.dtype))
        cum = torch.cat([torch.zeros(H, Gw, 1, dtype=c.dtype), mass_top.cumsum(-1)], -1)  # Σ of the first g
        est_order = torch.argsort(-est_scores, dim=-1, stable=True)[:, :gmax]    # (H, gmax) run-time columns
        est_mass = torch.gather(c, -1, est_order[:, None, :].expand(H, Gw, -1))
        cum_est = torch.cat([torch.zeros(H, Gw, 1, dtype=c.dtype), est_mass.cumsum(-1)], -1)
        for y, g in enumerate(self.g_grid):
            g_ = min(g, cum.shape[-1] - 1)
            self.fit[layer, :, :, y] += ((band + cum[..., g_]) / n).numpy()
            self.est[layer, :, :, y] += ((band + cum_est[..., min(g, cum_est.shape[-1] - 1)]) / n).numpy()
            for t in range(SINKS):
                self.fixed[layer, :, :, y, t] += ((top[..., :g_] == t).any(-1)).numpy()
        self.sink[layer] += ((band + c[..., :SINKS].sum(-1)) / n).numpy()
        for z, (w, fixed, dyn) in enumerate(self.candidates):  # μ of each candidate with its run-time columns
            x = self.w_grid.index(min(w, self.w_grid[-1]))
            cols = candidate_columns(est_scores, fixed, dyn)
            self.cand_mass[layer, :, z] += ((band[:, x] + (c[:, x] * cols).sum(-1)) / n).numpy()

    def rows(self) -> torch.Tensor:
        """The query positions the option errors are measured on (``plan_error.sample_rows``)."""
        if self.current_rows is not None:  # a mixed retrieval window: its answer rows (``calibration.mix``)
            return self.current_rows
        return sample_rows(self.n, self.err_rows)

    def _option_errors(self, layer, q, k, v, scaling, est_scores, sliding=None):
        H, _, d = v.shape
        U = projection_factor(self.out_proj[layer], H, d)
        u = head_gradients(self.out_proj[layer], self.row_grads[layer], H, d)
        # R sampled rows: measured on the host, as the tables
        q, k, v, est_scores = q.cpu(), k.cpu(), v.cpu(), est_scores.cpu()
        err, mass, delta = option_errors(q, k, v, scaling, est_scores, self.rows(), self.w_grid, self.g_grid, SINKS,
                                         U, u, sliding)
        self.err[layer] += err.numpy()
        self.mass_exec[layer] += mass.numpy()
        self.delta[layer] += delta.numpy()

    def _output_errors(self, layer, q, k, v, scaling, est_scores, sliding=None):
        # the last LAST_Q queries: exact output (the model's own mask, sliding window included) vs each candidate's
        H, n, _ = q.shape
        i0 = max(0, n - LAST_Q)
        i = torch.arange(i0, n, device=q.device)[:, None]
        j = torch.arange(n, device=q.device)[None, :]
        s = (q[:, i0:] @ k.transpose(-1, -2)) * scaling
        s = s.masked_fill(hidden(i, j, sliding), float("-inf"))
        o = torch.softmax(s, -1) @ v
        for x, (w, fixed, dyn) in enumerate(self.candidates):
            keep = near(i, j, w).expand(H, -1, -1).clone()
            cols = candidate_columns(est_scores, fixed, dyn)
            keep |= cols[:, None, :]
            o_s = torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ v
            err = (o_s - o).norm(dim=(-2, -1)) / o.norm(dim=(-2, -1)).clamp_min(1e-30)
            self.cand_err[layer, :, x] += err.cpu().numpy()

    TABLES = ("fit", "est", "sink", "fixed", "cand_err", "cand_mass", "windows", "err", "mass_exec", "resid",
              "out_scale", "delta", "gsq",
              "retrieval", "page_ranking")
    # absent from calibrations made before them
    OPTIONAL = ("err", "mass_exec", "resid", "out_scale", "delta", "gsq", "retrieval", "page_ranking")

    def save(self, path) -> Path:
        """The statistics as ``.npz`` (arrays only), with the grid, shape and candidates."""
        def write(tmp):
            with open(tmp, "wb") as f:
                np.savez(f, **{t: getattr(self, t) for t in self.TABLES}, w_grid=np.asarray(self.w_grid), n=self.n,
                         err_rows=self.err_rows,
                         sliding=np.asarray([w or 0 for w in (self.shape.get("windows") or [])], dtype=np.int64),
                         candidates=np.asarray(self.candidates, dtype=np.int64).reshape(-1, 3),
                         pattern_keys=np.asarray(self.pattern_keys, dtype=np.int64), pattern_recall=self.pattern_recall,
                         shape=np.asarray([self.shape[k] for k in ("num_layers", "num_heads", "num_kv_heads")]))
        return write_atomic(path, write)

    @classmethod
    def load(cls, path, option: str | None = None) -> "Calibration":
        """The statistics ``save`` wrote (``.npz``); either form, this or a compact archive: ``calibration.archive.
        load_calibration``."""
        from attnlab.schemas.calibration import check_tables, table_shape

        name = f"{option} {path}" if option else str(path)
        try:
            z = np.load(path, allow_pickle=False)
            L, H, H_kv = (int(x) for x in z["shape"])
            sliding = [int(w) or None for w in z["sliding"]] if "sliding" in z.files and len(z["sliding"]) else None
            shape = {"num_layers": L, "num_heads": H, "num_kv_heads": H_kv, "windows": sliding}
            cal = cls(shape, int(z["n"]), [tuple(int(v) for v in c) for c in z["candidates"]],
                      int(z["err_rows"]) if "err_rows" in z.files else 0)
            cal.w_grid = [int(w) for w in z["w_grid"]]
            if "pattern_keys" in z.files:   # absent from calibrations made before MInference's pattern search
                cal.pattern_keys = [int(x) for x in z["pattern_keys"]]
            tables = {t: z[t] for t in (*cls.TABLES, "pattern_recall") if t in z.files}
        except (KeyError, ValueError, TypeError, OSError) as err:   # a field missing or of another type, a torn zip
            raise UserError(f"{name}: not the statistics of a calibration ({str(err).splitlines()[0]})") from None
        sizes = {"L": L, "H": H, "Gw": len(cal.w_grid), "Gg": len(cal.g_grid), "S": SINKS, "C": len(cal.candidates),
                 "P": len(cal.pattern_keys)}
        missing = [t for t in cls.TABLES if t not in tables and t not in cls.OPTIONAL]
        if missing:
            raise UserError(f"{name}: field {missing[0]}: required table missing")
        check_tables(tables, sizes, name)                   # shapes, finite, ≥ 0 (``attnlab.schemas.calibration``)
        for t in (*cls.TABLES, "pattern_recall"):           # a table made after the file: zeros (not measured)
            setattr(cal, t, tables[t] if t in tables else np.zeros(table_shape(t, sizes)))
        return cal

    def mean(self, table: str) -> np.ndarray:
        x = getattr(self, table)
        return x / np.maximum(self.windows, 1).reshape((-1,) + (1,) * (x.ndim - 1))

    def fixed_columns(self, layer: int, head: int, x: int, y: int) -> list[int]:
        """Sink positions that are among the exact fit's columns in most windows (at grid point (w_x, g_y))."""
        share = self.fixed[layer, head, x, y] / max(self.windows[layer], 1)
        return [t for t in range(SINKS) if share[t] > 0.5]


def candidate_columns(est_scores: torch.Tensor, fixed: int, dyn: int) -> torch.Tensor:
    """1[j ∈ T] of a candidate: the first ``fixed`` keys (sinks) and the ``dyn`` others with the highest
    estimated scores (MInference's vertical lines from the last queries); est_scores: (H, n) → (H, n) bool."""
    H, n = est_scores.shape
    cols = torch.zeros(H, n, dtype=torch.bool, device=est_scores.device)
    cols[:, :fixed] = True
    if dyn:
        sc = est_scores.clone()
        sc[:, :fixed] = -1
        cols.scatter_(1, torch.argsort(-sc, dim=-1, stable=True)[:, :dyn], True)
    return cols


def row_gradients(model, ids, rows, mods, tick=None) -> list[torch.Tensor]:
    """g (R, hidden) per layer: ∂L/∂x at ``rows``, x the residual stream where the layer's attention output is added.

    L = the window's summed next-token NLL (the mean × n − 1), one forward + backward with the plan in place
    (full heads while calibrating: SDPA); the gradient reaches the attention output unchanged (x = h + attn(h)).
    ``tick(kind)``: called as each layer's forward and backward ends, and the output head's (n × vocabulary logits, the
    pass's largest step): a pass at 8K takes minutes.
    """
    caught = {}

    def hook(mod, args, out):
        caught[int(mod.layer_idx)] = out[0]
        if tick is not None:
            tick(("gradient", "forward"))
            out[0].register_hook(lambda g: tick(("gradient", "backward")))   # when ∂L/∂ this output is computed

    def head(mod, args, out):
        tick(("gradient", "head"))
        out.register_hook(lambda g: tick(("gradient", "head")))               # ∂L/∂ logits: the loss's backward

    handles = [mod.register_forward_hook(hook) for mod in mods]
    if tick is not None:
        handles.append(model.get_output_embeddings().register_forward_hook(head))
    recorders = [getattr(getattr(mod, "attnlab_layer", None), "recorder", None) for mod in mods]
    for mod in mods:  # the plan's own attention runs (a recorder would observe this pass too)
        if getattr(mod, "attnlab_layer", None) is not None:
            mod.attnlab_layer.recorder = None
    try:
        with torch.enable_grad():
            emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)
            loss = model(inputs_embeds=emb, labels=ids, use_cache=False).loss * (ids.shape[-1] - 1)
            outs = [caught[l] for l in range(len(mods))]
            grads = torch.autograd.grad(loss, outs)
    finally:
        for hd in handles:
            hd.remove()
        for mod, rec in zip(mods, recorders):
            if rec is not None:
                mod.attnlab_layer.recorder = rec
    return [g[0, rows].detach().double().cpu() for g in grads]


def output_norms(model) -> list:
    """Per layer, the norm a decoder layer applies to its attention output before adding it to the stream, or None.

    Gemma-2/3 layers hold ``post_attention_layernorm`` (on the attention output) and ``pre_feedforward_layernorm``
    (before the MLP); in Llama-like layers ``post_attention_layernorm`` is the pre-MLP norm and nothing follows o_proj.
    """
    layers = {}
    for mod in model.modules():
        attn = getattr(mod, "self_attn", None)
        if attn is not None and hasattr(attn, "layer_idx"):
            post = getattr(mod, "post_attention_layernorm", None)
            layers[int(attn.layer_idx)] = post if hasattr(mod, "pre_feedforward_layernorm") else None
    return [layers[i] for i in sorted(layers)]


@torch.no_grad()
def output_gain(norm) -> torch.Tensor:
    """γ (hidden,): an RMS norm applied to a row of ones (rms 1), i.e. its per-channel gain (weight or 1 + weight)."""
    w = next(norm.parameters())
    return norm(torch.ones(1, w.shape[-1], dtype=w.dtype, device=w.device))[0].detach().double().cpu()


def _record_out_scale(cal: "Calibration", layer: int):
    def hook(mod, args, out):
        if torch.is_grad_enabled():  # the gradient pass (``row_gradients``) runs the window a second time
            return
        y = out[0, cal.rows()].detach().double()                                    # (R, hidden) o_proj's output
        cal.out_scale[layer] += float((1.0 / (y ** 2).mean(-1).clamp_min(1e-30)).mean())
    return hook


@torch.no_grad()
def calibrate(model, windows, candidates=None, progress: Progress = SILENT, err_rows: int = ERR_ROWS,
              grads: bool = False) -> Calibration:
    """Run ``model`` on each window ``(1, n)`` with exact attention and stream the per-head statistics.

    ``windows``: tensors (1, n), or ``calibration.mix.MixWindow`` whose errors are measured on its answer rows.
    ``err_rows`` > 0: also the executed options' output errors on that many rows (``Calibration``),
    measured through each layer's ``o_proj``; ``grads``: also their first-order loss change (``delta``,
    ``gsq``), from one backward pass per window (SmolLM2 at 8K: +110 s, peak RSS 21 GB instead of ~9).
    ``progress`` (``attnlab.progress``): a bar over the blocks of rows of every layer and window, and with ``grads``
    over the layers of each window's gradient pass (``Calibration.steps``).
    """
    shape = model_shape(model)
    rows_of = [getattr(w, "rows", None) for w in windows]
    windows = [getattr(w, "ids", w) for w in windows]
    n = int(windows[0].shape[-1])
    cal = Calibration(shape, n, candidates, err_rows)
    previous = getattr(model, "attnlab_plan", None)
    implementation = model.config._attn_implementation
    apply_plan(model, Plan.full(shape))
    mods = attention_modules(model)
    norms = output_norms(model) if err_rows else [None] * len(mods)
    hooks = []
    if err_rows:
        # W_h as the stream sees it: diag(γ) W_h behind an output norm (γ = the norm applied to a row of ones)
        cal.out_proj = [mod.o_proj.weight.detach().cpu() * (1.0 if nm is None else output_gain(nm)[:, None])
                        for mod, nm in zip(mods, norms)]
        for l, (mod, nm) in enumerate(zip(mods, norms)):
            if nm is not None:
                hooks.append(mod.o_proj.register_forward_hook(_record_out_scale(cal, l)))
    # the gradient pass's layers and the blocks of rows: the bar moves every few seconds, its pace by kind of step
    backward = bool(err_rows and grads)
    steps = cal.steps(len(windows), grads=backward)
    said = f"{len(windows)} window" + ("s" if len(windows) != 1 else "")
    bar = progress.start(f"calibration n={n}, {said}", total=len(steps), unit="steps" if backward else "row blocks",
                         kinds=steps)
    cal.bar = bar
    try:
        for mod in mods:
            mod.attnlab_layer.recorder = cal
        for x, ids in enumerate(windows):
            cal.current_rows = rows_of[x]
            rows = cal.rows()              # the rows the option errors are measured on in this window
            if backward:
                for l, g in enumerate(row_gradients(model, ids.to(model.device), rows, mods, cal.tick)):
                    cal.row_grads[l] = g
                    cal.gsq[l] += float((g ** 2).sum(-1).mean())
            # logits_to_keep=1: not n × vocabulary logits
            o = model(ids.to(model.device), use_cache=False, output_hidden_states=bool(err_rows), logits_to_keep=1)
            if err_rows:  # hidden_states[l]: the residual stream entering layer l, (1, n, hidden)
                for l in range(shape["num_layers"]):
                    cal.resid[l] += float((o.hidden_states[l][0, rows].double() ** 2).sum(-1).mean())
    finally:
        bar.close()
        cal.bar = None
        for hk in hooks:
            hk.remove()
        for mod in mods:
            mod.attnlab_layer.recorder = None
        cal.current_rows = None
        if previous is not None:
            apply_plan(model, previous)
        else:
            remove_plan(model)
            model.set_attn_implementation(implementation)
    return cal
