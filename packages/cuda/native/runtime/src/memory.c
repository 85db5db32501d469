/*
 * Memory: allocation, copies, sets, pinned host memory and pointer queries.
 *
 * Every byte goes through the driver: it bounds allocations by what NVML says is free,
 * publishes the process's use to the node (nvidia-smi, the exporter and PyTorch's
 * out-of-memory message see it), and copies exactly. The runtime adds only what the
 * runtime API defines on top: copy directions, pitched copies done row by row, the two
 * default-stream handles, and cudaFree(0) as the call that creates the context.
 */
#include "rt.h"

#include <string.h>

static int valid_kind(enum cudaMemcpyKind kind) {
    return kind == cudaMemcpyHostToHost || kind == cudaMemcpyHostToDevice ||
           kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice ||
           kind == cudaMemcpyDefault;
}

/* One linear copy, in the direction the caller named (cudaMemcpyDefault: the driver infers
 * it from the unified address space). `async` selects the stream-ordered entry points. */
static cudaError_t copy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                        int async, cudaStream_t stream) {
    if (!valid_kind(kind))
        return rt_record(cudaErrorInvalidMemcpyDirection);
    if (count == 0)
        return cudaSuccess;
    if (dst == NULL || src == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    CUstream s = rt_stream(stream);
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, sd = (CUdeviceptr)(uintptr_t)src;
    switch (kind) {
    case cudaMemcpyHostToHost:
        if (async) {
            cudaError_t st = RT_DRV(cuStreamSynchronize, s);
            if (st != cudaSuccess)
                return st;
        }
        memmove(dst, src, count);
        return cudaSuccess;
    case cudaMemcpyHostToDevice:
        return async ? RT_DRV(cuMemcpyHtoDAsync, d, src, count, s)
                     : RT_DRV(cuMemcpyHtoD, d, src, count);
    case cudaMemcpyDeviceToHost:
        return async ? RT_DRV(cuMemcpyDtoHAsync, dst, sd, count, s)
                     : RT_DRV(cuMemcpyDtoH, dst, sd, count);
    case cudaMemcpyDeviceToDevice:
        return async ? RT_DRV(cuMemcpyDtoDAsync, d, sd, count, s)
                     : RT_DRV(cuMemcpyDtoD, d, sd, count);
    default:
        return async ? RT_DRV(cuMemcpyAsync, d, sd, count, s) : RT_DRV(cuMemcpy, d, sd, count);
    }
}

RT_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size) {
    if (devPtr == NULL)
        return rt_record(cudaErrorInvalidValue);
    *devPtr = NULL;
    RT_ENTER();
    if (size == 0)
        return cudaSuccess;
    CUdeviceptr p = 0;
    cudaError_t st = RT_DRV(cuMemAlloc, &p, size);
    if (st == cudaSuccess)
        *devPtr = (void *)(uintptr_t)p;
    return st;
}

RT_EXPORT cudaError_t cudaFree(void *devPtr) {
    /* cudaFree(NULL) is how programs ask for the context to exist: it must create it. */
    RT_ENTER();
    if (devPtr == NULL)
        return cudaSuccess;
    return RT_DRV(cuMemFree, (CUdeviceptr)(uintptr_t)devPtr);
}

RT_EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
    if (devPtr == NULL)
        return rt_record(cudaErrorInvalidValue);
    *devPtr = NULL;
    RT_ENTER();
    if (size == 0)
        return rt_record(cudaErrorInvalidValue);
    CUdeviceptr p = 0;
    cudaError_t st = RT_DRV(cuMemAllocManaged, &p, size, flags);
    if (st == cudaSuccess)
        *devPtr = (void *)(uintptr_t)p;
    return st;
}

