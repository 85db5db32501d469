/*
 * The library at its floor, measured the way users run it (driven by bench/floor.py, which
 * stages the node, builds the library before the live layer from its tag and alternates the
 * runs; `make bench` at the top level runs it and checks the figures the README records).
 *
 *   floor_bench LIB records [CALLS] [REPS]  per-call cost with allocation records on the node
 *   floor_bench LIB board [CALLS] [REPS]    per-call cost of the plain board path
 *   floor_bench LIB startup [RUNS] [GPUS]   a fresh process: dlopen + nvmlInit + GPUS handles
 *
 * The node is the caller's: MOCK_NVML_CONFIG (and MOCK_NVML_LIVE where set) name it, and
 * NVIDIA_VISIBLE_DEVICES is the caller's too (floor.py sets 0 for the per-call modes).
 *
 * Per-call modes: each row is CALLS calls timed as a whole, REPS times; a line per row
 *   row NAME NS_PER_CALL_MEDIAN NS_PER_CALL_MIN
 * where the median and the least are over the repetitions. Every row is measured beside the
 * empty call (a call through a pointer to a function that does nothing), whose own line is
 * `row empty ...` and which is measured again before each case, so the rows of one case and
 * their baseline meet the same machine.
 *
 * records: for 0, 64 and 1,024 allocation records of 64 MiB each, 8 of them on board GPU 0 and
 * the rest spread over GPUs 1-6, without a utilization pattern and with `steady 1` (what the
 * NRI plugin writes for a pod annotated `gpu-utilization: "1"`): GetMemoryInfo_v2,
 * GetComputeRunningProcesses_v3 and GetUtilizationRates on the visible GPU 0 (the process
 * list of a GPU holding none is the 0-record case's). The records are written with the library's own
 * writer primitive into the live file MOCK_NVML_LIVE names, then NVML is initialised again.
 *
 * board: the same three calls and nvmlDeviceGetTemperature with nothing in the live layer (or
 * none at all), for a library of any age (only NVML's own functions are called).
 *
 * startup: RUNS children forked from this process, which never loaded the library; each times
 * its dlopen, nvmlInit_v2 and GPUS nvmlDeviceGetHandleByIndex_v2 and reports it through a
 * pipe. Prints `startup MEDIAN_US MIN_US P90_US`.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nvml.h>

#include "bench_baseline.h"
#include "live_layout.h"

typedef nvmlReturn_t (*init_fn)(void);
typedef nvmlReturn_t (*handle_fn)(unsigned int, nvmlDevice_t *);
typedef nvmlReturn_t (*mem_fn)(nvmlDevice_t, nvmlMemory_v2_t *);
typedef nvmlReturn_t (*util_fn)(nvmlDevice_t, nvmlUtilization_t *);
typedef nvmlReturn_t (*procs_fn)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
typedef nvmlReturn_t (*temp_fn)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int *);
typedef int (*proc_write_fn)(void *, size_t, unsigned int, const unsigned char *, size_t);

static struct {
    init_fn init;
    init_fn shutdown;
    handle_fn handle;
    mem_fn mem;
    util_fn util;
    procs_fn procs;
    temp_fn temp;
    proc_write_fn proc_write;
} api;

enum kind { EMPTY, MEMORY, PROCS, UTIL, TEMP };
#define PROCS_CAP 16
#define MAX_REPS 64

static unsigned int failures;

/* CALLS calls of one kind, timed as a whole: ns per call. */
static double one_rep(enum kind kind, nvmlDevice_t d, size_t calls)
{
    nvmlMemory_v2_t mem;
    nvmlUtilization_t u;
    nvmlProcessInfo_t infos[PROCS_CAP];
    unsigned int t;
    unsigned int bad = 0;
    double t0 = now_ns();
    for (size_t i = 0; i < calls; i++) {
        nvmlReturn_t rc;
        switch (kind) {
        case MEMORY:
            mem.version = nvmlMemory_v2;
            rc = api.mem(d, &mem);
            break;
        case PROCS: {
            unsigned int n = PROCS_CAP;
            rc = api.procs(d, &n, infos);
            break;
        }
        case UTIL: rc = api.util(d, &u); break;
        case TEMP: rc = api.temp(d, NVML_TEMPERATURE_GPU, &t); break;
        default: rc = empty_ptr(d, &mem); break;
        }
        bad += rc != NVML_SUCCESS;
    }
    double ns = (now_ns() - t0) / (double)calls;
    failures += bad;
    return ns;
}

static void row(const char *name, enum kind kind, nvmlDevice_t d, size_t calls, unsigned int reps)
{
    double v[MAX_REPS];
    one_rep(kind, d, calls / 10 + 1); /* warm: the first call computes what later ones keep */
    for (unsigned int r = 0; r < reps; r++) {
        v[r] = one_rep(kind, d, calls);
    }
    qsort(v, reps, sizeof(double), cmp_double);
    printf("row %s %.3f %.3f\n", name, v[reps / 2], v[0]);
    fflush(stdout);
}

