"""attnlab's plan that keeps what the context says: retrieval heads see the whole context where it is asked.

    R = the k heads of largest retrieval score r_lh   (r_lh: mean attention from the answer tokens to the
        needle's value tokens while the model copies it, on synthetic needle prompts — Wu et al. 2024;
        ``attnlab.llm.heads.head_scan.retrieval_scores``, stored with the calibration as ``Calibration.retrieval``)

Two ways to keep them (option ``tail``):

* ``tail = 0``: every head of R is FULL (both phases); the knapsack (``choose_plan``) spends what is left of β;
* ``tail = T > 0`` (default 64): the knapsack plans every head under β − Σ_{h∈R} tail_entries, then each head
  of R also reads every causal key from its last T prefill rows (the question and the answer prefix: the
  rows that ask) and its whole cache at decoding (``HeadPlan.tail``).  A head needs the far context where
  the context is queried, not on every row: 16 such heads at 2K cost ≈ 0.4 % of the entries, not 6 %.

The other heads read band + columns (their per-input columns chosen from the last queries) and their
cache keeps what they can still read.  Options ``retrieval_heads`` = k, ``tail`` = T, ``pages`` = K: at
decoding every planned head also reads back the K pages of 16 evicted keys of largest Quest bound
(``Plan.pages``, ``attnlab.llm.execution.pages``; 0, the default: none); ``slashes`` = s: at the prefill every planned
head (not full, not in a sliding layer) also reads the s diagonals δ < −w of largest mass from its last queries,
chosen per input (``HeadPlan.slashes``, ``attnlab.llm.plans.slash_lines``; prefill only).  Their bound s·(n − 1) per
head (``plan.slash_fraction``) is taken from β before the knapsack, as the tails' is.  ``sliding_floor`` = F:
a head of a sliding layer (Gemma-3) gets a band of at least min(F, window − 1) keys (``choose_plan``; where β
cannot afford F — Gemma-3 at 2K, β = 0.1 — the grid's next band below it that fits).  ``band_floor`` = f: every planned
head gets a band of at least f keys (``choose_plan``): the knapsack gives some heads w = 0, no neighbour read.
``widths`` = all | own: as ``attnlab``'s (the bands offered to the knapsack).
``blocks`` = K (with a tail): each retrieval head also reads, on every prefill row, the K blocks of 16 keys of
largest pooled score for its block of 16 queries, chosen per input (``HeadPlan.blocks``, ``attnlab.llm.plans.key_blocks``);
their bound K·16·(n − 1) per head is taken from β before the knapsack.  Multi-key needles need it: the rows of a
later needle must see the earlier ones in the heads that retrieve, not only the rows that ask.
``other_blocks`` = K' (prefill only): every other planned head (not full, not a retrieval head, not in a sliding
layer) also reads, on every prefill row, the K' key blocks of largest pooled score for its block of 16 queries; at
decoding it reads what its band and columns hold and the keys of the blocks its last query block chose, so its cache
stays compressed.  Why: at 4K a multi-key needle at
depth 0 was lost by every plan with a full decoding after the plan's prefill as well (the prefill loses it), and
found by the per-row top-k oracle at the same β: the rows that choose their own keys outside the retrieval heads
keep it.  Bound K'·16·(n − 1) per such head, taken from β before the knapsack.
``by_kv`` = 1: the retrieval heads are taken as whole KV groups — the KV heads ranked by the largest retrieval score
of their r = H / H_kv query heads, every query head of the first ⌈k / r⌉ of them a retrieval head.  A retrieval head's
KV head keeps its whole cache, so k heads spread over up to k KV heads (SmolLM2's top 32 over 21 of 90); by groups
they cost ⌈k / r⌉ (11): the decoding KV of the key-block configuration falls by the cache of the KV heads left out.
``tail_keep`` = P (with a tail): at decoding a retrieval head reads, instead of its whole cache, its band, columns,
held key blocks and the P keys its tail rows attended most (Σ_i a_ij over the tail, SnapKV's vote by the rows that
ask; ``HeadPlan.kept``): its KV head's cache stays compressed.  Decoding only (the prefill is unchanged).
``vote_next`` = s (with ``tail_keep``): a block's vote also counts the mass of the s blocks before it
(``HeadPlan.vote_next``): a needle's value follows the words the question finds, and where it starts a new block of 16
that block is kept with them.
``mean_pages`` = k (with ``pages``): k of the K pages read back are chosen by the mean key's score q·k̄_P, the other
K − k by Quest's bound (``Plan.mean_pages``, ``pages.choose_pages``).  ``page_score`` = calibrated: that split
(k = K − ⌊K/2⌋) where it ranks the pages full attention reads better than the bound alone on the calibration text
(recall@K over the last 32 rows of its first window, ``attnlab.llm.plans.page_ranking``, kept as
``Calibration.page_ranking``), else k = 0.  Quest's bound sums a per-channel slack over d_k channels: SmolLM2
(d_k = 64) keeps the bound, Gemma-3 (d_k = 256) the split.
``decode_band`` = c: at decoding every planned head's band reads, and its KV head keeps, at most the c keys before the
query, min(w_h, c) — in a sliding layer min(W − 1, c) — its columns, voted keys and read-back pages as before
(``Plan.decode_band``, ``LayerPlan.decode_w``): the decoding cache's budget apart from the prefill's β, as SnapKV's and
DuoAttention's caches are.  The prefill, and so the perplexity of a prefill, is unchanged.
``group_vote`` = 1 (with ``tail_keep``): the retrieval heads of a KV group sum their tail rows' masses and vote once,
so the group reads and keeps the same P keys (``Plan.group_vote``; SnapKV's vote for grouped queries).
"""

