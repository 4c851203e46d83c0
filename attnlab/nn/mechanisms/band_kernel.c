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
 * S's inner loop reads consecutive keys of kᵀ: each thread keeps the keys of its current head
 * transposed in a rolling buffer (d × CAP), appending the R keys a new tile needs and shifting the
 * buffer when it is full — every key is transposed once, in cache.  Vectors are GCC/Clang vector extensions: AVX-512, AVX2 or NEON, whatever
 * -march=native gives.  The row softmax goes in whole vectors too, its exp inline (vexp: no libm call; the
 * backward pass's expf is vectorised by the compiler, glibc's libmvec).
 * Heads × tiles are shared among threads by OpenMP.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define R 8          /* query rows per tile */
#define VEC 16       /* floats per vector */
#define NEG (-1e30f) /* finite −∞ */

typedef float vf __attribute__((vector_size(VEC * sizeof(float))));
typedef float vf_unaligned __attribute__((vector_size(VEC * sizeof(float)), aligned(sizeof(float)), may_alias));

static inline vf load(const float *p) { return *(const vf_unaligned *)p; }
static inline void store(float *p, vf x) { *(vf_unaligned *)p = x; }

/* The keys [base, base + len) of one head, transposed: kt[kk·cap + (j − base)] = k_j[kk]. */
typedef struct {
    float *kt;
    long cap, base, len, head;
} Keys;

/* Make [jlo, jlo + need) resident (keys ≥ m read as 0; key j at k + j·ldr) and return the column of key jlo. */
static const float *keys_for(Keys *K, const float *k, long ldr, long h, long m, long d, long jlo, long need)
{
    if (K->head != h || jlo < K->base || jlo + need > K->base + K->cap) {
        long keep = 0; /* keys already transposed that the tile still needs: shift them to the front */
        if (K->head == h && jlo >= K->base && jlo < K->base + K->len) {
            keep = K->base + K->len - jlo;
            for (long kk = 0; kk < d; kk++) memmove(K->kt + kk * K->cap, K->kt + kk * K->cap + (jlo - K->base), keep * sizeof(float));
        }
        K->head = h, K->base = jlo, K->len = keep;
    }
    for (long j = K->base + K->len; j < jlo + need; j++) { /* append: one key's d floats into d rows */
        long x = j - K->base;
        if (j < m)
            for (long kk = 0; kk < d; kk++) K->kt[kk * K->cap + x] = k[j * ldr + kk];
        else
            for (long kk = 0; kk < d; kk++) K->kt[kk * K->cap + x] = 0.0f;
    }
    if (jlo + need > K->base + K->len) K->len = jlo + need - K->base;
    return K->kt + (jlo - K->base);
}

/* B(i) of the tile's rows i = i0 … i0 + rows − 1 as key ranges [a_r, b_r] (clipped to the keys and the
 * causal triangle; a_r > b_r: none), and their union [jlo, jhi] (jhi < jlo: no row sees a band key). */
static void tile_band(long i0, int rows, long m, long w, long off, int causal, long *a, long *b, long *jlo, long *jhi)
{
    *jlo = m, *jhi = -1;
    for (int r = 0; r < rows; r++) {
        long i = i0 + r, lo = i + off - w, hi = i + off + w;
        if (causal && hi > i) hi = i;
        a[r] = lo < 0 ? 0 : lo;
        b[r] = hi > m - 1 ? m - 1 : hi;
        if (a[r] <= b[r]) {
            *jlo = a[r] < *jlo ? a[r] : *jlo;
            *jhi = b[r] > *jhi ? b[r] : *jhi;
        }
    }
}

/* The last ≤ VEC keys of a tile's scores, one vector at a time (its own function: sharing one with
 * the main loop spills the main loop's key vectors to the stack). */
__attribute__((noinline)) static void tile_scores_last(const float *const *qr, const float *kc, long ldk, long d, float *S, long lds)
{
    vf acc[R];
    memset(acc, 0, sizeof acc);
    for (long kk = 0; kk < d; kk++) {
        vf k0 = load(kc + kk * ldk);
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) acc[r] += qr[r][kk] * k0;
    }
    for (int r = 0; r < R; r++) store(S + r * lds, acc[r]);
}

/* S[r][x] = q_{i0+r} · k_{jlo+x} for x < L (rounded up to VEC), r < R (q row i at q + i·ldq).  q rows past n repeat row n−1.
 * Keys go 2 vectors at a time (16 accumulators), the last ≤ VEC keys one vector at a time. */
