/*
 * 16 threads calling the mock NVML library at once. Built twice (see Makefile here):
 * against the library sources under ThreadSanitizer, where any data race is a report,
 * and against the built libnvidia-ml.so.1 with a plain compiler, where only the answers
 * are checked. Both builds run the same checks:
 *
 *   phase 1  the main thread holds one nvmlInit reference; every thread runs rounds of
 *            init / handles / identity / memory / fabric info (v1 and V v2/v3) / NVLink /
 *            field values / lookups by UUID and bus id / event sets with short waits /
 *            shutdown, and waits on one shared event set.
 *   phase 2  no reference is held, so the count keeps falling to zero and the next init
 *            reloads the state while other threads are entering and leaving.
 *   phase 3  the state file is corrupt: every init fails at once on every thread while the
 *            others read nvmlErrorString for the reason, which must stay whole.
 *   before 3 all threads block on one event set with a 60 s timeout and the main thread
 *            frees the set: every waiter must wake at once (TIMEOUT) before it is freed.
 *            Then, for FREE_ROUNDS rounds, half the threads call wait (no timeout) and
 *            register on one set in a loop, the other half each sample into a GPM sample
 *            of its own, while the main thread frees them all under them: each call answers as on a live
 *            handle or INVALID_ARGUMENT, never after the memory is gone; a second free of
 *            either handle is INVALID_ARGUMENT.
 *   phase 4  (run before 3) a live layer with a utilization pattern (busy) on every GPU, on the real clock,
 *            while the main thread keeps rewriting the pattern's seed and temperature lag:
 *            every utilization must be busy's and each thread's energy reading only grow.
 *   live     (after 4, before 3; phase 5 in reports) with a fresh live layer beside the state:
 *            12 threads each wait on their own set for every Xid the main thread writes to
 *            the event ring (in order, fields filled),
 *            4 share one set (each event reaches one of them) until the main thread frees it
 *            under them, and one thread reads a GPU whose gpu_lost key the main thread
 *            toggles (SUCCESS or GPU_IS_LOST, nothing else).
 *   armed    (after live; phase 6) 8 threads each wait on their own set for the Xids the main
 *            thread writes armed behind an after-40-calls trigger, while 4 threads read the
 *            armed temperature until it applies: the calls of all four fire the trigger, and
 *            every waiter, asleep in its wait, receives every armed Xid once, in order.
 *
 * Every answer is compared with a snapshot taken single-threaded before the threads
 * start (and with MOCK_FABRIC_CLUSTER_UUID / MOCK_FABRIC_CLIQUE_ID when they are set).
 * The last line is a summary the tests read:
 *
 *   ok threads=16 rounds=R gpus=N calls=C timeouts=T mismatches=0
 *
 * preceded by one line on the live phase: live events=E delivered=D reads=R lost=L (R reads of
 * the GPU lost and found, L of them answered lost), and one on the armed phase: armed
 * events=E waiters=W delivered=D calls=C (C reads by the callers, at least the trigger's 40)
 *
 *   threads STATE [ROUNDS]      (exit 0 clean, 1 a wrong answer, 2 usage or setup)
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef NVML_NO_UNVERSIONED_FUNC_DEFS
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#endif
#include <nvml.h>

#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>

#include "live_layout.h"

/* The live layer's writer primitives (live.c; exported by the library). */
int nvml_mock_live_write(void *base, size_t len, unsigned int gpu, unsigned int n, const unsigned int *slots,
                         const uint64_t *values, const unsigned char *set);
uint64_t nvml_mock_live_event(void *base, size_t len, unsigned int gpu, uint64_t type, uint64_t data);

#define THREADS 16
#define MAX_GPUS 64
#define WAIT_EVERY 25
#define WAIT_MS 1

struct snapshot {
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    nvmlMemory_t mem;
    nvmlMemory_v2_t mem2;
    nvmlReturn_t fabric_rc;
    nvmlGpuFabricInfo_t fabric1;
    nvmlGpuFabricInfo_v3_t fabric3;
    unsigned int link_count;
    unsigned long long supported_events;
};

static struct snapshot expected[MAX_GPUS];
static unsigned int gpu_count;
static int rounds = 300;
static int phase;
static nvmlEventSet_t shared_set;
static char corrupt_path[4096];
static atomic_ulong calls;
static atomic_ulong timeouts;
static atomic_ulong mismatches;

static void mismatch(long id, int line, const char *what, nvmlReturn_t rc)
{
    if (atomic_fetch_add(&mismatches, 1) < 20) {
        fprintf(stderr, "thread %ld phase %d line %d: %s (rc=%d %s)\n", id, phase, line, what, (int)rc,
                nvmlErrorString(rc));
    }
}

#define EXPECT(cond, rc)                                   \
    do {                                                   \
        atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed); \
        if (!(cond)) {                                     \
            mismatch(id, __LINE__, #cond, (rc));           \
        }                                                  \
    } while (0)

