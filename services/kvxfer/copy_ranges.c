/* Host-memory copies of a pull's byte ranges in one call: ranges of scattered 64 KB blocks copy at the speed of one
   contiguous memcpy between the same pools, where a ctypes.memmove per range adds ~0.4 µs each. Offsets are from the
   two pools' bases, as the pull's ranges hold them (no per-range address arrays built in Python). */
#include <stdint.h>
#include <string.h>

void copy_ranges(int64_t n, char *dst, const int64_t *dst_at, const char *src, const int64_t *src_at,
                 const int64_t *length) {
    for (int64_t i = 0; i < n; i++) {
        memcpy(dst + dst_at[i], src + src_at[i], (size_t)length[i]);
    }
}

/* Block src_ids[i] to block dst_ids[i], one memcpy per run of blocks consecutive in both pools: a same-host pull
   passes its block ids as they come, where building byte ranges in Python cost ~0.15 µs a block. */
void copy_blocks(int64_t n, char *dst, const int64_t *dst_ids, const char *src, const int64_t *src_ids,
                 int64_t block_bytes) {
    int64_t i = 0;
    while (i < n) {
        int64_t j = i + 1;
        while (j < n && src_ids[j] == src_ids[j - 1] + 1 && dst_ids[j] == dst_ids[j - 1] + 1) {
            j++;
        }
        memcpy(dst + dst_ids[i] * block_bytes, src + src_ids[i] * block_bytes, (size_t)((j - i) * block_bytes));
        i = j;
    }
}

/* Ranges given by absolute addresses: a re-sharding pull's, between several pairs of pools, in one call. Runs of a
   few KB each: where `stream` is set (a pull larger than the caches) and a run is 32-byte aligned on the destination,
   non-temporal stores write it without first reading the destination lines in, as memcpy does for large copies. */
#if defined(__AVX__)
#include <immintrin.h>
static void stream_copy(char *dst, const char *src, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm256_stream_si256((__m256i *)(dst + i), _mm256_loadu_si256((const __m256i *)(src + i)));
    }
    memcpy(dst + i, src + i, n - i);
}
#endif

void copy_spans(int64_t n, const int64_t *dst_addr, const int64_t *src_addr, const int64_t *length, int64_t stream) {
    for (int64_t i = 0; i < n; i++) {
        char *dst = (char *)(intptr_t)dst_addr[i];
        const char *src = (const char *)(intptr_t)src_addr[i];
#if defined(__AVX__)
        if (stream && ((uintptr_t)dst & 31) == 0) {
            stream_copy(dst, src, (size_t)length[i]);
            continue;
        }
#endif
        memcpy(dst, src, (size_t)length[i]);
    }
#if defined(__AVX__)
    if (stream) {
        _mm_sfence();
    }
#endif
}
