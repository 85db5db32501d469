/*
 * The live layer's file (answers no nvml.h function): mapping and checking it at init
 * (reader side), and the write, snapshot and retire primitives that the Python writer
 * (nvml_mock_live.layer) calls through ctypes, so that readers and writers share one
 * implementation of the sequence-lock protocol with real atomics on every architecture
 * (plain Python stores into a mapping carry no ordering guarantee on weakly ordered CPUs).
 */
#define _GNU_SOURCE
#include "live.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mock.h"

/* Mappings are never unmapped: a thread may still read a record of a previous init cycle
 * while another re-initialises. A re-init of the same file reuses its mapping, and a distinct
 * file takes a new one until LIVE_MAPS are made; from then on each new file is mapped over the
 * oldest mapping's address (MAP_FIXED: a late reader of that cycle reads the new file's
 * records, never unmapped memory). So the library holds at most LIVE_MAPS mappings, at
 * LIVE_MAPS addresses, and the SIGBUS guard watches each of them (live_guard.c), however
 * often the file is replaced. */
struct live_map {
    void *base;
    dev_t dev;
    ino_t ino;
};
static struct live_map maps[LIVE_MAPS];
static unsigned int maps_used;
static unsigned int maps_oldest; /* the slot the next new file takes once all are used */

/* The file bound at the last attach, for mock_live_repair: its path, its mapping and the
 * board UUIDs its records must carry. maps, maps_used and these are guarded by bind_lock
 * (attach runs under init's lock, a repair on any thread). */
static pthread_mutex_t bind_lock = PTHREAD_MUTEX_INITIALIZER;
static char bound_path[4096] MOCK_COLD(bound_path);
static unsigned char *bound_base;
static unsigned int bound_count;
static char bound_uuids[LIVE_GPU_SLOTS][LIVE_RECORD_UUID_BYTES];
static int bound_broken; /* the last repair failed: said once on stderr, until it works */

void mock_live_pause(unsigned int attempt)
{
    if (attempt >= 4) {
        sched_yield();
    }
}

/*
 * Fault triggers (keys fault_trigger, fault_trigger_param, fault_trigger_seed). Read without
 * the armed check (they are never armed themselves). "now" and "at a time" are the same in
 * every process; call counts and the probability draw are per process, and latch once fired
 * until the record is written again (a new fault, or a reset, re-arms it).
 */
/* A trigger key's value: 0 while its slot is unset, else clamped to `max` (a damaged or
 * hostile file can hold anything; the writer validates against the declared bounds). */
static uint64_t trigger_value(const unsigned char *rec, unsigned int slot, uint64_t max)
{
    const uint64_t *mask = (const uint64_t *)(const void *)(rec + LIVE_RECORD_MASK);
    const uint64_t *vals = (const uint64_t *)(const void *)(rec + LIVE_RECORD_VALUES);
    if (!((__atomic_load_n(&mask[slot / 64u], __ATOMIC_RELAXED) >> (slot % 64u)) & 1u)) {
        return 0;
    }
    return mock_live_clamp_u(__atomic_load_n(&vals[slot], __ATOMIC_RELAXED), 0, max);
}

static uint64_t realtime_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Per-process trigger state, by record (records of one mapping are consecutive, so their
 * addresses fall in distinct entries; a few mappings fit side by side). */
#define TRIGGER_ENTRIES 1024u
struct trigger_state {
    _Atomic(const unsigned char *) rec;
    _Atomic uint64_t writes; /* the record's write count this state belongs to */
    _Atomic uint64_t calls;
    atomic_int fired;
};
static struct trigger_state triggers[TRIGGER_ENTRIES] MOCK_COLD(triggers);

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The trigger kinds, numbered by keys.toml [vocabulary] triggers (live_layout.h). */
#define TRIGGER_ENUM(name, number) TRIGGER_##name = number,
enum { TRIGGER_NOW = 0, LIVE_TRIGGERS(TRIGGER_ENUM) };

static struct trigger_state *trigger_state_of(const unsigned char *rec)
{
    return &triggers[((uintptr_t)rec / LIVE_RECORD_BYTES) % TRIGGER_ENTRIES];
}

static uint64_t record_writes(const unsigned char *rec)
{
    return __atomic_load_n((const uint64_t *)(const void *)(rec + LIVE_RECORD_WRITES), __ATOMIC_ACQUIRE);
}

/* "after N calls" and "with a probability per call": a call is a read of an armed key on
 * the GPU. Once fired, it stays fired in this process until the record is written again. */
static int mock_live_counted_trigger(const unsigned char *rec, uint64_t kind, uint64_t param, uint64_t seed)
{
    struct trigger_state *st = trigger_state_of(rec);
    uint64_t writes = record_writes(rec);
    if (atomic_load_explicit(&st->rec, memory_order_acquire) != rec ||
        atomic_load_explicit(&st->writes, memory_order_acquire) != writes) {
        atomic_store_explicit(&st->calls, 0, memory_order_relaxed);
        atomic_store_explicit(&st->fired, 0, memory_order_relaxed);
        atomic_store_explicit(&st->writes, writes, memory_order_release);
        atomic_store_explicit(&st->rec, rec, memory_order_release);
    }
    if (atomic_load_explicit(&st->fired, memory_order_acquire)) {
        return 1;
    }
    uint64_t call = atomic_fetch_add_explicit(&st->calls, 1, memory_order_relaxed) + 1;
    int fire = kind == TRIGGER_AFTER_CALLS ? call > param : (splitmix64(seed ^ call) % 1000000u) < param;
    if (fire) {
        atomic_store_explicit(&st->fired, 1, memory_order_release);
    }
    return fire;
}

