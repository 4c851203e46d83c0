/* vector_math.h — the vector types of attnlab's native kernels and what they compute in whole vectors.
 *
 * vf: VEC floats, a GCC/Clang vector extension (AVX-512, AVX2 or NEON, whatever -march=native gives); vi: VEC ints, a
 * lane mask (−1: in, 0: out).  load/store: unaligned, may alias.  vexp: e^x for x ≤ 0, inline (no libm call, no scalar
 * remainder, no errno path for a masked −∞ = NEG).  hmax, hsum: across the lanes.  lanes: which of VEC consecutive
 * indices lie in [lo, hi].  transpose: VEC vectors as the rows of a VEC × VEC matrix, transposed in registers.
 * exp_sum: a row's exp(s − m) in place and its sum (a softmax's numerators).
 * Included by band_kernel.c, band_backward.c, decode_kernel.c, block_topk.c and column_mass.c (native.py's build hashes
 * every header beside them, so an edit here recompiles them).
 */
#ifndef ATTNLAB_VECTOR_MATH_H
#define ATTNLAB_VECTOR_MATH_H

#include <string.h> /* memcpy: exp_sum's padded last vector */

#define VEC 16       /* floats per vector */
#define NEG (-1e30f) /* finite −∞ */

typedef float vf __attribute__((vector_size(VEC * sizeof(float))));
typedef float vf_unaligned __attribute__((vector_size(VEC * sizeof(float)), aligned(sizeof(float)), may_alias));

static inline vf load(const float *p) { return *(const vf_unaligned *)p; }
static inline void store(float *p, vf x) { *(vf_unaligned *)p = x; }

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

/* s_x ← exp(s_x − mx) for x < n (mx ≥ every s_x), returning Σ_x exp(s_x − mx): whole vectors, the last < VEC scores
 * through a padded copy with its lanes past n masked (no scalar exp, nothing read or written past s + n). */
static inline float exp_sum(float *s, long n, float mx)
{
    vf vsum = {0};
    long x0 = 0;
    for (; x0 + VEC <= n; x0 += VEC) {
        vf p = vexp(load(s + x0) - mx);
        store(s + x0, p);
        vsum += p;
    }
    if (x0 < n) {
        float tail[VEC] = {0};
        memcpy(tail, s + x0, (n - x0) * sizeof(float));
        vf p = blend(lanes(x0, x0, n - 1), vexp(load(tail) - mx), (vf){0}); /* lanes past n: 0 */
        store(tail, p);
        memcpy(s + x0, tail, (n - x0) * sizeof(float));
        vsum += p;
    }
    return hsum(vsum);
}

/* Two-vector shuffles with constant lane indices (0 … VEC − 1: a's lanes, VEC … 2·VEC − 1: b's). */
#if defined(__clang__)
#define SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (vi){__VA_ARGS__})
#endif

/* t[r][c] ← t[c][r] for the VEC × VEC matrix of rows t[0 … VEC − 1]: one bit of the row and lane index swapped a stage,
 * s = 1, 2, 4, 8, on the pairs of rows (r, r + s), r & s = 0:
 *
 *   a'[c] = c & s ? b[c − s] : a[c],    b'[c] = c & s ? b[c] : a[c + s]          (a = t[r], b = t[r + s])
 *
 * 4 · VEC/2 shuffles (vpermt2ps on AVX-512) instead of VEC² scalar loads and stores.  The lane lists are a' and b' of
 * each stage for VEC = 16. */
_Static_assert(VEC == 16, "transpose's lane lists are written for 16 lanes");
#define LANES(...) __VA_ARGS__
#define TRANSPOSE_STAGE(t, s, lo, hi)                                                                                  \
    _Pragma("GCC unroll 16") for (int r = 0; r < VEC; r++) if (!(r & (s))) {                                          \
        vf a = t[r], b = t[r + (s)];                                                                                   \
        t[r] = SHUFFLE(a, b, LANES lo);                                                                                \
        t[r + (s)] = SHUFFLE(a, b, LANES hi);                                                                          \
    }
static inline void transpose(vf *t)
{
    TRANSPOSE_STAGE(t, 1, (0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30),
                          (1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31))
    TRANSPOSE_STAGE(t, 2, (0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29),
                          (2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31))
    TRANSPOSE_STAGE(t, 4, (0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27),
                          (4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31))
    TRANSPOSE_STAGE(t, 8, (0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
                          (8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31))
}

#endif
