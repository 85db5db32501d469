/*
 * Event Handling Methods (nvml.h): event sets, create, register, wait, free.
 *
 * Events come from the live layer's ring (STATE-FORMAT.md, "The live layer"): a writer on the
 * node appends a record (GPU, nvmlEventType* bit, data) and wakes every waiter through a
 * futex word in the shared file, so a waiter already blocked in nvmlEventSetWait in any
 * process or container wakes at once. An event set sees only the events written after it
 * registered for that GPU and type, as on a real driver: each set remembers the ring position
 * of every registration and the last record it looked at.
 *
 * A wait must really block: the device plugin's health checker calls nvmlEventSetWait_v2 in
 * a loop and would spin a core if the wait returned early. With a live layer the wait sleeps
 * in FUTEX_WAIT on the ring's word with the remaining timeout; without one no event can
 * arrive and it sleeps on a condition variable (monotonic clock) for the whole timeout.
 * Either way nvmlEventSetFree wakes its waiters and waits for them to leave before the set's
 * memory goes away.
 *
 * A handle is looked up, never dereferenced on trust (handles.h): a call that races
 * nvmlEventSetFree, or comes after it (a stale handle, a double free), answers
 * NVML_ERROR_INVALID_ARGUMENT, and the free waits for the calls that took the set first.
 * NVIDIA leaves these calls undefined; a monitoring agent that frees its set on shutdown
 * while its health thread is about to wait is the common case.
 *
 * A fork copies the sets but only the forking thread: the library's fork handlers (init.c)
 * take every set's locks around the fork, and the child forgets the references and condition
 * waiters of threads it does not have, so it can wait on and free the sets it inherited
 * instead of waiting forever for the parent's waiters to leave.
 *
 * An event may name a MIG device (a GPU and compute instance of its GPU, STATE-FORMAT.md:
 * the record's GPU word carries the ids): it is delivered on the parent GPU with those ids in
 * gpuInstanceId / computeInstanceId, and only to a process that can see that MIG device, as
 * nvml.h says a caller without the privileges for an instance gets only whole-device events.
 * A GPU of the set that falls off the bus ends a wait with NVML_ERROR_GPU_IS_LOST (nvml.h)
 * once its pending events are delivered; each set reports a loss once, so a consumer that
 * waits in a loop (the device plugin) is told and then blocks again instead of spinning.
 * NVIDIA's DRA driver taints every device gpu-lost on that answer. A loss without an event
 * wakes no futex: waits sleep in slices of LOST_POLL_MS to notice it.
 *
 * An armed event (a fault sent with a trigger: `nvml-mock-ctl fail … --after-calls N`) carries
 * its GPU's arm tag in the high half of the record's type word. It reaches a set once the
 * GPU's fault trigger has fired in this process, as the fault's armed values apply then, and
 * while the GPU's `fault_trigger_arm` is still that tag; until then the set keeps it pending
 * (ARMED_PENDING of them), and a reset or another arm drops it. A trigger fired by a call in
 * another thread wakes no futex either: a blocked wait sees it at the end of its slice. A
 * library that predates armed events reads such a type word as no single event bit and skips
 * it, so an armed event is never delivered early.
 */
#define _GNU_SOURCE
#include "handles.h"
#include "mock.h"
#include "visible.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EVENT_BITS 64u
/* Not attributable to a MIG instance (nvmlEventData_t, a GPU without MIG). */
#define NO_INSTANCE 0xFFFFFFFFu
#define LOST_POLL_MS 250u
/* Armed events a set holds while their trigger has not fired in this process. */
#define ARMED_PENDING 32u
/* The ring record's type word: the nvmlEventType* bit below, an armed event's tag above. */
#define EVENT_TYPE_MASK 0xFFFFFFFFull
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

struct nvmlEventSet_st {
    struct mock_handle handle; /* in `sets` */
    unsigned long long lost_told[(STATE_MAX_GPUS + 63) / 64]; /* GPUs whose loss this set reported */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int closing; /* set under `lock` by nvmlEventSetFree; waiters also read it unlocked */
    const unsigned char *ring; /* the live layer's header at creation; NULL: no event can arrive */
    uint64_t cursor;           /* the last ring record this set has looked at */
    uint64_t pending[ARMED_PENDING]; /* armed events waiting for their trigger, oldest first */
    unsigned int npending;
    unsigned long long registered[STATE_MAX_GPUS];
    /* The ring's head when (GPU, type bit) was registered: only later events are delivered. */
    uint64_t since[STATE_MAX_GPUS][EVENT_BITS];
};

