/* band_kernel.c — the band of attention, fused on the CPU: O(n·(2w+R)·d) work, O(R·(2w+R)) scratch per thread.
 *
 *   o_i = Σ_{j ∈ B(i)} exp(s_ij − L_i) v_j,     s_ij = τ q_i·k_j,     L_i = log Σ_{j ∈ B(i)} exp(s_ij)
 *   B(i) = { j : |j − i − o| ≤ w,  0 ≤ j < m,  j ≤ i if causal,  keep_j }
 *
 * τ is the scale (1/√d_k), o the band's offset, keep an optional key mask (padding).  Optionally e extra
 * keys per row (key columns, random keys, a residual: sliding_window's E(t)) join the same softmax with
 * their scores given,
 *
 *   s_ix = τ q_i·k^E_x + b_ix     (b: 0, a learned gate, or NEG where the extra key is not allowed),
 *
 * (the caller computes them with one matrix product: e is small), so that o_i and L_i are those of the
 * softmax over B(i) ∪ E(i).  Key columns C — g keys every row may read, at positions p_x (an LLM plan's sinks
 * and per-input columns) — join the same softmax with their scores made here, tile by tile, and their mask
 * tested here (no n × g score or mask tensor):
 *
 *   s_ix = τ q_i·k_{p_x}  if p_x ≥ 0, p_x outside B(i)'s band, p_x ≤ i if causal, keep_{p_x};  NEG otherwise.
 *
 * A row that sees no key gets o_i = 0
 * and L_i = NEG (a finite −∞, as sliding_window.NEG_INF).
 *
 * Rows go R at a time (a tile).  The tile's keys are the union of its rows' bands — at most 2w + R
 * consecutive keys — so the work spent outside the band is (R − 1)/(2w + R) of the total (5 % for
 * w = 64, R = 8), where blocks of c queries × (c + 2w) keys spend (c − 1)/(c + 2w) (19 % for c = 32).
 * Per tile, all in cache:
 *
 *   S = Q_tile K_tileᵀ      register-blocked: R rows × 2 vectors of keys, an FMA per (row, vector, k)
 *   P = exp(τS − max)       per row, on its own band only (0 elsewhere in the tile)
 *   O = P V_tile / Σ P      register-blocked: R rows × 2 vectors of value columns
 *
 * S and O by tiles (band_tiles.h: the tile's keys transposed once into a rolling buffer per thread, in cache);
 * vectors are GCC/Clang vector extensions, AVX-512, AVX2 or NEON, whatever -march=native gives (vector_math.h).
 * The row softmax goes in whole vectors too, its exp inline (vexp: no libm call).  The gradients are band_backward.c.
 * Heads × tiles are shared among threads by OpenMP.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "band_tiles.h"  /* R, Keys, keys_for, tile_band, tile_scores, tile_values */
#include "vector_math.h" /* VEC, NEG, vf, vi, load, store, blend, vexp, hmax, hsum, lanes */

/* Row softmax over the band [a, b] of the tile row s (scaled by tau, keys masked by keep) and the extra scores
 * se[0, e1) and se[o2, o2 + e2) (already scaled, NEG = not allowed; a row of SE: the given extras and the
 * columns, then the blocks).  Whole vectors throughout (the rows are padded: s to Lpad, se to the next VEC past
 * each segment).  s becomes P (0 outside [a, b], x < Lpad), the segments P_E (lanes past a segment untouched);
 * returns Σ P + Σ P_E and sets *lse; 0 (P = 0, *lse = NEG) if the row sees no key. */
