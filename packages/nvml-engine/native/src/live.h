/*
 * The live layer: per-GPU values that change while processes run (STATE-FORMAT.md, "The
 * live layer"). The file is mapped shared and read-only at init; every read here is
 * lock-free under the record's sequence counter, so a reader never waits for a writer and
 * never sees half of a write. A value set in the live layer wins over the board value,
 * clamped to the key's declared bounds; an unset one leaves the board value.
 */
#ifndef NVML_MOCK_LIVE_H
#define NVML_MOCK_LIVE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "live_layout.h"

/* Tries before a reader gives up on a record whose writer never finishes (it died
 * mid-write): the board value answers then, never a hang. */
#define LIVE_READ_TRIES 64u

void mock_live_pause(unsigned int attempt);

/* Whether the fault trigger of a record has fired (in this process): armed slots apply only
 * then. Called only for a record with armed slots set, so an unarmed record costs nothing. */
int mock_live_trigger_fired(const unsigned char *rec);

/* Whether the record's trigger has already fired in this process, without counting a call
 * (an armed event waits for the trigger that its armed values wait for; events.c). */
int mock_live_trigger_peek(const unsigned char *rec);

/* The record's arm tag (fault_trigger_arm; 0 while unset): the arm its armed events belong to. */
uint32_t mock_live_arm_of(const unsigned char *rec);

/* Read `n` slots of one record in one consistent snapshot. Returns a bit per slot that is
 * set (bit i for slots[i]) and stores those values in out[i]; 0 when none is set or the
 * record could not be read consistently. An armed slot counts as set once `fired` says the
 * record's trigger has fired (mock_live_trigger_fired, which counts the read as a call, or
 * mock_live_trigger_peek, which does not). */
static inline __attribute__((always_inline)) unsigned int mock_live_load_n_as(const unsigned char *rec, unsigned int n,
                                                                               const unsigned int *slots, uint64_t *out,
                                                                               int (*fired)(const unsigned char *))
{
    const uint64_t *seq = (const uint64_t *)(const void *)(rec + LIVE_RECORD_SEQ);
    const uint64_t *mask = (const uint64_t *)(const void *)(rec + LIVE_RECORD_MASK);
    const uint64_t *vals = (const uint64_t *)(const void *)(rec + LIVE_RECORD_VALUES);
    const uint64_t *arm = (const uint64_t *)(const void *)(rec + LIVE_RECORD_ARMED);
    /* Fast path: a slot whose mask bit is clear answers with the board value, and one atomic
     * load of the mask word tells that consistently (the bit is the whole of "set"). Only a
     * set slot pays for the sequence-locked read of its value. */
    unsigned int any = 0;
    for (unsigned int i = 0; i < n; i++) {
        any |= (unsigned int)((__atomic_load_n(&mask[slots[i] / 64u], __ATOMIC_RELAXED) >> (slots[i] % 64u)) & 1u);
    }
    if (!any) {
        return 0;
    }
    for (unsigned int attempt = 0; attempt < LIVE_READ_TRIES; attempt++) {
        uint64_t s1 = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
        if (s1 & 1u) {
            mock_live_pause(attempt);
            continue;
        }
        unsigned int got = 0;
        unsigned int armed = 0;
        for (unsigned int i = 0; i < n; i++) {
            unsigned int slot = slots[i];
            uint64_t m = __atomic_load_n(&mask[slot / 64u], __ATOMIC_RELAXED);
            uint64_t a = __atomic_load_n(&arm[slot / 64u], __ATOMIC_RELAXED);
            out[i] = __atomic_load_n(&vals[slot], __ATOMIC_RELAXED);
            got |= (unsigned int)((m >> (slot % 64u)) & 1u) << i;
            armed |= (unsigned int)((a >> (slot % 64u)) & 1u) << i;
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(seq, __ATOMIC_RELAXED) == s1) {
            if ((armed & got) != 0 && !fired(rec)) {
                got &= ~armed;
            }
            return got;
        }
    }
    return 0;
}