static int take_snapshot(void)
{
    if (nvmlDeviceGetCount_v2(&gpu_count) != NVML_SUCCESS || gpu_count == 0 || gpu_count > MAX_GPUS) {
        return -1;
    }
    for (unsigned int i = 0; i < gpu_count; i++) {
        struct snapshot *s = &expected[i];
        nvmlDevice_t d = NULL;
        nvmlPciInfo_t pci;
        s->mem2.version = nvmlMemory_v2;
        s->fabric3.version = nvmlGpuFabricInfo_v3;
        nvmlFieldValue_t fv = {.fieldId = NVML_FI_DEV_NVLINK_LINK_COUNT};
        if (nvmlDeviceGetHandleByIndex_v2(i, &d) != NVML_SUCCESS ||
            nvmlDeviceGetName(d, s->name, sizeof(s->name)) != NVML_SUCCESS ||
            nvmlDeviceGetUUID(d, s->uuid, sizeof(s->uuid)) != NVML_SUCCESS ||
            nvmlDeviceGetPciInfo_v3(d, &pci) != NVML_SUCCESS ||
            nvmlDeviceGetMemoryInfo(d, &s->mem) != NVML_SUCCESS ||
            nvmlDeviceGetMemoryInfo_v2(d, &s->mem2) != NVML_SUCCESS ||
            nvmlDeviceGetSupportedEventTypes(d, &s->supported_events) != NVML_SUCCESS ||
            nvmlDeviceGetFieldValues(d, 1, &fv) != NVML_SUCCESS || fv.nvmlReturn != NVML_SUCCESS) {
            return -1;
        }
        memcpy(s->bus_id, pci.busId, sizeof(s->bus_id));
        s->link_count = fv.value.uiVal;
        s->fabric_rc = nvmlDeviceGetGpuFabricInfoV(d, (nvmlGpuFabricInfoV_t *)&s->fabric3);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        if (nvmlDeviceGetGpuFabricInfo(d, &s->fabric1) != s->fabric_rc) {
            return -1;
        }
#pragma GCC diagnostic pop
    }
    return 0;
}

static void check_device(long id, unsigned int i, nvmlDevice_t d)
{
    const struct snapshot *s = &expected[i];
    char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    nvmlDevice_t again = NULL;
    nvmlReturn_t rc;

    rc = nvmlDeviceGetName(d, buf, sizeof(buf));
    EXPECT(rc == NVML_SUCCESS && strcmp(buf, s->name) == 0, rc);
    rc = nvmlDeviceGetUUID(d, buf, sizeof(buf));
    EXPECT(rc == NVML_SUCCESS && strcmp(buf, s->uuid) == 0, rc);
    rc = nvmlDeviceGetHandleByUUID(s->uuid, &again);
    EXPECT(rc == NVML_SUCCESS && again == d, rc);
    rc = nvmlDeviceGetHandleByPciBusId_v2(s->bus_id, &again);
    EXPECT(rc == NVML_SUCCESS && again == d, rc);
    unsigned int index = MAX_GPUS;
    rc = nvmlDeviceGetIndex(d, &index);
    EXPECT(rc == NVML_SUCCESS && index == i, rc);

    nvmlMemory_t mem;
    nvmlMemory_v2_t mem2 = {.version = nvmlMemory_v2};
    rc = nvmlDeviceGetMemoryInfo(d, &mem);
    EXPECT(rc == NVML_SUCCESS && memcmp(&mem, &s->mem, sizeof(mem)) == 0, rc);
    rc = nvmlDeviceGetMemoryInfo_v2(d, &mem2);
    EXPECT(rc == NVML_SUCCESS && memcmp(&mem2, &s->mem2, sizeof(mem2)) == 0 &&
               mem2.free + mem2.used + mem2.reserved == mem2.total,
           rc);

    nvmlGpuFabricInfo_v3_t f3 = {.version = nvmlGpuFabricInfo_v3};
    nvmlGpuFabricInfoV_t f2 = {.version = nvmlGpuFabricInfo_v2};
    nvmlGpuFabricInfo_t f1;
    memset(&f1, 0, sizeof(f1)); /* compared whole, padding included */
    rc = nvmlDeviceGetGpuFabricInfoV(d, (nvmlGpuFabricInfoV_t *)&f3);
    EXPECT(rc == s->fabric_rc && (rc != NVML_SUCCESS || memcmp(&f3, &s->fabric3, sizeof(f3)) == 0), rc);
    rc = nvmlDeviceGetGpuFabricInfoV(d, &f2);
    EXPECT(rc == s->fabric_rc && (rc != NVML_SUCCESS || (f2.cliqueId == s->fabric3.cliqueId &&
                                                         f2.state == s->fabric3.state &&
                                                         memcmp(f2.clusterUuid, s->fabric3.clusterUuid, 16) == 0)),
           rc);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    rc = nvmlDeviceGetGpuFabricInfo(d, &f1);
#pragma GCC diagnostic pop
    EXPECT(rc == s->fabric_rc && (rc != NVML_SUCCESS || memcmp(&f1, &s->fabric1, sizeof(f1)) == 0), rc);

    nvmlEnableState_t active = NVML_FEATURE_DISABLED;
    unsigned int link = (unsigned int)id % NVML_NVLINK_MAX_LINKS;
    rc = nvmlDeviceGetNvLinkState(d, link, &active);
    EXPECT(link < s->link_count ? rc == NVML_SUCCESS && active == NVML_FEATURE_ENABLED
                                : rc != NVML_SUCCESS || active == NVML_FEATURE_DISABLED,
           rc);

    nvmlFieldValue_t values[3] = {
        {.fieldId = NVML_FI_DEV_NVLINK_LINK_COUNT},
        {.fieldId = NVML_FI_DEV_ECC_CURRENT},
        {.fieldId = NVML_FI_DEV_POWER_INSTANT},
    };
    rc = nvmlDeviceGetFieldValues(d, 3, values);
    EXPECT(rc == NVML_SUCCESS && values[0].nvmlReturn == NVML_SUCCESS && values[0].value.uiVal == s->link_count, rc);
}

