/*
 * Contexts: created ones and each device's primary context, a per-thread stack of current
 * contexts, and the fault check every call on a context's GPU makes. A context is a handle
 * in the registry (handles.c): after cuCtxDestroy it is gone from it, and every call given
 * it answers CUDA_ERROR_INVALID_CONTEXT (CUDA_ERROR_CONTEXT_IS_DESTROYED when it was the
 * thread's current one), never a read of freed memory.
 */
#include <stdlib.h>
#include <string.h>

#include "mock_cu.h"

#define STACK_MAX 64

static __thread struct CUctx_st *stack[STACK_MAX];
static __thread unsigned int depth;
/* the thread's current context was destroyed under it (not yet replaced) */
static __thread int current_destroyed;

static struct CUctx_st *primary[MOCK_CU_MAX_DEVICES];
static unsigned int primary_refs[MOCK_CU_MAX_DEVICES];
static unsigned int primary_flags[MOCK_CU_MAX_DEVICES];
static unsigned long long next_id = 1;

int mock_cu_ctx_live(const struct CUctx_st *ctx)
{
    return ctx != NULL && mock_cu_handle_is(ctx, MOCK_KIND_CONTEXT);
}

static struct CUctx_st *new_context(int device, unsigned int flags, int is_primary)
{
    struct CUctx_st *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        return NULL;
    }
    ctx->device = device;
    ctx->flags = flags;
    ctx->primary = is_primary;
    ctx->sticky = CUDA_SUCCESS;
    pthread_mutex_lock(&mock_cu_lock);
    ctx->id = next_id++;
    if (mock_cu_handle_add(ctx, MOCK_KIND_CONTEXT) != 0) {
        pthread_mutex_unlock(&mock_cu_lock);
        free(ctx);
        return NULL;
    }
    pthread_mutex_unlock(&mock_cu_lock);
    return ctx;
}

CUresult mock_cu_ctx_health(struct CUctx_st *ctx)
{
    CUresult sticky = __atomic_load_n(&ctx->sticky, __ATOMIC_ACQUIRE);
    if (sticky != CUDA_SUCCESS) {
        return sticky;
    }
    CUresult fault = mock_cu_device_fault(&mock_cu_devices[ctx->device]);
    if (fault != CUDA_SUCCESS) {
        __atomic_store_n(&ctx->sticky, fault, __ATOMIC_RELEASE);
    }
    return fault;
}