/* A read by a call: an armed slot's read counts toward its record's trigger. */
static inline __attribute__((always_inline)) unsigned int mock_live_load_n(const unsigned char *rec, unsigned int n,
                                                                            const unsigned int *slots, uint64_t *out)
{
    return mock_live_load_n_as(rec, n, slots, out, mock_live_trigger_fired);
}

/* Whether `slot` of the record is set: one relaxed load of its mask word, for the checks
 * every call makes (the value, when set, is read with mock_live_load). */
static inline int mock_live_is_set(const unsigned char *rec, unsigned int slot)
{
    const uint64_t *mask = (const uint64_t *)(const void *)(rec + LIVE_RECORD_MASK);
    return (int)((__atomic_load_n(&mask[slot / 64u], __ATOMIC_RELAXED) >> (slot % 64u)) & 1u);
}

static inline int mock_live_load(const unsigned char *rec, unsigned int slot, uint64_t *out)
{
    return mock_live_load_n(rec, 1, &slot, out) != 0;
}

static inline uint64_t mock_live_clamp_u(uint64_t v, uint64_t lo, uint64_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

static inline int64_t mock_live_clamp_s(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/*
 * Map the live file `path` for `count` devices whose board UUIDs are `uuids` (stride
 * `uuid_stride` bytes), storing each device's record in recs[i] and the file's header (its
 * event ring) in *header. Returns 0 with recs and *header set (all NULL when there is no
 * file), or -1 with the reason in `why` (the file is ignored as a whole then, and recs and
 * *header are NULL). Caller serialises calls.
 */
int mock_live_attach(const char *path, unsigned int count, const char *uuids, size_t uuid_stride,
                     const unsigned char **recs, const unsigned char **header, char *why, size_t why_len);

/*
 * The guard against a live file cut short or overwritten under its mapping (live_guard.c,
 * live.c). A SIGBUS inside a live mapping replaces it by zeros, so its magic is gone; a
 * file overwritten in place loses it too. Every device call tests the magic of the mapped
 * header (one load and a branch, mock.h) and only a failed test pays for more.
 */
static inline int mock_live_header_ok(const unsigned char *h)
{
    uint64_t want;
    memcpy(&want, LIVE_MAGIC, sizeof(want));
    return h == NULL || __atomic_load_n((const uint64_t *)(const void *)(h + LIVE_HDR_MAGIC), __ATOMIC_RELAXED) == want;
}

/* The guard's slow path: map the bound live file again at the same address (so every record
 * pointer stays valid) once the file at its path is a live file of the same GPUs. Returns 0
 * when the mapping is usable again; -1 with the reason set for nvmlErrorString
 * (NVML_ERROR_UNKNOWN) otherwise. Any thread may call it. */
int mock_live_repair(void);

/* The most live mappings a process holds (live.c): each new file past them is mapped over the
 * oldest one's address, so the guard's LIVE_MAPS watched ranges cover every mapping. */
#define LIVE_MAPS 16u

/* Watch the live mapping at `base` (LIVE_TOTAL_BYTES): installs the SIGBUS handler once per
 * process (live_guard.c). Watching an address already watched is a no-op. */
void mock_live_guard_watch(const void *base);

/* How many times the handler replaced a mapping by zeros (in this process). */
unsigned int mock_live_guard_replaced(void);

/* Append an event for board GPU `gpu` (MIG device gi/ci, or 0xFFFFFFFF both for the whole
 * GPU) to the ring of the writable mapping `base` and wake every waiter; the caller holds the
 * file's flock. Returns its sequence number, 0 for a bad argument (live.c). */
uint64_t nvml_mock_live_event_on(void *base, size_t len, unsigned int gpu, unsigned int gi, unsigned int ci,
                                 uint64_t type, uint64_t data);

/* The writers' lock file of the live file at `live` (live.c says which); 0, or -1. */
int nvml_mock_live_lock_path(const char *live, char *out, size_t len);

#endif
