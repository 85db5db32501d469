/*
 * Streams, events, host callbacks and stream capture.
 *
 * Streams and events are the driver's. Stream capture (CUDA graphs) is refused when a
 * program starts it: a graph is recorded to be replayed as kernels, which never run here.
 * Everything a program asks about capture while not capturing is answered truthfully (no
 * stream is ever capturing), because allocators ask it on every allocation.
 */
#include "rt.h"

#include <stdlib.h>

static __thread enum cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;

static const char NO_CAPTURE[] =
    "operation not supported: stream capture (CUDA graphs) is not supported by nvml-mock's CUDA "
    "runtime: a graph records kernels to replay, and no kernel runs on a mock GPU";

RT_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
    if (pStream == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuStreamCreate, (CUstream *)pStream, CU_STREAM_DEFAULT);
}

RT_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
    if (pStream == NULL || (flags & ~(unsigned int)cudaStreamNonBlocking))
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuStreamCreate, (CUstream *)pStream, flags);
}

RT_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                   int priority) {
    if (pStream == NULL || (flags & ~(unsigned int)cudaStreamNonBlocking))
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuStreamCreateWithPriority, (CUstream *)pStream, flags, priority);
}

RT_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (rt_stream(stream) == NULL)
        return rt_record(cudaErrorInvalidResourceHandle);
    RT_ENTER();
    return RT_DRV(cuStreamDestroy, rt_stream(stream));
}

RT_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    RT_ENTER();
    return RT_DRV(cuStreamSynchronize, rt_stream(stream));
}

RT_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) {
    RT_ENTER();
    return RT_DRV(cuStreamQuery, rt_stream(stream));
}

RT_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                          unsigned int flags) {
    RT_ENTER();
    return RT_DRV(cuStreamWaitEvent, rt_stream(stream), (CUevent)event, flags);
}

RT_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority) {
    if (priority == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuStreamGetPriority, rt_stream(hStream), priority);
}

RT_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags) {
    if (flags == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuStreamGetFlags, rt_stream(hStream), flags);
}

RT_EXPORT cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long *streamId) {
    if (streamId == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuStreamGetId, rt_stream(hStream), streamId);
}

RT_EXPORT cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int *device) {
    if (device == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    CUstream s = rt_stream(hStream);
    if (s == NULL)
        return rt_record(rt_current_device(device));
    CUdevice dev;
    cudaError_t st = RT_DRV(cuStreamGetDevice, s, &dev);
    if (st != cudaSuccess)
        return st;
    return rt_answer_ordinal(dev, device);
}

RT_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
    if (fn == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuLaunchHostFunc, rt_stream(stream), fn, userData);
}

/* A stream callback gets the stream and a status as well: the trampoline carries them. */
struct callback {
    cudaStreamCallback_t fn;
    cudaStream_t stream;
    void *user;
};

static void run_callback(void *arg) {
    struct callback *cb = arg;
    cb->fn(cb->stream, cudaSuccess, cb->user);
    free(cb);
}

RT_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                            void *userData, unsigned int flags) {
    if (callback == NULL || flags != 0)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    struct callback *cb = malloc(sizeof *cb);
    if (cb == NULL)
        return rt_record(cudaErrorMemoryAllocation);
    cb->fn = callback;
    cb->stream = stream;
    cb->user = userData;
    cudaError_t st = RT_DRV(cuLaunchHostFunc, rt_stream(stream), run_callback, cb);
    if (st != cudaSuccess)
        free(cb);
    return st;
}

RT_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                            enum cudaStreamCaptureStatus *pCaptureStatus) {
    (void)stream;
    if (pCaptureStatus == NULL)
        return rt_record(cudaErrorInvalidValue);
    *pCaptureStatus = cudaStreamCaptureStatusNone;
    return cudaSuccess;
}

static cudaError_t capture_info(enum cudaStreamCaptureStatus *status, unsigned long long *id,
                                cudaGraph_t *graph, const cudaGraphNode_t **deps,
                                const cudaGraphEdgeData **edges, size_t *count) {
    if (status == NULL)
        return rt_record(cudaErrorInvalidValue);
    *status = cudaStreamCaptureStatusNone;
    if (id != NULL)
        *id = 0;
    if (graph != NULL)
        *graph = NULL;
    if (deps != NULL)
        *deps = NULL;
    if (edges != NULL)
        *edges = NULL;
    if (count != NULL)
        *count = 0;
    return cudaSuccess;
}

/* The capture calls with edge data are the plain names in CUDA 13 and the newest versioned
 * ones before it; the older versions CUDA 12 also exports go without edges. */
#if CUDART_VERSION >= 13000
#define CAPTURE_INFO cudaStreamGetCaptureInfo
#define UPDATE_CAPTURE_DEPENDENCIES cudaStreamUpdateCaptureDependencies
#else
#define CAPTURE_INFO cudaStreamGetCaptureInfo_v3
#define UPDATE_CAPTURE_DEPENDENCIES cudaStreamUpdateCaptureDependencies_v2