/* One ring record, read whole. */
struct ring_event {
    uint64_t gpu;
    uint64_t type;
    uint64_t data;
    uint32_t gi, ci; /* the MIG device it names, or NO_INSTANCE */
    uint32_t arm;    /* an armed event's tag (0: delivered as it comes) */
};

/* The record's GPU word: the board GPU in the low 32 bits, then GPU instance id + 1 and
 * compute instance id + 1 in 16 bits each (0: the whole GPU). */
#define EVENT_GPU_MASK 0xFFFFFFFFull
static void split_gpu_word(struct ring_event *ev)
{
    uint64_t w = ev->gpu;
    uint32_t gi = (uint32_t)(w >> 32) & 0xFFFFu;
    uint32_t ci = (uint32_t)(w >> 48) & 0xFFFFu;
    ev->gpu = w & EVENT_GPU_MASK;
    ev->gi = gi != 0 && ci != 0 ? gi - 1 : NO_INSTANCE;
    ev->ci = gi != 0 && ci != 0 ? ci - 1 : NO_INSTANCE;
}

/* The types the mock can deliver on this board (the live layer's writer raises them). */
static unsigned long long supported_events(const struct nvmlDevice_st *d)
{
    unsigned long long mask = nvmlEventTypePState | nvmlEventTypeXidCriticalError | nvmlEventTypeClock |
                              nvmlEventTypePowerSourceChange | nvmlEventTypeGpuRecoveryAction;
    if (d->s.ecc_supported) {
        mask |= nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError;
        if (d->s.retired_pages_supported || d->s.remapped_rows_supported) {
            mask |= nvmlEventTypeDramRetirementEvent | nvmlEventTypeDramRetirementFailure;
        }
    }
    if (d->s.mig_capable) {
        mask |= nvmlEventMigConfigChange;
    }
    return mask;
}

/* The sets this process created and has not begun to free. */
static struct mock_handles sets = MOCK_HANDLES_INIT;

#define EACH_SET(s) \
    for (struct nvmlEventSet_st *s = (struct nvmlEventSet_st *)(void *)sets.head; s != NULL; \
         s = (struct nvmlEventSet_st *)(void *)s->handle.next)

void mock_events_fork_prepare(void)
{
    mock_handles_fork_prepare(&sets);
    EACH_SET(s) {
        pthread_mutex_lock(&s->lock);
    }
}

void mock_events_fork_parent(void)
{
    EACH_SET(s) {
        pthread_mutex_unlock(&s->lock);
    }
    mock_handles_fork_parent(&sets);
}

static int set_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

/* In the child, only this thread: no thread waits on a set's condition (one that counts the
 * parent's waiters would never let itself be destroyed). */
void mock_events_fork_child(void)
{
    EACH_SET(s) {
        memset(&s->cond, 0, sizeof(s->cond));
        (void)set_cond_init(&s->cond);
        pthread_mutex_unlock(&s->lock);
    }
    mock_handles_fork_child(&sets);
}

static struct nvmlEventSet_st *set_take(nvmlEventSet_t set)
{
    return (struct nvmlEventSet_st *)(void *)mock_handle_take(&sets, set);
}

static void set_drop(struct nvmlEventSet_st *s)
{
    mock_handle_drop(&sets, &s->handle);
}

static uint64_t ring_head(const unsigned char *h)
{
    return __atomic_load_n((const uint64_t *)(const void *)(h + LIVE_HDR_EVENT_HEAD), __ATOMIC_ACQUIRE);
}

static uint32_t *ring_word(const unsigned char *h)
{
    /* FUTEX_WAIT and FUTEX_WAKE only read the word: the read-only mapping serves both. */
    return (uint32_t *)(uintptr_t)(h + LIVE_HDR_EVENT_FUTEX);
}

/* Read record `seq` under its sequence number (the writer zeroes it, fills the fields, then
 * publishes it). 0 when the slot holds another record: overwritten by a writer that lapped
 * the reader, or being rewritten. */
