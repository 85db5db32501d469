/*
 * The live layer under load: one writer changing values in a loop beside 16 reader threads
 * in two processes, none of which may ever see a torn value. Built twice (Makefile here):
 * against the library sources under ThreadSanitizer, where any data race is a report, and
 * against the built libnvidia-ml.so.1 with a plain compiler.
 *
 * The program forks first (one thread), then each process calls nvmlInit, which maps the
 * live file shared and read-only, and starts 8 reader threads; thread t reads GPU t % N.
 * The parent also runs the writer: it opens the file read-write, takes the writers' flock,
 * maps it and calls nvml_mock_live_write (the primitive the Python writer uses) in a loop,
 * round-robin over the GPUs, each call setting in one write
 *
 *   memory_used_bytes = k * (2^32 + 1)   (both 32-bit halves equal k, 1 <= k <= kmax, where
 *                                         kmax fits the board's room: total - reserved)
 *   util_gpu_pct = util_mem_pct = u
 *
 * and every 16th call clearing all three instead, on the first half of the GPUs (all of them
 * when there is one). On the other half it puts and removes process (allocation) records
 * with nvml_mock_live_proc_write in the same loop, one call per value write: slot
 * (i * 7) % PROC_SLOTS, every third call a removal, each record holding one GPU of that half
 * with
 *
 *   pid = p (changes every put), used memory = p * PROC_BYTES + 7, a steady pattern at p % 101
 *
 * and a reader of such a GPU lists its compute processes (nvmlDeviceGetComputeRunningProcesses_v3)
 * and their utilization samples: an entry whose memory is not its pid's, a sample whose
 * utilization is not its pid's pattern, a list longer than the slots, or used + free +
 * reserved != total is torn. A reader sees a torn value when the used
 * memory is neither the board's nor of that form, when used + free + reserved != total, or
 * when nvmlDeviceGetUtilizationRates (which reads both rates in one snapshot) answers two
 * different rates other than the board's pair. A reader counts a change whenever what it
 * sees differs from its previous read. The writer waits until all 16 readers run, writes
 * WRITES times, and goes on (at most 100 times as long) until every reader has seen a
 * change, so the counts do not depend on scheduling. The last line is the summary:
 *
 *   ok processes=2 threads=16 gpus=N writes=W reads=R changes=C records=P listed=L torn=0
 *
 *   live_stress STATE LIVE [WRITES]   (exit 0 clean, 1 a torn value, a reader that saw no
 *                                      change or a failed call, 2 usage or setup)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef NVML_NO_UNVERSIONED_FUNC_DEFS
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#endif
#include <nvml.h>

#include "live_layout.h"

/* The writer's primitives, exported by the library beside the NVML API (live.c). */
int nvml_mock_live_write(void *base, size_t len, unsigned int gpu, unsigned int n, const unsigned int *slots,
                         const uint64_t *values, const unsigned char *set);
unsigned long long nvml_mock_live_layout_bytes(void);
int nvml_mock_live_proc_write(void *base, size_t len, unsigned int slot, const unsigned char *record,
                              size_t record_len);

#define PROCESSES 2
#define THREADS_PER_PROCESS 8
#define THREADS (PROCESSES * THREADS_PER_PROCESS)
#define MAX_GPUS 64
#define CLEAR_EVERY 16
#define HALVES 0x100000001ULL /* 2^32 + 1: both halves of k * HALVES equal k */
#define PROC_SLOTS 24        /* process slots the writer uses (7 is prime to it: every slot in turn) */
#define PROC_BYTES 4096ULL   /* a record's memory is pid * PROC_BYTES + 7 */
#define PROC_LIST_MAX 64
#define YIELD_EVERY 16 /* reads; on few cores, lets the writer in while a reader's slice lasts */

#define SLOT_OF(key, slot, is_signed, lo, hi) SLOT_##key = (slot),
enum { LIVE_GPU_KEYS(SLOT_OF) SLOT_END_ };

