/*
 * cuInit and the device table: the mock NVML library is loaded (beside this library, else
 * through the loader's path) and every device is read through NVML's public API once. The
 * visible set is NVML's (NVIDIA_VISIBLE_DEVICES, CDI, claims: whatever the NVML library
 * shows this process), MIG-enabled GPUs contribute their MIG devices, and CUDA_VISIBLE_DEVICES
 * is applied last, as the real driver applies it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attributes_gen.h"
#include "mock_cu.h"

struct mock_nvml mock_nvml;
struct mock_cu_device mock_cu_devices[MOCK_CU_MAX_DEVICES];
unsigned int mock_cu_device_count;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
static int init_called;

/* The mock NVML library beside this one (a driver root's usr/lib64, the overlay's lib/), else
 * whichever libnvidia-ml.so.1 the loader finds. */
static void *open_nvml(void)
{
    Dl_info info;
    if (dladdr((void *)&open_nvml, &info) != 0 && info.dli_fname != NULL) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash != NULL) {
            char path[PATH_MAX];
            int n = snprintf(path, sizeof(path), "%.*s/libnvidia-ml.so.1", (int)(slash - info.dli_fname),
                             info.dli_fname);
            if (n > 0 && (size_t)n < sizeof(path)) {
                void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
                if (lib != NULL) {
                    return lib;
                }
            }
        }
    }
    return dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
}

#define BIND(field, symbol)                                                                                            \
    do {                                                                                                               \
        *(void **)(&mock_nvml.field) = dlsym(lib, symbol);                                                             \
        if (mock_nvml.field == NULL) {                                                                                 \
            return -1;                                                                                                 \
        }                                                                                                              \
    } while (0)