static int ring_read(const unsigned char *h, uint64_t seq, struct ring_event *ev)
{
    const unsigned char *rec = h + LIVE_EVENTS_OFFSET + (size_t)(seq % LIVE_EVENT_SLOTS) * LIVE_EVENT_RECORD_BYTES;
    const uint64_t *s = (const uint64_t *)(const void *)(rec + LIVE_EVENT_SEQ);
    if (__atomic_load_n(s, __ATOMIC_ACQUIRE) != seq) {
        return 0;
    }
    ev->gpu = __atomic_load_n((const uint64_t *)(const void *)(rec + LIVE_EVENT_GPU), __ATOMIC_RELAXED);
    ev->type = __atomic_load_n((const uint64_t *)(const void *)(rec + LIVE_EVENT_TYPE), __ATOMIC_RELAXED);
    ev->data = __atomic_load_n((const uint64_t *)(const void *)(rec + LIVE_EVENT_DATA), __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(s, __ATOMIC_RELAXED) == seq;
}

/* What a set does with a ring record it has read. */
enum take { TAKE_SKIP, TAKE_DELIVER, TAKE_PEND };

/* Whether ring record `seq` (read into *ev, raw) is this set's event, with *ev made the
 * caller's (view index, type bit, instance ids). Caller holds s->lock. */
static enum take take_event(struct nvmlEventSet_st *s, uint64_t seq, struct ring_event *ev)
{
    split_gpu_word(ev);
    ev->arm = (uint32_t)(ev->type >> 32);
    ev->type &= EVENT_TYPE_MASK;
    /* The ring names board GPUs; one outside this process's view is not its event, nor is
     * one of a MIG device this process was not given. */
    if (ev->gi != NO_INSTANCE && ev->gpu < mock_board_count &&
        !mock_mig_visible((unsigned int)ev->gpu, ev->gi, ev->ci)) {
        return TAKE_SKIP;
    }
    unsigned int view = ev->gpu < mock_board_count ? mock_view_of_board[ev->gpu] : VISIBLE_NONE;
    if (view >= mock_device_count || ev->type == 0 || (ev->type & (ev->type - 1)) != 0) {
        return TAKE_SKIP;
    }
    ev->gpu = view;
    unsigned int bit = (unsigned int)__builtin_ctzll(ev->type);
    if ((s->registered[view] & ev->type) == 0 || seq <= s->since[view][bit]) {
        return TAKE_SKIP;
    }
    if (ev->arm == 0) {
        return TAKE_DELIVER;
    }
    const unsigned char *rec = mock_devices[view].live;
    if (rec == NULL || mock_live_arm_of(rec) != ev->arm) {
        return TAKE_SKIP; /* reset, or armed again for another fault: this arm is gone */
    }
    return mock_live_trigger_peek(rec) ? TAKE_DELIVER : TAKE_PEND;
}

static void pending_drop(struct nvmlEventSet_st *s, unsigned int i)
{
    memmove(&s->pending[i], &s->pending[i + 1], (size_t)(s->npending - i - 1) * sizeof(s->pending[0]));
    s->npending--;
}

/* The next event of the ring this set receives: first a pending armed event whose trigger
 * has fired, then the ring in order; 0 when none is there yet. Caller holds s->lock. A
 * writer more than a ring ahead has overwritten what this set did not read: the set goes on
 * from the oldest record still present (a pending event overwritten so is dropped). */
static int ring_next(struct nvmlEventSet_st *s, struct ring_event *out)
{
    uint64_t head = ring_head(s->ring);
    if (head < s->cursor) {
        /* not a ring this set has read (a rewritten or repaired file): start over, and
         * registrations count from the new ring's head */
        s->cursor = head;
        s->npending = 0;
        for (unsigned int g = 0; g < STATE_MAX_GPUS; g++) {
            for (unsigned int b = 0; s->registered[g] != 0 && b < EVENT_BITS; b++) {
                if (s->since[g][b] > head) {
                    s->since[g][b] = head;
                }
            }
        }
    }
    for (unsigned int i = 0; i < s->npending;) {
        uint64_t seq = s->pending[i];
        struct ring_event ev;
        enum take take = head - seq < LIVE_EVENT_SLOTS && ring_read(s->ring, seq, &ev) ? take_event(s, seq, &ev)
                                                                                        : TAKE_SKIP;
        if (take == TAKE_PEND) {
            i++;
            continue;
        }
        pending_drop(s, i);
        if (take == TAKE_DELIVER) {
            *out = ev;
            return 1;
        }
    }
    while (s->cursor < head) {
        if (head - s->cursor > LIVE_EVENT_SLOTS) {
            s->cursor = head - LIVE_EVENT_SLOTS;
        }
        uint64_t seq = s->cursor + 1;
        struct ring_event ev;
        int got = ring_read(s->ring, seq, &ev);
        s->cursor = seq;
        if (!got) {
            head = ring_head(s->ring); /* lapped while reading: skip to what is still there */
            continue;
        }
        switch (take_event(s, seq, &ev)) {
        case TAKE_DELIVER: *out = ev; return 1;
        case TAKE_PEND:
            if (s->npending == ARMED_PENDING) {
                pending_drop(s, 0); /* the oldest goes: a set holds the latest arms */
            }
            s->pending[s->npending++] = seq;
            break;
        case TAKE_SKIP: break;
        }
    }
    return 0;
}

MOCK_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(set);
    struct nvmlEventSet_st *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return NVML_ERROR_MEMORY;
    }
    if (pthread_mutex_init(&s->lock, NULL) != 0 || set_cond_init(&s->cond) != 0) {
        free(s);
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    s->ring = atomic_load_explicit(&mock_live_header, memory_order_acquire);
    s->cursor = s->ring != NULL ? ring_head(s->ring) : 0;
    if (s->ring != NULL) {
        /* Map the ring's pages in now: a process's first look at each of them (a forked
         * child maps none of its parent's) is otherwise a page fault between the wake-up and
         * the event, on the path whose latency a waiter measures. POPULATE_READ reports a
         * failure (an older kernel, a file cut short) instead of raising SIGBUS; the pages
         * then fault in on first use as before. */
        (void)madvise((void *)(uintptr_t)(s->ring + LIVE_EVENTS_OFFSET),
                      (size_t)LIVE_EVENT_SLOTS * LIVE_EVENT_RECORD_BYTES, MADV_POPULATE_READ);
    }
    mock_handle_add(&sets, &s->handle);
    *set = s;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(eventTypes);
    *eventTypes = supported_events(d);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                                  nvmlEventSet_t set)
{
    GET_DEVICE(device, d);
    struct nvmlEventSet_st *s = set_take(set);
    REQUIRE_ARG(s);
    if (eventTypes & ~supported_events(d)) {
        set_drop(s);
        return NVML_ERROR_NOT_SUPPORTED;
    }
    pthread_mutex_lock(&s->lock);
    unsigned long long added = eventTypes & ~s->registered[d->index];
    if (added != 0 && s->ring != NULL) {
        uint64_t head = ring_head(s->ring);
        for (unsigned int bit = 0; bit < EVENT_BITS; bit++) {
            if ((added >> bit) & 1u) {
                s->since[d->index][bit] = head;
            }
        }
    }
    s->registered[d->index] |= eventTypes;
    pthread_mutex_unlock(&s->lock);
    set_drop(s);
    return NVML_SUCCESS;
}