/* Shared by both processes (an anonymous shared mapping made before the fork). */
struct shared {
    atomic_int ready;          /* reader threads running */
    atomic_int done;           /* the writer finished */
    atomic_ullong saw_change;  /* bit per reader thread (process * 8 + thread) */
    atomic_ullong reads[PROCESSES];
    atomic_ullong changes[PROCESSES];
    atomic_ullong torn[PROCESSES];
    atomic_ullong failures[PROCESSES];
    atomic_ullong listed[PROCESSES]; /* process entries read */
};

struct board {
    unsigned long long total, reserved, used;
    unsigned int util_gpu, util_mem;
    unsigned long long kmax;
};

static struct shared *sh;
static struct board boards[MAX_GPUS];
static unsigned int gpu_count;
static unsigned int value_gpus; /* GPUs [0, value_gpus) get values, the rest process records */
static unsigned long long records_done;
static int process_index;
static unsigned long long writes_wanted = 20000;
static unsigned long long writes_done;
static const char *live_path;

static void report(const char *what, unsigned int gpu, unsigned long long a, unsigned long long b)
{
    static atomic_int printed;
    if (atomic_fetch_add(&printed, 1) < 20) {
        fprintf(stderr, "process %d gpu %u: %s (%llu, %llu)\n", process_index, gpu, what, a, b);
    }
}

struct seen {
    unsigned long long used;
    unsigned int util_gpu, util_mem;
    unsigned int nprocs;
    unsigned int pids[PROC_LIST_MAX];
};

/* One read of a GPU that holds process records: each entry and sample must be one record's. */
static int read_procs_once(unsigned int g, nvmlDevice_t dev, struct seen *out)
{
    nvmlProcessInfo_t infos[PROC_LIST_MAX];
    nvmlProcessUtilizationSample_t samples[PROC_LIST_MAX];
    unsigned int n = PROC_LIST_MAX;
    unsigned int ns = PROC_LIST_MAX;
    nvmlMemory_v2_t mem = {.version = nvmlMemory_v2};
    nvmlReturn_t us;
    if (nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, infos) != NVML_SUCCESS ||
        nvmlDeviceGetMemoryInfo_v2(dev, &mem) != NVML_SUCCESS ||
        ((us = nvmlDeviceGetProcessUtilization(dev, samples, &ns, 0)) != NVML_SUCCESS && us != NVML_ERROR_NOT_FOUND)) {
        atomic_fetch_add(&sh->failures[process_index], 1);
        report("a process call failed", g, n, ns);
        return 0;
    }
    atomic_fetch_add_explicit(&sh->reads[process_index], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&sh->listed[process_index], n, memory_order_relaxed);
    if (n > PROC_SLOTS || ns > PROC_SLOTS || mem.used + mem.free + mem.reserved != mem.total) {
        atomic_fetch_add(&sh->torn[process_index], 1);
        report("process count or memory sum", g, n, ns);
    }
    memset(out, 0, sizeof(*out));
    for (unsigned int i = 0; i < n && i < PROC_LIST_MAX; i++) {
        if (infos[i].usedGpuMemory != infos[i].pid * PROC_BYTES + 7u || infos[i].pid == 0) {
            atomic_fetch_add(&sh->torn[process_index], 1);
            report("torn process pid/memory", g, infos[i].pid, infos[i].usedGpuMemory);
        }
        out->pids[i] = infos[i].pid;
    }
    for (unsigned int i = 0; us == NVML_SUCCESS && i < ns && i < PROC_LIST_MAX; i++) {
        unsigned int want = samples[i].pid % 101u;
        if (samples[i].smUtil != want || samples[i].memUtil != (want * 40u + 50u) / 100u) {
            atomic_fetch_add(&sh->torn[process_index], 1);
            report("torn process pid/utilization", g, samples[i].pid, samples[i].smUtil);
        }
    }
    out->nprocs = n;
    out->used = mem.used;
    return 1;
}