/* Whether a counted trigger has fired in this process for the record as it is written now. */
static int mock_live_counted_fired(const unsigned char *rec)
{
    const struct trigger_state *st = trigger_state_of(rec);
    return atomic_load_explicit(&st->rec, memory_order_acquire) == rec &&
           atomic_load_explicit(&st->writes, memory_order_acquire) == record_writes(rec) &&
           atomic_load_explicit(&st->fired, memory_order_acquire);
}

/* The record's trigger; `call`: the look is a call's read, which counts. */
static int trigger_check(const unsigned char *rec, int call)
{
    uint64_t kind = trigger_value(rec, LIVE_SLOT_fault_trigger, LIVE_TRIGGER_LAST);
    uint64_t param = trigger_value(rec, LIVE_SLOT_fault_trigger_param, UINT64_MAX);
    switch (kind) {
    case TRIGGER_NOW: return 1;
    case TRIGGER_AT: return realtime_ms() >= param;
    default:
        return call ? mock_live_counted_trigger(rec, kind, param, trigger_value(rec, LIVE_SLOT_fault_trigger_seed, UINT64_MAX))
                    : mock_live_counted_fired(rec);
    }
}

int mock_live_trigger_fired(const unsigned char *rec)
{
    return trigger_check(rec, 1);
}

int mock_live_trigger_peek(const unsigned char *rec)
{
    return trigger_check(rec, 0);
}

uint32_t mock_live_arm_of(const unsigned char *rec)
{
    return (uint32_t)trigger_value(rec, LIVE_SLOT_fault_trigger_arm, UINT32_MAX);
}

/* Forget the trigger state of every record of the mapping at `base` (it now maps another
 * file). Under bind_lock, at init: no call of this process reads a record meanwhile. */
static void triggers_forget(const void *base)
{
    uintptr_t lo = (uintptr_t)base;
    for (unsigned int i = 0; i < TRIGGER_ENTRIES; i++) {
        uintptr_t rec = (uintptr_t)atomic_load_explicit(&triggers[i].rec, memory_order_acquire);
        if (rec >= lo && rec - lo < (uintptr_t)LIVE_TOTAL_BYTES) {
            atomic_store_explicit(&triggers[i].rec, NULL, memory_order_release);
        }
    }
}

static uint32_t rd32(const unsigned char *base, unsigned int off)
{
    uint32_t v;
    memcpy(&v, base + off, sizeof(v));
    return v;
}

static uint64_t rd64(const unsigned char *base, unsigned int off)
{
    uint64_t v;
    memcpy(&v, base + off, sizeof(v));
    return v;
}

/* Check a mapped header against the layout this library was built with. NULL when it
 * matches; otherwise the reason. */
static const char *check_header(const unsigned char *h)
{
    char magic[16] = {0};
    memcpy(magic, h + LIVE_HDR_MAGIC, sizeof(magic));
    if (memcmp(magic, LIVE_MAGIC, sizeof(LIVE_MAGIC)) != 0) {
        return "not a live layer file (bad magic)";
    }
    if (rd32(h, LIVE_HDR_FORMAT) != LIVE_FORMAT) {
        return "live layer format differs from the one this library reads";
    }
    if (rd32(h, LIVE_HDR_HEADER_BYTES) != LIVE_HEADER_BYTES || rd64(h, LIVE_HDR_TOTAL_BYTES) != LIVE_TOTAL_BYTES ||
        rd32(h, LIVE_HDR_GPU_SLOTS) != LIVE_GPU_SLOTS || rd32(h, LIVE_HDR_KEY_SLOTS) != LIVE_KEY_SLOTS ||
        rd32(h, LIVE_HDR_RECORD_BYTES) != LIVE_RECORD_BYTES || rd64(h, LIVE_HDR_RECORDS_OFFSET) != LIVE_RECORDS_OFFSET ||
        rd64(h, LIVE_HDR_PROCESSES_OFFSET) != LIVE_PROCESSES_OFFSET ||
        rd32(h, LIVE_HDR_PROCESS_SLOTS) != LIVE_PROCESS_SLOTS ||
        rd32(h, LIVE_HDR_PROCESS_RECORD_BYTES) != LIVE_PROCESS_RECORD_BYTES ||
        rd64(h, LIVE_HDR_MIG_OFFSET) != LIVE_MIG_OFFSET || rd32(h, LIVE_HDR_MIG_BYTES_PER_GPU) != LIVE_MIG_BYTES_PER_GPU ||
        rd64(h, LIVE_HDR_EVENTS_OFFSET) != LIVE_EVENTS_OFFSET || rd32(h, LIVE_HDR_EVENT_SLOTS) != LIVE_EVENT_SLOTS ||
        rd32(h, LIVE_HDR_EVENT_RECORD_BYTES) != LIVE_EVENT_RECORD_BYTES) {
        return "live layer layout differs from the one this library was built with";
    }
    if (__atomic_load_n((const uint32_t *)(const void *)(h + LIVE_HDR_RETIRED), __ATOMIC_ACQUIRE) != 0) {
        return "live layer file was retired (replaced by a re-stage; re-initialise to see the new one)";
    }
    return NULL;
}