static float row_softmax(float *s, long Lpad, long a, long b, const unsigned char *keep, float tau, float *se, long e1, long o2,
                         long e2, float *lse)
{
    vf vmx = (vf){0} + NEG;
    for (long x0 = 0; x0 < Lpad; x0 += VEC) { /* scale, mask, max */
        vi in = lanes(x0, a, b);
        if (keep) {
            vi k = {0};
            for (int l = 0; l < VEC; l++) k[l] = x0 + l >= a && x0 + l <= b && keep[x0 + l] ? -1 : 0;
            in &= k;
        }
        vf t = blend(in, tau * load(s + x0), (vf){0} + NEG);
        store(s + x0, t);
        vmx = blend(t > vmx, t, vmx);
    }
    for (long x0 = 0; x0 < e1; x0 += VEC) {
        vf t = blend(lanes(x0, 0, e1 - 1), load(se + x0), (vf){0} + NEG);
        vmx = blend(t > vmx, t, vmx);
    }
    for (long x0 = o2; x0 < o2 + e2; x0 += VEC) {
        vf t = blend(lanes(x0, o2, o2 + e2 - 1), load(se + x0), (vf){0} + NEG);
        vmx = blend(t > vmx, t, vmx);
    }
    float mx = hmax(vmx);
    int none = mx <= 0.5f * NEG; /* no key: P = 0 */
    vf vsum = {0};
    for (long x0 = 0; x0 < Lpad; x0 += VEC) {
        vf p = none ? (vf){0} : vexp(load(s + x0) - mx); /* masked lanes: NEG − mx < EXP_MIN → 0 */
        store(s + x0, p);
        vsum += p;
    }
    for (long x0 = 0; x0 < e1; x0 += VEC) {
        vi in = lanes(x0, 0, e1 - 1);
        vf old = load(se + x0), p = none ? (vf){0} : blend(in, vexp(old - mx), (vf){0});
        store(se + x0, blend(in, p, old));
        vsum += p;
    }
    for (long x0 = o2; x0 < o2 + e2; x0 += VEC) {
        vi in = lanes(x0, o2, o2 + e2 - 1);
        vf old = load(se + x0), p = none ? (vf){0} : blend(in, vexp(old - mx), (vf){0});
        store(se + x0, blend(in, p, old));
        vsum += p;
    }
    if (none) {
        *lse = NEG;
        return 0.0f;
    }
    float sum = hsum(vsum);
    *lse = mx + logf(sum);
    return sum;
}

/* The keys at positions p (g of them, −1: none) of one KV head, transposed into KT (d rows of stride ldt, gpad columns:
 * zeros past g and for empty slots) and their values into VT (gpad × d): read from k, v where they lie. */
static void gather_keys(const float *k, long skr, const float *v, long svr, const long *p, long g, long gpad, long ldt, long d,
                        float *KT, float *VT)
{
    for (long x0 = 0; x0 < gpad; x0 += VEC) { /* VEC keys at a time (gpad: a multiple of VEC) */
        const float *rows[VEC];
        for (int l = 0; l < VEC; l++) {
            long x = x0 + l;
            rows[l] = x < g && p[x] >= 0 ? k + p[x] * skr : NULL;
            if (rows[l]) memcpy(VT + x * d, v + p[x] * svr, d * sizeof(float));
            else memset(VT + x * d, 0, d * sizeof(float));
        }
        transpose_rows(rows, d, KT + x0, ldt);
    }
}

/* Make a chunk's key set p (g keys, −1: none) resident in the slots KB (d × gpad, transposed), VB (gpad × d), with their
 * positions RB (as given) and PB (−1: empty, not kept by keep, or a column of the head: cols[j], m bytes or NULL — read
 * once, as a column): by groups of VEC slots, a group the slots hold already
 * (`held`: the previous chunk's, of the same head — neighbouring query blocks choose many of the same key blocks) stays
 * where it is, the others are gathered into the groups of slots this set does not keep.  The set is read in any order. */
static void blocks_resident(const float *k, long skr, const float *v, long svr, const long *p, long g, long gpad, long d,
                            const unsigned char *keep, const unsigned char *cols, long m, int held, float *KB, float *VB,
                            int *PB, long *RB)
{
    long ng = gpad / VEC, at[ng];
    unsigned char taken[ng];
    memset(taken, 0, sizeof taken);
    for (long gn = 0; gn < ng; gn++) { /* the new group gn: a held group of the same keys in the same order */
        long tn[VEC];
        for (int l = 0; l < VEC; l++) tn[l] = gn * VEC + l < g ? p[gn * VEC + l] : -1;
        at[gn] = -1;
        for (long go = 0; held && go < ng && at[gn] < 0; go++)
            if (!taken[go] && !memcmp(RB + go * VEC, tn, sizeof tn)) taken[go] = 1, at[gn] = go;
    }
    long free_go = 0;
    for (long gn = 0; gn < ng; gn++) {
        if (at[gn] >= 0) continue;
        while (taken[free_go]) free_go++;
        long go = free_go;
        taken[go] = 1;
        long *r = RB + go * VEC;
        for (int l = 0; l < VEC; l++) r[l] = gn * VEC + l < g ? p[gn * VEC + l] : -1;
        gather_keys(k, skr, v, svr, r, VEC, VEC, gpad, d, KB + go * VEC, VB + go * VEC * d);
        for (int l = 0; l < VEC; l++)
            PB[go * VEC + l] = r[l] >= 0 && !(keep && !keep[r[l]]) && !(cols && r[l] < m && cols[r[l]]) ? (int)r[l] : -1;
    }
}

