/* band_tiles.h — a tile of R query rows against consecutive keys, the band kernel's building blocks (forward and
 * backward, band_kernel.c and band_backward.c):
 *
 *   S = Q_tile K_tileᵀ      tile_scores: register-blocked, R rows × 2 vectors of keys, an FMA per (row, vector, k)
 *   O = P V_tile · inv      tile_values: register-blocked, R rows × 2 vectors of value columns
 *
 * S's inner loop reads consecutive keys of kᵀ: each thread keeps the keys of its current head transposed in a rolling
 * buffer (Keys: d × cap), appending the keys a new tile needs and shifting the buffer when it is full (keys_for) —
 * every key is transposed once, in cache.  tile_band: the tile rows' bands as key ranges and their union.
 */
#ifndef ATTNLAB_BAND_TILES_H
#define ATTNLAB_BAND_TILES_H

#include <string.h>

#include "vector_math.h"

#define R 8 /* query rows per tile */

/* The keys [base, base + len) of one head, transposed: kt[kk·cap + (j − base)] = k_j[kk]. */
typedef struct {
    float *kt;
    long cap, base, len, head;
} Keys;

/* The VEC key rows rows[l] (d floats each; NULL: zeros) transposed into dst: dst[kk·ld + l] = rows[l][kk], kk < d (a
 * multiple of VEC), VEC × VEC blocks in registers (vector_math.h's transpose). */
static void transpose_rows(const float *const *rows, long d, float *dst, long ld)
{
    for (long kk = 0; kk < d; kk += VEC) {
        vf t[VEC];
        for (int l = 0; l < VEC; l++) t[l] = rows[l] ? load(rows[l] + kk) : (vf){0};
        transpose(t);
        for (int l = 0; l < VEC; l++) store(dst + (kk + l) * ld, t[l]);
    }
}

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
    long j = K->base + K->len;
    for (; j < jlo + need && j + VEC <= K->base + K->cap; j += VEC) { /* append VEC keys at a time (past need: ahead) */
        const float *rows[VEC];
        for (int l = 0; l < VEC; l++) rows[l] = j + l < m ? k + (j + l) * ldr : NULL;
        transpose_rows(rows, d, K->kt + (j - K->base), K->cap);
    }
    for (; j < jlo + need; j++) { /* the buffer's last keys: one key's d floats into d rows */
        long x = j - K->base;
        if (j < m)
            for (long kk = 0; kk < d; kk++) K->kt[kk * K->cap + x] = k[j * ldr + kk];
        else
            for (long kk = 0; kk < d; kk++) K->kt[kk * K->cap + x] = 0.0f;
    }
    if (j > K->base + K->len) K->len = j - K->base;
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

#endif