static void event_round(long id, nvmlDevice_t d, unsigned int i)
{
    nvmlEventSet_t own = NULL;
    nvmlEventData_t data;
    nvmlReturn_t rc = nvmlEventSetCreate(&own);
    EXPECT(rc == NVML_SUCCESS, rc);
    if (rc != NVML_SUCCESS) {
        return;
    }
    rc = nvmlDeviceRegisterEvents(d, expected[i].supported_events, own);
    EXPECT(rc == NVML_SUCCESS, rc);
    rc = nvmlEventSetWait_v2(own, &data, WAIT_MS);
    EXPECT(rc == NVML_ERROR_TIMEOUT, rc);
    atomic_fetch_add(&timeouts, rc == NVML_ERROR_TIMEOUT);
    if (phase == 1) {
        rc = nvmlEventSetWait_v2(shared_set, &data, WAIT_MS);
        EXPECT(rc == NVML_ERROR_TIMEOUT, rc);
        atomic_fetch_add(&timeouts, rc == NVML_ERROR_TIMEOUT);
    }
    rc = nvmlEventSetFree(own);
    EXPECT(rc == NVML_SUCCESS, rc);
}

/* Phase 3: init fails with the parser's reason; the string must name the file and line. */
static void *failing_worker(void *arg)
{
    long id = (long)arg;
    for (int r = 0; r < rounds; r++) {
        nvmlReturn_t rc = nvmlInit_v2();
        EXPECT(rc == NVML_ERROR_INVALID_STATE, rc);
        const char *msg = nvmlErrorString(NVML_ERROR_INVALID_STATE);
        EXPECT(msg != NULL && strstr(msg, "corrupt GPU state") != NULL && strstr(msg, "line 2") != NULL &&
                   strstr(msg, corrupt_path) != NULL,
               rc);
        rc = nvmlShutdown();
        EXPECT(rc == NVML_ERROR_UNINITIALIZED, rc);
    }
    return NULL;
}

static void *worker(void *arg)
{
    long id = (long)arg;
    for (int r = 0; r < rounds; r++) {
        nvmlReturn_t rc = nvmlInit_v2();
        EXPECT(rc == NVML_SUCCESS, rc);
        if (rc != NVML_SUCCESS) {
            continue;
        }
        unsigned int n = 0;
        rc = nvmlDeviceGetCount_v2(&n);
        EXPECT(rc == NVML_SUCCESS && n == gpu_count, rc);
        unsigned int i = (unsigned int)(id + r) % gpu_count;
        nvmlDevice_t d = NULL;
        rc = nvmlDeviceGetHandleByIndex_v2(i, &d);
        EXPECT(rc == NVML_SUCCESS, rc);
        if (rc == NVML_SUCCESS) {
            check_device(id, i, d);
            if (r % WAIT_EVERY == (int)(id % WAIT_EVERY)) {
                event_round(id, d, i);
            }
        }
        const char *msg = nvmlErrorString(NVML_ERROR_TIMEOUT);
        EXPECT(msg != NULL && msg[0] != '\0', NVML_SUCCESS);
        rc = nvmlShutdown();
        EXPECT(rc == NVML_SUCCESS, rc);
    }
    return NULL;
}

/* All threads block on one set; nvmlEventSetFree must wake them and wait for them to leave. */
static pthread_barrier_t waiters_ready;
static nvmlEventSet_t doomed_set;

