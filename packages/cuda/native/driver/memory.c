/*
 * Memory the node sees. Device memory is host memory (anonymous mappings, reserved lazily),
 * bounded by what NVML says is free on the GPU; every allocation is recorded, so copies and
 * memsets are checked against the allocation they touch (a null, unknown, freed or
 * out-of-range pointer is CUDA_ERROR_INVALID_VALUE, never a wild write), and each change of
 * this process's use of a GPU is published into the live layer (publish.c), where NVML,
 * nvidia-smi and the exporter in every process see it. Copies and memsets are exact and done
 * at the call; an async one is done when it returns, so every stream is always idle.
 */
#define _DEFAULT_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "mock_cu.h"

enum kind {
    KIND_DEVICE = 1, /* cuMemAlloc, cuMemAllocPitch: counted on the device */
    KIND_MANAGED,    /* cuMemAllocManaged: counted on the device */
    KIND_HOST,       /* cuMemAllocHost, cuMemHostAlloc: page-locked host memory */
    KIND_REGISTERED, /* cuMemHostRegister: the caller's memory */
};

struct alloc {
    uintptr_t base;
    size_t size;
    size_t mapped; /* bytes mapped here (0 for registered memory) */
    int device;
    const struct CUctx_st *ctx;
    enum kind kind;
    unsigned int flags;
    unsigned long long id;
};

static struct alloc *table; /* sorted by base */
static size_t count, room;
static unsigned long long next_id = 1;
static unsigned long long used_bytes[MOCK_CU_MAX_DEVICES];

