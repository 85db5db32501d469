/*
 * Loading the driver, and the runtime's view of its devices and contexts.
 *
 * Like NVIDIA's runtime, this one finds the driver at run time rather than linking it: a
 * process without a driver gets cudaErrorInsufficientDriver from every call instead of
 * failing to start. libcuda.so.1 is looked up by its soname first (the container's own
 * library path, as for any CUDA program), then next to this library's directory, where
 * the package and the node's overlay both put the mock driver (`lib/libcuda.so.1` beside
 * `lib/cuda-runtime/libcudart.so.N`).
 */
#define _GNU_SOURCE
#include "rt.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rt_driver rt_drv;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static cudaError_t init_status = cudaErrorInitializationError;
static const char *init_detail;
static char init_detail_buf[512];
static int driver_version;
static int device_count;
static CUdevice *devices;

static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext *primaries;

/* The device the thread chose with cudaSetDevice (-1: none yet). */
static __thread int thread_device = -1;

static void *open_beside_self(void) {
    Dl_info info;
    if (dladdr((void *)&open_beside_self, &info) == 0 || info.dli_fname == NULL)
        return NULL;
    char path[PATH_MAX];
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash == NULL)
        return NULL;
    int dir_len = (int)(slash - info.dli_fname);
    int n = snprintf(path, sizeof path, "%.*s/../libcuda.so.1", dir_len, info.dli_fname);
    if (n < 0 || (size_t)n >= sizeof path)
        return NULL;
    return dlopen(path, RTLD_NOW);
}

static void set_init_detail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_init_detail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(init_detail_buf, sizeof init_detail_buf, fmt, ap);
    va_end(ap);
    init_detail = init_detail_buf;
}

static void load(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL)
        lib = open_beside_self();
    if (lib == NULL) {
        init_status = cudaErrorInsufficientDriver;
        set_init_detail("CUDA driver version is insufficient for CUDA runtime version: no "
                        "libcuda.so.1 could be loaded (nvml-mock's libcudart.so.%d needs the "
                        "mock driver on the library path or beside its own directory)",
                        RT_MAJOR);
        return;
    }
#define RT_DRIVER_LOOKUP(name) rt_drv.name = (__typeof__(&name))dlsym(lib, RT_STR(name));
    RT_DRIVER_FUNCTIONS(RT_DRIVER_LOOKUP)
#undef RT_DRIVER_LOOKUP
    if (rt_drv.cuDriverGetVersion == NULL || rt_drv.cuInit == NULL ||
        rt_drv.cuDeviceGetCount == NULL || rt_drv.cuDeviceGet == NULL ||
        rt_drv.cuCtxGetCurrent == NULL || rt_drv.cuCtxSetCurrent == NULL ||
        rt_drv.cuDevicePrimaryCtxRetain == NULL) {
        init_status = cudaErrorInsufficientDriver;
        set_init_detail("CUDA driver version is insufficient for CUDA runtime version: the "
                        "loaded libcuda.so.1 lacks the driver entry points a runtime starts "
                        "with (cuInit, cuDriverGetVersion, cuDeviceGet, primary contexts)");
        return;
    }
    if (rt_drv.cuDriverGetVersion(&driver_version) != CUDA_SUCCESS)
        driver_version = 0;
    if (driver_version < RT_MAJOR * 1000) {
        init_status = cudaErrorInsufficientDriver;
        set_init_detail("CUDA driver version is insufficient for CUDA runtime version: the "
                        "driver supports CUDA %d.%d, this runtime (libcudart.so.%d) needs "
                        "%d.0 or newer",
                        driver_version / 1000, (driver_version % 1000) / 10, RT_MAJOR, RT_MAJOR);
        return;
    }
    CUresult r = rt_drv.cuInit(0);
    if (r != CUDA_SUCCESS) {
        init_status = rt_from_driver(r);
        return;
    }
    r = rt_drv.cuDeviceGetCount(&device_count);
    if (r != CUDA_SUCCESS) {
        init_status = rt_from_driver(r);
        return;
    }
    devices = calloc((size_t)(device_count > 0 ? device_count : 1), sizeof *devices);
    primaries = calloc((size_t)(device_count > 0 ? device_count : 1), sizeof *primaries);
    if (devices == NULL || primaries == NULL) {
        init_status = cudaErrorMemoryAllocation;
        return;
    }
    for (int i = 0; i < device_count; i++) {
        r = rt_drv.cuDeviceGet(&devices[i], i);
        if (r != CUDA_SUCCESS) {
            init_status = rt_from_driver(r);
            return;
        }
    }
    init_status = cudaSuccess;
}

