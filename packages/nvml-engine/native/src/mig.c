/*
 * Multi Instance GPU Management (nvml.h): MIG mode, GPU and compute instances, MIG devices.
 *
 * What a board offers is board state: its GPU-instance profiles (mig_gi_profile lines,
 * NVIDIA's published table). What exists is node state: each GPU's MIG record in the live
 * layer (mode current/pending, GPU instances with profile and placement, compute instances).
 * Every call reads the record afresh (sequence-locked, like every live read), so a partition
 * made by any process on the node is seen by every process and container on its next call.
 * Changes (SetMigMode, create, destroy) are written here, under the writers' lock (a file
 * outside the overlay, see writers_lock; never a lock on the live file), by a caller that can open the file for writing (root on the node, or the writer's
 * user); any other caller gets NVML_ERROR_NO_PERMISSION, as an unprivileged caller does from
 * the real driver. A record read from a damaged or hostile file is sanitised: an instance
 * whose profile, placement or id does not fit the board is not there.
 *
 * GPU-instance ids follow the placement, as the driver numbers them, so a layout made again
 * gets the same ids and its MIG devices the same UUIDs (hashed from the GPU's UUID and the
 * GPU/compute instance ids).
 *
 * Every change of the layout (an instance created or destroyed) appends one
 * nvmlEventMigConfigChange event for the GPU to the live layer's ring in the same locked
 * step, so event sets registered for it wake (mig-parted and the device plugin listen).
 */
#define _GNU_SOURCE
#include "mig.h"
#include "visible.h"

#include <limits.h>
#include <stdlib.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mock.h"
#include "processes.h"

#define MIG_IDS MOCK_MIG_IDS /* GPU-instance ids 0..13 (see gi_id) */
#define MIG_MAX_GI LIVE_MIG_MAX_GI
#define MIG_MAX_CI LIVE_MIG_MAX_CI
#define MIG_SLOTS 8u /* memory slices */

struct mig_ci {
    uint32_t used, id, profile, start, size;
};

struct mig_gi {
    uint32_t used, id, profile, start, size;
    struct mig_ci ci[MIG_MAX_CI];
};

struct mig_layout {
    uint32_t current, pending;
    struct mig_gi gi[MIG_MAX_GI];
};

/* Handles: addresses in these tables; the position says which GPU / instance ids. */
struct nvmlGpuInstance_st {
    unsigned char unused;
};
struct nvmlComputeInstance_st {
    unsigned char unused;
};
static struct nvmlGpuInstance_st gi_handles[STATE_MAX_GPUS][MIG_IDS] MOCK_COLD(gi_handles);
static struct nvmlComputeInstance_st ci_handles[STATE_MAX_GPUS][MIG_IDS][MIG_MAX_CI] MOCK_COLD(ci_handles);
struct mock_mig_dev mock_mig_devs[STATE_MAX_GPUS][MIG_IDS][MIG_MAX_CI] MOCK_COLD(mock_mig_devs);

/* --- the board's tables --------------------------------------------------------------- */

static const struct state_mig_gi *gi_profile_by_index(const struct nvmlDevice_st *d, unsigned int index)
{
    for (uint32_t i = 0; i < d->s.mig_gi_count && i < STATE_MAX_MIG_GI_PROFILES; i++) {
        if (d->mig_gi[i].profile == index) {
            return &d->mig_gi[i];
        }
    }
    return NULL;
}

static const struct state_mig_gi *gi_profile_by_id(const struct nvmlDevice_st *d, unsigned int id)
{
    for (uint32_t i = 0; i < d->s.mig_gi_count && i < STATE_MAX_MIG_GI_PROFILES; i++) {
        if (d->mig_gi[i].id == id) {
            return &d->mig_gi[i];
        }
    }
    return NULL;
}

/* NVML_COMPUTE_INSTANCE_PROFILE_* index of a compute instance of `slices` slices (-1: none). */
static int ci_index(unsigned int slices)
{
    switch (slices) {
    case 1: return NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE;
    case 2: return NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE;
    case 3: return NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE;
    case 4: return NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE;
    case 6: return NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE;
    case 7: return NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE;
    case 8: return NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE;
    default: return -1;
    }
}

/* The compute-instance profile `index` a GPU-instance profile offers; NULL if it offers none. */
static const struct state_mig_ci *ci_profile(const struct state_mig_gi *gp, unsigned int index)
{
    for (uint32_t i = 0; i < gp->ci_count && i < STATE_MAX_MIG_CI_PROFILES; i++) {
        if (ci_index(gp->ci[i].slices) == (int)index) {
            return &gp->ci[i];
        }
    }
    return NULL;
}

/* Compute placements of `slices` slices in a GPU instance of `gi_slices`: starts aligned to
 * the next power of two (1, 2, 4, 4, 8), as the driver offers them. Returns the count. */
static unsigned int ci_placements(unsigned int slices, unsigned int gi_slices, unsigned int *starts)
{
    unsigned int step = 1;
    while (step < slices) {
        step <<= 1;
    }
    unsigned int n = 0;
    for (unsigned int s = 0; s + slices <= gi_slices && n < MIG_MAX_CI; s += step) {
        if (starts != NULL) {
            starts[n] = s;
        }
        n++;
    }
    return n;
}

/* A GPU instance's id from its placement: the full GPU 0, halves 1 (slices 0-3) and 2
 * (slices 4-7), quarters 3..6, eighths 7..13 (the driver's numbering of the memory-slice
 * tree, as current drivers report it: a 4g at 0:4 is id 1, a 3g at 4:4 id 2). */
static uint32_t gi_id(uint32_t start, uint32_t size)
{
    if (size >= 5) {
        return 0;
    }
    if (size >= 3) {
        return start >= 4 ? 2 : 1;
    }
    if (size == 2) {
        return 3 + start / 2;
    }
    return 7 + start;
}

static int overlaps(uint32_t a_start, uint32_t a_size, uint32_t b_start, uint32_t b_size)
{
    return a_start < b_start + b_size && b_start < a_start + a_size;
}

/* Whether a GPU instance is in this process's view: a container given MIG devices sees the
 * GPU instances that hold them, and no other (the toolkit gives it only their capabilities). */
static int gi_visible(const struct nvmlDevice_st *d, unsigned int id)
{
    for (unsigned int ci = 0; ci < MIG_MAX_CI; ci++) {
        if (mock_mig_visible(d->board, id, ci)) {
            return 1;
        }
    }
    return 0;
}

/* --- the live MIG record -------------------------------------------------------------- */

static const unsigned char *mig_record(const struct nvmlDevice_st *d)
{
    const unsigned char *h = atomic_load_explicit(&mock_live_header, memory_order_acquire);
    if (h == NULL || d->live == NULL) {
        return NULL;
    }
    return h + LIVE_MIG_OFFSET + (size_t)d->board * LIVE_MIG_BYTES_PER_GPU;
}

static uint32_t ld32(const unsigned char *rec, size_t off)
{
    return __atomic_load_n((const uint32_t *)(const void *)(rec + off), __ATOMIC_RELAXED);
}

static void st32(unsigned char *rec, size_t off, uint32_t v)
{
    __atomic_store_n((uint32_t *)(void *)(rec + off), v, __ATOMIC_RELAXED);
}

static void copy_out(const unsigned char *rec, struct mig_layout *l)
{
    l->current = ld32(rec, LIVE_MIG_CURRENT);
    l->pending = ld32(rec, LIVE_MIG_PENDING);
    for (unsigned int g = 0; g < MIG_MAX_GI; g++) {
        size_t base = LIVE_MIG_GI + (size_t)g * LIVE_MIG_GI_BYTES;
        struct mig_gi *gi = &l->gi[g];
        gi->used = ld32(rec, base + LIVE_MIG_GI_USED);
        gi->id = ld32(rec, base + LIVE_MIG_GI_ID);
        gi->profile = ld32(rec, base + LIVE_MIG_GI_PROFILE);
        gi->start = ld32(rec, base + LIVE_MIG_GI_START);
        gi->size = ld32(rec, base + LIVE_MIG_GI_SIZE);
        for (unsigned int c = 0; c < MIG_MAX_CI; c++) {
            size_t cb = base + LIVE_MIG_GI_CI + (size_t)c * LIVE_MIG_CI_BYTES;
            struct mig_ci *ci = &gi->ci[c];
            ci->used = ld32(rec, cb + LIVE_MIG_CI_USED);
            ci->id = ld32(rec, cb + LIVE_MIG_CI_ID);
            ci->profile = ld32(rec, cb + LIVE_MIG_CI_PROFILE);
            ci->start = ld32(rec, cb + LIVE_MIG_CI_START);
            ci->size = ld32(rec, cb + LIVE_MIG_CI_SIZE);
        }
    }
}