RT_EXPORT cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height) {
    if (devPtr == NULL || pitch == NULL)
        return rt_record(cudaErrorInvalidValue);
    /* Rows aligned as the device's texture pitch alignment asks (512 bytes on current GPUs). */
    int device;
    cudaError_t st = rt_current_device(&device);
    if (st != cudaSuccess)
        return rt_record(st);
    int align = 0;
    if (rt_drv.cuDeviceGetAttribute == NULL ||
        rt_drv.cuDeviceGetAttribute(&align, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT,
                                    rt_cu_device(device)) != CUDA_SUCCESS ||
        align <= 0)
        align = 512;
    size_t row = (width + (size_t)align - 1) / (size_t)align * (size_t)align;
    if (height != 0 && row > SIZE_MAX / height)
        return rt_record(cudaErrorMemoryAllocation);
    st = cudaMalloc(devPtr, row * height);
    if (st == cudaSuccess)
        *pitch = row;
    return st;
}

RT_EXPORT cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
    if (free == NULL || total == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuMemGetInfo, free, total);
}

RT_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    return copy(dst, src, count, kind, 0, NULL);
}

RT_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                      enum cudaMemcpyKind kind, cudaStream_t stream) {
    return copy(dst, src, count, kind, 1, stream);
}

static cudaError_t copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                           size_t height, enum cudaMemcpyKind kind, int async,
                           cudaStream_t stream) {
    if (width > dpitch || width > spitch)
        return rt_record(cudaErrorInvalidPitchValue);
    for (size_t row = 0; row < height; row++) {
        cudaError_t st = copy((char *)dst + row * dpitch, (const char *)src + row * spitch, width,
                              kind, async, stream);
        if (st != cudaSuccess)
            return st;
    }
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                   size_t width, size_t height, enum cudaMemcpyKind kind) {
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, 0, NULL);
}

RT_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                        size_t width, size_t height, enum cudaMemcpyKind kind,
                                        cudaStream_t stream) {
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, 1, stream);
}

static cudaError_t copy_peer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
                             int async, cudaStream_t stream) {
    if (count == 0)
        return cudaSuccess;
    if (dst == NULL || src == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    CUcontext dctx, sctx;
    cudaError_t st = rt_primary(dstDevice, &dctx);
    if (st == cudaSuccess)
        st = rt_primary(srcDevice, &sctx);
    if (st != cudaSuccess)
        return rt_record(st);
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, s = (CUdeviceptr)(uintptr_t)src;
    return async ? RT_DRV(cuMemcpyPeerAsync, d, dctx, s, sctx, count, rt_stream(stream))
                 : RT_DRV(cuMemcpyPeer, d, dctx, s, sctx, count);
}

RT_EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice,
                                     size_t count) {
    return copy_peer(dst, dstDevice, src, srcDevice, count, 0, NULL);
}

RT_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice,
                                          size_t count, cudaStream_t stream) {
    return copy_peer(dst, dstDevice, src, srcDevice, count, 1, stream);
}

static cudaError_t set(void *devPtr, int value, size_t count, int async, cudaStream_t stream) {
    if (count == 0)
        return cudaSuccess;
    if (devPtr == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)devPtr;
    return async ? RT_DRV(cuMemsetD8Async, d, (unsigned char)value, count, rt_stream(stream))
                 : RT_DRV(cuMemsetD8, d, (unsigned char)value, count);
}

RT_EXPORT cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
    return set(devPtr, value, count, 0, NULL);
}

RT_EXPORT cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
    return set(devPtr, value, count, 1, stream);
}

