/*
 * Per-call cost of the mock libnvidia-ml.so.1 on its hot paths, measured beside an empty
 * function call in the same run so the figures can be compared across machines.
 *
 *   nvml_bench LIBRARY [ITERATIONS]
 *   nvml_bench LIBRARY --wakeups [ROUNDS] an Xid reaching a waiter blocked in another process
 *                                        beside a pipe's and a bare futex's wake-up, ROUNDS (6)
 *                                        rounds quiet and as many with 2 busy loops, the order
 *                                        rotating
 *   nvml_bench LIBRARY --startup STATE   init + enumerate of a staged node (its live layer
 *                                        mapped), beside the same number of empty calls
 *
 * Writes a 64-GPU state to a temporary file, points MOCK_NVML_CONFIG at it, loads LIBRARY
 * with dlopen and reports, for each case, p50 / p99 of the per-call time over batches of
 * BATCH calls and the ratio to the empty call:
 *   - nvmlDeviceGetMemoryInfo_v2 and nvmlDeviceGetGpuFabricInfoV, 1 and 2 threads;
 *   - nvmlInit_v2 + GetCount + 64 x (GetHandleByIndex_v2 + GetUUID) + nvmlShutdown;
 * then the same with a live layer beside the state (live.nvmlmock, values set on the GPUs
 * measured: memory used and temperature), nvmlDeviceGetTemperature, and the latency of a
 * live write reaching a reader in another process (a child spinning on
 * nvmlDeviceGetMemoryInfo_v2 until it sees the value), beside the same ping through a plain
 * shared-memory word; then the per-call cases again with a utilization pattern (busy) active
 * on the GPUs measured, the temperature computed from it (telemetry.c); then again without
 * the pattern and with a fault active on another GPU (GPU 63 lost: the GPUs measured pay the
 * lost check, one mask-bit load), and the latency of an Xid written to the event ring
 * reaching a waiter blocked in nvmlEventSetWait in another process.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>
#include <linux/futex.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/wait.h>

#include <nvml.h>

#include "bench_baseline.h"
#include "live_layout.h"

#define GPUS 64
#define BATCH 1000
#define INIT_ROUNDS 300

typedef nvmlReturn_t (*init_fn)(void);
typedef nvmlReturn_t (*count_fn)(unsigned int *);
typedef nvmlReturn_t (*handle_fn)(unsigned int, nvmlDevice_t *);
typedef nvmlReturn_t (*uuid_fn)(nvmlDevice_t, char *, unsigned int);
typedef nvmlReturn_t (*mem_fn)(nvmlDevice_t, nvmlMemory_v2_t *);
typedef nvmlReturn_t (*fabric_fn)(nvmlDevice_t, nvmlGpuFabricInfoV_t *);
typedef nvmlReturn_t (*temp_fn)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int *);
typedef nvmlReturn_t (*util_fn)(nvmlDevice_t, nvmlUtilization_t *);
typedef nvmlReturn_t (*procs_fn)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
typedef int (*proc_write_fn)(void *, size_t, unsigned int, const unsigned char *, size_t);
typedef int (*live_write_fn)(void *, size_t, unsigned int, unsigned int, const unsigned int *, const uint64_t *,
                             const unsigned char *);
typedef uint64_t (*live_event_fn)(void *, size_t, unsigned int, uint64_t, uint64_t);
typedef nvmlReturn_t (*set_create_fn)(nvmlEventSet_t *);
typedef nvmlReturn_t (*register_fn)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
typedef nvmlReturn_t (*wait_fn)(nvmlEventSet_t, nvmlEventData_t *, unsigned int);

static struct {
    init_fn init;
    init_fn shutdown;
    count_fn count;
    handle_fn handle;
    uuid_fn uuid;
    mem_fn mem;
    fabric_fn fabric;
    temp_fn temp;
    util_fn util;
    procs_fn procs;
    proc_write_fn proc_write;
    live_write_fn live_write;
    live_event_fn live_event;
    set_create_fn set_create;
    register_fn register_events;
    wait_fn wait;
} api;

static double cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

struct stats {
    double p50;
    double p99;
};

static struct stats summarize(double *samples, size_t n)
{
    qsort(samples, n, sizeof(double), cmp_double);
    struct stats s = {samples[n / 2], samples[(n * 99) / 100]};
    return s;
}

enum call_kind { CALL_EMPTY, CALL_MEMORY, CALL_FABRIC, CALL_TEMP, CALL_UTIL, CALL_PROCS };

/* How many processes CALL_PROCS finds on its device (checked after the run). */
#define PROCS_CAP 16

struct loop_args {
    enum call_kind kind;
    size_t batches;
    nvmlDevice_t device;
    double *samples;
    unsigned int failures;
};

