/*
 * Device Queries (nvml.h), the memory part: framebuffer and BAR1 memory, and the
 * running-process lists.
 *
 * The unversioned nvmlDeviceGetMemoryInfo keeps its 24-byte layout in which `used`
 * includes the reserved memory; _v2 reports reserved separately and checks its version
 * word. Used memory is the board's (or its live value) plus what the live layer's process
 * records use on the GPU, capped at what the board leaves free. Process lists follow NVML's
 * two-call protocol and come from those records (processes.h): every record is a compute
 * process (type C) on the parent GPU, once per MIG device it holds there with that device's
 * instance ids, else once with both ids 0xFFFFFFFF (no instance); a MIG device's handle lists
 * the entries on that device, and its memory info counts what its records use. Graphics and MPS lists stay empty.
 * Confidential computing is off on every modelled board, so no memory is protected.
 */
#include "answers.h"
#include "mig.h"
#include "mock.h"

#include <string.h>

#include "processes.h"

_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t (v1) is 24 bytes");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t is 40 bytes");

/* Used framebuffer memory: live where set, plus the process records' use, never more than
 * what the board leaves free (the parser checks the board's own values; the rest is
 * clamped here). */
uint64_t mock_memory_used_bytes(const struct nvmlDevice_st *d)
{
    uint64_t used = live_memory_used_bytes(d);
    uint64_t procs = mock_procs_used_bytes(d);
    used = used + procs < used ? UINT64_MAX : used + procs;
    uint64_t room = d->s.memory_total_bytes - d->s.memory_reserved_bytes;
    return used > room ? room : used;
}

/* The board's used memory, without a live layer. */
static inline uint64_t board_used_bytes(const struct nvmlDevice_st *d)
{
    uint64_t room = d->s.memory_total_bytes - d->s.memory_reserved_bytes;
    uint64_t used = live_memory_used_bytes(d); /* (the board's: no live layer) */
    return used > room ? room : used;
}

/* The same from the thread's answers `a` where they are current (answers.h); the board's
 * value without a live layer. */
static inline uint64_t used_bytes(const struct nvmlDevice_st *d, const struct mock_answer *a)
{
    if (__builtin_expect(a != NULL && (a->flags & ANSWER_MEMORY) != 0, 1)) {
        return a->mem_used;
    }
    return d->live == NULL ? board_used_bytes(d) : mock_memory_used_bytes(d);
}

/* What the records holding MIG device `mig` use on it, never more than its memory. */
static uint64_t mig_used_bytes(const struct mock_mig_view *mig, uint64_t total)
{
    uint64_t used = mock_procs_mig_used_bytes(mig->parent, mig->gi_id, mig->ci_id);
    return used > total ? total : used;
}

/* A MIG device's memory: its GPU instance's. Out of the GPU path's line (noinline), so a GPU's
 * call carries none of it. */
static __attribute__((noinline)) nvmlReturn_t mig_memory(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct mock_mig_view mig;
    nvmlReturn_t mig_rc;
    mock_mig_device(device, &mig, &mig_rc);
    REQUIRE_ARG(memory);
    if (mig_rc == NVML_SUCCESS) {
        memory->total = mig.memory_mib << 20;
        memory->used = mig_used_bytes(&mig, memory->total);
        memory->free = memory->total - memory->used;
    }
    return mig_rc;
}

static __attribute__((noinline)) nvmlReturn_t mig_memory_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct mock_mig_view mig;
    nvmlReturn_t mig_rc;
    mock_mig_device(device, &mig, &mig_rc);
    REQUIRE_ARG(memory);
    if (memory->version != nvmlMemory_v2) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (mig_rc == NVML_SUCCESS) {
        memory->total = mig.memory_mib << 20;
        memory->reserved = 0;
        memory->used = mig_used_bytes(&mig, memory->total);
        memory->free = memory->total - memory->used;
    }
    return mig_rc;
}

/* The full paths: every error, MIG devices, and answers computed when none are kept. */
static __attribute__((noinline)) nvmlReturn_t memory_full(nvmlDevice_t device, nvmlMemory_t *memory)
{
    if (mock_mig_handle(device)) { /* a MIG device: its GPU instance's memory */
        return mig_memory(device, memory);
    }
    GET_DEVICE_ANSWERS(device, d, a);
    REQUIRE_ARG(memory);
    uint64_t used = used_bytes(d, a) + d->s.memory_reserved_bytes;
    memory->total = d->s.memory_total_bytes;
    memory->used = used;
    memory->free = d->s.memory_total_bytes - used;
    return NVML_SUCCESS;
}

