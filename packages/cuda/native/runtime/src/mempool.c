/*
 * Stream-ordered allocation and each device's default memory pool.
 *
 * Nothing is ever pending on a mock GPU's streams, so allocating "in stream order" is
 * allocating now, through the driver (memory the node sees, bounded by NVML's free memory),
 * and a pool keeps nothing back: what it has reserved is what is in use. The default pools
 * exist so that a program that manages its memory through them (PyTorch's
 * `backend:cudaMallocAsync`) runs; their counters are the truth about the allocations made
 * through them. Pools of a program's own (cudaMemPoolCreate) are not modelled.
 */
#include "rt.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

struct pool {
    int device;
    unsigned long long release_threshold;
    int reuse[3]; /* the three reuse switches, attributes 1..3 */
    unsigned long long used, used_high;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool *pools;
static int pool_count;

/* Stream-ordered allocations: address -> (size, pool), for the pool's counters. */
static struct allocation {
    uintptr_t address;
    size_t size;
    struct pool *pool;
} *allocations;
static size_t allocations_capacity, allocations_used;
static const uintptr_t FREED = 1; /* a removed slot: keeps probe chains whole */

static size_t slot_of(uintptr_t address) { return (address >> 8) * 0x9E3779B97F4A7C15ULL; }

static int remember_locked(uintptr_t address, size_t size, struct pool *pool) {
    if ((allocations_used + 1) * 2 > allocations_capacity) {
        size_t capacity = allocations_capacity ? allocations_capacity * 2 : 1024;
        struct allocation *fresh = calloc(capacity, sizeof *fresh);
        if (fresh == NULL)
            return -1;
        for (size_t i = 0; i < allocations_capacity; i++) {
            struct allocation *a = &allocations[i];
            if (a->address > FREED)
                for (size_t j = slot_of(a->address) & (capacity - 1);; j = (j + 1) & (capacity - 1))
                    if (fresh[j].address == 0) {
                        fresh[j] = *a;
                        break;
                    }
        }
        free(allocations);
        allocations = fresh;
        allocations_capacity = capacity;
        allocations_used = 0;
        for (size_t i = 0; i < capacity; i++)
            allocations_used += fresh[i].address != 0;
    }
    size_t mask = allocations_capacity - 1;
    for (size_t i = slot_of(address) & mask;; i = (i + 1) & mask)
        if (allocations[i].address == 0) {
            allocations[i] = (struct allocation){address, size, pool};
            allocations_used++;
            return 0;
        }
}

static struct allocation *find_locked(uintptr_t address) {
    if (allocations_capacity == 0)
        return NULL;
    size_t mask = allocations_capacity - 1;
    for (size_t i = slot_of(address) & mask; allocations[i].address != 0; i = (i + 1) & mask)
        if (allocations[i].address == address)
            return &allocations[i];
    return NULL;
}

/* The default pools, made once the device count is known. */
static cudaError_t ready(void) {
    cudaError_t st = rt_init();
    if (st != cudaSuccess)
        return st;
    pthread_mutex_lock(&lock);
    if (pools == NULL) {
        pool_count = rt_device_count();
        pools = calloc((size_t)(pool_count > 0 ? pool_count : 1), sizeof *pools);
        for (int i = 0; pools != NULL && i < pool_count; i++) {
            pools[i].device = i;
            pools[i].reuse[0] = pools[i].reuse[1] = pools[i].reuse[2] = 1;
        }
    }
    pthread_mutex_unlock(&lock);
    return pools != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

/* One of the default pools, or NULL for any other handle. */
static struct pool *pool_of(cudaMemPool_t handle) {
    for (int i = 0; i < pool_count; i++)
        if ((void *)&pools[i] == (void *)handle)
            return &pools[i];
    return NULL;
}

/* Ready the pools, then find the one a call names (NULL for any other handle, which the
 * caller refuses as it says); a failure to get ready comes back recorded. */
static cudaError_t ready_pool(cudaMemPool_t handle, struct pool **out) {
    cudaError_t st = ready();
    if (st != cudaSuccess)
        return rt_record(st);
    *out = pool_of(handle);
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device) {
    if (memPool == NULL)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t st = ready();
    if (st != cudaSuccess)
        return rt_record(st);
    if (device < 0 || device >= pool_count)
        return rt_record(cudaErrorInvalidDevice);
    *memPool = (cudaMemPool_t)(void *)&pools[device];
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device) {
    return cudaDeviceGetDefaultMemPool(memPool, device);
}

RT_EXPORT cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool) {
    struct pool *p;
    cudaError_t st = ready_pool(memPool, &p);
    if (st != cudaSuccess)
        return st;
    if (device < 0 || device >= pool_count)
        return rt_record(cudaErrorInvalidDevice);
    if (p == NULL)
        return rt_record(cudaErrorInvalidValue);
    if (p->device != device)
        return rt_fail(cudaErrorNotSupported,
                       "operation not supported: nvml-mock's CUDA runtime models only each "
                       "device's default memory pool");
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                              void *value) {
    struct pool *p;
    cudaError_t st = ready_pool(memPool, &p);
    if (st != cudaSuccess)
        return st;
    if (p == NULL || value == NULL)
        return rt_record(cudaErrorInvalidValue);
    pthread_mutex_lock(&lock);
    switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies:
        *(int *)value = p->reuse[attr - 1];
        break;
    case cudaMemPoolAttrReleaseThreshold:
        *(cuuint64_t *)value = p->release_threshold;
        break;
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrUsedMemCurrent:
        *(cuuint64_t *)value = p->used;
        break;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh:
        *(cuuint64_t *)value = p->used_high;
        break;
    default:
        pthread_mutex_unlock(&lock);
        return rt_record(cudaErrorInvalidValue);
    }
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                              void *value) {
    struct pool *p;
    cudaError_t st = ready_pool(memPool, &p);
    if (st != cudaSuccess)
        return st;
    if (p == NULL || value == NULL)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t result = cudaSuccess;
    pthread_mutex_lock(&lock);
    switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies:
        p->reuse[attr - 1] = *(int *)value != 0;
        break;
    case cudaMemPoolAttrReleaseThreshold:
        p->release_threshold = *(cuuint64_t *)value;
        break;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh:
        /* a high-water mark may only be reset, to the current value */
        if (*(cuuint64_t *)value != 0)
            result = cudaErrorInvalidValue;
        else
            p->used_high = p->used;
        break;
    default:
        result = cudaErrorInvalidValue;
    }
    pthread_mutex_unlock(&lock);
    return rt_record(result);
}