static void *blocked_waiter(void *arg)
{
    long id = (long)arg;
    nvmlEventData_t data;
    pthread_barrier_wait(&waiters_ready);
    nvmlReturn_t rc = nvmlEventSetWait_v2(doomed_set, &data, 60000);
    EXPECT(rc == NVML_ERROR_TIMEOUT, rc);
    atomic_fetch_add(&timeouts, rc == NVML_ERROR_TIMEOUT);
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int free_under_waiters(void)
{
    long id = -1;
    pthread_t tid[THREADS];
    nvmlReturn_t rc = nvmlInit_v2();
    EXPECT(rc == NVML_SUCCESS, rc);
    rc = nvmlEventSetCreate(&doomed_set);
    EXPECT(rc == NVML_SUCCESS, rc);
    if (rc != NVML_SUCCESS || pthread_barrier_init(&waiters_ready, NULL, THREADS + 1) != 0) {
        return -1;
    }
    for (long t = 0; t < THREADS; t++) {
        if (pthread_create(&tid[t], NULL, blocked_waiter, (void *)t) != 0) {
            return -1;
        }
    }
    pthread_barrier_wait(&waiters_ready);
    struct timespec settle = {1, 0}; /* let every waiter reach its wait */
    nanosleep(&settle, NULL);
    double start = now_s();
    rc = nvmlEventSetFree(doomed_set);
    EXPECT(rc == NVML_SUCCESS, rc);
    for (int t = 0; t < THREADS; t++) {
        pthread_join(tid[t], NULL);
    }
    EXPECT(now_s() - start < 30.0, NVML_SUCCESS);
    pthread_barrier_destroy(&waiters_ready);
    rc = nvmlShutdown();
    EXPECT(rc == NVML_SUCCESS, rc);
    return 0;
}

/* Every thread calls on one shared event set (even threads) or on a GPM sample of its own (odd
 * ones: a sample is the caller's buffer, so two threads filling one would race in the
 * caller) in a loop while the main thread frees them all: a call that takes its handle before the free answers as
 * on a live one, one after it INVALID_ARGUMENT. A call racing the free must never touch the
 * freed memory (TSan reports such an access). */
#define FREE_ROUNDS 40
static nvmlEventSet_t racing_set;
static nvmlGpmSample_t racing_samples[THREADS];
static nvmlDevice_t racing_device;
static atomic_ulong racing_calls; /* made by the callers; how many varies, so not in `calls` */
static atomic_ulong racing_ended; /* callers whose call answered INVALID_ARGUMENT */

/* Samples into the racing sample until it is gone: SUCCESS on a GPM board, NOT_SUPPORTED on
 * an older one, the same answer every time. */
static void *racing_sampler(long id)
{
    nvmlReturn_t live = NVML_ERROR_UNKNOWN;
    for (;;) {
        nvmlReturn_t rc = nvmlGpmSampleGet(racing_device, racing_samples[id]);
        atomic_fetch_add(&racing_calls, 1);
        if (rc == NVML_ERROR_INVALID_ARGUMENT) {
            atomic_fetch_add(&racing_ended, 1);
            return NULL;
        }
        if (live == NVML_ERROR_UNKNOWN && (rc == NVML_SUCCESS || rc == NVML_ERROR_NOT_SUPPORTED)) {
            live = rc;
        }
        if (rc != live) {
            mismatch(id, __LINE__, "a sample into one being freed: live answer or INVALID_ARGUMENT", rc);
            return NULL;
        }
    }
}

static void *racing_caller(void *arg)
{
    long id = (long)arg;
    nvmlEventData_t data;
    pthread_barrier_wait(&waiters_ready);
    if (id % 2) {
        return racing_sampler(id);
    }
    for (unsigned long k = 0;; k++) {
        nvmlReturn_t rc = k % 2 ? nvmlEventSetWait_v2(racing_set, &data, 0)
                                : nvmlDeviceRegisterEvents(racing_device, nvmlEventTypeXidCriticalError, racing_set);
        atomic_fetch_add(&racing_calls, 1);
        if (rc == NVML_ERROR_INVALID_ARGUMENT) {
            atomic_fetch_add(&racing_ended, 1);
            return NULL;
        }
        if (rc != (k % 2 ? NVML_ERROR_TIMEOUT : NVML_SUCCESS)) {
            mismatch(id, __LINE__, "a call on a set being freed: live answer or INVALID_ARGUMENT", rc);
            return NULL;
        }
    }
}

static int free_under_callers(void)
{
    long id = -1;
    pthread_t tid[THREADS];
    nvmlReturn_t rc = nvmlInit_v2();
    EXPECT(rc == NVML_SUCCESS, rc);
    rc = nvmlDeviceGetHandleByIndex_v2(0, &racing_device);
    EXPECT(rc == NVML_SUCCESS, rc);
    for (int round = 0; round < FREE_ROUNDS; round++) {
        for (int t = 1; t < THREADS; t += 2) {
            rc = nvmlGpmSampleAlloc(&racing_samples[t]);
            EXPECT(rc == NVML_SUCCESS, rc);
        }
        rc = nvmlEventSetCreate(&racing_set);
        EXPECT(rc == NVML_SUCCESS, rc);
        if (rc != NVML_SUCCESS || pthread_barrier_init(&waiters_ready, NULL, THREADS + 1) != 0) {
            return -1;
        }
        for (long t = 0; t < THREADS; t++) {
            if (pthread_create(&tid[t], NULL, racing_caller, (void *)t) != 0) {
                return -1;
            }
        }
        pthread_barrier_wait(&waiters_ready);
        /* free at a different point of the callers' loops each round */
        struct timespec settle = {0, 20000L * (round % 10)};
        nanosleep(&settle, NULL);
        rc = nvmlEventSetFree(racing_set);
        EXPECT(rc == NVML_SUCCESS, rc);
        for (int t = 1; t < THREADS; t += 2) {
            rc = nvmlGpmSampleFree(racing_samples[t]);
            EXPECT(rc == NVML_SUCCESS, rc);
        }
        for (int t = 0; t < THREADS; t++) {
            pthread_join(tid[t], NULL);
        }
        pthread_barrier_destroy(&waiters_ready);
        rc = nvmlEventSetFree(racing_set); /* the handle names no set now */
        EXPECT(rc == NVML_ERROR_INVALID_ARGUMENT, rc);
        nvmlEventData_t data;
        rc = nvmlEventSetWait_v2(racing_set, &data, 0);
        EXPECT(rc == NVML_ERROR_INVALID_ARGUMENT, rc);
        for (int t = 1; t < THREADS; t += 2) {
            rc = nvmlGpmSampleFree(racing_samples[t]);
            EXPECT(rc == NVML_ERROR_INVALID_ARGUMENT, rc);
            rc = nvmlGpmSampleGet(racing_device, racing_samples[t]);
            EXPECT(rc == NVML_ERROR_INVALID_ARGUMENT, rc);
        }
    }
    rc = nvmlShutdown();
    EXPECT(rc == NVML_SUCCESS, rc);
    printf("free rounds=%d calls=%lu ended=%lu\n", FREE_ROUNDS, atomic_load(&racing_calls),
           atomic_load(&racing_ended));
    return 0;
}

/* --- the live layer both live phases write: one file each, as the Python writer lays it out -- */

/* A live layer for the snapshot's GPUs (layout from live_layout.h, every value unset) at
 * DIR/nvml-mock-threads-WHAT-PID (into PATH), mapped for writing and named by MOCK_NVML_LIVE.
 * Called while no other thread runs; NULL (said on stderr) when it cannot be written. */
static unsigned char *live_open(const char *dir, const char *what, char *path, size_t size)
{
    snprintf(path, size, "%s/nvml-mock-threads-%s-%d", dir, what, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)LIVE_TOTAL_BYTES) != 0) {
        fprintf(stderr, "cannot write the live layer %s\n", path);
        return NULL;
    }
    unsigned char *base = mmap(NULL, LIVE_TOTAL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        fprintf(stderr, "cannot map the live layer %s\n", path);
        return NULL;
    }
    live_layout_init(base, gpu_count);
    for (unsigned int i = 0; i < gpu_count; i++) {
        snprintf((char *)base + LIVE_RECORDS_OFFSET + (size_t)i * LIVE_RECORD_BYTES + LIVE_RECORD_UUID,
                 LIVE_RECORD_UUID_BYTES, "%s", expected[i].uuid);
    }
    setenv("MOCK_NVML_LIVE", path, 1);
    return base;
}

