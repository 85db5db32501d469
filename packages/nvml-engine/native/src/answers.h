/*
 * Per-thread answers of the hot per-GPU queries whose value moves only when the live file is
 * written: used memory (live value plus the allocation records), whole-GPU utilization (MIG
 * mode included), the GPU's process list and its temperature while no pattern moves it. Each thread keeps,
 * by board GPU, the answers as last computed and the key they were computed under: the GPU
 * record's sequence counter, the header's write generation and the init cycle. A call
 * whose key still holds (three loads and compares) answers from the copy; any write moves the
 * generation (or, for a repair of a record a writer left mid-write, the record's counter),
 * and the next call of each thread computes the answers again through the sequence-locked
 * reads, with their writer-died budget. The process list is kept as handed out (each entry
 * cut to the memory left, processes.h), so a list call copies its entries and nothing else.
 *
 * A current answer also vouches for the checks every device call makes (mock.h): the live
 * mapping is intact (the SIGBUS guard moves the init cycle's epoch when it replaces a mapping,
 * and a file overwritten in place moves the generation or the counter) and the GPU is not lost
 * (nothing is kept while gpu_lost is set in any form, and setting it is a write). So a call
 * that finds its answer current pays the handle check and the key's three loads and compares,
 * and nothing else.
 *
 * Utilization that moves with time is kept per quantum of the telemetry clock (telemetry.h):
 * a pattern is a pure function of the record and the quantum, so an answer computed in one
 * quantum holds for the rest of it. A constant pattern (steady, once its process started) is
 * kept as a plain value. Values that move per call (an armed fault's call-count trigger) are
 * never kept.
 */
#ifndef NVML_MOCK_ANSWERS_H
#define NVML_MOCK_ANSWERS_H

#include "mock.h"
#include "processes.h"

#define ANSWER_MEMORY 1u   /* mem_used holds the GPU's used framebuffer memory */
#define ANSWER_UTIL 2u     /* util_gpu / util_mem hold its utilization (or ANSWER_MIG_ON) */
#define ANSWER_MIG_ON 4u   /* MIG mode is current: no whole-GPU utilization */
#define ANSWER_PROCS 8u    /* procs[0..nprocs) are the GPU's processes, as listed */
#define ANSWER_UTIL_TIMED 16u /* with ANSWER_UTIL: the utilization holds in quantum util_quantum only */
#define ANSWER_TEMP 32u    /* temp_c holds the GPU temperature (no pattern moves it) */

struct mock_answer {
    uint64_t seq;              /* the GPU record's sequence counter then (even) */
    uint64_t generation;       /* the header's write generation then */
    unsigned int epoch;        /* the init cycle (mock_live_epoch) then; 0: none kept (every
                                * init that binds a live record moves it to 1 or more, and
                                * within one cycle each board GPU has one record) */
    unsigned int flags;        /* ANSWER_*: which answers are kept */
    uint64_t mem_used;
    unsigned int util_gpu;
    unsigned int util_mem;
    uint64_t util_quantum;     /* with ANSWER_UTIL_TIMED: the telemetry quantum it was computed in */
    unsigned int temp_c;
    unsigned int nprocs;
    unsigned int procs_cap;     /* entries procs has room for */
    struct mock_proc *procs;    /* the thread's own array (NULL until a GPU holds any) */
};

struct mock_answers {
    struct mock_answer gpu[LIVE_GPU_SLOTS];
};

/* This thread's answers (NULL until its first call on a GPU with a live record). */
extern MOCK_HIDDEN __thread struct mock_answers *mock_thread_answers __attribute__((tls_model("initial-exec")));

/* Compute and keep the answers of `d` (the slow path of mock_answer); NULL when none can be
 * kept (the record is mid-write, or the thread has no memory for its copy). */
const struct mock_answer *mock_answer_fill(const struct nvmlDevice_st *d);

/* The slow part of mock_device_answers (below), out of the callers' line: the live mapping's
 * guard and the lost-GPU check (rc), then the answers computed again (a; NULL when none can be
 * kept). Returned in two registers: the callers' fast path keeps no stack frame. */
struct mock_answer_rc {
    const struct mock_answer *a;
    nvmlReturn_t rc;
};
struct mock_answer_rc mock_answer_checked(const struct nvmlDevice_st *d);