static void *loop(void *p)
{
    struct loop_args *a = p;
    nvmlMemory_v2_t mem;
    nvmlGpuFabricInfoV_t fabric;
    for (size_t b = 0; b < a->batches; b++) {
        double t0 = now_ns();
        for (int i = 0; i < BATCH; i++) {
            nvmlReturn_t rc;
            switch (a->kind) {
            case CALL_MEMORY:
                mem.version = nvmlMemory_v2;
                rc = api.mem(a->device, &mem);
                break;
            case CALL_FABRIC:
                fabric.version = nvmlGpuFabricInfo_v3;
                rc = api.fabric(a->device, &fabric);
                break;
            case CALL_TEMP: {
                unsigned int t = 0;
                rc = api.temp(a->device, NVML_TEMPERATURE_GPU, &t);
                break;
            }
            case CALL_UTIL: {
                nvmlUtilization_t u;
                rc = api.util(a->device, &u);
                break;
            }
            case CALL_PROCS: {
                nvmlProcessInfo_t infos[PROCS_CAP];
                unsigned int n = PROCS_CAP;
                rc = api.procs(a->device, &n, infos);
                break;
            }
            default: rc = empty_ptr(a->device, &mem); break;
            }
            a->failures += rc != NVML_SUCCESS;
        }
        a->samples[b] = (now_ns() - t0) / BATCH;
    }
    return NULL;
}

/* Run `threads` loops at once; returns p50/p99 over all threads' batches. */
static struct stats run_calls(enum call_kind kind, int threads, size_t batches, nvmlDevice_t *devices)
{
    pthread_t tid[2];
    struct loop_args args[2];
    double *samples = calloc((size_t)threads * batches, sizeof(double));
    for (int t = 0; t < threads; t++) {
        args[t] = (struct loop_args){kind, batches, devices[t], samples + (size_t)t * batches, 0};
        pthread_create(&tid[t], NULL, loop, &args[t]);
    }
    unsigned int failures = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        failures += args[t].failures;
    }
    if (failures) {
        fprintf(stderr, "%u calls failed\n", failures);
        exit(1);
    }
    struct stats s = summarize(samples, (size_t)threads * batches);
    free(samples);
    return s;
}

static void write_state(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    fprintf(f, "nvml-mock-state 1\n[system]\ndriver_version=580.65.06\nnvml_version=13.580.65.06\n"
               "cuda_driver_version=13000\ndevice_count=%d\n",
            GPUS);
    for (int i = 0; i < GPUS; i++) {
        fprintf(f,
                "[gpu %d]\nname=NVIDIA GB200\nuuid=GPU-b200b200-0000-0000-0000-%012d\nserial=18211240%05d\n"
                "board_part_number=699-2G548-1200-000\nboard_id=%d\nminor_number=%d\nbrand=14\narchitecture=10\n"
                "cuda_cc_major=10\ncuda_cc_minor=0\nvbios_version=97.00.0B.00.01\ninforom_image_version=G548.0200.00.04\n"
                "pci_bus_id=%08X:01:00.0\npci_device_id=0x294110DE\npci_subsystem_id=0x20D510DE\npcie_max_gen=6\n"
                "pcie_max_width=16\npcie_cur_gen=6\npcie_cur_width=16\nmemory_total_bytes=199715979264\n"
                "memory_reserved_bytes=590348288\nmemory_used_bytes=0\nmemory_bus_width=8192\n"
                "bar1_total_bytes=274877906944\nbar1_used_bytes=1048576\nnuma_node=%d\ncpu_affinity=%s\n"
                "persistence_mode=1\ndisplay_mode=0\ndisplay_active=0\nclock_graphics_mhz=120\nclock_sm_mhz=120\n"
                "clock_mem_mhz=3996\nclock_video_mhz=585\nmax_clock_graphics_mhz=2062\nmax_clock_sm_mhz=2062\n"
                "max_clock_mem_mhz=3996\nmax_clock_video_mhz=1650\npower_usage_mw=160000\npower_limit_mw=1200000\n"
                "power_default_limit_mw=1200000\npower_min_limit_mw=200000\npower_max_limit_mw=1200000\n"
                "temperature_c=30\ntemp_shutdown_c=95\ntemp_slowdown_c=92\ntemp_gpu_max_c=90\ntemp_mem_max_c=95\n"
                "ecc_enabled=1\nmig_capable=1\nnvlink_count=18\nnvlink_version=7\nfabric_attached=1\n"
                "fabric_cluster_uuid=6a5f6f1c-51a8-4b8c-9d0e-1f2a3b4c5d6e\nfabric_clique_id=1\ngpu_group=%d\n",
                i, i, i, i, i, i, i / 32, i < 32 ? "0-71" : "72-143", i / 4);
    }
    fclose(f);
}


/* A live layer for the state: header and record UUIDs from live_layout.h, every value unset. */
static void *write_live(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)LIVE_TOTAL_BYTES) != 0) {
        perror(path);
        exit(1);
    }
    unsigned char *base = mmap(NULL, LIVE_TOTAL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    live_layout_init(base, GPUS);
    for (int i = 0; i < GPUS; i++) {
        snprintf((char *)base + LIVE_RECORDS_OFFSET + (size_t)i * LIVE_RECORD_BYTES + LIVE_RECORD_UUID,
                 LIVE_RECORD_UUID_BYTES, "GPU-b200b200-0000-0000-0000-%012d", i);
    }
    return base;
}

