/* band_backward.c — the band's gradients (attnlab_band_backward), built with band_kernel.c into one library: the same
 * tiles (band_tiles.h), P recomputed from the saved L, never stored.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "band_tiles.h"  /* R, Keys, keys_for, tile_band, tile_scores, tile_values */
#include "vector_math.h" /* VEC, NEG, vf, load, store */

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