static void *must(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (p == NULL) {
        fprintf(stderr, "floor_bench: missing symbol %s\n", name);
        exit(2);
    }
    return p;
}

static void *load(const char *path, int writer)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "floor_bench: %s\n", dlerror());
        exit(2);
    }
    api.init = (init_fn)must(lib, "nvmlInit_v2");
    api.shutdown = (init_fn)must(lib, "nvmlShutdown");
    api.handle = (handle_fn)must(lib, "nvmlDeviceGetHandleByIndex_v2");
    api.mem = (mem_fn)must(lib, "nvmlDeviceGetMemoryInfo_v2");
    api.util = (util_fn)must(lib, "nvmlDeviceGetUtilizationRates");
    api.procs = (procs_fn)must(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    api.temp = (temp_fn)must(lib, "nvmlDeviceGetTemperature");
    if (writer) {
        api.proc_write = (proc_write_fn)must(lib, "nvml_mock_live_proc_write");
    }
    return lib;
}

static nvmlDevice_t init_gpu0(void)
{
    nvmlDevice_t d;
    if (api.init() != NVML_SUCCESS || api.handle(0, &d) != NVML_SUCCESS) {
        fprintf(stderr, "floor_bench: nvmlInit_v2 or the handle of GPU 0 failed\n");
        exit(1);
    }
    return d;
}

static void check_failures(void)
{
    if (failures != 0) {
        fprintf(stderr, "floor_bench: %u calls failed\n", failures);
        exit(1);
    }
}

/* `total` records of 64 MiB: 8 on GPU 0, the rest over GPUs 1-6; `pattern` steady 1 or none.
 * Slots a previous round used past `total` are freed. */
static void write_records(unsigned char *live, unsigned int total, int pattern)
{
    static unsigned char rec[LIVE_PROCESS_RECORD_BYTES];
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    uint64_t start_ms = (uint64_t)wall.tv_sec * 1000u - 60000u; /* started a minute ago */
    uint32_t high;
    memcpy(&high, live + LIVE_HDR_PROCESS_HIGH, sizeof(high));
    for (unsigned int slot = 0; slot < LIVE_PROCESS_SLOTS && (slot < total || slot < high); slot++) {
        memset(rec, 0, sizeof(rec));
        if (slot < total) {
            uint32_t in_use = 1, pid = 4000 + slot;
            uint64_t mask = slot < 8 ? 1ull : 1ull << (1 + (slot - 8) % 6);
            uint64_t used = 64ull << 20;
            uint32_t kind = pattern ? 1u : 0u, level = pattern ? 1u : 0u; /* steady 1 */
            memcpy(rec + LIVE_PROC_IN_USE, &in_use, sizeof(in_use));
            memcpy(rec + LIVE_PROC_PID, &pid, sizeof(pid));
            memcpy(rec + LIVE_PROC_GPU_MASK, &mask, sizeof(mask));
            memcpy(rec + LIVE_PROC_USED_MEMORY_BYTES, &used, sizeof(used));
            memcpy(rec + LIVE_PROC_START_TIME_MS, &start_ms, sizeof(start_ms));
            memcpy(rec + LIVE_PROC_UTIL_PATTERN, &kind, sizeof(kind));
            memcpy(rec + LIVE_PROC_UTIL_LEVEL, &level, sizeof(level));
        }
        if (api.proc_write(live, LIVE_TOTAL_BYTES, slot, rec, sizeof(rec)) != 0) {
            fprintf(stderr, "floor_bench: process record write failed\n");
            exit(1);
        }
    }
}

