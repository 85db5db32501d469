/*
 * GPU code: registration of a program's kernels and device variables, and their launches.
 *
 * A program built with nvcc registers each of its fat binaries, kernels and device
 * variables from static constructors, before main (PyTorch: tens of thousands, when its
 * libraries load). Registration always succeeds and is remembered: the names are real and
 * serve cudaFuncGetName, the refusal messages and the "is this a kernel at all" checks.
 * Nothing here runs GPU code: PyTorch's fat binaries hold machine code for GPUs only, and a
 * mock GPU has no multiprocessors, so every launch fails with cudaErrorNotSupported and a
 * sentence naming the kernel, and every query whose answer lives in the GPU code (a
 * kernel's registers, occupancy, a device variable's storage) fails the same way.
 */
#include "rt.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Not in the public headers: the 13.x compiler's launch path (crt/device_functions.h). */
RT_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *function);
RT_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                         void **args, size_t sharedMem, cudaStream_t stream);
RT_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                              void **args, size_t sharedMem, cudaStream_t stream);
/* The registration interface nvcc's generated code calls (crt/host_runtime.h). */
RT_EXPORT void **__cudaRegisterFatBinary(void *fatCubin);
RT_EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
RT_EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle);
RT_EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                      const char *deviceName, int thread_limit, uint3 *tid,
                                      uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
RT_EXPORT void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                 const char *deviceName, int ext, size_t size, int constant,
                                 int global);
RT_EXPORT void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
                                        char *deviceAddress, const char *deviceName, int ext,
                                        size_t size, int constant, int global);
RT_EXPORT char __cudaInitModule(void **fatCubinHandle);
RT_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                               struct CUstream_st *stream);
RT_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                                 void *stream);

enum entry_kind { ENTRY_KERNEL, ENTRY_VARIABLE, ENTRY_LIBRARY_KERNEL };

struct entry {
    enum entry_kind kind;
    const void *host;   /* the host-side address the program names it by */
    const char *name;   /* the device-side name */
    size_t size;        /* variables: their size in bytes */
    int handle_indexed; /* the entry's own address is a key too (a kernel handle) */
    struct module *module;
    struct entry *next; /* in its module */
};

struct module {
    void *fatbin; /* first: the handle given out is the address of this field */
    struct entry *entries;
};

/* An open-addressing table from address to entry: host functions, host variables, and
 * the kernel handles given out. Tombstones keep probe chains whole after a removal. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot {
    const void *key;
    struct entry *value;
} *slots;
static size_t capacity, used;
static struct entry tombstone;

static size_t hash(const void *key) {
    uint64_t x = (uint64_t)(uintptr_t)key;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

static int insert_locked(const void *key, struct entry *value);

static int grow_locked(void) {
    size_t old_capacity = capacity;
    struct slot *old = slots;
    size_t next = capacity ? capacity * 2 : 4096;
    struct slot *fresh = calloc(next, sizeof *fresh);
    if (fresh == NULL)
        return -1;
    slots = fresh;
    capacity = next;
    used = 0;
    for (size_t i = 0; i < old_capacity; i++)
        if (old[i].key != NULL && old[i].value != &tombstone)
            insert_locked(old[i].key, old[i].value);
    free(old);
    return 0;
}

static int insert_locked(const void *key, struct entry *value) {
    if ((used + 1) * 2 > capacity && grow_locked() != 0)
        return -1;
    size_t mask = capacity - 1;
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
        if (slots[i].key == NULL || slots[i].key == key) {
            if (slots[i].key == NULL)
                used++;
            slots[i].key = key;
            slots[i].value = value;
            return 0;
        }
    }
}

static struct slot *find_locked(const void *key) {
    if (capacity == 0 || key == NULL)
        return NULL;
    size_t mask = capacity - 1;
    for (size_t i = hash(key) & mask; slots[i].key != NULL; i = (i + 1) & mask)
        if (slots[i].key == key)
            return slots[i].value == &tombstone ? NULL : &slots[i];
    return NULL;
}

static struct entry *lookup(const void *key) {
    pthread_mutex_lock(&lock);
    struct slot *s = find_locked(key);
    struct entry *e = s != NULL ? s->value : NULL;
    pthread_mutex_unlock(&lock);
    return e;
}

static void add(struct module *module, enum entry_kind kind, const void *host, const char *name,
                size_t size) {
    struct entry *e = calloc(1, sizeof *e);
    if (e == NULL)
        return;
    e->kind = kind;
    e->host = host;
    e->name = name;
    e->size = size;
    e->module = module;
    pthread_mutex_lock(&lock);
    if (insert_locked(host, e) != 0) {
        pthread_mutex_unlock(&lock);
        free(e);
        return;
    }
    if (module != NULL) {
        e->next = module->entries;
        module->entries = e;
    }
    pthread_mutex_unlock(&lock);
}

/* The kernel a launch names: a registered host function, or a handle this runtime gave out. */
static struct entry *kernel_of(const void *func) {
    struct entry *e = lookup(func);
    return e != NULL && e->kind != ENTRY_VARIABLE ? e : NULL;
}

