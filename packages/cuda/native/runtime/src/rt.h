/*
 * The runtime work-alike's shared declarations: the driver it runs on, the calling thread's
 * state (current device, last error), and how a failure is recorded.
 *
 * The library is one source tree compiled twice, against NVIDIA's published headers of
 * CUDA 12 and of CUDA 13, into libcudart.so.12 and libcudart.so.13. cuda.h is included
 * first, in its ordinary form, so that every driver name maps to the entry point a current
 * client calls (cuMemAlloc is cuMemAlloc_v2). cuda_runtime_api.h is then read in the form
 * NVIDIA's own runtime is built from (__CUDA_API_VERSION_INTERNAL): every exported name,
 * the per-thread-stream (_ptds/_ptsz) and the versioned (_v2) ones included, is declared
 * once, so the compiler checks each definition here against the published prototype.
 */
#ifndef NVML_MOCK_CUDART_RT_H
#define NVML_MOCK_CUDART_RT_H

#include <cuda.h>
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda_runtime_api.h>

#include <stddef.h>

#define RT_EXPORT __attribute__((visibility("default")))

/* The CUDA major this build implements: a driver older than it is refused. */
#define RT_MAJOR (CUDART_VERSION / 1000)

/*
 * Every driver entry point the runtime calls. DRV_NAME expands the argument before
 * stringizing it, so the name looked up is the one cuda.h maps to (cuMemAlloc_v2), and the
 * table's field has the type cuda.h declares for it.
 */
#define RT_DRIVER_FUNCTIONS(X)                                                                     \
    X(cuInit)                                                                                      \
    X(cuDriverGetVersion)                                                                          \
    X(cuGetErrorString)                                                                            \
    X(cuGetProcAddress)                                                                            \
    X(cuDeviceGetCount)                                                                            \
    X(cuDeviceGet)                                                                                 \
    X(cuDeviceGetName)                                                                             \
    X(cuDeviceGetUuid_v2)                                                                           \
    X(cuDeviceTotalMem)                                                                            \
    X(cuDeviceGetAttribute)                                                                        \
    X(cuDeviceGetPCIBusId)                                                                         \
    X(cuDeviceGetByPCIBusId)                                                                       \
    X(cuDeviceCanAccessPeer)                                                                       \
    X(cuDeviceGetP2PAttribute)                                                                     \
    X(cuDevicePrimaryCtxRetain)                                                                    \
    X(cuDevicePrimaryCtxRelease)                                                                   \
    X(cuDevicePrimaryCtxReset)                                                                     \
    X(cuDevicePrimaryCtxGetState)                                                                  \
    X(cuDevicePrimaryCtxSetFlags)                                                                  \
    X(cuCtxGetCurrent)                                                                             \
    X(cuCtxSetCurrent)                                                                             \
    X(cuCtxGetDevice)                                                                              \
    X(cuCtxSynchronize)                                                                            \
    X(cuCtxGetLimit)                                                                               \
    X(cuCtxSetLimit)                                                                               \
    X(cuCtxGetStreamPriorityRange)                                                                 \
    X(cuCtxEnablePeerAccess)                                                                       \
    X(cuCtxDisablePeerAccess)                                                                      \
    X(cuMemGetInfo)                                                                                \
    X(cuMemAlloc)                                                                                  \
    X(cuMemFree)                                                                                   \
    X(cuMemAllocManaged)                                                                           \
    X(cuMemHostAlloc)                                                                              \
    X(cuMemFreeHost)                                                                               \
    X(cuMemHostRegister)                                                                           \
    X(cuMemHostUnregister)                                                                         \
    X(cuMemHostGetDevicePointer)                                                                   \
    X(cuMemHostGetFlags)                                                                           \
    X(cuMemcpy)                                                                                    \
    X(cuMemcpyAsync)                                                                               \
    X(cuMemcpyHtoD)                                                                                \
    X(cuMemcpyDtoH)                                                                                \
    X(cuMemcpyDtoD)                                                                                \
    X(cuMemcpyHtoDAsync)                                                                           \
    X(cuMemcpyDtoHAsync)                                                                           \
    X(cuMemcpyDtoDAsync)                                                                           \
    X(cuMemcpyPeer)                                                                                \
    X(cuMemcpyPeerAsync)                                                                           \
    X(cuMemsetD8)                                                                                  \
    X(cuMemsetD8Async)                                                                             \
    X(cuPointerGetAttribute)                                                                       \
    X(cuStreamCreate)                                                                              \
    X(cuStreamCreateWithPriority)                                                                  \
    X(cuStreamDestroy)                                                                             \
    X(cuStreamSynchronize)                                                                         \
    X(cuStreamQuery)                                                                               \
    X(cuStreamWaitEvent)                                                                           \
    X(cuStreamGetPriority)                                                                         \
    X(cuStreamGetFlags)                                                                            \
    X(cuStreamGetId)                                                                               \
    X(cuStreamGetDevice)                                                                            \
    X(cuLaunchHostFunc)                                                                            \
    X(cuEventCreate)                                                                               \
    X(cuEventRecord)                                                                               \
    X(cuEventRecordWithFlags)                                                                      \
    X(cuEventQuery)                                                                                \
    X(cuEventSynchronize)                                                                          \
    X(cuEventElapsedTime)                                                                          \
    X(cuEventDestroy)                                                                              \
    X(cuLibraryLoadData)                                                                           \
    X(cuLibraryUnload)                                                                             \
    X(cuLibraryGetKernel)                                                                          \
    X(cuLaunchKernel)                                                                              \
    X(cuIpcGetMemHandle)                                                                           \
    X(cuIpcOpenMemHandle)                                                                          \
    X(cuIpcCloseMemHandle)                                                                         \
    X(cuIpcGetEventHandle)                                                                         \
    X(cuIpcOpenEventHandle)