static __attribute__((noinline)) nvmlReturn_t memory_v2_full(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    if (mock_mig_handle(device)) {
        return mig_memory_v2(device, memory);
    }
    GET_DEVICE_ANSWERS(device, d, a);
    REQUIRE_ARG(memory);
    if (memory->version != nvmlMemory_v2) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    memory->total = d->s.memory_total_bytes;
    memory->reserved = d->s.memory_reserved_bytes;
    uint64_t used = used_bytes(d, a);
    memory->used = used;
    memory->free = d->s.memory_total_bytes - used - d->s.memory_reserved_bytes;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    const struct nvmlDevice_st *d;
    const struct mock_answer *a;
    if (__builtin_expect(mock_fast_device(device, &d, &a) && memory != NULL &&
                             (a == NULL || (a->flags & ANSWER_MEMORY) != 0),
                         1)) {
        uint64_t used = (a != NULL ? a->mem_used : board_used_bytes(d)) + d->s.memory_reserved_bytes;
        memory->total = d->s.memory_total_bytes;
        memory->used = used;
        memory->free = d->s.memory_total_bytes - used;
        return NVML_SUCCESS;
    }
    return memory_full(device, memory);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    const struct nvmlDevice_st *d;
    const struct mock_answer *a;
    if (__builtin_expect(mock_fast_device(device, &d, &a) && memory != NULL && memory->version == nvmlMemory_v2 &&
                             (a == NULL || (a->flags & ANSWER_MEMORY) != 0),
                         1)) {
        uint64_t used = a != NULL ? a->mem_used : board_used_bytes(d);
        memory->total = d->s.memory_total_bytes;
        memory->reserved = d->s.memory_reserved_bytes;
        memory->used = used;
        memory->free = d->s.memory_total_bytes - used - d->s.memory_reserved_bytes;
        return NVML_SUCCESS;
    }
    return memory_v2_full(device, memory);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
    struct mock_mig_view mig;
    nvmlReturn_t mig_rc;
    if (mock_mig_device(device, &mig, &mig_rc)) {
        /* a MIG device's BAR1: its GPU instance's share of the GPU's, less 1 MiB, none in use
         * (a real A100 80GB shows 32767MiB for a 2g.20gb, a quarter of its 131072MiB) */
        REQUIRE_ARG(bar1Memory);
        if (mig_rc == NVML_SUCCESS) {
            uint64_t share = mig.parent->s.bar1_total_bytes / 8u * mig.memory_slices;
            bar1Memory->bar1Total = share > (1u << 20) ? share - (1u << 20) : share;
            bar1Memory->bar1Used = 0;
            bar1Memory->bar1Free = bar1Memory->bar1Total;
        }
        return mig_rc;
    }
    GET_DEVICE(device, d);
    REQUIRE_ARG(bar1Memory);
    bar1Memory->bar1Total = d->s.bar1_total_bytes;
    uint64_t used = live_bar1_used_bytes(d);
    used = used > d->s.bar1_total_bytes ? d->s.bar1_total_bytes : used;
    bar1Memory->bar1Used = used;
    bar1Memory->bar1Free = d->s.bar1_total_bytes - used;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(busWidth);
    *busWidth = d->s.memory_bus_width;
    return NVML_SUCCESS;
}


/* The two-call protocol over the records holding `d`: *count in, the capacity of `infos`;
 * out, the processes there are. Every caller's layout is filled through `fill`, straight into
 * the caller's buffer (no copy of the records is kept). */
struct list_fill {
    void *infos;
    unsigned int cap;
    unsigned int n;
    void (*fill)(void *infos, unsigned int i, const struct mock_proc *p);
};

static void list_one(const struct mock_proc *p, void *arg)
{
    struct list_fill *f = arg;
    if (f->infos != NULL && f->n < f->cap) {
        f->fill(f->infos, f->n, p);
    }
    f->n++;
}

/* The kept list `a` (NULL: no live layer, so no process) in NVML's two-call protocol. */
static inline __attribute__((always_inline)) nvmlReturn_t
kept_list(const struct mock_answer *a, unsigned int *count, void *infos,
          void (*fill)(void *infos, unsigned int i, const struct mock_proc *p))
{
    unsigned int n = a != NULL ? a->nprocs : 0;
    unsigned int cap = *count;
    *count = n;
    if (n > 0 && (infos == NULL || n > cap)) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        fill(infos, i, &a->procs[i]);
    }
    return NVML_SUCCESS;
}

