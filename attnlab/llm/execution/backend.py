"""The execution seam: a layer's prefill and decoding step, given what each head reads, run by a backend per device.

What a head reads is decided above the seam (``layer_plan``: the plan's static part of a layer and the per-input
choice of columns, slashes, key blocks; ``decode_step``: the cache's slots and the pages read back); how the
softmax over those keys is computed is decided below it, by an ``AttentionBackend``:

    prefill:  out_i = Σ_{j ∈ S_h(i)} α_ij v_j,   α_ij = softmax_{j ∈ S_h(i)}(q_i·k_j · scaling),   i = 0 … n − 1
              S_h(i) = {j ≤ i : i − j ≤ w_h}                               band (w_h = FULL: every causal key)
                     ∪ {j ≤ i : j ∈ T_h}                                    columns (fixed and per-input vertical lines)
                     ∪ {j ≤ i : j − i ∈ Δ_h}                                diagonals (per-input slash lines, δ < −w_h)
                     ∪ {j ≤ i : ⌊j/b⌋ ∈ U_h(⌊i/b⌋)}                         key blocks per query block of b rows
              and every j ≤ i on the tail rows i ≥ n − R_h                  tails
    decode:   out_i = softmax over the allowed cached slots (and the keys gathered from read-back pages)

Contract of ``prefill(parts, q, k, v, scaling) -> out``:
    q (B, H, n, d_k); k, v (B, H_kv, n, d_k / d_v), positions 0 … n − 1 (a prefill: the keys are the queries' own);
    GQA: query head h reads KV head ``parts.kv_of[h]`` (= h // (H / H_kv)), read in place (never repeated).
    dtype: q, k, v alike (float32 on the CPU; bf16 / fp16 on an accelerator, the softmax accumulated in fp32);
    out (B, H, n, d_v) in q's dtype (any strides; the CPU backend writes transformers' (B, n, H, d_v) layout
    transposed).  ``parts`` is a ``PrefillParts``: per head its band, columns, diagonals, key blocks and tail rows.
    Every key set above is causal (j ≤ i) whatever the parts hold; an empty slot (−1 / NO_DIAGONAL) reads nothing;
    a key reached by two parts is read once.  A head with w_h = FULL, or w_h ≥ n − 1, reads every causal key.

Contract of ``decode(q, k, v, scaling, table, pages=None) -> out``:
    q (B, H_s·r, t, d_k) the query heads of the KV heads in k, in order (query head ρ of KV head g at row g·r + ρ);
    k, v (B, H_s, L, ·) the cached slots; table a ``page_table.PageTable``: the slot indices each query reads
    (B, H_s, r, t, S), −1: none (None: every slot; a row with no slot gives 0); pages (t = 1 only): a ``PageKeys`` of
    keys gathered per query head from read-back pages, read besides the table's slots in the same softmax.
    out (B, H_s·r, t, d_v) in q's dtype.

``decode_fused(...)``: a backend with a fused decoding step (the CPU's native C step: band ∪ columns and the
read-back's page choice, one call) runs the whole step from the layer's description; None: it has none, and the
step is chosen above the seam and read through ``decode``.

``backend_for(device)`` picks the backend registered for the device's type (``register_backend``); the CPU backend
(``cpu_backend``: the native C kernel, else PyTorch's chunked band and SDPA) serves any device without one of its own.
Backends also have names (``BACKENDS``: cpu, flex), and ``--backend NAME`` on the LLM commands runs a device's
layers with the one named (``use_backend``; ``check_backend`` refuses, in one line, a name the device cannot run),
so two can be timed side by side on one device.
A backend never chooses keys: the same ``parts`` / ``allowed`` give the same S_h(i) on every device, and the dense
masked softmax (``attention.plan_reference``) is the reference every backend is tested against.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from importlib import import_module
from typing import Callable, NamedTuple

import torch

from attnlab.llm.execution.backend_names import BACKENDS, check_backend
from attnlab.llm.plans.plan import FULL

__all__ = ["BACKENDS", "AttentionBackend", "PageKeys", "PrefillParts", "backend_for", "check_backend", "dense_support",
           "register_backend", "tail_scores", "use_backend"]


class PrefillParts(NamedTuple):
    """What each query head of a layer reads in one prefill (per input: chosen by ``layer_plan`` from the last queries).

    w:        (H,) ints, each head's band half-width as run (the model's sliding window applied); FULL (−1): every
              causal key (the head's other parts are then ignored).
    columns:  (B, H, g) long key positions T_h, distinct per head, −1: an empty slot.
    diagonals:(B, H, s) long offsets δ = j − i < −w_h, NO_DIAGONAL (``attnlab.support``): an empty slot.
    blocks:   (B, H, T, K) long key-block indices U_h(t) for each query block t = 0 … ⌈n/b⌉ − 1 (best first), −1: none;
              head h reads the first ``block_counts[h]`` of them; K = 0: no head has key blocks.  A head with
              K_h > 0 reads no diagonals (a plan gives slashes only to heads without blocks; where a plan file
              gives both, the blocks are read).
    block_counts: (H,) ints K_h.
    tails:    (H,) ints R_h: the last R_h rows read every causal key (0: none).
    kv_of:    (H,) long, the KV head of each query head.
    block:    b, the rows of a query block and the keys of a key block.
    fixed:    None, or the columns themselves as (H,) tuples of positions when the layer chose nothing per input (its
              columns are the plan's own, the same on every input): a backend may then build its masks once per plan.
    """

    w: tuple[int, ...]
    columns: torch.Tensor
    diagonals: torch.Tensor
    blocks: torch.Tensor
    block_counts: tuple[int, ...]
    tails: tuple[int, ...]
    kv_of: torch.Tensor
    block: int
    fixed: tuple[tuple[int, ...], ...] | None = None


class PageKeys(NamedTuple):
    """Keys a decoding query head reads back from pages, beside its allowed slots: keys (B, H, X, d_k), values
    (B, H, X, d_v), ok (B, H, X) bool (False: a padding slot, read nothing)."""

    keys: torch.Tensor
    values: torch.Tensor
    ok: torch.Tensor


class AttentionBackend(ABC):
    """How a layer's softmax over the keys its heads read is computed on one kind of device (module docstring)."""

    name: str = "?"
    indexed: bool = False   # reads per-input parts as index lists: the prefill's selection runs as one batch over heads

    @abstractmethod
    def prefill(self, parts: PrefillParts, q, k, v, scaling: float):
        """q (B, H, n, d_k), k, v (B, H_kv, n, ·) → out (B, H, n, d_v): each head over S_h(i) of ``parts``."""

    @abstractmethod
    def decode(self, q, k, v, scaling: float, table=None, pages: PageKeys | None = None):
        """q (B, H_s·r, t, d_k), k, v (B, H_s, L, ·), table a ``PageTable`` (slots (B, H_s, r, t, S)) | None
        → out (B, H_s·r, t, d_v)."""

    def decode_fused(self, q, k, v, positions, flags, w, reads, summaries, store, i: int, *, sliding, page: int,
                     pages: int, scale: float, rows=None, mean_pages: int = 0):
        """The whole decoding step of one query per head in one call (``native.decode_read_back``'s arguments:
        positions (B, H_s, L), flags (B, H_s, r, L), w, reads (H_s, r), the read-back's summaries and store), or None
        where this backend has no fused step for these inputs (the step then reads through ``decode``)."""
        return None


def dense_support(parts: PrefillParts, n: int):
    """S_h(i) of ``parts`` as a dense mask (B, H, n, n) bool, [b, h, i, j] = j ∈ S_h(i): the reference every backend's
    prefill is tested against (O(n²): tests and small inputs only)."""
    B, H = parts.columns.shape[:2]
    device = parts.columns.device
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    causal = j <= i                                                                    # (n, n)
    w = torch.tensor(parts.w, device=device).view(1, H, 1, 1)
    s = ((w == FULL) | (i - j <= w)) & causal                                          # band
    hit = torch.zeros(B, H, n + 1, dtype=torch.bool, device=device)
    hit.scatter_(-1, torch.where((parts.columns >= 0) & (parts.columns < n), parts.columns, n), True)
    s = s | (hit[:, :, None, :n] & causal)                                             # columns
    lines = torch.tensor([not k for k in parts.block_counts],                          # no diagonals with blocks
                         device=device).view(1, H, 1, 1)
    for x in range(parts.diagonals.shape[-1]):                                         # diagonals j − i = δ
        s = s | ((j - i) == parts.diagonals[:, :, x].view(B, H, 1, 1)) & causal & lines
    K = parts.blocks.shape[-1]
    if K:                                                                              # key blocks of i's query block
        b = parts.block
        own = (torch.arange(K, device=device).view(1, 1, 1, K)
               < torch.tensor(parts.block_counts, device=device).view(1, H, 1, 1))
        chosen = torch.where(own & (parts.blocks >= 0), parts.blocks, -1)              # (B, H, T, K)
        T = chosen.shape[2]
        table = torch.zeros(B, H, T, T + 1, dtype=torch.bool, device=device)
        table.scatter_(-1, torch.where(chosen >= 0, chosen, T), True)                  # [t, u]: block u read by block t
        s = s | (table[:, :, i[:, 0] // b][..., j[0] // b] & causal)
    R = torch.tensor(parts.tails, device=device).view(1, H, 1, 1)
    return s | ((i >= n - R) & causal)                                                 # tails


def tail_scores(q, k, kv_of, idx, R: int, scaling: float):
    """The scores q_i·k_j · scaling of the last R rows of the query heads ``idx`` over every key, j > i at −inf:
    q (B, H, n, d_k), k (B, H_kv, n, d_k), kv_of (H,), idx (G,) → (B, G, R, n) (a tail's rows; the vote reads their
    softmax)."""
    n = q.shape[2]
    s = (q[:, idx, n - R :] @ k[:, kv_of[idx]].transpose(-1, -2)) * scaling                  # (B, G, R, n)
    s[..., n - R :].masked_fill_(torch.ones(R, R, dtype=torch.bool, device=q.device).triu(1), float("-inf"))   # j > i
    return s


_FACTORIES: dict[str, Callable[[], AttentionBackend]] = {}
_MADE: dict[str, AttentionBackend] = {}
_MODULES = {"cpu": "attnlab.llm.execution.cpu_backend", "cuda": "attnlab.llm.execution.flex_backend"}

_NAMED = {"cpu": ("attnlab.llm.execution.cpu_backend", "CpuBackend"),
          "flex": ("attnlab.llm.execution.flex_backend", "FlexBackend")}   # ``backend_names.BACKENDS`` by class
_CHOSEN: dict[str, AttentionBackend] = {}   # device type → the backend ``use_backend`` chose for it


def use_backend(name: str, device) -> AttentionBackend:
    """Run ``device``'s layers with the backend named ``name`` (``BACKENDS``; "auto": the device's own) from now on in
    this process; returns it.  ``check_backend`` first (a name this device cannot run)."""
    kind = torch.device(device).type
    key = check_backend(name, device)
    if key == "auto":
        _CHOSEN.pop(kind, None)
        return backend_for(device)
    module, cls = _NAMED[key]
    _CHOSEN[kind] = getattr(import_module(module), cls)()
    return _CHOSEN[kind]


def register_backend(device_type: str, factory: Callable[[], AttentionBackend]) -> None:
    """Make ``factory()`` the backend of devices of ``device_type`` ("cpu", "cuda", …); a module registers itself on
    import."""
    _FACTORIES[device_type] = factory
    _MADE.pop(device_type, None)


def backend_for(device) -> AttentionBackend:
    """The backend of ``device`` (a torch.device, a tensor's device or its name): the one ``use_backend`` chose by name,
    else the one registered for its type (its module, ``_MODULES``, imported on first use), else the CPU backend."""
    kind = torch.device(device).type
    if kind in _CHOSEN:   # ``--backend``: the one chosen by name
        return _CHOSEN[kind]
    if kind not in _MADE:
        if kind not in _FACTORIES and kind in _MODULES:
            try:
                import_module(_MODULES[kind])
            except ModuleNotFoundError as e:
                # no backend of its own (yet): the CPU backend's PyTorch paths run anywhere
                if e.name != _MODULES[kind]:
                    raise
        if kind not in _FACTORIES:
            import_module(_MODULES["cpu"])
        _MADE[kind] = _FACTORIES.get(kind, _FACTORIES["cpu"])()
    return _MADE[kind]