static void live_put(void *base, unsigned int gpu, unsigned int slot, uint64_t value, unsigned char set)
{
    if (api.live_write(base, LIVE_TOTAL_BYTES, gpu, 1, &slot, &value, &set) != 0) {
        fprintf(stderr, "live write failed\n");
        exit(1);
    }
}

static void live_set(void *base, unsigned int gpu, unsigned int slot, uint64_t value)
{
    live_put(base, gpu, slot, value, 1);
}

#define PINGS 2000
/* Slot of memory_used_bytes in the live record (keys.toml). */
#define SLOT_MEMORY_USED 3u
#define SLOT_TEMPERATURE 22u
#define SLOT_UTIL_PATTERN 70u
#define SLOT_UTIL_PATTERN_SEED 73u
#define SLOT_UTIL_PATTERN_EPOCH 74u
#define PATTERN_BUSY 2u
#define SLOT_GPU_LOST 64u

struct ping {
    _Atomic uint64_t word;   /* the baseline: a plain shared-memory word */
    _Atomic uint64_t seen;   /* the child's acknowledgement of value k */
    _Atomic double seen_at;  /* when the child saw it */
};

/* The child: spin until each value k appears (through NVML, or the plain word), stamp it. */
static void ping_child(struct ping *shared, int through_nvml, nvmlDevice_t device)
{
    for (uint64_t k = 1; k <= PINGS; k++) {
        for (;;) {
            uint64_t v;
            if (through_nvml) {
                nvmlMemory_v2_t mem = {.version = nvmlMemory_v2};
                api.mem(device, &mem);
                v = mem.used >> 20;
            } else {
                v = atomic_load(&shared->word);
            }
            if (v == k) {
                break;
            }
        }
        atomic_store(&shared->seen_at, now_ns());
        atomic_store(&shared->seen, k);
    }
}

