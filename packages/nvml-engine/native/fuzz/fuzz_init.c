/*
 * libFuzzer entry for the whole init path: the input is written to a memory file that
 * MOCK_NVML_CONFIG names, nvmlInit* loads it, and when it is accepted every GPU is read
 * through the public entry points a client would use (identity, PCI, memory, fabric
 * info v1 and V, NVLink, topology, affinity, field values, lookups by UUID / bus id /
 * serial) before nvmlShutdown. Whatever the file holds, init must return SUCCESS or one
 * of the codes STATE-FORMAT.md documents, and nvmlErrorString must say something.
 *
 * The last input byte picks the variant (so the fuzzer explores them too):
 *   bit 0  set MOCK_FABRIC_CLUSTER_UUID / MOCK_FABRIC_CLIQUE_ID (valid values)
 *   bit 1  make those values invalid instead
 *   bit 2  init with NVML_INIT_FLAG_NO_GPUS
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <nvml.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NEAR_MAX 64

static int state_fd = -1;

static void die_if(int cond)
{
    if (cond) {
        __builtin_trap();
    }
}

static void read_device(nvmlDevice_t dev, nvmlDevice_t first, unsigned int count)
{
    char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    nvmlDevice_t again = NULL;
    nvmlReturn_t rc;

    die_if(nvmlDeviceGetName(dev, buf, sizeof(buf)) != NVML_SUCCESS || memchr(buf, '\0', sizeof(buf)) == NULL);
    die_if(nvmlDeviceGetUUID(dev, buf, sizeof(buf)) != NVML_SUCCESS);
    die_if(nvmlDeviceGetHandleByUUID(buf, &again) != NVML_SUCCESS || again != dev);
    rc = nvmlDeviceGetSerial(dev, buf, sizeof(buf));
    die_if(rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_SUPPORTED);
    (void)nvmlDeviceGetBoardPartNumber(dev, buf, sizeof(buf));
    (void)nvmlDeviceGetVbiosVersion(dev, buf, sizeof(buf));
    (void)nvmlDeviceGetInforomImageVersion(dev, buf, sizeof(buf));
    (void)nvmlDeviceGetInforomVersion(dev, NVML_INFOROM_ECC, buf, sizeof(buf));
    /* a too-small buffer is refused, never overrun */
    (void)nvmlDeviceGetName(dev, buf, 1);

    nvmlPciInfo_t pci;
    die_if(nvmlDeviceGetPciInfo_v3(dev, &pci) != NVML_SUCCESS || memchr(pci.busId, '\0', sizeof(pci.busId)) == NULL);
    die_if(nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &again) != NVML_SUCCESS || again != dev);
    if (pci.domain <= 0xffff) { /* the 4-digit form cannot name a wider domain */
        die_if(nvmlDeviceGetHandleByPciBusId_v2(pci.busIdLegacy, &again) != NVML_SUCCESS || again != dev);
    }
    nvmlPciInfoExt_t ext = {.version = nvmlPciInfoExt_v1};
    (void)nvmlDeviceGetPciInfoExt(dev, &ext);

    nvmlMemory_t mem;
    nvmlMemory_v2_t mem2 = {.version = nvmlMemory_v2};
    die_if(nvmlDeviceGetMemoryInfo(dev, &mem) != NVML_SUCCESS || mem.used > mem.total);
    die_if(nvmlDeviceGetMemoryInfo_v2(dev, &mem2) != NVML_SUCCESS ||
           mem2.free + mem2.used + mem2.reserved != mem2.total);
    nvmlBAR1Memory_t bar1;
    die_if(nvmlDeviceGetBAR1MemoryInfo(dev, &bar1) != NVML_SUCCESS || bar1.bar1Used > bar1.bar1Total);

    nvmlGpuFabricInfo_t fab1;
    nvmlGpuFabricInfoV_t fab = {.version = nvmlGpuFabricInfo_v3};
    nvmlGpuFabricInfoV_t fab2 = {.version = nvmlGpuFabricInfo_v2};
    rc = nvmlDeviceGetGpuFabricInfo(dev, &fab1);
    die_if(rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_SUPPORTED);
    die_if(nvmlDeviceGetGpuFabricInfoV(dev, &fab) != rc);
    die_if(nvmlDeviceGetGpuFabricInfoV(dev, &fab2) != rc);

    for (unsigned int link = 0; link <= NVML_NVLINK_MAX_LINKS; link++) {
        nvmlEnableState_t on;
        unsigned int version;
        unsigned int cap;
        (void)nvmlDeviceGetNvLinkState(dev, link, &on);
        (void)nvmlDeviceGetNvLinkVersion(dev, link, &version);
        (void)nvmlDeviceGetNvLinkCapability(dev, link, NVML_NVLINK_CAP_P2P_SUPPORTED, &cap);
        (void)nvmlDeviceGetNvLinkRemotePciInfo_v2(dev, link, &pci);
    }

    unsigned long cpus[1024 / (8 * sizeof(unsigned long))];
    unsigned long nodes[2];
    (void)nvmlDeviceGetCpuAffinity(dev, sizeof(cpus) / sizeof(cpus[0]), cpus);
    (void)nvmlDeviceGetCpuAffinityWithinScope(dev, 1, cpus, NVML_AFFINITY_SCOPE_SOCKET);
    (void)nvmlDeviceGetMemoryAffinity(dev, 2, nodes, NVML_AFFINITY_SCOPE_NODE);
    nvmlGpuTopologyLevel_t level;
    (void)nvmlDeviceGetTopologyCommonAncestor(first, dev, &level);
    unsigned int near = NEAR_MAX;
    nvmlDevice_t near_devs[NEAR_MAX];
    (void)nvmlDeviceGetTopologyNearestGpus(dev, NVML_TOPOLOGY_SYSTEM, &near, near_devs);
    die_if(near > count);

    nvmlFieldValue_t values[] = {
        {.fieldId = NVML_FI_DEV_ECC_CURRENT},
        {.fieldId = NVML_FI_DEV_NVLINK_LINK_COUNT},
        {.fieldId = NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON},
        {.fieldId = NVML_FI_DEV_NVLINK_GET_STATE, .scopeId = 17},
        {.fieldId = NVML_FI_DEV_NVLINK_GET_STATE, .scopeId = 4096},
        {.fieldId = NVML_FI_DEV_POWER_INSTANT},
        {.fieldId = NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION},
        {.fieldId = NVML_FI_DEV_REMAPPED_COR},
        {.fieldId = 0x7fffffff},
    };
    die_if(nvmlDeviceGetFieldValues(dev, (int)(sizeof(values) / sizeof(values[0])), values) != NVML_SUCCESS);

    unsigned int u;
    unsigned long long ull;
    nvmlUtilization_t util;
    (void)nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &u);
    (void)nvmlDeviceGetPowerUsage(dev, &u);
    (void)nvmlDeviceGetTotalEnergyConsumption(dev, &ull);
    (void)nvmlDeviceGetClockInfo(dev, NVML_CLOCK_SM, &u);
    (void)nvmlDeviceGetUtilizationRates(dev, &util);
    (void)nvmlDeviceGetFanSpeed(dev, &u);
    unsigned int pages = 64;
    unsigned long long addrs[64];
    (void)nvmlDeviceGetRetiredPages(dev, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, &pages, addrs);
    nvmlPlatformInfo_t plat = {.version = nvmlPlatformInfo_v2};
    (void)nvmlDeviceGetPlatformInfo(dev, &plat);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    if (state_fd < 0) {
        state_fd = memfd_create("fuzz-state", 0);
        die_if(state_fd < 0);
    }
    die_if(ftruncate(state_fd, 0) != 0);
    die_if(size > 0 && pwrite(state_fd, data, size, 0) != (ssize_t)size);
    snprintf(path, sizeof(path), "/proc/self/fd/%d", state_fd);
    setenv("MOCK_NVML_CONFIG", path, 1);

    uint8_t variant = size > 0 ? data[size - 1] : 0;
    if (variant & 1) {
        setenv("MOCK_FABRIC_CLUSTER_UUID", variant & 2 ? "not-a-uuid" : "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", 1);
        setenv("MOCK_FABRIC_CLIQUE_ID", variant & 2 ? "4294967296" : "7", 1);
    } else {
        unsetenv("MOCK_FABRIC_CLUSTER_UUID");
        unsetenv("MOCK_FABRIC_CLIQUE_ID");
    }

    nvmlReturn_t rc = nvmlInitWithFlags(variant & 4 ? NVML_INIT_FLAG_NO_GPUS : 0);
    const char *msg = nvmlErrorString(rc);
    die_if(msg == NULL || msg[0] == '\0');
    if (rc != NVML_SUCCESS) {
        die_if(rc != NVML_ERROR_INVALID_STATE && rc != NVML_ERROR_DRIVER_NOT_LOADED &&
               rc != NVML_ERROR_GPU_NOT_FOUND);
        die_if(nvmlShutdown() != NVML_ERROR_UNINITIALIZED);
        return 0;
    }
    unsigned int count = 0;
    die_if(nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS || count > 64);
    char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    die_if(nvmlSystemGetDriverVersion(version, sizeof(version)) != NVML_SUCCESS);
    nvmlDevice_t first = NULL;
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t dev = NULL;
        die_if(nvmlDeviceGetHandleByIndex_v2(i, &dev) != NVML_SUCCESS);
        if (i == 0) {
            first = dev;
        }
        read_device(dev, first, count);
    }
    die_if(nvmlShutdown() != NVML_SUCCESS);
    return 0;
}