static void copy_in(unsigned char *rec, const struct mig_layout *l)
{
    st32(rec, LIVE_MIG_CURRENT, l->current);
    st32(rec, LIVE_MIG_PENDING, l->pending);
    for (unsigned int g = 0; g < MIG_MAX_GI; g++) {
        size_t base = LIVE_MIG_GI + (size_t)g * LIVE_MIG_GI_BYTES;
        const struct mig_gi *gi = &l->gi[g];
        st32(rec, base + LIVE_MIG_GI_USED, gi->used);
        st32(rec, base + LIVE_MIG_GI_ID, gi->id);
        st32(rec, base + LIVE_MIG_GI_PROFILE, gi->profile);
        st32(rec, base + LIVE_MIG_GI_START, gi->start);
        st32(rec, base + LIVE_MIG_GI_SIZE, gi->size);
        for (unsigned int c = 0; c < MIG_MAX_CI; c++) {
            size_t cb = base + LIVE_MIG_GI_CI + (size_t)c * LIVE_MIG_CI_BYTES;
            const struct mig_ci *ci = &gi->ci[c];
            st32(rec, cb + LIVE_MIG_CI_USED, ci->used);
            st32(rec, cb + LIVE_MIG_CI_ID, ci->id);
            st32(rec, cb + LIVE_MIG_CI_PROFILE, ci->profile);
            st32(rec, cb + LIVE_MIG_CI_START, ci->start);
            st32(rec, cb + LIVE_MIG_CI_SIZE, ci->size);
        }
    }
}

/* Keep only what fits the board: modes 0/1, instances whose profile, placement and id are
 * the board's, no overlaps, compute instances inside their GPU instance. */
static void sanitise(const struct nvmlDevice_st *d, struct mig_layout *l)
{
    l->current = l->current == 1 ? 1 : 0;
    l->pending = l->pending == 1 ? 1 : 0;
    for (unsigned int g = 0; g < MIG_MAX_GI; g++) {
        struct mig_gi *gi = &l->gi[g];
        const struct state_mig_gi *gp = gi->used ? gi_profile_by_index(d, gi->profile) : NULL;
        int ok = gp != NULL && l->current == 1 && gi->size == gp->placement_size && gi->start < MIG_SLOTS &&
                 gi->id == gi_id(gi->start, gi->size);
        for (uint32_t p = 0; ok && p < gp->placement_count; p++) {
            if (gp->placement_start[p] == gi->start) {
                break;
            }
            if (p + 1 == gp->placement_count) {
                ok = 0;
            }
        }
        for (unsigned int o = 0; ok && o < g; o++) {
            if (l->gi[o].used && overlaps(l->gi[o].start, l->gi[o].size, gi->start, gi->size)) {
                ok = 0;
            }
        }
        if (!ok) {
            memset(gi, 0, sizeof(*gi));
            continue;
        }
        gi->used = 1;
        for (unsigned int c = 0; c < MIG_MAX_CI; c++) {
            struct mig_ci *ci = &gi->ci[c];
            const struct state_mig_ci *cp = ci->used ? ci_profile(gp, ci->profile) : NULL;
            int cok = cp != NULL && ci->size == cp->slices && ci->id < MIG_MAX_CI && ci->start + ci->size <= gp->slices;
            for (unsigned int o = 0; cok && o < c; o++) {
                const struct mig_ci *x = &gi->ci[o];
                if (x->used && (x->id == ci->id || overlaps(x->start, x->size, ci->start, ci->size))) {
                    cok = 0;
                }
            }
            if (!cok) {
                memset(ci, 0, sizeof(*ci));
            } else {
                ci->used = 1;
            }
        }
    }
}

/* The GPU's MIG layout now (all zero, MIG disabled, without a live layer). */
static void mig_read(const struct nvmlDevice_st *d, struct mig_layout *l)
{
    memset(l, 0, sizeof(*l));
    const unsigned char *rec = mig_record(d);
    if (rec == NULL) {
        return;
    }
    const uint64_t *seq = (const uint64_t *)(const void *)(rec + LIVE_MIG_SEQ);
    for (unsigned int attempt = 0; attempt < LIVE_READ_TRIES; attempt++) {
        uint64_t s1 = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
        if (s1 & 1u) {
            mock_live_pause(attempt);
            continue;
        }
        copy_out(rec, l);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(seq, __ATOMIC_RELAXED) == s1) {
            sanitise(d, l);
            return;
        }
    }
    memset(l, 0, sizeof(*l)); /* a writer died mid-write: no layout rather than half of one */
}

/* Only the mode word, under the record's sequence lock: what every utilization call and
 * MIG-aware getter asks, O(1) instead of a copy and check of the whole layout (the mode is
 * current exactly when that word is 1, as sanitise() keeps it). A record whose writer died
 * mid-write reads as no layout, as mig_read() answers. */
int mock_mig_on(const struct nvmlDevice_st *d)
{
    if (!d->s.mig_capable) {
        return 0;
    }
    const unsigned char *rec = mig_record(d);
    if (rec == NULL) {
        return 0;
    }
    const uint64_t *seq = (const uint64_t *)(const void *)(rec + LIVE_MIG_SEQ);
    for (unsigned int attempt = 0; attempt < LIVE_READ_TRIES; attempt++) {
        uint64_t s1 = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
        if (s1 & 1u) {
            mock_live_pause(attempt);
            continue;
        }
        uint32_t current = ld32(rec, LIVE_MIG_CURRENT);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(seq, __ATOMIC_RELAXED) == s1) {
            return current == 1;
        }
    }
    return 0;
}

/* The writers' lock of the live file at `live` (nvml_mock_live_lock_path names it), held
 * exclusively. Never a lock on the live file itself: any process that maps it, a container's
 * read-only mapping included, could hold that one and stop every writer. Returns the locked
 * descriptor, or -1. */