/* Caller holds bind_lock. A file mapped before is mapped again over its old mapping (the
 * guard may have replaced that by zeros, and a repair may have put another file there). */
static void *map_file(int fd, const struct stat *st)
{
    for (unsigned int i = 0; i < maps_used; i++) {
        if (maps[i].dev == st->st_dev && maps[i].ino == st->st_ino) {
            void *again = mmap(maps[i].base, (size_t)LIVE_TOTAL_BYTES, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
            return again == MAP_FAILED ? NULL : again;
        }
    }
    if (maps_used == LIVE_MAPS) { /* every slot used: the oldest address takes the new file */
        struct live_map *slot = &maps[maps_oldest];
        void *again = mmap(slot->base, (size_t)LIVE_TOTAL_BYTES, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
        if (again == MAP_FAILED) {
            return NULL;
        }
        maps_oldest = (maps_oldest + 1u) % LIVE_MAPS;
        slot->dev = st->st_dev;
        slot->ino = st->st_ino;
        triggers_forget(slot->base); /* another file's records: no trigger state carries over */
        mock_live_guard_watch(slot->base);
        return slot->base;
    }
    void *base = mmap(NULL, (size_t)LIVE_TOTAL_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        return NULL;
    }
    struct live_map *slot = &maps[maps_used++];
    slot->base = base;
    slot->dev = st->st_dev;
    slot->ino = st->st_ino;
    mock_live_guard_watch(base);
    return base;
}

static int attach_locked(const char *path, unsigned int count, const char *uuids, size_t uuid_stride,
                         const unsigned char **recs, const unsigned char **header, char *why, size_t why_len)
{
    for (unsigned int i = 0; i < count; i++) {
        recs[i] = NULL;
    }
    *header = NULL;
    /* O_NONBLOCK: a FIFO or device put in the file's place must not block init. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT) {
            return 0;
        }
        snprintf(why, why_len, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(why, why_len, "not a regular file");
        return -1;
    }
    if ((unsigned long long)st.st_size != LIVE_TOTAL_BYTES) {
        close(fd);
        snprintf(why, why_len, "size %lld bytes, the layout needs %llu (truncated or not a live layer file)",
                 (long long)st.st_size, (unsigned long long)LIVE_TOTAL_BYTES);
        return -1;
    }
    const unsigned char *base = map_file(fd, &st);
    int e = errno;
    close(fd);
    if (base == NULL) {
        snprintf(why, why_len, "cannot map: %s", strerror(e));
        return -1;
    }
    const char *bad = check_header(base);
    if (bad != NULL) {
        snprintf(why, why_len, "%s", bad);
        return -1;
    }
    if (count > LIVE_GPU_SLOTS) {
        snprintf(why, why_len, "the state has %u GPUs, the live layer holds %u", count, LIVE_GPU_SLOTS);
        return -1;
    }
    for (unsigned int i = 0; i < count; i++) {
        const unsigned char *rec = base + LIVE_RECORDS_OFFSET + (size_t)i * LIVE_RECORD_BYTES;
        const char *want = uuids + i * uuid_stride;
        const char *have = (const char *)rec + LIVE_RECORD_UUID;
        if (memchr(have, '\0', LIVE_RECORD_UUID_BYTES) == NULL || strcmp(have, want) != 0) {
            snprintf(why, why_len, "record %u belongs to another GPU than the state's %.80s (stale live layer)", i,
                     want);
            return -1;
        }
    }
    for (unsigned int i = 0; i < count; i++) {
        recs[i] = base + LIVE_RECORDS_OFFSET + (size_t)i * LIVE_RECORD_BYTES;
    }
    *header = base;
    /* copied, not printed: a successful init runs no printf-family code (init.c) */
    size_t path_len = strnlen(path, sizeof(bound_path) - 1);
    memcpy(bound_path, path, path_len);
    bound_path[path_len] = '\0';
    bound_base = (unsigned char *)(uintptr_t)base;
    bound_count = count;
    for (unsigned int i = 0; i < count; i++) {
        const char *uuid = uuids + i * uuid_stride;
        size_t n = strnlen(uuid, sizeof(bound_uuids[i]) - 1);
        memcpy(bound_uuids[i], uuid, n);
        bound_uuids[i][n] = '\0';
    }
    bound_broken = 0;
    return 0;
}

/* The live binding's lock across a fork (init.c): its holder is the forking thread, in the
 * parent and in the child alike, so releasing it is the same on both sides. */
void mock_live_fork_prepare(void)
{
    pthread_mutex_lock(&bind_lock);
}

void mock_live_fork_release(void)
{
    pthread_mutex_unlock(&bind_lock);
}

int mock_live_attach(const char *path, unsigned int count, const char *uuids, size_t uuid_stride,
                     const unsigned char **recs, const unsigned char **header, char *why, size_t why_len)
{
    pthread_mutex_lock(&bind_lock);
    bound_base = NULL;
    int rc = attach_locked(path, count, uuids, uuid_stride, recs, header, why, why_len);
    pthread_mutex_unlock(&bind_lock);
    return rc;
}

/* Whether the file open as `fd` is a live file for the bound GPUs; NULL when it is, else why.
 * Read with pread, never through a mapping: the file may be cut short meanwhile. */
static const char *bound_file_problem(int fd, char *why, size_t why_len)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        return "not a regular file";
    }
    if ((unsigned long long)st.st_size != LIVE_TOTAL_BYTES) {
        snprintf(why, why_len, "it is %lld bytes, the layout needs %llu (truncated)", (long long)st.st_size,
                 (unsigned long long)LIVE_TOTAL_BYTES);
        return why;
    }
    static unsigned char head[LIVE_HEADER_BYTES] MOCK_COLD(head); /* under bind_lock */
    if (pread(fd, head, sizeof(head), 0) != (ssize_t)sizeof(head)) {
        return "its header cannot be read";
    }
    const char *bad = check_header(head);
    if (bad != NULL) {
        return bad;
    }
    for (unsigned int i = 0; i < bound_count; i++) {
        char have[LIVE_RECORD_UUID_BYTES];
        off_t at = (off_t)(LIVE_RECORDS_OFFSET + (size_t)i * LIVE_RECORD_BYTES + LIVE_RECORD_UUID);
        if (pread(fd, have, sizeof(have), at) != (ssize_t)sizeof(have) || memchr(have, '\0', sizeof(have)) == NULL ||
            strcmp(have, bound_uuids[i]) != 0) {
            snprintf(why, why_len, "record %u belongs to another GPU than %.80s (re-initialise NVML for other GPUs)",
                     i, bound_uuids[i]);
            return why;
        }
    }
    return NULL;
}

