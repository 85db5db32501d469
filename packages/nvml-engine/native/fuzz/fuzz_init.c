/*
 * libFuzzer entry for the whole init path: the input is written to a memory file that
 * MOCK_NVML_CONFIG names, nvmlInit* loads it, and when it is accepted every GPU is read
 * through the public entry points a client would use (identity, PCI, memory, fabric
 * info v1 and V, NVLink, topology, affinity, field values, clocks, power, thermal, fans,
 * ECC, retired pages, remapped rows, processes, MIG mode, lookups by UUID / bus id /
 * serial, an event set with a zero-timeout wait) before nvmlShutdown. Whatever the file
 * holds, init must return SUCCESS or one of the codes STATE-FORMAT.md documents, and
 * nvmlErrorString must say something.
 *
 * The last input byte picks the variant (so the fuzzer explores them too):
 *   bit 0  set MOCK_FABRIC_CLUSTER_UUID / MOCK_FABRIC_CLIQUE_ID (valid values)
 *   bit 1  make those values invalid instead
 *   bit 2  init with NVML_INIT_FLAG_NO_GPUS
 *   bit 7  set NVIDIA_VISIBLE_DEVICES (the visible-devices selection, visible.c) to the
 *          bytes between the input's last '#' (a comment to the state parser) and its last
 *          byte, up to 255 of them
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

/* The rest of the modelled read API, with the buffer-size protocols exercised at their edges. */
static void read_more(nvmlDevice_t dev, nvmlDevice_t first)
{
    unsigned int u = 0;
    unsigned int v = 0;
    unsigned long long ull = 0;
    unsigned int count;
    unsigned int clocks[256];
    nvmlPstates_t pstates[NVML_MAX_GPU_PERF_PSTATES];

    count = 0; /* size query, then the real call */
    if (nvmlDeviceGetSupportedMemoryClocks(dev, &count, NULL) == NVML_ERROR_INSUFFICIENT_SIZE) {
        die_if(count == 0);
    }
    count = 256;
    if (nvmlDeviceGetSupportedMemoryClocks(dev, &count, clocks) == NVML_SUCCESS) {
        die_if(count > 256);
        unsigned int mem = count > 0 ? clocks[0] : 0;
        count = 256;
        if (nvmlDeviceGetSupportedGraphicsClocks(dev, mem, &count, clocks) == NVML_SUCCESS) {
            die_if(count > 256);
        }
        count = 1;
        (void)nvmlDeviceGetSupportedGraphicsClocks(dev, mem, &count, clocks);
    }
    (void)nvmlDeviceGetSupportedPerformanceStates(dev, pstates, NVML_MAX_GPU_PERF_PSTATES);
    (void)nvmlDeviceGetSupportedPerformanceStates(dev, pstates, 1);
    nvmlPstates_t ps;
    (void)nvmlDeviceGetPerformanceState(dev, &ps);

    if (nvmlDeviceGetNumFans(dev, &count) == NVML_SUCCESS) {
        for (unsigned int fan = 0; fan <= count; fan++) {
            (void)nvmlDeviceGetFanSpeed_v2(dev, fan, &u);
            (void)nvmlDeviceGetTargetFanSpeed(dev, fan, &u);
        }
    }
    nvmlTemperature_t temp = {.version = nvmlTemperature_v1, .sensorType = NVML_TEMPERATURE_GPU};
    (void)nvmlDeviceGetTemperatureV(dev, &temp);
    for (int t = 0; t < NVML_TEMPERATURE_THRESHOLD_COUNT + 1; t++) {
        (void)nvmlDeviceGetTemperatureThreshold(dev, (nvmlTemperatureThresholds_t)t, &u);
    }
    nvmlGpuThermalSettings_t thermal;
    (void)nvmlDeviceGetThermalSettings(dev, NVML_THERMAL_TARGET_ALL, &thermal);
    nvmlMarginTemperature_t margin = {.version = nvmlMarginTemperature_v1};
    (void)nvmlDeviceGetMarginTemperature(dev, &margin);

    (void)nvmlDeviceGetPowerManagementLimitConstraints(dev, &u, &v);
    (void)nvmlDeviceGetPowerManagementLimit(dev, &u);
    (void)nvmlDeviceGetEnforcedPowerLimit(dev, &u);
    (void)nvmlDeviceGetEncoderUtilization(dev, &u, &v);
    (void)nvmlDeviceGetDecoderUtilization(dev, &u, &v);
    (void)nvmlDeviceGetCurrentClocksEventReasons(dev, &ull);
    nvmlViolationTime_t viol;
    (void)nvmlDeviceGetViolationStatus(dev, NVML_PERF_POLICY_POWER, &viol);
    for (int c = 0; c < NVML_CLOCK_COUNT; c++) {
        (void)nvmlDeviceGetMaxClockInfo(dev, (nvmlClockType_t)c, &u);
        (void)nvmlDeviceGetApplicationsClock(dev, (nvmlClockType_t)c, &u);
        (void)nvmlDeviceGetClock(dev, (nvmlClockType_t)c, NVML_CLOCK_ID_CURRENT, &u);
    }

    nvmlEnableState_t cur;
    nvmlEnableState_t pend;
    (void)nvmlDeviceGetEccMode(dev, &cur, &pend);
    (void)nvmlDeviceGetTotalEccErrors(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, &ull);
    (void)nvmlDeviceGetMemoryErrorCounter(dev, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC,
                                          NVML_MEMORY_LOCATION_DEVICE_MEMORY, &ull);
    unsigned long long addrs[128];
    unsigned long long stamps[128];
    count = 0;
    (void)nvmlDeviceGetRetiredPages_v2(dev, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, &count, NULL, NULL);
    die_if(count > 128);
    (void)nvmlDeviceGetRetiredPages_v2(dev, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, &count, addrs, stamps);
    count = 1;
    (void)nvmlDeviceGetRetiredPages_v2(dev, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, &count, addrs, stamps);
    (void)nvmlDeviceGetRetiredPagesPendingStatus(dev, &cur);
    unsigned int corr;
    unsigned int unc;
    unsigned int isPending;
    unsigned int failure;
    (void)nvmlDeviceGetRemappedRows(dev, &corr, &unc, &isPending, &failure);
    nvmlRowRemapperHistogramValues_t hist;
    (void)nvmlDeviceGetRowRemapperHistogram(dev, &hist);

    nvmlProcessInfo_t procs[4];
    count = 0;
    (void)nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, NULL);
    count = 4;
    (void)nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, procs);
    (void)nvmlDeviceGetGraphicsRunningProcesses_v3(dev, &count, procs);
    nvmlProcessDetailList_t plist = {.version = nvmlProcessDetailList_v1};
    (void)nvmlDeviceGetRunningProcessDetailList(dev, &plist);

    unsigned int mig_cur;
    unsigned int mig_pend;
    (void)nvmlDeviceGetMigMode(dev, &mig_cur, &mig_pend);
    (void)nvmlDeviceGetMaxMigDeviceCount(dev, &u);
    nvmlDeviceAttributes_t attrs;
    (void)nvmlDeviceGetAttributes_v2(dev, &attrs);
    nvmlC2cModeInfo_v1_t c2c;
    (void)nvmlDeviceGetC2cModeInfoV(dev, &c2c);
    nvmlBrandType_t brand;
    (void)nvmlDeviceGetBrand(dev, &brand);
    nvmlDeviceArchitecture_t arch;
    (void)nvmlDeviceGetArchitecture(dev, &arch);
    nvmlGpuVirtualizationMode_t virt;
    (void)nvmlDeviceGetVirtualizationMode(dev, &virt);
    nvmlComputeMode_t cmode;
    (void)nvmlDeviceGetComputeMode(dev, &cmode);
    int major;
    int minor;
    (void)nvmlDeviceGetCudaComputeCapability(dev, &major, &minor);
    (void)nvmlDeviceGetNumaNodeId(dev, &u);
    (void)nvmlDeviceGetPcieReplayCounter(dev, &u);
    (void)nvmlDeviceGetMaxPcieLinkGeneration(dev, &u);
    (void)nvmlDeviceGetCurrPcieLinkWidth(dev, &u);
    (void)nvmlDeviceGetPcieLinkMaxSpeed(dev, &u);

    for (unsigned int link = 0; link <= NVML_NVLINK_MAX_LINKS; link++) {
        nvmlIntNvLinkDeviceType_t type;
        (void)nvmlDeviceGetNvLinkRemoteDeviceType(dev, link, &type);
        (void)nvmlDeviceGetNvLinkErrorCounter(dev, link, NVML_NVLINK_ERROR_DL_CRC_FLIT, &ull);
    }
    nvmlGpuP2PStatus_t p2p;
    (void)nvmlDeviceGetP2PStatus(first, dev, NVML_P2P_CAPS_INDEX_NVLINK, &p2p);
    (void)nvmlDeviceGetP2PStatus(dev, first, NVML_P2P_CAPS_INDEX_READ, &p2p);
    int same;
    (void)nvmlDeviceOnSameBoard(first, dev, &same);
    nvmlDevice_t set[64];
    for (int level = NVML_TOPOLOGY_INTERNAL; level <= NVML_TOPOLOGY_SYSTEM; level += 10) {
        count = 0;
        (void)nvmlDeviceGetTopologyNearestGpus(dev, (nvmlGpuTopologyLevel_t)level, &count, NULL);
        die_if(count > 64);
        (void)nvmlDeviceGetTopologyNearestGpus(dev, (nvmlGpuTopologyLevel_t)level, &count, set);
    }

    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE];
    nvmlDevice_t again = NULL;
    if (nvmlDeviceGetSerial(dev, serial, sizeof(serial)) == NVML_SUCCESS) {
        (void)nvmlDeviceGetHandleBySerial(serial, &again);
    }
    nvmlUUID_t uuidv = {.version = nvmlUUID_v1, .type = NVML_UUID_TYPE_ASCII};
    if (nvmlDeviceGetUUID(dev, uuidv.value.str, sizeof(uuidv.value.str)) == NVML_SUCCESS) {
        die_if(nvmlDeviceGetHandleByUUIDV(&uuidv, &again) != NVML_SUCCESS || again != dev);
    }

    nvmlEventSet_t events = NULL;
    if (nvmlEventSetCreate(&events) == NVML_SUCCESS) {
        unsigned long long supported = 0;
        nvmlEventData_t data;
        (void)nvmlDeviceGetSupportedEventTypes(dev, &supported);
        (void)nvmlDeviceRegisterEvents(dev, supported, events);
        die_if(nvmlEventSetWait_v2(events, &data, 0) != NVML_ERROR_TIMEOUT);
        die_if(nvmlEventSetFree(events) != NVML_SUCCESS);
    }
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

    if (variant & 0x80) {
        char visible[256];
        size_t end = size - 1;
        size_t start = end;
        while (start > 0 && data[start - 1] != '#' && end - start < sizeof(visible) - 1) {
            start--;
        }
        memcpy(visible, data + start, end - start);
        visible[end - start] = '\0'; /* a NUL inside ends the value, as in a real environment */
        setenv("NVIDIA_VISIBLE_DEVICES", visible, 1);
    } else {
        unsetenv("NVIDIA_VISIBLE_DEVICES");
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
    for (unsigned int cpu = 0; cpu < 1100; cpu += 97) {
        unsigned int n = 0;
        nvmlDevice_t set[64];
        if (nvmlSystemGetTopologyGpuSet(cpu, &n, NULL) == NVML_SUCCESS && n <= 64) {
            (void)nvmlSystemGetTopologyGpuSet(cpu, &n, set);
        }
    }
    nvmlDevice_t first = NULL;
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t dev = NULL;
        die_if(nvmlDeviceGetHandleByIndex_v2(i, &dev) != NVML_SUCCESS);
        if (i == 0) {
            first = dev;
        }
        read_device(dev, first, count);
        read_more(dev, first);
    }
    die_if(nvmlShutdown() != NVML_SUCCESS);
    return 0;
}