static void tile_scores(const float *q, long ldq, long n, long i0, const float *kt, long ldk, long d, long L, float *S, long lds)
{
    const float *qr[R];
    for (int r = 0; r < R; r++) qr[r] = q + (i0 + r < n ? i0 + r : n - 1) * ldq;
    long x0 = 0;
    for (; x0 + VEC < L; x0 += 2 * VEC) {
        vf acc[R][2];
        memset(acc, 0, sizeof acc);
        const float *kc = kt + x0;
        for (long kk = 0; kk < d; kk++) {
            vf k0 = load(kc + kk * ldk), k1 = load(kc + kk * ldk + VEC);
#pragma GCC unroll 16
            for (int r = 0; r < R; r++) {
                float qs = qr[r][kk];
                acc[r][0] += qs * k0;
                acc[r][1] += qs * k1;
            }
        }
        for (int r = 0; r < R; r++) {
            store(S + r * lds + x0, acc[r][0]);
            store(S + r * lds + x0 + VEC, acc[r][1]);
        }
    }
    if (x0 < L) tile_scores_last(qr, kt + x0, ldk, d, S + x0, lds);
}

/* o_{i0+r} (+)= Σ_x P[r][x] v_{jlo+x} · inv[r] for r < rows (value columns 2·VEC at a time, then VEC); value row j
 * at v + j·ldv, output row r at o + r·ldo; add: accumulate into o instead of storing. */
static void tile_values(const float *S, long lds, long L, const float *v, long ldv, long d, long jlo, const float *inv, int rows,
                        float *o, long ldo, int add)
{
    long dd = 0;
    for (; dd + 2 * VEC <= d; dd += 2 * VEC) {
        vf acc[R][2];
        memset(acc, 0, sizeof acc);
        const float *vc = v + jlo * ldv + dd;
        for (long x = 0; x < L; x++) {
            vf v0 = load(vc + x * ldv), v1 = load(vc + x * ldv + VEC);
#pragma GCC unroll 16
            for (int r = 0; r < R; r++) {
                float p = S[r * lds + x];
                acc[r][0] += p * v0;
                acc[r][1] += p * v1;
            }
        }
        for (int r = 0; r < rows; r++) {
            vf y0 = acc[r][0] * inv[r], y1 = acc[r][1] * inv[r];
            if (add) y0 += load(o + r * ldo + dd), y1 += load(o + r * ldo + dd + VEC);
            store(o + r * ldo + dd, y0);
            store(o + r * ldo + dd + VEC, y1);
        }
    }
    for (; dd < d; dd += VEC) {
        vf acc[R];
        memset(acc, 0, sizeof acc);
        const float *vc = v + jlo * ldv + dd;
        for (long x = 0; x < L; x++) {
            vf v0 = load(vc + x * ldv);
            for (int r = 0; r < R; r++) acc[r] += S[r * lds + x] * v0;
        }
        for (int r = 0; r < rows; r++) store(o + r * ldo + dd, acc[r] * inv[r] + (add ? load(o + r * ldo + dd) : (vf){0}));
    }
}

/* exp(x) for x ≤ 0, 16 lanes inline (no call, no scalar remainder, no errno path for the masked −∞ = NEG):
 *
 *   x = n ln2 + r,  n = round(x / ln2),  |r| ≤ ln2 / 2,   e^x = 2^n · p(r),
 *   p(r) = 1 + r + r² (½ + r (1/6 + …))   (Cephes' expf polynomial: ≤ 1 ulp),
 *
 * 2^n built in the exponent bits.  Lanes with x < EXP_MIN give 0: e^x < 2^−124 there, below float's normal
 * range relative to the row's largest weight 1 (which has no effect on a float32 o_i; it keeps the products out of
 * denormals).  glibc's expf and libmvec's (which the compiler used to call here) differ from this by an ulp. */
#define EXP_MIN (-86.0f)
typedef int vi __attribute__((vector_size(VEC * sizeof(int))));

static inline vf blend(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }

static inline vf vexp(vf x)
{
    vi keep = x >= EXP_MIN;
    x = blend(keep, x, (vf){0} + EXP_MIN);
    vi n = __builtin_convertvector(x * -1.44269504088896341f + 0.5f, vi); /* −round(x / ln2): x ≤ 0, truncation */
    vf nf = __builtin_convertvector(n, vf);
    vf r = x + nf * 0.693359375f - nf * 2.12194440e-4f;                    /* Cody–Waite: ln2 = C1 + C2, n·C1 exact */
    vf p = 1.9875691500e-4f * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    vf two_n = (vf)((127 - n) << 23);                                       /* 2^−n'  (n' = −n ≥ 0) */
    return blend(keep, p * two_n, (vf){0});
}

static inline float hmax(vf x)
{
    float m = x[0];
    for (int l = 1; l < VEC; l++) m = x[l] > m ? x[l] : m;
    return m;
}