/* Caller holds bind_lock. */
static const char *remap_bound(char *why, size_t why_len)
{
    int fd = open(bound_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        snprintf(why, why_len, "cannot open it: %s", strerror(errno));
        return why;
    }
    const char *bad = bound_file_problem(fd, why, why_len);
    if (bad == NULL) {
        struct stat st;
        fstat(fd, &st);
        if (mmap(bound_base, (size_t)LIVE_TOTAL_BYTES, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
            snprintf(why, why_len, "cannot map it: %s", strerror(errno));
            bad = why;
        } else {
            for (unsigned int i = 0; i < maps_used; i++) {
                if (maps[i].base == bound_base) {
                    maps[i].dev = st.st_dev;
                    maps[i].ino = st.st_ino;
                }
            }
        }
    }
    close(fd);
    return bad;
}

int mock_live_repair(void)
{
    pthread_mutex_lock(&bind_lock);
    int rc = 0;
    if (bound_base != NULL && !mock_live_header_ok(bound_base)) {
        char why[200];
        const char *bad = remap_bound(why, sizeof(why));
        if (bad == NULL && mock_live_header_ok(bound_base)) {
            atomic_fetch_add_explicit(&mock_live_epoch, 1u, memory_order_release);
            mock_clear_error_detail(NVML_ERROR_UNKNOWN);
            if (bound_broken) {
                fprintf(stderr, "nvml-mock: live layer %.240s is usable again\n", bound_path);
            }
            bound_broken = 0;
        } else {
            mock_set_error_detail(NVML_ERROR_UNKNOWN,
                                  "live layer %.240s was truncated or overwritten under this process and is not "
                                  "usable: %s; re-stage the overlay or write a value with nvml-mock-ctl (either "
                                  "repairs it) and the next call maps it again",
                                  bound_path, bad != NULL ? bad : "it changed again meanwhile");
            if (!bound_broken) {
                fprintf(stderr, "nvml-mock: %s\n", nvmlErrorString(NVML_ERROR_UNKNOWN));
            }
            bound_broken = 1;
            rc = -1;
        }
    }
    pthread_mutex_unlock(&bind_lock);
    return rc;
}

/* --- the writer's primitives (called by nvml_mock_live through ctypes; ABI in keys.toml [abi]) ------------ */

MOCK_EXPORT int nvml_mock_live_write(void *base, size_t len, unsigned int gpu, unsigned int n,
                                     const unsigned int *slots, const uint64_t *values, const unsigned char *set);
MOCK_EXPORT int nvml_mock_live_snapshot(const void *base, size_t len, unsigned int gpu, uint64_t *mask,
                                        uint64_t *values, uint64_t *writes);
MOCK_EXPORT int nvml_mock_live_retire(void *base, size_t len);
MOCK_EXPORT uint64_t nvml_mock_live_event(void *base, size_t len, unsigned int gpu, uint64_t type, uint64_t data);
MOCK_EXPORT uint64_t nvml_mock_live_event_on(void *base, size_t len, unsigned int gpu, unsigned int gi,
                                             unsigned int ci, uint64_t type, uint64_t data);
MOCK_EXPORT unsigned long long nvml_mock_live_layout_bytes(void);
MOCK_EXPORT unsigned int nvml_mock_live_abi_version(void);
MOCK_EXPORT int nvml_mock_live_lock_path(const char *live, char *out, size_t len);

/*
 * The writers' lock file of the live file at `live`, into out[0..len): the file
 * nvml_mock_live.writers_lock names, "<dir>/live-<dev>-<ino>.lock" with the dev and ino of the
 * directory holding the live file (links followed), in hex; <dir> is $NVML_MOCK_LOCK_DIR, else
 * /run/nvml-mock for root, else $TMPDIR or /tmp + "/nvml-mock-locks-<uid>", made (0700) when
 * missing. Returns 0, or -1 (no such file, a path too long, the directory not made). For the C
 * writers besides this library (the mock libcuda.so.1 finds it with dlsym): one rule, here.
 */
int nvml_mock_live_lock_path(const char *live, char *out, size_t len)
{
    char real[PATH_MAX];
    if (realpath(live, real) == NULL) {
        return -1;
    }
    char *slash = strrchr(real, '/');
    if (slash == NULL) {
        return -1;
    }
    if (slash == real) {
        slash[1] = '\0';
    } else {
        *slash = '\0';
    }
    struct stat dir;
    if (stat(real, &dir) != 0) {
        return -1;
    }
    char lock_dir[PATH_MAX];
    const char *given = getenv("NVML_MOCK_LOCK_DIR");
    int n;
    if (given != NULL && given[0] != '\0') {
        n = snprintf(lock_dir, sizeof(lock_dir), "%s", given);
    } else if (geteuid() == 0) {
        n = snprintf(lock_dir, sizeof(lock_dir), "/run/nvml-mock");
    } else {
        const char *tmp = getenv("TMPDIR");
        n = snprintf(lock_dir, sizeof(lock_dir), "%s/nvml-mock-locks-%u",
                     tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp", (unsigned)geteuid());
    }
    if (n < 0 || (size_t)n >= sizeof(lock_dir)) {
        return -1;
    }
    if (mkdir(lock_dir, 0700) != 0 && errno != EEXIST) {
        return -1;
    }
    n = snprintf(out, len, "%s/live-%llx-%llx.lock", lock_dir, (unsigned long long)dir.st_dev,
                 (unsigned long long)dir.st_ino);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static unsigned char *record_of(void *base, size_t len, unsigned int gpu)
{
    if (base == NULL || len != LIVE_TOTAL_BYTES || gpu >= LIVE_GPU_SLOTS) {
        return NULL;
    }
    return (unsigned char *)base + LIVE_RECORDS_OFFSET + (size_t)gpu * LIVE_RECORD_BYTES;
}

/* Begin a write: make the sequence odd. A counter left odd by a writer that died is
 * moved on to the next odd value, so readers see the repair as one more write. */
static uint64_t begin_write(uint64_t *seq)
{
    uint64_t s = __atomic_load_n(seq, __ATOMIC_RELAXED);
    uint64_t odd = (s & 1u) ? s + 2u : s + 1u;
    __atomic_store_n(seq, odd, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    return odd;
}

static void end_write(unsigned char *base, unsigned char *rec, uint64_t odd)
{
    uint64_t *seq = (uint64_t *)(void *)(rec + LIVE_RECORD_SEQ);
    __atomic_fetch_add((uint64_t *)(void *)(rec + LIVE_RECORD_WRITES), 1u, __ATOMIC_RELAXED);
    __atomic_store_n(seq, odd + 1u, __ATOMIC_RELEASE);
    __atomic_fetch_add((uint64_t *)(void *)(base + LIVE_HDR_GENERATION), 1u, __ATOMIC_RELEASE);
}

/* Set (set[i] = 1), set armed (2: applies once the record's fault trigger fires) or clear (0)
 * slots[i] of one GPU's record, all in one write. Returns 0,
 * or -1 for a bad argument (nothing is written then). Writers are serialised by the caller
 * (an exclusive flock on the file). */
int nvml_mock_live_write(void *base, size_t len, unsigned int gpu, unsigned int n, const unsigned int *slots,
                         const uint64_t *values, const unsigned char *set)
{
    unsigned char *rec = record_of(base, len, gpu);
    if (rec == NULL || (n > 0 && (slots == NULL || values == NULL || set == NULL))) {
        return -1;
    }
    for (unsigned int i = 0; i < n; i++) {
        if (slots[i] >= LIVE_KEY_SLOTS) {
            return -1;
        }
    }
    uint64_t *mask = (uint64_t *)(void *)(rec + LIVE_RECORD_MASK);
    uint64_t *armed = (uint64_t *)(void *)(rec + LIVE_RECORD_ARMED);
    uint64_t *vals = (uint64_t *)(void *)(rec + LIVE_RECORD_VALUES);
    for (unsigned int i = 0; i < n; i++) {
        if (set[i] > 2) {
            return -1;
        }
    }
    uint64_t odd = begin_write((uint64_t *)(void *)(rec + LIVE_RECORD_SEQ));
    for (unsigned int i = 0; i < n; i++) {
        unsigned int s = slots[i];
        uint64_t bit = 1ull << (s % 64u);
        uint64_t m = __atomic_load_n(&mask[s / 64u], __ATOMIC_RELAXED);
        uint64_t a = __atomic_load_n(&armed[s / 64u], __ATOMIC_RELAXED);
        if (set[i]) {
            __atomic_store_n(&vals[s], values[i], __ATOMIC_RELAXED);
            m |= bit;
            a = set[i] == 2 ? a | bit : a & ~bit;
        } else {
            __atomic_store_n(&vals[s], 0, __ATOMIC_RELAXED);
            m &= ~bit;
            a &= ~bit;
        }
        __atomic_store_n(&armed[s / 64u], a, __ATOMIC_RELAXED);
        __atomic_store_n(&mask[s / 64u], m, __ATOMIC_RELAXED);
    }
    end_write(base, rec, odd);
    return 0;
}

/* --- process (allocation) records --------------------------------------------------------- */

MOCK_EXPORT int nvml_mock_live_proc_write(void *base, size_t len, unsigned int slot, const unsigned char *record,
                                          size_t record_len);
MOCK_EXPORT int nvml_mock_live_proc_read(const void *base, size_t len, unsigned int slot, unsigned char *out,
                                         size_t out_len);
MOCK_EXPORT int nvml_mock_live_proc_put(void *base, size_t len, const unsigned char *record, size_t record_len);
MOCK_EXPORT int nvml_mock_live_proc_remove(void *base, size_t len, const unsigned char *id, size_t id_len);

_Static_assert(LIVE_PROCESS_RECORD_BYTES % 8u == 0, "a process record is whole 64-bit words");
_Static_assert(LIVE_PROC_SEQ == 0, "a process record starts with its sequence lock");

static unsigned char *proc_of(void *base, size_t len, unsigned int slot)
{
    if (base == NULL || len != LIVE_TOTAL_BYTES || slot >= LIVE_PROCESS_SLOTS) {
        return NULL;
    }
    return (unsigned char *)base + LIVE_PROCESSES_OFFSET + (size_t)slot * LIVE_PROCESS_RECORD_BYTES;
}

static uint32_t proc_in_use(const unsigned char *rec)
{
    return __atomic_load_n((const uint32_t *)(const void *)(rec + LIVE_PROC_IN_USE), __ATOMIC_RELAXED);
}

/*
 * Write process record `slot` from `record` (LIVE_PROCESS_RECORD_BYTES bytes, its seq word
 * ignored) in one sequence-locked step; a record whose in_use is 0 frees the slot. The
 * header's process_high (slots a reader scans) is raised before a record past it appears
 * and lowered after the last one goes, so a reader never misses a record. Returns 0, or -1
 * for a bad argument (nothing is written then). Writers are serialised by the caller (flock).
 */
int nvml_mock_live_proc_write(void *base, size_t len, unsigned int slot, const unsigned char *record, size_t record_len)
{
    unsigned char *rec = proc_of(base, len, slot);
    if (rec == NULL || record == NULL || record_len != LIVE_PROCESS_RECORD_BYTES) {
        return -1;
    }
    uint32_t in_use;
    memcpy(&in_use, record + LIVE_PROC_IN_USE, sizeof(in_use));
    if (in_use > 1) {
        return -1;
    }
    uint32_t *high = (uint32_t *)(void *)((unsigned char *)base + LIVE_HDR_PROCESS_HIGH);
    if (in_use && __atomic_load_n(high, __ATOMIC_RELAXED) <= slot) {
        __atomic_store_n(high, slot + 1u, __ATOMIC_RELEASE);
    }
    uint64_t odd = begin_write((uint64_t *)(void *)(rec + LIVE_PROC_SEQ));
    for (unsigned int off = 8; off < LIVE_PROCESS_RECORD_BYTES; off += 8) {
        uint64_t word;
        memcpy(&word, record + off, sizeof(word));
        __atomic_store_n((uint64_t *)(void *)(rec + off), in_use ? word : 0u, __ATOMIC_RELAXED);
    }
    __atomic_store_n((uint64_t *)(void *)(rec + LIVE_PROC_SEQ), odd + 1u, __ATOMIC_RELEASE);
    if (!in_use) {
        uint32_t h = __atomic_load_n(high, __ATOMIC_RELAXED);
        if (h > LIVE_PROCESS_SLOTS) {
            h = LIVE_PROCESS_SLOTS;
        }
        while (h > 0 && proc_in_use(proc_of(base, len, h - 1u)) == 0) {
            h--;
        }
        __atomic_store_n(high, h, __ATOMIC_RELEASE);
    }
    __atomic_fetch_add((uint64_t *)(void *)((unsigned char *)base + LIVE_HDR_GENERATION), 1u, __ATOMIC_RELEASE);
    return 0;
}

/* The slots a writer may read without its sequence lock: those below process_high. */
static unsigned int proc_high(const void *base)
{
    uint32_t h = __atomic_load_n((const uint32_t *)(const void *)((const unsigned char *)base + LIVE_HDR_PROCESS_HIGH),
                                 __ATOMIC_ACQUIRE);
    return h > LIVE_PROCESS_SLOTS ? LIVE_PROCESS_SLOTS : h;
}

/* Whether slot `rec` is free: no record in it, or one a writer that died left half written.
 * Only under the writers' lock: no writer is active then, so an odd counter is a dead one's,
 * and its slot is no one's (as the Python writer counted it). */
static int proc_free(const unsigned char *rec)
{
    return (__atomic_load_n((const uint64_t *)(const void *)(rec + LIVE_PROC_SEQ), __ATOMIC_RELAXED) & 1u) != 0 ||
           proc_in_use(rec) != 1;
}

/* Whether slot `rec` holds a record of the container whose id field (LIVE_PROC_CONTAINER_ID_BYTES, NUL-padded)
 * is `id`. Only under the writers' lock (see proc_free). */
static int proc_holds(const unsigned char *rec, const unsigned char *id)
{
    return !proc_free(rec) && memcmp(rec + LIVE_PROC_CONTAINER_ID, id, LIVE_PROC_CONTAINER_ID_BYTES) == 0;
}

static const unsigned char proc_none[LIVE_PROCESS_RECORD_BYTES];

/*
 * Record `record` (LIVE_PROCESS_RECORD_BYTES bytes, in use) as its container's only one: the
 * slot already holding that container id is rewritten in place, else the lowest free slot
 * takes it; any other slot with the same id is freed. One pass over the slots in use, where
 * the writer had made one per slot in Python. Returns the slot written, -1 for a bad
 * argument, -2 when every slot is taken (nothing is written then). Writers are serialised by
 * the caller (flock).
 */
int nvml_mock_live_proc_put(void *base, size_t len, const unsigned char *record, size_t record_len)
{
    if (base == NULL || len != LIVE_TOTAL_BYTES || record == NULL || record_len != LIVE_PROCESS_RECORD_BYTES) {
        return -1;
    }
    uint32_t in_use;
    memcpy(&in_use, record + LIVE_PROC_IN_USE, sizeof(in_use));
    if (in_use != 1 || record[LIVE_PROC_CONTAINER_ID] == 0) {
        return -1;
    }
    const unsigned char *id = record + LIVE_PROC_CONTAINER_ID;
    unsigned int high = proc_high(base);
    int own = -1;
    int free_slot = -1;
    for (unsigned int slot = 0; slot < high; slot++) {
        const unsigned char *rec = proc_of(base, len, slot);
        if (proc_holds(rec, id)) {
            if (own < 0) {
                own = (int)slot;
            } else {
                (void)nvml_mock_live_proc_write(base, len, slot, proc_none, sizeof(proc_none));
            }
        } else if (free_slot < 0 && proc_free(rec)) {
            free_slot = (int)slot;
        }
    }
    int target = own >= 0 ? own : free_slot >= 0 ? free_slot : high < LIVE_PROCESS_SLOTS ? (int)high : -2;
    if (target < 0) {
        return -2;
    }
    return nvml_mock_live_proc_write(base, len, (unsigned int)target, record, record_len) == 0 ? target : -1;
}

/* Free every slot that holds a record of the container id `id` (`id_len` bytes, at most
 * LIVE_PROC_CONTAINER_ID_BYTES, no NUL). Returns how many were freed, or -1 for a bad argument.
 * Writers are serialised by the caller (flock). */
int nvml_mock_live_proc_remove(void *base, size_t len, const unsigned char *id, size_t id_len)
{
    if (base == NULL || len != LIVE_TOTAL_BYTES || id == NULL || id_len == 0 ||
        id_len > LIVE_PROC_CONTAINER_ID_BYTES || memchr(id, 0, id_len) != NULL) {
        return -1;
    }
    unsigned char field[LIVE_PROC_CONTAINER_ID_BYTES] = {0};
    memcpy(field, id, id_len);
    int removed = 0;
    for (unsigned int slot = proc_high(base); slot-- > 0;) {
        if (proc_holds(proc_of(base, len, slot), field)) {
            (void)nvml_mock_live_proc_write(base, len, slot, proc_none, sizeof(proc_none));
            removed++;
        }
    }
    return removed;
}

/* A consistent copy of process record `slot` into `out` (LIVE_PROCESS_RECORD_BYTES bytes).
 * Returns 1 when the slot holds a record, 0 when it is free, -1 for a bad argument or when
 * no consistent copy could be taken (a writer died mid-write). */
int nvml_mock_live_proc_read(const void *base, size_t len, unsigned int slot, unsigned char *out, size_t out_len)
{
    const unsigned char *rec = proc_of((void *)(uintptr_t)base, len, slot);
    if (rec == NULL || out == NULL || out_len != LIVE_PROCESS_RECORD_BYTES) {
        return -1;
    }
    const uint64_t *seq = (const uint64_t *)(const void *)(rec + LIVE_PROC_SEQ);
    for (unsigned int attempt = 0; attempt < LIVE_READ_TRIES * 16u; attempt++) {
        uint64_t s1 = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
        if (s1 & 1u) {
            mock_live_pause(attempt);
            continue;
        }
        for (unsigned int off = 0; off < LIVE_PROCESS_RECORD_BYTES; off += 8) {
            uint64_t word = __atomic_load_n((const uint64_t *)(const void *)(rec + off), __ATOMIC_RELAXED);
            memcpy(out + off, &word, sizeof(word));
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(seq, __ATOMIC_RELAXED) == s1) {
            uint32_t in_use;
            memcpy(&in_use, out + LIVE_PROC_IN_USE, sizeof(in_use));
            return in_use == 1 ? 1 : 0;
        }
    }
    return -1;
}

/* A consistent copy of one record: mask[LIVE_MASK_WORDS], values[LIVE_KEY_SLOTS] and its
 * write count. Returns 0, or -1 when the arguments are bad or no consistent copy could be
 * taken (a writer died mid-write). */
int nvml_mock_live_snapshot(const void *base, size_t len, unsigned int gpu, uint64_t *mask, uint64_t *values,
                            uint64_t *writes)
{
    const unsigned char *rec = record_of((void *)(uintptr_t)base, len, gpu);
    if (rec == NULL || mask == NULL || values == NULL || writes == NULL) {
        return -1;
    }
    const uint64_t *seq = (const uint64_t *)(const void *)(rec + LIVE_RECORD_SEQ);
    const uint64_t *m = (const uint64_t *)(const void *)(rec + LIVE_RECORD_MASK);
    const uint64_t *v = (const uint64_t *)(const void *)(rec + LIVE_RECORD_VALUES);
    for (unsigned int attempt = 0; attempt < LIVE_READ_TRIES * 16u; attempt++) {
        uint64_t s1 = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
        if (s1 & 1u) {
            mock_live_pause(attempt);
            continue;
        }
        for (unsigned int i = 0; i < LIVE_MASK_WORDS; i++) {
            mask[i] = __atomic_load_n(&m[i], __ATOMIC_RELAXED);
        }
        for (unsigned int i = 0; i < LIVE_KEY_SLOTS; i++) {
            values[i] = __atomic_load_n(&v[i], __ATOMIC_RELAXED);
        }
        *writes = __atomic_load_n((const uint64_t *)(const void *)(rec + LIVE_RECORD_WRITES), __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(seq, __ATOMIC_RELAXED) == s1) {
            return 0;
        }
    }
    return -1;
}

/* Mark a file replaced: every record's values are cleared (processes that mapped it fall
 * back to the board values at once) and the header says retired (later inits ignore it). */
int nvml_mock_live_retire(void *base, size_t len)
{
    if (base == NULL || len != LIVE_TOTAL_BYTES) {
        return -1;
    }
    for (unsigned int g = 0; g < LIVE_GPU_SLOTS; g++) {
        unsigned char *rec = record_of(base, len, g);
        uint64_t odd = begin_write((uint64_t *)(void *)(rec + LIVE_RECORD_SEQ));
        for (unsigned int i = 0; i < LIVE_MASK_WORDS; i++) {
            __atomic_store_n((uint64_t *)(void *)(rec + LIVE_RECORD_MASK) + i, 0, __ATOMIC_RELAXED);
            __atomic_store_n((uint64_t *)(void *)(rec + LIVE_RECORD_ARMED) + i, 0, __ATOMIC_RELAXED);
        }
        end_write(base, rec, odd);
    }
    /* and no process record is read any more (scanning stops at the high-water mark) */
    __atomic_store_n((uint32_t *)(void *)((unsigned char *)base + LIVE_HDR_PROCESS_HIGH), 0u, __ATOMIC_RELEASE);
    __atomic_store_n((uint32_t *)(void *)((unsigned char *)base + LIVE_HDR_RETIRED), 1u, __ATOMIC_RELEASE);
    return 0;
}

/*
 * Append an event to the ring and wake every waiter (in every process: the futex word lives
 * in the shared file, and a non-private wake reaches waiters on any mapping of it). The
 * record's fields are written before its sequence number (release), and the ring's head after
 * it, so a reader that sees the head sees the record. Returns the event's sequence number
 * (from 1), or 0 for a bad argument. Writers are serialised by the caller (flock).
 *
 * `gi` / `ci` name the MIG device the event is on (0xFFFFFFFF both: the whole GPU); they go
 * into the record's GPU word, id + 1 in bits 32-47 and 48-63 (STATE-FORMAT.md).
 */
uint64_t nvml_mock_live_event_on(void *base, size_t len, unsigned int gpu, unsigned int gi, unsigned int ci,
                                 uint64_t type, uint64_t data)
{
    if (base == NULL || len != LIVE_TOTAL_BYTES || gpu >= LIVE_GPU_SLOTS || type == 0) {
        return 0;
    }
    int whole = gi == 0xFFFFFFFFu && ci == 0xFFFFFFFFu;
    if (!whole && (gi >= 0xFFFFu || ci >= 0xFFFFu)) {
        return 0;
    }
    uint64_t gpu_word = whole ? (uint64_t)gpu : (uint64_t)gpu | (uint64_t)(gi + 1u) << 32 | (uint64_t)(ci + 1u) << 48;
    unsigned char *b = base;
    uint64_t *head = (uint64_t *)(void *)(b + LIVE_HDR_EVENT_HEAD);
    uint64_t seq = __atomic_load_n(head, __ATOMIC_RELAXED) + 1u;
    unsigned char *rec = b + LIVE_EVENTS_OFFSET + (size_t)(seq % LIVE_EVENT_SLOTS) * LIVE_EVENT_RECORD_BYTES;
    __atomic_store_n((uint64_t *)(void *)(rec + LIVE_EVENT_SEQ), 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n((uint64_t *)(void *)(rec + LIVE_EVENT_GPU), gpu_word, __ATOMIC_RELAXED);
    __atomic_store_n((uint64_t *)(void *)(rec + LIVE_EVENT_TYPE), type, __ATOMIC_RELAXED);
    __atomic_store_n((uint64_t *)(void *)(rec + LIVE_EVENT_DATA), data, __ATOMIC_RELAXED);
    __atomic_store_n((uint64_t *)(void *)(rec + LIVE_EVENT_SEQ), seq, __ATOMIC_RELEASE);
    __atomic_store_n(head, seq, __ATOMIC_RELEASE);
    __atomic_fetch_add((uint64_t *)(void *)(b + LIVE_HDR_GENERATION), 1u, __ATOMIC_RELEASE);
    /* The wake is the writer's last act: nothing of its own is left to do once a waiter
     * (perhaps on this CPU, preempting it) runs. */
    uint32_t *word = (uint32_t *)(void *)(b + LIVE_HDR_EVENT_FUTEX);
    __atomic_fetch_add(word, 1u, __ATOMIC_RELEASE);
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    return seq;
}

uint64_t nvml_mock_live_event(void *base, size_t len, unsigned int gpu, uint64_t type, uint64_t data)
{
    return nvml_mock_live_event_on(base, len, gpu, 0xFFFFFFFFu, 0xFFFFFFFFu, type, data);
}

/* The file size this library's layout needs (the writer checks it agrees with its own). */
unsigned long long nvml_mock_live_layout_bytes(void)
{
    return LIVE_TOTAL_BYTES;
}

/* The ABI of these primitives (keys.toml [abi]); the writer refuses a library of another. */
unsigned int nvml_mock_live_abi_version(void)
{
    return LIVE_ABI_VERSION;
}