static inline __attribute__((always_inline)) nvmlReturn_t
process_list(const struct nvmlDevice_st *d, const struct mock_answer *a, unsigned int *count, void *infos,
             void (*fill)(void *infos, unsigned int i, const struct mock_proc *p))
{
    if (__builtin_expect(a != NULL && (a->flags & ANSWER_PROCS) != 0, 1)) {
        return kept_list(a, count, infos, fill); /* the thread's copy of the list, current (answers.h) */
    }
    struct list_fill f = {infos, *count, 0, fill};
    if (d->live != NULL && mock_procs_any()) { /* (without a live layer, no record holds it) */
        mock_procs_each(d, list_one, &f);
    }
    unsigned int n = f.n;
    *count = n;
    if (n > 0 && (infos == NULL || n > f.cap)) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    return NVML_SUCCESS;
}

static void fill_v1(void *infos, unsigned int i, const struct mock_proc *p)
{
    nvmlProcessInfo_v1_t *out = (nvmlProcessInfo_v1_t *)infos + i;
    out->pid = p->pid;
    out->usedGpuMemory = p->used_bytes;
}

static void fill_v2(void *infos, unsigned int i, const struct mock_proc *p)
{
    nvmlProcessInfo_v2_t *out = (nvmlProcessInfo_v2_t *)infos + i;
    out->pid = p->pid;
    out->usedGpuMemory = p->used_bytes;
    out->gpuInstanceId = p->gpu_instance;
    out->computeInstanceId = p->compute_instance;
}

static void fill_detail(void *infos, unsigned int i, const struct mock_proc *p)
{
    nvmlProcessDetail_v1_t *out = (nvmlProcessDetail_v1_t *)infos + i;
    out->pid = p->pid;
    out->usedGpuMemory = p->used_bytes;
    out->gpuInstanceId = p->gpu_instance;
    out->computeInstanceId = p->compute_instance;
    out->usedGpuCcProtectedMemory = 0;
}

/* Graphics and MPS processes: none runs on a mock GPU. */
static nvmlReturn_t empty_process_list(nvmlDevice_t device, unsigned int *infoCount, const void *infos)
{
    GET_DEVICE(device, d);
    (void)d;
    (void)infos;
    REQUIRE_ARG(infoCount);
    *infoCount = 0;
    return NVML_SUCCESS;
}

/* A MIG device's list: the parent's entries on its own GPU and compute instance, with their
 * ids, as the real driver lists on a MIG device handle what runs in that instance. */
struct mig_list_fill {
    struct list_fill f;
    unsigned int gi, ci;
};

static void mig_list_one(const struct mock_proc *p, void *arg)
{
    struct mig_list_fill *m = arg;
    if (p->gpu_instance == m->gi && p->compute_instance == m->ci) {
        list_one(p, &m->f);
    }
}

static nvmlReturn_t mig_process_list(const struct mock_mig_view *v, unsigned int *count, void *infos,
                                     void (*fill)(void *infos, unsigned int i, const struct mock_proc *p))
{
    struct mig_list_fill m = {{infos, *count, 0, fill}, v->gi_id, v->ci_id};
    if (mock_procs_any()) {
        mock_procs_each(v->parent, mig_list_one, &m);
    }
    unsigned int n = m.f.n;
    *count = n;
    if (n > 0 && (infos == NULL || n > m.f.cap)) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    return NVML_SUCCESS;
}

/* The kept list's fast path (mock_fast_device, a GPU's handle), else the full one: a MIG
 * device's list, or process_list. */
#define COMPUTE_LIST(fn, type, filler)                                                      \
    static __attribute__((noinline)) nvmlReturn_t fn##_full(nvmlDevice_t device, unsigned int *infoCount, \
                                                            type *infos)                    \
    {                                                                                       \
        struct mock_mig_view mig_;                                                          \
        nvmlReturn_t mig_rc_;                                                               \
        if (mock_mig_device(device, &mig_, &mig_rc_)) {                                     \
            if (mig_rc_ != NVML_SUCCESS) {                                                  \
                return mig_rc_;                                                             \
            }                                                                               \
            REQUIRE_ARG(infoCount);                                                         \
            return mig_process_list(&mig_, infoCount, infos, filler);                       \
        }                                                                                   \
        GET_DEVICE_ANSWERS(device, d, a);                                                   \
        REQUIRE_ARG(infoCount);                                                             \
        return process_list(d, a, infoCount, infos, filler);                                \
    }                                                                                       \
    MOCK_EXPORT nvmlReturn_t fn(nvmlDevice_t device, unsigned int *infoCount, type *infos)   \
    {                                                                                       \
        const struct nvmlDevice_st *d;                                                      \
        const struct mock_answer *a;                                                        \
        if (__builtin_expect(mock_fast_device(device, &d, &a) && infoCount != NULL &&        \
                                 (a == NULL || (a->flags & ANSWER_PROCS) != 0),             \
                             1)) {                                                          \
            return kept_list(a, infoCount, infos, filler);                                  \
        }                                                                                   \
        return fn##_full(device, infoCount, infos);                                         \
    }