RT_EXPORT void **__cudaRegisterFatBinary(void *fatCubin) {
    struct module *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    m->fatbin = fatCubin;
    return &m->fatbin;
}

RT_EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle) { (void)fatCubinHandle; }

RT_EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle) {
    if (fatCubinHandle == NULL)
        return;
    struct module *m = (struct module *)(void *)fatCubinHandle;
    pthread_mutex_lock(&lock);
    for (struct entry *e = m->entries, *next; e != NULL; e = next) {
        next = e->next;
        struct slot *s = find_locked(e->host);
        if (s != NULL)
            s->value = &tombstone;
        if (e->handle_indexed && (s = find_locked(e)) != NULL)
            s->value = &tombstone;
        free(e);
    }
    pthread_mutex_unlock(&lock);
    free(m);
}

RT_EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                      const char *deviceName, int thread_limit, uint3 *tid,
                                      uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize) {
    (void)deviceFun, (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
    if (fatCubinHandle == NULL || hostFun == NULL)
        return;
    add((struct module *)(void *)fatCubinHandle, ENTRY_KERNEL, hostFun,
        deviceName != NULL ? deviceName : "?", 0);
}

RT_EXPORT void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                 const char *deviceName, int ext, size_t size, int constant,
                                 int global) {
    (void)deviceAddress, (void)ext, (void)constant, (void)global;
    if (fatCubinHandle == NULL || hostVar == NULL)
        return;
    add((struct module *)(void *)fatCubinHandle, ENTRY_VARIABLE, hostVar,
        deviceName != NULL ? deviceName : "?", size);
}

RT_EXPORT void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
                                        char *deviceAddress, const char *deviceName, int ext,
                                        size_t size, int constant, int global) {
    (void)deviceAddress, (void)ext, (void)constant, (void)global;
    if (fatCubinHandle == NULL || hostVarPtrAddress == NULL)
        return;
    add((struct module *)(void *)fatCubinHandle, ENTRY_VARIABLE, hostVarPtrAddress,
        deviceName != NULL ? deviceName : "?", size);
}

/* Managed variables get their storage and initial values from the module's GPU code, which
 * is never loaded: report them as not initialised. */
RT_EXPORT char __cudaInitModule(void **fatCubinHandle) {
    (void)fatCubinHandle;
    return 0;
}

/* The <<<grid, block, shared, stream>>> configuration, pushed by the caller and popped by the
 * kernel's host stub on the same thread. */
static __thread struct {
    dim3 grid, block;
    size_t shared;
    void *stream;
} configs[8];
static __thread unsigned config_depth;

RT_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                               struct CUstream_st *stream) {
    if (config_depth >= sizeof configs / sizeof configs[0])
        return 1;
    configs[config_depth].grid = gridDim;
    configs[config_depth].block = blockDim;
    configs[config_depth].shared = sharedMem;
    configs[config_depth].stream = stream;
    config_depth++;
    return 0;
}

RT_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                                 void *stream) {
    if (config_depth == 0)
        return rt_record(cudaErrorMissingConfiguration);
    config_depth--;
    *gridDim = configs[config_depth].grid;
    *blockDim = configs[config_depth].block;
    *sharedMem = configs[config_depth].shared;
    *(void **)stream = configs[config_depth].stream;
    return cudaSuccess;
}

static cudaError_t get_kernel(cudaKernel_t *kernel, const void *function) {
    if (kernel == NULL)
        return rt_record(cudaErrorInvalidValue);
    struct entry *e = kernel_of(function);
    if (e == NULL) {
        *kernel = NULL;
        return rt_record(cudaErrorInvalidDeviceFunction);
    }
    pthread_mutex_lock(&lock);
    if (!e->handle_indexed && insert_locked(e, e) == 0)
        e->handle_indexed = 1;
    pthread_mutex_unlock(&lock);
    *kernel = (cudaKernel_t)(void *)e;
    return cudaSuccess;
}

