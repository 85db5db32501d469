/*
 * The mock CUDA driver's internals. Every public entry point is compiled against NVIDIA's
 * cuda.h (with __CUDA_API_VERSION_INTERNAL, so every versioned name the real driver exports
 * is declared: legacy, _v2.., _ptds/_ptsz); what this header adds is private.
 *
 * Devices are NVML's: at cuInit the driver loads the mock libnvidia-ml.so.1 (beside itself,
 * else the loader's path) and reads every identity fact through NVML's public API, so the
 * visible set, order, names, UUIDs and PCI ids are NVML's by construction.
 */
#ifndef MOCK_CU_H
#define MOCK_CU_H

#include <cuda.h>
#include <nvml.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define MOCK_EXPORT __attribute__((visibility("default")))

/* Export `name` as another name of `target`, a function of the same unit and type: the legacy,
 * _v2 and _ptsz spellings of one entry point are one body at one address, not copies that
 * forward to it. */
#define MOCK_ALIAS(name, target) \
    extern __typeof__(target) name __attribute__((alias(#target), visibility("default")))

/* The most CUDA devices one process sees: every GPU of a node, or every MIG device. */
#define MOCK_CU_MAX_DEVICES 512

/* NVML's entry points the driver uses, resolved once from the mock library. */
struct mock_nvml {
    void *lib;
    nvmlReturn_t (*Init)(void);
    nvmlReturn_t (*DeviceGetCount)(unsigned int *);
    nvmlReturn_t (*DeviceGetHandleByIndex)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*DeviceGetName)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*DeviceGetUUID)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*DeviceGetPciInfo)(nvmlDevice_t, nvmlPciInfo_t *);
    nvmlReturn_t (*DeviceGetCudaComputeCapability)(nvmlDevice_t, int *, int *);
    nvmlReturn_t (*DeviceGetAttributes)(nvmlDevice_t, nvmlDeviceAttributes_t *);
    nvmlReturn_t (*DeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*DeviceGetMaxClockInfo)(nvmlDevice_t, nvmlClockType_t, unsigned int *);
    nvmlReturn_t (*DeviceGetMemoryBusWidth)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*DeviceGetEccMode)(nvmlDevice_t, nvmlEnableState_t *, nvmlEnableState_t *);
    nvmlReturn_t (*DeviceGetComputeMode)(nvmlDevice_t, nvmlComputeMode_t *);
    nvmlReturn_t (*DeviceGetMultiGpuBoard)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*DeviceGetMinorNumber)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*DeviceGetMigMode)(nvmlDevice_t, unsigned int *, unsigned int *);
    nvmlReturn_t (*DeviceGetMaxMigDeviceCount)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*DeviceGetMigDeviceHandleByIndex)(nvmlDevice_t, unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*DeviceGetGpuInstanceId)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*DeviceGetComputeInstanceId)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*DeviceGetTotalEccErrors)(nvmlDevice_t, nvmlMemoryErrorType_t, nvmlEccCounterType_t,
                                            unsigned long long *);
    nvmlReturn_t (*DeviceGetComputeRunningProcesses)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
    nvmlReturn_t (*SystemGetCudaDriverVersion)(int *);
};

/* One CUDA device: a whole GPU, or a MIG device of one. */
struct mock_cu_device {
    nvmlDevice_t nvml;   /* the device itself (a MIG handle for a MIG device) */
    nvmlDevice_t parent; /* the GPU it is on (itself for a whole GPU) */
    int is_mig;
    unsigned int board_gpu; /* the GPU's minor number: its index on the node's board */
    unsigned int gpu_instance, compute_instance;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE]; /* "GPU-…" or "MIG-…", as NVML answers */
    CUuuid uuid_bytes;
    nvmlPciInfo_t pci;
    int cc_major, cc_minor;
    unsigned int sms;
    unsigned long long total_mem;
    unsigned int max_sm_clock_mhz, max_mem_clock_mhz, bus_width, multi_gpu_board;
    int ecc_enabled;
    unsigned long long ecc_uncorrected_at_init; /* volatile DBE count when the driver started */
    const struct mock_cu_profile_attrs *profile;
};

extern struct mock_nvml mock_nvml;
extern struct mock_cu_device mock_cu_devices[MOCK_CU_MAX_DEVICES];
extern unsigned int mock_cu_device_count;