RT_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
    (void)minBytesToKeep;
    struct pool *p;
    cudaError_t st = ready_pool(memPool, &p);
    if (st != cudaSuccess)
        return st;
    /* nothing is held back, so there is nothing to give back */
    return p != NULL ? cudaSuccess : rt_record(cudaErrorInvalidValue);
}

RT_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool,
                                           const struct cudaMemAccessDesc *descList, size_t count) {
    struct pool *p;
    cudaError_t st = ready_pool(memPool, &p);
    if (st != cudaSuccess)
        return st;
    if (p == NULL || (count > 0 && descList == NULL))
        return rt_record(cudaErrorInvalidValue);
    for (size_t i = 0; i < count; i++) {
        const struct cudaMemAccessDesc *d = &descList[i];
        if (d->location.type != cudaMemLocationTypeDevice || d->location.id < 0 ||
            d->location.id >= pool_count)
            return rt_record(cudaErrorInvalidValue);
        if (d->location.id == p->device || d->flags == cudaMemAccessFlagsProtNone)
            continue;
        /* another device reads this pool's memory as the driver lets it: peer access */
        int can = 0;
        st = cudaDeviceCanAccessPeer(&can, d->location.id, p->device);
        if (st != cudaSuccess)
            return st;
        if (!can)
            return rt_record(cudaErrorInvalidDevice);
    }
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t memPool,
                                           struct cudaMemLocation *location) {
    struct pool *p;
    cudaError_t st = ready_pool(memPool, &p);
    if (st != cudaSuccess)
        return st;
    if (p == NULL || flags == NULL || location == NULL ||
        location->type != cudaMemLocationTypeDevice || location->id < 0 ||
        location->id >= pool_count)
        return rt_record(cudaErrorInvalidValue);
    int can = location->id == p->device;
    if (!can && (st = cudaDeviceCanAccessPeer(&can, location->id, p->device)) != cudaSuccess)
        return st;
    *flags = can ? cudaMemAccessFlagsProtReadWrite : cudaMemAccessFlagsProtNone;
    return cudaSuccess;
}

/* Allocate from `p` (the current device's pool unless named) and count it there. */
static cudaError_t allocate(void **ptr, size_t size, struct pool *p) {
    if (ptr == NULL)
        return rt_record(cudaErrorInvalidValue);
    *ptr = NULL;
    cudaError_t st = ready();
    if (st != cudaSuccess)
        return rt_record(st);
    int device;
    st = rt_current_device(&device);
    if (st != cudaSuccess)
        return rt_record(st);
    if (p == NULL)
        p = &pools[device];
    else if (p->device != device)
        return rt_fail(cudaErrorNotSupported,
                       "operation not supported: nvml-mock's CUDA runtime allocates from a "
                       "device's pool only while that device is current");
    st = cudaMalloc(ptr, size);
    if (st != cudaSuccess || *ptr == NULL)
        return st;
    pthread_mutex_lock(&lock);
    if (remember_locked((uintptr_t)*ptr, size, p) == 0) {
        p->used += size;
        if (p->used > p->used_high)
            p->used_high = p->used;
    }
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) {
    (void)hStream;
    return allocate(devPtr, size, NULL);
}

RT_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                              cudaStream_t stream) {
    (void)stream;
    struct pool *p;
    cudaError_t st = ready_pool(memPool, &p);
    if (st != cudaSuccess)
        return st;
    if (p == NULL)
        return rt_record(cudaErrorInvalidValue);
    return allocate(ptr, size, p);
}

RT_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream) {
    (void)hStream;
    cudaError_t st = cudaFree(devPtr);
    if (st != cudaSuccess || devPtr == NULL)
        return st;
    pthread_mutex_lock(&lock);
    struct allocation *a = find_locked((uintptr_t)devPtr);
    if (a != NULL) {
        a->pool->used -= a->size;
        a->address = FREED;
    }
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

RT_ALIAS(cudaMallocAsync_ptsz, cudaMallocAsync)
RT_ALIAS(cudaMallocFromPoolAsync_ptsz, cudaMallocFromPoolAsync)
RT_ALIAS(cudaFreeAsync_ptsz, cudaFreeAsync)