RT_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *function) {
    return get_kernel(kernel, function);
}

RT_EXPORT cudaError_t cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr) {
    return get_kernel(kernelPtr, entryFuncAddr);
}

static int empty_dim(dim3 d) { return d.x == 0 || d.y == 0 || d.z == 0; }

/* Every launch ends here. */
static cudaError_t refuse_launch(const void *func, dim3 grid, dim3 block) {
    cudaError_t st = rt_context();
    if (st != cudaSuccess)
        return rt_record(st);
    struct entry *e = kernel_of(func);
    if (e == NULL)
        return rt_fail(cudaErrorInvalidDeviceFunction,
                       "invalid device function: %p is not a kernel registered with this runtime",
                       func);
    if (empty_dim(grid) || empty_dim(block))
        return rt_record(cudaErrorInvalidConfiguration);
    return rt_fail(cudaErrorNotSupported, "%s (kernel %s)", RT_NO_KERNELS, e->name);
}

RT_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                         void **args, size_t sharedMem, cudaStream_t stream) {
    (void)args, (void)sharedMem, (void)stream;
    return refuse_launch(kernel, gridDim, blockDim);
}

RT_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                       size_t sharedMem, cudaStream_t stream) {
    (void)args, (void)sharedMem, (void)stream;
    return refuse_launch(func, gridDim, blockDim);
}

RT_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                          void **args) {
    (void)args;
    if (config == NULL)
        return rt_record(cudaErrorInvalidValue);
    return refuse_launch(func, config->gridDim, config->blockDim);
}

RT_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim,
                                                  void **args, size_t sharedMem,
                                                  cudaStream_t stream) {
    (void)args, (void)sharedMem, (void)stream;
    return refuse_launch(func, gridDim, blockDim);
}

/* A query answered by the kernel's GPU code: known kernels get the reason, others an error. */
static cudaError_t refuse_kernel_query(const void *func, const char *what) {
    struct entry *e = kernel_of(func);
    if (e == NULL)
        return rt_record(cudaErrorInvalidDeviceFunction);
    return rt_fail(cudaErrorNotSupported,
                   "operation not supported: kernel %s: its %s come from its GPU code, which "
                   "nvml-mock's CUDA runtime does not load (no kernel runs on a mock GPU)",
                   e->name, what);
}

RT_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) {
    if (attr == NULL)
        return rt_record(cudaErrorInvalidValue);
    return refuse_kernel_query(func, "attributes");
}

RT_EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr,
                                           int value) {
    (void)attr, (void)value;
    return refuse_kernel_query(func, "launch settings");
}

RT_EXPORT cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cacheConfig) {
    (void)cacheConfig;
    return refuse_kernel_query(func, "cache settings");
}

RT_EXPORT cudaError_t cudaFuncGetName(const char **name, const void *func) {
    if (name == NULL)
        return rt_record(cudaErrorInvalidValue);
    struct entry *e = kernel_of(func);
    if (e == NULL)
        return rt_record(cudaErrorInvalidDeviceFunction);
    *name = e->name;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t *functionPtr, const void *symbolPtr) {
    if (functionPtr == NULL)
        return rt_record(cudaErrorInvalidValue);
    return refuse_kernel_query(symbolPtr, "driver function handles");
}

RT_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
                                                                    int blockSize,
                                                                    size_t dynamicSMemSize) {
    (void)blockSize, (void)dynamicSMemSize;
    if (numBlocks == NULL)
        return rt_record(cudaErrorInvalidValue);
    return refuse_kernel_query(func, "occupancy figures");
}

RT_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int *numBlocks, const void *func, int blockSize, size_t dynamicSMemSize, unsigned int flags) {
    (void)blockSize, (void)dynamicSMemSize, (void)flags;
    if (numBlocks == NULL)
        return rt_record(cudaErrorInvalidValue);
    return refuse_kernel_query(func, "occupancy figures");
}

RT_EXPORT cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize,
                                                                const void *func, int numBlocks,
                                                                int blockSize) {
    (void)numBlocks, (void)blockSize;
    if (dynamicSmemSize == NULL)
        return rt_record(cudaErrorInvalidValue);
    return refuse_kernel_query(func, "shared memory limits");
}

RT_EXPORT cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel,
                                                      enum cudaFuncAttribute attr, int value,
                                                      int device) {
    (void)attr, (void)value, (void)device;
    return refuse_kernel_query(kernel, "launch settings");
}