/* The end of a live phase: the library no longer finds the layer; the file goes. */
static void live_close(unsigned char *base, const char *path)
{
    unsetenv("MOCK_NVML_LIVE");
    munmap(base, LIVE_TOTAL_BYTES);
    unlink(path);
}

/* One key of one GPU, through the library's writer primitive. */
static int live_set(unsigned char *base, unsigned int gpu, unsigned int slot, uint64_t value)
{
    unsigned char set = 1;
    return nvml_mock_live_write(base, LIVE_TOTAL_BYTES, gpu, 1, &slot, &value, &set);
}

/* --- phase 4: the live layer and its patterned GPUs ----------------------------------------- */

#define SLOT_UTIL_PATTERN 70u
#define SLOT_UTIL_PATTERN_SEED 73u
#define SLOT_UTIL_PATTERN_EPOCH 74u
#define SLOT_TEMPERATURE_LAG 90u

static void *pattern_worker(void *arg)
{
    long id = (long)arg;
    unsigned long long last[MAX_GPUS] = {0};
    for (int r = 0; r < rounds; r++) {
        nvmlReturn_t rc = nvmlInit_v2();
        EXPECT(rc == NVML_SUCCESS, rc);
        if (rc != NVML_SUCCESS) {
            continue;
        }
        unsigned int i = (unsigned int)(id + r) % gpu_count;
        nvmlDevice_t d = NULL;
        EXPECT(nvmlDeviceGetHandleByIndex_v2(i, &d) == NVML_SUCCESS, NVML_SUCCESS);
        for (int k = 0; k < 20 && d != NULL; k++) {
            nvmlUtilization_t util;
            unsigned long long energy = 0;
            rc = nvmlDeviceGetUtilizationRates(d, &util);
            EXPECT(rc == NVML_SUCCESS && util.gpu >= 90 && util.gpu <= 100, rc);
            rc = nvmlDeviceGetTotalEnergyConsumption(d, &energy);
            EXPECT(rc == NVML_SUCCESS && energy >= last[i], rc);
            last[i] = energy;
            nvmlTemperature_t temp = {.version = nvmlTemperature_v1, .sensorType = NVML_TEMPERATURE_GPU};
            rc = nvmlDeviceGetTemperatureV(d, &temp);
            EXPECT(rc == NVML_SUCCESS && temp.temperature > 0, rc);
        }
        EXPECT(nvmlShutdown() == NVML_SUCCESS, NVML_SUCCESS);
    }
    return NULL;
}

static int pattern_phase(const char *dir)
{
    long id = -1;
    char path[4200];
    unsigned char *rw = live_open(dir, "pattern", path, sizeof(path));
    if (rw == NULL) {
        return -1;
    }
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    uint64_t now_ms = (uint64_t)wall.tv_sec * 1000u + (uint64_t)wall.tv_nsec / 1000000u;
    for (unsigned int i = 0; i < gpu_count; i++) {
        EXPECT(live_set(rw, i, SLOT_UTIL_PATTERN_EPOCH, now_ms - 10000) == 0, NVML_SUCCESS);
        EXPECT(live_set(rw, i, SLOT_UTIL_PATTERN, 2) == 0, NVML_SUCCESS);
    }
    pthread_t tid[THREADS];
    phase = 4;
    for (long t = 0; t < THREADS; t++) {
        if (pthread_create(&tid[t], NULL, pattern_worker, (void *)t) != 0) {
            return -1;
        }
    }
    /* rewrite what does not move energy while the readers run */
    for (uint64_t k = 1; k <= (uint64_t)rounds * 4; k++) {
        unsigned int i = (unsigned int)(k % gpu_count);
        EXPECT(live_set(rw, i, k % 2 ? SLOT_UTIL_PATTERN_SEED : SLOT_TEMPERATURE_LAG, k) == 0, NVML_SUCCESS);
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(tid[t], NULL);
    }
    live_close(rw, path);
    return 0;
}

/* --- the live phase: events through the ring, a GPU lost and found under a reader ---------- */