static struct stats ping_latency(void *live, int through_nvml, nvmlDevice_t device)
{
    struct ping *shared = mmap(NULL, sizeof(struct ping), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    atomic_store(&shared->word, 0);
    atomic_store(&shared->seen, 0);
    pid_t pid = fork();
    if (pid == 0) {
        ping_child(shared, through_nvml, device);
        _exit(0);
    }
    static double samples[PINGS];
    for (uint64_t k = 1; k <= PINGS; k++) {
        double t0 = now_ns();
        if (through_nvml) {
            live_set(live, 0, SLOT_MEMORY_USED, k << 20);
        } else {
            atomic_store(&shared->word, k);
        }
        while (atomic_load(&shared->seen) != k) {
        }
        samples[k - 1] = atomic_load(&shared->seen_at) - t0;
    }
    waitpid(pid, NULL, 0);
    munmap(shared, sizeof(struct ping));
    return summarize(samples, PINGS);
}

#define XID_PINGS 500

/* A wake-up's figures: the waiter's (write started -> waiter running again) and the
 * writer's own share (write started -> the write call returned). */
struct wake_stats {
    struct stats wake;
    struct stats writer;
};

/* An Xid written to the ring reaching a waiter already blocked in nvmlEventSetWait_v2 in
 * another process: the child stamps each event as it returns; the parent writes the next
 * only after the child acknowledged the last (so every wait starts blocked). */
static struct wake_stats xid_latency(void *live)
{
    struct ping *shared = mmap(NULL, sizeof(struct ping), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    atomic_store(&shared->seen, 0);
    atomic_store(&shared->word, 0);
    pid_t pid = fork();
    if (pid == 0) {
        nvmlDevice_t d;
        nvmlEventSet_t set;
        if (api.handle(2, &d) != NVML_SUCCESS || api.set_create(&set) != NVML_SUCCESS ||
            api.register_events(d, nvmlEventTypeXidCriticalError, set) != NVML_SUCCESS) {
            _exit(1);
        }
        atomic_store(&shared->word, 1); /* registered */
        for (uint64_t k = 1; k <= XID_PINGS; k++) {
            nvmlEventData_t e;
            if (api.wait(set, &e, 10000) != NVML_SUCCESS || e.eventData != k) {
                _exit(1);
            }
            atomic_store(&shared->seen_at, now_ns());
            atomic_store(&shared->seen, k);
        }
        _exit(0);
    }
    static double samples[XID_PINGS];
    static double writer[XID_PINGS];
    while (atomic_load(&shared->word) != 1) {
    }
    for (uint64_t k = 1; k <= XID_PINGS; k++) {
        struct timespec settle = {0, 200000}; /* the child is back in its wait */
        nanosleep(&settle, NULL);
        double t0 = now_ns();
        api.live_event(live, LIVE_TOTAL_BYTES, 2, nvmlEventTypeXidCriticalError, k);
        writer[k - 1] = now_ns() - t0;
        while (atomic_load(&shared->seen) != k) {
        }
        samples[k - 1] = atomic_load(&shared->seen_at) - t0;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    munmap(shared, sizeof(struct ping));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the event waiter failed\n");
        exit(1);
    }
    return (struct wake_stats){summarize(samples, XID_PINGS), summarize(writer, XID_PINGS)};
}

static void print_row(const char *name, struct stats s, struct stats base);

/* Allocation records: `total` on the node, `on_first` of them holding GPU 0 (the one
 * measured), the rest spread over GPUs 2..63 (GPU 1 holds none). No utilization pattern (the
 * NRI plugin's record without an annotation). */
static void write_records(void *live, unsigned int total, unsigned int on_first)
{
    static unsigned char rec[LIVE_PROCESS_RECORD_BYTES];
    for (unsigned int slot = 0; slot < LIVE_PROCESS_SLOTS; slot++) {
        memset(rec, 0, sizeof(rec));
        if (slot < total) {
            uint32_t in_use = 1;
            uint32_t pid = 1000 + slot;
            uint64_t mask = slot < on_first ? 1ull : 1ull << (2 + slot % (GPUS - 2));
            uint64_t used = 1ull << 30;
            memcpy(rec + LIVE_PROC_IN_USE, &in_use, sizeof(in_use));
            memcpy(rec + LIVE_PROC_PID, &pid, sizeof(pid));
            memcpy(rec + LIVE_PROC_GPU_MASK, &mask, sizeof(mask));
            memcpy(rec + LIVE_PROC_USED_MEMORY_BYTES, &used, sizeof(used));
        } else {
            /* only slots a previous round used need freeing */
            uint32_t high;
            memcpy(&high, (unsigned char *)live + LIVE_HDR_PROCESS_HIGH, sizeof(high));
            if (slot >= high) {
                break;
            }
        }
        if (api.proc_write(live, LIVE_TOTAL_BYTES, slot, rec, sizeof(rec)) != 0) {
            fprintf(stderr, "process record write failed\n");
            exit(1);
        }
    }
}

/* The record-reading calls with 0, 64 and 1,024 records on the node, 8 of them on the GPU
 * asked (GPU 0), and the process list of a GPU holding none (GPU 1). */
static int measure_records(size_t batches, void *live)
{
    static const unsigned int totals[] = {0, 64, 1024};
    live_set(live, 0, SLOT_MEMORY_USED, 20ull << 30); /* the ping above moved it */
    for (unsigned int t = 0; t < sizeof(totals) / sizeof(totals[0]); t++) {
        unsigned int total = totals[t];
        unsigned int mine = total > 0 ? 8 : 0;
        write_records(live, total, mine);
        if (api.init() != NVML_SUCCESS) {
            fprintf(stderr, "nvmlInit_v2 failed\n");
            return -1;
        }
        nvmlDevice_t devices[2];
        api.handle(0, &devices[0]);
        api.handle(1, &devices[1]);
        nvmlProcessInfo_t infos[PROCS_CAP];
        unsigned int n = PROCS_CAP;
        nvmlMemory_v2_t mem = {.version = nvmlMemory_v2};
        if (api.procs(devices[0], &n, infos) != NVML_SUCCESS || n != mine || api.mem(devices[0], &mem) != NVML_SUCCESS ||
            mem.used != (20ull << 30) + (uint64_t)mine * (1ull << 30)) {
            fprintf(stderr, "the records are not seen (%u processes, used %llu)\n", n, mem.used);
            return -1;
        }
        printf("-- %u allocation records on the node, %u on the GPU measured\n", total, mine);
        nvmlDevice_t first[1] = {devices[0]};
        nvmlDevice_t none[1] = {devices[1]};
        struct stats base = run_calls(CALL_EMPTY, 1, batches, first);
        print_row("nvmlDeviceGetMemoryInfo_v2", run_calls(CALL_MEMORY, 1, batches, first), base);
        print_row("nvmlDeviceGetUtilizationRates (MIG off)", run_calls(CALL_UTIL, 1, batches, first), base);
        char name[80];
        snprintf(name, sizeof(name), "GetComputeRunningProcesses_v3, %u on it", mine);
        print_row(name, run_calls(CALL_PROCS, 1, batches, first), base);
        if (total > 0) {
            print_row("GetComputeRunningProcesses_v3, none on it", run_calls(CALL_PROCS, 1, batches, none), base);
        }
        api.shutdown();
    }
    write_records(live, 0, 0);
    return 0;
}

/* The baseline for a blocked waiter: the same handshake through a pipe, the child blocked in
 * read(2) in another process, stamping each byte as it arrives. The child is forked from the
 * same initialised parent as the Xid waiter and says it is ready the same way. */
static struct wake_stats pipe_latency(void)
{
    struct ping *shared = mmap(NULL, sizeof(struct ping), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    atomic_store(&shared->seen, 0);
    atomic_store(&shared->word, 0);
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
        exit(1);
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[1]);
        atomic_store(&shared->word, 1); /* ready */
        for (uint64_t k = 1; k <= XID_PINGS; k++) {
            char b;
            if (read(fds[0], &b, 1) != 1) {
                _exit(1);
            }
            atomic_store(&shared->seen_at, now_ns());
            atomic_store(&shared->seen, k);
        }
        _exit(0);
    }
    close(fds[0]);
    static double samples[XID_PINGS];
    static double writer[XID_PINGS];
    while (atomic_load(&shared->word) != 1) {
    }
    for (uint64_t k = 1; k <= XID_PINGS; k++) {
        struct timespec settle = {0, 200000}; /* the child is back in its read */
        nanosleep(&settle, NULL);
        double t0 = now_ns();
        if (write(fds[1], "x", 1) != 1) {
            perror("write");
            exit(1);
        }
        writer[k - 1] = now_ns() - t0;
        while (atomic_load(&shared->seen) != k) {
        }
        samples[k - 1] = atomic_load(&shared->seen_at) - t0;
    }
    close(fds[1]);
    waitpid(pid, NULL, 0);
    munmap(shared, sizeof(struct ping));
    return (struct wake_stats){summarize(samples, XID_PINGS), summarize(writer, XID_PINGS)};
}

/* The kernel's part of an Xid's path alone: the same handshake through a bare FUTEX_WAKE on
 * a word of a shared file mapping (a non-private futex, as the live file's), the child
 * blocked in FUTEX_WAIT on it. Xid minus this is what the library adds. */
static struct wake_stats futex_latency(uint32_t *word)
{
    struct ping *shared = mmap(NULL, sizeof(struct ping), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    atomic_store(&shared->seen, 0);
    atomic_store(&shared->word, 0);
    __atomic_store_n(word, 0u, __ATOMIC_RELEASE);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        atomic_store(&shared->word, 1); /* ready */
        for (uint32_t k = 1; k <= XID_PINGS; k++) {
            while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != k) {
                syscall(SYS_futex, word, FUTEX_WAIT, k - 1u, NULL, NULL, 0);
            }
            atomic_store(&shared->seen_at, now_ns());
            atomic_store(&shared->seen, k);
        }
        _exit(0);
    }
    static double samples[XID_PINGS];
    static double writer[XID_PINGS];
    while (atomic_load(&shared->word) != 1) {
    }
    for (uint32_t k = 1; k <= XID_PINGS; k++) {
        struct timespec settle = {0, 200000}; /* the child is back in its wait */
        nanosleep(&settle, NULL);
        double t0 = now_ns();
        __atomic_store_n(word, k, __ATOMIC_RELEASE);
        syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
        writer[k - 1] = now_ns() - t0;
        while (atomic_load(&shared->seen) != k) {
        }
        samples[k - 1] = atomic_load(&shared->seen_at) - t0;
    }
    waitpid(pid, NULL, 0);
    munmap(shared, sizeof(struct ping));
    return (struct wake_stats){summarize(samples, XID_PINGS), summarize(writer, XID_PINGS)};
}

