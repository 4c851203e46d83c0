/* block_topk.c — B_t(x), the key blocks a query block reads (llm/plans/key_blocks.py: top_pooled_blocks), from the
 * pooled scores ŝ_tJ = q̄_t · k̄_J (computed by the caller, one matrix product):
 *
 *   B_t = the K blocks J of largest ŝ_tJ among  J < t,  J·b < t·b + b − 1 − w   (some row of I_t does not reach all of J
 *         through its band), largest first, ties to the lower J; −1 past the candidates
 *
 * The candidates of row t are a prefix J < min(t, J_w(t)) (the band's condition is monotone in J), so a row costs
 * O(t·K) (an insertion into the K best) instead of the masked row's top-k over all T blocks.
 * s: (N, T, T) rows of T floats; w: (N,) each row's band half-width; out: (N, T, K) int64.  Threads take heads.
 */
int attnlab_block_topk(const float *s, long N, long T, const long *w, long b, long K, long *out, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long h = 0; h < N; h++)
        for (long t = 0; t < T; t++) {
            const float *row = s + (h * T + t) * T;
            long *top = out + (h * T + t) * K, n = 0;
            long bound = t * b + b - 1 - w[h];                             /* J·b < bound */
            long end = bound <= 0 ? 0 : (bound + b - 1) / b;               /* J < ⌈bound / b⌉ */
            end = end < t ? end : t;
            for (long J = 0; J < end; J++) {
                float x = row[J];
                if (n == K && !(x > row[top[K - 1]])) continue;
                long at = n < K ? n++ : K - 1;
                while (at > 0 && x > row[top[at - 1]]) top[at] = top[at - 1], at--;
                top[at] = J;
            }
            for (long x = n; x < K; x++) top[x] = -1;
        }
    return 0;
}