/* One read of GPU `g`: counts torn values and failed calls; returns 0 on a failed call. */
static int read_once(unsigned int g, nvmlDevice_t dev, struct seen *out)
{
    if (g >= value_gpus) {
        return read_procs_once(g, dev, out);
    }
    const struct board *b = &boards[g];
    nvmlMemory_v2_t mem = {.version = nvmlMemory_v2};
    nvmlUtilization_t util;
    if (nvmlDeviceGetMemoryInfo_v2(dev, &mem) != NVML_SUCCESS ||
        nvmlDeviceGetUtilizationRates(dev, &util) != NVML_SUCCESS) {
        atomic_fetch_add(&sh->failures[process_index], 1);
        report("a call failed", g, 0, 0);
        return 0;
    }
    atomic_fetch_add_explicit(&sh->reads[process_index], 1, memory_order_relaxed);
    unsigned long long k = mem.used >> 32;
    int used_ok = mem.used == b->used || (k == (mem.used & 0xffffffffULL) && k >= 1 && k <= b->kmax);
    if (!used_ok || mem.used + mem.free + mem.reserved != mem.total || mem.total != b->total) {
        atomic_fetch_add(&sh->torn[process_index], 1);
        report("torn memory used/free", g, mem.used, mem.free);
    }
    if (util.gpu != util.memory && !(util.gpu == b->util_gpu && util.memory == b->util_mem)) {
        atomic_fetch_add(&sh->torn[process_index], 1);
        report("torn utilization gpu/memory", g, util.gpu, util.memory);
    }
    memset(out, 0, sizeof(*out));
    out->used = mem.used;
    out->util_gpu = util.gpu;
    out->util_mem = util.memory;
    return 1;
}

static void *reader(void *arg)
{
    unsigned int t = (unsigned int)(uintptr_t)arg;
    unsigned int g = t % gpu_count;
    unsigned int me = (unsigned int)process_index * THREADS_PER_PROCESS + t;
    nvmlDevice_t dev = NULL;
    if (nvmlDeviceGetHandleByIndex_v2(g, &dev) != NVML_SUCCESS) {
        atomic_fetch_add(&sh->failures[process_index], 1);
        atomic_fetch_add(&sh->ready, 1);
        return NULL;
    }
    struct seen last;
    struct seen now;
    int ok = read_once(g, dev, &last);
    atomic_fetch_add(&sh->ready, 1);
    unsigned long long changes = 0;
    unsigned long long reads_here = 0;
    while (ok) {
        int finished = atomic_load_explicit(&sh->done, memory_order_acquire);
        ok = read_once(g, dev, &now);
        if (ok && memcmp(&now, &last, sizeof(now)) != 0) {
            if (changes++ == 0) {
                atomic_fetch_or(&sh->saw_change, 1ULL << me);
            }
            last = now;
        }
        if (finished) {
            break;
        }
        if (++reads_here % YIELD_EVERY == 0) {
            sched_yield();
        }
    }
    atomic_fetch_add(&sh->changes[process_index], changes);
    return NULL;
}

/* Put (or, every third call, remove) process record (i * 7) % PROC_SLOTS on a GPU of the
 * second half; pid, memory and pattern change together. Returns the library's answer. */
static int write_record(void *base, size_t len, unsigned long long i, uint64_t now_ms)
{
    unsigned char rec[LIVE_PROCESS_RECORD_BYTES];
    unsigned int slot = (unsigned int)((i * 7u) % PROC_SLOTS);
    uint32_t in_use = i % 3u == 2u ? 0u : 1u;
    uint32_t pid = (uint32_t)(1u + i % 1000000u);
    uint64_t mask = 1ULL << (value_gpus + slot % (gpu_count - value_gpus));
    uint64_t used = pid * PROC_BYTES + 7u;
    uint64_t start = now_ms - 60000u;
    uint32_t pattern = 1u; /* steady */
    uint32_t level = pid % 101u;
    memset(rec, 0, sizeof(rec));
    memcpy(rec + LIVE_PROC_IN_USE, &in_use, sizeof(in_use));
    memcpy(rec + LIVE_PROC_PID, &pid, sizeof(pid));
    memcpy(rec + LIVE_PROC_GPU_MASK, &mask, sizeof(mask));
    memcpy(rec + LIVE_PROC_USED_MEMORY_BYTES, &used, sizeof(used));
    memcpy(rec + LIVE_PROC_START_TIME_MS, &start, sizeof(start));
    memcpy(rec + LIVE_PROC_UTIL_PATTERN, &pattern, sizeof(pattern));
    memcpy(rec + LIVE_PROC_UTIL_LEVEL, &level, sizeof(level));
    snprintf((char *)rec + LIVE_PROC_CONTAINER_ID, LIVE_PROC_CONTAINER_ID_BYTES, "stress-%u", slot);
    return nvml_mock_live_proc_write(base, len, slot, rec, sizeof(rec));
}