/* This thread's answers of `d` (which has a live record) when they are current, else NULL. */
static inline __attribute__((always_inline)) const struct mock_answer *mock_answer_current(const struct nvmlDevice_st *d)
{
    const unsigned char *rec = d->live;
    const struct mock_answers *t = mock_thread_answers;
    if (__builtin_expect(t != NULL, 1)) {
        const struct mock_answer *a = &t->gpu[d->board];
        const unsigned char *h = rec - LIVE_RECORDS_OFFSET - (size_t)d->board * LIVE_RECORD_BYTES;
        /* acquire loads, in this order: the epoch is read after the mapping's words, so a
         * SIGBUS taken on them (the guard moves the epoch) is seen by this very call */
        if (a->seq == __atomic_load_n((const uint64_t *)(const void *)(rec + LIVE_RECORD_SEQ), __ATOMIC_ACQUIRE) &&
            a->generation ==
                __atomic_load_n((const uint64_t *)(const void *)(h + LIVE_HDR_GENERATION), __ATOMIC_ACQUIRE) &&
            a->epoch == atomic_load_explicit(&mock_live_epoch, memory_order_acquire)) {
            return a;
        }
    }
    return NULL;
}

/*
 * The device check of the calls that answer from the kept answers: validate `device` (as
 * GET_DEVICE does) and set *a to this thread's answers of it, current, or NULL when there are
 * none: without a live layer (the board's values answer; the caller tells by d->live), or when
 * none can be kept (the caller computes its value). Only a call whose answers are not current
 * pays the live mapping's guard and the lost-GPU check before they are computed again.
 */
static inline __attribute__((always_inline)) nvmlReturn_t
mock_device_answers(nvmlDevice_t device, const struct nvmlDevice_st **out, const struct mock_answer **a)
{
    nvmlReturn_t rc = mock_device_any(device, out);
    if (__builtin_expect(rc != NVML_SUCCESS, 0)) {
        return rc;
    }
    const struct nvmlDevice_st *d = *out;
    *a = NULL;
    if (d->live == NULL) {
        return NVML_SUCCESS;
    }
    const struct mock_answer *kept = mock_answer_current(d);
    if (__builtin_expect(kept != NULL, 1)) {
        *a = kept;
        return NVML_SUCCESS;
    }
    struct mock_answer_rc got = mock_answer_checked(d);
    *a = got.a;
    return got.rc;
}

/*
 * The fast path of the calls that answer from the kept answers: 1 when `device` is a GPU
 * handle of this init cycle and either the GPU has no live record (*a NULL: the board's values
 * answer) or this thread's answers of it are current (*a); 0 otherwise, and the caller takes
 * its full path (a function of its own, called last: the fast path then keeps no stack frame),
 * which answers every error and MIG device handles (outside the GPU table) as before.
 */
static inline __attribute__((always_inline)) int mock_fast_device(nvmlDevice_t device, const struct nvmlDevice_st **d,
                                                                  const struct mock_answer **a)
{
    if (__builtin_expect(mock_device_any(device, d) != NVML_SUCCESS, 0)) {
        return 0;
    }
    if ((*d)->live == NULL) {
        *a = NULL;
        return 1;
    }
    *a = mock_answer_current(*d);
    return *a != NULL;
}

#define GET_DEVICE_ANSWERS(handle, var, answers)                          \
    const struct nvmlDevice_st *var = NULL;                               \
    const struct mock_answer *answers = NULL;                             \
    do {                                                                  \
        nvmlReturn_t rc_ = mock_device_answers((handle), &var, &answers); \
        if (rc_ != NVML_SUCCESS) {                                        \
            return rc_;                                                   \
        }                                                                 \
    } while (0)

/* The utilization of a kept answer with ANSWER_UTIL_TIMED, computed again when its quantum
 * has passed (the thread's own copy is updated). */
void mock_answer_util_now(const struct mock_answer *a, const struct nvmlDevice_st *d, unsigned int *gpu,
                          unsigned int *mem);

/* The computations the answers keep (device_memory.c, device_perf.c): used framebuffer
 * memory, and whole-GPU utilization, which returns 0 when the value moves with time (a
 * pattern on the GPU, or a moving one on a process holding it: kept per quantum only). */
uint64_t mock_memory_used_bytes(const struct nvmlDevice_st *d);
int mock_utilization_now(const struct nvmlDevice_st *d, unsigned int *gpu, unsigned int *mem);

#endif
