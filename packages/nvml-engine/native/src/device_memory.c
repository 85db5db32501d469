/*
 * Device Queries (nvml.h), the memory part: framebuffer and BAR1 memory, and the
 * running-process lists.
 *
 * The unversioned nvmlDeviceGetMemoryInfo keeps its 24-byte layout in which `used`
 * includes the reserved memory; _v2 reports reserved separately and checks its version
 * word. Process lists follow NVML's two-call protocol: a mock GPU runs no process, so
 * every call answers SUCCESS with a count of zero, which callers read as "no processes".
 * Confidential computing is off on every modelled board, so no memory is protected.
 */
#include "mig.h"
#include "mock.h"

#include <string.h>

_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t (v1) is 24 bytes");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t is 40 bytes");

/* Used framebuffer memory, live where set, never more than what the board leaves free
 * (the parser checks the board's own values; the live value is clamped here). */
static uint64_t used_bytes(const struct nvmlDevice_st *d)
{
    uint64_t used = live_memory_used_bytes(d);
    uint64_t room = d->s.memory_total_bytes - d->s.memory_reserved_bytes;
    return used > room ? room : used;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct mock_mig_view mig;
    nvmlReturn_t mig_rc;
    if (mock_mig_device(device, &mig, &mig_rc)) { /* a MIG device: its GPU instance's memory */
        REQUIRE_ARG(memory);
        if (mig_rc == NVML_SUCCESS) {
            memory->total = mig.memory_mib << 20;
            memory->used = 0;
            memory->free = memory->total;
        }
        return mig_rc;
    }
    GET_DEVICE(device, d);
    REQUIRE_ARG(memory);
    uint64_t used = used_bytes(d) + d->s.memory_reserved_bytes;
    memory->total = d->s.memory_total_bytes;
    memory->used = used;
    memory->free = d->s.memory_total_bytes - used;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct mock_mig_view mig;
    nvmlReturn_t mig_rc;
    if (mock_mig_device(device, &mig, &mig_rc)) {
        REQUIRE_ARG(memory);
        if (memory->version != nvmlMemory_v2) {
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        }
        if (mig_rc == NVML_SUCCESS) {
            memory->total = mig.memory_mib << 20;
            memory->reserved = 0;
            memory->used = 0;
            memory->free = memory->total;
        }
        return mig_rc;
    }
    GET_DEVICE(device, d);
    REQUIRE_ARG(memory);
    if (memory->version != nvmlMemory_v2) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    memory->total = d->s.memory_total_bytes;
    memory->reserved = d->s.memory_reserved_bytes;
    uint64_t used = used_bytes(d);
    memory->used = used;
    memory->free = d->s.memory_total_bytes - used - d->s.memory_reserved_bytes;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(bar1Memory);
    bar1Memory->bar1Total = d->s.bar1_total_bytes;
    uint64_t used = live_bar1_used_bytes(d);
    used = used > d->s.bar1_total_bytes ? d->s.bar1_total_bytes : used;
    bar1Memory->bar1Used = used;
    bar1Memory->bar1Free = d->s.bar1_total_bytes - used;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(busWidth);
    *busWidth = d->s.memory_bus_width;
    return NVML_SUCCESS;
}

/* No process runs on a mock GPU: report an empty list under the two-call protocol. */
static nvmlReturn_t empty_process_list(nvmlDevice_t device, unsigned int *infoCount, const void *infos)
{
    GET_DEVICE(device, d);
    (void)d;
    (void)infos;
    REQUIRE_ARG(infoCount);
    *infoCount = 0;
    return NVML_SUCCESS;
}

#define PROCESS_LIST(fn, type)                                                            \
    MOCK_EXPORT nvmlReturn_t fn(nvmlDevice_t device, unsigned int *infoCount, type *infos) \
    {                                                                                     \
        return empty_process_list(device, infoCount, infos);                              \
    }

PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t)

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device, nvmlProcessDetailList_t *plist)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(plist);
    if (plist->version != nvmlProcessDetailList_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    plist->numProcArrayEntries = 0;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                                         unsigned int *processSamplesCount,
                                                         unsigned long long lastSeenTimeStamp)
{
    GET_DEVICE(device, d);
    (void)d;
    (void)utilization;
    (void)lastSeenTimeStamp;
    REQUIRE_ARG(processSamplesCount);
    *processSamplesCount = 0;
    return NVML_ERROR_NOT_FOUND; /* NVML's answer when no sample is newer than the timestamp */
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                               nvmlProcessesUtilizationInfo_t *procesesUtilInfo)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(procesesUtilInfo);
    if (procesesUtilInfo->version != nvmlProcessesUtilizationInfo_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    procesesUtilInfo->processSamplesCount = 0;
    return NVML_SUCCESS;
}

/* From Ampere on (as nvml.h documents); with confidential computing off, nothing is protected. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t device, nvmlConfComputeMemSizeInfo_t *memInfo)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(memInfo);
    if (d->s.architecture < NVML_DEVICE_ARCH_AMPERE) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    memInfo->protectedMemSizeKib = 0;
    memInfo->unprotectedMemSizeKib = d->s.memory_total_bytes >> 10;
    return NVML_SUCCESS;
}