#define LIVE_EVENTS 200
#define OWN_WAITERS 12
#define SHARED_WAITERS 4
#define SLOT_GPU_LOST 64u /* keys.toml: gpu_lost */

static nvmlDevice_t live_device;
static nvmlDevice_t lost_device;
static nvmlEventSet_t live_shared;
static pthread_barrier_t live_ready;
static atomic_ulong delivered;
static atomic_ulong lost_answers;
static atomic_ulong lost_reads;
static atomic_int writer_done;

static int event_is(const nvmlEventData_t *e, unsigned long long xid)
{
    return e->device == live_device && e->eventType == nvmlEventTypeXidCriticalError && e->eventData == xid &&
           e->gpuInstanceId == 0xFFFFFFFFu && e->computeInstanceId == 0xFFFFFFFFu;
}

/* Its own set on live_device, registered before `ready` opens: the Xids first + 1 … first +
 * count, each once, in the order written. Returns how many it received. */
static unsigned long own_set_receives(long id, pthread_barrier_t *ready, unsigned long long first,
                                      unsigned long long count)
{
    unsigned long got = 0;
    nvmlEventSet_t own = NULL;
    nvmlReturn_t rc = nvmlEventSetCreate(&own);
    EXPECT(rc == NVML_SUCCESS, rc);
    rc = nvmlDeviceRegisterEvents(live_device, nvmlEventTypeXidCriticalError, own);
    EXPECT(rc == NVML_SUCCESS, rc);
    pthread_barrier_wait(ready);
    for (unsigned long long k = 1; k <= count; k++) {
        nvmlEventData_t e;
        rc = nvmlEventSetWait_v2(own, &e, 60000);
        EXPECT(rc == NVML_SUCCESS && event_is(&e, first + k), rc);
        got += rc == NVML_SUCCESS;
    }
    rc = nvmlEventSetFree(own);
    EXPECT(rc == NVML_SUCCESS, rc);
    return got;
}

/* Its own set: every event, in the order written. */
static void *own_waiter(void *arg)
{
    (void)own_set_receives((long)arg, &live_ready, 0, LIVE_EVENTS);
    return NULL;
}

/* One set shared by several threads: each event reaches one of them; the free ends them. */
static void *shared_waiter(void *arg)
{
    long id = (long)arg;
    pthread_barrier_wait(&live_ready);
    for (;;) {
        nvmlEventData_t e;
        nvmlReturn_t rc = nvmlEventSetWait_v2(live_shared, &e, 60000);
        if (rc == NVML_ERROR_TIMEOUT || rc == NVML_ERROR_INVALID_ARGUMENT) {
            /* the free ended it: inside the wait (TIMEOUT) or before the call took the set;
             * counted among the timeouts either way, since which one is up to the scheduler */
            EXPECT(rc == NVML_ERROR_TIMEOUT || rc == NVML_ERROR_INVALID_ARGUMENT, rc);
            atomic_fetch_add(&timeouts, 1);
            return NULL;
        }
        EXPECT(rc == NVML_SUCCESS && e.device == live_device && e.eventData >= 1 && e.eventData <= LIVE_EVENTS, rc);
        atomic_fetch_add(&delivered, 1);
    }
}

/* Reads the GPU whose gpu_lost key the writer toggles, until the writer is done (so the
 * number of reads varies: they are counted apart from `calls`). */
static void *lost_reader(void *arg)
{
    long id = (long)arg;
    pthread_barrier_wait(&live_ready);
    while (!atomic_load(&writer_done)) {
        nvmlMemory_v2_t mem = {.version = nvmlMemory_v2};
        nvmlReturn_t rc = nvmlDeviceGetMemoryInfo_v2(lost_device, &mem);
        if (rc != NVML_SUCCESS && rc != NVML_ERROR_GPU_IS_LOST) {
            mismatch(id, __LINE__, "GetMemoryInfo_v2 on a GPU lost and found", rc);
        }
        atomic_fetch_add(&lost_reads, 1);
        atomic_fetch_add(&lost_answers, rc == NVML_ERROR_GPU_IS_LOST);
    }
    return NULL;
}

