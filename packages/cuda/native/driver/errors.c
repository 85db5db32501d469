/*
 * cuGetErrorName / cuGetErrorString. The names are cuda.h's (generated, so clients matching
 * them see the real driver's); the strings are this driver's own and say where the mock
 * differs from a GPU, so a user reading a failure learns it came from nvml-mock.
 */
#include <stddef.h>

#include "mock_cu.h"

struct error_name {
    CUresult code;
    const char *name;
};

static const struct error_name names[] = {
#include "errors_gen.h"
};

struct error_text {
    CUresult code;
    const char *text;
};

static const struct error_text texts[] = {
    {CUDA_SUCCESS, "no error"},
    {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "out of memory (nvml-mock: the GPU's free memory as NVML reports it is used up)"},
    {CUDA_ERROR_NOT_INITIALIZED, "initialization error (cuInit has not been called)"},
    {CUDA_ERROR_DEINITIALIZED, "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE,
     "no CUDA-capable device is detected (nvml-mock: NVML shows this process no GPU, "
     "or CUDA_VISIBLE_DEVICES names none, or the mock NVML library could not be loaded or initialised)"},
    {CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "invalid device context (destroyed, foreign, or none current)"},
    {CUDA_ERROR_ECC_UNCORRECTABLE,
     "uncorrectable ECC error encountered (nvml-mock: the live layer reports a new uncorrectable error on this GPU)"},
    {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle (destroyed, foreign, or never created)"},
    {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_FAILED,
     "unspecified launch failure (nvml-mock: the GPU fell off the bus or is lost, as the live layer says)"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE,
     "CUDA-capable device(s) is/are busy or unavailable (nvml-mock: compute mode is exclusive-process and "
     "another process holds the GPU, or compute is prohibited)"},
    {CUDA_ERROR_NOT_SUPPORTED,
     "operation not supported (nvml-mock's libcuda runs no kernels and models only part of the driver API: "
     "see the nvml-mock-cuda README)"},
    {CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"},
    {CUDA_ERROR_UNKNOWN, "unknown error"},
};

const char *mock_cu_error_string(CUresult code)
{
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        if (texts[i].code == code) {
            return texts[i].text;
        }
    }
    return NULL;
}

static const char *name_of(CUresult code)
{
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (names[i].code == code) {
            return names[i].name;
        }
    }
    return NULL;
}

MOCK_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (pStr == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    const char *name = name_of(error);
    if (name == NULL) {
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pStr = name;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (pStr == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    const char *name = name_of(error);
    if (name == NULL) {
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    const char *text = mock_cu_error_string(error);
    *pStr = text != NULL ? text : name; /* the name says what the code is where no text is written */
    return CUDA_SUCCESS;
}

CUresult mock_cu_unmodelled(const char *name)
{
    (void)name;
    return CUDA_ERROR_NOT_SUPPORTED;
}