/* How many of the g keys p a tile whose last row is `last` reads: up to the last one it may read (causal; in
 * ascending order that is the causal prefix, in any order the others are masked by mask_keys). */
static long readable(const long *p, long g, long last)
{
    long gt = 0;
    for (long x = 0; x < g; x++)
        if (p[x] >= 0 && p[x] <= last) gt = x + 1;
    return gt;
}

/* Extra keys' scores of a tile (rows × gt at SE, row stride lde) scaled by tau, or NEG where the key is empty or not
 * kept (P[x] = −1), inside the row's band (read there already) or after the row (causal). */
static void mask_keys(float *SE, long lde, const int *P, long gt, int rows, long i0, long off, long w, int causal, long m,
                      float tau)
{
    for (int r = 0; r < rows; r++) {
        int lo = (int)(i0 + r + off - w), hi = (int)(i0 + r + off + w), top = causal ? (int)(i0 + r) : (int)m;
        float *sr = SE + r * lde;
        for (long x = 0; x < gt; x++) { /* branch-free: vectorised */
            int j = P[x], in = (j >= 0) & (j <= top) & ((j < lo) | (j > hi));
            sr[x] = in ? tau * sr[x] : NEG;
        }
    }
}

/* q: row i of head h at q + h·sq + i·sqr; k, v: rows of d floats, head h's key j at k + h·sk + j·skr (v likewise with
 * sv, svr); o: row i of head h at o + h·so + i·sor (any layout with rows of d contiguous floats: transformers'
 * (B, n, H, d) views are read and written in place);
 * keep: (N / hpk, m) bytes or NULL (head h reads row h / hpk);
 * extras (e > 0): se: (N, n, e) their scores s_ix (NEG: not allowed), ve: (N, Te, e, d) their values —
 * row i uses chunk i / c if Te > 1, else chunk 0 (key columns: the same keys for every row);
 * columns (g > 0): cp (N, g) their key positions, the same for every row, distinct (−1: empty; ascending with the
 * empty slots last reads least: causal, a tile reads up to its last readable column, the rest masked), read from k,
 * v at their positions (once per head and thread);
 * blocks (gb > 0): bp (N, Tb, gb) a key set per chunk of cb rows (cb a multiple of R: a tile lies in one chunk; key
 * blocks chosen per query block), row i reads the set of chunk i / cb, distinct within the set (a key of it that is a
 * column is read once, as the column; any order: a tile reads up to its last readable key, the rest masked); read from k, v in place, once per
 * (head, chunk) and thread, by groups of VEC slots (a group the thread's previous chunk held is not read again:
 * blocks_resident);
 * lse: (N, n).  Only rows i ≥ r0 are computed (the others untouched: a caller's SDPA serves a wide band's
 * causal prefix).  hq, hkv (N entries, or NULL: h itself): the row of q, o, lse and the head of k, v
 * that head h reads and writes — a group of query heads run in place, GQA's KV heads read without copies
 * (consecutive heads of one KV head share its transposed keys). */