#define RT_DRIVER_FIELD(name) __typeof__(&name) name;
struct rt_driver {
    RT_DRIVER_FUNCTIONS(RT_DRIVER_FIELD)
};
#undef RT_DRIVER_FIELD

/* The driver's entry points; a field is NULL where the loaded driver lacks the name. */
extern struct rt_driver rt_drv;

/*
 * Initialise once: load libcuda.so.1, refuse a driver older than RT_MAJOR, cuInit(0).
 * Returns the runtime error every call reports while the runtime cannot run.
 */
cudaError_t rt_init(void);
/* The driver's version (0 when no driver could be loaded). */
int rt_driver_version(void);
/* How many CUDA devices the driver shows (after rt_init succeeded). */
int rt_device_count(void);
/* The driver's handle for a runtime ordinal (checked by the caller). */
CUdevice rt_cu_device(int ordinal);
/* The runtime ordinal of a driver device handle, or -1. */
int rt_ordinal_of(CUdevice dev);
/* Answer a call that names a device with the runtime ordinal of driver device `dev`:
 * cudaErrorInvalidDevice (recorded) for one the runtime does not show. */
cudaError_t rt_answer_ordinal(CUdevice dev, int *device);

/*
 * The context the calling thread's runtime calls run in: the context current to the thread
 * if there is one (set by cudaSetDevice or by the driver API), otherwise the primary context
 * of the thread's device (0 until cudaSetDevice), retained once and made current.
 */
cudaError_t rt_context(void);
/* The primary context of `ordinal`, retained once per process. */
cudaError_t rt_primary(int ordinal, CUcontext *out);
/* The calling thread's device: that of its current context, else the one it set, else 0. */
cudaError_t rt_current_device(int *ordinal);
/* Forget the primary context of `ordinal` after a reset. */
void rt_primary_forget(int ordinal);
/* Remember the device the thread chose with cudaSetDevice. */
void rt_set_thread_device(int ordinal);

/* Record `code` as the thread's last error and return it (cudaSuccess records nothing). */
cudaError_t rt_record(cudaError_t code);
/*
 * Record a failure together with a sentence that cudaGetErrorString gives for this code on
 * this thread until the next detailed failure: the reason the mock cannot do what was asked.
 */
cudaError_t rt_fail(cudaError_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The runtime error for a driver result (a documented, explicit mapping). */
cudaError_t rt_from_driver(CUresult result);
/* rt_record(rt_from_driver(result)). */
cudaError_t rt_check(CUresult result);
/* The detailed sentence for `code` recorded on this thread, or NULL. */
const char *rt_detail_for(cudaError_t code);

/* A call the work-alike does not implement: cudaErrorNotSupported, naming the function. */
cudaError_t rt_unsupported(const char *function);

/* A runtime stream handle as the driver takes it: the default-stream handles (0, cudaStreamLegacy,
 * cudaStreamPerThread) become the driver's NULL stream of the current context. */
CUstream rt_stream(cudaStream_t stream);

/* The enter-every-call prologue: initialise, then make sure a context is current. */
#define RT_ENTER()                                                                                 \
    do {                                                                                           \
        cudaError_t rt_enter_status_ = rt_context();                                               \
        if (rt_enter_status_ != cudaSuccess)                                                       \
            return rt_record(rt_enter_status_);                                                    \
    } while (0)

/* Call a driver entry point that a loaded driver may lack. */
#define RT_DRV(name, ...)                                                                          \
    (rt_drv.name != NULL ? rt_check(rt_drv.name(__VA_ARGS__))                                      \
                         : rt_unsupported_driver(RT_STR(name)))
#define RT_STR_(x) #x
#define RT_STR(x) RT_STR_(x)
cudaError_t rt_unsupported_driver(const char *entry_point);

/*
 * Export `other_name` as another name of `target` (same prototype in the published header). The
 * per-thread-default-stream names (_ptds, _ptsz) are aliases: rt_stream hands the driver
 * its NULL stream for both default streams, and the mock driver finishes each operation
 * before the call returns, so there is no ordering between default streams to tell apart.
 */
#define RT_ALIAS(other_name, target)                                                               \
    extern __typeof__(target) other_name __attribute__((alias(#target), visibility("default")));

/* The sentence every kernel launch fails with. */
extern const char RT_NO_KERNELS[];

#endif
