/*
 * Internal interface of the mock libnvidia-ml.so.1: the device objects behind
 * nvmlDevice_t handles, the process-wide state, and the checks every entry point shares.
 *
 * The state is written once per init cycle (under the lifecycle mutex, while no
 * handle is live) and only read afterwards, so the query entry points take no lock:
 * they check one atomic flag and the handle's address, then copy fields.
 */
#ifndef NVML_MOCK_H
#define NVML_MOCK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <nvml.h>

#include "live.h"
#include "state.h"

#define MOCK_EXPORT __attribute__((visibility("default")))
/* The library's own globals: declared hidden, so a call reaches them PC-relative, not through
 * the GOT (one load each, not two). */
#define MOCK_HIDDEN __attribute__((visibility("hidden")))
/*
 * A large zero-initialised array (the state, the device table, rings, caches, buffers) goes in
 * .lbss, which the linker places after every other zero-initialised variable. A fresh process
 * pays about a microsecond for each page it first writes; left in .bss, these arrays spread the
 * small variables that every nvmlInit touches (locks, once-flags, counts) over some ten pages,
 * gathered behind them they fit in four (bench/floor.py, startup).
 */
#if defined(__GNUC__) && !defined(__clang__)
#define MOCK_COLD(name) __attribute__((section(".lbss." #name)))
#else
#define MOCK_COLD(name) /* clang (the fuzz and TSan builds) would emit .lbss with file contents */
#endif

/* The object an nvmlDevice_t points to. */
struct nvmlDevice_st {
    struct state_gpu s;
    unsigned int index;  /* in this process's view (NVIDIA_VISIBLE_DEVICES, visible.c) */
    unsigned int board;  /* on the node: the live record, events and derived values follow it */
    char bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];           /* 8-digit domain */
    char bus_id_legacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE]; /* 4-digit domain */
    const unsigned char *live; /* this GPU's live-layer record; NULL = board values only */
    const struct state_mig_gi *mig_gi; /* its s.mig_gi_count MIG profiles (state.h) */
};

/*
 * live_<key>(d): the value of a live key (keys.toml rows with a `live` slot), the live
 * layer's where set, else the board's. One inline function per key, expanded from the
 * generated LIVE_GPU_KEYS table; reading a live key's board member directly is a bug.
 */
#define MOCK_LIVE_GETTER(key, slot, is_signed, lo, hi)                                            \
    static inline __typeof__(((struct state_gpu *)0)->key) live_##key(const struct nvmlDevice_st *d) \
    {                                                                                             \
        uint64_t v;                                                                               \
        if (__builtin_expect(d->live == NULL, 1) || !mock_live_load(d->live, (slot), &v)) {       \
            return d->s.key;                                                                      \
        }                                                                                         \
        if (is_signed) {                                                                          \
            return (__typeof__(((struct state_gpu *)0)->key))mock_live_clamp_s((int64_t)v, (int64_t)(lo), (int64_t)(hi)); \
        }                                                                                         \
        return (__typeof__(((struct state_gpu *)0)->key))mock_live_clamp_u(v, (uint64_t)(lo), (uint64_t)(hi));      \
    }
LIVE_GPU_KEYS(MOCK_LIVE_GETTER)

/* live_<key>(d) for a live-only key: its live value, or its declared default while unset
 * (uint64_t; int64_t, clamped as signed, for a signed key). The generator writes is_signed
 * as the token 0 or 1, which names the type: a conditional expression would not, since
 * `c ? (int64_t)x : (uint64_t)y` has type uint64_t whatever c is. */
