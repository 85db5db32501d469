/*
 * NVLink links and the PCIe/NUMA topology between GPUs.
 *
 * Aligned allocation (go-gpuallocator) needs nvmlDeviceGetTopologyCommonAncestor to
 * succeed for every pair and reads each link's state and remote PCI address; `topo -m`
 * adds CPU and NUMA affinity. The state gives each GPU a `gpu_group` (GPUs behind one
 * switch complex or board) and a NUMA node; the levels follow from those: same group ->
 * PXB (MULTIPLE), same NUMA node -> NODE, otherwise SYS.
 */
#include "mock.h"

#include <string.h>

/* NVSwitch PCI ids reported for remote switch ports (device << 16 | vendor). */
#define NVSWITCH_PCI_DEVICE_ID 0x22A310DEu

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

/* Fill `out` (capacity *count) with devices matching `pred`, NVML's count/size protocol: a
 * zero count with no array asks for the size; an array of NULL with a non-zero count is refused. */
static nvmlReturn_t list_devices(unsigned int *count, nvmlDevice_t *out, const struct nvmlDevice_st *self,
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
    return list_devices(count, deviceArray, d, within_level, (unsigned long)level);
}

static int has_cpu(const struct nvmlDevice_st *self, const struct nvmlDevice_st *other, unsigned long cpu)
{
    (void)self;
    return (other->s.cpu_affinity[cpu / 64] >> (cpu % 64)) & 1u;
}

MOCK_EXPORT nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count,
                                                     nvmlDevice_t *deviceArray)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(count);
    if (cpuNumber >= STATE_MAX_CPUS) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return list_devices(count, deviceArray, NULL, has_cpu, cpuNumber);
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

/* Validate a link index against the device's active links. */
static nvmlReturn_t check_link(const struct nvmlDevice_st *d, unsigned int link)
{
    if (d->s.nvlink_count == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (link >= d->s.nvlink_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(isActive);
    nvmlReturn_t rc = check_link(d, link);
    if (rc == NVML_SUCCESS) {
        *isActive = mock_nvlink_is_down(d, link) ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
    }
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(version);
    nvmlReturn_t rc = check_link(d, link);
    if (rc == NVML_SUCCESS) {
        *version = d->s.nvlink_version;
    }
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link,
                                                       nvmlNvLinkCapability_t capability, unsigned int *capResult)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(capResult);
    nvmlReturn_t rc = check_link(d, link);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    switch (capability) {
    case NVML_NVLINK_CAP_P2P_SUPPORTED:
    case NVML_NVLINK_CAP_P2P_ATOMICS:
    case NVML_NVLINK_CAP_VALID: *capResult = 1; break;
    case NVML_NVLINK_CAP_SYSMEM_ACCESS:
    case NVML_NVLINK_CAP_SYSMEM_ATOMICS:
    case NVML_NVLINK_CAP_SLI_BRIDGE: *capResult = 0; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

/* The remote end of `link`: the state's list, its last entry repeated for later links. */
static const struct state_pci_addr *remote_of(const struct nvmlDevice_st *d, unsigned int link)
{
    if (d->s.nvlink_remote_count == 0) {
        return NULL;
    }
    unsigned int i = link < d->s.nvlink_remote_count ? link : d->s.nvlink_remote_count - 1;
    return &d->s.nvlink_remote[i];
}

static const struct nvmlDevice_st *gpu_at(const struct state_pci_addr *a)
{
    for (unsigned int i = 0; i < mock_device_count; i++) {
        if (memcmp(&mock_devices[i].s.pci, a, sizeof(*a)) == 0) {
            return &mock_devices[i];
        }
    }
    return NULL;
}

static nvmlReturn_t remote_pci(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(pci);
    nvmlReturn_t rc = check_link(d, link);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    const struct state_pci_addr *remote = remote_of(d, link);
    if (remote == NULL) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    const struct nvmlDevice_st *peer = gpu_at(remote);
    if (peer != NULL) {
        mock_fill_pci_v3(peer, pci);
    } else {
        mock_fill_pci_addr(remote, pci);
        pci->pciDeviceId = NVSWITCH_PCI_DEVICE_ID;
    }
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    return remote_pci(device, link, pci);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    /* The unversioned symbol predates the 68-byte layout. A NULL `pci` goes through to
     * remote_pci, so it is refused in the same order as by the _v2 symbol. */
    nvmlPciInfo_t full;
    nvmlReturn_t rc = remote_pci(device, link, pci != NULL ? &full : NULL);
    if (rc == NVML_SUCCESS) {
        mock_pci_to_v2(&full, pci);
    }
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                             nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(pNvLinkDeviceType);
    nvmlReturn_t rc = check_link(d, link);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    const struct state_pci_addr *remote = remote_of(d, link);
    if (remote == NULL) {
        *pNvLinkDeviceType = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    } else {
        *pNvLinkDeviceType = gpu_at(remote) != NULL ? NVML_NVLINK_DEVICE_TYPE_GPU : NVML_NVLINK_DEVICE_TYPE_SWITCH;
    }
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                                         nvmlNvLinkErrorCounter_t counter,
                                                         unsigned long long *counterValue)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(counterValue);
    nvmlReturn_t rc = check_link(d, link);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if ((unsigned int)counter >= NVML_NVLINK_ERROR_COUNT) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *counterValue = mock_nvlink_errors(d, link, counter);
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

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkInfo(nvmlDevice_t device, nvmlNvLinkInfo_t *info)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(info);
    if (info->version != nvmlNvLinkInfo_v1 && info->version != nvmlNvLinkInfo_v2) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (d->s.nvlink_count == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (info->version == nvmlNvLinkInfo_v1) {
        nvmlNvLinkInfo_v1_t *v1 = (nvmlNvLinkInfo_v1_t *)(void *)info;
        v1->isNvleEnabled = 0;
        return NVML_SUCCESS;
    }
    unsigned int version = info->version;
    memset(info, 0, sizeof(*info));
    info->version = version;
    info->isNvleEnabled = 0; /* NVLink encryption off, no firmware entries reported */
    return NVML_SUCCESS;
}