RT_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                               enum cudaStreamCaptureStatus *captureStatus_out,
                                               unsigned long long *id_out) {
    (void)stream;
    return capture_info(captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

RT_EXPORT cudaError_t cudaStreamGetCaptureInfo_v2(cudaStream_t stream,
                                                  enum cudaStreamCaptureStatus *captureStatus_out,
                                                  unsigned long long *id_out,
                                                  cudaGraph_t *graph_out,
                                                  const cudaGraphNode_t **dependencies_out,
                                                  size_t *numDependencies_out) {
    (void)stream;
    return capture_info(captureStatus_out, id_out, graph_out, dependencies_out, NULL,
                        numDependencies_out);
}

RT_EXPORT cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream,
                                                          cudaGraphNode_t *dependencies,
                                                          size_t numDependencies,
                                                          unsigned int flags) {
    (void)stream, (void)dependencies, (void)numDependencies, (void)flags;
    return rt_record(cudaErrorIllegalState);
}
#endif

RT_EXPORT cudaError_t CAPTURE_INFO(cudaStream_t stream,
                                   enum cudaStreamCaptureStatus *captureStatus_out,
                                   unsigned long long *id_out, cudaGraph_t *graph_out,
                                   const cudaGraphNode_t **dependencies_out,
                                   const cudaGraphEdgeData **edgeData_out,
                                   size_t *numDependencies_out) {
    (void)stream;
    return capture_info(captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                        numDependencies_out);
}

RT_EXPORT cudaError_t UPDATE_CAPTURE_DEPENDENCIES(cudaStream_t stream,
                                                  cudaGraphNode_t *dependencies,
                                                  const cudaGraphEdgeData *dependencyData,
                                                  size_t numDependencies, unsigned int flags) {
    (void)stream, (void)dependencies, (void)dependencyData, (void)numDependencies, (void)flags;
    return rt_record(cudaErrorIllegalState);
}

RT_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
    (void)stream, (void)mode;
    return rt_fail(cudaErrorNotSupported, "%s", NO_CAPTURE);
}

RT_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                    const cudaGraphNode_t *dependencies,
                                                    const cudaGraphEdgeData *dependencyData,
                                                    size_t numDependencies,
                                                    enum cudaStreamCaptureMode mode) {
    (void)stream, (void)graph, (void)dependencies, (void)dependencyData, (void)numDependencies,
        (void)mode;
    return rt_fail(cudaErrorNotSupported, "%s", NO_CAPTURE);
}

RT_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
    (void)stream;
    if (pGraph != NULL)
        *pGraph = NULL;
    return rt_record(cudaErrorIllegalState);
}

RT_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
    if (mode == NULL || (*mode != cudaStreamCaptureModeGlobal &&
                         *mode != cudaStreamCaptureModeThreadLocal &&
                         *mode != cudaStreamCaptureModeRelaxed))
        return rt_record(cudaErrorInvalidValue);
    enum cudaStreamCaptureMode previous = capture_mode;
    capture_mode = *mode;
    *mode = previous;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event) {
    if (event == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuEventCreate, (CUevent *)event, CU_EVENT_DEFAULT);
}

RT_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    const unsigned int known =
        cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    if (event == NULL || (flags & ~known))
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuEventCreate, (CUevent *)event, flags);
}

RT_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    RT_ENTER();
    return RT_DRV(cuEventRecord, (CUevent)event, rt_stream(stream));
}

RT_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                               unsigned int flags) {
    RT_ENTER();
    return RT_DRV(cuEventRecordWithFlags, (CUevent)event, rt_stream(stream), flags);
}

RT_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) {
    RT_ENTER();
    return RT_DRV(cuEventQuery, (CUevent)event);
}

RT_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    RT_ENTER();
    return RT_DRV(cuEventSynchronize, (CUevent)event);
}

RT_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (ms == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuEventElapsedTime, ms, (CUevent)start, (CUevent)end);
}

RT_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
    RT_ENTER();
    return RT_DRV(cuEventDestroy, (CUevent)event);
}

RT_ALIAS(cudaStreamSynchronize_ptsz, cudaStreamSynchronize)
RT_ALIAS(cudaStreamQuery_ptsz, cudaStreamQuery)
RT_ALIAS(cudaStreamWaitEvent_ptsz, cudaStreamWaitEvent)
RT_ALIAS(cudaStreamGetPriority_ptsz, cudaStreamGetPriority)
RT_ALIAS(cudaStreamGetFlags_ptsz, cudaStreamGetFlags)
RT_ALIAS(cudaStreamGetId_ptsz, cudaStreamGetId)
RT_ALIAS(cudaStreamGetDevice_ptsz, cudaStreamGetDevice)
RT_ALIAS(cudaLaunchHostFunc_ptsz, cudaLaunchHostFunc)
RT_ALIAS(cudaStreamAddCallback_ptsz, cudaStreamAddCallback)
RT_ALIAS(cudaStreamIsCapturing_ptsz, cudaStreamIsCapturing)
RT_ALIAS(cudaStreamGetCaptureInfo_ptsz, cudaStreamGetCaptureInfo)
RT_ALIAS(cudaStreamUpdateCaptureDependencies_ptsz, cudaStreamUpdateCaptureDependencies)
RT_ALIAS(cudaStreamBeginCapture_ptsz, cudaStreamBeginCapture)
RT_ALIAS(cudaStreamBeginCaptureToGraph_ptsz, cudaStreamBeginCaptureToGraph)
RT_ALIAS(cudaStreamEndCapture_ptsz, cudaStreamEndCapture)
RT_ALIAS(cudaEventRecord_ptsz, cudaEventRecord)
RT_ALIAS(cudaEventRecordWithFlags_ptsz, cudaEventRecordWithFlags)
#if CUDART_VERSION < 13000
RT_ALIAS(cudaStreamGetCaptureInfo_v2_ptsz, cudaStreamGetCaptureInfo_v2)
RT_ALIAS(cudaStreamGetCaptureInfo_v3_ptsz, cudaStreamGetCaptureInfo_v3)
RT_ALIAS(cudaStreamUpdateCaptureDependencies_v2_ptsz, cudaStreamUpdateCaptureDependencies_v2)
RT_ALIAS(cudaEventElapsedTime_v2, cudaEventElapsedTime)
#endif
