"""Every head of a real LLM on one long text, in bounded memory: ``capture_long(model, text) -> LongAttention``.

The model runs once over the n tokens with its attention switched to
``attnlab.llm.heads.block_attention`` (rows of ``block_rows``); every block of softmax
rows feeds ``HeadStatistics``; nothing n×n is ever held.  The result
(``attnlab.llm.heads.long_attention.LongAttention``) holds, per layer l and head h:

* ``profile[l, h, d + n − 1]`` — mass at relative distance d = i − j (the band profile),
  ``far_share(D)`` = share of the mass beyond distance D;
* ``column[l, h, j]`` — mass on key column j (sinks, rare tokens);
* ``fit`` — the exact structured fit (band w + num_pos columns) over a grid
  (``attnlab.llm.heads.streamed_fit``) and ``choose(target)``;
* ``roles`` — ``attnlab.analysis.roles.HeadRole`` with the same scores and thresholds;
* optional ``window`` (exact rows a:b, keys a:b) and ``pooled`` maps;
* ``tiles`` — per head the K exact T × T tiles of most off-band mass (``attnlab.llm.heads.zoom_tiles``),
  what the explorer zooms into.

File: ONE ``.safetensors`` (arrays) with the metadata (tokens, roles, grid,
timing, memory) as JSON in its header.
"""

from __future__ import annotations

import math
import os
import resource
import time
from collections import Counter
from typing import Sequence

import numpy as np
import torch

from attnlab.analysis.roles import HeadRole, RoleThresholds, is_punctuation
from attnlab.errors import UserError
from attnlab.llm.heads.block_attention import streaming
from attnlab.llm.heads.head_statistics import DEFAULT_WS, HeadStatistics, TokenInfo
from attnlab.llm.heads.long_attention import LongAttention
from attnlab.llm.heads.streamed_fit import fit_table
from attnlab.llm.heads.zoom_tiles import TILE, TILES
from attnlab.llm.models.memory import check_fits, estimate_streamed, gib
from attnlab.progress import SILENT, Progress

__all__ = ["LongAttention", "capture_long", "token_info", "DEFAULT_NUM_POS", "default_block_rows", "layer_types"]

DEFAULT_NUM_POS = (0, 1, 2, 4, 8, 16, 32, 64)
AUTO_ROWS = 128  # rows="auto": the exact window of this many rows in the middle of the input