static int bind_nvml(void *lib)
{
    mock_nvml.lib = lib;
    BIND(Init, "nvmlInit_v2");
    BIND(DeviceGetCount, "nvmlDeviceGetCount_v2");
    BIND(DeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2");
    BIND(DeviceGetName, "nvmlDeviceGetName");
    BIND(DeviceGetUUID, "nvmlDeviceGetUUID");
    BIND(DeviceGetPciInfo, "nvmlDeviceGetPciInfo_v3");
    BIND(DeviceGetCudaComputeCapability, "nvmlDeviceGetCudaComputeCapability");
    BIND(DeviceGetAttributes, "nvmlDeviceGetAttributes_v2");
    BIND(DeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo");
    BIND(DeviceGetMaxClockInfo, "nvmlDeviceGetMaxClockInfo");
    BIND(DeviceGetMemoryBusWidth, "nvmlDeviceGetMemoryBusWidth");
    BIND(DeviceGetEccMode, "nvmlDeviceGetEccMode");
    BIND(DeviceGetComputeMode, "nvmlDeviceGetComputeMode");
    BIND(DeviceGetMultiGpuBoard, "nvmlDeviceGetMultiGpuBoard");
    BIND(DeviceGetMinorNumber, "nvmlDeviceGetMinorNumber");
    BIND(DeviceGetMigMode, "nvmlDeviceGetMigMode");
    BIND(DeviceGetMaxMigDeviceCount, "nvmlDeviceGetMaxMigDeviceCount");
    BIND(DeviceGetMigDeviceHandleByIndex, "nvmlDeviceGetMigDeviceHandleByIndex");
    BIND(DeviceGetGpuInstanceId, "nvmlDeviceGetGpuInstanceId");
    BIND(DeviceGetComputeInstanceId, "nvmlDeviceGetComputeInstanceId");
    BIND(DeviceGetTotalEccErrors, "nvmlDeviceGetTotalEccErrors");
    BIND(DeviceGetComputeRunningProcesses, "nvmlDeviceGetComputeRunningProcesses_v3");
    BIND(SystemGetCudaDriverVersion, "nvmlSystemGetCudaDriverVersion_v2");
    return 0;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* The 16 bytes of "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (or MIG-…): CUuuid as the real
 * driver fills it. Returns -1 for text that is not such a UUID. */
static int uuid_bytes(const char *text, CUuuid *out)
{
    const char *p = strchr(text, '-');
    if (p == NULL) {
        return -1;
    }
    p++;
    unsigned int n = 0;
    for (; *p != '\0' && n < 16; p++) {
        if (*p == '-') {
            continue;
        }
        int hi = hex_digit(p[0]);
        int lo = hex_digit(p[1]);
        if (hi < 0 || lo < 0) {
            return -1;
        }
        out->bytes[n++] = (char)(hi << 4 | lo);
        p++;
    }
    return n == 16 ? 0 : -1;
}

static const struct mock_cu_profile_attrs *profile_of(unsigned int pci_device_id)
{
    for (size_t i = 0; i < sizeof(mock_cu_profiles) / sizeof(mock_cu_profiles[0]); i++) {
        if (mock_cu_profiles[i].pci_device_id == pci_device_id) {
            return &mock_cu_profiles[i];
        }
    }
    return NULL;
}

/* Fill `d` from NVML for device `h` on GPU `parent` (the same handle for a whole GPU). */
static int read_device(struct mock_cu_device *d, nvmlDevice_t h, nvmlDevice_t parent, int is_mig)
{
    memset(d, 0, sizeof(*d));
    d->nvml = h;
    d->parent = parent;
    d->is_mig = is_mig;
    if (mock_nvml.DeviceGetName(h, d->name, sizeof(d->name)) != NVML_SUCCESS ||
        mock_nvml.DeviceGetUUID(h, d->uuid, sizeof(d->uuid)) != NVML_SUCCESS || uuid_bytes(d->uuid, &d->uuid_bytes) != 0 ||
        mock_nvml.DeviceGetPciInfo(parent, &d->pci) != NVML_SUCCESS ||
        mock_nvml.DeviceGetCudaComputeCapability(parent, &d->cc_major, &d->cc_minor) != NVML_SUCCESS ||
        mock_nvml.DeviceGetMinorNumber(parent, &d->board_gpu) != NVML_SUCCESS) {
        return -1;
    }
    nvmlMemory_t mem;
    if (mock_nvml.DeviceGetMemoryInfo(h, &mem) != NVML_SUCCESS) {
        return -1;
    }
    d->total_mem = mem.total;
    nvmlDeviceAttributes_t attrs;
    if (mock_nvml.DeviceGetAttributes(h, &attrs) == NVML_SUCCESS) {
        d->sms = attrs.multiprocessorCount;
    }
    if (is_mig) {
        (void)mock_nvml.DeviceGetGpuInstanceId(h, &d->gpu_instance);
        (void)mock_nvml.DeviceGetComputeInstanceId(h, &d->compute_instance);
    }
    (void)mock_nvml.DeviceGetMaxClockInfo(parent, NVML_CLOCK_SM, &d->max_sm_clock_mhz);
    (void)mock_nvml.DeviceGetMaxClockInfo(parent, NVML_CLOCK_MEM, &d->max_mem_clock_mhz);
    (void)mock_nvml.DeviceGetMemoryBusWidth(parent, &d->bus_width);
    (void)mock_nvml.DeviceGetMultiGpuBoard(parent, &d->multi_gpu_board);
    nvmlEnableState_t cur, pending;
    if (mock_nvml.DeviceGetEccMode(parent, &cur, &pending) == NVML_SUCCESS) {
        d->ecc_enabled = cur == NVML_FEATURE_ENABLED;
    }
    (void)mock_nvml.DeviceGetTotalEccErrors(parent, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC,
                                            &d->ecc_uncorrected_at_init);
    d->profile = profile_of(d->pci.pciDeviceId);
    return 0;
}

/* Every device NVML shows, in its order: a GPU in MIG mode as its MIG devices. */
static unsigned int enumerate(struct mock_cu_device *all, unsigned int max)
{
    unsigned int count = 0;
    if (mock_nvml.DeviceGetCount(&count) != NVML_SUCCESS) {
        return 0;
    }
    unsigned int n = 0;
    for (unsigned int i = 0; i < count && n < max; i++) {
        nvmlDevice_t gpu;
        if (mock_nvml.DeviceGetHandleByIndex(i, &gpu) != NVML_SUCCESS) {
            continue;
        }
        unsigned int mig = 0, mig_pending = 0;
        if (mock_nvml.DeviceGetMigMode(gpu, &mig, &mig_pending) == NVML_SUCCESS && mig == NVML_DEVICE_MIG_ENABLE) {
            unsigned int slots = 0;
            (void)mock_nvml.DeviceGetMaxMigDeviceCount(gpu, &slots);
            for (unsigned int m = 0; m < slots && n < max; m++) {
                nvmlDevice_t h;
                if (mock_nvml.DeviceGetMigDeviceHandleByIndex(gpu, m, &h) == NVML_SUCCESS &&
                    read_device(&all[n], h, gpu, 1) == 0) {
                    n++;
                }
            }
            continue;
        }
        if (read_device(&all[n], gpu, gpu, 0) == 0) {
            n++;
        }
    }
    return n;
}

/* Which enumerated device one CUDA_VISIBLE_DEVICES entry names: an index, a GPU UUID or a
 * unique prefix of one ("GPU-8a3c"), a MIG UUID; -1 for anything else. */
static int entry_device(const char *entry, size_t len, const struct mock_cu_device *all, unsigned int n)
{
    if (len == 0) {
        return -1;
    }
    if (entry[0] >= '0' && entry[0] <= '9') {
        unsigned long v = 0;
        for (size_t i = 0; i < len; i++) {
            if (entry[i] < '0' || entry[i] > '9' || v > (unsigned long)INT_MAX) {
                return -1;
            }
            v = v * 10u + (unsigned long)(entry[i] - '0');
        }
        return v < n ? (int)v : -1;
    }
    if (len < 5 || (strncmp(entry, "GPU-", 4) != 0 && strncmp(entry, "MIG-", 4) != 0)) {
        return -1;
    }
    int found = -1;
    for (unsigned int i = 0; i < n; i++) {
        const char *u = all[i].uuid;
        /* a GPU UUID names a whole GPU; a MIG UUID its MIG device */
        if (strlen(u) >= len && strncmp(u, entry, len) == 0) {
            if (found >= 0) {
                return -1; /* an ambiguous prefix names no device */
            }
            found = (int)i;
        }
    }
    return found;
}

unsigned int mock_cu_visible(const char *spec, const struct mock_cu_device *all, unsigned int n, unsigned int *order)
{
    if (spec == NULL) {
        for (unsigned int i = 0; i < n; i++) {
            order[i] = i;
        }
        return n;
    }
    unsigned int count = 0;
    const char *p = spec;
    while (*p != '\0' && count < n) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        while (len > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) {
            len--;
        }
        int dev = entry_device(p, len, all, n);
        if (dev < 0) {
            break; /* the first bad entry ends the list, as with the real driver */
        }
        for (unsigned int i = 0; i < count; i++) {
            if (order[i] == (unsigned int)dev) {
                dev = -1;
            }
        }
        if (dev < 0) {
            break; /* a device named twice ends the list too */
        }
        order[count++] = (unsigned int)dev;
        if (end == NULL) {
            break;
        }
        p = end + 1;
    }
    return count;
}

static struct mock_cu_device enumerated[MOCK_CU_MAX_DEVICES];

static void init_once_fn(void)
{
    void *lib = open_nvml();
    if (lib == NULL || bind_nvml(lib) != 0 || mock_nvml.Init() != NVML_SUCCESS) {
        init_result = CUDA_ERROR_NO_DEVICE;
        return;
    }
    unsigned int n = enumerate(enumerated, MOCK_CU_MAX_DEVICES);
    static unsigned int order[MOCK_CU_MAX_DEVICES];
    unsigned int visible = mock_cu_visible(getenv("CUDA_VISIBLE_DEVICES"), enumerated, n, order);
    for (unsigned int i = 0; i < visible; i++) {
        mock_cu_devices[i] = enumerated[order[i]];
    }
    mock_cu_device_count = visible;
    init_result = visible > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

MOCK_EXPORT CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    (void)pthread_once(&init_once, init_once_fn);
    __atomic_store_n(&init_called, 1, __ATOMIC_RELEASE);
    return init_result;
}

CUresult mock_cu_init_state(void)
{
    if (!__atomic_load_n(&init_called, __ATOMIC_ACQUIRE)) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    return init_result;
}

MOCK_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* The driver's CUDA version is the board's (nvidia-smi's "CUDA Version"): NVML answers it
     * from the same declaration, so the two never disagree. Without NVML, this release's. */
    (void)pthread_once(&init_once, init_once_fn);
    int v = 0;
    if (mock_nvml.SystemGetCudaDriverVersion == NULL || mock_nvml.SystemGetCudaDriverVersion(&v) != NVML_SUCCESS) {
        v = CUDA_VERSION / 1000 * 1000;
    }
    *driverVersion = v;
    return CUDA_SUCCESS;
}