#define MOCK_LIVE_ONLY_TYPE_0 uint64_t
#define MOCK_LIVE_ONLY_TYPE_1 int64_t
#define MOCK_LIVE_ONLY_TYPE(is_signed) MOCK_LIVE_ONLY_TYPE_##is_signed
#define MOCK_LIVE_ONLY_GETTER(key, slot, is_signed, lo, hi, dflt)                                   \
    static inline MOCK_LIVE_ONLY_TYPE(is_signed) live_##key(const struct nvmlDevice_st *d)        \
    {                                                                                             \
        uint64_t v;                                                                               \
        if (__builtin_expect(d->live == NULL, 1) || !mock_live_load(d->live, (slot), &v)) {       \
            return (MOCK_LIVE_ONLY_TYPE(is_signed))(dflt);                                        \
        }                                                                                         \
        if (is_signed) {                                                                          \
            return (MOCK_LIVE_ONLY_TYPE(is_signed))mock_live_clamp_s((int64_t)v, (int64_t)(lo), (int64_t)(hi)); \
        }                                                                                         \
        return (MOCK_LIVE_ONLY_TYPE(is_signed))mock_live_clamp_u(v, (uint64_t)(lo), (uint64_t)(hi)); \
    }
LIVE_ONLY_GPU_KEYS(MOCK_LIVE_ONLY_GETTER)

#define MOCK_LIVE_SLOT(key, slot, is_signed, lo, hi) LIVE_SLOT_##key = (slot),
#define MOCK_LIVE_ONLY_SLOT(key, slot, is_signed, lo, hi, dflt) LIVE_SLOT_##key = (slot),
enum mock_live_slot { LIVE_GPU_KEYS(MOCK_LIVE_SLOT) LIVE_ONLY_GPU_KEYS(MOCK_LIVE_ONLY_SLOT) };

extern MOCK_HIDDEN struct nvmlDevice_st mock_devices[STATE_MAX_GPUS];
extern MOCK_HIDDEN struct state_system mock_system;
extern MOCK_HIDDEN unsigned int mock_device_count;
/* mock_device_count * sizeof(struct nvmlDevice_st): the handle check's bound, one compare. */
extern MOCK_HIDDEN size_t mock_devices_bytes;
/* The leading number of the state's driver_version (580 for "580.65.06"); 0 when it has none. */
extern MOCK_HIDDEN unsigned int mock_driver_branch;
/* Non-zero while at least one nvmlInit* is outstanding. */
extern MOCK_HIDDEN atomic_int mock_live;

static inline int mock_is_live(void)
{
    return atomic_load_explicit(&mock_live, memory_order_acquire) != 0;
}

/* The live layer's header (its event ring) bound at the last init; NULL without one. */
extern MOCK_HIDDEN _Atomic(const unsigned char *) mock_live_header;

/* The guard every device call passes (live_guard.c): a device with live records answers
 * NVML_ERROR_UNKNOWN, with the reason in nvmlErrorString, while the live file mapped for them
 * was cut short or overwritten under the process and cannot be mapped again yet. Without a
 * live layer one pointer test; with one, one load of the header's magic word. */