static inline float hsum(vf x)
{
    float t = 0.0f;
    for (int l = 0; l < VEC; l++) t += x[l];
    return t;
}

/* Lanes x0 … x0 + VEC − 1 inside [lo, hi]. */
static inline vi lanes(long x0, long lo, long hi)
{
    vi x = (vi){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15} + (int)x0;
    return (x >= (int)lo) & (x <= (int)hi);
}

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
    for (long x = 0; x < gpad; x++) {
        const float *kx = x < g && p[x] >= 0 ? k + p[x] * skr : NULL;
        const float *vx = x < g && p[x] >= 0 ? v + p[x] * svr : NULL;
        for (long kk = 0; kk < d; kk++) KT[kk * ldt + x] = kx ? kx[kk] : 0.0f;
        if (vx) memcpy(VT + x * d, vx, d * sizeof(float));
        else memset(VT + x * d, 0, d * sizeof(float));
    }
}

/* Make a chunk's key set p (g keys, −1: none) resident in the slots KB (d × gpad, transposed), VB (gpad × d), with their
 * positions RB (as given) and PB (−1: empty or not kept by keep): by groups of VEC slots, a group the slots hold already
 * (`held`: the previous chunk's, of the same head — neighbouring query blocks choose many of the same key blocks) stays
 * where it is, the others are gathered into the groups of slots this set does not keep.  The set is read in any order. */
static void blocks_resident(const float *k, long skr, const float *v, long svr, const long *p, long g, long gpad, long d,
                            const unsigned char *keep, int held, float *KB, float *VB, int *PB, long *RB)
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
        for (int l = 0; l < VEC; l++) PB[go * VEC + l] = r[l] >= 0 && !(keep && !keep[r[l]]) ? (int)r[l] : -1;
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
 * blocks chosen per query block), row i reads the set of chunk i / cb, distinct from the columns and within the set
 * (any order: a tile reads up to its last readable key, the rest masked); read from k, v in place, once per
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
        float *VC = g ? aligned_alloc(64, (size_t)gpad * d * sizeof(float)) : NULL; /* their values */
        float *KB = gb ? aligned_alloc(64, (size_t)d * gbpad * sizeof(float)) : NULL; /* chunk kb_t's block keys, transposed */
        int *PB = gb ? malloc((size_t)gbpad * sizeof(int)) : NULL;      /* the slots' positions (−1: empty or not kept) */
        long *RB = gb ? malloc((size_t)gbpad * sizeof(long)) : NULL;    /* the slots' positions as given (−1: empty) */
        float *VB = gb ? aligned_alloc(64, (size_t)gbpad * d * sizeof(float)) : NULL;
        long kc_h = -1, kb_h = -1, kb_t = -1;
        Keys K = {NULL, 4 * lds, 0, 0, -1};
        K.kt = aligned_alloc(64, (size_t)d * K.cap * sizeof(float));
        int ok = S && K.kt && (SE || !et) && ((KC && PC && VC) || !g) && ((KB && PB && VB && RB) || !gb);
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
                    blocks_resident(k + hk * sk, skr, v + hk * sv, svr, p, gb, gbpad, d, kh, kb_h == h, KB, VB, PB, RB);
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
        free(VC);
        free(KB);
        free(PB);
        free(RB);
        free(VB);
        free(K.kt);
    }
    return failed; /* 1: a thread could not allocate its scratch (nothing it should have written is valid) */
}

/* M[jlo + x] += Σ_r A[r][x] · X_{i0+r}, x < L, r < rows: a rank-R update of L rows of M (value columns
 * 2·VEC at a time, then VEC).  dK += τ dSᵀ Q and dV += Pᵀ dO of a tile. */
static void tile_rank_update(const float *A, long lds, long L, const float *X, int rows, long d, float *M)
{
    long dd = 0;
    for (; dd + 2 * VEC <= d; dd += 2 * VEC) {
        vf x0[R], x1[R];
        for (int r = 0; r < R; r++) {
            x0[r] = r < rows ? load(X + r * d + dd) : (vf){0};
            x1[r] = r < rows ? load(X + r * d + dd + VEC) : (vf){0};
        }
        for (long x = 0; x < L; x++) {
            vf acc0 = load(M + x * d + dd), acc1 = load(M + x * d + dd + VEC);
#pragma GCC unroll 16
            for (int r = 0; r < R; r++) {
                float a = A[r * lds + x];
                acc0 += a * x0[r];
                acc1 += a * x1[r];
            }
            store(M + x * d + dd, acc0);
            store(M + x * d + dd + VEC, acc1);
        }
    }
    for (; dd < d; dd += VEC)
        for (long x = 0; x < L; x++) {
            vf acc = load(M + x * d + dd);
            for (int r = 0; r < rows; r++) acc += A[r * lds + x] * load(X + r * d + dd);
            store(M + x * d + dd, acc);
        }
}