static void *writer(void *arg)
{
    (void)arg;
    size_t len = (size_t)nvml_mock_live_layout_bytes();
    int fd = open(live_path, O_RDWR | O_CLOEXEC);
    void *base = fd < 0 ? MAP_FAILED : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED || flock(fd, LOCK_EX) != 0) {
        fprintf(stderr, "cannot map the live layer %s for writing: %s\n", live_path, strerror(errno));
        atomic_fetch_add(&sh->failures[0], 1);
        atomic_store_explicit(&sh->done, 1, memory_order_release);
        return NULL;
    }
    while (atomic_load_explicit(&sh->ready, memory_order_acquire) < THREADS) {
        sched_yield();
    }
    static const unsigned int slots[3] = {SLOT_memory_used_bytes, SLOT_util_gpu_pct, SLOT_util_mem_pct};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint64_t now_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    const unsigned long long everyone = THREADS == 64 ? ~0ULL : (1ULL << THREADS) - 1;
    unsigned long long i = 0;
    for (; i < writes_wanted * 100; i++) {
        if (i >= writes_wanted && atomic_load(&sh->saw_change) == everyone) {
            break;
        }
        if (i % 1024 == 0 && (atomic_load(&sh->failures[0]) != 0 || atomic_load(&sh->failures[1]) != 0)) {
            break; /* a process already failed: no point in waiting for its readers */
        }
        unsigned int g = (unsigned int)(i % value_gpus);
        unsigned long long round = i / value_gpus;
        unsigned long long k = 1 + round % boards[g].kmax;
        unsigned long long u = (round * 7) % 101;
        uint64_t values[3] = {k * HALVES, u, u};
        unsigned char set = round % CLEAR_EVERY == CLEAR_EVERY - 1 ? 0 : 1;
        unsigned char sets[3] = {set, set, set};
        if (nvml_mock_live_write(base, len, g, 3, slots, values, sets) != 0) {
            atomic_fetch_add(&sh->failures[0], 1);
            break;
        }
        if (value_gpus < gpu_count) {
            if (write_record(base, len, i, now_ms) != 0) {
                atomic_fetch_add(&sh->failures[0], 1);
                break;
            }
            records_done++;
        }
        if (g == value_gpus - 1) {
            sched_yield(); /* a round done: let readers in, so they see rounds, not a blur */
        }
    }
    writes_done = i;
    for (unsigned int slot = 0; slot < PROC_SLOTS && value_gpus < gpu_count; slot++) { /* and no record */
        unsigned char none[LIVE_PROCESS_RECORD_BYTES] = {0};
        (void)nvml_mock_live_proc_write(base, len, slot, none, sizeof(none));
    }
    for (unsigned int g = 0; g < gpu_count; g++) { /* leave the board values answering */
        uint64_t zero[3] = {0, 0, 0};
        unsigned char clear[3] = {0, 0, 0};
        (void)nvml_mock_live_write(base, len, g, 3, slots, zero, clear);
    }
    atomic_store_explicit(&sh->done, 1, memory_order_release);
    munmap(base, len);
    close(fd); /* releases the flock */
    return NULL;
}

