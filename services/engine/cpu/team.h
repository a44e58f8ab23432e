/* The instance's threads for a kernel's parallel loops: torch's own OpenMP pool.
 *
 * A kernel links libgomp.so.1, the soname of the libgomp that torch loaded before it, so the loader hands it torch's
 * runtime: the kernels' teams are the threads MKL and torch's ops use, never a second pool beside them. The team size
 * and the cores come from `team_set` (the instance's `--device cpu:a-b`); worker i is pinned to the i-th core the
 * first time it runs a kernel, and the calling thread (Python, the step loop) keeps the instance's cores.
 * Include it first (it needs _GNU_SOURCE for sched_setaffinity).
 */

#define _GNU_SOURCE
#include <omp.h>
#include <sched.h>

#define TEAM_MAX_CORES 1024

static int team_threads = 1;
static int team_cores[TEAM_MAX_CORES];
static int team_ncores; /* 0: workers are not pinned */
static int team_generation = 1; /* bumped by team_set, so a thread pinned under an older set pins again */
static __thread int team_pinned_generation;

/* Kernels run on `threads` threads; with ncores > 0 worker i (i >= 1) is pinned to cores[i % ncores]. */
void team_set(int threads, const int *cores, int ncores) {
    team_threads = threads < 1 ? 1 : threads;
    team_ncores = ncores < TEAM_MAX_CORES ? ncores : TEAM_MAX_CORES;
    for (int i = 0; i < team_ncores; i++)
        team_cores[i] = cores[i];
    __atomic_add_fetch(&team_generation, 1, __ATOMIC_RELEASE);
}

/* Called by each thread of a kernel's team on entry: pins a worker once. */
static void team_pin_self(void) {
    const int generation = __atomic_load_n(&team_generation, __ATOMIC_ACQUIRE), me = omp_get_thread_num();
    if (me == 0 || team_ncores == 0 || team_pinned_generation == generation)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(team_cores[me % team_ncores], &set);
    sched_setaffinity(0, sizeof set, &set);
    team_pinned_generation = generation;
}