int attnlab_band_forward(const float *q, const float *k, const float *v, const unsigned char *keep,
                          const float *se, const float *ve, long e, long Te, long c,
                          const long *cp, long g, const long *bp, long gb, long Tb, long cb,
                          float *o, float *lse, long N, long n, long m, long d, long sq, long sqr, long sk, long skr,
                          long sv, long svr, long so, long sor, long hpk,
                          long w, long off, int causal, float tau, int threads, const long *hq, const long *hkv, long r0)
{
    long tiles = (n - r0 + R - 1) / R;
    long span = 2 * w + R < m ? 2 * w + R : m;               /* keys of a tile, at most */
    long lds = (span + 2 * VEC - 1) / (2 * VEC) * (2 * VEC); /* a row of S, whole pairs of vectors */
    long gpad = (g + VEC - 1) / VEC * VEC;                   /* the columns' scores go after the extras' */
    long gbpad = (gb + VEC - 1) / VEC * VEC;                 /* the blocks' after the columns' (slots gt … gpad: NEG) */
    long et = e + gpad + gb;                                 /* extra keys of a row: given ones, columns, blocks */
    int failed = 0;
#pragma omp parallel num_threads(threads)
    {
        float *S = aligned_alloc(64, (size_t)R * lds * sizeof(float));
        long lde = (e + gpad + gbpad + 2 * VEC - 1) / (2 * VEC) * (2 * VEC);
        float *SE = et ? aligned_alloc(64, (size_t)R * lde * sizeof(float)) : NULL;
        float *KC = g ? aligned_alloc(64, (size_t)d * gpad * sizeof(float)) : NULL; /* head kc_h's columns, transposed */
        int *PC = g ? malloc((size_t)g * sizeof(int)) : NULL;                   /* their positions (−1: empty or not kept) */
        unsigned char *CM = g && gb ? malloc((size_t)m) : NULL;                 /* 1[j is a column of head kc_h] */
        float *VC = g ? aligned_alloc(64, (size_t)gpad * d * sizeof(float)) : NULL; /* their values */
        float *KB = gb ? aligned_alloc(64, (size_t)d * gbpad * sizeof(float)) : NULL; /* chunk kb_t's block keys, transposed */
        int *PB = gb ? malloc((size_t)gbpad * sizeof(int)) : NULL;      /* the slots' positions (−1: empty or not kept) */
        long *RB = gb ? malloc((size_t)gbpad * sizeof(long)) : NULL;    /* the slots' positions as given (−1: empty) */
        float *VB = gb ? aligned_alloc(64, (size_t)gbpad * d * sizeof(float)) : NULL;
        long kc_h = -1, kb_h = -1, kb_t = -1;
        Keys K = {NULL, 4 * lds, 0, 0, -1};
        K.kt = aligned_alloc(64, (size_t)d * K.cap * sizeof(float));
        int ok = S && K.kt && (SE || !et) && ((KC && PC && VC) || !g) && ((KB && PB && VB && RB) || !gb) && (CM || !(g && gb));
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (long job = 0; job < N * tiles; job++) {
            if (!ok) continue;
            long h = job / tiles, i0 = r0 + (job % tiles) * R;
            long hx = hq ? hq[h] : h, hk = hkv ? hkv[h] : h; /* its query / output head, its KV head */
            int rows = n - i0 < R ? (int)(n - i0) : R;
            long a[R], b[R], jlo, jhi;
            tile_band(i0, rows, m, w, off, causal, a, b, &jlo, &jhi);
            float *o_t = o + hx * so + i0 * sor, *lse_t = lse + hx * n + i0;
            const float *q_h = q + hx * sq;
            long L = 0, Lpad = 0;
            if (jhi >= jlo) {
                L = jhi - jlo + 1, Lpad = (L + VEC - 1) / VEC * VEC;
                const float *kt = keys_for(&K, k + hk * sk, skr, hk, m, d, jlo, Lpad);
                tile_scores(q_h, sqr, n, i0, kt, K.cap, d, L, S, lds);
            }
            for (int r = 0; r < rows; r++) /* the extras' scores, given */
                memcpy(SE + r * lde, se + (h * n + i0 + r) * e, e * sizeof(float));
            const unsigned char *kh = keep ? keep + (h / hpk) * m : NULL;
            long gt = 0, bt = 0; /* the tile's columns and blocks: causal, up to the last one its last row may read */
            if (g) { /* the columns' scores, then their mask: off the row's band, causal, kept */
                const long *p = cp + h * g;
                if (kc_h != h) { /* the columns' keys, transposed once per head and thread (zeros past g) */
                    gather_keys(k + hk * sk, skr, v + hk * sv, svr, p, g, gpad, gpad, d, KC, VC);
                    for (long x = 0; x < g; x++) PC[x] = p[x] >= 0 && !(kh && !kh[p[x]]) ? (int)p[x] : -1;
                    if (CM) { /* the block keys that are columns: read as columns only */
                        memset(CM, 0, (size_t)m);
                        for (long x = 0; x < g; x++)
                            if (p[x] >= 0 && p[x] < m) CM[p[x]] = 1;
                    }
                    kc_h = h;
                }
                gt = causal ? readable(p, g, i0 + rows - 1) : g;
                if (gt) tile_scores(q_h, sqr, n, i0, KC, gpad, d, gt, SE + e, lde);
                mask_keys(SE + e, lde, PC, gt, rows, i0, off, w, causal, m, tau);
            }
            if (gb) { /* the chunk's block keys: scored and masked as the columns, after them */
                long t = i0 / cb;
                const long *p = bp + (h * Tb + t) * gb;
                if (kb_h != h || kb_t != t) { /* transposed once per (head, chunk) and thread */
                    blocks_resident(k + hk * sk, skr, v + hk * sv, svr, p, gb, gbpad, d, kh, CM, m, kb_h == h, KB, VB, PB, RB);
                    kb_h = h, kb_t = t;
                }
                bt = readable(RB, gbpad, causal ? i0 + rows - 1 : m); /* the slots up to the last one a row may read */
                if (bt) tile_scores(q_h, sqr, n, i0, KB, gbpad, d, bt, SE + e + gpad, lde);
                mask_keys(SE + e + gpad, lde, PB, bt, rows, i0, off, w, causal, m, tau);
            }
            long ett = bt ? e + gpad + bt : e + gt;
            float inv[R];
            const unsigned char *kp = keep ? keep + (h / hpk) * m + jlo : NULL;
            for (int r = 0; r < R; r++) {
                float sum = 0.0f;
                if (r < rows)
                    sum = row_softmax(S + r * lds, Lpad, jhi >= jlo ? a[r] - jlo : 0, jhi >= jlo ? b[r] - jlo : -1, kp, tau, SE + r * lde,
                                      e + gt, e + gpad, bt, lse_t + r);
                else {
                    if (Lpad) memset(S + r * lds, 0, Lpad * sizeof(float));
                    if (ett) memset(SE + r * lde, 0, ett * sizeof(float));
                }
                inv[r] = sum > 0.0f ? 1.0f / sum : 0.0f;
            }
            if (L)
                tile_values(S, lds, L, v + hk * sv, svr, d, jlo, inv, rows, o_t, sor, 0);
            else
                for (int r = 0; r < rows; r++) memset(o_t + r * sor, 0, d * sizeof(float));
            if (e && Te == 1) /* + P_E V_E */
                tile_values(SE, lde, e, ve + h * e * d, d, d, 0, inv, rows, o_t, sor, 1);
            else if (e && c % R == 0) /* the tile's rows share one chunk: its extras' values */
                tile_values(SE, lde, e, ve + (h * Te + i0 / c) * e * d, d, d, 0, inv, rows, o_t, sor, 1);
            else
                for (int r = 0; r < rows; r++)
                    for (long x = 0; x < e; x++) {
                        float p = SE[r * lde + x] * inv[r];
                        if (p == 0.0f) continue;
                        const float *vx = ve + ((h * Te + (i0 + r) / c) * e + x) * d;
                        for (long kk = 0; kk < d; kk++) o_t[r * sor + kk] += p * vx[kk];
                    }
            if (gt) /* + P_C V_C */
                tile_values(SE + e, lde, gt, VC, d, d, 0, inv, rows, o_t, sor, 1);
            if (bt) /* + P_B V_B */
                tile_values(SE + e + gpad, lde, bt, VB, d, d, 0, inv, rows, o_t, sor, 1);
        }
        free(S);
        free(SE);
        free(KC);
        free(PC);
        free(CM);
        free(VC);
        free(KB);
        free(PB);
        free(RB);
        free(VB);
        free(K.kt);
    }
    return failed; /* 1: a thread could not allocate its scratch (nothing it should have written is valid) */
}