static struct timespec deadline_after(unsigned int timeoutms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeoutms / 1000;
    deadline.tv_nsec += (long)(timeoutms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
    }
    return deadline;
}

/* Time left until `deadline` in *left; 0 once it has passed. */
static int time_left(const struct timespec *deadline, struct timespec *left)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    left->tv_sec = deadline->tv_sec - now.tv_sec;
    left->tv_nsec = deadline->tv_nsec - now.tv_nsec;
    if (left->tv_nsec < 0) {
        left->tv_sec -= 1;
        left->tv_nsec += 1000000000L;
    }
    return left->tv_sec > 0 || (left->tv_sec == 0 && left->tv_nsec > 0);
}

/* Spurious wakes (a FUTEX_WAKE that wrote nothing) taken at once in one wait, and the pause
 * between looks at the word after that (see wait_event). */
#define SPURIOUS_BEFORE_PAUSE 8u
#define SPURIOUS_PAUSE_NS 1000000L

/* Whether the GPU is lost now, as mock_lost tells a call, without counting toward an armed
 * loss's trigger: the wait's own looks at its GPUs, every slice, are not the caller's calls. */
static int lost_seen(const struct nvmlDevice_st *d)
{
    unsigned int slot = LIVE_SLOT_gpu_lost;
    uint64_t v;
    return d->live != NULL && mock_live_load_n_as(d->live, 1, &slot, &v, mock_live_trigger_peek) != 0 && v != 0;
}