static inline nvmlReturn_t mock_live_guard(const struct nvmlDevice_st *d)
{
    if (__builtin_expect(d->live == NULL, 1) ||
        __builtin_expect(mock_live_header_ok(atomic_load_explicit(&mock_live_header, memory_order_relaxed)), 1)) {
        return NVML_SUCCESS;
    }
    return mock_live_repair() == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

/* Whether the GPU is lost (live-only key gpu_lost): every call on it answers
 * NVML_ERROR_GPU_IS_LOST. Without a live layer one pointer test; with one and the key unset,
 * one load of the record's mask word. */
static inline int mock_lost(const struct nvmlDevice_st *d)
{
    if (__builtin_expect(d->live == NULL, 1) || __builtin_expect(!mock_live_is_set(d->live, LIVE_SLOT_gpu_lost), 1)) {
        return 0;
    }
    return live_gpu_lost(d) != 0; /* set: its value (and an armed fault's trigger) decides */
}

/* Validate `device` as a handle of this init cycle, lost or not; on success store the
 * device object in *out. */
static inline nvmlReturn_t mock_device_any(nvmlDevice_t device, const struct nvmlDevice_st **out)
{
    if (!mock_is_live()) {
        return NVML_ERROR_UNINITIALIZED;
    }
    uintptr_t off = (uintptr_t)device - (uintptr_t)&mock_devices[0]; /* wraps for p < base */
    if (off >= mock_devices_bytes || off % sizeof(struct nvmlDevice_st) != 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *out = (const struct nvmlDevice_st *)device;
    return NVML_SUCCESS;
}

/* Validate `device`; on success store the device object in *out. A lost GPU stores it too
 * and answers NVML_ERROR_GPU_IS_LOST, so every device entry point reports the loss. */
static inline nvmlReturn_t mock_device(nvmlDevice_t device, const struct nvmlDevice_st **out)
{
    nvmlReturn_t rc = mock_device_any(device, out);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    rc = mock_live_guard(*out);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    return mock_lost(*out) ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

/* A handle lookup's answer for the device it found: the handle is filled either way, and a
 * lost GPU answers NVML_ERROR_GPU_IS_LOST (the real driver's "Unable to determine the
 * device handle for GPU <bus id>: GPU is lost"). */
static inline nvmlReturn_t mock_found(const struct nvmlDevice_st *d, nvmlDevice_t *device)
{
    *device = (nvmlDevice_t)(uintptr_t)d;
    nvmlReturn_t rc = mock_live_guard(d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    return mock_lost(d) ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

/* The board's NVLinks that are down (live-only nvlink_down_mask; bits past the board's links
 * are ignored). Links that are up answer as the board; a down link is inactive and its error
 * counters answer the live nvlink_*_errors keys. */
static inline uint64_t mock_nvlink_down(const struct nvmlDevice_st *d)
{
    unsigned int n = d->s.nvlink_count;
    uint64_t m = live_nvlink_down_mask(d);
    return n >= 64u ? m : m & ((1ull << n) - 1u);
}

static inline int mock_nvlink_is_down(const struct nvmlDevice_st *d, unsigned int link)
{
    return link < 64u && ((mock_nvlink_down(d) >> link) & 1u) != 0;
}

/* The live error counter of a link that is down, by nvmlNvLinkErrorCounter_t (0 for a link
 * that is up, and for the ECC counter, which no fault raises). */
static inline uint64_t mock_nvlink_errors(const struct nvmlDevice_st *d, unsigned int link,
                                          nvmlNvLinkErrorCounter_t counter)
{
    if (!mock_nvlink_is_down(d, link)) {
        return 0;
    }
    switch (counter) {
    case NVML_NVLINK_ERROR_DL_REPLAY: return live_nvlink_replay_errors(d);
    case NVML_NVLINK_ERROR_DL_RECOVERY: return live_nvlink_recovery_errors(d);
    case NVML_NVLINK_ERROR_DL_CRC_FLIT:
    case NVML_NVLINK_ERROR_DL_CRC_DATA: return live_nvlink_crc_errors(d);
    default: return 0;
    }
}

/* Bumped by every init that (re)binds the live layer: what a reader derived from the file in
 * an earlier cycle (processes.c's per-thread record index) is stale once it moves, even where
 * the mapping, and so mock_live_header, is the same (a re-init over a rewritten file). */
extern MOCK_HIDDEN atomic_uint mock_live_epoch;
/* That file's path ("" without one), for the writers in the library (MIG). */
extern MOCK_HIDDEN char mock_live_path[4096];

/* Answer UNINITIALIZED unless an init is outstanding (entry points that take no device). */
#define REQUIRE_LIVE()                           \
    do {                                         \
        if (!mock_is_live()) {                   \
            return NVML_ERROR_UNINITIALIZED;     \
        }                                        \
    } while (0)

/* Answer INVALID_ARGUMENT to a NULL pointer argument. */
#define REQUIRE_ARG(p)                           \
    do {                                         \
        if ((p) == NULL) {                       \
            return NVML_ERROR_INVALID_ARGUMENT;  \
        }                                        \
    } while (0)

#define GET_DEVICE(handle, var)                                \
    const struct nvmlDevice_st *var = NULL;                    \
    do {                                                       \
        nvmlReturn_t rc_ = mock_device((handle), &var);        \
        if (rc_ != NVML_SUCCESS) {                             \
            return rc_;                                        \
        }                                                      \
    } while (0)

/* Copy a NUL-terminated string into a caller buffer of `length` bytes (NVML semantics). */
nvmlReturn_t mock_copy_string(char *dst, unsigned int length, const char *src);

/* Append s[0..n) to the string out[0..*used) of a `cap`-byte buffer and terminate it; -1,
 * with `out` as it was, when it does not fit. */
int mock_join(char *out, size_t cap, size_t *used, const char *s, size_t n);

/* `a` as NVML writes a bus id, DDDDDDDD:BB:DD.F (`legacy`: a 4-digit domain, DDDD:BB:DD.F),
 * upper-case hex, cut short as snprintf would to fit `cap` bytes. */
void mock_format_bus_id(char *out, size_t cap, const struct state_pci_addr *a, int legacy);

/* Fill the 68-byte nvmlPciInfo_t (v3) for a device. */
void mock_fill_pci_v3(const struct nvmlDevice_st *d, nvmlPciInfo_t *pci);
void mock_fill_pci_addr(const struct state_pci_addr *a, nvmlPciInfo_t *pci);

/* Write `pci` to `out` in the pre-v3 52-byte layout that the unversioned and _v2 symbols
 * fill, because callers built against old headers pass the smaller buffer. */
void mock_pci_to_v2(const nvmlPciInfo_t *pci, void *out);

/* Fill `out` (capacity *count) with the devices for which pred(self, device, arg) holds, in
 * NVML's count/size protocol: a zero count with no array asks for the size; no array with a
 * non-zero count is refused; a short array answers INSUFFICIENT_SIZE with the count needed. */
nvmlReturn_t mock_list_devices(unsigned int *count, nvmlDevice_t *out, const struct nvmlDevice_st *self,
                               int (*pred)(const struct nvmlDevice_st *, const struct nvmlDevice_st *, unsigned long),
                               unsigned long arg);

/* One link's rate (MB/s) by nvmlNvlinkVersion_t: the speed fields report it and the NVLink
 * throughput counters integrate it (nvlink.c). */
unsigned int mock_nvlink_link_mbps(unsigned int version);

/* The far-end link number of one of a board GPU's NVLinks (nvlink.c): NOT_SUPPORTED without
 * links or remote ends, INVALID_ARGUMENT past them. Derived from the whole board on the first
 * query after each init, not in nvmlInit (it costs GPUs x links x (GPUs + switches));
 * mock_nvlink_invalidate() says a new board was published. */
void mock_nvlink_invalidate(void);
/* Call fn(board state, arg) under the init lock while an init is outstanding (the board
 * published by it); returns -1 without calling when none is. */
int mock_with_board_state(void (*fn)(const struct state *, void *), void *arg);
nvmlReturn_t mock_nvlink_remote_link(const struct nvmlDevice_st *d, unsigned int link, unsigned int *out);

/* Fabric health summary derived from a health mask. */
unsigned char mock_fabric_health_summary(unsigned int mask);

/* Fork handlers (init.c installs them): take the module's locks before a fork, give them
 * back in the parent, and in the child also forget the threads fork did not copy. */
void mock_events_fork_prepare(void);
void mock_events_fork_parent(void);
void mock_events_fork_child(void);
void mock_gpm_fork_prepare(void);
void mock_gpm_fork_parent(void);
void mock_gpm_fork_child(void);
void mock_live_fork_prepare(void);
void mock_live_fork_release(void);

/* Record an init failure detail that nvmlErrorString(code) returns until the next init. */
void mock_set_error_detail(nvmlReturn_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drop the detail of `code` (a condition that has passed: the live layer mapped again). */
void mock_clear_error_detail(nvmlReturn_t code);

#endif
