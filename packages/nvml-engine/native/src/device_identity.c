/*
 * Device Queries (nvml.h), the identity part: device count, handle lookup and per-device
 * identity (names, serials, PCI, PCIe link, inforom, brand, architecture, platform, modes):
 * what discovery code (device plugin, feature discovery, nvidia-ml-py scripts) reads first.
 * Also nvmlDeviceGetCapabilities (which nvml.h declares outside any chapter), the
 * answer of the generated stubs for a device (mock_stub_answer) and the bus id of a lost
 * GPU's handle (nvml_mock_device_bus_id, not in nvml.h). System versions are system.c's.
 *
 * PCI info is written in each entry point's own layout: the _v3 symbol the 68-byte struct
 * of nvml.h, the unversioned and _v2 symbols the older 52-byte struct, because callers
 * built against old headers pass the smaller buffer.
 */
#define _GNU_SOURCE
#include "mig.h"
#include "mock.h"
#include "telemetry.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t (v3) is 68 bytes");

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(deviceCount);
    *deviceCount = mock_device_count;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(device);
    if (index >= mock_device_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return mock_found(&mock_devices[index], device);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(uuid);
    REQUIRE_ARG(device);
    for (unsigned int i = 0; i < mock_device_count; i++) {
        if (strcasecmp(uuid, mock_devices[i].s.uuid) == 0) {
            return mock_found(&mock_devices[i], device);
        }
    }
    return mock_mig_by_uuid(uuid, device); /* a MIG device's MIG-<uuid> */
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const nvmlUUID_t *uuid, nvmlDevice_t *device)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(uuid);
    REQUIRE_ARG(device);
    if (uuid->version != nvmlUUID_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (uuid->type == NVML_UUID_TYPE_ASCII) {
        char s[sizeof(uuid->value.str) + 1];
        memcpy(s, uuid->value.str, sizeof(uuid->value.str));
        s[sizeof(uuid->value.str)] = '\0';
        return nvmlDeviceGetHandleByUUID(s, device);
    }
    if (uuid->type != NVML_UUID_TYPE_BINARY) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned int i = 0; i < mock_device_count; i++) {
        const char *u = mock_devices[i].s.uuid;
        uint8_t bytes[16];
        if (strncmp(u, "GPU-", 4) == 0 && state_parse_uuid16(u + 4, strlen(u + 4), bytes) == 0 &&
            memcmp(bytes, uuid->value.bytes, 16) == 0) {
            return mock_found(&mock_devices[i], device);
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(serial);
    REQUIRE_ARG(device);
    for (unsigned int i = 0; i < mock_device_count; i++) {
        if (strcmp(serial, mock_devices[i].s.serial) == 0) {
            if (mock_devices[i].s.multi_gpu_board) {
                /* NVML refuses serial lookup when several GPUs share one board serial. */
                for (unsigned int j = i + 1; j < mock_device_count; j++) {
                    if (strcmp(serial, mock_devices[j].s.serial) == 0) {
                        return NVML_ERROR_INVALID_ARGUMENT;
                    }
                }
            }
            return mock_found(&mock_devices[i], device);
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(pciBusId);
    REQUIRE_ARG(device);
    struct state_pci_addr a;
    size_t n = strnlen(pciBusId, NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE + 1);
    if (n > NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE || state_parse_bus_id(pciBusId, n, &a) != 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned int i = 0; i < mock_device_count; i++) {
        const struct state_pci_addr *b = &mock_devices[i].s.pci;
        if (a.domain == b->domain && a.bus == b->bus && a.device == b->device && a.function == b->function) {
            return mock_found(&mock_devices[i], device);
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* What a generated NOT_SUPPORTED stub of a device function answers (gen_stubs.awk): a lost
 * GPU is lost on every call, modelled or not. */
nvmlReturn_t mock_stub_answer(nvmlDevice_t device);

nvmlReturn_t mock_stub_answer(nvmlDevice_t device)
{
    const struct nvmlDevice_st *d = NULL;
    if (mock_device_any(device, &d) == NVML_SUCCESS && mock_lost(d)) {
        return NVML_ERROR_GPU_IS_LOST;
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

/*
 * Not in nvml.h: the PCI bus id (8-digit domain, as nvmlPciInfo_t.busId) of a handle, lost or
 * not. Every NVML call on a lost GPU answers NVML_ERROR_GPU_IS_LOST, GetPciInfo included, as
 * on a real driver; the real nvidia-smi still names the GPU by its bus id, which it learns
 * from the kernel driver. A tool that reports a lost GPU the same way asks here (the handle
 * lookups fill the handle of a lost GPU); on a real driver the symbol is absent.
 */
MOCK_EXPORT nvmlReturn_t nvml_mock_device_bus_id(nvmlDevice_t device, char *busId, unsigned int length);

nvmlReturn_t nvml_mock_device_bus_id(nvmlDevice_t device, char *busId, unsigned int length)
{
    const struct nvmlDevice_st *d = NULL;
    nvmlReturn_t rc = mock_device_any(device, &d);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    return mock_copy_string(busId, length, d->bus_id);
}

/*
 * Not in nvml.h either: board facts nvidia-smi -q prints that no NVML call answers (the real
 * tool reads them from the kernel driver). The GPU's part number (NOT_SUPPORTED when the
 * state has none) and the sparse operation mode (0 disabled, 1 enabled; NOT_SUPPORTED on
 * boards without it). On a real driver the symbols are absent and the work-alike prints N/A.
 */
MOCK_EXPORT nvmlReturn_t nvml_mock_device_gpu_part_number(nvmlDevice_t device, char *partNumber,
                                                          unsigned int length);
MOCK_EXPORT nvmlReturn_t nvml_mock_device_sparse_operation_mode(nvmlDevice_t device, unsigned int *mode);

nvmlReturn_t nvml_mock_device_gpu_part_number(nvmlDevice_t device, char *partNumber, unsigned int length)
{
    GET_DEVICE(device, d);
    if (d->s.gpu_part_number[0] == '\0') {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return mock_copy_string(partNumber, length, d->s.gpu_part_number);
}

nvmlReturn_t nvml_mock_device_sparse_operation_mode(nvmlDevice_t device, unsigned int *mode)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(mode);
    if (d->s.sparse_operation_mode < 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *mode = (unsigned int)d->s.sparse_operation_mode;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    struct mock_mig_view mig;
    nvmlReturn_t mig_rc;
    if (mock_mig_device(device, &mig, &mig_rc)) {
        return mig_rc != NVML_SUCCESS ? mig_rc : mock_copy_string(name, length, mig.name);
    }
    GET_DEVICE(device, d);
    return mock_copy_string(name, length, d->s.name);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct mock_mig_view mig;
    nvmlReturn_t mig_rc;
    if (mock_mig_device(device, &mig, &mig_rc)) {
        return mig_rc != NVML_SUCCESS ? mig_rc : mock_copy_string(uuid, length, mig.uuid);
    }
    GET_DEVICE(device, d);
    return mock_copy_string(uuid, length, d->s.uuid);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    GET_DEVICE(device, d);
    return mock_copy_string(serial, length, d->s.serial);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(partNumber);
    if (d->s.board_part_number[0] == '\0') {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return mock_copy_string(partNumber, length, d->s.board_part_number);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    GET_DEVICE(device, d);
    return mock_copy_string(version, length, d->s.vbios_version);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(version);
    if (d->s.inforom_image_version[0] == '\0') {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return mock_copy_string(version, length, d->s.inforom_image_version);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t device, nvmlInforomObject_t object, char *version,
                                                     unsigned int length)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(version);
    const char *v = NULL;
    switch (object) {
    case NVML_INFOROM_OEM: v = d->s.inforom_oem; break;
    case NVML_INFOROM_ECC: v = d->s.inforom_ecc; break;
    case NVML_INFOROM_POWER: v = d->s.inforom_power; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (v[0] == '\0') {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return mock_copy_string(version, length, v);
}

#define UINT_GETTER(fn, field)                                             \
    MOCK_EXPORT nvmlReturn_t fn(nvmlDevice_t device, unsigned int *out)    \
    {                                                                      \
        GET_DEVICE(device, d);                                             \
        REQUIRE_ARG(out);                                                  \
        *out = (unsigned int)(field);                                      \
        return NVML_SUCCESS;                                               \
    }

UINT_GETTER(nvmlDeviceGetIndex, d->index)
UINT_GETTER(nvmlDeviceGetMinorNumber, d->s.minor_number)
UINT_GETTER(nvmlDeviceGetBoardId, d->s.board_id)
UINT_GETTER(nvmlDeviceGetMultiGpuBoard, d->s.multi_gpu_board)
UINT_GETTER(nvmlDeviceGetModuleId, d->s.module_id)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, d->s.pcie_max_gen)
UINT_GETTER(nvmlDeviceGetGpuMaxPcieLinkGeneration, d->s.pcie_max_gen)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkWidth, d->s.pcie_max_width)
UINT_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, live_pcie_cur_gen(d))
UINT_GETTER(nvmlDeviceGetCurrPcieLinkWidth, live_pcie_cur_width(d))
UINT_GETTER(nvmlDeviceGetPcieReplayCounter, live_pcie_replay_counter(d))

/* Per-lane PCIe transfer rate by generation, in Mbps as NVML reports the link speed. */
static unsigned int pcie_speed_mbps(unsigned int gen)
{
    static const unsigned int mbps[] = {0, 2500, 5000, 8000, 16000, 32000, 64000};
    return gen < sizeof(mbps) / sizeof(mbps[0]) ? mbps[gen] : 0;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPcieLinkMaxSpeed(nvmlDevice_t device, unsigned int *maxSpeed)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(maxSpeed);
    *maxSpeed = pcie_speed_mbps(d->s.pcie_max_gen);
    return *maxSpeed ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPcieSpeed(nvmlDevice_t device, unsigned int *pcieSpeed)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(pcieSpeed);
    *pcieSpeed = pcie_speed_mbps(live_pcie_cur_gen(d));
    return *pcieSpeed ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter,
                                                     unsigned int *value)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(value);
    if (counter != NVML_PCIE_UTIL_TX_BYTES && counter != NVML_PCIE_UTIL_RX_BYTES) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    /* KB/s: 0 on an idle GPU, a share of the link's rate under a utilization pattern */
    *value = counter == NVML_PCIE_UTIL_TX_BYTES ? tele_pcie_tx_kbps(d) : tele_pcie_rx_kbps(d);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(type);
    *type = (nvmlBrandType_t)d->s.brand;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(arch);
    *arch = d->s.architecture;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(major);
    REQUIRE_ARG(minor);
    *major = d->s.cuda_cc_major;
    *minor = d->s.cuda_cc_minor;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(node);
    if (d->s.numa_node < 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *node = (unsigned int)d->s.numa_node;
    return NVML_SUCCESS;
}

/* `v` in upper-case hex, at least `width` digits; returns the end. */
static char *put_hex(char *p, uint32_t v, int width)
{
    char digits[8];
    int n = 0;
    do {
        digits[n++] = "0123456789ABCDEF"[v & 0xfu];
        v >>= 4;
    } while (v != 0);
    while (n < width) {
        digits[n++] = '0';
    }
    while (n > 0) {
        *p++ = digits[--n];
    }
    return p;
}

void mock_format_bus_id(char *out, size_t cap, const struct state_pci_addr *a, int legacy)
{
    char text[40]; /* four fields of at most 8 digits and their separators */
    char *p = put_hex(text, legacy ? a->domain & 0xffffu : a->domain, legacy ? 4 : 8);
    *p++ = ':';
    p = put_hex(p, a->bus, 2);
    *p++ = ':';
    p = put_hex(p, a->device, 2);
    *p++ = '.';
    p = put_hex(p, a->function, 1);
    size_t n = (size_t)(p - text);
    if (cap == 0) {
        return;
    }
    n = n < cap - 1 ? n : cap - 1;
    memcpy(out, text, n);
    out[n] = '\0';
}

void mock_fill_pci_addr(const struct state_pci_addr *a, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof(*pci));
    mock_format_bus_id(pci->busIdLegacy, sizeof(pci->busIdLegacy), a, 1);
    mock_format_bus_id(pci->busId, sizeof(pci->busId), a, 0);
    pci->domain = a->domain;
    pci->bus = a->bus;
    pci->device = a->device;
}

void mock_fill_pci_v3(const struct nvmlDevice_st *d, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof(*pci));
    memcpy(pci->busIdLegacy, d->bus_id_legacy, sizeof(pci->busIdLegacy));
    memcpy(pci->busId, d->bus_id, sizeof(pci->busId));
    pci->domain = d->s.pci.domain;
    pci->bus = d->s.pci.bus;
    pci->device = d->s.pci.device;
    pci->pciDeviceId = d->s.pci_device_id;
    pci->pciSubSystemId = d->s.pci_subsystem_id;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(pci);
    mock_fill_pci_v3(d, pci);
    return NVML_SUCCESS;
}

/* The pre-v3 nvmlPciInfo_t that the unversioned and _v2 symbols fill. */
struct pci_info_v2 {
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int reserved0;
    unsigned int reserved1;
    unsigned int reserved2;
    unsigned int reserved3;
};
_Static_assert(sizeof(struct pci_info_v2) == 52, "pre-v3 nvmlPciInfo_t is 52 bytes");

void mock_pci_to_v2(const nvmlPciInfo_t *pci, void *out)
{
    struct pci_info_v2 v2;
    memset(&v2, 0, sizeof(v2));
    memcpy(v2.busId, pci->busIdLegacy, sizeof(v2.busId));
    v2.domain = pci->domain;
    v2.bus = pci->bus;
    v2.device = pci->device;
    v2.pciDeviceId = pci->pciDeviceId;
    v2.pciSubSystemId = pci->pciSubSystemId;
    memcpy(out, &v2, sizeof(v2));
}

static nvmlReturn_t fill_pci_v2(nvmlDevice_t device, void *out)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(out);
    nvmlPciInfo_t full;
    mock_fill_pci_v3(d, &full);
    mock_pci_to_v2(&full, out);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return fill_pci_v2(device, pci);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return fill_pci_v2(device, pci);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(pci);
    if (pci->version != nvmlPciInfoExt_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    unsigned int version = pci->version;
    memset(pci, 0, sizeof(*pci));
    pci->version = version;
    pci->domain = d->s.pci.domain;
    pci->bus = d->s.pci.bus;
    pci->device = d->s.pci.device;
    pci->pciDeviceId = d->s.pci_device_id;
    pci->pciSubSystemId = d->s.pci_subsystem_id;
    pci->baseClass = 0x03; /* display controller */
    pci->subClass = 0x02;  /* 3D controller, as datacenter GPUs report */
    memcpy(pci->busId, d->bus_id, sizeof(pci->busId));
    return NVML_SUCCESS;
}

static void fill_attributes(const struct nvmlDevice_st *d, nvmlDeviceAttributes_t *a)
{
    memset(a, 0, sizeof(*a));
    a->multiprocessorCount = d->s.multiprocessor_count;
    a->sharedCopyEngineCount = 0;
    a->gpuInstanceSliceCount = 0;
    a->computeInstanceSliceCount = 0;
    a->memorySizeMB = d->s.memory_total_bytes >> 20;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    struct mock_mig_view mig;
    nvmlReturn_t mig_rc;
    if (mock_mig_device(device, &mig, &mig_rc)) {
        REQUIRE_ARG(attributes);
        if (mig_rc == NVML_SUCCESS) {
            attributes->multiprocessorCount = mig.sms;
            attributes->sharedCopyEngineCount = mig.copy_engines;
            attributes->sharedDecoderCount = mig.decoders;
            attributes->sharedEncoderCount = mig.encoders;
            attributes->sharedJpegCount = mig.jpegs;
            attributes->sharedOfaCount = mig.ofas;
            attributes->gpuInstanceSliceCount = mig.gi_slices;
            attributes->computeInstanceSliceCount = mig.ci_slices;
            attributes->memorySizeMB = mig.memory_mib;
        }
        return mig_rc;
    }
    GET_DEVICE(device, d);
    REQUIRE_ARG(attributes);
    if (d->s.multiprocessor_count == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    fill_attributes(d, attributes);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    return nvmlDeviceGetAttributes_v2(device, attributes);
}

/* The 8-byte InfiniBand GUID (Blackwell's length), most significant byte first. */
static void put_guid(unsigned char out[16], uint64_t guid)
{
    for (int i = 0; i < 8; i++) {
        out[i] = (unsigned char)(guid >> (56 - 8 * i));
    }
}

/* HGX baseboards and rack trays report where the GPU sits. A slot or tray number of 255 means
 * "not reported" (an HGX baseboard is in no rack slot); nvidia-smi prints N/A for it. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, nvmlPlatformInfo_t *platformInfo)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(platformInfo);
    if (!d->s.platform_supported) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (platformInfo->version == nvmlPlatformInfo_v2) {
        nvmlPlatformInfo_v2_t *p = platformInfo;
        memset(p, 0, sizeof(*p));
        p->version = nvmlPlatformInfo_v2;
        put_guid(p->ibGuid, d->s.platform_ib_guid);
        memcpy(p->chassisSerialNumber, d->s.platform_chassis_serial,
               strnlen(d->s.platform_chassis_serial, sizeof(p->chassisSerialNumber)));
        p->slotNumber = (unsigned char)d->s.platform_slot_number;
        p->trayIndex = (unsigned char)d->s.platform_tray_index;
        p->hostId = (unsigned char)d->s.platform_host_id;
        p->peerType = (unsigned char)d->s.platform_peer_type;
        p->moduleId = (unsigned char)d->s.module_id;
        return NVML_SUCCESS;
    }
    if (platformInfo->version == nvmlPlatformInfo_v1) {
        nvmlPlatformInfo_v1_t p;
        memset(&p, 0, sizeof(p));
        p.version = nvmlPlatformInfo_v1;
        put_guid(p.ibGuid, d->s.platform_ib_guid);
        p.chassisPhysicalSlotNumber = (unsigned char)d->s.platform_slot_number;
        p.computeSlotIndex = (unsigned char)d->s.platform_tray_index;
        p.nodeIndex = (unsigned char)d->s.platform_host_id;
        p.peerType = (unsigned char)d->s.platform_peer_type;
        p.moduleId = (unsigned char)d->s.module_id;
        memcpy(platformInfo, &p, sizeof(p));
        return NVML_SUCCESS;
    }
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

#define ENABLE_GETTER(fn, field)                                              \
    MOCK_EXPORT nvmlReturn_t fn(nvmlDevice_t device, nvmlEnableState_t *out)  \
    {                                                                         \
        GET_DEVICE(device, d);                                                \
        REQUIRE_ARG(out);                                                     \
        *out = (field) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;        \
        return NVML_SUCCESS;                                                  \
    }

ENABLE_GETTER(nvmlDeviceGetPersistenceMode, live_persistence_mode(d))
ENABLE_GETTER(nvmlDeviceGetDisplayMode, d->s.display_mode)
ENABLE_GETTER(nvmlDeviceGetDisplayActive, d->s.display_active)

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(mode);
    *mode = (nvmlComputeMode_t)live_compute_mode(d);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetAddressingMode(nvmlDevice_t device, nvmlDeviceAddressingMode_t *mode)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(mode);
    if (mode->version != nvmlDeviceAddressingMode_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (d->s.addressing_mode < 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    /* NONE, HMM (the kernel mirrors host page tables) or ATS (Grace: the CPU's own) */
    mode->value = (unsigned int)d->s.addressing_mode;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device)
{
    GET_DEVICE(device, d);
    return d->s.inforom_image_version[0] != '\0' ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* The last flush of the infoROM's black-box (BBX) object: when it started (microseconds since
 * the epoch) and how long it took. Boards that never report one answer NOT_SUPPORTED. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetLastBBXFlushTime(nvmlDevice_t device, unsigned long long *timestamp,
                                                       unsigned long *durationUs)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(timestamp);
    REQUIRE_ARG(durationUs);
    if (d->s.bbx_flush_time_us == 0 || d->s.inforom_image_version[0] == '\0') {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *timestamp = d->s.bbx_flush_time_us;
    *durationUs = d->s.bbx_flush_duration_us;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetBusType(nvmlDevice_t device, nvmlBusType_t *type)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(type);
    *type = NVML_BUS_TYPE_PCIE;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPowerSource(nvmlDevice_t device, nvmlPowerSource_t *powerSource)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(powerSource);
    *powerSource = NVML_POWER_SOURCE_AC;
    return NVML_SUCCESS;
}

/* GSP firmware runs on Turing and later datacenter GPUs and ships with the driver. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGspFirmwareMode(nvmlDevice_t device, unsigned int *isEnabled,
                                                      unsigned int *defaultMode)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(isEnabled);
    REQUIRE_ARG(defaultMode);
    *isEnabled = d->s.architecture >= NVML_DEVICE_ARCH_TURING;
    *defaultMode = *isEnabled;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGspFirmwareVersion(nvmlDevice_t device, char *version)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(version);
    if (d->s.architecture < NVML_DEVICE_ARCH_TURING) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return mock_copy_string(version, NVML_GSP_FIRMWARE_VERSION_BUF_SIZE, mock_system.driver_version);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPdi(nvmlDevice_t device, nvmlPdi_t *pdi)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(pdi);
    if (pdi->version != nvmlPdi_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (d->s.pdi == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    pdi->value = d->s.pdi;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetCapabilities(nvmlDevice_t device, nvmlDeviceCapabilities_t *caps)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(caps);
    if (caps->version != nvmlDeviceCapabilities_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    caps->capMask = 0; /* no extended GPU memory (EGM) */
    return NVML_SUCCESS;
}
