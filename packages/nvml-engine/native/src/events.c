/*
 * Event sets: create, register, wait, free.
 *
 * A mock GPU raises no event, so a wait blocks for the whole timeout and returns
 * NVML_ERROR_TIMEOUT. It must really block: the device plugin's health checker calls
 * nvmlEventSetWait_v2 in a loop and would spin a core if the wait returned early. The
 * wait sleeps on a condition variable (monotonic clock) so nvmlEventSetFree can wake
 * waiters instead of leaving them on freed memory.
 */
#include "mock.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EVENT_SET_MAGIC 0x4e564d4cu /* "NVML" */

struct nvmlEventSet_st {
    unsigned int magic;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned int waiters;
    int closing;
    unsigned long long registered[STATE_MAX_GPUS];
};

static unsigned long long supported_events(const struct nvmlDevice_st *d)
{
    unsigned long long mask = nvmlEventTypePState | nvmlEventTypeXidCriticalError | nvmlEventTypeClock;
    if (d->s.ecc_supported) {
        mask |= nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError;
    }
    return mask;
}

static struct nvmlEventSet_st *event_set(nvmlEventSet_t set)
{
    return set != NULL && set->magic == EVENT_SET_MAGIC ? set : NULL;
}

MOCK_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(set);
    struct nvmlEventSet_st *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return NVML_ERROR_MEMORY;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (pthread_mutex_init(&s->lock, NULL) != 0 || pthread_cond_init(&s->cond, &attr) != 0) {
        pthread_condattr_destroy(&attr);
        free(s);
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    pthread_condattr_destroy(&attr);
    s->magic = EVENT_SET_MAGIC;
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
    struct nvmlEventSet_st *s = event_set(set);
    REQUIRE_ARG(s);
    if (eventTypes & ~supported_events(d)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    pthread_mutex_lock(&s->lock);
    s->registered[d->index] |= eventTypes;
    pthread_mutex_unlock(&s->lock);
    return NVML_SUCCESS;
}

/* Block for `timeoutms` (or until the set is freed); no event ever arrives. */
static nvmlReturn_t wait_timeout(struct nvmlEventSet_st *s, unsigned int timeoutms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeoutms / 1000;
    deadline.tv_nsec += (long)(timeoutms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->lock);
    s->waiters++;
    while (!s->closing) {
        if (pthread_cond_timedwait(&s->cond, &s->lock, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    s->waiters--;
    int closing = s->closing;
    if (closing && s->waiters == 0) {
        pthread_cond_broadcast(&s->cond); /* let nvmlEventSetFree finish */
    }
    pthread_mutex_unlock(&s->lock);
    return NVML_ERROR_TIMEOUT;
}

MOCK_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    REQUIRE_LIVE();
    struct nvmlEventSet_st *s = event_set(set);
    if (s == NULL || data == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return wait_timeout(s, timeoutms);
}

MOCK_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

MOCK_EXPORT nvmlReturn_t nvmlEventSetWait_v3(nvmlEventSet_t set, nvmlEventSetWait_v3_t *params)
{
    REQUIRE_LIVE();
    struct nvmlEventSet_st *s = event_set(set);
    if (s == NULL || params == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return wait_timeout(s, params->timeoutMs);
}

MOCK_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    struct nvmlEventSet_st *s = event_set(set);
    REQUIRE_ARG(s);
    pthread_mutex_lock(&s->lock);
    s->closing = 1;
    pthread_cond_broadcast(&s->cond);
    while (s->waiters > 0) {
        pthread_cond_wait(&s->cond, &s->lock);
    }
    s->magic = 0;
    pthread_mutex_unlock(&s->lock);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return NVML_SUCCESS;
}