CUresult mock_cu_current(struct CUctx_st **out)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    if (current_destroyed) {
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    struct CUctx_st *ctx = depth > 0 ? stack[depth - 1] : NULL;
    if (ctx == NULL) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    pthread_mutex_lock(&mock_cu_lock);
    int live = mock_cu_ctx_live(ctx);
    pthread_mutex_unlock(&mock_cu_lock);
    if (!live) {
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    *out = ctx;
    return mock_cu_ctx_health(ctx);
}

/* Admission to a device: the compute mode NVML shows decides whether this process may hold a
 * context on it (faults.c). */
CUresult mock_cu_device_admission(const struct mock_cu_device *d);

static CUresult check_device(CUdevice dev)
{
    CUresult err;
    const struct mock_cu_device *d = mock_cu_device_of(dev, &err);
    if (d == NULL) {
        return err;
    }
    CUresult fault = mock_cu_device_fault(d);
    return fault != CUDA_SUCCESS ? fault : mock_cu_device_admission(d);
}

static CUresult create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    if (pctx == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = check_device(dev);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    if (depth >= STACK_MAX) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct CUctx_st *ctx = new_context(dev, flags, 0);
    if (ctx == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    stack[depth++] = ctx;
    current_destroyed = 0;
    *pctx = ctx;
    return CUDA_SUCCESS;
}

MOCK_ALIAS(cuCtxCreate, create);
MOCK_ALIAS(cuCtxCreate_v2, create);

MOCK_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                    unsigned int flags, CUdevice dev)
{
    if (numParams < 0 || (numParams > 0 && paramsArray == NULL)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (numParams > 0) {
        return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY; /* as a device without exec affinity answers */
    }
    return create(pctx, flags, dev);
}

MOCK_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
                                    CUdevice dev)
{
    if (ctxCreateParams != NULL && (ctxCreateParams->numExecAffinityParams > 0 || ctxCreateParams->cigParams != NULL)) {
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return create(pctx, flags, dev);
}

/* Drop `ctx` from every place the calling thread holds it. */
static void unstack(const struct CUctx_st *ctx)
{
    int was_current = depth > 0 && stack[depth - 1] == ctx;
    unsigned int kept = 0;
    for (unsigned int i = 0; i < depth; i++) {
        if (stack[i] != ctx) {
            stack[kept++] = stack[i];
        }
    }
    depth = kept;
    if (was_current) {
        current_destroyed = 1;
    }
}

static CUresult destroy(CUcontext ctx)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    pthread_mutex_lock(&mock_cu_lock);
    if (!mock_cu_ctx_live(ctx) || ctx->primary) {
        pthread_mutex_unlock(&mock_cu_lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    mock_cu_handle_remove(ctx);
    pthread_mutex_unlock(&mock_cu_lock);
    mock_cu_mem_release_context(ctx);
    unstack(ctx);
    /* the struct is kept: another thread may still hold the pointer, and looks it up first */
    return CUDA_SUCCESS;
}

MOCK_ALIAS(cuCtxDestroy, destroy);
MOCK_ALIAS(cuCtxDestroy_v2, destroy);

/* Whether a context a call names is one that is alive, once the driver is up. */
static CUresult live_context(CUcontext ctx)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    pthread_mutex_lock(&mock_cu_lock);
    int live = mock_cu_ctx_live(ctx);
    pthread_mutex_unlock(&mock_cu_lock);
    if (!live) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    return CUDA_SUCCESS;
}

static CUresult push(CUcontext ctx)
{
    CUresult r = live_context(ctx);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    if (depth >= STACK_MAX) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    stack[depth++] = ctx;
    current_destroyed = 0;
    return CUDA_SUCCESS;
}

MOCK_ALIAS(cuCtxPushCurrent, push);
MOCK_ALIAS(cuCtxPushCurrent_v2, push);

static CUresult pop(CUcontext *pctx)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    if (depth == 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    struct CUctx_st *ctx = stack[--depth];
    current_destroyed = 0;
    if (pctx != NULL) {
        *pctx = ctx;
    }
    return CUDA_SUCCESS;
}

MOCK_ALIAS(cuCtxPopCurrent, pop);
MOCK_ALIAS(cuCtxPopCurrent_v2, pop);

MOCK_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult r = ctx == NULL ? mock_cu_init_state() : live_context(ctx);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    if (ctx == NULL) {
        if (depth > 0) {
            depth--;
        }
        current_destroyed = 0;
        return CUDA_SUCCESS;
    }
    if (depth == 0) {
        depth = 1;
    }
    stack[depth - 1] = ctx;
    current_destroyed = 0;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    if (pctx == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pctx = depth > 0 && !current_destroyed ? stack[depth - 1] : NULL;
    return CUDA_SUCCESS;
}

/* The context a call names, or the current one for NULL: validated, health-checked. */
static CUresult named_or_current(CUcontext ctx, struct CUctx_st **out)
{
    if (ctx == NULL) {
        return mock_cu_current(out);
    }
    CUresult r = live_context(ctx);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    *out = ctx;
    return mock_cu_ctx_health(ctx);
}

MOCK_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    struct CUctx_st *c;
    if (device == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = named_or_current(ctx, &c);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    *device = c->device;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    return cuCtxGetDevice_v2(device, NULL);
}

MOCK_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
    struct CUctx_st *ctx;
    if (flags == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = mock_cu_current(&ctx);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    *flags = ctx->flags;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuCtxSetFlags(unsigned int flags)
{
    struct CUctx_st *ctx;
    CUresult r = mock_cu_current(&ctx);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    ctx->flags = flags;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    struct CUctx_st *c;
    if (ctxId == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = named_or_current(ctx, &c);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    *ctxId = c->id;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    struct CUctx_st *c;
    if (version == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = named_or_current(ctx, &c);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    *version = 3020; /* the context API version every driver since CUDA 3.2 reports */
    return CUDA_SUCCESS;
}

static CUresult synchronize(CUcontext ctx)
{
    struct CUctx_st *c;
    return named_or_current(ctx, &c); /* all work is done at the call: nothing is ever pending */
}

MOCK_EXPORT CUresult cuCtxSynchronize(void)
{
    return synchronize(NULL);
}

MOCK_ALIAS(cuCtxSynchronize_v2, synchronize);

MOCK_EXPORT CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    struct CUctx_st *ctx;
    if (pvalue == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = mock_cu_current(&ctx);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    switch (limit) {
    case CU_LIMIT_STACK_SIZE:
        *pvalue = 1024;
        return CUDA_SUCCESS;
    case CU_LIMIT_PRINTF_FIFO_SIZE:
    case CU_LIMIT_MALLOC_HEAP_SIZE:
        *pvalue = 8u << 20;
        return CUDA_SUCCESS;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH:
        *pvalue = 2;
        return CUDA_SUCCESS;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
        *pvalue = 2048;
        return CUDA_SUCCESS;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY:
        *pvalue = 64;
        return CUDA_SUCCESS;
    case CU_LIMIT_PERSISTING_L2_CACHE_SIZE:
        *pvalue = 0;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    }
}

MOCK_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    size_t now;
    CUresult r = cuCtxGetLimit(&now, limit);
    (void)value;
    return r; /* accepted; limits shape kernels, and none runs */
}

MOCK_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
    struct CUctx_st *ctx;
    if (pconfig == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = mock_cu_current(&ctx);
    if (r == CUDA_SUCCESS) {
        *pconfig = CU_FUNC_CACHE_PREFER_NONE;
    }
    return r;
}

MOCK_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    struct CUctx_st *ctx;
    (void)config;
    return mock_cu_current(&ctx);
}

MOCK_EXPORT CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    struct CUctx_st *ctx;
    CUresult r = mock_cu_current(&ctx);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    if (leastPriority != NULL) {
        *leastPriority = 0;
    }
    if (greatestPriority != NULL) {
        *greatestPriority = -5; /* the range current GPUs report */
    }
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuCtxResetPersistingL2Cache(void)
{
    struct CUctx_st *ctx;
    return mock_cu_current(&ctx);
}

/* ---- primary contexts ------------------------------------------------------------------ */

MOCK_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (pctx == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = check_device(dev);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    pthread_mutex_lock(&mock_cu_lock);
    struct CUctx_st *ctx = primary[dev];
    pthread_mutex_unlock(&mock_cu_lock);
    if (ctx == NULL) {
        struct CUctx_st *fresh = new_context(dev, 0, 1);
        if (fresh == NULL) {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        pthread_mutex_lock(&mock_cu_lock);
        if (primary[dev] == NULL) {
            fresh->flags = primary_flags[dev];
            primary[dev] = fresh;
            fresh = NULL;
        }
        ctx = primary[dev];
        pthread_mutex_unlock(&mock_cu_lock);
        if (fresh != NULL) {
            pthread_mutex_lock(&mock_cu_lock);
            mock_cu_handle_remove(fresh);
            pthread_mutex_unlock(&mock_cu_lock);
            free(fresh);
        }
    }
    pthread_mutex_lock(&mock_cu_lock);
    primary_refs[dev]++;
    pthread_mutex_unlock(&mock_cu_lock);
    *pctx = ctx;
    return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice dev)
{
    CUresult err;
    if (mock_cu_device_of(dev, &err) == NULL) {
        return err;
    }
    pthread_mutex_lock(&mock_cu_lock);
    if (primary_refs[dev] == 0) {
        pthread_mutex_unlock(&mock_cu_lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    primary_refs[dev]--;
    pthread_mutex_unlock(&mock_cu_lock);
    return CUDA_SUCCESS;
}

MOCK_ALIAS(cuDevicePrimaryCtxRelease, primary_release);
MOCK_ALIAS(cuDevicePrimaryCtxRelease_v2, primary_release);

static CUresult primary_reset(CUdevice dev)
{
    CUresult err;
    if (mock_cu_device_of(dev, &err) == NULL) {
        return err;
    }
    pthread_mutex_lock(&mock_cu_lock);
    struct CUctx_st *ctx = primary[dev];
    pthread_mutex_unlock(&mock_cu_lock);
    if (ctx != NULL) {
        mock_cu_mem_release_context(ctx);
        __atomic_store_n(&ctx->sticky, CUDA_SUCCESS, __ATOMIC_RELEASE);
    }
    return CUDA_SUCCESS;
}

MOCK_ALIAS(cuDevicePrimaryCtxReset, primary_reset);
MOCK_ALIAS(cuDevicePrimaryCtxReset_v2, primary_reset);

MOCK_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult err;
    if (mock_cu_device_of(dev, &err) == NULL) {
        return err;
    }
    if (flags == NULL || active == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&mock_cu_lock);
    *flags = primary[dev] != NULL ? primary[dev]->flags : primary_flags[dev];
    *active = primary_refs[dev] > 0;
    pthread_mutex_unlock(&mock_cu_lock);
    return CUDA_SUCCESS;
}

static CUresult primary_set_flags(CUdevice dev, unsigned int flags)
{
    CUresult err;
    if (mock_cu_device_of(dev, &err) == NULL) {
        return err;
    }
    pthread_mutex_lock(&mock_cu_lock);
    primary_flags[dev] = flags;
    if (primary[dev] != NULL) {
        primary[dev]->flags = flags;
    }
    pthread_mutex_unlock(&mock_cu_lock);
    return CUDA_SUCCESS;
}

MOCK_ALIAS(cuDevicePrimaryCtxSetFlags, primary_set_flags);
MOCK_ALIAS(cuDevicePrimaryCtxSetFlags_v2, primary_set_flags);
