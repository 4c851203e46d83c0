/* decode_kernel.c — one decoding query per head over a planned layer's cache, read-back included, fused on the CPU.
 *
 * Query head h (KV head g = ⌊h / r⌋) at position i reads, in one softmax,
 *
 *   S_h(i) = B_{w_h}(i) ∪ T_h ∪ ⋃ {P ∩ O_h(i) : P ∈ top_K U_{h,P}(q) over C_h(i)}
 *
 *   B_{w_h}(i) = {j : i − w_h ≤ j ≤ i}                  the band (w_h = FULL = −1: every cached key)
 *   T_h                                                 its columns: flags[b, g, ρ, slot] on the resident slots
 *   O_h(i) = {j ≤ i} ∖ (B_{w_h}(i) ∪ T_h)                the keys it reads otherwise not
 *   C_h(i) = {P : |P ∩ [0, i]| > |P ∩ B_{w_h}(i)| + |P ∩ T_h ∖ B_{w_h}(i)|}   candidate pages (reads_h only)
 *   U_{h,P}(q) = Σ_d q⁺_d M_{P,d} + q⁻_d m_{P,d}          Quest's bound from the page summaries (m ≤ k ≤ M), h's own
 *                                                       summary (its columns left out) on the pages its columns touch
 *   μ_{h,P}(q) = q·s_P / |P|                            the mean key's score (s_P = Σ_{j∈P} k_j), Km > 0 only: then the
 *                                                       K − Km pages of largest U are read, and the Km of largest μ
 *                                                       among the candidates left
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
 *   w, reads (Hq,)          m, M (B, V, Pm, d) strided    pc (B, Hc, C) int64, −1: none       mc, Mc (B, Hc, C, d)
 *   mrow (Hs,): each KV head's row of m, M     hrow (Hq,): each query head's row of pc, mc, Mc   (the layer's summaries)
 *   sm (B, V, Pm, d) with m's strides, pcount (Pm,) float    cs (B, Hc, C, d), ccount (B, Hc, C) float   (Km > 0 only)
 *   ks, vs (B, Hs, S, d | dv) the store                   table (B, Hs, J) int64, −1: not stored
 *   out (B, Hq, dv)         read (B, Hs) int64
 *
 * ±inf in m, M, mc, Mc marks a page without a key; they are tested by their bits (-ffast-math assumes no inf).
 * Per (batch row, KV head): its resident slots in T parts, each part one pass that scores each key for the r query heads
 * that read it (a key read once), and each query head's pages a part of its own; a part's scores are exponentiated
 * together in whole vectors (vexp, vector_math.h) into (m, l, o) unnormalised, and the parts of a head merged by their
 * maxima — FlashDecoding's split of the keys, so that a layer with fewer KV heads than threads (Gemma-3: one) still
 * runs on every thread.  T = 1 where the (batch row, KV head) pairs are ≥ 2 × threads; parts are ≥ ``chunk`` slots.
 * Threads take the tasks (parts, pages) dynamically; each keeps O(r·L/T + P + K·page) scratch, the call O(B·Hs·(i + S)).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "vector_math.h" /* NEG, exp_sum */

#define FULL (-1L)

static int is_inf_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7fffffffu) == 0x7f800000u;
}

/* the chosen pages (indices into score[0 … P − 1]): up to K with ok[p], largest score first; returns how many */
static long top_pages(const float *score, const unsigned char *ok, long P, long K, long *top)
{
    long n = 0;
    if (K <= 0) return 0;
    for (long p = 0; p < P; p++) {
        if (!ok[p]) continue;
        if (n == K && !(score[p] > score[top[n - 1]])) continue;
        long x = n < K ? n++ : K - 1;
        while (x > 0 && score[p] > score[top[x - 1]]) top[x] = top[x - 1], x--;
        top[x] = p;
    }
    return n;
}

/* U = Σ_d q⁺_d M_d + q⁻_d m_d (qp = q⁺, qn = q⁻); returns 0 (and leaves U) where the page has no key (m = +inf: a
 * page's minimum is finite in every coordinate once it holds a key, so its first tells). */