static size_t lower_bound(uintptr_t p)
{
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (table[mid].base < p) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* The allocation holding [p, p + len) (under mock_cu_lock), or NULL. */
static struct alloc *holding(uintptr_t p, size_t len)
{
    if (p == 0 || count == 0) {
        return NULL;
    }
    size_t i = lower_bound(p);
    if (i < count && table[i].base == p) {
        /* exact base */
    } else if (i == 0) {
        return NULL;
    } else {
        i--;
    }
    struct alloc *a = &table[i];
    if (p < a->base || p - a->base > a->size || len > a->size - (p - a->base)) {
        return NULL;
    }
    return a;
}

static int insert(const struct alloc *a)
{
    if (count == room) {
        size_t next = room ? room * 2 : 64;
        struct alloc *t = realloc(table, next * sizeof(*t));
        if (t == NULL) {
            return -1;
        }
        table = t;
        room = next;
    }
    size_t i = lower_bound(a->base);
    memmove(&table[i + 1], &table[i], (count - i) * sizeof(*table));
    table[i] = *a;
    count++;
    return 0;
}

static void erase(struct alloc *a)
{
    size_t i = (size_t)(a - table);
    memmove(&table[i], &table[i + 1], (count - i - 1) * sizeof(*table));
    count--;
}

static int counted(enum kind k)
{
    return k == KIND_DEVICE || k == KIND_MANAGED;
}

unsigned long long mock_cu_mem_used(int dev);
unsigned long long mock_cu_mem_used(int dev)
{
    return __atomic_load_n(&used_bytes[dev], __ATOMIC_ACQUIRE);
}

/* What NVML says is free on `d` now, less what this process holds and has not published. */
static CUresult free_of(int dev, size_t *free_out)
{
    const struct mock_cu_device *d = &mock_cu_devices[dev];
    nvmlMemory_t mem;
    nvmlReturn_t r = mock_nvml.DeviceGetMemoryInfo(d->nvml, &mem);
    if (r == NVML_ERROR_GPU_IS_LOST) {
        return CUDA_ERROR_LAUNCH_FAILED;
    }
    if (r != NVML_SUCCESS) {
        return CUDA_ERROR_UNKNOWN;
    }
    unsigned long long hidden = mock_cu_unpublished(dev);
    *free_out = (size_t)(mem.free > hidden ? mem.free - hidden : 0);
    return CUDA_SUCCESS;
}

static void *map_bytes(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
    /* a forked child (the process's watcher, publish.c) never shares these pages */
    (void)madvise(p, size, MADV_DONTFORK);
    return p;
}

static CUresult allocate(struct CUctx_st *ctx, size_t size, enum kind kind, unsigned int flags, void **out)
{
    if (size == 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (counted(kind)) {
        size_t avail = 0;
        CUresult r = free_of(ctx->device, &avail);
        if (r != CUDA_SUCCESS) {
            return r;
        }
        if (size > avail) {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    void *p = map_bytes(size);
    if (p == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct alloc a = {
        .base = (uintptr_t)p, .size = size, .mapped = size, .device = ctx->device, .ctx = ctx, .kind = kind,
        .flags = flags,
    };
    pthread_mutex_lock(&mock_cu_lock);
    a.id = next_id++;
    int bad = insert(&a);
    if (!bad && counted(kind)) {
        __atomic_add_fetch(&used_bytes[ctx->device], size, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mock_cu_lock);
    if (bad) {
        munmap(p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (counted(kind)) {
        mock_cu_publish(ctx->device, mock_cu_mem_used(ctx->device));
    }
    *out = p;
    return CUDA_SUCCESS;
}

/* Free the allocation whose base is `p` and whose kind `accept` allows (bit per kind). */
static CUresult release(uintptr_t p, unsigned int accept)
{
    pthread_mutex_lock(&mock_cu_lock);
    struct alloc *a = holding(p, 0);
    if (a == NULL || a->base != p || !((accept >> a->kind) & 1u)) {
        pthread_mutex_unlock(&mock_cu_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct alloc gone = *a;
    erase(a);
    if (counted(gone.kind)) {
        __atomic_sub_fetch(&used_bytes[gone.device], gone.size, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mock_cu_lock);
    if (gone.mapped) {
        munmap((void *)gone.base, gone.mapped);
    }
    if (counted(gone.kind)) {
        mock_cu_publish(gone.device, mock_cu_mem_used(gone.device));
    }
    return CUDA_SUCCESS;
}

void mock_cu_mem_release_context(const struct CUctx_st *ctx)
{
    int touched[MOCK_CU_MAX_DEVICES] = {0};
    for (;;) {
        pthread_mutex_lock(&mock_cu_lock);
        uintptr_t base = 0;
        unsigned int kind = 0;
        for (size_t i = 0; i < count; i++) {
            if (table[i].ctx == ctx && table[i].kind != KIND_REGISTERED) {
                base = table[i].base;
                kind = table[i].kind;
                touched[table[i].device] = 1;
                break;
            }
        }
        pthread_mutex_unlock(&mock_cu_lock);
        if (base == 0) {
            break;
        }
        (void)release(base, 1u << kind);
    }
    (void)touched;
}

#define CURRENT_OR_RETURN(ctx)                                                                                         \
    struct CUctx_st *ctx;                                                                                              \
    do {                                                                                                               \
        CUresult r_ = mock_cu_current(&ctx);                                                                           \
        if (r_ != CUDA_SUCCESS) {                                                                                      \
            return r_;                                                                                                 \
        }                                                                                                              \
    } while (0)

MOCK_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CURRENT_OR_RETURN(ctx);
    if (dptr == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    void *p;
    CUresult r = allocate(ctx, bytesize, KIND_DEVICE, 0, &p);
    if (r == CUDA_SUCCESS) {
        *dptr = (CUdeviceptr)(uintptr_t)p;
    }
    return r;
}

MOCK_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                        unsigned int ElementSizeBytes)
{
    CURRENT_OR_RETURN(ctx);
    if (dptr == NULL || pPitch == NULL || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t pitch = (WidthInBytes + 511u) & ~(size_t)511u; /* the texture pitch alignment a GPU reports */
    if (pitch < WidthInBytes || Height > SIZE_MAX / pitch) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    void *p;
    CUresult r = allocate(ctx, pitch * Height, KIND_DEVICE, 0, &p);
    if (r == CUDA_SUCCESS) {
        *dptr = (CUdeviceptr)(uintptr_t)p;
        *pPitch = pitch;
    }
    return r;
}

MOCK_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CURRENT_OR_RETURN(ctx);
    if (dptr == NULL || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    void *p;
    CUresult r = allocate(ctx, bytesize, KIND_MANAGED, flags, &p);
    if (r == CUDA_SUCCESS) {
        *dptr = (CUdeviceptr)(uintptr_t)p;
    }
    return r;
}

MOCK_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CURRENT_OR_RETURN(ctx);
    (void)ctx;
    return release((uintptr_t)dptr, 1u << KIND_DEVICE | 1u << KIND_MANAGED);
}

MOCK_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    CURRENT_OR_RETURN(ctx);
    if (free == NULL || total == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t avail;
    CUresult r = free_of(ctx->device, &avail);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    *free = avail;
    *total = (size_t)mock_cu_devices[ctx->device].total_mem;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CURRENT_OR_RETURN(ctx);
    (void)ctx;
    pthread_mutex_lock(&mock_cu_lock);
    const struct alloc *a = holding((uintptr_t)dptr, 0);
    struct alloc copy = a != NULL ? *a : (struct alloc){0};
    pthread_mutex_unlock(&mock_cu_lock);
    if (a == NULL || copy.kind == KIND_REGISTERED) {
        return CUDA_ERROR_NOT_FOUND;
    }
    if (pbase != NULL) {
        *pbase = (CUdeviceptr)copy.base;
    }
    if (psize != NULL) {
        *psize = copy.size;
    }
    return CUDA_SUCCESS;
}

/* ---- host memory ----------------------------------------------------------------------- */

MOCK_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    CURRENT_OR_RETURN(ctx);
    if (pp == NULL || (Flags & ~(unsigned int)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                                               CU_MEMHOSTALLOC_WRITECOMBINED)) != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return allocate(ctx, bytesize, KIND_HOST, Flags, pp);
}

MOCK_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

MOCK_EXPORT CUresult cuMemFreeHost(void *p)
{
    CURRENT_OR_RETURN(ctx);
    (void)ctx;
    return release((uintptr_t)p, 1u << KIND_HOST);
}

MOCK_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    CURRENT_OR_RETURN(ctx);
    (void)ctx;
    if (pdptr == NULL || Flags != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&mock_cu_lock);
    const struct alloc *a = holding((uintptr_t)p, 0);
    int ok = a != NULL && (a->kind == KIND_HOST || a->kind == KIND_REGISTERED);
    pthread_mutex_unlock(&mock_cu_lock);
    if (!ok) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pdptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: the same address on both sides */
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    CURRENT_OR_RETURN(ctx);
    (void)ctx;
    if (pFlags == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&mock_cu_lock);
    const struct alloc *a = holding((uintptr_t)p, 0);
    int ok = a != NULL && (a->kind == KIND_HOST || a->kind == KIND_REGISTERED);
    unsigned int flags = ok ? a->flags : 0;
    pthread_mutex_unlock(&mock_cu_lock);
    if (!ok) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pFlags = flags;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    CURRENT_OR_RETURN(ctx);
    if (p == NULL || bytesize == 0 || (uintptr_t)p > UINTPTR_MAX - bytesize) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&mock_cu_lock);
    uintptr_t lo = (uintptr_t)p, hi = lo + bytesize;
    size_t i = lower_bound(lo);
    int overlap = (i < count && table[i].base < hi) || (i > 0 && table[i - 1].base + table[i - 1].size > lo);
    CUresult r = CUDA_SUCCESS;
    if (overlap) {
        r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    } else {
        struct alloc a = {.base = lo, .size = bytesize, .device = ctx->device, .ctx = ctx, .kind = KIND_REGISTERED,
                          .flags = Flags, .id = next_id++};
        if (insert(&a) != 0) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&mock_cu_lock);
    return r;
}

MOCK_ALIAS(cuMemHostRegister, cuMemHostRegister_v2);

MOCK_EXPORT CUresult cuMemHostUnregister(void *p)
{
    CURRENT_OR_RETURN(ctx);
    (void)ctx;
    CUresult r = release((uintptr_t)p, 1u << KIND_REGISTERED);
    return r == CUDA_ERROR_INVALID_VALUE ? CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED : r;
}

/* ---- copies and memsets ---------------------------------------------------------------- */

/* Whether [p, p+len) lies in one allocation of this process. */
static int tracked(uintptr_t p, size_t len)
{
    pthread_mutex_lock(&mock_cu_lock);
    int ok = holding(p, len) != NULL;
    pthread_mutex_unlock(&mock_cu_lock);
    return ok;
}

enum side { SIDE_HOST, SIDE_DEVICE, SIDE_ANY };

/* The first checks of a copy or a set: a current context, and for the async forms a live
 * stream. */
static CUresult current_and_stream(CUstream stream, int async)
{
    CURRENT_OR_RETURN(ctx);
    (void)ctx;
    return async ? mock_cu_stream_check(stream) : CUDA_SUCCESS;
}

static CUresult copy(uintptr_t dst, enum side dst_side, uintptr_t src, enum side src_side, size_t n, CUstream stream,
                     int async)
{
    CUresult checked = current_and_stream(stream, async);
    if (checked != CUDA_SUCCESS) {
        return checked;
    }
    if (n == 0) {
        return CUDA_SUCCESS;
    }
    if (dst == 0 || src == 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if ((dst_side == SIDE_DEVICE && !tracked(dst, n)) || (src_side == SIDE_DEVICE && !tracked(src, n))) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    memmove((void *)dst, (const void *)src, n);
    return CUDA_SUCCESS;
}

#define H(p) ((uintptr_t)(p))

MOCK_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy(H(dstDevice), SIDE_DEVICE, H(srcHost), SIDE_HOST, ByteCount, NULL, 0);
}

MOCK_EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(H(dstHost), SIDE_HOST, H(srcDevice), SIDE_DEVICE, ByteCount, NULL, 0);
}

MOCK_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(H(dstDevice), SIDE_DEVICE, H(srcDevice), SIDE_DEVICE, ByteCount, NULL, 0);
}

MOCK_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy(H(dst), SIDE_ANY, H(src), SIDE_ANY, ByteCount, NULL, 0);
}

MOCK_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                          CUstream hStream)
{
    return copy(H(dstDevice), SIDE_DEVICE, H(srcHost), SIDE_HOST, ByteCount, hStream, 1);
}

MOCK_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    return copy(H(dstHost), SIDE_HOST, H(srcDevice), SIDE_DEVICE, ByteCount, hStream, 1);
}

MOCK_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream)
{
    return copy(H(dstDevice), SIDE_DEVICE, H(srcDevice), SIDE_DEVICE, ByteCount, hStream, 1);
}

MOCK_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return copy(H(dst), SIDE_ANY, H(src), SIDE_ANY, ByteCount, hStream, 1);
}