/* `n` processes spinning at the bench's own priority (the load of the "loaded" rows). */
static void busy_start(pid_t *pids, int n)
{
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a bench that was killed */
            for (volatile unsigned long x = 0;; x++) {
            }
        }
    }
}

static void busy_stop(pid_t *pids, int n)
{
    for (int i = 0; i < n; i++) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
}

/* Xid -> blocked waiter beside a pipe wake-up and a bare futex wake-up, `rounds` rounds quiet
 * and as many with two busy loops; in each round each runs 500 wake-ups, in an order that
 * rotates from round to round, so that all see the same machine. Each row: the round's load
 * average, the waiter's p50 / p99 for each, and the writers' own p99 (the write call, before
 * the waiter can run). `word` is a word of a shared file mapping for the bare futex. */
static int measure_wakeups(void *live, uint32_t *word, int rounds)
{
    if (api.init() != NVML_SUCCESS) {
        fprintf(stderr, "nvmlInit_v2 failed\n");
        return -1;
    }
    printf("%-12s %5s %6s %8s %8s %8s %8s %8s %8s %8s %8s %8s %6s\n", "case", "round", "load1", "Xid p50",
           "Xid p99", "pipe p50", "pipe p99", "futex50", "futex99", "Xid wr99", "pipe w99", "ftx w99", "p99 x");
    for (int busy = 0; busy <= 2; busy += 2) {
        pid_t pids[2];
        busy_start(pids, busy);
        for (int round = 0; round < rounds; round++) {
            struct wake_stats got[3] = {0};
            for (int i = 0; i < 3; i++) {
                int which = (round + i) % 3;
                got[which] = which == 0 ? pipe_latency() : which == 1 ? futex_latency(word) : xid_latency(live);
            }
            struct wake_stats pipe_s = got[0], ftx = got[1], xid = got[2];
            double load = 0;
            getloadavg(&load, 1);
            printf("%-12s %5d %6.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %5.1fx\n",
                   busy ? "2 busy loops" : "quiet", round + 1, load, xid.wake.p50 / 1e3, xid.wake.p99 / 1e3,
                   pipe_s.wake.p50 / 1e3, pipe_s.wake.p99 / 1e3, ftx.wake.p50 / 1e3, ftx.wake.p99 / 1e3,
                   xid.writer.p99 / 1e3, pipe_s.writer.p99 / 1e3, ftx.writer.p99 / 1e3,
                   xid.wake.p99 / pipe_s.wake.p99);
            fflush(stdout);
        }
        busy_stop(pids, busy);
    }
    api.shutdown();
    return 0;
}

