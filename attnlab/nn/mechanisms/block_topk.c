/* block_topk.c — B_t(x), the key blocks a query block reads (llm/plans/key_blocks.py: top_pooled_blocks), from the
 * pooled scores ŝ_tJ = q̄_t · k̄_J (computed by the caller, one matrix product):
 *
 *   B_t = the K blocks J of largest ŝ_tJ among  J < t,  J·b < t·b + b − 1 − w   (some row of I_t does not reach all of J
 *         through its band), largest first, ties to the lower J; −1 past the candidates
 *
 * The candidates of row t are a prefix J < min(t, J_w(t)) (the band's condition is monotone in J), so a row costs
 * O(t·K) (an insertion into the K best) instead of the masked row's top-k over all T blocks.  The prefix is scanned from
 * its end: pooled scores grow towards the query's own block (locality), so scanned forwards nearly every candidate
 * beat the K-th best and was inserted (a mispredicted branch each); backwards, the K best come early and, once K are
 * held, 4·VEC candidates at a time are skipped when their maximum does not reach the K-th best.  Scanning down, an
 * equal score is a lower J and goes first (≥): ties to the lower J, as forwards.
 * s: (N, T, T) rows of T floats; w: (N,) each row's band half-width; out: (N, T, K) int64.  Threads take heads.
 */
#include "vector_math.h" /* VEC, vf, load, blend, hmax */

/* Insert candidate J of score x into the n ≤ K best (top: indices, val: their scores, largest first), every held one
 * of a higher J (the scan goes down): x goes before the equal ones.  Returns the new count. */
static inline long insert(long *top, float *val, long n, long K, long J, float x)
{
    long at = n < K ? n++ : K - 1;
    while (at > 0 && x >= val[at - 1]) top[at] = top[at - 1], val[at] = val[at - 1], at--;
    top[at] = J, val[at] = x;
    return n;
}

int attnlab_block_topk(const float *s, long N, long T, const long *w, long b, long K, long *out, int threads)
{
    if (K <= 0) return 0; /* no block to choose (val[K − 1] below needs K ≥ 1) */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long h = 0; h < N; h++) {
        float val[K > 0 ? K : 1];
        for (long t = 0; t < T; t++) {
            const float *row = s + (h * T + t) * T;
            long *top = out + (h * T + t) * K, n = 0;
            long bound = t * b + b - 1 - w[h];                             /* J·b < bound */
            long end = bound <= 0 ? 0 : (bound + b - 1) / b;               /* J < ⌈bound / b⌉ */
            long J = end < t ? end : t;                                    /* the next candidate: J − 1 */
            for (; J > 0 && n < K; J--) n = insert(top, val, n, K, J - 1, row[J - 1]);
            for (; J >= 4 * VEC; J -= 4 * VEC) { /* 4·VEC candidates: skipped unless one reaches the K-th best */
                const float *p = row + J - 4 * VEC;
                vf a = load(p), c = load(p + VEC), d = load(p + 2 * VEC), e = load(p + 3 * VEC);
                a = blend(a > c, a, c), d = blend(d > e, d, e);
                if (hmax(blend(a > d, a, d)) >= val[K - 1])
                    for (long x = J - 1; x >= J - 4 * VEC; x--)
                        if (row[x] >= val[K - 1]) n = insert(top, val, n, K, x, row[x]);
            }
            for (; J > 0; J--)
                if (row[J - 1] >= val[K - 1]) n = insert(top, val, n, K, J - 1, row[J - 1]);
            for (long x = n; x < K; x++) top[x] = -1;
        }
    }
    return 0;
}
