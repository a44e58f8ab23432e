/* Decode attention straight over the paged K/V pool: one new query token per sequence.
 *
 * Reads each sequence's K and V once, block by block in address order, where they lie in the pool (no
 * gather into a contiguous copy); on a CPU that read is what a decode step's attention costs. Layout of one
 * block of one layer: [2, KVH, bs, D], K then V, each KV head's bs rows together; blocks `block_stride` floats
 * apart. Query head h attends with K/V head h / (H / KVH), so the `group` query heads of one KV head read its
 * rows in turn.
 *
 * The instance's threads (team.h) share out the (sequence, KV head) pairs; each pair is the same computation on any
 * thread, so the result does not depend on the thread count or the batch.
 */

#include "team.h"

#include <math.h>
#include <stdlib.h>

#define MIN_EXP_ARG -87.f /* expf(-87) ≈ FLT_MIN: below it a weight is subnormal dust, and expf slow */

static float dot(const float *restrict a, const float *restrict b, long d) {
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (long i = 0; i < d; i++)
        s += a[i] * b[i];
    return s;
}

/* Asks for the row `ahead` (the same head and slot of the next block) while this block is read: blocks lie anywhere in
 * the pool, and the hardware prefetchers do not follow a jump, so without this every block starts cold. */
static void prefetch_row(const float *ahead, long floats) {
    for (long i = 0; i < floats; i += 16) /* a 64-byte line holds 16 floats */
        __builtin_prefetch(ahead + i);
}

static void softmax(float *s, long len) {
    float top = s[0], total = 0.f;
    for (long t = 1; t < len; t++)
        top = s[t] > top ? s[t] : top;
    for (long t = 0; t < len; t++) {
        const float x = s[t] - top;
        s[t] = x < MIN_EXP_ARG ? 0.f : expf(x);
        total += s[t];
    }
    for (long t = 0; t < len; t++)
        s[t] /= total;
}

/* The `group` query heads (q, out: [group, D]) of KV head kh of one sequence of `len` tokens in `blocks`, its keys
 * from `first` on; scores: [group, len - first] of scratch. */
static void kv_head(const float *restrict q, const float *restrict cache, const long *restrict blocks, long len,
                    long first, float *restrict out, float *restrict scores, long group, long D, long bs, long kh,
                    long v_offset, long block_stride, float scale, float softcap) {
    const float *base = cache + kh * bs * D; /* this KV head's K rows in block 0 of the pool */
    const long span = len - first, from = first - first % bs;
    for (long start = from; start < len; start += bs) {
        const float *k = base + blocks[start / bs] * block_stride;
        /* after the last K block: the first V block, which the second pass reads first */
        const float *next = start + bs < len ? base + blocks[start / bs + 1] * block_stride
                                             : base + blocks[from / bs] * block_stride + v_offset;
        const long n = start + bs < len ? bs : len - start, skip = start < first ? first - start : 0;
        for (long i = skip; i < n; i++) {
            prefetch_row(next + i * D, D);
            for (long h = 0; h < group; h++) {
                const float s = dot(q + h * D, k + i * D, D) * scale;
                scores[h * span + start + i - first] = softcap > 0.f ? softcap * tanhf(s / softcap) : s;
            }
        }
    }
    for (long h = 0; h < group; h++)
        softmax(scores + h * span, span);
    for (long i = 0; i < group * D; i++)
        out[i] = 0.f;
    for (long start = from; start < len; start += bs) {
        const float *v = base + blocks[start / bs] * block_stride + v_offset;
        const float *next = start + bs < len ? base + blocks[start / bs + 1] * block_stride + v_offset : v;
        const long n = start + bs < len ? bs : len - start, skip = start < first ? first - start : 0;
        for (long i = skip; i < n; i++) {
            const float *vh = v + i * D;
            prefetch_row(next + i * D, D);
            for (long h = 0; h < group; h++) {
                const float w = scores[h * span + start + i - first];
                float *o = out + h * D;
                for (long j = 0; j < D; j++)
                    o[j] += w * vh[j];
            }
        }
    }
}

/* q, out: [B, H, D]; table: [B, max_blocks] block ids; lens: [B] context tokens (the new one included).
 * window > 0: the query sees its last `window` keys only (a sliding-window layer: the blocks before them are not
 * read); softcap > 0: scores → softcap · tanh(scores / softcap) (Gemma 2).
 * Returns 0, or -1 when the score buffers cannot be allocated. */
int paged_decode_attention(const float *restrict q, const float *restrict cache, const long *restrict table,
                           const long *restrict lens, float *restrict out, long B, long H, long KVH, long D,
                           long bs, long max_blocks, long block_stride, float scale, long window, float softcap) {
    const long group = H / KVH, v_offset = KVH * bs * D, pairs = B * KVH;
    const long threads = pairs < team_threads ? pairs : team_threads;
    long max_len = 1;
    for (long b = 0; b < B; b++)
        if (lens[b] > max_len)
            max_len = lens[b];
    float *scores = malloc(sizeof(float) * threads * group * max_len); /* [threads, group, span] */
    if (!scores)
        return -1;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        team_pin_self();
        float *mine = scores + omp_get_thread_num() * group * max_len;
#pragma omp for schedule(dynamic)
        for (long p = 0; p < pairs; p++) {
            const long b = p / KVH, kh = p % KVH, at = b * H * D + kh * group * D, len = lens[b];
            const long first = window > 0 && len > window ? len - window : 0; /* the first key it sees */
            kv_head(q + at, cache, table + b * max_blocks, len, first, out + at, mine, group, D, bs, kh, v_offset,
                    block_stride, scale, softcap);
        }
    }
    free(scores);
    return 0;
}
