/* y[M, N] = x[M, K] @ w[K, N] (+ bias[N]) for small M, all row-major and contiguous.
 *
 * Decode multiplies a few rows by large weights. This streams w once, eight of its rows per pass, and keeps
 * the running sums of each output row in cache; the compiler vectorises the n loops for the host (-O3
 * -march=native). Rows go four (then two) at a time through each pass, so one load of w feeds four rows' FMAs (one row
 * at a time, the loads of w and of the sums, not the FMAs, bounded the speed at 2-32 rows). Every row's sum
 * is the same expression in either loop, so row m's result does not depend on M.
 */

#define ROW_TERMS(a) \
    (a[0] * r0[n] + a[1] * r1[n] + a[2] * r2[n] + a[3] * r3[n] + a[4] * r4[n] + a[5] * r5[n] + a[6] * r6[n] + a[7] * r7[n])

static void eight_rows(const float *restrict x, const float *restrict r0, float *restrict y, long M, long K, long N) {
    const float *r1 = r0 + N, *r2 = r1 + N, *r3 = r2 + N, *r4 = r3 + N, *r5 = r4 + N, *r6 = r5 + N, *r7 = r6 + N;
    long m = 0;
    for (; m + 4 <= M; m += 4) {
        const float *a = x + m * K, *b = a + K, *c = b + K, *d = c + K;
        float *ya = y + m * N, *yb = ya + N, *yc = yb + N, *yd = yc + N;
        for (long n = 0; n < N; n++) {
            ya[n] += ROW_TERMS(a);
            yb[n] += ROW_TERMS(b);
            yc[n] += ROW_TERMS(c);
            yd[n] += ROW_TERMS(d);
        }
    }
    for (; m + 2 <= M; m += 2) {
        const float *a = x + m * K, *b = a + K;
        float *ya = y + m * N, *yb = ya + N;
        for (long n = 0; n < N; n++) {
            ya[n] += ROW_TERMS(a);
            yb[n] += ROW_TERMS(b);
        }
    }
    for (; m < M; m++) {
        const float *a = x + m * K;
        float *ya = y + m * N;
        for (long n = 0; n < N; n++)
            ya[n] += ROW_TERMS(a);
    }
}

void small_gemm(const float *restrict x, const float *restrict w, const float *restrict bias,
                float *restrict y, long M, long K, long N) {
    for (long m = 0; m < M; m++)
        for (long n = 0; n < N; n++)
            y[m * N + n] = bias ? bias[n] : 0.f;
    long k = 0;
    for (; k + 8 <= K; k += 8)
        eight_rows(x + k, w + k * N, y, M, K, N);
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