MOCK_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                  CUcontext srcContext, size_t ByteCount)
{
    pthread_mutex_lock(&mock_cu_lock);
    int live = mock_cu_ctx_live(dstContext) && mock_cu_ctx_live(srcContext);
    pthread_mutex_unlock(&mock_cu_lock);
    if (!live) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    return copy(H(dstDevice), SIDE_DEVICE, H(srcDevice), SIDE_DEVICE, ByteCount, NULL, 0);
}

MOCK_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                       CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
    CUresult r = mock_cu_stream_check(hStream);
    return r != CUDA_SUCCESS ? r : cuMemcpyPeer(dstDevice, dstContext, srcDevice, srcContext, ByteCount);
}

/* Set `n` elements of `width` bytes (1, 2, 4) at dst + row * pitch for each of `rows`. */
static CUresult memset_rows(uintptr_t dst, size_t pitch, unsigned int value, size_t width, size_t n, size_t rows,
                            CUstream stream, int async)
{
    CUresult checked = current_and_stream(stream, async);
    if (checked != CUDA_SUCCESS) {
        return checked;
    }
    if (n == 0 || rows == 0) {
        return CUDA_SUCCESS;
    }
    if (dst == 0 || dst % width != 0 || (rows > 1 && pitch % width != 0) || n > SIZE_MAX / width) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t row_bytes = n * width;
    if (rows > 1 && (pitch < row_bytes || rows - 1 > (SIZE_MAX - row_bytes) / pitch)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t span = (rows - 1) * pitch + row_bytes;
    if (!tracked(dst, span)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t r = 0; r < rows; r++) {
        unsigned char *p = (unsigned char *)(dst + r * pitch);
        if (width == 1) {
            memset(p, (int)(value & 0xFFu), n);
        } else if (width == 2) {
            uint16_t v = (uint16_t)value;
            for (size_t i = 0; i < n; i++) {
                memcpy(p + i * 2, &v, 2);
            }
        } else {
            uint32_t v = value;
            for (size_t i = 0; i < n; i++) {
                memcpy(p + i * 4, &v, 4);
            }
        }
    }
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return memset_rows(H(dstDevice), 0, uc, 1, N, 1, NULL, 0);
}

MOCK_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    return memset_rows(H(dstDevice), 0, us, 2, N, 1, NULL, 0);
}

