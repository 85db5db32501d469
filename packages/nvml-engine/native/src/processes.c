/*
 * Processes on a GPU (processes.h): the readers of the live layer's process records. This
 * unit answers no nvml.h function itself; device_memory.c and device_perf.c ask it. The
 * writer's primitives (nvml_mock_live_proc_write/read) are in live.c beside the GPU record's.
 */
#include "processes.h"

#include "mig.h"

#include "telemetry.h"

/* The board GPU behind `d` (records hold board GPUs, whatever the visible view); -1 without
 * a live layer. */
static int board_gpu(const struct nvmlDevice_st *d, const unsigned char *header)
{
    if (d->live == NULL || header == NULL) {
        return -1;
    }
    return (int)d->board;
}

static uint64_t ld64(const unsigned char *rec, unsigned int off)
{
    return __atomic_load_n((const uint64_t *)(const void *)(rec + off), __ATOMIC_RELAXED);
}

static uint32_t ld32(const unsigned char *rec, unsigned int off)
{
    return __atomic_load_n((const uint32_t *)(const void *)(rec + off), __ATOMIC_RELAXED);
}

/*
 * Odd sequence values a scan gave up on, by slot. A record still showing the same odd value
 * on a later scan is skipped at once: its writer died mid-write (a live writer moves the
 * counter on within microseconds, and the record is read again as soon as it does). Without
 * this, one such record costs every later call LIVE_READ_TRIES waits, and a damaged region
 * with many of them makes each call wait once per record, which on a busy node is a
 * scheduler time slice each.
 */
static uint64_t stuck_seq[LIVE_PROCESS_SLOTS];

#define MIG_WORDS (LIVE_PROC_MIG_HOLDINGS_BYTES / 4u)
#define MIG_HELD 0x80000000u

/* One consistent read of record `slot` (at `rec`): 1 when it is in use and holds GPU `gpu`
 * (and *p and mig[], the record's MIG words, are filled), 0 when not (or when no consistent read could be taken: a writer died
 * mid-write). Each retry takes one from *budget, shared by the whole scan; with none left a
 * record gets one attempt. */
static int read_proc(const unsigned char *rec, uint32_t slot, unsigned int gpu, struct mock_proc *p,
                     uint32_t *mig, unsigned int *budget)
{
    const uint64_t *seq = (const uint64_t *)(const void *)(rec + LIVE_PROC_SEQ);
    /* fast path: a free slot, or one not holding this GPU, answers without the lock */
    uint64_t s0 = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
    if (ld32(rec, LIVE_PROC_IN_USE) == 0 && (s0 & 1u) == 0) {
        return 0;
    }
    if ((s0 & 1u) && __atomic_load_n(&stuck_seq[slot], __ATOMIC_RELAXED) == s0) {
        return 0; /* given up on before, and no writer has touched it since */
    }
    for (unsigned int attempt = 0;; attempt++) {
        uint64_t s1 = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
        if (s1 & 1u) {
            if (*budget == 0) {
                __atomic_store_n(&stuck_seq[slot], s1, __ATOMIC_RELAXED);
                return 0;
            }
            (*budget)--;
            mock_live_pause(attempt);
            continue;
        }
        uint32_t in_use = ld32(rec, LIVE_PROC_IN_USE);
        uint64_t mask = ld64(rec, LIVE_PROC_GPU_MASK);
        struct mock_proc got = {
            .pid = ld32(rec, LIVE_PROC_PID),
            .used_bytes = ld64(rec, LIVE_PROC_USED_MEMORY_BYTES),
            .start_ms = ld64(rec, LIVE_PROC_START_TIME_MS),
            .pattern = ld32(rec, LIVE_PROC_UTIL_PATTERN),
            .level = ld32(rec, LIVE_PROC_UTIL_LEVEL),
            .period_ms = ld32(rec, LIVE_PROC_UTIL_PERIOD_MS),
            .seed = ld64(rec, LIVE_PROC_UTIL_SEED),
        };
        for (unsigned int w = 0; w < MIG_WORDS; w++) {
            mig[w] = ld32(rec, LIVE_PROC_MIG_HOLDINGS + 4u * w);
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(seq, __ATOMIC_RELAXED) == s1) {
            if (in_use != 1 || gpu >= 64 || ((mask >> gpu) & 1u) == 0) {
                return 0;
            }
            *p = got;
            return 1;
        }
        if (*budget == 0) {
            return 0;
        }
        (*budget)--;
    }
}

/* What is left of the GPU's framebuffer for processes: the total less the reserved memory and
 * the GPU's own use (its board or live memory-used value). */
static uint64_t proc_room(const struct nvmlDevice_st *d)
{
    uint64_t room = d->s.memory_total_bytes > d->s.memory_reserved_bytes
                        ? d->s.memory_total_bytes - d->s.memory_reserved_bytes
                        : 0;
    uint64_t own = live_memory_used_bytes(d);
    return own < room ? room - own : 0;
}

/* A record's memory on one device, cut to what is left: allocations past the memory fail on a
 * real GPU, so records are served in slot order (the order they were written) and a later one
 * gets what the earlier ones left, on the GPU and in its GPU instance; the process list and the
 * GPU's used memory then agree and never exceed the board. */
struct room {
    uint64_t gpu;
    uint64_t gi[16];
    uint16_t gi_known; /* bit g: gi[g] holds GPU instance g's room */
};

