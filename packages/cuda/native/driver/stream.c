/*
 * Streams and events. Every copy and memset is done when its call returns, so a stream is
 * always idle: synchronising checks the stream and its GPU's health, and an event records
 * the time it was recorded at (elapsed times between events are real host time between the
 * calls, which is what the work took here). Host functions queued on a stream run at once,
 * on the calling thread, in order: they are the caller's host code, not pretend GPU work.
 */
#include <stdlib.h>
#include <time.h>

#include "mock_cu.h"

struct CUstream_st {
    struct CUctx_st *ctx;
    unsigned int flags;
    int priority;
    unsigned long long id;
};

struct CUevent_st {
    struct CUctx_st *ctx;
    unsigned int flags;
    int recorded;
    struct timespec at;
};

static unsigned long long next_stream_id = 3; /* 0-2: the NULL, legacy and per-thread streams */

static int special(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

CUresult mock_cu_stream_check(CUstream stream)
{
    if (special(stream)) {
        struct CUctx_st *ctx;
        return mock_cu_current(&ctx);
    }
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    pthread_mutex_lock(&mock_cu_lock);
    int live = mock_cu_handle_is(stream, MOCK_KIND_STREAM) && mock_cu_ctx_live(stream->ctx);
    struct CUctx_st *ctx = live ? stream->ctx : NULL;
    pthread_mutex_unlock(&mock_cu_lock);
    if (!live) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    return mock_cu_ctx_health(ctx);
}

static CUresult create_stream(CUstream *phStream, unsigned int flags, int priority)
{
    struct CUctx_st *ctx;
    CUresult r = mock_cu_current(&ctx);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    if (phStream == NULL || (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING) != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct CUstream_st *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->ctx = ctx;
    s->flags = flags;
    s->priority = priority > 0 ? 0 : priority < -5 ? -5 : priority; /* clamped to the range, as documented */
    pthread_mutex_lock(&mock_cu_lock);
    s->id = next_stream_id++;
    int bad = mock_cu_handle_add(s, MOCK_KIND_STREAM);
    pthread_mutex_unlock(&mock_cu_lock);
    if (bad) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phStream = s;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return create_stream(phStream, Flags, 0);
}

MOCK_ALIAS(cuStreamCreateWithPriority, create_stream);

/* Destroy a stream or an event: each is one allocation, freed once the registry lets it go. */
static CUresult retire_and_free(void *handle, enum mock_cu_kind kind)
{
    CUresult r = mock_cu_handle_retire(handle, kind);
    if (r == CUDA_SUCCESS) {
        free(handle);
    }
    return r;
}

/* The special streams are never in the registry: destroying one is INVALID_HANDLE. */
static CUresult destroy_stream(CUstream hStream)
{
    return retire_and_free(hStream, MOCK_KIND_STREAM);
}

MOCK_ALIAS(cuStreamDestroy, destroy_stream);
MOCK_ALIAS(cuStreamDestroy_v2, destroy_stream);
MOCK_ALIAS(cuStreamSynchronize, mock_cu_stream_check);
MOCK_ALIAS(cuStreamSynchronize_ptsz, mock_cu_stream_check);
MOCK_ALIAS(cuStreamQuery, mock_cu_stream_check);
MOCK_ALIAS(cuStreamQuery_ptsz, mock_cu_stream_check);

/* The fields a stream answers for: the context it belongs to, its flags, priority and id. */
struct stream_fields {
    struct CUctx_st *ctx;
    unsigned int flags;
    int priority;
    unsigned long long id;
};

/* Read the fields of a stream (or of the special streams) after checking it. */
static CUresult stream_fields(CUstream s, struct stream_fields *out)
{
    CUresult r = mock_cu_stream_check(s);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    if (special(s)) {
        CUresult c = mock_cu_current(&out->ctx);
        out->flags = 0;
        out->priority = 0;
        out->id = s == NULL ? 0 : s == CU_STREAM_LEGACY ? 1 : 2;
        return c;
    }
    pthread_mutex_lock(&mock_cu_lock);
    out->ctx = s->ctx;
    out->flags = s->flags;
    out->priority = s->priority;
    out->id = s->id;
    pthread_mutex_unlock(&mock_cu_lock);
    return CUDA_SUCCESS;
}

/* cuStreamGet<Field> and its per-thread-stream twin: check the out pointer and the stream,
 * then hand back that one field. */
#define STREAM_GETTER(name, type, field)                                \
    MOCK_EXPORT CUresult name(CUstream hStream, type *out)             \
    {                                                                   \
        struct stream_fields f;                                         \
        if (out == NULL) {                                              \
            return CUDA_ERROR_INVALID_VALUE;                            \
        }                                                               \
        CUresult r = stream_fields(hStream, &f);                        \
        if (r == CUDA_SUCCESS) {                                        \
            *out = f.field;                                             \
        }                                                               \
        return r;                                                       \
    }                                                                   \
    MOCK_ALIAS(name##_ptsz, name);

STREAM_GETTER(cuStreamGetCtx, CUcontext, ctx)
STREAM_GETTER(cuStreamGetFlags, unsigned int, flags)
STREAM_GETTER(cuStreamGetPriority, int, priority)
STREAM_GETTER(cuStreamGetId, unsigned long long, id)

MOCK_EXPORT CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device)
{
    CUcontext ctx;
    if (device == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = cuStreamGetCtx(hStream, &ctx);
    if (r == CUDA_SUCCESS) {
        *device = ctx->device;
    }
    return r;
}

MOCK_ALIAS(cuStreamGetDevice_ptsz, cuStreamGetDevice);

/* ---- events ---------------------------------------------------------------------------- */

static CUresult event_of(CUevent e, struct CUevent_st *out)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    pthread_mutex_lock(&mock_cu_lock);
    int live = mock_cu_handle_is(e, MOCK_KIND_EVENT);
    if (live) {
        *out = *e;
    }
    pthread_mutex_unlock(&mock_cu_lock);
    return live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

MOCK_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    struct CUevent_st e;
    CUresult r = mock_cu_stream_check(hStream);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    (void)Flags;
    return event_of(hEvent, &e);
}

MOCK_ALIAS(cuStreamWaitEvent_ptsz, cuStreamWaitEvent);

MOCK_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct CUctx_st *ctx;
    CUresult r = mock_cu_current(&ctx);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    unsigned int known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (phEvent == NULL || (Flags & ~known) != 0 ||
        ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct CUevent_st *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->ctx = ctx;
    e->flags = Flags;
    pthread_mutex_lock(&mock_cu_lock);
    int bad = mock_cu_handle_add(e, MOCK_KIND_EVENT);
    pthread_mutex_unlock(&mock_cu_lock);
    if (bad) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phEvent = e;
    return CUDA_SUCCESS;
}

static CUresult record(CUevent hEvent, CUstream hStream)
{
    struct CUevent_st e;
    CUresult r = event_of(hEvent, &e);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    r = mock_cu_stream_check(hStream);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_mutex_lock(&mock_cu_lock);
    if (mock_cu_handle_is(hEvent, MOCK_KIND_EVENT)) {
        hEvent->recorded = 1;
        hEvent->at = now;
    }
    pthread_mutex_unlock(&mock_cu_lock);
    return CUDA_SUCCESS;
}

MOCK_ALIAS(cuEventRecord, record);
MOCK_ALIAS(cuEventRecord_ptsz, record);

MOCK_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    if ((flags & ~(unsigned int)CU_EVENT_RECORD_EXTERNAL) != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return record(hEvent, hStream);
}

MOCK_ALIAS(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags);

MOCK_EXPORT CUresult cuEventQuery(CUevent hEvent)
{
    struct CUevent_st e;
    CUresult r = event_of(hEvent, &e);
    return r != CUDA_SUCCESS ? r : mock_cu_ctx_health(e.ctx);
}

MOCK_ALIAS(cuEventSynchronize, cuEventQuery);

static CUresult destroy_event(CUevent hEvent)
{
    return retire_and_free(hEvent, MOCK_KIND_EVENT);
}

MOCK_ALIAS(cuEventDestroy, destroy_event);
MOCK_ALIAS(cuEventDestroy_v2, destroy_event);

MOCK_EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    struct CUevent_st a, b;
    if (pMilliseconds == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = event_of(hStart, &a);
    if (r == CUDA_SUCCESS) {
        r = event_of(hEnd, &b);
    }
    if (r != CUDA_SUCCESS) {
        return r;
    }
    if ((a.flags | b.flags) & CU_EVENT_DISABLE_TIMING) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (!a.recorded || !b.recorded) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    double ms = (double)(b.at.tv_sec - a.at.tv_sec) * 1e3 + (double)(b.at.tv_nsec - a.at.tv_nsec) / 1e6;
    *pMilliseconds = (float)ms;
    return CUDA_SUCCESS;
}

MOCK_ALIAS(cuEventElapsedTime_v2, cuEventElapsedTime);

/* ---- host functions -------------------------------------------------------------------- */

MOCK_EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    CUresult r = mock_cu_stream_check(hStream);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    if (fn == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    fn(userData); /* every earlier operation on the stream is already done */
    return CUDA_SUCCESS;
}

MOCK_ALIAS(cuLaunchHostFunc_ptsz, cuLaunchHostFunc);

MOCK_EXPORT CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
                                         unsigned int flags)
{
    CUresult r = mock_cu_stream_check(hStream);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    if (callback == NULL || flags != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    callback(hStream, CUDA_SUCCESS, userData);
    return CUDA_SUCCESS;
}

MOCK_ALIAS(cuStreamAddCallback_ptsz, cuStreamAddCallback);