cudaError_t rt_init(void) {
    pthread_once(&init_once, load);
    if (init_status != cudaSuccess && init_detail != NULL)
        return rt_fail(init_status, "%s", init_detail);
    return init_status;
}

int rt_driver_version(void) {
    pthread_once(&init_once, load);
    return driver_version;
}

int rt_device_count(void) { return device_count; }

CUdevice rt_cu_device(int ordinal) { return devices[ordinal]; }

int rt_ordinal_of(CUdevice dev) {
    for (int i = 0; i < device_count; i++)
        if (devices[i] == dev)
            return i;
    return -1;
}

cudaError_t rt_answer_ordinal(CUdevice dev, int *device) {
    int ordinal = rt_ordinal_of(dev);
    if (ordinal < 0)
        return rt_record(cudaErrorInvalidDevice);
    *device = ordinal;
    return cudaSuccess;
}

cudaError_t rt_primary(int ordinal, CUcontext *out) {
    cudaError_t st = rt_init();
    if (st != cudaSuccess)
        return st;
    if (ordinal < 0 || ordinal >= device_count)
        return cudaErrorInvalidDevice;
    pthread_mutex_lock(&primary_lock);
    CUcontext ctx = primaries[ordinal];
    if (ctx == NULL) {
        CUresult r = rt_drv.cuDevicePrimaryCtxRetain(&ctx, devices[ordinal]);
        if (r != CUDA_SUCCESS) {
            pthread_mutex_unlock(&primary_lock);
            return rt_from_driver(r);
        }
        primaries[ordinal] = ctx;
    }
    pthread_mutex_unlock(&primary_lock);
    *out = ctx;
    return cudaSuccess;
}

void rt_primary_forget(int ordinal) {
    pthread_mutex_lock(&primary_lock);
    primaries[ordinal] = NULL;
    pthread_mutex_unlock(&primary_lock);
}

void rt_set_thread_device(int ordinal) { thread_device = ordinal; }

cudaError_t rt_context(void) {
    cudaError_t st = rt_init();
    if (st != cudaSuccess)
        return st;
    CUcontext current = NULL;
    CUresult r = rt_drv.cuCtxGetCurrent(&current);
    if (r != CUDA_SUCCESS)
        return rt_from_driver(r);
    if (current != NULL)
        return cudaSuccess;
    if (device_count == 0)
        return cudaErrorNoDevice;
    CUcontext primary;
    st = rt_primary(thread_device >= 0 ? thread_device : 0, &primary);
    if (st != cudaSuccess)
        return st;
    return rt_from_driver(rt_drv.cuCtxSetCurrent(primary));
}

cudaError_t rt_current_device(int *ordinal) {
    cudaError_t st = rt_init();
    if (st != cudaSuccess)
        return st;
    CUcontext current = NULL;
    if (rt_drv.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current != NULL &&
        rt_drv.cuCtxGetDevice != NULL) {
        CUdevice dev;
        CUresult r = rt_drv.cuCtxGetDevice(&dev);
        if (r != CUDA_SUCCESS)
            return rt_from_driver(r);
        int found = rt_ordinal_of(dev);
        if (found >= 0) {
            *ordinal = found;
            return cudaSuccess;
        }
    }
    *ordinal = thread_device >= 0 ? thread_device : 0;
    return cudaSuccess;
}

CUstream rt_stream(cudaStream_t stream) {
    if (stream == cudaStreamLegacy || stream == cudaStreamPerThread)
        return NULL;
    return (CUstream)stream;
}
