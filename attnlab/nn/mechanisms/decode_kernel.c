/* decode_kernel.c — one decoding query per head over a planned layer's cache, read-back included, fused on the CPU.
 *
 * Query head h (KV head g = ⌊h / r⌋) at position i reads, in one online softmax,
 *
 *   S_h(i) = B_{w_h}(i) ∪ T_h ∪ ⋃ {P ∩ O_h(i) : P ∈ top_K U_{h,P}(q) over C_h(i)}
 *
 *   B_{w_h}(i) = {j : i − w_h ≤ j ≤ i}                  the band (w_h = FULL = −1: every cached key)
 *   T_h                                                 its columns: flags[b, g, ρ, slot] on the resident slots
 *   O_h(i) = {j ≤ i} ∖ (B_{w_h}(i) ∪ T_h)                the keys it reads otherwise not
 *   C_h(i) = {P : |P ∩ [0, i]| > |P ∩ B_{w_h}(i)| + |P ∩ T_h ∖ B_{w_h}(i)|}   candidate pages (reads_h only)
 *   U_{h,P}(q) = Σ_d q⁺_d M_{P,d} + q⁻_d m_{P,d}          Quest's bound from the page summaries (m ≤ k ≤ M), h's own
 *                                                       summary (its columns left out) on the pages its columns touch
 *
 *   o_h = Σ_{j ∈ S_h(i)} exp(s_j − L) v_j,  s_j = τ q_h·k_j,  L = log Σ_{j ∈ S_h(i)} exp(s_j)   (o_h = 0: no key)
 *
 * A resident slot is read if its position j ≥ 0 is visible (j ≤ i, i − j < W with a sliding window W) and in the
 * band or a column; a chosen page's position j (j ≤ i, j < i − w_h, not a resident column of h) is read from its
 * resident slot if it has one, else from the store (store slot table[b, g, j]), else not at all.  Returns, per
 * (batch row, KV head), how many distinct store slots its query heads read — what ``decode_step.decode_read_back``
 * counts as fetched.  The same S_h(i) as that Python step (its reference): top-K ties may pick another page of equal
 * bound.  Shapes (element strides passed where a tensor may be a view):
 *
 *   q (B, Hq, d)            kr, vr (B, Hs, L, d | dv)     pos (B, Hs, L) int64, −1: empty     flags (B, Hs, r, L) bytes
 *   w, reads (Hq,)          m, M (B, V, Pm, d)            pc (B, Hc, C) int64, −1: none       mc, Mc (B, Hc, C, d)
 *   mrow (Hs,): each KV head's row of m, M     hrow (Hq,): each query head's row of pc, mc, Mc   (the layer's summaries)
 *   ks, vs (B, Hs, S, d | dv) the store                   table (B, Hs, J) int64, −1: not stored
 *   out (B, Hq, dv)         read (B, Hs) int64
 *
 * ±inf in m, M, mc, Mc marks a page without a key; they are tested by their bits (-ffast-math assumes no inf).
 * Threads take (batch row, KV head) pairs; each keeps O(i + S + P + dv) scratch.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define FULL (-1L)

static int is_inf_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7fffffffu) == 0x7f800000u;
}

/* U = Σ_d q⁺_d M_d + q⁻_d m_d; returns 0 (and leaves U) where the page has no key (every m_d = ±inf). */
static int bound(const float *q, const float *m, const float *M, long d, float *U)
{
    int empty = 1;
    for (long x = 0; x < d; x++) empty &= is_inf_bits(m[x]);
    if (empty) return 0;
    float u = 0.0f;
    for (long x = 0; x < d; x++) u += q[x] > 0.0f ? q[x] * M[x] : q[x] * m[x];
    *U = u;
    return 1;
}

/* C_h(i) ∋ P: page p holds a position ≤ i outside h's band [lo, i] and its ncol columns off the band. */
static inline int candidate(long p, long page, long i, long lo, long ncol)
{
    long start = p * page, end = start + page < i + 1 ? start + page : i + 1;
    long from = start > lo ? start : lo;
    long in_band = end - from > 0 ? end - from : 0;
    return in_band + ncol < end - start;
}

/* The online softmax of one query: running max mx, sum l, accumulator acc (dv). */
typedef struct {
    float mx, l;
    float *acc;
    long dv;
} Online;

static inline void take(Online *o, float s, const float *v)
{
    if (s > o->mx) {
        float c = expf(o->mx - s);   /* 0 for the first key (mx = −1e30) */
        o->l *= c;
        for (long x = 0; x < o->dv; x++) o->acc[x] *= c;
        o->mx = s;
    }
    float p = expf(s - o->mx);
    o->l += p;
    for (long x = 0; x < o->dv; x++) o->acc[x] += p * v[x];
}

static inline float dot(const float *a, const float *b, long d)
{
    float s = 0.0f;
    for (long x = 0; x < d; x++) s += a[x] * b[x];
    return s;
}

