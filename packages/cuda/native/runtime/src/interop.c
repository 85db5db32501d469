/*
 * The runtime's doors onto the driver and the process: driver entry points, interprocess
 * handles, the profiler switches, and the one runtime call that returns a structure.
 */
#include "rt.h"

#include <string.h>

/* Declared in cuda_profiler_api.h, which NVIDIA ships apart from the runtime headers. */
RT_EXPORT cudaError_t cudaProfilerStart(void);
RT_EXPORT cudaError_t cudaProfilerStop(void);

_Static_assert((int)cudaEnableLegacyStream == (int)CU_GET_PROC_ADDRESS_LEGACY_STREAM,
               "entry point flags");
_Static_assert((int)cudaDriverEntryPointSymbolNotFound == (int)CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
               "entry point query results");

/*
 * The driver answers by name and by the CUDA version the caller compiled against, as
 * NVIDIA's runtime asks it. A name the driver lacks is not an error of the call: the
 * function pointer is NULL and the status says so (PyTorch probes optional entry points
 * this way).
 */
static cudaError_t entry_point(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                               unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *driverStatus) {
    if (symbol == NULL || funcPtr == NULL)
        return rt_record(cudaErrorInvalidValue);
    *funcPtr = NULL;
    cudaError_t st = rt_init();
    if (st != cudaSuccess)
        return st;
    if (rt_drv.cuGetProcAddress == NULL)
        return rt_unsupported_driver("cuGetProcAddress");
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = rt_drv.cuGetProcAddress(symbol, funcPtr, (int)cudaVersion, (cuuint64_t)flags, &found);
    if (r == CUDA_ERROR_NOT_FOUND || (r == CUDA_SUCCESS && found != CU_GET_PROC_ADDRESS_SUCCESS)) {
        *funcPtr = NULL;
        if (driverStatus != NULL)
            *driverStatus = found != CU_GET_PROC_ADDRESS_SUCCESS
                                ? (enum cudaDriverEntryPointQueryResult)found
                                : cudaDriverEntryPointSymbolNotFound;
        return cudaSuccess;
    }
    if (r != CUDA_SUCCESS)
        return rt_check(r);
    if (driverStatus != NULL)
        *driverStatus = cudaDriverEntryPointSuccess;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                                              unsigned long long flags,
                                              enum cudaDriverEntryPointQueryResult *driverStatus) {
    return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

RT_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus) {
    return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus);
}

_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle), "IPC handle layout");
_Static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(CUipcEventHandle), "IPC handle layout");

RT_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr) {
    if (handle == NULL || devPtr == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuIpcGetMemHandle, (CUipcMemHandle *)(void *)handle,
                  (CUdeviceptr)(uintptr_t)devPtr);
}

RT_EXPORT cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle,
                                           unsigned int flags) {
    if (devPtr == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    CUipcMemHandle h;
    memcpy(&h, &handle, sizeof h);
    CUdeviceptr d = 0;
    cudaError_t st = RT_DRV(cuIpcOpenMemHandle, &d, h, flags);
    if (st == cudaSuccess)
        *devPtr = (void *)(uintptr_t)d;
    return st;
}

RT_EXPORT cudaError_t cudaIpcCloseMemHandle(void *devPtr) {
    RT_ENTER();
    return RT_DRV(cuIpcCloseMemHandle, (CUdeviceptr)(uintptr_t)devPtr);
}

RT_EXPORT cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event) {
    if (handle == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuIpcGetEventHandle, (CUipcEventHandle *)(void *)handle, (CUevent)event);
}

RT_EXPORT cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle) {
    if (event == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    CUipcEventHandle h;
    memcpy(&h, &handle, sizeof h);
    return RT_DRV(cuIpcOpenEventHandle, (CUevent *)event, h);
}

/* No profiling tool is attached to a mock GPU: starting and stopping collection is a no-op
 * that succeeds, as with a real runtime that has no tool attached. */
RT_EXPORT cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
RT_EXPORT cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

RT_EXPORT struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w,
                                                             enum cudaChannelFormatKind f) {
    struct cudaChannelFormatDesc desc = {x, y, z, w, f};
    return desc;
}

RT_ALIAS(cudaGetDriverEntryPoint_ptsz, cudaGetDriverEntryPoint)
RT_ALIAS(cudaGetDriverEntryPointByVersion_ptsz, cudaGetDriverEntryPointByVersion)