static uint64_t take(uint64_t *left, uint64_t want)
{
    uint64_t got = want < *left ? want : *left;
    *left -= got;
    return got;
}

unsigned int mock_procs_each(const struct nvmlDevice_st *d, void (*fn)(const struct mock_proc *, void *), void *arg)
{
    const unsigned char *h = atomic_load_explicit(&mock_live_header, memory_order_acquire);
    int gpu = board_gpu(d, h);
    if (gpu < 0) {
        return 0;
    }
    uint32_t high = __atomic_load_n((const uint32_t *)(const void *)(h + LIVE_HDR_PROCESS_HIGH), __ATOMIC_ACQUIRE);
    if (high > LIVE_PROCESS_SLOTS) {
        high = LIVE_PROCESS_SLOTS; /* a damaged or hostile header: never read past the region */
    }
    unsigned int n = 0;
    unsigned int budget = LIVE_READ_TRIES; /* retries for the whole scan, not per record */
    struct room room = {.gpu = proc_room(d)};
    for (uint32_t slot = 0; slot < high; slot++) {
        const unsigned char *rec = h + LIVE_PROCESSES_OFFSET + (size_t)slot * LIVE_PROCESS_RECORD_BYTES;
        struct mock_proc p;
        uint32_t mig[MIG_WORDS];
        if (!read_proc(rec, slot, (unsigned int)gpu, &p, mig, &budget)) {
            continue;
        }
        /* the MIG devices of this GPU the record holds, each its own entry; none: the GPU whole.
         * Ids are reported as recorded, whether or not the instance still exists. */
        unsigned int held = 0;
        for (unsigned int w = 0; w < MIG_WORDS; w++) {
            if ((mig[w] & MIG_HELD) != 0 && (mig[w] & 0xFFu) == (uint32_t)gpu) {
                struct mock_proc one = p;
                one.gpu_instance = mig[w] >> 8 & 0xFFu;
                one.compute_instance = mig[w] >> 16 & 0xFFu;
                uint64_t want = p.used_bytes;
                if (one.gpu_instance < 16) {
                    unsigned int g = one.gpu_instance;
                    if (!(room.gi_known >> g & 1u)) {
                        room.gi[g] = mock_mig_gi_memory_bytes(d, g);
                        room.gi_known |= (uint16_t)(1u << g);
                    }
                    want = take(&room.gi[g], want);
                }
                one.used_bytes = take(&room.gpu, want);
                fn(&one, arg);
                held++;
            }
        }
        if (held == 0) {
            p.gpu_instance = MOCK_PROC_NO_INSTANCE;
            p.compute_instance = MOCK_PROC_NO_INSTANCE;
            p.used_bytes = take(&room.gpu, p.used_bytes);
            fn(&p, arg);
            held = 1;
        }
        n += held;
    }
    return n;
}

struct collect {
    struct mock_proc *out;
    unsigned int max;
    unsigned int n;
};

static void collect_one(const struct mock_proc *p, void *arg)
{
    struct collect *c = arg;
    if (c->n < c->max && c->out != NULL) {
        c->out[c->n] = *p;
    }
    c->n++;
}

unsigned int mock_procs_of(const struct nvmlDevice_st *d, struct mock_proc *out, unsigned int max)
{
    struct collect c = {out, max, 0};
    return mock_procs_each(d, collect_one, &c);
}

static void add_used(const struct mock_proc *p, void *arg)
{
    uint64_t *sum = arg;
    uint64_t next = *sum + p->used_bytes;
    *sum = next < *sum ? UINT64_MAX : next; /* saturate: the caller caps at the board's room */
}

struct mig_sum {
    unsigned int gi, ci;
    uint64_t sum;
};

/* Memory belongs to the GPU instance: its compute instances share it, and each of their MIG
 * devices reports the instance's whole use (as the real nvidia-smi shows it on every row). */
static void add_mig_used(const struct mock_proc *p, void *arg)
{
    struct mig_sum *m = arg;
    if (p->gpu_instance == m->gi && p->compute_instance != MOCK_PROC_NO_INSTANCE) {
        add_used(p, &m->sum);
    }
}

uint64_t mock_procs_mig_used_bytes(const struct nvmlDevice_st *d, unsigned int gi, unsigned int ci)
{
    struct mig_sum m = {gi, ci, 0};
    if (mock_procs_any()) {
        mock_procs_each(d, add_mig_used, &m);
    }
    return m.sum;
}

uint64_t mock_procs_used_bytes(const struct nvmlDevice_st *d)
{
    uint64_t sum = 0;
    if (mock_procs_any()) {
        mock_procs_each(d, add_used, &sum);
    }
    return sum;
}

unsigned int mock_proc_util(const struct mock_proc *p)
{
    return mock_tele_pattern_util(p->pattern, p->level, p->period_ms, p->seed, p->start_ms);
}

unsigned int mock_proc_mem_util(unsigned int u)
{
    return mock_tele_mem_util(u);
}

static void add_util(const struct mock_proc *p, void *arg)
{
    unsigned int *sum = arg;
    if (*sum < 100u) {
        *sum += mock_proc_util(p);
    }
}

unsigned int mock_procs_util(const struct nvmlDevice_st *d)
{
    unsigned int sum = 0;
    if (mock_procs_any()) {
        mock_procs_each(d, add_util, &sum);
    }
    return sum > 100u ? 100u : sum;
}

uint64_t mock_procs_now_us(void)
{
    return mock_tele_now_us();
}