/* A GPU registered in this set that is lost and whose loss the set has not reported yet:
 * marks it reported and returns 1. A GPU back on the bus may be reported again. Caller holds
 * s->lock. `counted`: this look is the wait call's own (one call on each GPU of the set, as
 * any call on a GPU counts toward its armed fault's trigger); the wait's later looks are not. */
static int lost_news(struct nvmlEventSet_st *s, int counted)
{
    int news = 0;
    for (unsigned int i = 0; i < mock_device_count && i < STATE_MAX_GPUS; i++) {
        unsigned long long bit = 1ull << (i % 64);
        if (s->registered[i] == 0) {
            continue;
        }
        if (counted ? mock_lost(&mock_devices[i]) : lost_seen(&mock_devices[i])) {
            if (!(s->lost_told[i / 64] & bit)) {
                s->lost_told[i / 64] |= bit;
                news = 1;
            }
        } else {
            s->lost_told[i / 64] &= ~bit;
        }
    }
    return news;
}

/* Wait for the next event this set receives, for at most `timeoutms`; NVML_SUCCESS with *ev
 * filled, NVML_ERROR_GPU_IS_LOST when a GPU of the set fell off the bus (once), or
 * NVML_ERROR_TIMEOUT (also when the set is freed meanwhile). */
static nvmlReturn_t wait_event(struct nvmlEventSet_st *s, unsigned int timeoutms, struct ring_event *ev)
{
    struct timespec deadline = deadline_after(timeoutms);
    struct timespec left;
    nvmlReturn_t rc = NVML_ERROR_TIMEOUT;
    pthread_mutex_lock(&s->lock);
    if (s->ring == NULL) {
        /* No live layer: nothing can arrive; block for the timeout or until freed. */
        while (!s->closing) {
            if (pthread_cond_timedwait(&s->cond, &s->lock, &deadline) == ETIMEDOUT) {
                break;
            }
        }
    } else {
        uint32_t *word = ring_word(s->ring);
        for (int first = 1; !s->closing; first = 0) {
            /* A live file cut short or overwritten under the wait: its ring is not one. The
             * wait still blocks (a caller that waits in a loop must not spin), trying to map
             * a repaired file every LOST_POLL_MS, and ends with NVML_ERROR_UNKNOWN and the
             * reason if the file is still broken when the timeout ends. */
            if (!mock_live_header_ok(s->ring) && mock_live_repair() != 0) {
                if (!time_left(&deadline, &left)) {
                    rc = NVML_ERROR_UNKNOWN;
                    break;
                }
                if (left.tv_sec > 0 || left.tv_nsec > (long)LOST_POLL_MS * 1000000L) {
                    left.tv_sec = 0;
                    left.tv_nsec = (long)LOST_POLL_MS * 1000000L;
                }
                pthread_mutex_unlock(&s->lock);
                nanosleep(&left, NULL);
                pthread_mutex_lock(&s->lock);
                continue;
            }
            /* The word is read before the ring: a writer publishes the record and the head,
             * then bumps the word, so an event missed by this scan changes the word and the
             * FUTEX_WAIT below returns at once instead of sleeping on it. */
            uint32_t seen = __atomic_load_n(word, __ATOMIC_ACQUIRE);
            if (ring_next(s, ev)) {
                rc = NVML_SUCCESS;
                break;
            }
            if (lost_news(s, first)) {
                rc = NVML_ERROR_GPU_IS_LOST;
                break;
            }
            if (!time_left(&deadline, &left)) {
                break;
            }
            /* One slice of the wait: at its end the scan above runs again, so a loss without
             * an event (which wakes no one) is seen within LOST_POLL_MS, not at the timeout. */
            struct timespec slice = deadline;
            if (left.tv_sec > 0 || left.tv_nsec > (long)LOST_POLL_MS * 1000000L) {
                slice = deadline_after(LOST_POLL_MS);
                left.tv_sec = 0;
                left.tv_nsec = (long)LOST_POLL_MS * 1000000L;
            }
            pthread_mutex_unlock(&s->lock);
            unsigned spurious = 0;
            for (;;) {
                syscall(SYS_futex, word, FUTEX_WAIT, seen, &left, NULL, 0);
                /* Any process that maps the file, read-only included, may FUTEX_WAKE the
                 * word. A wake that changed nothing (the word is what it was: a writer bumps
                 * it before waking, and the set is not being freed) is spurious: it never
                 * returns an event, and costs neither the set's lock nor a scan of the ring.
                 * Past a few in one wait the waiter is being flooded: it then looks at the
                 * word once per SPURIOUS_PAUSE_NS instead of at every wake, so a flood costs
                 * it about a thousand system calls a second and a real event at most that
                 * pause of latency. */
                if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != seen ||
                    __atomic_load_n(&s->closing, __ATOMIC_ACQUIRE) || !time_left(&slice, &left)) {
                    break;
                }
                if (++spurious >= SPURIOUS_BEFORE_PAUSE) {
                    struct timespec pause = {0, SPURIOUS_PAUSE_NS};
                    if (left.tv_sec == 0 && left.tv_nsec < pause.tv_nsec) {
                        pause = left;
                    }
                    nanosleep(&pause, NULL);
                    if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != seen ||
                        __atomic_load_n(&s->closing, __ATOMIC_ACQUIRE) ||
                        !time_left(&slice, &left)) {
                        break;
                    }
                }
            }
            pthread_mutex_lock(&s->lock);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    REQUIRE_LIVE();
    if (data == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    struct nvmlEventSet_st *s = set_take(set);
    REQUIRE_ARG(s);
    struct ring_event ev;
    nvmlReturn_t rc = wait_event(s, timeoutms, &ev);
    set_drop(s);
    if (rc == NVML_SUCCESS) {
        data->device = &mock_devices[ev.gpu];
        data->eventType = ev.type;
        data->eventData = ev.data;
        data->gpuInstanceId = ev.gi;
        data->computeInstanceId = ev.ci;
    }
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

MOCK_EXPORT nvmlReturn_t nvmlEventSetWait_v3(nvmlEventSet_t set, nvmlEventSetWait_v3_t *params)
{
    REQUIRE_LIVE();
    if (params == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    struct nvmlEventSet_st *s = set_take(set);
    REQUIRE_ARG(s);
    struct ring_event ev;
    nvmlReturn_t rc = wait_event(s, params->timeoutMs, &ev);
    set_drop(s);
    if (rc == NVML_SUCCESS) {
        unsigned int timeout = params->timeoutMs;
        memset(params, 0, sizeof(*params));
        params->timeoutMs = timeout;
        params->dataType = NVML_EVENT_DATA_TYPE_NVML_EVENT;
        memcpy(params->uuid, mock_devices[ev.gpu].s.uuid,
               strnlen(mock_devices[ev.gpu].s.uuid, sizeof(params->uuid) - 1));
        params->eventType = ev.type;
        params->eventData = ev.data;
        params->gpuInstanceId = ev.gi;
        params->computeInstanceId = ev.ci;
    }
    return rc;
}

/* Waiters sleep on the ring's shared word: wake them (waiters of other sets wake too, find
 * nothing new and sleep again). */
static void wake_ring(void *arg)
{
    const struct nvmlEventSet_st *s = arg;
    syscall(SYS_futex, ring_word(s->ring), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

MOCK_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    struct nvmlEventSet_st *s = (struct nvmlEventSet_st *)(void *)mock_handle_unlist(&sets, set);
    REQUIRE_ARG(s);
    /* No call can take the set now; wake those that hold it. */
    pthread_mutex_lock(&s->lock);
    __atomic_store_n(&s->closing, 1, __ATOMIC_RELEASE); /* read unlocked by waiters */
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    mock_handle_wait_unused(&sets, &s->handle, s->ring != NULL ? wake_ring : NULL, s);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return NVML_SUCCESS;
}