/* The band's gradients, flash style (P recomputed from the saved L, never stored):
 *
 *   P_ij = exp(τ q_i·k_j − L_i),  dP_ij = dO_i·v_j,  dS_ij = P_ij (dP_ij − D_i),  D_i = dO_i·O_i
 *   dq_i = τ Σ_j dS_ij k_j,   dk_j += τ Σ_i dS_ij q_i,   dv_j += Σ_i P_ij dO_i      (j ∈ B(i))
 *
 * L and D are those of the whole softmax (band ∪ extras): restricted to the band keys, this is the
 * band's share of the gradient; the extras' share is added by the caller.  Threads take whole heads
 * (a head's dk, dv are written by one thread only).  dq, dk, dv: (N, n|m, d), zero on entry. */
int attnlab_band_backward(const float *q, const float *k, const float *v, const unsigned char *keep,
                           const float *dO, const float *Lse, const float *D, float *dq, float *dk, float *dv,
                           long N, long n, long m, long d, long sk, long sv, long hpk,
                           long w, long off, int causal, float tau, int threads)
{
    long tiles = (n + R - 1) / R;
    long span = 2 * w + R < m ? 2 * w + R : m;
    long lds = (span + 2 * VEC - 1) / (2 * VEC) * (2 * VEC);
    int failed = 0;
#pragma omp parallel num_threads(threads)
    {
        float *P = aligned_alloc(64, (size_t)R * lds * sizeof(float));
        float *dS = aligned_alloc(64, (size_t)R * lds * sizeof(float));
        Keys K = {NULL, 4 * lds, 0, 0, -1}, V = {NULL, 4 * lds, 0, 0, -1};
        K.kt = aligned_alloc(64, (size_t)d * K.cap * sizeof(float));
        V.kt = aligned_alloc(64, (size_t)d * V.cap * sizeof(float));
        int ok = P && dS && K.kt && V.kt;
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (long h = 0; h < N; h++)
            for (long i0 = 0; i0 < n && ok; i0 += R) {
                int rows = n - i0 < R ? (int)(n - i0) : R;
                long a[R], b[R], jlo, jhi;
                tile_band(i0, rows, m, w, off, causal, a, b, &jlo, &jhi);
                if (jhi < jlo) continue; /* no band key: dq stays 0 */
                long L = jhi - jlo + 1, Lpad = (L + VEC - 1) / VEC * VEC;
                const float *q_t = q + (h * n + i0) * d, *dO_t = dO + (h * n + i0) * d;
                tile_scores(q + h * n * d, d, n, i0, keys_for(&K, k + h * sk, d, h, m, d, jlo, Lpad), K.cap, d, L, P, lds);
                tile_scores(dO + h * n * d, d, n, i0, keys_for(&V, v + h * sv, d, h, m, d, jlo, Lpad), V.cap, d, L, dS, lds);
                const unsigned char *kp = keep ? keep + (h / hpk) * m + jlo : NULL;
                for (int r = 0; r < R; r++) { /* P = exp(τS − L) on the row's band, dS = P (dP − D); 0 elsewhere */
                    float *p = P + r * lds, *ds = dS + r * lds;
                    long lo = 0, hi = -1;
                    float Li = 0.0f, Di = 0.0f;
                    if (r < rows && a[r] <= b[r] && Lse[h * n + i0 + r] > 0.5f * NEG) {
                        lo = a[r] - jlo, hi = b[r] - jlo, Li = Lse[h * n + i0 + r], Di = D[h * n + i0 + r];
                    }
                    for (long x = 0; x < Lpad; x++) {
                        int in = x >= lo && x <= hi && !(kp && !kp[x]);
                        float px = in ? expf(tau * p[x] - Li) : 0.0f;
                        ds[x] = px * (ds[x] - Di);
                        p[x] = px;
                    }
                }
                float taus[R];
                for (int r = 0; r < R; r++) taus[r] = tau;
                tile_values(dS, lds, L, k + h * sk, d, d, jlo, taus, rows, dq + (h * n + i0) * d, d, 0);
                tile_rank_update(dS, lds, L, q_t, rows, d, dk + (h * m + jlo) * d); /* τ applied once at the end */
                tile_rank_update(P, lds, L, dO_t, rows, d, dv + (h * m + jlo) * d);
            }
        free(P);
        free(dS);
        free(K.kt);
        free(V.kt);
    }
    long total = N * m * d;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long x = 0; x < total; x++) dk[x] *= tau;
    return failed;
}
