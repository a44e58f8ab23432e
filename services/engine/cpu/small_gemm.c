/* y[M, N] = x[M, K] @ w[K, N] (+ bias[N]) for small M, all row-major and contiguous.
 *
 * Decode multiplies a few rows by large weights, so the weights' read is the cost. This streams w once,
 * eight of its rows per pass, and keeps the running sums of each output row in cache; the compiler
 * vectorises the inner loop for the host (-O3 -march=native). Row m's result does not depend on M.
 */

void small_gemm(const float *restrict x, const float *restrict w, const float *restrict bias,
                float *restrict y, long M, long K, long N) {
    for (long m = 0; m < M; m++)
        for (long n = 0; n < N; n++)
            y[m * N + n] = bias ? bias[n] : 0.f;
    long k = 0;
    for (; k + 8 <= K; k += 8) {
        const float *r = w + k * N;
        for (long m = 0; m < M; m++) {
            const float *a = x + m * K + k;
            float *ym = y + m * N;
            for (long n = 0; n < N; n++)
                ym[n] += a[0] * r[n] + a[1] * r[N + n] + a[2] * r[2 * N + n] + a[3] * r[3 * N + n]
                       + a[4] * r[4 * N + n] + a[5] * r[5 * N + n] + a[6] * r[6 * N + n] + a[7] * r[7 * N + n];
        }
    }
    for (; k < K; k++) {
        const float *r = w + k * N;
        for (long m = 0; m < M; m++) {
            const float a = x[m * K + k];
            float *ym = y + m * N;
            for (long n = 0; n < N; n++)
                ym[n] += a * r[n];
        }
    }
}
