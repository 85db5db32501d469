/*
 * Multi Instance GPU Management (nvml.h): MIG mode and MIG device handles.
 *
 * No modelled board has MIG enabled. A MIG-capable board (mig_capable) answers mode DISABLE,
 * current and pending, and no MIG device; any other board answers NOT_SUPPORTED to those
 * queries. Every handle this library gives out is a whole GPU, so nvmlDeviceIsMigDeviceHandle
 * says 0 and nvmlDeviceGetDeviceHandleFromMigDeviceHandle refuses it.
 */
#include "mock.h"

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(currentMode);
    REQUIRE_ARG(pendingMode);
    if (!d->s.mig_capable) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *currentMode = NVML_DEVICE_MIG_DISABLE;
    *pendingMode = NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(isMigDevice);
    *isMigDevice = 0;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(count);
    if (!d->s.mig_capable) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *count = 0; /* MIG is disabled, so no MIG device exists */
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                             nvmlDevice_t *migDevice)
{
    GET_DEVICE(device, d);
    (void)index;
    REQUIRE_ARG(migDevice);
    return d->s.mig_capable ? NVML_ERROR_NOT_FOUND : NVML_ERROR_NOT_SUPPORTED;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    GET_DEVICE(migDevice, d);
    (void)d;
    REQUIRE_ARG(device);
    return NVML_ERROR_INVALID_ARGUMENT; /* not a MIG device handle */
}
