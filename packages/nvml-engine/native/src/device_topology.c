/*
 * Device Queries (nvml.h), the topology and affinity part: the PCIe/NUMA path between two
 * GPUs, the nearest GPUs, P2P status, same-board, CPU and memory affinity, and the NVLink-C2C
 * mode. The links themselves (NvLink Methods) are nvlink.c's; the GPUs near a CPU
 * (nvmlSystemGetTopologyGpuSet, a System Query) are system.c's, through mock_list_devices.
 *
 * Aligned allocation (go-gpuallocator) needs nvmlDeviceGetTopologyCommonAncestor to
 * succeed for every pair (and reads each link's state and remote PCI address, nvlink.c);
 * `topo -m` adds CPU and NUMA affinity. The state gives each GPU a `gpu_group` (GPUs behind
 * one switch complex or board) and a NUMA node; the levels follow from those: same group ->
 * PXB (MULTIPLE), same NUMA node -> NODE, otherwise SYS.
 */
#include "mock.h"

static nvmlGpuTopologyLevel_t level_between(const struct nvmlDevice_st *a, const struct nvmlDevice_st *b)
{
    if (a == b) {
        return NVML_TOPOLOGY_INTERNAL;
    }
    if (a->s.gpu_group == b->s.gpu_group) {
        return NVML_TOPOLOGY_MULTIPLE;
    }
    if (a->s.numa_node == b->s.numa_node) {
        return NVML_TOPOLOGY_NODE;
    }
    return NVML_TOPOLOGY_SYSTEM;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                             nvmlGpuTopologyLevel_t *pathInfo)
{
    GET_DEVICE(device1, a);
    GET_DEVICE(device2, b);
    REQUIRE_ARG(pathInfo);
    *pathInfo = level_between(a, b);
    return NVML_SUCCESS;
}

/* NVML's count/size protocol for a list of devices (mock.h); system.c lists by CPU. */
nvmlReturn_t mock_list_devices(unsigned int *count, nvmlDevice_t *out, const struct nvmlDevice_st *self,
                               int (*pred)(const struct nvmlDevice_st *, const struct nvmlDevice_st *, unsigned long),
                               unsigned long arg)
{
    if (out == NULL && *count != 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned int n = 0;
    for (unsigned int i = 0; i < mock_device_count; i++) {
        if (pred(self, &mock_devices[i], arg)) {
            n++;
        }
    }
    if (out == NULL) {
        *count = n;
        return NVML_SUCCESS;
    }
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int j = 0;
    for (unsigned int i = 0; i < mock_device_count; i++) {
        if (pred(self, &mock_devices[i], arg)) {
            out[j++] = &mock_devices[i];
        }
    }
    *count = n;
    return NVML_SUCCESS;
}

static int within_level(const struct nvmlDevice_st *self, const struct nvmlDevice_st *other, unsigned long level)
{
    return other != self && (unsigned long)level_between(self, other) <= level;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, nvmlGpuTopologyLevel_t level,
                                                          unsigned int *count, nvmlDevice_t *deviceArray)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(count);
    switch (level) {
    case NVML_TOPOLOGY_INTERNAL:
    case NVML_TOPOLOGY_SINGLE:
    case NVML_TOPOLOGY_MULTIPLE:
    case NVML_TOPOLOGY_HOSTBRIDGE:
    case NVML_TOPOLOGY_NODE:
    case NVML_TOPOLOGY_SYSTEM: break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return mock_list_devices(count, deviceArray, d, within_level, (unsigned long)level);
}

static void copy_mask(const uint64_t *src, unsigned int words, unsigned long *dst, unsigned int size)
{
    /* unsigned long is 64-bit on the LP64 targets this library is built for */
    _Static_assert(sizeof(unsigned long) == sizeof(uint64_t), "LP64 only");
    for (unsigned int i = 0; i < size; i++) {
        dst[i] = i < words ? (unsigned long)src[i] : 0;
    }
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(cpuSet);
    if (cpuSetSize == 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    copy_mask(d->s.cpu_affinity, STATE_CPU_WORDS, cpuSet, cpuSetSize);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize,
                                                             unsigned long *cpuSet, nvmlAffinityScope_t scope)
{
    if (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET) {
        GET_DEVICE(device, d);
        (void)d;
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return nvmlDeviceGetCpuAffinity(device, cpuSetSize, cpuSet);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize,
                                                     unsigned long *nodeSet, nvmlAffinityScope_t scope)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(nodeSet);
    if (nodeSetSize == 0 || (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (d->s.numa_node < 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    uint64_t mask[STATE_CPU_WORDS] = {0};
    mask[(unsigned int)d->s.numa_node / 64] = 1ULL << ((unsigned int)d->s.numa_node % 64);
    copy_mask(mask, STATE_CPU_WORDS, nodeSet, nodeSetSize);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceOnSameBoard(nvmlDevice_t device1, nvmlDevice_t device2, int *onSameBoard)
{
    GET_DEVICE(device1, a);
    GET_DEVICE(device2, b);
    REQUIRE_ARG(onSameBoard);
    *onSameBoard = a == b || (a->s.multi_gpu_board && b->s.multi_gpu_board && a->s.board_id == b->s.board_id);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                                nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t *p2pStatus)
{
    GET_DEVICE(device1, a);
    GET_DEVICE(device2, b);
    REQUIRE_ARG(p2pStatus);
    if (a == b) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int nvlink = a->s.nvlink_count > 0 && b->s.nvlink_count > 0 && a->s.gpu_group == b->s.gpu_group;
    int pcie = level_between(a, b) <= NVML_TOPOLOGY_NODE;
    switch (p2pIndex) {
    case NVML_P2P_CAPS_INDEX_NVLINK:
        *p2pStatus = nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        break;
    case NVML_P2P_CAPS_INDEX_READ:
    case NVML_P2P_CAPS_INDEX_WRITE:
    case NVML_P2P_CAPS_INDEX_ATOMICS:
        *p2pStatus = nvlink || pcie ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
        break;
    case NVML_P2P_CAPS_INDEX_PCI:
        *p2pStatus = pcie ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
        break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

/* NVLink-C2C exists from Hopper on (disabled unless the GPU sits beside a Grace CPU); older
 * boards (A100, L40S, T4) answer NOT_SUPPORTED, as their nvidia-smi reports show. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetC2cModeInfoV(nvmlDevice_t device, nvmlC2cModeInfo_v1_t *c2cModeInfo)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(c2cModeInfo);
    if (d->s.architecture < NVML_DEVICE_ARCH_HOPPER) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    c2cModeInfo->isC2cEnabled = d->s.c2c_enabled;
    return NVML_SUCCESS;
}