static cudaError_t set_2d(void *devPtr, size_t pitch, int value, size_t width, size_t height,
                          int async, cudaStream_t stream) {
    if (width > pitch && height > 1)
        return rt_record(cudaErrorInvalidPitchValue);
    for (size_t row = 0; row < height; row++) {
        cudaError_t st = set((char *)devPtr + row * pitch, value, width, async, stream);
        if (st != cudaSuccess)
            return st;
    }
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaMemset2D(void *devPtr, size_t pitch, int value, size_t width,
                                   size_t height) {
    return set_2d(devPtr, pitch, value, width, height, 0, NULL);
}

RT_EXPORT cudaError_t cudaMemset2DAsync(void *devPtr, size_t pitch, int value, size_t width,
                                        size_t height, cudaStream_t stream) {
    return set_2d(devPtr, pitch, value, width, height, 1, stream);
}

/* Host memory: the runtime's flags are the driver's (cudaHostAllocMapped == CU_MEMHOSTALLOC_DEVICEMAP, ...). */
_Static_assert(cudaHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE, "host alloc flags");
_Static_assert(cudaHostAllocMapped == CU_MEMHOSTALLOC_DEVICEMAP, "host alloc flags");
_Static_assert(cudaHostAllocWriteCombined == CU_MEMHOSTALLOC_WRITECOMBINED, "host alloc flags");
_Static_assert(cudaHostRegisterMapped == CU_MEMHOSTREGISTER_DEVICEMAP, "host register flags");
_Static_assert(cudaHostRegisterReadOnly == CU_MEMHOSTREGISTER_READ_ONLY, "host register flags");

RT_EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
    if (pHost == NULL)
        return rt_record(cudaErrorInvalidValue);
    *pHost = NULL;
    RT_ENTER();
    if (size == 0)
        return cudaSuccess;
    return RT_DRV(cuMemHostAlloc, pHost, size, flags);
}

RT_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size) {
    return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

RT_EXPORT cudaError_t cudaFreeHost(void *ptr) {
    RT_ENTER();
    if (ptr == NULL)
        return cudaSuccess;
    return RT_DRV(cuMemFreeHost, ptr);
}

RT_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
    if (ptr == NULL || size == 0)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuMemHostRegister, ptr, size, flags);
}

RT_EXPORT cudaError_t cudaHostUnregister(void *ptr) {
    if (ptr == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuMemHostUnregister, ptr);
}

RT_EXPORT cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags) {
    if (pDevice == NULL || pHost == NULL || flags != 0)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    CUdeviceptr d = 0;
    cudaError_t st = RT_DRV(cuMemHostGetDevicePointer, &d, pHost, 0);
    if (st == cudaSuccess)
        *pDevice = (void *)(uintptr_t)d;
    return st;
}

RT_EXPORT cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost) {
    if (pFlags == NULL || pHost == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuMemHostGetFlags, pFlags, pHost);
}

/*
 * What a pointer is. Memory the driver does not know (ordinary host memory) is, since
 * CUDA 11, reported as cudaMemoryTypeUnregistered with success, not as an error.
 */
RT_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                               const void *ptr) {
    if (attributes == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    memset(attributes, 0, sizeof *attributes);
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    if (rt_drv.cuPointerGetAttribute == NULL)
        return cudaSuccess;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
    unsigned int memtype = 0;
    if (rt_drv.cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS ||
        memtype == 0)
        return cudaSuccess;
    int managed = 0, ordinal = -2;
    rt_drv.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
    rt_drv.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
    CUdeviceptr device_pointer = 0;
    void *host_pointer = NULL;
    rt_drv.cuPointerGetAttribute(&device_pointer, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p);
    rt_drv.cuPointerGetAttribute(&host_pointer, CU_POINTER_ATTRIBUTE_HOST_POINTER, p);
    if (managed)
        attributes->type = cudaMemoryTypeManaged;
    else if (memtype == CU_MEMORYTYPE_HOST)
        attributes->type = cudaMemoryTypeHost;
    else
        attributes->type = cudaMemoryTypeDevice;
    attributes->device = ordinal;
    attributes->devicePointer = (void *)(uintptr_t)device_pointer;
    attributes->hostPointer = host_pointer;
    return cudaSuccess;
}

/* The per-thread-default-stream names (see RT_ALIAS). */
RT_ALIAS(cudaMemcpy_ptds, cudaMemcpy)
RT_ALIAS(cudaMemcpyAsync_ptsz, cudaMemcpyAsync)
RT_ALIAS(cudaMemcpy2D_ptds, cudaMemcpy2D)
RT_ALIAS(cudaMemcpy2DAsync_ptsz, cudaMemcpy2DAsync)
RT_ALIAS(cudaMemset_ptds, cudaMemset)
RT_ALIAS(cudaMemsetAsync_ptsz, cudaMemsetAsync)
RT_ALIAS(cudaMemset2D_ptds, cudaMemset2D)
RT_ALIAS(cudaMemset2DAsync_ptsz, cudaMemset2DAsync)