/* nvmlInit, the board values (no live value is set yet), the readers (and the writer). */
static int run_process(int with_writer)
{
    nvmlReturn_t rc = nvmlInit_v2();
    if (rc != NVML_SUCCESS || nvmlDeviceGetCount_v2(&gpu_count) != NVML_SUCCESS || gpu_count == 0 ||
        gpu_count > MAX_GPUS) {
        fprintf(stderr, "process %d: init failed: %s\n", process_index, nvmlErrorString(rc));
        return 2;
    }
    value_gpus = gpu_count >= 2 ? gpu_count / 2 : gpu_count;
    for (unsigned int g = 0; g < gpu_count; g++) {
        nvmlDevice_t dev = NULL;
        nvmlMemory_v2_t mem = {.version = nvmlMemory_v2};
        nvmlUtilization_t util;
        if (nvmlDeviceGetHandleByIndex_v2(g, &dev) != NVML_SUCCESS ||
            nvmlDeviceGetMemoryInfo_v2(dev, &mem) != NVML_SUCCESS ||
            nvmlDeviceGetUtilizationRates(dev, &util) != NVML_SUCCESS) {
            fprintf(stderr, "process %d: GPU %u does not answer\n", process_index, g);
            return 2;
        }
        if (g >= value_gpus) {
            continue; /* process GPUs: only sums and per-record consistency are checked */
        }
        struct board *b = &boards[g];
        *b = (struct board){mem.total, mem.reserved, mem.used, util.gpu, util.memory, 0};
        b->kmax = (mem.total - mem.reserved) / HALVES;
        if (b->kmax > 0xffffffffULL) {
            b->kmax = 0xffffffffULL;
        }
        if (b->kmax < 2 || (b->used != 0 && (b->used >> 32) == (b->used & 0xffffffffULL))) {
            fprintf(stderr, "GPU %u: the board leaves no room to write k * (2^32 + 1) distinctly\n", g);
            return 2;
        }
    }
    pthread_t readers[THREADS_PER_PROCESS];
    pthread_t w;
    for (unsigned int t = 0; t < THREADS_PER_PROCESS; t++) {
        if (pthread_create(&readers[t], NULL, reader, (void *)(uintptr_t)t) != 0) {
            return 2;
        }
    }
    if (with_writer && pthread_create(&w, NULL, writer, NULL) != 0) {
        return 2;
    }
    for (unsigned int t = 0; t < THREADS_PER_PROCESS; t++) {
        pthread_join(readers[t], NULL);
    }
    if (with_writer) {
        pthread_join(w, NULL);
    }
    return nvmlShutdown() == NVML_SUCCESS ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s STATE LIVE [WRITES]\n", argv[0]);
        return 2;
    }
    live_path = argv[2];
    if (argc == 4) {
        writes_wanted = strtoull(argv[3], NULL, 10);
        if (writes_wanted == 0) {
            fprintf(stderr, "WRITES must be a positive number\n");
            return 2;
        }
    }
    setenv("MOCK_NVML_CONFIG", argv[1], 1);
    setenv("MOCK_NVML_LIVE", argv[2], 1);
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        return 2;
    }
    memset(sh, 0, sizeof(*sh));
    fflush(NULL);
    pid_t child = fork(); /* before any thread or init: each process maps the file itself */
    if (child < 0) {
        return 2;
    }
    if (child == 0) {
        process_index = 1;
        int rc = run_process(0);
        if (rc != 0) {
            atomic_fetch_add(&sh->failures[1], 1);
            atomic_fetch_add(&sh->ready, THREADS_PER_PROCESS); /* never leave the writer waiting */
        }
        fflush(NULL);
        _exit(rc);
    }
    process_index = 0;
    int rc = run_process(1);
    if (rc != 0) {
        atomic_store(&sh->done, 1); /* the child's readers stop */
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    int child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!child_ok) {
        fprintf(stderr, "the reader process failed (status %d)\n", status);
    }
    unsigned long long reads = 0, changes = 0, torn = 0, failures = 0, listed = 0;
    for (int p = 0; p < PROCESSES; p++) {
        reads += sh->reads[p];
        changes += sh->changes[p];
        torn += sh->torn[p];
        failures += sh->failures[p];
        listed += sh->listed[p];
    }
    unsigned long long all = THREADS == 64 ? ~0ULL : (1ULL << THREADS) - 1;
    unsigned long long missed = all & ~(unsigned long long)sh->saw_change;
    if (missed != 0) {
        fprintf(stderr, "reader threads that saw no change: mask 0x%llx\n", missed);
    }
    int ok = rc == 0 && child_ok && torn == 0 && failures == 0 && missed == 0;
    printf("%s processes=%d threads=%d gpus=%u writes=%llu reads=%llu changes=%llu records=%llu listed=%llu "
           "torn=%llu\n",
           ok ? "ok" : "FAILED", PROCESSES, THREADS, gpu_count, writes_done, reads, changes, records_done, listed, torn);
    return ok ? 0 : (rc == 2 ? 2 : 1);
}