static inline int bound(const float *qp, const float *qn, const float *m, const float *M, long d, float *U)
{
    if (is_inf_bits(m[0])) return 0;
    float u = 0.0f;
    for (long x = 0; x < d; x++) u += qp[x] * M[x] + qn[x] * m[x];
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

static inline float dot(const float *a, const float *b, long d)
{
    float s = 0.0f;
    for (long x = 0; x < d; x++) s += a[x] * b[x];
    return s;
}

/* One part of a softmax over the n keys read (FlashDecoding's split): m = max_x s_x, l = Σ_x exp(s_x − m),
 * o = Σ_x exp(s_x − m) v_x, unnormalised (value x at vals[x]; n = 0: m = NEG, l = 0, o = 0).  The exps in whole vectors,
 * inline (vector_math.h's exp_sum, as the band kernel's row softmax: no libm call, no scalar path). */
static void softmax_part(float *sc, const float **vals, long n, long dv, float *o, float *m_out, float *l_out)
{
    memset(o, 0, dv * sizeof(float));
    *m_out = NEG, *l_out = 0.0f;
    if (n == 0) return;
    float mx = sc[0];
    for (long x = 1; x < n; x++) mx = sc[x] > mx ? sc[x] : mx;
    float l = exp_sum(sc, n, mx);
    for (long x = 0; x < n; x++) {
        const float *v = vals[x];
        float p = sc[x];
        for (long y = 0; y < dv; y++) o[y] += p * v[y];
    }
    *m_out = mx, *l_out = l;
}

/* The parts merged: o_h = Σ_t e^{m_t − m} o_t / Σ_t e^{m_t − m} l_t, m = max_t m_t over the parts that read a key
 * (o_h = 0: none did).  A part is dv + 2 floats (o, m, l), part t at part + t·stride. */
static void merge_parts(const float *part, long n, long stride, long dv, float *o)
{
    float mx = NEG;
    for (long t = 0; t < n; t++) {
        const float *pt = part + t * stride;
        if (pt[dv + 1] > 0.0f && pt[dv] > mx) mx = pt[dv];
    }
    memset(o, 0, dv * sizeof(float));
    float l = 0.0f;
    for (long t = 0; t < n; t++) {
        const float *pt = part + t * stride;
        if (!(pt[dv + 1] > 0.0f)) continue;
        float a = expf(pt[dv] - mx);
        l += a * pt[dv + 1];
        for (long y = 0; y < dv; y++) o[y] += a * pt[y];
    }
    if (l > 0.0f) {
        float inv = 1.0f / l;
        for (long y = 0; y < dv; y++) o[y] *= inv;
    }
}

static void empty_part(float *pt, long dv)
{
    memset(pt, 0, dv * sizeof(float));
    pt[dv] = NEG, pt[dv + 1] = 0.0f;
}

int attnlab_decode_read_back(
    const float *q, long q_sb, long q_sh,
    const float *kr, long kr_sb, long kr_sh, long kr_sl,
    const float *vr, long vr_sb, long vr_sh, long vr_sl,
    const long *pos, long pos_sb, long pos_sh,
    const unsigned char *flags, long f_sb, long f_sh, long f_sr,
    const long *w, const unsigned char *reads,
    const float *m, const float *M, long m_sb, long m_sh, long m_sp, long Pm, const long *mrow,
    const long *pc, const float *mc, const float *Mc, long Hc, long C, const long *hrow,
    const float *sm, const float *pcount, const float *cs, const float *ccount,
    const float *ks, long ks_sb, long ks_sh, long ks_sl, const float *vs, long vs_sb, long vs_sh, long vs_sl, long S,
    const long *table, long t_sb, long t_sh, long J,
    float *out, long *read,
    long B, long Hs, long r, long L, long d, long dv,
    long i, long sliding, long page, long K, long Km, float tau, int threads, long chunk)
{
    long P = i / page + 1;                  /* pages 0 … P − 1 hold the positions ≤ i */
    long BG = B * Hs, Sm = S > 0 ? S : 1;
    /* T parts of the resident slots per (batch row, KV head): enough tasks for the threads when the KV heads are fewer
     * (a decoding query of Gemma-3: one KV head), none shorter than ``chunk`` slots */
    long T = 1;
    if (chunk > 0 && BG < 2L * threads) {
        long most = (L + chunk - 1) / chunk;
        T = (2L * threads + BG - 1) / BG;
        T = T < most ? T : most;
        T = T > 1 ? T : 1;
    }
    long R = T + (K > 0);                   /* parts of a query head: T of resident slots, then its pages */
    long tasks = T + (K > 0 ? r : 0);       /* tasks of a (batch row, KV head): the T parts, each query head's pages */
    float *part = malloc(BG * R * r * (dv + 2) * sizeof(float));   /* [bg][t][ρ]: o, m, l */
    long *inv = K > 0 ? malloc(BG * (i + 1) * sizeof(long)) : NULL;   /* position → its first resident slot (−1: none) */
    unsigned char *mark = calloc(BG * Sm, 1);                          /* store slots read by some query head of g */
    if (!part || (K > 0 && !inv) || !mark) {
        free(part), free(inv), free(mark);
        return 1;
    }
    int failed = 0;
#pragma omp parallel num_threads(threads)
    {
        if (K > 0) {
#pragma omp for
            for (long bg = 0; bg < BG; bg++) {
                const long *pg = pos + (bg / Hs) * pos_sb + (bg % Hs) * pos_sh;
                long *ig = inv + bg * (i + 1);
                for (long j = 0; j <= i; j++) ig[j] = -1;
                for (long s = L - 1; s >= 0; s--)
                    if (pg[s] >= 0 && pg[s] <= i) ig[pg[s]] = s;
            }
        }
#pragma omp for schedule(dynamic)
        for (long task = 0; task < BG * tasks; task++) {
            long bg = task / tasks, t = task % tasks, b = bg / Hs, g = bg % Hs;
            const long *pg = pos + b * pos_sb + g * pos_sh;                      /* (L,) */
            const float *kg = kr + b * kr_sb + g * kr_sh, *vg = vr + b * vr_sb + g * vr_sh;
            const float *qg = q + b * q_sb + g * r * q_sh;
            const unsigned char *fg = flags + b * f_sb + g * f_sh;
            float *pb = part + bg * R * r * (dv + 2);
            if (t < T) {   /* band ∪ columns over slots s0 … s1 − 1: each key read once for the r query heads of g */
                long s0 = t * L / T, s1 = (t + 1) * L / T, n = s1 - s0;
                float *sc = malloc((r * n + 1) * sizeof(float));              /* each query head's scores … */
                const float **vals = malloc((r * n + 1) * sizeof(float *));   /* … and the values they weigh */
                long *cnt = calloc(r, sizeof(long));
                if (!sc || !vals || !cnt) {
#pragma omp atomic write
                    failed = 1;
                    for (long rho = 0; rho < r; rho++) empty_part(pb + (t * r + rho) * (dv + 2), dv);
                    free(sc), free(vals), free(cnt);
                    continue;
                }
                for (long s = s0; s < s1; s++) {
                    long j = pg[s];
                    if (j < 0 || j > i || (sliding > 0 && i - j >= sliding)) continue;
                    const float *key = kg + s * kr_sl;
                    for (long rho = 0; rho < r; rho++) {
                        long wh = w[g * r + rho];
                        if (!(wh == FULL || i - j <= wh || fg[rho * f_sr + s])) continue;
                        sc[rho * n + cnt[rho]] = tau * dot(qg + rho * q_sh, key, d);
                        vals[rho * n + cnt[rho]++] = vg + s * vr_sl;
                    }
                }
                for (long rho = 0; rho < r; rho++) {
                    float *pt = pb + (t * r + rho) * (dv + 2);
                    softmax_part(sc + rho * n, vals + rho * n, cnt[rho], dv, pt, pt + dv, pt + dv + 1);
                }
                free(sc), free(vals), free(cnt);
                continue;
            }
            /* read-back of query head h: the K candidate pages of largest bound (K − Km of them, then Km by the mean key) */
            long rho = t - T, h = g * r + rho, wh = w[h];
            float *pt = pb + (T * r + rho) * (dv + 2);
            if (!reads[h]) {
                empty_part(pt, dv);
                continue;
            }
            const float *qh = qg + rho * q_sh;
            const unsigned char *fh = fg + rho * f_sr;
            const long *ig = inv + bg * (i + 1);
            const long *tg = table ? table + b * t_sb + g * t_sh : NULL;
            long lo = wh == FULL ? i + 1 : (i - wh > 0 ? i - wh : 0);         /* the band's first position */
            float *U = malloc(2 * P * sizeof(float));             /* U, then μ */
            unsigned char *ok = malloc(P);                         /* a candidate page with a bound */
            long *ncol = malloc(P * sizeof(long));
            long *top = malloc(K * sizeof(long));
            float *qpn = malloc(2 * d * sizeof(float));
            float *sc = malloc(K * page * sizeof(float));
            const float **vals = malloc(K * page * sizeof(float *));
            if (!U || !ok || !ncol || !top || !qpn || !sc || !vals) {
#pragma omp atomic write
                failed = 1;
                empty_part(pt, dv);
                free(U), free(ok), free(ncol), free(top), free(qpn), free(sc), free(vals);
                continue;
            }
            for (long x = 0; x < d; x++) qpn[x] = qh[x] > 0.0f ? qh[x] : 0.0f, qpn[d + x] = qh[x] < 0.0f ? qh[x] : 0.0f;
            for (long p = 0; p < P; p++) ncol[p] = 0;
            for (long s = 0; s < L; s++) {
                long j = pg[s];
                if (j >= 0 && j <= i && fh[s] && !(i - j <= wh)) ncol[j / page]++;   /* a column off the band */
            }
            const float *mg = m + b * m_sb + mrow[g] * m_sh, *Mg = M + b * m_sb + mrow[g] * m_sh;   /* page p at p·m_sp */
            for (long p = 0; p < P; p++)
                ok[p] = candidate(p, page, i, lo, ncol[p]) && bound(qpn, qpn + d, mg + p * m_sp, Mg + p * m_sp, d, &U[p]);
            for (long c = 0; c < C; c++) {   /* h's own summary of the pages its columns touch */
                long p = pc[(b * Hc + hrow[h]) * C + c], at = ((b * Hc + hrow[h]) * C + c) * d;
                if (p >= 0 && p < P) ok[p] = candidate(p, page, i, lo, ncol[p]) && bound(qpn, qpn + d, mc + at, Mc + at, d, &U[p]);
            }
            long n = top_pages(U, ok, P, K - Km, top);         /* top: the chosen pages */
            if (Km > 0) {                                      /* then the Km best of the others by μ */
                float *mu = U + P;
                const float *sg = sm + b * m_sb + mrow[g] * m_sh;
                for (long x = 0; x < n; x++) ok[top[x]] = 0;
                for (long p = 0; p < P; p++)
                    if (ok[p]) mu[p] = dot(qh, sg + p * m_sp, d) / pcount[p];
                for (long c = 0; c < C; c++) {
                    long p = pc[(b * Hc + hrow[h]) * C + c], at = (b * Hc + hrow[h]) * C + c;
                    if (p >= 0 && p < P && ok[p]) mu[p] = dot(qh, cs + at * d, d) / ccount[at];
                }
                n += top_pages(mu, ok, P, Km, top + n);
            }
            long cnt = 0;
            for (long x = 0; x < n; x++)
                for (long j = top[x] * page; j < top[x] * page + page && j <= i && j < lo; j++) {
                    long sr = ig[j];
                    const float *kx, *vx;
                    if (sr >= 0) {
                        if (fh[sr]) continue;                         /* a column of h: read by the parts above */
                        kx = kg + sr * kr_sl, vx = vg + sr * vr_sl;
                    } else {
                        long ss = tg && j < J ? tg[j] : -1;
                        if (ss < 0) continue;                         /* neither resident nor stored */
                        kx = ks + b * ks_sb + g * ks_sh + ss * ks_sl, vx = vs + b * vs_sb + g * vs_sh + ss * vs_sl;
#pragma omp atomic write
                        mark[bg * Sm + ss] = 1;
                    }
                    sc[cnt] = tau * dot(qh, kx, d);
                    vals[cnt++] = vx;
                }
            softmax_part(sc, vals, cnt, dv, pt, pt + dv, pt + dv + 1);
            free(U), free(ok), free(ncol), free(top), free(qpn), free(sc), free(vals);
        }
#pragma omp for
        for (long bh = 0; bh < BG * r; bh++) {   /* (batch row, KV head, ρ) = query head h of batch row b */
            long bg = bh / r, rho = bh % r;
            merge_parts(part + (bg * R * r + rho) * (dv + 2), R, r * (dv + 2), dv, out + bh * dv);
        }
#pragma omp for
        for (long bg = 0; bg < BG; bg++) {
            long count = 0;
            for (long s = 0; s < S; s++) count += mark[bg * Sm + s];
            read[bg] = count;
        }
    }
    free(part), free(inv), free(mark);
    return failed;
}

/* The same step with its arguments packed (one foreign call's conversion instead of sixty): p the 23 pointers (q, kr,
 * vr, pos, flags, w, reads, m, M, mrow, pc, mc, Mc, hrow, ks, vs, table, out, read, then sm, pcount, cs, ccount), a the 42
 * integers (q_sb … t_sh, J, then B, Hs, r, L, d, dv, i, sliding, page, K, threads, then Km, chunk). */
int attnlab_decode_read_back_packed(void *const *p, const long *a, float tau)
{
    return attnlab_decode_read_back(
        p[0], a[0], a[1], p[1], a[2], a[3], a[4], p[2], a[5], a[6], a[7], p[3], a[8], a[9], p[4], a[10], a[11], a[12],
        p[5], p[6], p[7], p[8], a[13], a[14], a[15], a[16], p[9], p[10], p[11], p[12], a[17], a[18], p[13],
        p[19], p[20], p[21], p[22],
        p[14], a[19], a[20], a[21], p[15], a[22], a[23], a[24], a[25], p[16], a[26], a[27], a[28], p[17], p[18],
        a[29], a[30], a[31], a[32], a[33], a[34], a[35], a[36], a[37], a[38], a[40], tau, (int)a[39], a[41]);
}