#define PROCESS_LIST(fn, type)                                                            \
    MOCK_EXPORT nvmlReturn_t fn(nvmlDevice_t device, unsigned int *infoCount, type *infos) \
    {                                                                                     \
        return empty_process_list(device, infoCount, infos);                              \
    }

_Static_assert(sizeof(nvmlProcessInfo_t) == sizeof(nvmlProcessInfo_v2_t), "v3 entries use the v2 layout");

COMPUTE_LIST(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, fill_v1)
COMPUTE_LIST(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, fill_v2)
COMPUTE_LIST(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t, fill_v2)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t)

/* Compute mode (and "all") lists the records; graphics and MPS modes list none. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device, nvmlProcessDetailList_t *plist)
{
    GET_DEVICE_ANSWERS(device, d, a);
    REQUIRE_ARG(plist);
    if (plist->version != nvmlProcessDetailList_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (plist->mode >= NVML_PROCESS_MODE_MAX) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (plist->mode == NVML_PROCESS_MODE_GRAPHICS || plist->mode == NVML_PROCESS_MODE_MPS) {
        plist->numProcArrayEntries = 0;
        return NVML_SUCCESS;
    }
    return process_list(d, a, &plist->numProcArrayEntries, plist->procArray, fill_detail);
}

/* Process utilization samples, filled straight into the caller's buffer (see list_one). */
struct util_fill {
    nvmlProcessUtilizationSample_t *v0;
    nvmlProcessUtilizationInfo_v1_t *v1;
    unsigned int cap;
    unsigned int n;
    uint64_t now;
};

static void util_one(const struct mock_proc *p, void *arg)
{
    struct util_fill *f = arg;
    if (f->n < f->cap) {
        unsigned int u = mock_proc_util(p);
        unsigned int mem = mock_proc_mem_util(u);
        if (f->v0 != NULL) {
            f->v0[f->n] = (nvmlProcessUtilizationSample_t){.pid = p->pid, .timeStamp = f->now, .smUtil = u, .memUtil = mem};
        } else if (f->v1 != NULL) {
            f->v1[f->n] = (nvmlProcessUtilizationInfo_v1_t){.timeStamp = f->now, .pid = p->pid, .smUtil = u, .memUtil = mem};
        }
    }
    f->n++;
}

/* One sample per process, stamped with the current quantum: NOT_FOUND when there is none or
 * none newer than `lastSeenTimeStamp` (NVML's answer), INSUFFICIENT_SIZE with the count for a
 * NULL or short buffer. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                                         unsigned int *processSamplesCount,
                                                         unsigned long long lastSeenTimeStamp)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(processSamplesCount);
    struct util_fill f = {utilization, NULL, utilization == NULL ? 0 : *processSamplesCount, 0, mock_procs_now_us()};
    if (mock_procs_any() && f.now > lastSeenTimeStamp) {
        mock_procs_each(d, util_one, &f);
    }
    *processSamplesCount = f.n;
    if (f.n == 0) {
        return NVML_ERROR_NOT_FOUND;
    }
    return f.n > f.cap ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

/* The versioned form: no sample newer than lastSeenTimeStamp is a count of 0 and SUCCESS. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                               nvmlProcessesUtilizationInfo_t *procesesUtilInfo)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(procesesUtilInfo);
    if (procesesUtilInfo->version != nvmlProcessesUtilizationInfo_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    nvmlProcessesUtilizationInfo_t *info = procesesUtilInfo;
    struct util_fill f = {NULL, info->procUtilArray, info->procUtilArray == NULL ? 0 : info->processSamplesCount, 0,
                          mock_procs_now_us()};
    if (mock_procs_any() && f.now > info->lastSeenTimeStamp) {
        mock_procs_each(d, util_one, &f);
    }
    info->processSamplesCount = f.n;
    return f.n > f.cap ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

/* From Ampere on (as nvml.h documents); with confidential computing off, nothing is protected. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t device, nvmlConfComputeMemSizeInfo_t *memInfo)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(memInfo);
    if (d->s.architecture < NVML_DEVICE_ARCH_AMPERE) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    memInfo->protectedMemSizeKib = 0;
    memInfo->unprotectedMemSizeKib = d->s.memory_total_bytes >> 10;
    return NVML_SUCCESS;
}