/* One lock for the driver's handle registries and allocation table (never held across a
 * call into another library or into client code). */
extern pthread_mutex_t mock_cu_lock;

/* Handle kinds in the registry (handles.c): a handle is used only after the registry says it
 * is live and of its kind, so a freed, foreign or forged one is refused without being read. */
enum mock_cu_kind {
    MOCK_KIND_CONTEXT = 1,
    MOCK_KIND_STREAM,
    MOCK_KIND_EVENT,
    MOCK_KIND_MODULE,
    MOCK_KIND_FUNCTION,
    MOCK_KIND_LIBRARY,
    MOCK_KIND_KERNEL,
};
int mock_cu_handle_add(const void *handle, enum mock_cu_kind kind);
void mock_cu_handle_remove(const void *handle);
int mock_cu_handle_is(const void *handle, enum mock_cu_kind kind);
/* The first half of destroying a handle, taking mock_cu_lock itself: forget it if it is a live
 * one of `kind` (CUDA_SUCCESS: the caller frees it now), else INVALID_HANDLE with nothing
 * forgotten; the driver's own error when it is not up. */
CUresult mock_cu_handle_retire(const void *handle, enum mock_cu_kind kind);

struct CUctx_st {
    int device;
    unsigned int flags;
    int primary;
    unsigned long long id;
    CUresult sticky; /* a fault that ended this context (CUDA_SUCCESS while healthy) */
};

/* The calling thread's current context (NULL when none), and what a call that needs one
 * answers: CUDA_SUCCESS with *ctx set, CUDA_ERROR_INVALID_CONTEXT without one, or the
 * context's fault. Takes mock_cu_lock itself. */
CUresult mock_cu_current(struct CUctx_st **ctx);

/* Whether `ctx` is a live context (under mock_cu_lock). */
int mock_cu_ctx_live(const struct CUctx_st *ctx);

/* The fault check every call on a context's GPU makes: the context's sticky fault, or a new
 * one from the live layer (which then sticks). */
CUresult mock_cu_ctx_health(struct CUctx_st *ctx);

/* Whether `stream` may be used now: 0 / CU_STREAM_LEGACY / CU_STREAM_PER_THREAD, or a live
 * stream (stream.c); the stream's context's fault, if any. */
CUresult mock_cu_stream_check(CUstream stream);

/* Free every allocation of `ctx` (its destruction, or a primary context's reset). */
void mock_cu_mem_release_context(const struct CUctx_st *ctx);

/* This process's use of device `dev`, published into the live layer as its compute process
 * (publish.c); `used` is the bytes it holds there now. */
void mock_cu_publish(int dev, unsigned long long used);

/* Bytes of device `dev` this process holds that the live layer does not show (not published:
 * the live file is read-only here, or there is none), so free memory can count them. */
unsigned long long mock_cu_unpublished(int dev);

/* CUDA_SUCCESS once cuInit succeeded; its sticky failure otherwise (CUDA_ERROR_NOT_INITIALIZED before). */
CUresult mock_cu_init_state(void);

/* The device `dev` (NULL and *err set when the driver is not initialised or dev is out of range). */
const struct mock_cu_device *mock_cu_device_of(CUdevice dev, CUresult *err);

/* The error a live fault makes every call on `d` fail with now (CUDA_SUCCESS when healthy):
 * the mapping and its sources are in faults.c. */
CUresult mock_cu_device_fault(const struct mock_cu_device *d);

/* The error string of `code` (NULL for a code cuda.h does not declare). */
const char *mock_cu_error_string(CUresult code);

/* Parse CUDA_VISIBLE_DEVICES as the real driver does: fills `order` with indices into the
 * enumerated devices and returns how many are visible (entries after the first bad one are
 * dropped, as the real driver drops them). Exposed for tests through the library's own use. */
unsigned int mock_cu_visible(const char *spec, const struct mock_cu_device *all, unsigned int n, unsigned int *order);

/* One answer of cuGetProcAddress: `name` at CUDA `version`, per-thread stream or not. */
struct mock_cu_proc {
    const char *name;
    int version;
    int per_thread;
    void *fn;
};

/* What every function the driver does not model answers (the generated stubs call it). */
CUresult mock_cu_unmodelled(const char *name);

#endif
