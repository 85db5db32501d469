/*
 * Errors: the thread's last error, the driver-to-runtime mapping, names and strings.
 *
 * Driver and runtime error codes share their numbers by NVIDIA's design (CUDA_ERROR_NOT_FOUND
 * and cudaErrorSymbolNotFound are both 500, CUDA_ERROR_INVALID_CONTEXT and
 * cudaErrorDeviceUninitialized both 201), so a driver result passes through unchanged when
 * its number is a runtime code (the generated rt_error_name knows every one); the few driver
 * codes without a runtime counterpart become cudaErrorUnknown.
 *
 * cudaGetErrorString gives, for a failure this runtime explains (a launch, an unimplemented
 * call, a driver that is too old), a sentence saying why, on the thread that saw the
 * failure; PyTorch and most programs print cudaGetErrorString(cudaGetLastError()), so the
 * reason reaches the user. Other codes get the runtime's fixed strings.
 */
#include "rt.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char RT_NO_KERNELS[] =
    "operation not supported: nvml-mock's CUDA runtime runs no GPU code (a mock GPU has no "
    "multiprocessors, and a program's kernels hold no code a CPU can run), so every kernel "
    "launch fails";

static __thread cudaError_t last_error = cudaSuccess;
static __thread cudaError_t detail_code = cudaSuccess;
static __thread char detail[640];

/* Generated from the published enum cudaError (gen_errors.awk): NULL for unknown codes. */
const char *rt_error_name(cudaError_t code);

cudaError_t rt_record(cudaError_t code) {
    if (code != cudaSuccess && code != cudaErrorNotReady) {
        last_error = code;
        detail_code = cudaSuccess;
    }
    return code;
}

cudaError_t rt_fail(cudaError_t code, const char *fmt, ...) {
    rt_record(code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    detail_code = code;
    return code;
}

const char *rt_detail_for(cudaError_t code) {
    return (detail_code != cudaSuccess && detail_code == code) ? detail : NULL;
}

cudaError_t rt_from_driver(CUresult result) {
    if (result == CUDA_SUCCESS)
        return cudaSuccess;
    cudaError_t code = (cudaError_t)result;
    return rt_error_name(code) != NULL ? code : cudaErrorUnknown;
}

static const char *fixed_string(cudaError_t code);

cudaError_t rt_check(CUresult result) {
    cudaError_t code = rt_from_driver(result);
    if (code == cudaSuccess || code == cudaErrorNotReady)
        return code;
    /* The driver's own sentence, where it says more than the runtime's fixed string (the
     * mock driver names faults and the limits of a mock GPU there). */
    const char *said = NULL;
    if (rt_drv.cuGetErrorString != NULL && rt_drv.cuGetErrorString(result, &said) == CUDA_SUCCESS &&
        said != NULL) {
        const char *fixed = fixed_string(code);
        if (fixed != NULL && strcmp(fixed, said) == 0)
            return rt_record(code);
        /* a driver sentence that starts with the runtime's string extends it: give it whole */
        if (fixed != NULL && strncmp(fixed, said, strlen(fixed)) == 0)
            return rt_fail(code, "%s", said);
        return rt_fail(code, "%s (driver: %s)", fixed != NULL ? fixed : rt_error_name(code), said);
    }
    return rt_record(code);
}

cudaError_t rt_unsupported(const char *function) {
    return rt_fail(cudaErrorNotSupported,
                   "operation not supported: %s is not implemented by nvml-mock's CUDA runtime",
                   function);
}

cudaError_t rt_unsupported_driver(const char *entry_point) {
    return rt_fail(cudaErrorNotSupported,
                   "operation not supported: the loaded CUDA driver has no %s", entry_point);
}

/* The runtime's strings for the codes a program commonly meets. */
static const char *fixed_string(cudaError_t code) {
    switch (code) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorCudartUnloading: return "driver shutting down";
    case cudaErrorProfilerAlreadyStarted: return "profiler already started";
    case cudaErrorProfilerAlreadyStopped: return "profiler already stopped";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidSymbol: return "invalid device symbol";
    case cudaErrorInvalidHostPointer: return "invalid host pointer";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorStubLibrary: return "CUDA driver is a stub library";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorCallRequiresNewerDriver:
        return "API call is not supported in the installed CUDA driver";
    case cudaErrorDevicesUnavailable: return "CUDA-capable device(s) is/are busy or unavailable";
    case cudaErrorMissingConfiguration: return "__global__ function call is not configured";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidKernelImage: return "device kernel image is invalid";
    case cudaErrorDeviceUninitialized: return "invalid device context";
    case cudaErrorNoKernelImageForDevice:
        return "no kernel image is available for execution on the device";
    case cudaErrorECCUncorrectable: return "uncorrectable ECC error encountered";
    case cudaErrorUnsupportedLimit: return "limit is not supported on this architecture";
    case cudaErrorDeviceAlreadyInUse:
        return "exclusive-thread device already in use by a different thread";
    case cudaErrorPeerAccessUnsupported:
        return "peer access is not supported between these two devices";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorSymbolNotFound: return "named symbol not found";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorPeerAccessNotEnabled: return "peer access has not been enabled";
    case cudaErrorSetOnActiveProcess: return "cannot set while device is active in this process";
    case cudaErrorContextIsDestroyed: return "context is destroyed";
    case cudaErrorHostMemoryAlreadyRegistered:
        return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered:
        return "pointer does not correspond to a registered memory region";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorSystemNotReady: return "system not yet initialized";
    case cudaErrorSystemDriverMismatch:
        return "system has unsupported display driver / cuda driver combination";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorTimeout: return "wait operation timed out";
    case cudaErrorUnknown: return "unknown error";
    default: return NULL;
    }
}

RT_EXPORT const char *cudaGetErrorString(cudaError_t error) {
    const char *why = rt_detail_for(error);
    if (why != NULL)
        return why;
    const char *fixed = fixed_string(error);
    if (fixed != NULL)
        return fixed;
    const char *name = rt_error_name(error);
    return name != NULL ? name : "unrecognized error code";
}

RT_EXPORT const char *cudaGetErrorName(cudaError_t error) {
    const char *name = rt_error_name(error);
    return name != NULL ? name : "unrecognized error code";
}

RT_EXPORT cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

RT_EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }
