/*
 * vGPU APIs (nvml.h): the GPU's virtualization mode, the one function of the chapter that is
 * modelled (`nvidia-smi -q` prints it under GPU Virtualization Mode). It answers the state's
 * virtualization_mode (an nvmlGpuVirtualizationMode_t: 0, NONE, for a bare-metal board);
 * the rest of the chapter comes from the NOT_SUPPORTED stubs.
 */
#include "mock.h"

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *pVirtualMode)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(pVirtualMode);
    *pVirtualMode = (nvmlGpuVirtualizationMode_t)d->s.virtualization_mode;
    return NVML_SUCCESS;
}