static int writers_lock(const char *live)
{
    char path[PATH_MAX];
    if (nvml_mock_live_lock_path(live, path, sizeof(path)) != 0) {
        return -1;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        return -1;
    }
    if (flock(fd, LOCK_EX) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A change to one GPU's record, under the writers' lock (writers_lock). */
struct mig_txn {
    int lock;
    int fd;
    unsigned int board; /* the GPU's board index, for the config-change event */
    int changed;        /* the layout of instances changed: send nvmlEventMigConfigChange */
    unsigned char *base;
    unsigned char *rec;
    struct mig_layout l;
};

static nvmlReturn_t txn_begin(const struct nvmlDevice_st *d, struct mig_txn *t)
{
    t->lock = -1;
    t->fd = -1;
    t->base = NULL;
    t->board = d->board;
    t->changed = 0;
    if (mig_record(d) == NULL || mock_live_path[0] == '\0') {
        mock_set_error_detail(NVML_ERROR_NO_PERMISSION,
                              "no live layer to hold the MIG layout (stage the overlay with nvml-mock-engine)");
        return NVML_ERROR_NO_PERMISSION;
    }
    t->fd = open(mock_live_path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (t->fd < 0) {
        if (errno == EACCES || errno == EPERM || errno == EROFS) {
            return NVML_ERROR_NO_PERMISSION;
        }
        return NVML_ERROR_UNKNOWN;
    }
    struct stat st;
    if (fstat(t->fd, &st) != 0 || !S_ISREG(st.st_mode) || (unsigned long long)st.st_size != LIVE_TOTAL_BYTES) {
        close(t->fd);
        return NVML_ERROR_UNKNOWN;
    }
    t->lock = writers_lock(mock_live_path);
    if (t->lock < 0) {
        int denied = errno == EACCES || errno == EPERM || errno == EROFS;
        close(t->fd);
        mock_set_error_detail(denied ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_UNKNOWN,
                              "cannot take the live layer writers' lock (NVML_MOCK_LOCK_DIR)");
        return denied ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_UNKNOWN;
    }
    void *m = mmap(NULL, (size_t)LIVE_TOTAL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0);
    if (m == MAP_FAILED) {
        int denied = errno == EACCES;
        close(t->fd);
        close(t->lock); /* drops the lock */
        return denied ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_UNKNOWN;
    }
    t->base = m;
    if (memcmp(t->base + LIVE_HDR_MAGIC, LIVE_MAGIC, sizeof(LIVE_MAGIC)) != 0 ||
        __atomic_load_n((const uint32_t *)(const void *)(t->base + LIVE_HDR_RETIRED), __ATOMIC_ACQUIRE) != 0) {
        munmap(t->base, (size_t)LIVE_TOTAL_BYTES);
        close(t->fd);
        close(t->lock);
        return NVML_ERROR_GPU_IS_LOST; /* replaced by a re-stage: re-initialise to see the new one */
    }
    t->rec = t->base + LIVE_MIG_OFFSET + (size_t)d->board * LIVE_MIG_BYTES_PER_GPU;
    copy_out(t->rec, &t->l);
    sanitise(d, &t->l);
    return NVML_SUCCESS;
}

/* Finish a change: write the layout (when `commit`) in one sequence-locked step. */
static void txn_end(struct mig_txn *t, int commit)
{
    if (commit) {
        uint64_t *seq = (uint64_t *)(void *)(t->rec + LIVE_MIG_SEQ);
        uint64_t s = __atomic_load_n(seq, __ATOMIC_RELAXED);
        uint64_t odd = (s & 1u) ? s + 2u : s + 1u;
        __atomic_store_n(seq, odd, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        copy_in(t->rec, &t->l);
        __atomic_fetch_add((uint64_t *)(void *)(t->rec + LIVE_MIG_WRITES), 1u, __ATOMIC_RELAXED);
        __atomic_store_n(seq, odd + 1u, __ATOMIC_RELEASE);
        __atomic_fetch_add((uint64_t *)(void *)(t->base + LIVE_HDR_GENERATION), 1u, __ATOMIC_RELEASE);
        if (t->changed) {
            nvml_mock_live_event_on(t->base, (size_t)LIVE_TOTAL_BYTES, t->board, 0xFFFFFFFFu, 0xFFFFFFFFu,
                                    nvmlEventMigConfigChange, 0);
        }
    }
    munmap(t->base, (size_t)LIVE_TOTAL_BYTES);
    close(t->fd);
    flock(t->lock, LOCK_UN);
    close(t->lock);
}

static struct mig_gi *find_gi(struct mig_layout *l, unsigned int id)
{
    for (unsigned int g = 0; g < MIG_MAX_GI; g++) {
        if (l->gi[g].used && l->gi[g].id == id) {
            return &l->gi[g];
        }
    }
    return NULL;
}

/* Opens a transaction on d and finds GPU instance gid in it again: it may have gone since the
 * caller's handle was read, which is the caller's bad argument. The transaction is open on success. */
static nvmlReturn_t txn_gi(const struct nvmlDevice_st *d, unsigned int gid, struct mig_txn *t, struct mig_gi **now)
{
    nvmlReturn_t rc = txn_begin(d, t);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    *now = find_gi(&t->l, gid);
    if (*now == NULL) {
        txn_end(t, 0);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

static struct mig_ci *find_ci(struct mig_gi *gi, unsigned int id)
{
    for (unsigned int c = 0; c < MIG_MAX_CI; c++) {
        if (gi->ci[c].used && gi->ci[c].id == id) {
            return &gi->ci[c];
        }
    }
    return NULL;
}

static unsigned int gi_count_of(const struct mig_layout *l, uint32_t profile)
{
    unsigned int n = 0;
    for (unsigned int g = 0; g < MIG_MAX_GI; g++) {
        n += l->gi[g].used && l->gi[g].profile == profile;
    }
    return n;
}

static int gi_fits(const struct mig_layout *l, uint32_t start, uint32_t size)
{
    for (unsigned int g = 0; g < MIG_MAX_GI; g++) {
        if (l->gi[g].used && overlaps(l->gi[g].start, l->gi[g].size, start, size)) {
            return 0;
        }
    }
    return 1;
}

/* How many placements, of every profile of the board, that are free now an instance at
 * start:size would take away. Creation without a placement takes the free placement that
 * takes away fewest, the lowest start on a tie: that is what the driver does (seven 1g
 * instances land at 6, 4, 5, 0, 1, 2, 3; a 1g, a 2g and then a 4g all fit). */
static unsigned int gi_damage(const struct nvmlDevice_st *d, const struct mig_layout *l,
                              uint32_t start, uint32_t size)
{
    unsigned int lost = 0;
    for (uint32_t i = 0; i < d->s.mig_gi_count && i < STATE_MAX_MIG_GI_PROFILES; i++) {
        const struct state_mig_gi *q = &d->mig_gi[i];
        for (uint32_t p = 0; p < q->placement_count && p < STATE_MAX_MIG_PLACEMENTS; p++) {
            uint32_t qs = q->placement_start[p];
            lost += gi_fits(l, qs, q->placement_size) && overlaps(qs, q->placement_size, start, size);
        }
    }
    return lost;
}

static int ci_fits(const struct mig_gi *gi, uint32_t start, uint32_t size)
{
    for (unsigned int c = 0; c < MIG_MAX_CI; c++) {
        if (gi->ci[c].used && overlaps(gi->ci[c].start, gi->ci[c].size, start, size)) {
            return 0;
        }
    }
    return 1;
}

/* --- handles ---------------------------------------------------------------------------- */

static nvmlGpuInstance_t gi_handle(const struct nvmlDevice_st *d, unsigned int id)
{
    return &gi_handles[d->index][id];
}

static nvmlComputeInstance_t ci_handle(const struct nvmlDevice_st *d, unsigned int gi, unsigned int ci)
{
    return &ci_handles[d->index][gi][ci];
}

/* Resolve a table address to (GPU, ids); 0 when it is not one of `count` entries of `size`. */
static int decode(const void *handle, const void *table, size_t size, size_t count, size_t *pos)
{
    uintptr_t base = (uintptr_t)table;
    uintptr_t p = (uintptr_t)handle;
    if (p < base || p >= base + size * count || (p - base) % size != 0) {
        return 0;
    }
    *pos = (p - base) / size;
    return 1;
}

/* What a GPU-instance or compute-instance call resolved its arguments to: the GPU and a copy of its
 * layout, then, as far as the call needs them, the instances named and their profiles. One shape
 * for every call so each starts with the same two lines. */
struct mig_at {
    const struct nvmlDevice_st *d;
    struct mig_layout l;
    struct mig_gi *gi;
    struct mig_ci *ci;
    const struct state_mig_gi *gp;
    const struct state_mig_ci *cp;
};

/* Declares `a` and resolves a call's arguments into it with `resolve`, or returns what stopped
 * it: the MIG calls' counterpart of GET_DEVICE. */
#define MIG_AT(a, resolve)                \
    struct mig_at a;                      \
    do {                                  \
        nvmlReturn_t rc_ = (resolve);     \
        if (rc_ != NVML_SUCCESS) {        \
            return rc_;                   \
        }                                 \
    } while (0)

/* A GPU instance handle of this init cycle whose instance exists now. */
static nvmlReturn_t get_gi(nvmlGpuInstance_t h, struct mig_at *a)
{
    REQUIRE_LIVE();
    size_t pos;
    if (!decode(h, gi_handles, sizeof(gi_handles[0][0]), STATE_MAX_GPUS * MIG_IDS, &pos) ||
        pos / MIG_IDS >= mock_device_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    a->d = &mock_devices[pos / MIG_IDS];
    if (mock_lost(a->d)) {
        return NVML_ERROR_GPU_IS_LOST;
    }
    mig_read(a->d, &a->l);
    a->gi = find_gi(&a->l, (unsigned int)(pos % MIG_IDS));
    return a->gi != NULL ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

static nvmlReturn_t get_ci(nvmlComputeInstance_t h, struct mig_at *a)
{
    REQUIRE_LIVE();
    size_t pos;
    if (!decode(h, ci_handles, sizeof(ci_handles[0][0][0]), STATE_MAX_GPUS * MIG_IDS * MIG_MAX_CI, &pos) ||
        pos / (MIG_IDS * MIG_MAX_CI) >= mock_device_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    a->d = &mock_devices[pos / (MIG_IDS * MIG_MAX_CI)];
    if (mock_lost(a->d)) {
        return NVML_ERROR_GPU_IS_LOST;
    }
    mig_read(a->d, &a->l);
    a->gi = find_gi(&a->l, (unsigned int)(pos / MIG_MAX_CI % MIG_IDS));
    a->ci = a->gi != NULL ? find_ci(a->gi, (unsigned int)(pos % MIG_MAX_CI)) : NULL;
    return a->ci != NULL ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

static uint64_t splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* MIG-<uuid>: 128 bits hashed from the GPU's UUID and the instance ids (stable per layout). */
void mock_mig_uuid(const char *gpu_uuid, unsigned int gi, unsigned int ci, char *out, size_t cap)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = gpu_uuid; *p != '\0'; p++) {
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    }
    uint64_t a = splitmix(h ^ ((uint64_t)gi << 8 | ci));
    uint64_t b = splitmix(a ^ 0x4d49472d55554944ull);
    a = (a & ~0xf000ull) | 0x5000ull;                          /* version 5 */
    b = (b & 0x3fffffffffffffffull) | 0x8000000000000000ull; /* RFC 4122 variant */
    snprintf(out, cap, "MIG-%08x-%04x-%04x-%04x-%012llx", (unsigned int)(a >> 32), (unsigned int)(a >> 16) & 0xffffu,
             (unsigned int)a & 0xffffu, (unsigned int)(b >> 48), (unsigned long long)(b & 0xffffffffffffull));
}

/* A compute instance's profile name: the GPU instance's when it spans it, else "<n>c.<gi>". */
static void mig_uuid(const struct nvmlDevice_st *d, unsigned int gi, unsigned int ci, char *out, size_t cap)
{
    mock_mig_uuid(d->s.uuid, gi, ci, out, cap);
}

static void ci_name(const struct state_mig_gi *gp, unsigned int slices, char *out, size_t cap)
{
    if (slices >= gp->slices) {
        snprintf(out, cap, "%s", gp->name);
    } else {
        snprintf(out, cap, "%uc.%s", slices, gp->name);
    }
}

static void fill_view(const struct nvmlDevice_st *d, const struct mig_gi *gi, const struct mig_ci *ci,
                      struct mock_mig_view *v)
{
    const struct state_mig_gi *gp = gi_profile_by_index(d, gi->profile);
    const struct state_mig_ci *cp = ci_profile(gp, ci->profile);
    char prof[64];
    ci_name(gp, cp->slices, prof, sizeof(prof));
    memset(v, 0, sizeof(*v));
    v->parent = d;
    v->gi_id = gi->id;
    v->ci_id = ci->id;
    v->gi_slices = gp->slices;
    v->ci_slices = cp->slices;
    v->sms = cp->sms;
    v->copy_engines = gp->copy_engines;
    v->decoders = gp->decoders;
    v->encoders = gp->encoders;
    v->jpegs = gp->jpegs;
    v->ofas = gp->ofas;
    v->memory_mib = gp->memory_mib;
    v->memory_slices = gp->placement_size;
    snprintf(v->name, sizeof(v->name), "%.58s MIG %.31s", d->s.name, prof);
    mig_uuid(d, gi->id, ci->id, v->uuid, sizeof(v->uuid));
}

int mock_mig_device_at(nvmlDevice_t device, struct mock_mig_view *view, nvmlReturn_t *rc)
{
    size_t pos;
    if (!decode(device, mock_mig_devs, sizeof(mock_mig_devs[0][0][0]), STATE_MAX_GPUS * MIG_IDS * MIG_MAX_CI, &pos)) {
        return 0;
    }
    *rc = NVML_ERROR_INVALID_ARGUMENT;
    if (!mock_is_live()) {
        *rc = NVML_ERROR_UNINITIALIZED;
        return 1;
    }
    if (pos / (MIG_IDS * MIG_MAX_CI) >= mock_device_count) {
        return 1;
    }
    const struct nvmlDevice_st *d = &mock_devices[pos / (MIG_IDS * MIG_MAX_CI)];
    if (mock_lost(d)) {
        *rc = NVML_ERROR_GPU_IS_LOST;
        return 1;
    }
    struct mig_layout l;
    mig_read(d, &l);
    struct mig_gi *gi = find_gi(&l, (unsigned int)(pos / MIG_MAX_CI % MIG_IDS));
    struct mig_ci *ci = gi != NULL ? find_ci(gi, (unsigned int)(pos % MIG_MAX_CI)) : NULL;
    if (ci == NULL || !mock_mig_visible(d->board, gi->id, ci->id)) {
        return 1;
    }
    fill_view(d, gi, ci, view);
    *rc = NVML_SUCCESS;
    return 1;
}

/* The MIG devices of a GPU in index order (GPU instance id, then compute instance id); those
 * outside this process's view are left out unless `every` is set. */
static unsigned int mig_list(const struct nvmlDevice_st *d, const struct mig_layout *l, unsigned int *gis,
                             unsigned int *cis, int every)
{
    unsigned int n = 0;
    for (unsigned int id = 0; id < MIG_IDS; id++) {
        for (unsigned int g = 0; g < MIG_MAX_GI; g++) {
            const struct mig_gi *gi = &l->gi[g];
            if (!gi->used || gi->id != id) {
                continue;
            }
            for (unsigned int cid = 0; cid < MIG_MAX_CI; cid++) {
                for (unsigned int c = 0; c < MIG_MAX_CI; c++) {
                    if (gi->ci[c].used && gi->ci[c].id == cid && n < MIG_IDS * MIG_MAX_CI &&
                        (every || mock_mig_visible(d->board, id, cid))) {
                        gis[n] = id;
                        cis[n] = cid;
                        n++;
                    }
                }
            }
        }
    }
    return n;
}

static unsigned int mig_devices(const struct nvmlDevice_st *d, const struct mig_layout *l, unsigned int *gis,
                                unsigned int *cis)
{
    return mig_list(d, l, gis, cis, 0);
}

/* Read before the view exists, so every MIG device of the node counts, as the toolkit counts
 * them on the host; the board GPU is dressed as a device only to read its record. */
int mock_mig_at(const struct state *st, const unsigned char *live, unsigned int board, unsigned int index,
                unsigned int *gi, unsigned int *ci)
{
    static struct nvmlDevice_st probe MOCK_COLD(probe); /* init holds the lifecycle lock: one caller at a time */
    if (board >= st->gpu_count || !st->gpu[board].mig_capable || live == NULL) {
        return -1;
    }
    memset(&probe, 0, sizeof(probe));
    probe.s = st->gpu[board];
    probe.mig_gi = &st->mig_gi_pool[st->gpu[board].mig_gi_first];
    probe.board = board;
    probe.live = live;
    struct mig_layout l;
    mig_read(&probe, &l);
    unsigned int gis[MIG_IDS * MIG_MAX_CI];
    unsigned int cis[MIG_IDS * MIG_MAX_CI];
    unsigned int n = mig_list(&probe, &l, gis, cis, 1);
    if (index >= n) {
        return -1;
    }
    *gi = gis[index];
    *ci = cis[index];
    return 0;
}

uint64_t mock_mig_gi_memory_bytes(const struct nvmlDevice_st *d, unsigned int gi)
{
    if (!d->s.mig_capable) {
        return UINT64_MAX;
    }
    struct mig_layout l;
    mig_read(d, &l);
    struct mig_gi *g = find_gi(&l, gi);
    const struct state_mig_gi *gp = g != NULL ? gi_profile_by_index(d, g->profile) : NULL;
    return gp != NULL ? (uint64_t)gp->memory_mib << 20 : UINT64_MAX;
}

nvmlReturn_t mock_mig_by_uuid(const char *uuid, nvmlDevice_t *device)
{
    if (strncasecmp(uuid, "MIG-", 4) != 0) {
        return NVML_ERROR_NOT_FOUND;
    }
    for (unsigned int i = 0; i < mock_device_count; i++) {
        const struct nvmlDevice_st *d = &mock_devices[i];
        if (!d->s.mig_capable) {
            continue;
        }
        struct mig_layout l;
        mig_read(d, &l);
        for (unsigned int g = 0; g < MIG_MAX_GI; g++) {
            for (unsigned int c = 0; l.gi[g].used && c < MIG_MAX_CI; c++) {
                if (!l.gi[g].ci[c].used || !mock_mig_visible(d->board, l.gi[g].id, l.gi[g].ci[c].id)) {
                    continue;
                }
                char u[48];
                mig_uuid(d, l.gi[g].id, l.gi[g].ci[c].id, u, sizeof(u));
                if (strcasecmp(u, uuid) == 0) {
                    *device = (nvmlDevice_t)(void *)&mock_mig_devs[i][l.gi[g].id][l.gi[g].ci[c].id];
                    return mock_lost(d) ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
                }
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* --- MIG mode --------------------------------------------------------------------------- */

/* A MIG-capable GPU handle (a whole GPU, not a MIG device). */
#define GET_MIG_GPU(handle, var)                                 \
    GET_DEVICE(handle, var);                                     \
    do {                                                         \
        if (!(var)->s.mig_capable) {                             \
            return NVML_ERROR_NOT_SUPPORTED;                     \
        }                                                        \
    } while (0)

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    GET_MIG_GPU(device, d);
    REQUIRE_ARG(currentMode);
    REQUIRE_ARG(pendingMode);
    struct mig_layout l;
    mig_read(d, &l);
    *currentMode = l.current ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = l.pending ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

/*
 * The new mode becomes pending; it is activated at once (the driver resets an idle GPU
 * itself) unless the GPU is busy, when it stays pending with activationStatus IN_USE ("In use
 * by another client") until a GPU reset (nvidia-smi -r), which is what sends mig-parted down
 * its reset path. Busy is what a driver sees as another client: a process listed on the GPU
 * (an allocation record, on the GPU or one of its MIG devices) or memory in use on it.
 * Disabling MIG while GPU instances exist is refused with IN_USE, as the driver refuses it.
 */
MOCK_EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus)
{
    GET_MIG_GPU(device, d);
    REQUIRE_ARG(activationStatus);
    if (d->s.mig_gi_count == 0) {
        return NVML_ERROR_NOT_SUPPORTED; /* capable, but the state carries no profile table */
    }
    if (mode != NVML_DEVICE_MIG_DISABLE && mode != NVML_DEVICE_MIG_ENABLE) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    struct mig_txn t;
    nvmlReturn_t rc = txn_begin(d, &t);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (mode == NVML_DEVICE_MIG_DISABLE) {
        for (unsigned int g = 0; g < MIG_MAX_GI; g++) {
            if (t.l.gi[g].used) {
                txn_end(&t, 0);
                return NVML_ERROR_IN_USE;
            }
        }
    }
    t.l.pending = mode;
    int busy = live_memory_used_bytes(d) > 0 || mock_procs_of(d, NULL, 0) > 0;
    if (busy && t.l.current != mode) {
        *activationStatus = NVML_ERROR_IN_USE;
    } else {
        t.l.current = mode;
        *activationStatus = NVML_SUCCESS;
    }
    txn_end(&t, 1);
    return NVML_SUCCESS;
}

/* A GPU reset on the node (called by the writer through ctypes): the pending mode becomes
 * current and every instance is gone, as after a real reset. Returns 0, or -1 for a bad
 * argument. The caller holds the writers' lock. */
MOCK_EXPORT int nvml_mock_live_mig_reset(void *base, size_t len, unsigned int gpu);

int nvml_mock_live_mig_reset(void *base, size_t len, unsigned int gpu)
{
    if (base == NULL || len != LIVE_TOTAL_BYTES || gpu >= LIVE_GPU_SLOTS) {
        return -1;
    }
    unsigned char *rec = (unsigned char *)base + LIVE_MIG_OFFSET + (size_t)gpu * LIVE_MIG_BYTES_PER_GPU;
    struct mig_layout l;
    copy_out(rec, &l);
    uint32_t pending = l.pending == 1 ? 1 : 0;
    memset(&l, 0, sizeof(l));
    l.current = l.pending = pending;
    uint64_t *seq = (uint64_t *)(void *)(rec + LIVE_MIG_SEQ);
    uint64_t s = __atomic_load_n(seq, __ATOMIC_RELAXED);
    uint64_t odd = (s & 1u) ? s + 2u : s + 1u;
    __atomic_store_n(seq, odd, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    copy_in(rec, &l);
    __atomic_fetch_add((uint64_t *)(void *)(rec + LIVE_MIG_WRITES), 1u, __ATOMIC_RELAXED);
    __atomic_store_n(seq, odd + 1u, __ATOMIC_RELEASE);
    __atomic_fetch_add((uint64_t *)(void *)((unsigned char *)base + LIVE_HDR_GENERATION), 1u, __ATOMIC_RELEASE);
    return 0;
}

/* --- GPU instances -------------------------------------------------------------------- */

/* A MIG-capable GPU (with a profile table) and its layout, whatever its mode. */
static nvmlReturn_t capable_gpu(nvmlDevice_t device, const struct nvmlDevice_st **out, struct mig_layout *l)
{
    const struct nvmlDevice_st *d = NULL;
    nvmlReturn_t rc = mock_device(device, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (!d->s.mig_capable || d->s.mig_gi_count == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    mig_read(d, l);
    *out = d;
    return NVML_SUCCESS;
}

/* A MIG-capable GPU with MIG enabled now, and its layout. */
static nvmlReturn_t enabled_gpu(nvmlDevice_t device, const struct nvmlDevice_st **out, struct mig_layout *l)
{
    const struct nvmlDevice_st *d = NULL;
    nvmlReturn_t rc = mock_device(device, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (!d->s.mig_capable || d->s.mig_gi_count == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    mig_read(d, l);
    *out = d;
    return l->current ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* The fields every GPU-instance profile info version shares, as (NVML field, value from gp): one
 * table so the plain, v2 and v3 answers cannot drift apart. */
#define GI_INFO_FIELDS(X, to)                            \
    X(to, id, gp->id)                                    \
    X(to, sliceCount, gp->slices)                        \
    X(to, instanceCount, gp->instances)                  \
    X(to, multiprocessorCount, gp->sms)                  \
    X(to, copyEngineCount, gp->copy_engines)             \
    X(to, decoderCount, gp->decoders)                    \
    X(to, encoderCount, gp->encoders)                    \
    X(to, jpegCount, gp->jpegs)                          \
    X(to, ofaCount, gp->ofas)                            \
    X(to, memorySizeMB, gp->memory_mib)
#define MIG_PUT(to, field, value) (to)->field = (value);

/* nvml.h answers NOT_SUPPORTED from the plain call only for a GPU that "doesn't support MIG",
 * and from the versioned ones also when it "doesn't have MIG mode enabled": `any_mode` says
 * which (the DRA driver reads the table of a MIG-capable GPU with MIG off through the plain
 * call, with go-nvml's GetGpuInstanceProfileInfo). */
static nvmlReturn_t gi_profile_lookup(nvmlDevice_t device, unsigned int profile, int any_mode,
                                      const struct state_mig_gi **gp)
{
    const struct nvmlDevice_st *d = NULL;
    struct mig_layout l;
    nvmlReturn_t rc = any_mode ? capable_gpu(device, &d, &l) : enabled_gpu(device, &d, &l);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *gp = gi_profile_by_index(d, profile);
    return *gp != NULL ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                             nvmlGpuInstanceProfileInfo_t *info)
{
    const struct state_mig_gi *gp = NULL;
    nvmlReturn_t rc = gi_profile_lookup(device, profile, 1, &gp);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    REQUIRE_ARG(info);
    GI_INFO_FIELDS(MIG_PUT, info)
    info->isP2pSupported = 0; /* P2P: not on these boards' MIG instances */
    return NVML_SUCCESS;
}

static nvmlReturn_t fill_gi_info_v(const struct state_mig_gi *gp, nvmlGpuInstanceProfileInfo_v2_t *info)
{
    if (info->version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *)(void *)info;
        GI_INFO_FIELDS(MIG_PUT, v3) /* v3 has no isP2pSupported */
        snprintf(v3->name, sizeof(v3->name), "MIG %s", gp->name);
        v3->capabilities = 0;
        return NVML_SUCCESS;
    }
    if (info->version != nvmlGpuInstanceProfileInfo_v2) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    GI_INFO_FIELDS(MIG_PUT, info)
    info->isP2pSupported = 0;
    snprintf(info->name, sizeof(info->name), "MIG %s", gp->name);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                              nvmlGpuInstanceProfileInfo_v2_t *info)
{
    const struct state_mig_gi *gp = NULL;
    nvmlReturn_t rc = gi_profile_lookup(device, profile, 0, &gp);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    REQUIRE_ARG(info);
    return fill_gi_info_v(gp, info);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId,
                                                                  nvmlGpuInstanceProfileInfo_v2_t *info)
{
    const struct nvmlDevice_st *d = NULL;
    struct mig_layout l;
    nvmlReturn_t rc = enabled_gpu(device, &d, &l);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    REQUIRE_ARG(info);
    const struct state_mig_gi *gp = gi_profile_by_id(d, profileId);
    if (gp == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return fill_gi_info_v(gp, info);
}

/* The profile behind a profile id (what create/list calls take), on a GPU with MIG enabled. */
static nvmlReturn_t by_profile_id_in(nvmlDevice_t device, unsigned int profileId, int any_mode, struct mig_at *a)
{
    nvmlReturn_t rc = any_mode ? capable_gpu(device, &a->d, &a->l) : enabled_gpu(device, &a->d, &a->l);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    a->gp = gi_profile_by_id(a->d, profileId);
    return a->gp != NULL ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* A GPU-instance profile of a GPU with MIG enabled. */
static nvmlReturn_t by_profile_id(nvmlDevice_t device, unsigned int profileId, struct mig_at *a)
{
    return by_profile_id_in(device, profileId, 0, a);
}

/* How a possible-placements call answers for n placements: *count becomes n, and a short buffer
 * is refused; 1 when there is a buffer to fill, 0 when *rc is the whole answer. */
static int placements_room(const void *placements, unsigned int n, unsigned int *count, nvmlReturn_t *rc)
{
    unsigned int room = *count;
    *count = n;
    *rc = placements != NULL && room < n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    return placements != NULL && room >= n;
}

/* Whether a caller's placement is one the profile allows: a start among its n starts, its size. */
static int placement_allowed(const uint32_t *starts, unsigned int n, uint32_t size, unsigned int want_start,
                             unsigned int want_size)
{
    int known = 0;
    for (unsigned int i = 0; i < n; i++) {
        known |= starts[i] == want_start;
    }
    return known && want_size == size;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                                       nvmlGpuInstancePlacement_t *placements,
                                                                       unsigned int *count)
{
    /* nvml.h: NOT_SUPPORTED only "if device doesn't support MIG"; the table is the board's. */
    MIG_AT(a, by_profile_id_in(device, profileId, 1, &a));
    REQUIRE_ARG(count);
    nvmlReturn_t rc;
    if (placements_room(placements, a.gp->placement_count, count, &rc)) {
        for (uint32_t i = 0; i < a.gp->placement_count; i++) {
            placements[i].start = a.gp->placement_start[i];
            placements[i].size = a.gp->placement_size;
        }
    }
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                                    nvmlGpuInstancePlacement_t *placements,
                                                                    unsigned int *count)
{
    return nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profileId, placements, count);
}

/* The spans one level holds (a GPU's GPU instances, a GPU instance's compute instances), for
 * counting what could still be created beside them. */
struct spans {
    unsigned int n;
    uint32_t start[MIG_MAX_GI + MIG_MAX_CI], size[MIG_MAX_GI + MIG_MAX_CI];
};

/* How many of the n placements (starts, size) could still be taken beside s, at most `room`:
 * greedy from the lowest start, as creation places them. */
static unsigned int spans_greedy(struct spans *s, const uint32_t *starts, unsigned int n, uint32_t size,
                                 unsigned int room)
{
    unsigned int k = 0;
    for (unsigned int i = 0; i < n && k < room; i++) {
        int fits = 1;
        for (unsigned int j = 0; j < s->n; j++) {
            fits &= !overlaps(s->start[j], s->size[j], starts[i], size);
        }
        if (fits) {
            s->start[s->n] = starts[i];
            s->size[s->n] = size;
            s->n++;
            k++;
        }
    }
    return k;
}

/* Instances of the profile that could still be created: free placements, within its count and
 * the free slots. */
static unsigned int gi_remaining(const struct mig_layout *l, const struct state_mig_gi *gp)
{
    unsigned int have = gi_count_of(l, gp->profile);
    struct spans s = {0};
    for (unsigned int g = 0; g < MIG_MAX_GI; g++) {
        if (l->gi[g].used) {
            s.start[s.n] = l->gi[g].start;
            s.size[s.n++] = l->gi[g].size;
        }
    }
    unsigned int room = have >= gp->instances ? 0 : gp->instances - have;
    room = room < MIG_MAX_GI - s.n ? room : MIG_MAX_GI - s.n;
    return spans_greedy(&s, gp->placement_start, gp->placement_count, gp->placement_size, room);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                                   unsigned int *count)
{
    MIG_AT(a, by_profile_id(device, profileId, &a));
    REQUIRE_ARG(count);
    *count = gi_remaining(&a.l, a.gp);
    return NVML_SUCCESS;
}

static nvmlReturn_t create_gi(nvmlDevice_t device, unsigned int profileId, const nvmlGpuInstancePlacement_t *want,
                              nvmlGpuInstance_t *out)
{
    MIG_AT(a, by_profile_id(device, profileId, &a));
    REQUIRE_ARG(out);
    if (want != NULL && !placement_allowed(a.gp->placement_start, a.gp->placement_count, a.gp->placement_size,
                                           want->start, want->size)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    struct mig_txn t;
    nvmlReturn_t rc = txn_begin(a.d, &t);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (!t.l.current) {
        txn_end(&t, 0);
        return NVML_ERROR_NOT_SUPPORTED;
    }
    int start = -1;
    unsigned int best = UINT_MAX;
    if (gi_count_of(&t.l, a.gp->profile) < a.gp->instances) {
        for (uint32_t i = 0; i < a.gp->placement_count; i++) {
            uint32_t s = a.gp->placement_start[i];
            if ((want == NULL || want->start == s) && gi_fits(&t.l, s, a.gp->placement_size)) {
                unsigned int lost = gi_damage(a.d, &t.l, s, a.gp->placement_size);
                if (lost < best) {
                    best = lost;
                    start = (int)s;
                }
            }
        }
    }
    struct mig_gi *slot = NULL;
    for (unsigned int g = 0; g < MIG_MAX_GI && slot == NULL; g++) {
        slot = t.l.gi[g].used ? NULL : &t.l.gi[g];
    }
    if (start < 0 || slot == NULL) {
        txn_end(&t, 0);
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    memset(slot, 0, sizeof(*slot));
    slot->used = 1;
    slot->profile = a.gp->profile;
    slot->start = (uint32_t)start;
    slot->size = a.gp->placement_size;
    slot->id = gi_id(slot->start, slot->size);
    *out = gi_handle(a.d, slot->id);
    t.changed = 1;
    txn_end(&t, 1);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                                     nvmlGpuInstance_t *gpuInstance)
{
    return create_gi(device, profileId, NULL, gpuInstance);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                                  const nvmlGpuInstancePlacement_t *placement,
                                                                  nvmlGpuInstance_t *gpuInstance)
{
    REQUIRE_ARG(placement);
    return create_gi(device, profileId, placement, gpuInstance);
}

/*
 * Whether a process record holds a MIG device of GPU instance `gi` of `d` (compute instance
 * `ci`, or any of them when ci is MOCK_PROC_NO_INSTANCE). The real driver refuses to destroy a
 * compute or GPU instance a process runs on ("In use by another client"); mig-parted's
 * re-partitioning and nvidia-smi mig -dci/-dgi then fail instead of pulling an instance out from
 * under a workload. Records name instances as written, so one on an instance recreated since
 * still holds it, as a process the driver never saw end would.
 */
struct holder {
    unsigned int gi, ci;
    int held;
};

static void holder_entry(const struct mock_proc *p, void *arg)
{
    struct holder *h = arg;
    if (p->gpu_instance == h->gi && p->compute_instance != MOCK_PROC_NO_INSTANCE &&
        (h->ci == MOCK_PROC_NO_INSTANCE || p->compute_instance == h->ci)) {
        h->held = 1;
    }
}

static int instance_held(const struct nvmlDevice_st *d, unsigned int gi, unsigned int ci)
{
    struct holder h = {gi, ci, 0};
    if (mock_procs_any()) {
        mock_procs_each(d, holder_entry, &h);
    }
    return h.held;
}

MOCK_EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
    MIG_AT(a, get_gi(gpuInstance, &a));
    struct mig_txn t;
    struct mig_gi *now = NULL;
    nvmlReturn_t rc = txn_gi(a.d, a.gi->id, &t, &now);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    for (unsigned int c = 0; c < MIG_MAX_CI; c++) {
        if (now->ci[c].used) {
            txn_end(&t, 0);
            return NVML_ERROR_IN_USE; /* compute instances first */
        }
    }
    if (instance_held(a.d, now->id, MOCK_PROC_NO_INSTANCE)) {
        txn_end(&t, 0);
        return NVML_ERROR_IN_USE;
    }
    memset(now, 0, sizeof(*now));
    t.changed = 1;
    txn_end(&t, 1);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                                   nvmlGpuInstance_t *gpuInstances, unsigned int *count)
{
    MIG_AT(a, by_profile_id(device, profileId, &a));
    REQUIRE_ARG(gpuInstances);
    REQUIRE_ARG(count);
    unsigned int n = 0;
    for (unsigned int id = 0; id < MIG_IDS; id++) {
        struct mig_gi *gi = find_gi(&a.l, id);
        if (gi != NULL && gi->profile == a.gp->profile && n < a.gp->instances && gi_visible(a.d, id)) {
            gpuInstances[n++] = gi_handle(a.d, id);
        }
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t mock_mig_gi_present(nvmlDevice_t device, unsigned int id)
{
    const struct nvmlDevice_st *d = NULL;
    struct mig_layout l;
    nvmlReturn_t rc = enabled_gpu(device, &d, &l);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    return id < MIG_IDS && find_gi(&l, id) != NULL && gi_visible(d, id) ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                      nvmlGpuInstance_t *gpuInstance)
{
    const struct nvmlDevice_st *d = NULL;
    struct mig_layout l;
    nvmlReturn_t rc = enabled_gpu(device, &d, &l);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    REQUIRE_ARG(gpuInstance);
    if (id >= MIG_IDS || find_gi(&l, id) == NULL || !gi_visible(d, id)) {
        return NVML_ERROR_NOT_FOUND;
    }
    *gpuInstance = gi_handle(d, id);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    MIG_AT(a, get_gi(gpuInstance, &a));
    REQUIRE_ARG(info);
    info->device = (nvmlDevice_t)(uintptr_t)a.d;
    info->id = a.gi->id;
    info->profileId = gi_profile_by_index(a.d, a.gi->profile)->id;
    info->placement.start = a.gi->start;
    info->placement.size = a.gi->size;
    return NVML_SUCCESS;
}

/* --- compute instances ---------------------------------------------------------------- */

static nvmlReturn_t ci_profile_lookup(nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
                                      const struct state_mig_gi **gp, const struct state_mig_ci **cp)
{
    MIG_AT(a, get_gi(gpuInstance, &a));
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || engProfile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *gp = gi_profile_by_index(a.d, a.gi->profile);
    *cp = ci_profile(*gp, profile);
    return *cp != NULL ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* The fields both compute-instance profile info versions share, as (NVML field, value from gp and
 * cp); the engines are the GPU instance's, shared by its compute instances. */
#define CI_INFO_FIELDS(X, to)                                         \
    X(to, id, (unsigned int)ci_index(cp->slices))                     \
    X(to, sliceCount, cp->slices)                                     \
    X(to, instanceCount, ci_placements(cp->slices, gp->slices, NULL)) \
    X(to, multiprocessorCount, cp->sms)                               \
    X(to, sharedCopyEngineCount, gp->copy_engines)                    \
    X(to, sharedDecoderCount, gp->decoders)                           \
    X(to, sharedEncoderCount, gp->encoders)                           \
    X(to, sharedJpegCount, gp->jpegs)                                 \
    X(to, sharedOfaCount, gp->ofas)

MOCK_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                                      unsigned int engProfile,
                                                                      nvmlComputeInstanceProfileInfo_t *info)
{
    const struct state_mig_gi *gp = NULL;
    const struct state_mig_ci *cp = NULL;
    nvmlReturn_t rc = ci_profile_lookup(gpuInstance, profile, engProfile, &gp, &cp);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    REQUIRE_ARG(info);
    CI_INFO_FIELDS(MIG_PUT, info)
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance,
                                                                       unsigned int profile, unsigned int engProfile,
                                                                       nvmlComputeInstanceProfileInfo_v2_t *info)
{
    const struct state_mig_gi *gp = NULL;
    const struct state_mig_ci *cp = NULL;
    nvmlReturn_t rc = ci_profile_lookup(gpuInstance, profile, engProfile, &gp, &cp);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    REQUIRE_ARG(info);
    if (info->version != nvmlComputeInstanceProfileInfo_v2 && info->version != nvmlComputeInstanceProfileInfo_v3) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    CI_INFO_FIELDS(MIG_PUT, info)
    char prof[64];
    ci_name(gp, cp->slices, prof, sizeof(prof));
    snprintf(info->name, sizeof(info->name), "MIG %s", prof);
    if (info->version == nvmlComputeInstanceProfileInfo_v3) {
        ((nvmlComputeInstanceProfileInfo_v3_t *)(void *)info)->capabilities = 0;
    }
    return NVML_SUCCESS;
}

/* The GPU instance and the compute profile whose id (= its index) the caller names. */
static nvmlReturn_t ci_by_profile_id(nvmlGpuInstance_t gpuInstance, unsigned int profileId, struct mig_at *a)
{
    nvmlReturn_t rc = get_gi(gpuInstance, a);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    a->gp = gi_profile_by_index(a->d, a->gi->profile);
    a->cp = profileId < NVML_COMPUTE_INSTANCE_PROFILE_COUNT ? ci_profile(a->gp, profileId) : NULL;
    return a->cp != NULL ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

MOCK_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance,
                                                                             unsigned int profileId,
                                                                             nvmlComputeInstancePlacement_t *placements,
                                                                             unsigned int *count)
{
    MIG_AT(a, ci_by_profile_id(gpuInstance, profileId, &a));
    REQUIRE_ARG(count);
    unsigned int starts[MIG_MAX_CI];
    unsigned int n = ci_placements(a.cp->slices, a.gp->slices, starts);
    nvmlReturn_t rc;
    if (placements_room(placements, n, count, &rc)) {
        for (unsigned int i = 0; i < n; i++) {
            placements[i].start = starts[i];
            placements[i].size = a.cp->slices;
        }
    }
    return rc;
}

/* Compute instances of the profile that could still be created: free placements, within the free
 * slots. */
static unsigned int ci_remaining(const struct mig_gi *gi, const struct state_mig_gi *gp, const struct state_mig_ci *cp)
{
    unsigned int starts[MIG_MAX_CI];
    unsigned int n = ci_placements(cp->slices, gp->slices, starts);
    struct spans s = {0};
    for (unsigned int c = 0; c < MIG_MAX_CI; c++) {
        if (gi->ci[c].used) {
            s.start[s.n] = gi->ci[c].start;
            s.size[s.n++] = gi->ci[c].size;
        }
    }
    return spans_greedy(&s, starts, n, cp->slices, MIG_MAX_CI - s.n);
}

MOCK_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
                                                                            unsigned int profileId, unsigned int *count)
{
    MIG_AT(a, ci_by_profile_id(gpuInstance, profileId, &a));
    REQUIRE_ARG(count);
    *count = ci_remaining(a.gi, a.gp, a.cp);
    return NVML_SUCCESS;
}

/* How many compute placements, of every compute profile the GPU instance offers, that are
 * free now one at start:size would take away: creation without a placement takes the free one
 * that takes away fewest, the lowest start on a tie, as for GPU instances. So a 1c.3g then a
 * 2c.3g fit in one 3g instance (the 1c lands on slice 2, leaving 0-1 to the 2c), as a real
 * driver creates them. */
static unsigned int ci_damage(const struct mig_gi *gi, const struct state_mig_gi *gp, uint32_t start, uint32_t size)
{
    unsigned int lost = 0;
    for (uint32_t i = 0; i < gp->ci_count && i < STATE_MAX_MIG_CI_PROFILES; i++) {
        unsigned int starts[MIG_MAX_CI];
        unsigned int n = ci_placements(gp->ci[i].slices, gp->slices, starts);
        for (unsigned int p = 0; p < n; p++) {
            lost += ci_fits(gi, starts[p], gp->ci[i].slices) && overlaps(starts[p], gp->ci[i].slices, start, size);
        }
    }
    return lost;
}

static nvmlReturn_t create_ci(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                              const nvmlComputeInstancePlacement_t *want, nvmlComputeInstance_t *out)
{
    MIG_AT(a, ci_by_profile_id(gpuInstance, profileId, &a));
    REQUIRE_ARG(out);
    unsigned int starts[MIG_MAX_CI];
    unsigned int n = ci_placements(a.cp->slices, a.gp->slices, starts);
    if (want != NULL && !placement_allowed(starts, n, a.cp->slices, want->start, want->size)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned int gid = a.gi->id;
    struct mig_txn t;
    struct mig_gi *now = NULL;
    nvmlReturn_t rc = txn_gi(a.d, gid, &t, &now);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    int start = -1;
    unsigned int best = UINT_MAX;
    for (unsigned int i = 0; i < n; i++) {
        if ((want == NULL || want->start == starts[i]) && ci_fits(now, starts[i], a.cp->slices)) {
            unsigned int lost = ci_damage(now, a.gp, starts[i], a.cp->slices);
            if (lost < best) {
                best = lost;
                start = (int)starts[i];
            }
        }
    }
    struct mig_ci *slot = NULL;
    for (unsigned int c = 0; c < MIG_MAX_CI && slot == NULL; c++) {
        slot = now->ci[c].used ? NULL : &now->ci[c];
    }
    int id = -1;
    for (unsigned int cid = 0; cid < MIG_MAX_CI && id < 0; cid++) {
        id = find_ci(now, cid) == NULL ? (int)cid : -1;
    }
    if (start < 0 || slot == NULL || id < 0) {
        txn_end(&t, 0);
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    slot->used = 1;
    slot->id = (uint32_t)id;
    slot->profile = profileId;
    slot->start = (uint32_t)start;
    slot->size = a.cp->slices;
    *out = ci_handle(a.d, gid, (unsigned int)id);
    t.changed = 1;
    txn_end(&t, 1);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                              nvmlComputeInstance_t *computeInstance)
{
    return create_ci(gpuInstance, profileId, NULL, computeInstance);
}

MOCK_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gpuInstance,
                                                                           unsigned int profileId,
                                                                           const nvmlComputeInstancePlacement_t *placement,
                                                                           nvmlComputeInstance_t *computeInstance)
{
    REQUIRE_ARG(placement);
    return create_ci(gpuInstance, profileId, placement, computeInstance);
}

MOCK_EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
    MIG_AT(a, get_ci(computeInstance, &a));
    unsigned int cid = a.ci->id;
    struct mig_txn t;
    struct mig_gi *now = NULL;
    nvmlReturn_t rc = txn_gi(a.d, a.gi->id, &t, &now);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    struct mig_ci *cnow = find_ci(now, cid);
    if (cnow == NULL) {
        txn_end(&t, 0);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (instance_held(a.d, now->id, cid)) {
        txn_end(&t, 0);
        return NVML_ERROR_IN_USE;
    }
    memset(cnow, 0, sizeof(*cnow));
    t.changed = 1;
    txn_end(&t, 1);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                            nvmlComputeInstance_t *computeInstances,
                                                            unsigned int *count)
{
    MIG_AT(a, ci_by_profile_id(gpuInstance, profileId, &a));
    REQUIRE_ARG(computeInstances);
    REQUIRE_ARG(count);
    unsigned int cap = ci_placements(a.cp->slices, a.gp->slices, NULL);
    unsigned int n = 0;
    for (unsigned int cid = 0; cid < MIG_MAX_CI; cid++) {
        struct mig_ci *ci = find_ci(a.gi, cid);
        if (ci != NULL && ci->profile == profileId && n < cap && mock_mig_visible(a.d->board, a.gi->id, cid)) {
            computeInstances[n++] = ci_handle(a.d, a.gi->id, cid);
        }
    }
    *count = n;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                               nvmlComputeInstance_t *computeInstance)
{
    MIG_AT(a, get_gi(gpuInstance, &a));
    REQUIRE_ARG(computeInstance);
    if (id >= MIG_MAX_CI || find_ci(a.gi, id) == NULL || !mock_mig_visible(a.d->board, a.gi->id, id)) {
        return NVML_ERROR_NOT_FOUND;
    }
    *computeInstance = ci_handle(a.d, a.gi->id, id);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                                       nvmlComputeInstanceInfo_t *info)
{
    MIG_AT(a, get_ci(computeInstance, &a));
    REQUIRE_ARG(info);
    info->device = (nvmlDevice_t)(uintptr_t)a.d;
    info->gpuInstance = gi_handle(a.d, a.gi->id);
    info->id = a.ci->id;
    info->profileId = a.ci->profile;
    info->placement.start = a.ci->start;
    info->placement.size = a.ci->size;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                                    nvmlComputeInstanceInfo_t *info)
{
    return nvmlComputeInstanceGetInfo_v2(computeInstance, info);
}

/* --- MIG devices ------------------------------------------------------------------------ */

/* The answer of a call asked of either kind of device handle, before it writes: a bad handle,
 * then a missing `out`, then for a MIG device the state of its instances (*v filled when that
 * is success) and for a whole GPU `whole`. *mig says which kind the handle is. */
static nvmlReturn_t mig_or_gpu(nvmlDevice_t device, const void *out, nvmlReturn_t whole, struct mock_mig_view *v,
                               int *mig)
{
    nvmlReturn_t rc;
    *mig = mock_mig_device(device, v, &rc);
    if (*mig) {
        return out == NULL ? NVML_ERROR_INVALID_ARGUMENT : rc;
    }
    const struct nvmlDevice_st *d = NULL;
    rc = mock_device(device, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    return out == NULL ? NVML_ERROR_INVALID_ARGUMENT : whole;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    struct mock_mig_view v;
    int mig;
    nvmlReturn_t rc = mig_or_gpu(device, isMigDevice, NVML_SUCCESS, &v, &mig);
    if (rc == NVML_SUCCESS) {
        *isMigDevice = mig ? 1 : 0;
    }
    return rc;
}

/* Zero unless MIG is enabled, then the most compute instances a GPU can hold (7). */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    GET_MIG_GPU(device, d);
    REQUIRE_ARG(count);
    struct mig_layout l;
    mig_read(d, &l);
    unsigned int most = 0;
    for (uint32_t i = 0; i < d->s.mig_gi_count; i++) {
        most = d->mig_gi[i].slices > most ? d->mig_gi[i].slices : most;
    }
    *count = l.current ? most : 0;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                             nvmlDevice_t *migDevice)
{
    GET_MIG_GPU(device, d);
    REQUIRE_ARG(migDevice);
    struct mig_layout l;
    mig_read(d, &l);
    unsigned int gis[MIG_IDS * MIG_MAX_CI];
    unsigned int cis[MIG_IDS * MIG_MAX_CI];
    unsigned int n = mig_devices(d, &l, gis, cis);
    if (index >= n) {
        return NVML_ERROR_NOT_FOUND;
    }
    *migDevice = (nvmlDevice_t)(void *)&mock_mig_devs[d->index][gis[index]][cis[index]];
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    struct mock_mig_view v;
    int mig;
    /* a whole GPU's handle is not a MIG device handle */
    nvmlReturn_t rc = mig_or_gpu(migDevice, device, NVML_ERROR_INVALID_ARGUMENT, &v, &mig);
    if (rc == NVML_SUCCESS) {
        *device = (nvmlDevice_t)(uintptr_t)v.parent;
    }
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    struct mock_mig_view v;
    int mig;
    /* a whole GPU has no GPU instance id */
    nvmlReturn_t rc = mig_or_gpu(device, id, NVML_ERROR_NOT_SUPPORTED, &v, &mig);
    if (rc == NVML_SUCCESS) {
        *id = v.gi_id;
    }
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    struct mock_mig_view v;
    int mig;
    nvmlReturn_t rc = mig_or_gpu(device, id, NVML_ERROR_NOT_SUPPORTED, &v, &mig);
    if (rc == NVML_SUCCESS) {
        *id = v.ci_id;
    }
    return rc;
}
