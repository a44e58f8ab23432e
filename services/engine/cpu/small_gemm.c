/* y[M, N] = x[M, K] @ w[K, N] (+ bias[N]) for small M, all row-major and contiguous.
 *
 * Decode multiplies a few rows by large weights. This streams w once, eight of its rows per pass, and keeps
 * the running sums of each output row in cache; the compiler vectorises the n loops for the host (-O3
 * -march=native). Rows go four (then two) at a time through each pass, so one load of w feeds four rows' FMAs (one row
 * at a time, the loads of w and of the sums, not the FMAs, bounded the speed at 2-32 rows). Every row's sum
 * is the same expression in either loop, so row m's result does not depend on M.
 *
 * The instance's threads (team.h) split the N columns into slices of whole cache lines, one per thread: each reads
 * its own part of w and writes its own part of y, and every element is still the same expression, so the result does
 * not depend on the thread count either.
 */

#include "team.h"

#define ROW_TERMS(a) \
    (a[0] * r0[n] + a[1] * r1[n] + a[2] * r2[n] + a[3] * r3[n] + a[4] * r4[n] + a[5] * r5[n] + a[6] * r6[n] + a[7] * r7[n])

#define SLICE_FLOATS 16     /* a 64-byte line: slices share no line of y */
#define MIN_SLICE_BYTES 16384 /* of w per thread: below this a wake-up costs about as much as reading its share */

/* Columns [0, width) of y (rows ld floats apart) += x's 8 columns at this k times w's 8 rows r0.. (ld floats apart). */
static void eight_rows(const float *restrict x, const float *restrict r0, float *restrict y, long M, long K, long ld,
                       long width) {
    const float *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld, *r4 = r3 + ld, *r5 = r4 + ld, *r6 = r5 + ld, *r7 = r6 + ld;
    long m = 0;
    for (; m + 4 <= M; m += 4) {
        const float *a = x + m * K, *b = a + K, *c = b + K, *d = c + K;
        float *ya = y + m * ld, *yb = ya + ld, *yc = yb + ld, *yd = yc + ld;
        for (long n = 0; n < width; n++) {
            ya[n] += ROW_TERMS(a);
            yb[n] += ROW_TERMS(b);
            yc[n] += ROW_TERMS(c);
            yd[n] += ROW_TERMS(d);
        }
    }
    for (; m + 2 <= M; m += 2) {
        const float *a = x + m * K, *b = a + K;
        float *ya = y + m * ld, *yb = ya + ld;
        for (long n = 0; n < width; n++) {
            ya[n] += ROW_TERMS(a);
            yb[n] += ROW_TERMS(b);
        }
    }
    for (; m < M; m++) {
        const float *a = x + m * K;
        float *ya = y + m * ld;
        for (long n = 0; n < width; n++)
            ya[n] += ROW_TERMS(a);
    }
}

/* Columns [0, width) of y = x @ w (+ bias), where w, y and bias start at the slice's first column. */
static void slice(const float *restrict x, const float *restrict w, const float *restrict bias, float *restrict y,
                  long M, long K, long N, long width) {
    for (long m = 0; m < M; m++)
        for (long n = 0; n < width; n++)
            y[m * N + n] = bias ? bias[n] : 0.f;
    long k = 0;
    for (; k + 8 <= K; k += 8)
        eight_rows(x + k, w + k * N, y, M, K, N, width);
    for (; k < K; k++) {
        const float *r = w + k * N;
        for (long m = 0; m < M; m++) {
            const float a = x[m * K + k];
            float *ym = y + m * N;
            for (long n = 0; n < width; n++)
                ym[n] += a * r[n];
        }
    }
}

void small_gemm(const float *restrict x, const float *restrict w, const float *restrict bias,
                float *restrict y, long M, long K, long N) {
    const long lines = (N + SLICE_FLOATS - 1) / SLICE_FLOATS;
    long threads = K * N * (long)sizeof(float) / MIN_SLICE_BYTES;
    threads = threads < team_threads ? threads : team_threads;
    threads = threads < lines ? threads : lines;
    threads = threads < 1 ? 1 : threads;
    const long per = (lines + threads - 1) / threads * SLICE_FLOATS; /* columns per slice */
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        team_pin_self();
        const long first = omp_get_thread_num() * per, last = first + per < N ? first + per : N;
        if (first < last)
            slice(x, w + first, bias ? bias + first : 0, y + first, M, K, N, last - first);
    }
}
