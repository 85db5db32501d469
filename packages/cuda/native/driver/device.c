/*
 * Device queries: identity and attributes. Identity is what NVML answered at cuInit
 * (init.c); attributes NVML carries are read from the same snapshot, those it does not from
 * the profile's declared table (device_attributes.toml → attributes_gen.h); compute mode is
 * live and read through NVML on each query.
 */
#include <stdio.h>
#include <string.h>

#include "attributes_gen.h"
#include "mock_cu.h"

const struct mock_cu_device *mock_cu_device_of(CUdevice dev, CUresult *err)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        *err = state;
        return NULL;
    }
    if (dev < 0 || (unsigned int)dev >= mock_cu_device_count) {
        *err = CUDA_ERROR_INVALID_DEVICE;
        return NULL;
    }
    *err = CUDA_SUCCESS;
    return &mock_cu_devices[dev];
}

#define DEVICE_OR_RETURN(d, dev)                                                                                       \
    CUresult err_;                                                                                                     \
    const struct mock_cu_device *d = mock_cu_device_of(dev, &err_);                                                    \
    if (d == NULL) {                                                                                                   \
        return err_;                                                                                                   \
    }

MOCK_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    if (device == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (ordinal < 0 || (unsigned int)ordinal >= mock_cu_device_count) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *device = ordinal;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuDeviceGetCount(int *count)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    if (count == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *count = (int)mock_cu_device_count;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    DEVICE_OR_RETURN(d, dev);
    if (name == NULL || len <= 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    (void)snprintf(name, (size_t)len, "%s", d->name);
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    DEVICE_OR_RETURN(d, dev);
    if (uuid == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *uuid = d->uuid_bytes;
    return CUDA_SUCCESS;
}

MOCK_ALIAS(cuDeviceGetUuid_v2, cuDeviceGetUuid);

MOCK_EXPORT CUresult cuDeviceGetLuid(char *luid, unsigned int *deviceNodeMask, CUdevice dev)
{
    DEVICE_OR_RETURN(d, dev);
    (void)d;
    (void)luid;
    (void)deviceNodeMask;
    return CUDA_ERROR_NOT_SUPPORTED; /* a Windows (WDDM) fact; Linux drivers answer this too */
}

MOCK_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    DEVICE_OR_RETURN(d, dev);
    if (bytes == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *bytes = (size_t)d->total_mem;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    DEVICE_OR_RETURN(d, dev);
    if (bytes == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *bytes = d->total_mem > 0xFFFFFFFFull ? 0xFFFFFFFFu : (unsigned int)d->total_mem;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    DEVICE_OR_RETURN(d, dev);
    if (major == NULL || minor == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *major = d->cc_major;
    *minor = d->cc_minor;
    return CUDA_SUCCESS;
}

static int declared(const struct mock_cu_device *d, CUdevice_attribute attrib, long long *value)
{
    if (d->profile == NULL) {
        return 0;
    }
    for (unsigned int i = 0; i < d->profile->count; i++) {
        if (d->profile->attrs[i].attr == attrib) {
            *value = d->profile->attrs[i].value;
            return 1;
        }
    }
    return 0;
}

/* The value of `attrib` on `d`: from NVML's snapshot, live compute mode, else declared, else 0. */
static long long attribute_of(const struct mock_cu_device *d, CUdevice_attribute attrib)
{
    long long v = 0;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        return d->sms;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        return d->cc_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        return d->cc_minor;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        return (long long)d->max_sm_clock_mhz * 1000; /* kHz */
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
        return (long long)d->max_mem_clock_mhz * 1000; /* kHz */
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
        return d->bus_width;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        return d->pci.bus;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
        return d->pci.device;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
        return d->pci.domain;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID:
        return d->pci.pciDeviceId;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID:
        return d->pci.pciSubSystemId;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
        return d->ecc_enabled;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
        return d->multi_gpu_board != 0;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:
        return d->board_gpu;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: {
        nvmlComputeMode_t mode = NVML_COMPUTEMODE_DEFAULT;
        (void)mock_nvml.DeviceGetComputeMode(d->parent, &mode);
        return (long long)mode; /* NVML's and CUDA's compute mode numbers are the same */
    }
    default:
        return declared(d, attrib, &v) ? v : 0;
    }
}

MOCK_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    DEVICE_OR_RETURN(d, dev);
    if (pi == NULL || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pi = (int)attribute_of(d, attrib);
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuDeviceGetProperties(CUdevprop *prop, CUdevice dev)
{
    DEVICE_OR_RETURN(d, dev);
    if (prop == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    prop->maxThreadsPerBlock = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    prop->maxThreadsDim[0] = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
    prop->maxThreadsDim[1] = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
    prop->maxThreadsDim[2] = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
    prop->maxGridSize[0] = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
    prop->maxGridSize[1] = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
    prop->maxGridSize[2] = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
    prop->sharedMemPerBlock = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    prop->totalConstantMemory = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
    prop->SIMDWidth = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    prop->memPitch = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_MAX_PITCH);
    prop->regsPerBlock = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    prop->clockRate = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    prop->textureAlign = (int)attribute_of(d, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    DEVICE_OR_RETURN(d, dev);
    if (pciBusId == NULL || len <= 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* CUDA's form: a 4-digit domain (NVML's bus id has 8), as cudaDeviceGetPCIBusId documents */
    (void)snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.0", d->pci.domain, d->pci.bus, d->pci.device);
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    if (dev == NULL || pciBusId == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    unsigned int domain = 0, bus = 0, device = 0, function = 0;
    char tail = 0;
    int got = sscanf(pciBusId, "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &tail);
    if (got < 3 || got > 4) {
        domain = 0;
        got = sscanf(pciBusId, "%x:%x.%x%c", &bus, &device, &function, &tail);
        if (got < 2 || got > 3) {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    for (unsigned int i = 0; i < mock_cu_device_count; i++) {
        const struct mock_cu_device *d = &mock_cu_devices[i];
        if (!d->is_mig && d->pci.domain == domain && d->pci.bus == bus && d->pci.device == device) {
            *dev = (CUdevice)i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

MOCK_EXPORT CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    DEVICE_OR_RETURN(d, dev);
    CUresult err2;
    if (mock_cu_device_of(peerDev, &err2) == NULL) {
        return err2;
    }
    if (canAccessPeer == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    (void)d;
    *canAccessPeer = 0; /* peer mappings are not modelled: clients copy through the host */
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                             CUdevice dstDevice)
{
    int can = 0;
    CUresult r = cuDeviceCanAccessPeer(&can, srcDevice, dstDevice);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    if (value == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    (void)attrib;
    *value = 0;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type, CUdevice dev)
{
    DEVICE_OR_RETURN(d, dev);
    (void)d;
    (void)type;
    if (pi == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pi = 0;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidthInElements, CUarray_format format,
                                                        unsigned numChannels, CUdevice dev)
{
    DEVICE_OR_RETURN(d, dev);
    (void)d;
    (void)format;
    (void)numChannels;
    (void)maxWidthInElements;
    return CUDA_ERROR_NOT_SUPPORTED; /* textures are compute: not modelled */
}