static int live_phase(const char *dir)
{
    long id = -2;
    char path[4200];
    unsigned char *rw = live_open(dir, "events", path, sizeof(path));
    if (rw == NULL) {
        return -1;
    }
    phase = 5; /* "live" in the header; only mismatch reports show it */
    nvmlReturn_t rc = nvmlInit_v2();
    EXPECT(rc == NVML_SUCCESS, rc);
    rc = nvmlDeviceGetHandleByIndex_v2(0, &live_device);
    EXPECT(rc == NVML_SUCCESS, rc);
    rc = nvmlDeviceGetHandleByIndex_v2(gpu_count - 1, &lost_device);
    EXPECT(rc == NVML_SUCCESS, rc);
    rc = nvmlEventSetCreate(&live_shared);
    EXPECT(rc == NVML_SUCCESS, rc);
    rc = nvmlDeviceRegisterEvents(live_device, nvmlEventTypeXidCriticalError, live_shared);
    EXPECT(rc == NVML_SUCCESS, rc);
    pthread_t tid[OWN_WAITERS + SHARED_WAITERS + 1];
    unsigned int n = 0;
    if (pthread_barrier_init(&live_ready, NULL, OWN_WAITERS + SHARED_WAITERS + 2) != 0) {
        return -1;
    }
    for (long t = 0; t < OWN_WAITERS; t++) {
        pthread_create(&tid[n++], NULL, own_waiter, (void *)t);
    }
    for (long t = 0; t < SHARED_WAITERS; t++) {
        pthread_create(&tid[n++], NULL, shared_waiter, (void *)(OWN_WAITERS + t));
    }
    pthread_create(&tid[n++], NULL, lost_reader, (void *)(long)(OWN_WAITERS + SHARED_WAITERS));
    pthread_barrier_wait(&live_ready);
    for (unsigned long long k = 1; k <= LIVE_EVENTS; k++) {
        EXPECT(nvml_mock_live_event(rw, LIVE_TOTAL_BYTES, 0, nvmlEventTypeXidCriticalError, k) != 0, NVML_SUCCESS);
        EXPECT(live_set(rw, gpu_count - 1, SLOT_GPU_LOST, k % 2) == 0, NVML_SUCCESS);
        if (k % 8 < 2) {
            /* let the waiters reach FUTEX_WAIT now and then, with the GPU lost or found */
            struct timespec pause = {0, 1000000};
            nanosleep(&pause, NULL);
        }
    }
    atomic_store(&writer_done, 1);
    /* Every event delivered, then the free under the shared waiters: each is inside its
     * wait (woken through the ring's futex, TIMEOUT) or about to call (INVALID_ARGUMENT). */
    while (atomic_load(&delivered) < LIVE_EVENTS) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    rc = nvmlEventSetFree(live_shared);
    EXPECT(rc == NVML_SUCCESS, rc);
    for (unsigned int t = 0; t < n; t++) {
        pthread_join(tid[t], NULL);
    }
    pthread_barrier_destroy(&live_ready);
    rc = nvmlShutdown();
    EXPECT(rc == NVML_SUCCESS, rc);
    live_close(rw, path);
    printf("live events=%d delivered=%lu reads=%lu lost=%lu\n", LIVE_EVENTS, atomic_load(&delivered),
           atomic_load(&lost_reads), atomic_load(&lost_answers));
    return 0;
}

/* --- the armed phase: events that wait for the trigger the callers' calls fire ------------- */

#define TSAN_SLOT(key, slot, ...) TSAN_SLOT_##key = (slot),
enum { LIVE_GPU_KEYS(TSAN_SLOT) LIVE_ONLY_GPU_KEYS(TSAN_SLOT) };
#define ARMED_WAITERS 8
#define ARMED_CALLERS 4
#define ARMED_EVENTS 4
#define ARMED_AFTER 40 /* calls, counted in this process: the callers share the count */
#define ARMED_TAG 0x5EEDull
#define ARMED_CELSIUS 95u
#define ARMED_XID0 1000u

static pthread_barrier_t armed_ready;
static atomic_int armed_written;
static atomic_ulong armed_delivered;
static atomic_ulong armed_calls;

/* Its own set, registered before the fault is written: every armed Xid once, in order, once
 * the callers' calls fire the trigger (the wait is asleep then: its slice ends it). */
static void *armed_waiter(void *arg)
{
    atomic_fetch_add(&armed_delivered, own_set_receives((long)arg, &armed_ready, ARMED_XID0, ARMED_EVENTS));
    return NULL;
}

/* Reads the armed temperature until it applies (the number of reads varies with the race
 * for the count: they are counted apart from `calls`). */
static void *armed_caller(void *arg)
{
    long id = (long)arg;
    pthread_barrier_wait(&armed_ready);
    while (!atomic_load(&armed_written)) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    for (;;) {
        nvmlTemperature_t t = {.version = nvmlTemperature_v1, .sensorType = NVML_TEMPERATURE_GPU};
        nvmlReturn_t rc = nvmlDeviceGetTemperatureV(live_device, &t);
        atomic_fetch_add(&armed_calls, 1);
        if (rc != NVML_SUCCESS) {
            mismatch(id, __LINE__, "GetTemperatureV of a GPU with an armed fault", rc);
            return NULL;
        }
        if (t.temperature == (int)ARMED_CELSIUS) {
            return NULL;
        }
    }
}