static void *must(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (p == NULL) {
        fprintf(stderr, "missing symbol %s\n", name);
        exit(1);
    }
    return p;
}

static void print_row(const char *name, struct stats s, struct stats base)
{
    printf("%-44s %9.1f %9.1f %9.1f %9.1f %7.1fx\n", name, s.p50, s.p99, base.p50, base.p99, s.p50 / base.p50);
}

enum phase { PHASE_BOARD, PHASE_LIVE, PHASE_PATTERN, PHASE_FAULT };

/* init + enumerate: the discovery a device plugin or nvidia-smi does at start, of the
 * `expect` GPUs the environment's NVIDIA_VISIBLE_DEVICES leaves visible. */
static int init_enumerate(const char *label, unsigned int expect, enum phase phase, nvmlDevice_t empty_arg)
{
    double rounds[INIT_ROUNDS];
    double cpu_rounds[INIT_ROUNDS];
    double empty_rounds[INIT_ROUNDS];
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    for (int r = 0; r < INIT_ROUNDS; r++) {
        double t0 = now_ns();
        double c0 = cpu_ns();
        unsigned int n = 0;
        if (api.init() != NVML_SUCCESS || api.count(&n) != NVML_SUCCESS || n != expect) {
            fprintf(stderr, "init/enumerate failed (%u GPUs, %u expected)\n", n, expect);
            return -1;
        }
        for (unsigned int i = 0; i < n; i++) {
            nvmlDevice_t d;
            nvmlReturn_t rc = api.handle(i, &d);
            if (rc == NVML_ERROR_GPU_IS_LOST && phase == PHASE_FAULT && i == GPUS - 1) {
                continue; /* the GPU this run made lost */
            }
            if (rc != NVML_SUCCESS || api.uuid(d, uuid, sizeof(uuid)) != NVML_SUCCESS) {
                fprintf(stderr, "enumerate failed at %u\n", i);
                return -1;
            }
        }
        api.shutdown();
        rounds[r] = now_ns() - t0;
        cpu_rounds[r] = cpu_ns() - c0;
        t0 = now_ns();
        for (unsigned int i = 0; i < 3 + 2 * expect; i++) {
            empty_ptr(empty_arg, uuid);
        }
        empty_rounds[r] = now_ns() - t0;
    }
    struct stats init = summarize(rounds, INIT_ROUNDS);
    struct stats cpu = summarize(cpu_rounds, INIT_ROUNDS);
    struct stats base = summarize(empty_rounds, INIT_ROUNDS);
    char name[96];
    snprintf(name, sizeof(name), "init+enumerate %s (us wall, same # calls)", label);
    printf("%-44s %9.1f %9.1f %9.1f %9.1f %7.0fx\n", name, init.p50 / 1e3, init.p99 / 1e3, base.p50 / 1e3,
           base.p99 / 1e3, init.p50 / base.p50);
    snprintf(name, sizeof(name), "init+enumerate %s (us thread CPU time)", label);
    printf("%-44s %9.1f %9.1f\n", name, cpu.p50 / 1e3, cpu.p99 / 1e3);
    return 0;
}

/* The same with NVIDIA_VISIBLE_DEVICES naming VISIBLE_OF_64 of the GPUs by full UUID
 * (every fourth one), as the container toolkit's env strategy hands them to a container. */
#define VISIBLE_OF_64 16
static int init_enumerate_visible(nvmlDevice_t empty_arg)
{
    char value[VISIBLE_OF_64 * 48];
    size_t used = 0;
    for (int k = 0; k < VISIBLE_OF_64; k++) {
        used += (size_t)snprintf(value + used, sizeof(value) - used, "%sGPU-b200b200-0000-0000-0000-%012d",
                                 k > 0 ? "," : "", k * (GPUS / VISIBLE_OF_64));
    }
    setenv("NVIDIA_VISIBLE_DEVICES", value, 1);
    int rc = init_enumerate("16 of 64 GPUs by UUID", VISIBLE_OF_64, PHASE_BOARD, empty_arg);
    unsetenv("NVIDIA_VISIBLE_DEVICES");
    return rc;
}


/* The per-call cases and init + enumerate; with a live layer, the live values must be seen
 * (PHASE_PATTERN: the temperature is the pattern's, above the board's idle 30 C; PHASE_FAULT:
 * GPU 63 is lost, and the Xid latency is measured). */
