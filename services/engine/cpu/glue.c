/* The element-wise ops between a decode step's products, one call each where torch runs several ops.
 *
 * At a few rows a torch op costs its dispatch, not its arithmetic: F.rms_norm is five ops, SwiGLU's silu(gate) * up
 * two. Row by row, so a row's result does not depend on the batch; single-threaded (rows of a few thousand floats
 * are less work than waking a thread).
 */

#include <math.h>

/* y[M, N] = x / sqrt(mean(x^2) + eps) * w, row by row (torch's and transformers' order). */
void rms_norm(const float *restrict x, const float *restrict w, float *restrict y, long M, long N, float eps) {
    for (long m = 0; m < M; m++) {
        const float *xm = x + m * N;
        float *ym = y + m * N, squares = 0.f;
#pragma omp simd reduction(+ : squares)
        for (long n = 0; n < N; n++)
            squares += xm[n] * xm[n];
        const float r = 1.f / sqrtf(squares / (float)N + eps);
        for (long n = 0; n < N; n++)
            ym[n] = xm[n] * r * w[n];
    }
}

/* y[M, N] = silu(gate) * up; gate and up rows `ld` floats apart (the halves of one packed product). */
void silu_mul(const float *restrict gate, const float *restrict up, float *restrict y, long M, long N, long ld) {
    for (long m = 0; m < M; m++)
        for (long n = 0; n < N; n++) {
            const float g = gate[m * ld + n];
            y[m * N + n] = g / (1.f + expf(-g)) * up[m * ld + n];
        }
}
