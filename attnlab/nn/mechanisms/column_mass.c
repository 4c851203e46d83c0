/* column_mass.c — σ_t, the last queries' causal attention summed per key (MInference's vertical estimate; an LLM
 * plan's dynamic columns, llm/plans/slash_lines.py: last_query_mass), from their scores:
 *
 *   σ_xt = Σ_{a < nq} a_xat,    a_xat = exp(s_xat − M_xa) / l_xa  for t ≤ p_a  (0 after),   p_a = m − nq + a,
 *   M_xa = max_{t ≤ p_a} s_xat,   l_xa = Σ_{t ≤ p_a} exp(s_xat − M_xa)
 *
 * s: (X, nq, m) the scaled scores s_xat = τ q_{x, p_a} · k_t of X query heads (the caller's one matrix product),
 * overwritten with exp(s − M); sigma: head x's m floats at sigma + (x / r)·ldb + (x % r)·m (a slice of r heads of a
 * (B, H, m) tensor).  A row goes through the cache three times (max; exp and Σ; σ += a), where PyTorch's softmax and
 * sum went through memory.  Threads take rows, then (head, range of keys) of σ: each σ_xt written by one thread.
 */
#include <string.h>

#include "vector_math.h" /* VEC, NEG, vf, load, store, blend, hmax, exp_sum */

#define SPAN 1024 /* keys of σ a thread sums over the rows at a time */

int attnlab_column_mass(float *s, long X, long nq, long m, float *sigma, long r, long ldb, int threads)
{
    float inv[X * nq > 0 ? X * nq : 1];
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
        for (long xa = 0; xa < X * nq; xa++) { /* each row: M, exp(s − M) in place, 1 / l */
            float *row = s + xa * m;
            long L = m - nq + xa % nq + 1; /* keys t ≤ p_a */
            vf vmx = (vf){0} + NEG;
            long t0 = 0;
            for (; t0 + VEC <= L; t0 += VEC) {
                vf x = load(row + t0);
                vmx = blend(x > vmx, x, vmx);
            }
            float M = hmax(vmx);
            for (; t0 < L; t0++) M = row[t0] > M ? row[t0] : M;
            inv[xa] = 1.0f / exp_sum(row, L, M);
            for (long t = L; t < m; t++) row[t] = 0.0f; /* after the query: no weight */
        }
        long spans = (m + SPAN - 1) / SPAN;
#pragma omp for schedule(static)
        for (long xs = 0; xs < X * spans; xs++) { /* σ_x over keys [t0, t1): Σ_a inv_a · row_a */
            long x = xs / spans, t0 = xs % spans * SPAN, t1 = t0 + SPAN < m ? t0 + SPAN : m;
            float *out = sigma + x / r * ldb + x % r * m;
            memset(out + t0, 0, (size_t)(t1 - t0) * sizeof(float));
            for (long a = 0; a < nq; a++) {
                const float *row = s + (x * nq + a) * m;
                float c = inv[x * nq + a];
                long t = t0;
                for (; t + VEC <= t1; t += VEC) store(out + t, load(out + t) + c * load(row + t));
                for (; t < t1; t++) out[t] += c * row[t];
            }
        }
    }
    return 0;
}