static int measure(size_t batches, void *live, enum phase phase)
{
    if (api.init() != NVML_SUCCESS) {
        fprintf(stderr, "nvmlInit_v2 failed\n");
        return -1;
    }
    nvmlDevice_t devices[2];
    api.handle(0, &devices[0]);
    api.handle(1, &devices[1]);
    if (live != NULL) {
        nvmlMemory_v2_t mem = {.version = nvmlMemory_v2};
        unsigned int temp = 0;
        if (api.mem(devices[1], &mem) != NVML_SUCCESS || mem.used != 20ull << 30 ||
            api.temp(devices[1], NVML_TEMPERATURE_GPU, &temp) != NVML_SUCCESS ||
            (phase == PHASE_PATTERN ? temp <= 30 : temp != 71)) {
            fprintf(stderr, "the live values are not seen (used %llu, temperature %u)\n", mem.used, temp);
            return -1;
        }
    }

    for (int threads = 1; threads <= 2; threads++) {
        char name[64];
        struct stats base = run_calls(CALL_EMPTY, threads, batches, devices);
        snprintf(name, sizeof(name), "nvmlDeviceGetMemoryInfo_v2, %d thread%s", threads, threads > 1 ? "s" : "");
        print_row(name, run_calls(CALL_MEMORY, threads, batches, devices), base);
        snprintf(name, sizeof(name), "nvmlDeviceGetGpuFabricInfoV (v3), %d thread%s", threads, threads > 1 ? "s" : "");
        print_row(name, run_calls(CALL_FABRIC, threads, batches, devices), base);
        snprintf(name, sizeof(name), "nvmlDeviceGetTemperature, %d thread%s", threads, threads > 1 ? "s" : "");
        print_row(name, run_calls(CALL_TEMP, threads, batches, devices), base);
    }
    if (phase == PHASE_LIVE || phase == PHASE_FAULT) {
        struct stats plain = ping_latency(live, 0, devices[0]);
        struct stats seen = ping_latency(live, 1, devices[0]);
        printf("%-44s %9.1f %9.1f %9.1f %9.1f %7.1fx\n", "live write -> reader in another process (us)",
               seen.p50 / 1e3, seen.p99 / 1e3, plain.p50 / 1e3, plain.p99 / 1e3, seen.p50 / plain.p50);
    }
    if (phase == PHASE_FAULT) {
        struct stats plain = ping_latency(live, 0, devices[0]);
        struct stats xid = xid_latency(live).wake;
        printf("%-44s %9.1f %9.1f %9.1f %9.1f %7.1fx\n", "Xid -> blocked waiter, another process (us)",
               xid.p50 / 1e3, xid.p99 / 1e3, plain.p50 / 1e3, plain.p99 / 1e3, xid.p50 / plain.p50);
    }
    api.shutdown();
    if (phase == PHASE_PATTERN) {
        return 0;
    }

    if (init_enumerate("64 GPUs", GPUS, phase, devices[0]) != 0) {
        return -1;
    }
    if (phase == PHASE_BOARD && init_enumerate_visible(devices[0]) != 0) {
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s LIBRARY [ITERATIONS | --wakeups [ROUNDS] | --startup STATE]\n", argv[0]);
        return 2;
    }
    const char *startup = argc > 3 && strcmp(argv[2], "--startup") == 0 ? argv[3] : NULL;
    unsigned int startup_gpus = 0;
    int wakeups = argc > 2 && strcmp(argv[2], "--wakeups") == 0;
    int wake_rounds = wakeups && argc > 3 ? atoi(argv[3]) : 6;
    if (wake_rounds < 1) {
        wake_rounds = 1;
    }
    size_t iterations = argc > 2 && startup == NULL && !wakeups ? strtoull(argv[2], NULL, 10) : 2000000;
    size_t batches = iterations / BATCH > 10 ? iterations / BATCH : 10;

    /* TMPDIR picks the file system the state and the live layer live on (the Xid path's
     * writes go through that file's page) */
    char path[4096];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof(path), "%s/nvml-bench-XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        return 1;
    }
    close(fd);
    write_state(path);
    setenv("MOCK_NVML_CONFIG", startup != NULL ? startup : path, 1);

    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    api.init = (init_fn)must(lib, "nvmlInit_v2");
    api.shutdown = (init_fn)must(lib, "nvmlShutdown");
    api.count = (count_fn)must(lib, "nvmlDeviceGetCount_v2");
    api.handle = (handle_fn)must(lib, "nvmlDeviceGetHandleByIndex_v2");
    api.uuid = (uuid_fn)must(lib, "nvmlDeviceGetUUID");
    api.mem = (mem_fn)must(lib, "nvmlDeviceGetMemoryInfo_v2");
    api.fabric = (fabric_fn)must(lib, "nvmlDeviceGetGpuFabricInfoV");
    api.temp = (temp_fn)must(lib, "nvmlDeviceGetTemperature");
    api.util = (util_fn)must(lib, "nvmlDeviceGetUtilizationRates");
    api.procs = (procs_fn)must(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    api.proc_write = (proc_write_fn)must(lib, "nvml_mock_live_proc_write");
    api.live_write = (live_write_fn)must(lib, "nvml_mock_live_write");
    api.live_event = (live_event_fn)must(lib, "nvml_mock_live_event");
    api.set_create = (set_create_fn)must(lib, "nvmlEventSetCreate");
    api.register_events = (register_fn)must(lib, "nvmlDeviceRegisterEvents");
    api.wait = (wait_fn)must(lib, "nvmlEventSetWait_v2");

    if (wakeups) {
        char live_path[4200];
        snprintf(live_path, sizeof(live_path), "%s.live", path);
        setenv("MOCK_NVML_LIVE", live_path, 1);
        void *live = write_live(live_path);
        printf("wake-up latency in us (TMPDIR=%s holds the live file)\n", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
        char word_path[4200];
        snprintf(word_path, sizeof(word_path), "%s.futex", path);
        int wfd = open(word_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        uint32_t *word = wfd >= 0 && ftruncate(wfd, 4096) == 0
                             ? mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, wfd, 0)
                             : MAP_FAILED;
        if (wfd >= 0) {
            close(wfd);
        }
        if (word == MAP_FAILED) {
            perror(word_path);
            return 1;
        }
        int rc = measure_wakeups(live, word, wake_rounds) != 0;
        unlink(word_path);
        unlink(live_path);
        unlink(path);
        return rc;
    }
    if (startup != NULL) {
        /* a staged node's own state, its live layer mapped beside it */
        printf("%-44s %9s %9s %9s %9s %8s\n", "case", "p50", "p99", "base p50", "base p99", "ratio");
        if (api.init() != NVML_SUCCESS || api.count(&startup_gpus) != NVML_SUCCESS) {
            fprintf(stderr, "nvmlInit_v2 failed on %s\n", startup);
            return 1;
        }
        api.shutdown();
        char label[64];
        snprintf(label, sizeof(label), "%u GPUs, staged", startup_gpus);
        int rc = init_enumerate(label, startup_gpus, PHASE_LIVE, NULL) != 0;
        unlink(path);
        return rc;
    }
    printf("%-44s %9s %9s %9s %9s %8s\n", "case (ns per call)", "p50", "p99", "base p50", "base p99", "ratio");
    printf("-- board layer only (no live file)\n");
    if (measure(batches, NULL, PHASE_BOARD) != 0) {
        return 1;
    }
    char live_path[4200];
    snprintf(live_path, sizeof(live_path), "%s.live", path);
    setenv("MOCK_NVML_LIVE", live_path, 1);
    void *live = write_live(live_path);
    live_set(live, 0, SLOT_MEMORY_USED, 20ull << 30);
    live_set(live, 1, SLOT_MEMORY_USED, 20ull << 30);
    live_set(live, 0, SLOT_TEMPERATURE, 71);
    live_set(live, 1, SLOT_TEMPERATURE, 71);
    printf("-- live layer present, values set on the GPUs measured\n");
    if (measure(batches, live, PHASE_LIVE) != 0) {
        return 1;
    }
    if (measure_records(batches, live) != 0) {
        return 1;
    }
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    uint64_t now_ms = (uint64_t)wall.tv_sec * 1000u + (uint64_t)wall.tv_nsec / 1000000u;
    for (unsigned int gpu = 0; gpu < 2; gpu++) {
        live_put(live, gpu, SLOT_TEMPERATURE, 0, 0);
        live_set(live, gpu, SLOT_UTIL_PATTERN_SEED, gpu + 1);
        live_set(live, gpu, SLOT_UTIL_PATTERN_EPOCH, now_ms - 60000);
        live_set(live, gpu, SLOT_UTIL_PATTERN, PATTERN_BUSY);
    }
    printf("-- live layer, a utilization pattern (busy) on the GPUs measured\n");
    if (measure(batches, live, PHASE_PATTERN) != 0) {
        return 1;
    }
    for (unsigned int gpu = 0; gpu < 2; gpu++) { /* back to the live values alone */
        live_put(live, gpu, SLOT_UTIL_PATTERN, 0, 0);
        live_put(live, gpu, SLOT_UTIL_PATTERN_EPOCH, 0, 0);
        live_put(live, gpu, SLOT_UTIL_PATTERN_SEED, 0, 0);
        live_set(live, gpu, SLOT_TEMPERATURE, 71);
    }
    live_set(live, GPUS - 1, SLOT_GPU_LOST, 1);
    printf("-- live values set, no pattern, and a fault active: GPU %d lost (the GPUs measured pay the lost check)\n",
           GPUS - 1);
    if (measure(batches, live, PHASE_FAULT) != 0) {
        return 1;
    }
    unlink(live_path);
    unlink(path);
    return 0;
}