/* Device variables: their storage and initial values are part of the GPU code image. */
static cudaError_t refuse_symbol(const void *symbol) {
    struct entry *e = lookup(symbol);
    if (e == NULL || e->kind != ENTRY_VARIABLE)
        return rt_record(cudaErrorInvalidSymbol);
    return rt_fail(cudaErrorNotSupported,
                   "operation not supported: device variable %s lives in the program's GPU "
                   "code, which nvml-mock's CUDA runtime does not load",
                   e->name);
}

RT_EXPORT cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol) {
    if (devPtr == NULL)
        return rt_record(cudaErrorInvalidValue);
    return refuse_symbol(symbol);
}

RT_EXPORT cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol) {
    if (size == NULL)
        return rt_record(cudaErrorInvalidValue);
    struct entry *e = lookup(symbol);
    if (e == NULL || e->kind != ENTRY_VARIABLE)
        return rt_record(cudaErrorInvalidSymbol);
    *size = e->size;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count,
                                         size_t offset, enum cudaMemcpyKind kind) {
    (void)src, (void)count, (void)offset, (void)kind;
    return refuse_symbol(symbol);
}

RT_EXPORT cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count,
                                           size_t offset, enum cudaMemcpyKind kind) {
    (void)dst, (void)count, (void)offset, (void)kind;
    return refuse_symbol(symbol);
}

RT_EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t count,
                                              size_t offset, enum cudaMemcpyKind kind,
                                              cudaStream_t stream) {
    (void)src, (void)count, (void)offset, (void)kind, (void)stream;
    return refuse_symbol(symbol);
}

RT_EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count,
                                                size_t offset, enum cudaMemcpyKind kind,
                                                cudaStream_t stream) {
    (void)dst, (void)count, (void)offset, (void)kind, (void)stream;
    return refuse_symbol(symbol);
}

/* Libraries: loading is the driver's (the mock driver accepts modules); their kernels are
 * remembered by handle so that a launch names them. */
RT_EXPORT cudaError_t cudaLibraryLoadData(cudaLibrary_t *library, const void *code,
                                          enum cudaJitOption *jitOptions, void **jitOptionsValues,
                                          unsigned int numJitOptions,
                                          enum cudaLibraryOption *libraryOptions,
                                          void **libraryOptionValues,
                                          unsigned int numLibraryOptions) {
    if (library == NULL || code == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuLibraryLoadData, (CUlibrary *)library, code, (CUjit_option *)jitOptions,
                  jitOptionsValues, numJitOptions, (CUlibraryOption *)libraryOptions,
                  libraryOptionValues, numLibraryOptions);
}

RT_EXPORT cudaError_t cudaLibraryUnload(cudaLibrary_t library) {
    RT_ENTER();
    return RT_DRV(cuLibraryUnload, (CUlibrary)library);
}

RT_EXPORT cudaError_t cudaLibraryGetKernel(cudaKernel_t *pKernel, cudaLibrary_t library,
                                           const char *name) {
    if (pKernel == NULL || name == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    CUkernel kernel = NULL;
    cudaError_t st = RT_DRV(cuLibraryGetKernel, &kernel, (CUlibrary)library, name);
    if (st != cudaSuccess)
        return st;
    if (lookup(kernel) == NULL) {
        char *copy = strdup(name);
        add(NULL, ENTRY_LIBRARY_KERNEL, kernel, copy != NULL ? copy : "?", 0);
    }
    *pKernel = (cudaKernel_t)kernel;
    return cudaSuccess;
}

RT_ALIAS(__cudaLaunchKernel_ptsz, __cudaLaunchKernel)
RT_ALIAS(cudaLaunchKernel_ptsz, cudaLaunchKernel)
RT_ALIAS(cudaLaunchKernelExC_ptsz, cudaLaunchKernelExC)
RT_ALIAS(cudaLaunchCooperativeKernel_ptsz, cudaLaunchCooperativeKernel)
RT_ALIAS(cudaMemcpyToSymbol_ptds, cudaMemcpyToSymbol)
RT_ALIAS(cudaMemcpyFromSymbol_ptds, cudaMemcpyFromSymbol)
RT_ALIAS(cudaMemcpyToSymbolAsync_ptsz, cudaMemcpyToSymbolAsync)
RT_ALIAS(cudaMemcpyFromSymbolAsync_ptsz, cudaMemcpyFromSymbolAsync)
