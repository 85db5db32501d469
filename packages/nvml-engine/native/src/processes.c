/*
 * Processes on a GPU (processes.h): the readers of the live layer's process records. This
 * unit answers no nvml.h function itself; device_memory.c and device_perf.c ask it. The
 * writer's primitives (nvml_mock_live_proc_write/read) are in live.c beside the GPU record's.
 */
#include "processes.h"

#include "mig.h"
#include "telemetry.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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
static uint64_t stuck_seq[LIVE_PROCESS_SLOTS] MOCK_COLD(stuck_seq);

#define MIG_WORDS (LIVE_PROC_MIG_HOLDINGS_BYTES / 4u)
#define MIG_HELD 0x80000000u

/* One consistent read of record `slot` (at `rec`): 1 when it is in use (*p, mig[] (the
 * record's MIG words) and *gpus (the board GPUs it holds) are filled), 0 when it is free, -1
 * when no consistent read could be taken (a writer died mid-write, or kept writing). *seq is
 * the sequence counter the answer belongs to (odd after a dead writer). Each retry takes one
 * from *budget, shared by the whole scan; with none left a record gets one attempt. */
static int read_proc(const unsigned char *rec, uint32_t slot, struct mock_proc *p, uint32_t *mig, uint64_t *gpus,
                     uint64_t *seq_out, unsigned int *budget)
{
    const uint64_t *seq = (const uint64_t *)(const void *)(rec + LIVE_PROC_SEQ);
    /* fast path: a free slot answers without the lock */
    uint64_t s0 = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
    *seq_out = s0;
    *gpus = 0;
    if (ld32(rec, LIVE_PROC_IN_USE) == 0 && (s0 & 1u) == 0) {
        return 0;
    }
    if ((s0 & 1u) && __atomic_load_n(&stuck_seq[slot], __ATOMIC_RELAXED) == s0) {
        return -1; /* given up on before, and no writer has touched it since */
    }
    for (unsigned int attempt = 0;; attempt++) {
        uint64_t s1 = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
        *seq_out = s1;
        if (s1 & 1u) {
            if (*budget == 0) {
                __atomic_store_n(&stuck_seq[slot], s1, __ATOMIC_RELAXED);
                return -1;
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
            if (in_use != 1) {
                return 0;
            }
            *p = got;
            *gpus = mask;
            return 1;
        }
        if (*budget == 0) {
            return -1;
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
 * GPU's used memory then agree and never exceed the board. The index keeps the records as
 * written; the cut is made as each call hands its entries out (capped_entry). */
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

struct capped {
    const struct nvmlDevice_st *d;
    struct room room;
    void (*fn)(const struct mock_proc *, void *);
    void *arg;
};

static void capped_entry(const struct mock_proc *p, void *arg)
{
    struct capped *c = arg;
    struct mock_proc one = *p;
    uint64_t want = one.used_bytes;
    if (one.gpu_instance != MOCK_PROC_NO_INSTANCE && one.gpu_instance < 16) {
        unsigned int g = one.gpu_instance;
        if (!(c->room.gi_known >> g & 1u)) {
            c->room.gi[g] = mock_mig_gi_memory_bytes(c->d, g);
            c->room.gi_known |= (uint16_t)(1u << g);
        }
        want = take(&c->room.gi[g], want);
    }
    one.used_bytes = take(&c->room.gpu, want);
    c->fn(&one, c->arg);
}

/* The MIG devices of board GPU `gpu` that a record (its MIG words `mig`) holds, each its own
 * entry; none: the GPU whole. Ids are reported as recorded, whether or not the instance still
 * exists. Returns how many calls of fn there were. */
static unsigned int emit(struct mock_proc p, const uint32_t *mig, unsigned int gpu,
                         void (*fn)(const struct mock_proc *, void *), void *arg)
{
    unsigned int held = 0;
    for (unsigned int w = 0; w < MIG_WORDS; w++) {
        if ((mig[w] & MIG_HELD) != 0 && (mig[w] & 0xFFu) == gpu) {
            p.gpu_instance = mig[w] >> 8 & 0xFFu;
            p.compute_instance = mig[w] >> 16 & 0xFFu;
            fn(&p, arg);
            held++;
        }
    }
    if (held == 0) {
        p.gpu_instance = MOCK_PROC_NO_INSTANCE;
        p.compute_instance = MOCK_PROC_NO_INSTANCE;
        fn(&p, arg);
        held = 1;
    }
    return held;
}

/* The scan of every record, for a thread that has no index (its allocation failed). */
static unsigned int scan_each(const unsigned char *h, unsigned int gpu, void (*fn)(const struct mock_proc *, void *),
                              void *arg)
{
    uint32_t high = __atomic_load_n((const uint32_t *)(const void *)(h + LIVE_HDR_PROCESS_HIGH), __ATOMIC_ACQUIRE);
    if (high > LIVE_PROCESS_SLOTS) {
        high = LIVE_PROCESS_SLOTS; /* a damaged or hostile header: never read past the region */
    }
    unsigned int n = 0;
    unsigned int budget = LIVE_READ_TRIES; /* retries for the whole scan, not per record */
    for (uint32_t slot = 0; slot < high; slot++) {
        const unsigned char *rec = h + LIVE_PROCESSES_OFFSET + (size_t)slot * LIVE_PROCESS_RECORD_BYTES;
        struct mock_proc p;
        uint32_t mig[MIG_WORDS];
        uint64_t gpus;
        uint64_t s;
        if (read_proc(rec, slot, &p, mig, &gpus, &s, &budget) == 1 && gpu < 64 && ((gpus >> gpu) & 1u)) {
            n += emit(p, mig, gpu, fn, arg);
        }
    }
    return n;
}

/*
 * The per-thread record index: each thread keeps a copy of every record it read, by slot,
 * and for each board GPU the slots holding it (a bitmap) with the sums its calls answer
 * from (memory used, how many entries carry a utilization pattern). A call checks the copy is
 * current (same file and init cycle, same header generation and high-water mark: four loads)
 * and then touches only its own GPU's entries, so its cost does not depend on what other
 * GPUs hold. Any write bumps the generation; the next call of each thread re-checks every
 * slot's sequence counter (one load each) and reads again, under the record's sequence lock,
 * only the records whose counter moved, so a write costs each reading thread one pass over
 * the counters, not every call a pass over the records. Per thread, not shared: no reader
 * ever waits for another, and the copy needs no lock of its own.
 */
#define SLOT_WORDS (LIVE_PROCESS_SLOTS / 64u)

struct cached_slot {
    uint64_t seq;   /* the record's sequence counter when read (odd: a writer died mid-write) */
    uint64_t gpus;  /* the board GPUs it holds (0: free, or never read consistently) */
    uint64_t mig_gpus; /* the board GPUs it holds MIG devices of (the others it holds whole) */
    uint32_t known;    /* seq says what the copy holds; 0: read again at the next refresh */
    uint32_t mig[MIG_WORDS];
    struct mock_proc p; /* with no instance ids: the entry of a GPU held whole */
};

struct gpu_index {
    uint64_t used;       /* the entries' memory, summed (saturating) */
    uint32_t entries;    /* (record, MIG device) pairs: mock_procs_each's calls */
    uint32_t patterned;  /* entries with a utilization pattern */
    uint32_t mig_entries; /* entries on a MIG device (their memory is cut per GPU instance) */
    uint32_t words;      /* bit w: slots[w] is not 0 */
    uint64_t slots[SLOT_WORDS];
};

struct proc_index {
    const unsigned char *header;
    unsigned int epoch;
    uint32_t high;     /* the slots the copy covers (the header's mark, clamped) */
    uint32_t raw_high; /* the header's mark as read */
    uint64_t generation;
    struct gpu_index gpu[LIVE_GPU_SLOTS];
    struct cached_slot slot[LIVE_PROCESS_SLOTS];
};

static __thread struct proc_index *thread_index __attribute__((tls_model("initial-exec")));
static pthread_key_t index_key;
static pthread_once_t index_once = PTHREAD_ONCE_INIT;
static int index_key_ok;

/* At thread exit. The library stays loaded while any thread may still run this (it is
 * linked -z nodelete, see the Makefile). */
static void index_free(void *ix)
{
    thread_index = NULL;
    free(ix);
}

static void index_key_make(void)
{
    index_key_ok = pthread_key_create(&index_key, index_free) == 0;
}

static struct proc_index *index_alloc(void)
{
    pthread_once(&index_once, index_key_make);
    if (!index_key_ok) {
        return NULL;
    }
    struct proc_index *ix = calloc(1, sizeof(*ix));
    if (ix == NULL || pthread_setspecific(index_key, ix) != 0) {
        free(ix);
        return NULL;
    }
    thread_index = ix;
    return ix;
}

static void sum_entry(const struct mock_proc *p, void *arg)
{
    struct gpu_index *g = arg;
    uint64_t next = g->used + p->used_bytes;
    g->used = next < g->used ? UINT64_MAX : next;
    g->entries++;
    g->patterned += p->pattern != 0;
    g->mig_entries += p->gpu_instance != MOCK_PROC_NO_INSTANCE;
}

static unsigned int index_each(const struct proc_index *ix, unsigned int gpu,
                               void (*fn)(const struct mock_proc *, void *), void *arg)
{
    const struct gpu_index *g = &ix->gpu[gpu];
    unsigned int n = 0;
    for (uint32_t words = g->words; words != 0; words &= words - 1u) {
        unsigned int w = (unsigned int)__builtin_ctz(words);
        for (uint64_t bits = g->slots[w]; bits != 0; bits &= bits - 1u) {
            const struct cached_slot *c = &ix->slot[w * 64u + (unsigned int)__builtin_ctzll(bits)];
            if (((c->mig_gpus >> gpu) & 1u) == 0) {
                fn(&c->p, arg); /* the GPU whole: the common case, no MIG word to look at */
                n++;
            } else {
                n += emit(c->p, c->mig, gpu, fn, arg);
            }
        }
    }
    return n;
}

/* Bring the thread's index up to the file as it is now (the slow path of index_now). NULL
 * when the thread has none, or the node holds no record and it never needed one. */
__attribute__((noinline)) static const struct proc_index *index_refresh(const unsigned char *h)
{
    struct proc_index *ix = thread_index;
    uint64_t gen = __atomic_load_n((const uint64_t *)(const void *)(h + LIVE_HDR_GENERATION), __ATOMIC_ACQUIRE);
    uint32_t raw_high = __atomic_load_n((const uint32_t *)(const void *)(h + LIVE_HDR_PROCESS_HIGH), __ATOMIC_ACQUIRE);
    unsigned int epoch = atomic_load_explicit(&mock_live_epoch, memory_order_acquire);
    uint32_t high = raw_high > LIVE_PROCESS_SLOTS ? LIVE_PROCESS_SLOTS : raw_high; /* never past the region */
    if (ix == NULL) {
        if (high == 0 || (ix = index_alloc()) == NULL) {
            return NULL; /* nothing to index (the scan answers at once), or no memory for it */
        }
    }
    if (ix->header != h || ix->epoch != epoch) { /* another file or init cycle: nothing carries over */
        memset(ix->gpu, 0, sizeof(ix->gpu));
        for (unsigned int slot = 0; slot < LIVE_PROCESS_SLOTS; slot++) {
            ix->slot[slot].known = 0;
            ix->slot[slot].gpus = 0;
        }
        ix->high = LIVE_PROCESS_SLOTS; /* every slot past the new high is cleared below */
    }
    /* The generation is read before the records: a write that lands during the pass bumps
     * it after this load, so the next call passes again. */
    uint64_t touched = 0; /* GPUs whose entries changed */
    unsigned int budget = LIVE_READ_TRIES; /* retries for the whole pass, not per record */
    for (unsigned int slot = 0; slot < LIVE_PROCESS_SLOTS && (slot < high || slot < ix->high); slot++) {
        struct cached_slot *c = &ix->slot[slot];
        uint64_t before = c->gpus;
        if (slot >= high) {
            c->known = 0; /* past the high-water mark nothing is read */
            c->gpus = 0;
        } else {
            const unsigned char *rec = h + LIVE_PROCESSES_OFFSET + (size_t)slot * LIVE_PROCESS_RECORD_BYTES;
            uint64_t s = __atomic_load_n((const uint64_t *)(const void *)(rec + LIVE_PROC_SEQ), __ATOMIC_ACQUIRE);
            if (c->known && c->seq == s) {
                continue; /* unchanged since read (or still stuck on the same dead writer) */
            }
            int got = read_proc(rec, slot, &c->p, c->mig, &c->gpus, &c->seq, &budget);
            c->known = got >= 0 || (c->seq & 1u); /* a dead writer's odd count is known to be stuck */
            c->mig_gpus = 0;
            if (got != 1) {
                c->gpus = 0;
            } else {
                c->p.gpu_instance = MOCK_PROC_NO_INSTANCE;
                c->p.compute_instance = MOCK_PROC_NO_INSTANCE;
                for (unsigned int w = 0; w < MIG_WORDS; w++) {
                    if ((c->mig[w] & MIG_HELD) != 0 && (c->mig[w] & 0xFFu) < 64u) {
                        c->mig_gpus |= 1ull << (c->mig[w] & 0xFFu);
                    }
                }
            }
        }
        uint64_t changed = before | c->gpus;
        for (uint64_t g = changed; g != 0; g &= g - 1u) {
            unsigned int gpu = (unsigned int)__builtin_ctzll(g);
            uint64_t bit = 1ull << (slot % 64u);
            uint64_t *word = &ix->gpu[gpu].slots[slot / 64u];
            *word = ((c->gpus >> gpu) & 1u) ? *word | bit : *word & ~bit;
        }
        touched |= changed;
    }
    for (uint64_t g = touched; g != 0; g &= g - 1u) {
        unsigned int gpu = (unsigned int)__builtin_ctzll(g);
        struct gpu_index *gi = &ix->gpu[gpu];
        gi->used = 0;
        gi->entries = 0;
        gi->patterned = 0;
        gi->mig_entries = 0;
        gi->words = 0;
        for (unsigned int w = 0; w < SLOT_WORDS; w++) {
            gi->words |= (uint32_t)(gi->slots[w] != 0) << w;
        }
        index_each(ix, gpu, sum_entry, gi);
    }
    ix->header = h;
    ix->epoch = epoch;
    ix->generation = gen;
    ix->high = high;
    ix->raw_high = raw_high;
    return ix;
}

/* The thread's index, current: four loads and compares while nothing was written. */
static inline const struct proc_index *index_now(const unsigned char *h)
{
    const struct proc_index *ix = thread_index;
    if (__builtin_expect(ix != NULL, 1)) {
        if (ix->header == h &&
            ix->generation ==
                __atomic_load_n((const uint64_t *)(const void *)(h + LIVE_HDR_GENERATION), __ATOMIC_ACQUIRE) &&
            ix->raw_high ==
                __atomic_load_n((const uint32_t *)(const void *)(h + LIVE_HDR_PROCESS_HIGH), __ATOMIC_ACQUIRE) &&
            ix->epoch == atomic_load_explicit(&mock_live_epoch, memory_order_acquire)) {
            return ix;
        }
    } else if (__atomic_load_n((const uint32_t *)(const void *)(h + LIVE_HDR_PROCESS_HIGH), __ATOMIC_ACQUIRE) == 0) {
        return NULL; /* no record on the node, and this thread never needed an index */
    }
    return index_refresh(h);
}

unsigned int mock_procs_each(const struct nvmlDevice_st *d, void (*fn)(const struct mock_proc *, void *), void *arg)
{
    const unsigned char *h = atomic_load_explicit(&mock_live_header, memory_order_acquire);
    int gpu = board_gpu(d, h);
    if (gpu < 0 || gpu >= (int)LIVE_GPU_SLOTS) {
        return 0;
    }
    const struct proc_index *ix = index_now(h);
    if (ix != NULL && ix->gpu[gpu].entries == 0) {
        return 0;
    }
    struct capped c = {.d = d, .room = {.gpu = proc_room(d)}, .fn = fn, .arg = arg};
    if (ix == NULL) {
        return scan_each(h, (unsigned int)gpu, capped_entry, &c);
    }
    return index_each(ix, (unsigned int)gpu, capped_entry, &c);
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

/* The GPU's entry in the thread's index when it is current, else NULL (no live layer, no
 * record on the node, or no index for this thread: the caller walks the records). */
static const struct gpu_index *gpu_index_of(const struct nvmlDevice_st *d)
{
    const unsigned char *h = atomic_load_explicit(&mock_live_header, memory_order_acquire);
    int gpu = board_gpu(d, h);
    if (gpu < 0 || gpu >= (int)LIVE_GPU_SLOTS) {
        return NULL;
    }
    const struct proc_index *ix = index_now(h);
    return ix != NULL ? &ix->gpu[gpu] : NULL;
}

uint64_t mock_procs_used_bytes(const struct nvmlDevice_st *d)
{
    uint64_t sum = 0;
    const struct gpu_index *g = gpu_index_of(d);
    if (g != NULL && g->mig_entries == 0) {
        /* whole-GPU entries only: handed out in order, each cut to what is left, they sum to
         * the records' memory or the room, whichever is less */
        uint64_t room = proc_room(d);
        return g->used < room ? g->used : room;
    }
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

struct util_sum {
    unsigned int sum;
    int moving;
};

static void add_util(const struct mock_proc *p, void *arg)
{
    struct util_sum *u = arg;
    u->moving |= p->pattern != 0 && mock_tele_pattern_moves(p->pattern, p->start_ms);
    if (u->sum < 100u) {
        u->sum += mock_proc_util(p);
    }
}

unsigned int mock_procs_util(const struct nvmlDevice_st *d, int *moving)
{
    struct util_sum u = {0, 0};
    const struct gpu_index *g = gpu_index_of(d);
    if (g == NULL || g->patterned != 0) {
        if (mock_procs_any()) {
            mock_procs_each(d, add_util, &u);
        }
    } /* else no entry with a pattern: nothing to compute */
    if (moving != NULL) {
        *moving = u.moving;
    }
    return u.sum > 100u ? 100u : u.sum;
}

uint64_t mock_procs_now_us(void)
{
    return mock_tele_now_us();
}
