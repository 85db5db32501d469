/*
 * Per-thread answers of the hot per-GPU queries whose value moves only when the live file is
 * written: used memory (live value plus the allocation records), whole-GPU utilization with
 * no pattern anywhere (MIG mode included) and "no process on this GPU". Each thread keeps,
 * by board GPU, the answers as last computed and the key they were computed under: the GPU
 * record, its sequence counter, the header's write generation and the init cycle. A call
 * whose key still holds (four loads and compares) answers from the copy; any write moves the
 * generation (or, for a repair of a record a writer left mid-write, the record's counter),
 * and the next call of each thread computes the answers again through the sequence-locked
 * reads, with their writer-died budget. The process list is kept as handed out (each entry
 * cut to the memory left, processes.h), so a list call copies its entries and nothing else.
 * Values that move with time (a utilization pattern,
 * a process's pattern) or per call (an armed fault's call-count trigger) are never kept.
 */
#ifndef NVML_MOCK_ANSWERS_H
#define NVML_MOCK_ANSWERS_H

#include "mock.h"
#include "processes.h"

#define ANSWER_MEMORY 1u   /* mem_used holds the GPU's used framebuffer memory */
#define ANSWER_UTIL 2u     /* util_gpu / util_mem hold its utilization (or ANSWER_MIG_ON) */
#define ANSWER_MIG_ON 4u   /* MIG mode is current: no whole-GPU utilization */
#define ANSWER_PROCS 8u    /* procs[0..nprocs) are the GPU's processes, as listed */

struct mock_answer {
    const unsigned char *live; /* the GPU record the answers belong to; NULL: none kept */
    uint64_t seq;              /* its sequence counter then (even) */
    uint64_t generation;       /* the header's write generation then */
    unsigned int epoch;        /* the init cycle (mock_live_epoch) then */
    unsigned int flags;        /* ANSWER_*: which answers are kept */
    uint64_t mem_used;
    unsigned int util_gpu;
    unsigned int util_mem;
    unsigned int nprocs;
    unsigned int procs_cap;     /* entries procs has room for */
    struct mock_proc *procs;    /* the thread's own array (NULL until a GPU holds any) */
};

struct mock_answers {
    struct mock_answer gpu[LIVE_GPU_SLOTS];
};

/* This thread's answers (NULL until its first call on a GPU with a live record). */
extern __thread struct mock_answers *mock_thread_answers __attribute__((tls_model("initial-exec")));

/* Compute and keep the answers of `d` (the slow path of mock_answer); NULL when none can be
 * kept (the record is mid-write, or the thread has no memory for its copy). */
const struct mock_answer *mock_answer_fill(const struct nvmlDevice_st *d);

/* The answers of `d` for this thread, current; NULL without a live layer (the board values
 * answer then) or when none can be kept: the caller computes its value itself. */
static inline const struct mock_answer *mock_answer(const struct nvmlDevice_st *d)
{
    const unsigned char *rec = d->live;
    if (__builtin_expect(rec == NULL, 0)) {
        return NULL;
    }
    const struct mock_answers *t = mock_thread_answers;
    if (__builtin_expect(t != NULL, 1)) {
        const struct mock_answer *a = &t->gpu[d->board];
        const unsigned char *h = rec - LIVE_RECORDS_OFFSET - (size_t)d->board * LIVE_RECORD_BYTES;
        if (a->live == rec &&
            a->seq == __atomic_load_n((const uint64_t *)(const void *)(rec + LIVE_RECORD_SEQ), __ATOMIC_ACQUIRE) &&
            a->generation ==
                __atomic_load_n((const uint64_t *)(const void *)(h + LIVE_HDR_GENERATION), __ATOMIC_ACQUIRE) &&
            a->epoch == atomic_load_explicit(&mock_live_epoch, memory_order_acquire)) {
            return a;
        }
    }
    return mock_answer_fill(d);
}

/* The computations the answers keep (device_memory.c, device_perf.c): used framebuffer
 * memory, and whole-GPU utilization, which returns 0 when the value moves with time (a
 * pattern on the GPU or on a process holding it) and may not be kept. */
uint64_t mock_memory_used_bytes(const struct nvmlDevice_st *d);
int mock_utilization_now(const struct nvmlDevice_st *d, unsigned int *gpu, unsigned int *mem);

#endif
