/*
 * Per-thread answers of the hot per-GPU queries (answers.h): the slow path that computes
 * them and the thread's copy. This unit answers no nvml.h function itself.
 */
#include "answers.h"

#include <pthread.h>
#include <stdlib.h>

#include "mig.h"
#include "processes.h"
#include "telemetry.h"

__thread struct mock_answers *mock_thread_answers __attribute__((tls_model("initial-exec")));

static pthread_key_t answers_key;
static pthread_once_t answers_once = PTHREAD_ONCE_INIT;
static int answers_key_ok;

/* At thread exit. The library stays loaded while any thread may still run this (it is
 * linked -z nodelete, see the Makefile). */
static void answers_free(void *p)
{
    struct mock_answers *t = p;
    mock_thread_answers = NULL;
    for (unsigned int g = 0; g < LIVE_GPU_SLOTS; g++) {
        free(t->gpu[g].procs);
    }
    free(t);
}

static void answers_key_make(void)
{
    answers_key_ok = pthread_key_create(&answers_key, answers_free) == 0;
}

static struct mock_answers *answers_alloc(void)
{
    pthread_once(&answers_once, answers_key_make);
    if (!answers_key_ok) {
        return NULL;
    }
    struct mock_answers *t = calloc(1, sizeof(*t));
    if (t == NULL || pthread_setspecific(answers_key, t) != 0) {
        free(t);
        return NULL;
    }
    mock_thread_answers = t;
    return t;
}

/* Whether slot `slot` of the record is set armed: its value applies once the record's fault
 * trigger fires, and a call-count trigger counts every read, so no answer of it is kept. */
static int armed(const unsigned char *rec, unsigned int slot)
{
    const uint64_t *m = (const uint64_t *)(const void *)(rec + LIVE_RECORD_ARMED);
    return (int)((__atomic_load_n(&m[slot / 64u], __ATOMIC_RELAXED) >> (slot % 64u)) & 1u);
}

/* The processes of `d` into a->procs, grown as needed; 0 when there is no memory for them. */
static int keep_procs(const struct nvmlDevice_st *d, struct mock_answer *a)
{
    unsigned int n = mock_procs_of(d, a->procs, a->procs_cap);
    if (n > a->procs_cap) {
        struct mock_proc *grown = realloc(a->procs, (size_t)n * sizeof(*grown));
        if (grown == NULL) {
            return 0;
        }
        a->procs = grown;
        a->procs_cap = n;
        n = mock_procs_of(d, a->procs, a->procs_cap);
        if (n > a->procs_cap) {
            return 0; /* grew meanwhile: a write moved the key, the next call fills again */
        }
    }
    a->nprocs = n;
    return 1;
}

const struct mock_answer *mock_answer_fill(const struct nvmlDevice_st *d)
{
    const unsigned char *rec = d->live;
    struct mock_answers *t = mock_thread_answers;
    if (t == NULL && (t = answers_alloc()) == NULL) {
        return NULL;
    }
    struct mock_answer *a = &t->gpu[d->board];
    a->epoch = 0; /* none kept while they are computed */
    /* The key is read before the values: a write that lands while they are computed moves
     * it after these loads, so the next call computes again. */
    const unsigned char *h = rec - LIVE_RECORDS_OFFSET - (size_t)d->board * LIVE_RECORD_BYTES;
    uint64_t gen = __atomic_load_n((const uint64_t *)(const void *)(h + LIVE_HDR_GENERATION), __ATOMIC_ACQUIRE);
    uint64_t seq = __atomic_load_n((const uint64_t *)(const void *)(rec + LIVE_RECORD_SEQ), __ATOMIC_ACQUIRE);
    unsigned int epoch = atomic_load_explicit(&mock_live_epoch, memory_order_acquire);
    if (seq & 1u) {
        return NULL; /* mid-write, or left so by a dead writer: every call reads for itself */
    }
    if (mock_live_is_set(rec, LIVE_SLOT_gpu_lost)) {
        return NULL; /* a current answer vouches for "not lost": every call checks for itself */
    }
    unsigned int flags = 0;
    if (!armed(rec, LIVE_SLOT_memory_used_bytes)) {
        a->mem_used = mock_memory_used_bytes(d);
        flags |= ANSWER_MEMORY;
    }
    if (mock_mig_on(d)) {
        flags |= ANSWER_UTIL | ANSWER_MIG_ON;
    } else if (!armed(rec, LIVE_SLOT_util_gpu_pct) && !armed(rec, LIVE_SLOT_util_mem_pct)) {
        /* the quantum is read before the value: one computed later belongs to a later one */
        uint64_t q = mock_tele_quantum();
        flags |= ANSWER_UTIL;
        if (!mock_utilization_now(d, &a->util_gpu, &a->util_mem)) {
            flags |= ANSWER_UTIL_TIMED;
            a->util_quantum = q;
        }
    }
    if (!mock_tele_on(d) && !armed(rec, LIVE_SLOT_temperature_c)) {
        a->temp_c = live_temperature_c(d);
        flags |= ANSWER_TEMP;
    }
    if ((flags & ANSWER_MEMORY) != 0 && keep_procs(d, a)) {
        flags |= ANSWER_PROCS; /* (each entry is cut to the memory_used_bytes left: not armed) */
    }
    a->seq = seq;
    a->generation = gen;
    a->flags = flags;
    a->epoch = epoch;
    return a;
}

struct mock_answer_rc mock_answer_checked(const struct nvmlDevice_st *d)
{
    nvmlReturn_t rc = mock_live_guard(d);
    if (rc != NVML_SUCCESS) {
        return (struct mock_answer_rc){NULL, rc};
    }
    if (mock_lost(d)) {
        return (struct mock_answer_rc){NULL, NVML_ERROR_GPU_IS_LOST};
    }
    return (struct mock_answer_rc){mock_answer_fill(d), NVML_SUCCESS};
}

void mock_answer_util_now(const struct mock_answer *kept, const struct nvmlDevice_st *d, unsigned int *gpu,
                          unsigned int *mem)
{
    struct mock_answer *a = (struct mock_answer *)(uintptr_t)kept; /* the thread's own copy */
    uint64_t q = mock_tele_quantum();
    if (q != a->util_quantum) {
        mock_utilization_now(d, &a->util_gpu, &a->util_mem);
        a->util_quantum = q;
    }
    *gpu = a->util_gpu;
    *mem = a->util_mem;
}
