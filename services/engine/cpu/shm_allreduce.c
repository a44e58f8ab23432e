/* Sum of fp32 tensors across the ranks of one tensor-parallel group on one host, through a shared segment.
 *
 * Segment: `size` arrival counters (32 bits, compared modulo 2^32), one cache line each, then two buffers of
 * `size` slots of `slot_floats`. Operation `op` (1, 2, ...) uses buffer op % 2: each rank copies its tensor into
 * its slot, publishes `op` as its counter, waits until every counter has reached `op`, then sums the slots in
 * rank order (every rank gets the same bits). A rank writes buffer op % 2 again at op + 2 only after every rank
 * arrived at op + 1, that is, after each finished reading it at op: two buffers and the counters are all the
 * synchronisation needed.
 *
 * A waiting rank spins for some tens of microseconds (the other rank, on its own core, is usually microseconds to
 * tens of microseconds away, and sleeping and being woken costs more than such a wait), then sleeps on the counter
 * as a futex, which the arriving rank wakes: a rank held up longer, by other work on its core, is not spun on.
 * Each rank holds an open-file-description lock on byte `rank` of the segment's file for as long as it lives
 * (the kernel drops it when the process dies), so a rank waiting for a late one can tell it is gone.
 */

#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LINE 64
#define SPINS 200000 /* loads of the counter: tens of microseconds */
#define WAIT_NS (20 * 1000 * 1000) /* a sleeping rank looks this often whether the late one is gone */

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int gone(int fd, long rank) {
    struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = rank, .l_len = 1};
    return fcntl(fd, F_OFD_GETLK, &lock) == 0 && lock.l_type == F_UNLCK;
}

static int arrived(uint32_t seen, uint32_t op) {
    return (int32_t)(seen - op) >= 0;
}

/* Returns 0; r + 1 where rank r is gone before it arrived, -(r + 1) where it did not arrive within timeout_s. */
long shm_allreduce(char *segment, int fd, long rank, long size, long slot_floats, uint32_t op, float *data, long n,
                   double timeout_s) {
    float *slots = (float *)(segment + size * LINE) + (op & 1) * size * slot_floats;
    memcpy(slots + rank * slot_floats, data, n * sizeof(float));
    uint32_t *mine = (uint32_t *)(segment + rank * LINE);
    __atomic_store_n(mine, op, __ATOMIC_RELEASE);
    syscall(SYS_futex, mine, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    const double deadline = seconds() + timeout_s;
    for (long r = 0; r < size; r++) {
        uint32_t *counter = (uint32_t *)(segment + r * LINE);
        for (long spins = 0;; spins++) {
            const uint32_t seen = __atomic_load_n(counter, __ATOMIC_ACQUIRE);
            if (arrived(seen, op))
                break;
            if (spins < SPINS)
                continue;
            if (spins > SPINS) { /* a wait ended and rank r has not arrived */
                if (gone(fd, r))
                    return r + 1;
                if (seconds() > deadline)
                    return -(r + 1);
            }
            const struct timespec wait = {0, WAIT_NS};
            syscall(SYS_futex, counter, FUTEX_WAIT, seen, &wait, NULL, 0);
        }
    }
    memcpy(data, slots, n * sizeof(float));
    for (long r = 1; r < size; r++) {
        const float *restrict other = slots + r * slot_floats;
        for (long i = 0; i < n; i++)
            data[i] += other[i];
    }
    return 0;
}

/* Takes this rank's lock (byte `rank` of the file) for the life of `fd`; 0, or -1 with errno. */
int shm_lock(int fd, long rank) {
    struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = rank, .l_len = 1};
    return fcntl(fd, F_OFD_SETLK, &lock);
}