MOCK_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return memset_rows(H(dstDevice), 0, ui, 4, N, 1, NULL, 0);
}

MOCK_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return memset_rows(H(dstDevice), 0, uc, 1, N, 1, hStream, 1);
}

MOCK_EXPORT CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    return memset_rows(H(dstDevice), 0, us, 2, N, 1, hStream, 1);
}

MOCK_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return memset_rows(H(dstDevice), 0, ui, 4, N, 1, hStream, 1);
}

MOCK_EXPORT CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                                     size_t Height)
{
    return memset_rows(H(dstDevice), dstPitch, uc, 1, Width, Height, NULL, 0);
}

MOCK_EXPORT CUresult cuMemsetD2D16_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                                      size_t Height)
{
    return memset_rows(H(dstDevice), dstPitch, us, 2, Width, Height, NULL, 0);
}

MOCK_EXPORT CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                                      size_t Height)
{
    return memset_rows(H(dstDevice), dstPitch, ui, 4, Width, Height, NULL, 0);
}

MOCK_EXPORT CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                                       size_t Height, CUstream hStream)
{
    return memset_rows(H(dstDevice), dstPitch, uc, 1, Width, Height, hStream, 1);
}

MOCK_EXPORT CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                                        size_t Height, CUstream hStream)
{
    return memset_rows(H(dstDevice), dstPitch, us, 2, Width, Height, hStream, 1);
}