static unsigned char *map_live(void)
{
    const char *path = getenv("MOCK_NVML_LIVE");
    int fd = path != NULL ? open(path, O_RDWR) : -1;
    if (fd < 0) {
        fprintf(stderr, "floor_bench: records mode needs MOCK_NVML_LIVE naming the node's live file\n");
        exit(2);
    }
    void *m = mmap(NULL, LIVE_TOTAL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    return m;
}

static int records_mode(const char *lib, size_t calls, unsigned int reps)
{
    load(lib, 1);
    unsigned char *live = map_live();
    static const unsigned int totals[] = {0, 64, 1024};
    for (int pattern = 0; pattern <= 1; pattern++) {
        for (unsigned int t = 0; t < 3; t++) {
            write_records(live, totals[t], pattern);
            nvmlDevice_t d = init_gpu0();
            nvmlUtilization_t u = {0};
            unsigned int n = PROCS_CAP;
            nvmlProcessInfo_t infos[PROCS_CAP];
            unsigned int mine = totals[t] > 0 ? 8u : 0u;
            if (api.procs(d, &n, infos) != NVML_SUCCESS || n != mine || api.util(d, &u) != NVML_SUCCESS ||
                u.gpu != (pattern && mine ? 8u : 0u)) {
                fprintf(stderr, "floor_bench: the records are not seen (%u processes, %u %% busy)\n", n, u.gpu);
                return 1;
            }
            char name[96];
            const char *pat = pattern ? "steady1" : "none";
            snprintf(name, sizeof(name), "records=%u,pattern=%s,empty", totals[t], pat);
            row(name, EMPTY, d, calls, reps);
            snprintf(name, sizeof(name), "records=%u,pattern=%s,GetMemoryInfo_v2", totals[t], pat);
            row(name, MEMORY, d, calls, reps);
            snprintf(name, sizeof(name), "records=%u,pattern=%s,GetComputeRunningProcesses_v3", totals[t], pat);
            row(name, PROCS, d, calls, reps);
            snprintf(name, sizeof(name), "records=%u,pattern=%s,GetUtilizationRates", totals[t], pat);
            row(name, UTIL, d, calls, reps);
            api.shutdown();
            check_failures();
        }
    }
    write_records(live, 0, 0);
    return 0;
}

static int board_mode(const char *lib, size_t calls, unsigned int reps)
{
    load(lib, 0);
    nvmlDevice_t d = init_gpu0();
    row("empty", EMPTY, d, calls, reps);
    row("GetMemoryInfo_v2", MEMORY, d, calls, reps);
    row("GetComputeRunningProcesses_v3", PROCS, d, calls, reps);
    row("GetUtilizationRates", UTIL, d, calls, reps);
    row("GetTemperature", TEMP, d, calls, reps);
    api.shutdown();
    check_failures();
    return 0;
}

/* One fresh process's start: dlopen, nvmlInit_v2 and `gpus` handles, in ns (-1: failed). */
static double start_once(const char *lib, unsigned int gpus)
{
    double t0 = now_ns();
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        return -1;
    }
    init_fn init = (init_fn)dlsym(h, "nvmlInit_v2");
    handle_fn handle = (handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    if (init == NULL || handle == NULL || init() != NVML_SUCCESS) {
        return -1;
    }
    for (unsigned int i = 0; i < gpus; i++) {
        nvmlDevice_t d;
        if (handle(i, &d) != NVML_SUCCESS) {
            return -1;
        }
    }
    return now_ns() - t0;
}

static int startup_mode(const char *lib, unsigned int runs, unsigned int gpus)
{
    double *v = calloc(runs, sizeof(double));
    for (unsigned int r = 0; r < runs; r++) {
        int fds[2];
        if (pipe(fds) != 0) {
            perror("pipe");
            return 1;
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            double ns = start_once(lib, gpus);
            ssize_t w = write(fds[1], &ns, sizeof(ns));
            _exit(w == (ssize_t)sizeof(ns) ? 0 : 1);
        }
        close(fds[1]);
        double ns = -1;
        ssize_t got = read(fds[0], &ns, sizeof(ns));
        close(fds[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        if (got != (ssize_t)sizeof(ns) || ns < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "floor_bench: a start-up run failed\n");
            return 1;
        }
        v[r] = ns;
    }
    qsort(v, runs, sizeof(double), cmp_double);
    printf("startup %.1f %.1f %.1f\n", v[runs / 2] / 1e3, v[0] / 1e3, v[(runs * 9) / 10] / 1e3);
    free(v);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIB records|board [CALLS] [REPS] | LIB startup [RUNS] [GPUS]\n", argv[0]);
        return 2;
    }
    const char *lib = argv[1];
    const char *mode = argv[2];
    if (strcmp(mode, "startup") == 0) {
        unsigned int runs = argc > 3 ? (unsigned int)strtoul(argv[3], NULL, 10) : 21;
        unsigned int gpus = argc > 4 ? (unsigned int)strtoul(argv[4], NULL, 10) : 8;
        return startup_mode(lib, runs < 1 ? 1 : runs, gpus);
    }
    size_t calls = argc > 3 ? strtoull(argv[3], NULL, 10) : 30000;
    unsigned int reps = argc > 4 ? (unsigned int)strtoul(argv[4], NULL, 10) : 3;
    if (calls < 1) {
        calls = 1;
    }
    if (reps < 1 || reps > MAX_REPS) {
        reps = reps < 1 ? 1 : MAX_REPS;
    }
    if (strcmp(mode, "records") == 0) {
        return records_mode(lib, calls, reps);
    }
    if (strcmp(mode, "board") == 0) {
        return board_mode(lib, calls, reps);
    }
    fprintf(stderr, "floor_bench: unknown mode %s\n", mode);
    return 2;
}