from attnlab.errors import UserError
from attnlab.llm.plans.limits import BLOCK, BLOCKS_MAX, WIDTHS
from attnlab.llm.methods import register, register_preset
from attnlab.llm.methods.base import Option, PlanMethod

TAIL = 64   # the default tail: rows of a retrieval head that read every key


@register
class AttnlabRetrieval(PlanMethod):
    name = "attnlab-retrieval"
    calibrated = True
    needs_retrieval = True
    options = {
        "retrieval_heads": Option(16, 0, 10**6, "k: heads of largest retrieval score that read every key from their tail"),
        "tail": Option(TAIL, 0, 10**7, "T: last prefill rows of a retrieval head that read every key (0: the head runs full)"),
        "blocks": Option(0, 0, BLOCKS_MAX, "K (needs tail): key blocks of 16 a retrieval head reads on every prefill row"),
        "other_blocks": Option(0, 0, BLOCKS_MAX, "K': key blocks of 16 every other planned head reads on every prefill row"),
        "tail_keep": Option(0, 0, 10**7, "P (needs tail): keys a retrieval head keeps at decoding, voted by its tail rows "
                                         "(0: its whole cache)"),
        "vote_next": Option(0, 0, 64, "s (needs tail_keep): a block's vote also counts the mass of the s blocks before it "
                                      "(the value after the words the question finds)"),
        "pages": Option(0, 0, 10**6, "pages of 16 evicted keys each planned head reads back a decoding step (Quest bound)"),
        "mean_pages": Option(0, 0, 10**6, "k (needs pages ≥ k): of those pages, k chosen by the mean key's score q·k̄_P, "
                             "not the bound"),
        "page_score": Option("bound", help="how the pages are chosen: bound (Quest's, or mean_pages as given), or calibrated: "
                             "half by the mean key where that split ranks the pages full attention reads better on the "
                             "calibration text (recall@K)", choices=("bound", "calibrated")),
        "by_kv": Option(0, 0, 1, "1: retrieval heads taken as whole KV groups"),
        "slashes": Option(0, 0, 10**4, "per-input diagonals δ < −w each planned head also reads in the prefill"),
        "sliding_floor": Option(0, 0, 10**7, "least band of a head in a sliding layer (Gemma-3)"),
        "band_floor": Option(0, 0, 10**7, "least band of every planned head (0: the knapsack may give a head no neighbour)"),
        "group_vote": Option(0, 0, 1, "1 (needs tail_keep): the retrieval heads of a KV group cast one vote, P keys a "
                             "KV head (0: P keys a query head, up to r·P a KV head)"),
        "decode_band": Option(0, 0, 10**7, "c: at decoding a planned head's band reads and keeps at most c keys (0: its "
                              "prefill band w; the prefill unchanged)"),
        "widths": Option("all", help="bands offered to the knapsack: every width calibrated, or attnlab's grid alone",
                         choices=WIDTHS),
    }
    prefill = ("the k heads of largest retrieval score read every key from their last T rows (T = 0: all rows; blocks=K: and "
               "on every row the K key blocks of 16 of largest pooled score); every head its planned band + columns "
               "(knapsack over the rest of β); slashes=s: and s per-input diagonals; other_blocks=K': the other planned heads "
               "K' key blocks of 16 per block of 16 queries")
    decoding = ("retrieval heads read (and their KV heads keep) the whole cache (tail_keep=P: their band, columns and the P keys "
                "their tail rows attended most); the others keep what their support can still read "
                "(other_blocks: and the keys of the blocks their last query block chose; pages=K: and read back the K pages of evicted "
                "keys of largest bound; slash lines are not read at decoding; decode_band=c: every band at most c keys)")

    def __init__(self, budget: float = 1.0, **options):
        super().__init__(budget, **options)
        K, T = int(self.option("blocks")), int(self.option("tail"))
        if K and not T:   # refused before any model or calibration work
            raise UserError(f"--method {self.name}: blocks={K} needs tail > 0 (tail=0 keeps the retrieval heads full: nothing to choose)")
        P = int(self.option("tail_keep"))
        if P and not T:
            raise UserError(f"--method {self.name}: tail_keep={P} needs tail > 0 (the tail's rows cast the vote)")
        if int(self.option("group_vote")) and not P:
            raise UserError(f"--method {self.name}: group_vote=1 needs tail_keep > 0 (it groups the vote)")
        if int(self.option("vote_next")) and not P:
            raise UserError(f"--method {self.name}: vote_next={self.option('vote_next')} needs tail_keep > 0 (it shapes the vote)")
        if self.option("page_score") == "calibrated" and (int(self.option("mean_pages")) or not int(self.option("pages"))):
            raise UserError(f"--method {self.name}: page_score=calibrated " + ("chooses mean_pages itself (give one of them)"
                            if int(self.option("mean_pages")) else "needs pages > 0 (it chooses among the pages read back)"))
        if int(self.option("mean_pages")) > int(self.option("pages")):
            raise UserError(f"--method {self.name}: mean_pages={self.option('mean_pages')} needs pages >= {self.option('mean_pages')} "
                            f"(it chooses among the pages read back; pages={self.option('pages')})")

    def make_plan(self, model, n, calibration):
        import numpy as np

        from attnlab.llm.plans.plan import HeadPlan, slash_fraction, tail_entries, with_slashes
        from attnlab.llm.plans.selection import choose_plan

        k = int(self.option("retrieval_heads"))
        T = int(self.option("tail"))
        K = int(self.option("blocks"))
        K2 = int(self.option("other_blocks"))
        P = int(self.option("tail_keep"))
        V = int(self.option("vote_next"))                                           # 0 unless P > 0 (__init__)
        r = np.asarray(calibration.retrieval, dtype=np.float64)                     # (L, H)
        if k and not r.any():
            raise UserError(f"--method {self.name}: the calibration holds no retrieval scores (made before them); recalibrate")
        if k > r.size:
            raise UserError(f"--method {self.name}: retrieval_heads={k} but the model has {r.size} heads")
        keep = np.zeros(r.shape, dtype=bool)
        if k and int(self.option("by_kv")):   # whole KV groups, ranked by their best query head's score
            L, H = r.shape
            g = H // int(calibration.shape.get("num_kv_heads") or H)                     # query heads per KV head
            best = r.reshape(L, H // g, g).max(-1).reshape(-1)                            # (L·H_kv,)
            groups = np.argsort(-best, kind="stable")[: -(-k // g)]
            keep.reshape(-1, g)[groups] = True                                             # query head h reads KV head h // g
        elif k:
            keep.reshape(-1)[np.argsort(-r.reshape(-1), kind="stable")[:k]] = True
        heads = [[int(l), int(h)] for l, h in zip(*np.nonzero(keep))]
        s = int(self.option("slashes"))
        floor, band_floor = int(self.option("sliding_floor")), int(self.option("band_floor"))
        widths = self.option("widths")
        windows = calibration.shape.get("windows") or [None] * r.shape[0]
        L, H = r.shape
        lines = slash_fraction(windows, L, H, s, n)
        if lines and lines >= self.budget:
            raise UserError(f"budget {self.budget}: below {s} slash lines per head ({lines:.4f} of the entries at n = {n})")
        total = L * H * n * (n + 1) / 2
        # other_blocks: ≤ K'·b keys off the band on each row of every head that is neither a retrieval head nor sliding
        others = sum(1 for l in range(L) if windows[l] is None for h in range(H) if not keep[l, h])
        other = others * min(K2 * BLOCK, n) * (n - 1) / total
        if other and other + lines >= self.budget:
            raise UserError(f"budget {self.budget}: below the other heads' {K2} key blocks ({other:.4f} of the entries at n = {n})")
        if not T:
            plan = choose_plan(calibration, self.budget - lines - other, n, keep_full=keep, method=self.name, sliding_floor=floor,
                               widths=widths, band_floor=band_floor)
        else:
            # a tail costs at most its rows' off-band keys (w = 0); sliding layers run no tail
            spend = sum(tail_entries(0, T, n) for l, _ in heads if windows[l] is None) / total
            # key blocks: ≤ K·b keys off the band on each of a head's rows (w = 0: the bound before the knapsack knows w)
            spend += sum(min(K * BLOCK, n) * (n - 1) for l, _ in heads if windows[l] is None) / total
            if spend + lines + other >= self.budget:
                raise UserError(f"budget {self.budget}: below the {k} retrieval heads' tails of {T} rows"
                                + (f" and {K} key blocks" if K else "") + f" ({spend:.4f} of the entries at n = {n})"
                                + (f" and {s} slash lines per head ({lines:.4f})" if s else "")
                                + (f" and the other heads' {K2} key blocks ({other:.4f})" if K2 else ""))
            plan = choose_plan(calibration, self.budget - spend - lines - other, n, method=self.name, sliding_floor=floor, widths=widths,
                               band_floor=band_floor)
            for l, h in heads:
                old = plan.heads[l][h]
                if not old.is_full and windows[l] is None:
                    plan.heads[l][h] = HeadPlan(support=old.support, dynamic=old.dynamic, tail=T, blocks=K, kept=P,
                                                vote_next=V)
        if K2:   # prefill-only key blocks on every other planned head (a full head, a retrieval head, a sliding layer: none)
            for l in range(L):
                for h in range(H):
                    old = plan.heads[l][h]
                    if not keep[l, h] and not old.is_full and not old.tail and windows[l] is None:
                        plan.heads[l][h] = HeadPlan(support=old.support, dynamic=old.dynamic, blocks=K2)
        plan.budget = self.budget
        plan.meta.update(retrieval_heads=heads, tail=T, **({"slashes": s} if s else {}),   # (sliding_floor: choose_plan's)
                         **({"blocks": K} if K else {}), **({"other_blocks": K2} if K2 else {}), **({"by_kv": 1} if self.option("by_kv") else {}),
                         **({"tail_keep": P} if P else {}), **({"vote_next": V} if V else {}))
        plan.pages = int(self.option("pages"))
        plan.mean_pages = int(self.option("mean_pages"))
        plan.decode_band = int(self.option("decode_band"))
        plan.group_vote = int(self.option("group_vote"))
        plan.meta.update(**({"decode_band": plan.decode_band} if plan.decode_band else {}),
                         **({"group_vote": 1} if plan.group_vote else {}))
        if self.option("page_score") == "calibrated":   # the split where it ranks better on the calibration text
            from attnlab.llm.plans.page_ranking import ranking_row

            got = ranking_row(getattr(calibration, "page_ranking", np.zeros(8)))   # rank_pages' figures (4 decimals)
            K_cal = got["K"]
            if K_cal != plan.pages:
                raise UserError(f"--method {self.name}: page_score=calibrated needs the calibration's page ranking at "
                                f"K = {plan.pages} (it has {f'K = {K_cal}' if K_cal else 'none'}); recalibrate")
            split = None not in (got["recall_half"], got["recall_bound"]) and got["recall_half"] > got["recall_bound"]   # none: the bound
            plan.mean_pages = plan.pages - plan.pages // 2 if split else 0
            plan.meta.update(page_score={"recall_bound": got["recall_bound"], "recall_split": got["recall_half"],
                                         "mean_pages": plan.mean_pages})
        return with_slashes(plan, s) if s else plan

    @property
    def page_ranking_pages(self) -> int:
        """K at which the calibration must rank the page scores (0: this configuration does not read them)."""
        return int(self.option("pages")) if self.option("page_score") == "calibrated" else 0


register_preset("attnlab", "attnlab-retrieval", "the recommended default: retrieval, perplexity and KV together (the read-back "
                "configuration: 32 retrieval heads with key blocks, every other head 4 key blocks, a voted decoding cache, "
                "16 pages read back a step, half by the mean key where the calibration text ranks that better; every band "
                "at least 8 keys, in sliding layers 384)", default=True,
                retrieval_heads=32, blocks=8, other_blocks=4, tail_keep=512, pages=16, sliding_floor=384, page_score="calibrated",
                band_floor=8)
register_preset("attnlab-bound", "attnlab-retrieval", "attnlab with its pages read back by Quest's bound alone, on every "
                "model, sliding bands of at least 128 keys and no band floor (the default before page_score=calibrated, "
                "sliding_floor=384 and band_floor=8)",
                retrieval_heads=32, blocks=8, other_blocks=4, tail_keep=512, pages=16, sliding_floor=128)
register_preset("attnlab-other-blocks", "attnlab-retrieval", "multi-key retrieval with whole caches for the retrieval heads "
                "(more KV than attnlab, no read-back)", retrieval_heads=32, blocks=8, other_blocks=4)
register_preset("attnlab-key-blocks", "attnlab-retrieval", "key blocks in the retrieval heads only (multi-key at 2K; "
                "perplexity of the band plan)", retrieval_heads=32, blocks=8)