int attnlab_decode_read_back(
    const float *q, long q_sb, long q_sh,
    const float *kr, long kr_sb, long kr_sh, long kr_sl,
    const float *vr, long vr_sb, long vr_sh, long vr_sl,
    const long *pos, long pos_sb, long pos_sh,
    const unsigned char *flags, long f_sb, long f_sh, long f_sr,
    const long *w, const unsigned char *reads,
    const float *m, const float *M, long V, long Pm, const long *mrow,
    const long *pc, const float *mc, const float *Mc, long Hc, long C, const long *hrow,
    const float *ks, long ks_sb, long ks_sh, long ks_sl, const float *vs, long vs_sb, long vs_sh, long vs_sl, long S,
    const long *table, long t_sb, long t_sh, long J,
    float *out, long *read,
    long B, long Hs, long r, long L, long d, long dv,
    long i, long sliding, long page, long K, float tau, int threads)
{
    long P = i / page + 1;                  /* pages 0 … P − 1 hold the positions ≤ i */
    int failed = 0;
#pragma omp parallel for num_threads(threads) schedule(dynamic)
    for (long bg = 0; bg < B * Hs; bg++) {
        long b = bg / Hs, g = bg % Hs;
        long *inv = malloc((i + 1) * sizeof(long));           /* position → its first resident slot (−1: none) */
        unsigned char *mark = calloc(S > 0 ? S : 1, 1);       /* store slots read by some query head of g */
        float *U = malloc(P * sizeof(float));
        unsigned char *ok = malloc(P);                         /* candidate with a bound */
        long *ncol = malloc(P * sizeof(long));
        long *top = malloc((K > 0 ? K : 1) * sizeof(long));
        float *acc = malloc((dv > 0 ? dv : 1) * sizeof(float));
        if (!inv || !mark || !U || !ok || !ncol || !top || !acc) {
#pragma omp atomic write
            failed = 1;
            free(inv), free(mark), free(U), free(ok), free(ncol), free(top), free(acc);
            continue;
        }
        const long *pg = pos + b * pos_sb + g * pos_sh;                      /* (L,) */
        const float *kg = kr + b * kr_sb + g * kr_sh, *vg = vr + b * vr_sb + g * vr_sh;
        for (long j = 0; j <= i; j++) inv[j] = -1;
        for (long s = L - 1; s >= 0; s--)
            if (pg[s] >= 0 && pg[s] <= i) inv[pg[s]] = s;
        const long *tg = table ? table + b * t_sb + g * t_sh : NULL;
        for (long rho = 0; rho < r; rho++) {
            long h = g * r + rho;
            const float *qh = q + b * q_sb + h * q_sh;
            const unsigned char *fh = flags ? flags + b * f_sb + g * f_sh + rho * f_sr : NULL;
            long wh = w[h];
            long lo = wh == FULL ? i + 1 : (i - wh > 0 ? i - wh : 0);         /* the band's first position */
            Online o = {-1e30f, 0.0f, acc, dv};
            memset(acc, 0, dv * sizeof(float));
            /* band ∪ columns over the resident slots */
            for (long s = 0; s < L; s++) {
                long j = pg[s];
                if (j < 0 || j > i || (sliding > 0 && i - j >= sliding)) continue;
                if (!(wh == FULL || i - j <= wh || (fh && fh[s]))) continue;
                take(&o, tau * dot(qh, kg + s * kr_sl, d), vg + s * vr_sl);
            }
            /* read-back: the K candidate pages of largest bound */
            if (K > 0 && reads[h]) {
                for (long p = 0; p < P; p++) ncol[p] = 0;
                if (fh)
                    for (long s = 0; s < L; s++) {
                        long j = pg[s];
                        if (j >= 0 && j <= i && fh[s] && !(i - j <= wh)) ncol[j / page]++;   /* a column off the band */
                    }
                const float *mg = m + (b * V + mrow[g]) * Pm * d, *Mg = M + (b * V + mrow[g]) * Pm * d;
                for (long p = 0; p < P; p++)
                    ok[p] = candidate(p, page, i, lo, ncol[p]) && bound(qh, mg + p * d, Mg + p * d, d, &U[p]);
                for (long c = 0; c < C; c++) {   /* h's own summary of the pages its columns touch */
                    long p = pc[(b * Hc + hrow[h]) * C + c], at = ((b * Hc + hrow[h]) * C + c) * d;
                    if (p >= 0 && p < P) ok[p] = candidate(p, page, i, lo, ncol[p]) && bound(qh, mc + at, Mc + at, d, &U[p]);
                }
                long n = 0;                                        /* top: the chosen pages, largest bound first */
                for (long p = 0; p < P; p++) {
                    if (!ok[p]) continue;
                    if (n == K && !(U[p] > U[top[n - 1]])) continue;
                    long x = n < K ? n++ : K - 1;
                    while (x > 0 && U[p] > U[top[x - 1]]) top[x] = top[x - 1], x--;
                    top[x] = p;
                }
                for (long t = 0; t < n; t++)
                    for (long j = top[t] * page; j < top[t] * page + page && j <= i && j < lo; j++) {
                        long sr = inv[j];
                        if (sr >= 0) {
                            if (fh && fh[sr]) continue;                   /* a column of h: read above */
                            take(&o, tau * dot(qh, kg + sr * kr_sl, d), vg + sr * vr_sl);
                            continue;
                        }
                        long ss = tg && j < J ? tg[j] : -1;
                        if (ss < 0) continue;
                        const float *kx = ks + b * ks_sb + g * ks_sh + ss * ks_sl, *vx = vs + b * vs_sb + g * vs_sh + ss * vs_sl;
                        take(&o, tau * dot(qh, kx, d), vx);
                        mark[ss] = 1;
                    }
            }
            float *oh = out + (b * Hs * r + h) * dv;
            float inv_l = o.l > 0.0f ? 1.0f / o.l : 0.0f;
            for (long x = 0; x < dv; x++) oh[x] = acc[x] * inv_l;
        }
        long count = 0;
        for (long s = 0; s < S; s++) count += mark[s];
        read[b * Hs + g] = count;
        free(inv), free(mark), free(U), free(ok), free(ncol), free(top), free(acc);
    }
    return failed;
}