static int armed_phase(const char *dir)
{
    long id = -3;
    char path[4200];
    unsigned char *rw = live_open(dir, "armed", path, sizeof(path));
    if (rw == NULL) {
        return -1;
    }
    phase = 6; /* "armed" in the header */
    nvmlReturn_t rc = nvmlInit_v2();
    EXPECT(rc == NVML_SUCCESS, rc);
    rc = nvmlDeviceGetHandleByIndex_v2(0, &live_device);
    EXPECT(rc == NVML_SUCCESS, rc);
    pthread_t tid[ARMED_WAITERS + ARMED_CALLERS];
    unsigned int n = 0;
    if (pthread_barrier_init(&armed_ready, NULL, ARMED_WAITERS + ARMED_CALLERS + 1) != 0) {
        return -1;
    }
    for (long t = 0; t < ARMED_WAITERS; t++) {
        pthread_create(&tid[n++], NULL, armed_waiter, (void *)t);
    }
    for (long t = 0; t < ARMED_CALLERS; t++) {
        pthread_create(&tid[n++], NULL, armed_caller, (void *)(ARMED_WAITERS + t));
    }
    pthread_barrier_wait(&armed_ready);
    /* the writer's order: the trigger with its arm, the value armed behind it, the events */
    const unsigned int trigger_slots[] = {TSAN_SLOT_fault_trigger, TSAN_SLOT_fault_trigger_param,
                                          TSAN_SLOT_fault_trigger_arm};
    const uint64_t trigger_values[] = {1u /* after-calls */, ARMED_AFTER, ARMED_TAG};
    const unsigned char set3[] = {1, 1, 1};
    EXPECT(nvml_mock_live_write(rw, LIVE_TOTAL_BYTES, 0, 3, trigger_slots, trigger_values, set3) == 0, NVML_SUCCESS);
    const unsigned int temp_slot = TSAN_SLOT_temperature_c;
    const uint64_t celsius = ARMED_CELSIUS;
    const unsigned char armed = 2;
    EXPECT(nvml_mock_live_write(rw, LIVE_TOTAL_BYTES, 0, 1, &temp_slot, &celsius, &armed) == 0, NVML_SUCCESS);
    for (unsigned long long k = 1; k <= ARMED_EVENTS; k++) {
        uint64_t type = nvmlEventTypeXidCriticalError | ARMED_TAG << 32;
        EXPECT(nvml_mock_live_event(rw, LIVE_TOTAL_BYTES, 0, type, ARMED_XID0 + k) != 0, NVML_SUCCESS);
    }
    atomic_store(&armed_written, 1);
    for (unsigned int t = 0; t < n; t++) {
        pthread_join(tid[t], NULL);
    }
    pthread_barrier_destroy(&armed_ready);
    rc = nvmlShutdown();
    EXPECT(rc == NVML_SUCCESS, rc);
    live_close(rw, path);
    printf("armed events=%d waiters=%d delivered=%lu calls=%lu\n", ARMED_EVENTS, ARMED_WAITERS,
           atomic_load(&armed_delivered), atomic_load(&armed_calls));
    return 0;
}

static int run_phase(int which)
{
    pthread_t tid[THREADS];
    phase = which;
    for (long t = 0; t < THREADS; t++) {
        if (pthread_create(&tid[t], NULL, which == 3 ? failing_worker : worker, (void *)t) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return -1;
        }
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(tid[t], NULL);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3 || (argc == 3 && (rounds = atoi(argv[2])) <= 0)) {
        fprintf(stderr, "usage: %s STATE [ROUNDS]\n", argv[0]);
        return 2;
    }
    setenv("MOCK_NVML_CONFIG", argv[1], 1);
    nvmlReturn_t rc = nvmlInit_v2();
    if (rc != NVML_SUCCESS) {
        fprintf(stderr, "nvmlInit_v2: %s\n", nvmlErrorString(rc));
        return 2;
    }
    if (take_snapshot() != 0 || nvmlEventSetCreate(&shared_set) != NVML_SUCCESS) {
        fprintf(stderr, "snapshot of the state failed\n");
        return 2;
    }
    long id = -1;
    nvmlDevice_t d0 = NULL;
    EXPECT(nvmlDeviceGetHandleByIndex_v2(0, &d0) == NVML_SUCCESS, NVML_SUCCESS);
    EXPECT(nvmlDeviceRegisterEvents(d0, expected[0].supported_events, shared_set) == NVML_SUCCESS, NVML_SUCCESS);

    if (run_phase(1) != 0) {
        return 2;
    }
    EXPECT(nvmlEventSetFree(shared_set) == NVML_SUCCESS, NVML_SUCCESS);
    EXPECT(nvmlShutdown() == NVML_SUCCESS, NVML_SUCCESS);
    if (run_phase(2) != 0) {
        return 2;
    }
    /* every reference taken was given back exactly once */
    rc = nvmlShutdown();
    EXPECT(rc == NVML_ERROR_UNINITIALIZED, rc);
    nvmlDevice_t stale = NULL;
    rc = nvmlDeviceGetHandleByIndex_v2(0, &stale);
    EXPECT(rc == NVML_ERROR_UNINITIALIZED, rc);

    if (free_under_waiters() != 0 || free_under_callers() != 0) {
        fprintf(stderr, "cannot start the event waiters\n");
        return 2;
    }

    const char *tmp = getenv("TMPDIR");
    const char *dir = tmp != NULL && tmp[0] ? tmp : "/tmp";
    if (pattern_phase(dir) != 0 || live_phase(dir) != 0 || armed_phase(dir) != 0) {
        return 2;
    }

    /* phase 3 reads a corrupt copy: the magic line, then a line that is no key=value */
    snprintf(corrupt_path, sizeof(corrupt_path), "%s/nvml-mock-threads-XXXXXX", dir);
    int fd = mkstemp(corrupt_path);
    static const char corrupt[] = "nvml-mock-state 1\nnot a key\n";
    if (fd < 0 || write(fd, corrupt, sizeof(corrupt) - 1) != (ssize_t)(sizeof(corrupt) - 1) || close(fd) != 0) {
        fprintf(stderr, "cannot write the corrupt state\n");
        return 2;
    }
    setenv("MOCK_NVML_CONFIG", corrupt_path, 1); /* no other thread runs now */
    int phase3 = run_phase(3);
    unlink(corrupt_path);
    if (phase3 != 0) {
        return 2;
    }

    unsigned long bad = atomic_load(&mismatches);
    printf("%s threads=%d rounds=%d gpus=%u calls=%lu timeouts=%lu mismatches=%lu\n", bad ? "FAILED" : "ok", THREADS,
           rounds, gpu_count, atomic_load(&calls), atomic_load(&timeouts), bad);
    return bad ? 1 : 0;
}