def default_block_rows(n_heads: int, n: int, budget: int = 64 * 2**20) -> int:
    """Rows per block so that one block of float32 probabilities is about ``budget`` bytes (16 ≤ r ≤ 1024)."""
    return int(max(16, min(1024, budget // (4 * n_heads * max(n, 1)))))


def token_info(tokens: Sequence[str], special: Sequence[bool], frequencies=None) -> TokenInfo:
    """Word / rare / sink-candidate masks of one text, as ``attnlab.analysis.roles`` defines them (decoder kind)."""
    special = np.asarray(special, bool)
    freqs = Counter(tokens) if frequencies is None else frequencies
    words = [t for t, sp in zip(tokens, special) if not sp]
    ranked = sorted(dict.fromkeys(words), key=lambda t: freqs.get(t, 0))
    n = len(tokens)
    rare1 = np.zeros(n, bool)
    rare2 = np.zeros(n, bool)
    if len(words) >= 2:
        rare1 = np.array([(t == ranked[0]) and not sp for t, sp in zip(tokens, special)], bool)
    if len(words) >= 3 and len(ranked) >= 2:
        rare2 = np.array([(t in ranked[:2]) and not sp for t, sp in zip(tokens, special)], bool)
    cand = special | np.array([is_punctuation(t) for t in tokens], bool)
    cand[0] = True
    return TokenInfo(word=~special, rare1=rare1, rare2=rare2, candidate=cand)


def layer_types(model) -> list[str]:
    """Per layer "sliding_attention" / "full_attention" as the config says
    (all "full_attention" when it says nothing)."""
    cfg = getattr(model.config, "text_config", None) or model.config
    types = getattr(cfg, "layer_types", None)
    if types:
        return [str(t) for t in types]
    window = getattr(cfg, "sliding_window", None)
    return ["sliding_attention" if window else "full_attention"] * cfg.num_hidden_layers


class _Stop(Exception):
    """Raised by the observer after the last analysed layer: the rest of the model is not run."""


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _tokens(tokenizer, text: str, max_tokens: int | None, max_len: int | None,
            truncate: bool = False) -> tuple[list[int], list[str], list[bool], int]:
    """Ids, tokens, special flags of ``text`` and its token count: the first ``max_tokens``; without it,
    the first ``max_len`` when ``truncate`` (else a text longer than the context is refused)."""
    if not text or not text.strip():
        raise UserError("the text is empty: give at least one word")
    ids = list(tokenizer(text, add_special_tokens=True, verbose=False)["input_ids"])
    total = len(ids)
    if max_tokens is not None and max_len is not None and max_tokens > max_len:
        raise UserError(f"--tokens {max_tokens}: longer than the model's context of {max_len}; "
                        f"pass --tokens {max_len} or less")
    if max_tokens is not None:
        if len(ids) < max_tokens:
            raise UserError(f"--file: the text has {len(ids)} tokens, fewer than --tokens {max_tokens}")
        ids = ids[:max_tokens]
    elif truncate and max_len is not None:
        ids = ids[:max_len]
    if max_len is not None and len(ids) > max_len:
        raise UserError(f"the text has {len(ids)} tokens, more than the model's context of {max_len}; "
                        f"pass fewer tokens (--tokens {max_len})")
    specials = set(tokenizer.all_special_ids)
    return ids, tokenizer.convert_ids_to_tokens(ids), [t in specials for t in ids], total


def _lm_tokens(tokenizer, text: str, max_tokens: int | None, max_len: int,
               truncate: bool = False) -> tuple[list[int], list[str], list[bool], int]:
    """Ids, pieces, special flags of ``text`` and its token count under an attnlab run's tokenizer
    (the ids its training read).

    ``max_tokens`` keeps the first tokens; it may not exceed ``max_len`` nor the text.  Without it the
    text must fit in ``max_len``.  ``UserError`` (one line) otherwise.
    """
    if not text or not text.strip():
        raise UserError("the text is empty: give at least one word")
    if max_tokens is not None and max_tokens > max_len:
        raise UserError(f"--tokens {max_tokens}: more than the run's max_len of {max_len} (its positions end there); "
                        f"pass --tokens {max_len}")
    ids = tokenizer.encode(text)  # the ids training read (attnlab.data.text.encode_text gives the same, tested there)
    if len(ids) < 2:
        raise UserError("--file: the text gives fewer than 2 tokens")
    total = len(ids)
    if max_tokens is not None:
        if len(ids) < max_tokens:
            raise UserError(f"--file: the text has {len(ids)} tokens, fewer than --tokens {max_tokens}")
        ids = ids[:max_tokens]
    elif len(ids) > max_len:
        if not truncate:
            raise UserError(f"the text has {len(ids)} tokens, more than the run's max_len of {max_len}; "
                            f"pass --tokens {max_len}")
        ids = ids[:max_len]
    ids = [int(i) for i in ids]
    specials = {tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id}
    return ids, [tokenizer.id_to_piece(i) for i in ids], [i in specials for i in ids], total


def _as_lm(model, tokenizer, name):
    """(DecoderLM, attnlab tokenizer, name) when ``model`` is an attnlab run (``load_run``) or ``DecoderLM``;
    else None."""
    from attnlab.nn.lm import DecoderLM

    if all(hasattr(model, a) for a in ("path", "model", "tokenizer", "cfg")):  # an attnlab.train.checkpoint.Run
                                                                               # (not imported: layers)
        if not isinstance(model.model, DecoderLM):
            raise UserError(f"{model.path}: a {model.cfg.model} run (translation); --file needs a language-model run "
                            "(--model lm)")
        return model.model, model.tokenizer, name or model.path.name
    if isinstance(model, DecoderLM):
        if tokenizer is None:
            raise ValueError("tokenizer: needed when model is a loaded model")
        return model, tokenizer, name or type(model).__name__
    return None


def _roles(stats: HeadStatistics, info: TokenInfo, tokens: list[str], layers: list[int],
           th: RoleThresholds) -> list[HeadRole]:
    """``HeadRole`` per head from the streamed accumulators (the formulas of ``attnlab.analysis.roles``,
    one sentence)."""
    n = stats.n
    n_word = max(int(info.word.sum()), 1)
    out = []
    cand = np.asarray(info.candidate)
    for row, l in enumerate(layers):
        hist = stats.argmax_hist[row].numpy()  # (H, 2n-1)
        col = stats.column[row].numpy() / n  # (H, n) c_j = mean_i w_ij
        for h in range(stats.H):
            conf = float(stats.confidence[row, h]) / n_word
            positional = float(hist[h].max()) / max(int(hist[h].sum()), 1)
            offset = int(hist[h].argmax()) - (n - 1)
            rare = float(int(stats.on_rare1[row, h]) / n_word > 0.5) if info.rare1.any() else 0.0
            rare2 = float(int(stats.on_rare2[row, h]) / n_word > 0.5) if info.rare2.any() else 0.0
            c = np.where(cand, col[h], -1.0)
            jbest = int(c.argmax())
            sink = max(float(c[jbest]), 0.0)
            ent = float(stats.entropy[row, h]) / n
            ent_norm = float(stats.entropy_norm[row, h]) / max(n - 1, 1)
            role = "other"
            for name, ok in (("positional", positional >= th.positional_min), ("rare-token", rare >= th.rare_min),
                             ("sink", sink >= th.sink_min), ("broad", ent_norm >= th.broad_min)):
                if ok:
                    role = name
                    break
            out.append(HeadRole(layer=l, head=h, kind="decoder", role=role, confidence=round(conf, 6),
                                positional=round(positional, 6), offset=offset, rare_token=round(rare, 6),
                                rare_token_2=round(rare2, 6), sink=round(sink, 6), sink_token=tokens[jbest],
                                entropy=round(ent, 6), entropy_norm=round(ent_norm, 6)))
    return out


def _select(layers, n_layers: int) -> list[int]:
    if layers is None:
        return list(range(n_layers))
    chosen = sorted(set(int(l) for l in layers))
    if not chosen or chosen[0] < 0 or chosen[-1] >= n_layers:
        raise ValueError(f"layers: expected layer indices in 0..{n_layers - 1}, got {list(layers)}")
    return chosen


@torch.no_grad()
def capture_long(
    model,
    text: str,
    *,
    tokenizer=None,
    max_tokens: int | None = None,
    block_rows: int | None = None,
    layers: Sequence[int] | None = None,
    ws: Sequence[int] = DEFAULT_WS,
    num_pos: Sequence[int] = DEFAULT_NUM_POS,
    rows: tuple[int, int] | str | None = None,
    tiles: tuple[int, int] | None = (TILE, TILES),
    pool: int | str | None = None,
    memory_limit: int | None = None,
    thresholds: RoleThresholds = RoleThresholds(),
    name: str | None = None,
    truncate: bool = False,
    progress: Progress = SILENT,
) -> LongAttention:
    """Streamed statistics of every head of ``model`` on ``text`` (module docstring).

    ``model``: a spec for ``attnlab.llm.models.loading.load_causal_lm`` (known name,
    folder, .gguf, hub name) or a loaded causal LM with ``tokenizer``; or an
    attnlab language-model run (``attnlab.train.checkpoint.load_run``, or a
    ``DecoderLM`` with its ``Tokenizer``), whose own mechanism (full, band,
    global, bigbird, structured) is computed block by block
    (``attnlab.llm.heads.mechanism_blocks``) for the same statistics; its tokens are
    limited by the run's ``max_len``.
    ``max_tokens`` keeps the first tokens; ``layers`` analyses only those
    layers (the model stops after the last); ``rows=(a, b)`` keeps the exact
    maps of rows a:b over keys a:b ("auto": the middle ``AUTO_ROWS`` rows); ``tiles=(T, K)`` keeps per head the K
    exact T × T tiles of most off-band mass (``attnlab.llm.heads.zoom_tiles``; None: none);
    ``pool`` keeps pooled maps of groups of ``pool`` tokens ("auto": at most 256 groups).  Without ``max_tokens``,
    ``truncate`` keeps the first context-length tokens of a longer text
    (``meta["truncated_from"]``: the text's token count).  Raises ``UserError`` (one line) when the input is
    longer than the model's context or would not fit in memory
    (``memory_limit`` bytes, default: available now), and when the allocator
    fails during the run.  ``progress`` (``attnlab.progress``): the model's loading, then a bar over the blocks
    of rows, (last layer + 1) · ⌈n / block_rows⌉ of them, with the time left.
    """
    from attnlab.llm.models.loading import load_causal_lm, model_max_len

    lm = _as_lm(model, tokenizer, name)
    if lm is not None:  # an attnlab language model: its mechanisms, block by block (attnlab.llm.heads.mechanism_blocks)
        model, tokenizer, name = lm
        cfg = model.cfg
        L_all, H = cfg.layers, cfg.heads
        num_kv = H
        model.eval()
        ids, tokens, special, total = _lm_tokens(tokenizer, text, max_tokens, cfg.max_len, truncate)
    else:
        if isinstance(model, (str, os.PathLike)):
            name = name or str(model)
            model, tokenizer = load_causal_lm(model, progress=progress)
        elif tokenizer is None:
            raise ValueError("tokenizer: needed when model is a loaded model")
        name = name or type(model).__name__
        model.eval()
        ids, tokens, special, total = _tokens(tokenizer, text, max_tokens, model_max_len(model), truncate)
        cfg = getattr(model.config, "text_config", None) or model.config
        L_all, H = cfg.num_hidden_layers, cfg.num_attention_heads
        num_kv = int(getattr(cfg, "num_key_value_heads", None) or H)
    n = len(ids)
    if rows == "auto":  # the middle AUTO_ROWS rows (keys the same): the band at token level
        a0 = max(0, (n - AUTO_ROWS) // 2)
        rows = (a0, min(n, a0 + AUTO_ROWS))
    if rows is not None and not 0 <= rows[0] < rows[1] <= n:
        raise UserError(f"--rows {rows[0]}:{rows[1]}: outside the input, which has {n} tokens (rows 0:{n})")
    chosen = _select(layers, L_all)
    r = default_block_rows(H, n) if block_rows is None else int(block_rows)
    if r < 1:
        raise ValueError(f"block_rows: expected an integer >= 1, got {block_rows!r}")
    ws = tuple(w for w in ws if w < n)
    estimate = estimate_streamed(model, n, r, n_layers=len(chosen), n_ws=len(ws))
    check_fits(estimate, n, r, limit=memory_limit, n_layers=len(chosen))

    if pool == "auto":  # an overview of at most 256 × 256 groups
        pool = math.ceil(n / 256) if n > 256 else None
    elif pool is not None and (isinstance(pool, bool) or not isinstance(pool, int) or pool < 1):
        raise ValueError(f"pool: expected tokens per group >= 1 or 'auto', got {pool!r}")
    info = token_info(tokens, special)
    stats = HeadStatistics(len(chosen), H, n, info, ws=ws, rows=rows, pool=pool, tiles=tiles)
    row_of = {l: k for k, l in enumerate(chosen)}
    last = chosen[-1]

    blocks = progress.start(f"capture of {n} tokens, {len(chosen)} layers", total=(last + 1) * math.ceil(n / r),
                            unit="blocks")

    def observe(layer, i0, j0, p, allowed, entropy=None):
        blocks.advance(note=f"layer {layer}")
        if layer in row_of:
            stats.observe(row_of[layer], i0, j0, p, allowed, entropy)
            if layer == last and i0 + p.shape[2] >= n:
                raise _Stop

    x = torch.tensor([ids], dtype=torch.long)
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        if lm is not None:
            from attnlab.llm.heads.mechanism_blocks import streaming_lm

            with streaming_lm(model, observe, r):
                model(x)
        else:
            with streaming(model, observe, r):
                model.base_model(input_ids=x, use_cache=False)
    except _Stop:
        pass
    except (RuntimeError, MemoryError) as err:
        text_err = str(err).splitlines()[0] if str(err) else type(err).__name__
        if isinstance(err, MemoryError) or "alloc" in text_err.lower() or "memory" in text_err.lower():
            raise UserError(f"out of memory on {n} tokens (estimated {gib(estimate.total)}): pass a smaller "
                            f"--block-rows (now {r}), fewer --layers or fewer --tokens ({text_err})") from None
        raise
    finally:
        blocks.close()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    if int(stats.rows_seen.min()) != n:
        raise UserError(f"model '{name}' did not run its attention through attnlab's block attention "
                        f"(saw {int(stats.rows_seen.min())} of {n} rows); its architecture is not supported")

    profile, column, in_band = stats.profile.numpy(), stats.column.numpy(), stats.in_band.numpy()
    fit = fit_table(profile, column, in_band, stats.ws, num_pos)
    meta = {"class": type(model).__name__}
    if max_tokens is None and total > n:  # truncate: the first context-length tokens of a longer text
        meta["truncated_from"] = total
    if lm is not None:  # per layer its mechanism ("structured_attention", ...): no sliding window in the config
        types = [f"{block.self_attn.mechanism.name}_attention" for block in model.blocks]
        window = None
        meta.update(attention=cfg.attention, w=cfg.w, num_pos=cfg.num_pos, max_len=cfg.max_len,
                    tokenizer=tokenizer.kind)
    else:
        types = layer_types(model)
        window = getattr(cfg, "sliding_window", None)
    pooled = None
    if stats.pool is not None:
        g = stats.pool
        group_rows = np.bincount(np.arange(n) // g).astype(np.float64)  # queries per group
        pooled = stats.pooled.numpy() / group_rows[None, None, :, None]
    return LongAttention(
        name=name, tokens=tokens, special=special, layers=chosen, layer_types=[types[l] for l in chosen],
        sliding_window=int(window) if window else None, profile=profile, column=column, fit=fit,
        roles=_roles(stats, info, tokens, chosen, thresholds), entropy=stats.entropy.numpy() / n, block_rows=r,
        seconds=seconds, peak_bytes=_peak_rss(), estimate_bytes=estimate.total,
        window=stats.window, window_maps=None if stats.window is None else stats.window_maps.numpy(),
        pool=stats.pool, pooled=pooled,
        meta={**meta, "threads": torch.get_num_threads(), "n": n, "cpu_seconds": round(cpu_seconds, 1),
              "num_layers": L_all, "num_heads": H, "num_kv_heads": num_kv},
        **({} if stats.tiles is None else {"tiles": stats.tiles.maps.numpy(), "tile_pos": stats.tiles.pos.numpy(),
                                           "tile_score": stats.tiles.score.numpy()}),
    )


def parse_layers(text: str | None) -> list[int] | None:
    """'0-3', '0,5,7' or '2' -> layer indices (None: all); ValueError naming --layers."""
    from attnlab.option_values import items, number

    if text is None:
        return None
    out: list[int] = []
    try:
        for part in items(text, "--layers"):               # an empty item or a repeated one refused
            if "-" in part:
                a, b = part.split("-", 1)
                out.extend(range(number(a, int, "--layers"), number(b, int, "--layers") + 1))
            else:
                out.append(number(part, int, "--layers"))   # ASCII digits only
    except UserError as err:
        raise ValueError(f"--layers: expected a list like 0-3 or 0,5,7, got {text!r} "
                         f"({str(err).removeprefix('--layers: ')})") from None
    if not out:
        raise ValueError(f"--layers: no layer in {text!r}")
    return out


def parse_rows(text: str | None) -> tuple[int, int] | None:
    """'a:b' -> (a, b); ValueError naming --rows."""
    if text is None:
        return None
    from attnlab.option_values import number

    try:
        a, b = (number(x, int, "--rows") for x in text.split(":"))
    except (ValueError, UserError):
        raise ValueError(f"--rows: expected a window like 4096:4352, got {text!r}") from None
    if not 0 <= a < b:
        raise ValueError(f"--rows: expected 0 <= a < b, got {text!r}")
    return a, b