MOCK_EXPORT CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                                        size_t Height, CUstream hStream)
{
    return memset_rows(H(dstDevice), dstPitch, ui, 4, Width, Height, hStream, 1);
}

/* 2D copies between host and device memory (arrays are not modelled). */
static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream stream, int async)
{
    if (c == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    uintptr_t src = c->srcMemoryType == CU_MEMORYTYPE_HOST ? H(c->srcHost) : H(c->srcDevice);
    uintptr_t dst = c->dstMemoryType == CU_MEMORYTYPE_HOST ? H(c->dstHost) : H(c->dstDevice);
    enum side ss = c->srcMemoryType == CU_MEMORYTYPE_DEVICE ? SIDE_DEVICE : SIDE_ANY;
    enum side ds = c->dstMemoryType == CU_MEMORYTYPE_DEVICE ? SIDE_DEVICE : SIDE_ANY;
    if (c->WidthInBytes == 0 || c->Height == 0) {
        return copy(dst, ds, src, ss, 0, stream, async);
    }
    if ((c->Height > 1 && (c->srcPitch < c->WidthInBytes + c->srcXInBytes || c->dstPitch < c->WidthInBytes + c->dstXInBytes))) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t row = 0; row < c->Height; row++) {
        uintptr_t s = src + (c->srcY + row) * c->srcPitch + c->srcXInBytes;
        uintptr_t d = dst + (c->dstY + row) * c->dstPitch + c->dstXInBytes;
        CUresult r = copy(d, ds, s, ss, c->WidthInBytes, stream, async);
        if (r != CUDA_SUCCESS) {
            return r;
        }
    }
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
    return copy2d(pCopy, NULL, 0);
}

MOCK_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy)
{
    return copy2d(pCopy, NULL, 0);
}

MOCK_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return copy2d(pCopy, hStream, 1);
}

/* ---- pointer attributes ---------------------------------------------------------------- */

/* Write attribute `attribute` of allocation `a` (NULL: not ours) to `data`. Returns
 * CUDA_ERROR_INVALID_VALUE for one the pointer does not have, NOT_SUPPORTED for one not modelled. */
static CUresult attribute(const struct alloc *a, CUpointer_attribute attribute, void *data, CUdeviceptr ptr)
{
    int device_side = a != NULL && a->kind != KIND_HOST && a->kind != KIND_REGISTERED;
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = a != NULL ? (CUcontext)(uintptr_t)a->ctx : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = a == NULL ? 0u : device_side ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = a != NULL ? ptr : 0;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void **)data = a != NULL && (!device_side || a->kind == KIND_MANAGED) ? (void *)(uintptr_t)ptr : NULL;
        return a != NULL && (!device_side || a->kind == KIND_MANAGED) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned int *)data = a != NULL && a->kind == KIND_MANAGED;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = a != NULL ? a->device : -1;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = a != NULL ? (CUdeviceptr)a->base : 0;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = a != NULL ? a->size : 0;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = a != NULL ? a->id : 0;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned int *)data = a != NULL;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        *(unsigned int *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned int *)data = a != NULL ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE : 0;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(void **)data = NULL;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return a != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

MOCK_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    if (data == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    unsigned char scratch[16];
    pthread_mutex_lock(&mock_cu_lock);
    const struct alloc *a = holding((uintptr_t)ptr, 0);
    struct alloc copy_of = a != NULL ? *a : (struct alloc){0};
    pthread_mutex_unlock(&mock_cu_lock);
    /* an unknown pointer writes nothing to the caller's memory */
    CUresult r = attribute(a != NULL ? &copy_of : NULL, attr, scratch, ptr);
    if (r == CUDA_SUCCESS) {
        size_t n = attr == CU_POINTER_ATTRIBUTE_MEMORY_TYPE || attr == CU_POINTER_ATTRIBUTE_IS_MANAGED ||
                           attr == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS || attr == CU_POINTER_ATTRIBUTE_MAPPED ||
                           attr == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE ||
                           attr == CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE ||
                           attr == CU_POINTER_ATTRIBUTE_ACCESS_FLAGS || attr == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
                       ? 4
                       : 8;
        memcpy(data, scratch, n);
    }
    return r;
}

MOCK_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
                                            CUdeviceptr ptr)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    if (numAttributes == 0 || attributes == NULL || data == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&mock_cu_lock);
    const struct alloc *a = holding((uintptr_t)ptr, 0);
    struct alloc copy_of = a != NULL ? *a : (struct alloc){0};
    pthread_mutex_unlock(&mock_cu_lock);
    for (unsigned int i = 0; i < numAttributes; i++) {
        if (data[i] == NULL) {
            return CUDA_ERROR_INVALID_VALUE;
        }
        /* documented: a pointer that is not CUDA's gets null values, not an error */
        CUresult r = attribute(a != NULL ? &copy_of : NULL, attributes[i], data[i], ptr);
        if (r != CUDA_SUCCESS && a != NULL) {
            return r;
        }
    }
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attr, CUdeviceptr ptr)
{
    if (value == NULL || attr != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return tracked((uintptr_t)ptr, 0) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
