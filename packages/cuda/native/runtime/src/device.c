/*
 * Device management: counting, choosing and describing devices, all answered by the driver.
 *
 * Nothing about a device is known here: every property is one of the driver's device
 * attributes (the mock driver answers them from NVML and the GPU profile), so the runtime
 * and the driver can never disagree. Queries need no context, as on a real runtime: asking
 * about eight GPUs does not create eight contexts.
 */
#include "rt.h"

#include <string.h>

/* The runtime's attribute numbers are the driver's (NVIDIA defines them so); the ones this
 * file's property table relies on are checked. */
_Static_assert((int)cudaDevAttrMaxThreadsPerBlock == (int)CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
               "attribute numbering");
_Static_assert((int)cudaDevAttrComputeCapabilityMajor ==
                   (int)CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
               "attribute numbering");
_Static_assert((int)cudaDevAttrMultiProcessorCount == (int)CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
               "attribute numbering");
_Static_assert((int)cudaDevAttrPciBusId == (int)CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
               "attribute numbering");
_Static_assert((int)cudaDevAttrMemoryPoolsSupported == (int)CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
               "attribute numbering");
_Static_assert((int)cudaLimitMallocHeapSize == (int)CU_LIMIT_MALLOC_HEAP_SIZE, "limit numbering");

/* Validate a runtime ordinal after initialising. */
static cudaError_t check_device(int device) {
    cudaError_t st = rt_init();
    if (st != cudaSuccess)
        return st;
    if (device < 0 || device >= rt_device_count())
        return rt_record(cudaErrorInvalidDevice);
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaDriverGetVersion(int *driverVersion) {
    if (driverVersion == NULL)
        return rt_record(cudaErrorInvalidValue);
    *driverVersion = rt_driver_version();
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
    if (runtimeVersion == NULL)
        return rt_record(cudaErrorInvalidValue);
    *runtimeVersion = CUDART_VERSION;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaGetDeviceCount(int *count) {
    if (count == NULL)
        return rt_record(cudaErrorInvalidValue);
    *count = 0;
    cudaError_t st = rt_init();
    if (st != cudaSuccess)
        return st;
    *count = rt_device_count();
    return *count > 0 ? cudaSuccess : rt_record(cudaErrorNoDevice);
}

RT_EXPORT cudaError_t cudaGetDevice(int *device) {
    if (device == NULL)
        return rt_record(cudaErrorInvalidValue);
    return rt_record(rt_current_device(device));
}

RT_EXPORT cudaError_t cudaSetDevice(int device) {
    cudaError_t st = check_device(device);
    if (st != cudaSuccess)
        return st;
    CUcontext primary;
    st = rt_primary(device, &primary);
    if (st != cudaSuccess)
        return rt_record(st);
    st = rt_check(rt_drv.cuCtxSetCurrent(primary));
    if (st == cudaSuccess)
        rt_set_thread_device(device);
    return st;
}

RT_EXPORT cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
    cudaError_t st = check_device(device);
    if (st != cudaSuccess)
        return st;
    if (flags & ~(unsigned int)cudaInitDeviceFlagsAreValid)
        return rt_record(cudaErrorInvalidValue);
    if (flags & cudaInitDeviceFlagsAreValid) {
        st = RT_DRV(cuDevicePrimaryCtxSetFlags, rt_cu_device(device),
                    deviceFlags & ~(unsigned int)cudaDeviceMapHost);
        if (st != cudaSuccess)
            return st;
    }
    CUcontext primary;
    return rt_record(rt_primary(device, &primary));
}

RT_EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags) {
    int device;
    cudaError_t st = rt_current_device(&device);
    if (st != cudaSuccess)
        return rt_record(st);
    if (flags & ~(unsigned int)cudaDeviceMask)
        return rt_record(cudaErrorInvalidValue);
    return RT_DRV(cuDevicePrimaryCtxSetFlags, rt_cu_device(device),
                  flags & ~(unsigned int)cudaDeviceMapHost);
}

RT_EXPORT cudaError_t cudaGetDeviceFlags(unsigned int *flags) {
    if (flags == NULL)
        return rt_record(cudaErrorInvalidValue);
    int device;
    cudaError_t st = rt_current_device(&device);
    if (st != cudaSuccess)
        return rt_record(st);
    unsigned int ctx_flags = 0;
    int active = 0;
    st = RT_DRV(cuDevicePrimaryCtxGetState, rt_cu_device(device), &ctx_flags, &active);
    if (st == cudaSuccess)
        *flags = ctx_flags | cudaDeviceMapHost;
    return st;
}

RT_EXPORT cudaError_t cudaDeviceSynchronize(void) {
    RT_ENTER();
    return RT_DRV(cuCtxSynchronize);
}

RT_EXPORT cudaError_t cudaDeviceReset(void) {
    int device;
    cudaError_t st = rt_current_device(&device);
    if (st != cudaSuccess)
        return rt_record(st);
    CUcontext primary, current = NULL;
    st = rt_primary(device, &primary);
    if (st != cudaSuccess)
        return rt_record(st);
    rt_drv.cuCtxGetCurrent(&current);
    /* Give back this runtime's reference, then reset whatever other retainers hold: the
     * next call on this device starts a fresh primary context. */
    if (rt_drv.cuDevicePrimaryCtxRelease != NULL)
        rt_drv.cuDevicePrimaryCtxRelease(rt_cu_device(device));
    rt_primary_forget(device);
    if (current == primary)
        rt_drv.cuCtxSetCurrent(NULL);
    st = RT_DRV(cuDevicePrimaryCtxReset, rt_cu_device(device));
    return st;
}

RT_EXPORT cudaError_t cudaDeviceGetLimit(size_t *pValue, enum cudaLimit limit) {
    if (pValue == NULL)
        return rt_record(cudaErrorInvalidValue);
    RT_ENTER();
    return RT_DRV(cuCtxGetLimit, pValue, (CUlimit)limit);
}

RT_EXPORT cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value) {
    RT_ENTER();
    return RT_DRV(cuCtxSetLimit, (CUlimit)limit, value);
}

RT_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
    RT_ENTER();
    return RT_DRV(cuCtxGetStreamPriorityRange, leastPriority, greatestPriority);
}

RT_EXPORT cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice) {
    if (canAccessPeer == NULL)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t st = check_device(device);
    if (st == cudaSuccess)
        st = check_device(peerDevice);
    if (st != cudaSuccess)
        return st;
    if (device == peerDevice) {
        *canAccessPeer = 0;
        return cudaSuccess;
    }
    return RT_DRV(cuDeviceCanAccessPeer, canAccessPeer, rt_cu_device(device),
                  rt_cu_device(peerDevice));
}

RT_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
    RT_ENTER();
    cudaError_t st = check_device(peerDevice);
    if (st != cudaSuccess)
        return st;
    if (flags != 0)
        return rt_record(cudaErrorInvalidValue);
    CUcontext peer;
    st = rt_primary(peerDevice, &peer);
    if (st != cudaSuccess)
        return rt_record(st);
    return RT_DRV(cuCtxEnablePeerAccess, peer, 0);
}

RT_EXPORT cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
    RT_ENTER();
    cudaError_t st = check_device(peerDevice);
    if (st != cudaSuccess)
        return st;
    CUcontext peer;
    st = rt_primary(peerDevice, &peer);
    if (st != cudaSuccess)
        return rt_record(st);
    return RT_DRV(cuCtxDisablePeerAccess, peer);
}

RT_EXPORT cudaError_t cudaDeviceGetP2PAttribute(int *value, enum cudaDeviceP2PAttr attr,
                                                int srcDevice, int dstDevice) {
    if (value == NULL)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t st = check_device(srcDevice);
    if (st == cudaSuccess)
        st = check_device(dstDevice);
    if (st != cudaSuccess)
        return st;
    return RT_DRV(cuDeviceGetP2PAttribute, value, (CUdevice_P2PAttribute)attr,
                  rt_cu_device(srcDevice), rt_cu_device(dstDevice));
}

RT_EXPORT cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
    if (pciBusId == NULL || len <= 0)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t st = check_device(device);
    if (st != cudaSuccess)
        return st;
    return RT_DRV(cuDeviceGetPCIBusId, pciBusId, len, rt_cu_device(device));
}

RT_EXPORT cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId) {
    if (device == NULL || pciBusId == NULL)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t st = rt_init();
    if (st != cudaSuccess)
        return st;
    CUdevice dev;
    st = RT_DRV(cuDeviceGetByPCIBusId, &dev, pciBusId);
    if (st != cudaSuccess)
        return st;
    return rt_answer_ordinal(dev, device);
}

RT_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    if (value == NULL)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t st = check_device(device);
    if (st != cudaSuccess)
        return st;
    return RT_DRV(cuDeviceGetAttribute, value, (CUdevice_attribute)attr, rt_cu_device(device));
}

/* Graph memory is memory that graphs allocate; no graph runs here, so all four counters are
 * truthfully zero, and resetting a high-water mark to zero is allowed as on a real device. */
RT_EXPORT cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
                                                     void *value) {
    cudaError_t st = check_device(device);
    if (st != cudaSuccess)
        return st;
    if (value == NULL || (attr != cudaGraphMemAttrUsedMemCurrent &&
                          attr != cudaGraphMemAttrUsedMemHigh &&
                          attr != cudaGraphMemAttrReservedMemCurrent &&
                          attr != cudaGraphMemAttrReservedMemHigh))
        return rt_record(cudaErrorInvalidValue);
    *(cuuint64_t *)value = 0;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
                                                     void *value) {
    cudaError_t st = check_device(device);
    if (st != cudaSuccess)
        return st;
    if (value == NULL ||
        (attr != cudaGraphMemAttrUsedMemHigh && attr != cudaGraphMemAttrReservedMemHigh) ||
        *(cuuint64_t *)value != 0)
        return rt_record(cudaErrorInvalidValue);
    return cudaSuccess;
}

/* One device attribute, 0 where the driver does not answer it. */
static int attribute(CUdevice dev, CUdevice_attribute attr) {
    int value = 0;
    if (rt_drv.cuDeviceGetAttribute == NULL || rt_drv.cuDeviceGetAttribute(&value, attr, dev) != CUDA_SUCCESS)
        return 0;
    return value;
}

static cudaError_t fill_properties(struct cudaDeviceProp *p, int device) {
    if (p == NULL)
        return rt_record(cudaErrorInvalidValue);
    cudaError_t st = check_device(device);
    if (st != cudaSuccess)
        return st;
    CUdevice d = rt_cu_device(device);
    memset(p, 0, sizeof *p);
    st = RT_DRV(cuDeviceGetName, p->name, (int)sizeof p->name, d);
    if (st != cudaSuccess)
        return st;
    CUuuid uuid;
    st = RT_DRV(cuDeviceGetUuid_v2, &uuid, d);
    if (st != cudaSuccess)
        return st;
    memcpy(&p->uuid, &uuid, sizeof p->uuid);
    st = RT_DRV(cuDeviceTotalMem, &p->totalGlobalMem, d);
    if (st != cudaSuccess)
        return st;

#define A(name) attribute(d, CU_DEVICE_ATTRIBUTE_##name)
    p->sharedMemPerBlock = (size_t)A(MAX_SHARED_MEMORY_PER_BLOCK);
    p->regsPerBlock = A(MAX_REGISTERS_PER_BLOCK);
    p->warpSize = A(WARP_SIZE);
    p->memPitch = (size_t)A(MAX_PITCH);
    p->maxThreadsPerBlock = A(MAX_THREADS_PER_BLOCK);
    p->maxThreadsDim[0] = A(MAX_BLOCK_DIM_X);
    p->maxThreadsDim[1] = A(MAX_BLOCK_DIM_Y);
    p->maxThreadsDim[2] = A(MAX_BLOCK_DIM_Z);
    p->maxGridSize[0] = A(MAX_GRID_DIM_X);
    p->maxGridSize[1] = A(MAX_GRID_DIM_Y);
    p->maxGridSize[2] = A(MAX_GRID_DIM_Z);
    p->totalConstMem = (size_t)A(TOTAL_CONSTANT_MEMORY);
    p->major = A(COMPUTE_CAPABILITY_MAJOR);
    p->minor = A(COMPUTE_CAPABILITY_MINOR);
    p->textureAlignment = (size_t)A(TEXTURE_ALIGNMENT);
    p->texturePitchAlignment = (size_t)A(TEXTURE_PITCH_ALIGNMENT);
    p->multiProcessorCount = A(MULTIPROCESSOR_COUNT);
    p->integrated = A(INTEGRATED);
    p->canMapHostMemory = A(CAN_MAP_HOST_MEMORY);
    p->maxTexture1D = A(MAXIMUM_TEXTURE1D_WIDTH);
    p->maxTexture1DMipmap = A(MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH);
    p->maxTexture2D[0] = A(MAXIMUM_TEXTURE2D_WIDTH);
    p->maxTexture2D[1] = A(MAXIMUM_TEXTURE2D_HEIGHT);
    p->maxTexture2DMipmap[0] = A(MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH);
    p->maxTexture2DMipmap[1] = A(MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT);
    p->maxTexture2DLinear[0] = A(MAXIMUM_TEXTURE2D_LINEAR_WIDTH);
    p->maxTexture2DLinear[1] = A(MAXIMUM_TEXTURE2D_LINEAR_HEIGHT);
    p->maxTexture2DLinear[2] = A(MAXIMUM_TEXTURE2D_LINEAR_PITCH);
    p->maxTexture2DGather[0] = A(MAXIMUM_TEXTURE2D_GATHER_WIDTH);
    p->maxTexture2DGather[1] = A(MAXIMUM_TEXTURE2D_GATHER_HEIGHT);
    p->maxTexture3D[0] = A(MAXIMUM_TEXTURE3D_WIDTH);
    p->maxTexture3D[1] = A(MAXIMUM_TEXTURE3D_HEIGHT);
    p->maxTexture3D[2] = A(MAXIMUM_TEXTURE3D_DEPTH);
    p->maxTexture3DAlt[0] = A(MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE);
    p->maxTexture3DAlt[1] = A(MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE);
    p->maxTexture3DAlt[2] = A(MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE);
    p->maxTextureCubemap = A(MAXIMUM_TEXTURECUBEMAP_WIDTH);
    p->maxTexture1DLayered[0] = A(MAXIMUM_TEXTURE1D_LAYERED_WIDTH);
    p->maxTexture1DLayered[1] = A(MAXIMUM_TEXTURE1D_LAYERED_LAYERS);
    p->maxTexture2DLayered[0] = A(MAXIMUM_TEXTURE2D_LAYERED_WIDTH);
    p->maxTexture2DLayered[1] = A(MAXIMUM_TEXTURE2D_LAYERED_HEIGHT);
    p->maxTexture2DLayered[2] = A(MAXIMUM_TEXTURE2D_LAYERED_LAYERS);
    p->maxTextureCubemapLayered[0] = A(MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH);
    p->maxTextureCubemapLayered[1] = A(MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS);
    p->maxSurface1D = A(MAXIMUM_SURFACE1D_WIDTH);
    p->maxSurface2D[0] = A(MAXIMUM_SURFACE2D_WIDTH);
    p->maxSurface2D[1] = A(MAXIMUM_SURFACE2D_HEIGHT);
    p->maxSurface3D[0] = A(MAXIMUM_SURFACE3D_WIDTH);
    p->maxSurface3D[1] = A(MAXIMUM_SURFACE3D_HEIGHT);
    p->maxSurface3D[2] = A(MAXIMUM_SURFACE3D_DEPTH);
    p->maxSurface1DLayered[0] = A(MAXIMUM_SURFACE1D_LAYERED_WIDTH);
    p->maxSurface1DLayered[1] = A(MAXIMUM_SURFACE1D_LAYERED_LAYERS);
    p->maxSurface2DLayered[0] = A(MAXIMUM_SURFACE2D_LAYERED_WIDTH);
    p->maxSurface2DLayered[1] = A(MAXIMUM_SURFACE2D_LAYERED_HEIGHT);
    p->maxSurface2DLayered[2] = A(MAXIMUM_SURFACE2D_LAYERED_LAYERS);
    p->maxSurfaceCubemap = A(MAXIMUM_SURFACECUBEMAP_WIDTH);
    p->maxSurfaceCubemapLayered[0] = A(MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH);
    p->maxSurfaceCubemapLayered[1] = A(MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS);
    p->surfaceAlignment = (size_t)A(SURFACE_ALIGNMENT);
    p->concurrentKernels = A(CONCURRENT_KERNELS);
    p->ECCEnabled = A(ECC_ENABLED);
    p->pciBusID = A(PCI_BUS_ID);
    p->pciDeviceID = A(PCI_DEVICE_ID);
    p->pciDomainID = A(PCI_DOMAIN_ID);
    p->tccDriver = A(TCC_DRIVER);
    p->asyncEngineCount = A(ASYNC_ENGINE_COUNT);
    p->unifiedAddressing = A(UNIFIED_ADDRESSING);
    p->memoryBusWidth = A(GLOBAL_MEMORY_BUS_WIDTH);
    p->l2CacheSize = A(L2_CACHE_SIZE);
    p->persistingL2CacheMaxSize = A(MAX_PERSISTING_L2_CACHE_SIZE);
    p->maxThreadsPerMultiProcessor = A(MAX_THREADS_PER_MULTIPROCESSOR);
    p->streamPrioritiesSupported = A(STREAM_PRIORITIES_SUPPORTED);
    p->globalL1CacheSupported = A(GLOBAL_L1_CACHE_SUPPORTED);
    p->localL1CacheSupported = A(LOCAL_L1_CACHE_SUPPORTED);
    p->sharedMemPerMultiprocessor = (size_t)A(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    p->regsPerMultiprocessor = A(MAX_REGISTERS_PER_MULTIPROCESSOR);
    p->managedMemory = A(MANAGED_MEMORY);
    p->isMultiGpuBoard = A(MULTI_GPU_BOARD);
    p->multiGpuBoardGroupID = A(MULTI_GPU_BOARD_GROUP_ID);
    p->hostNativeAtomicSupported = A(HOST_NATIVE_ATOMIC_SUPPORTED);
    p->pageableMemoryAccess = A(PAGEABLE_MEMORY_ACCESS);
    p->concurrentManagedAccess = A(CONCURRENT_MANAGED_ACCESS);
    p->computePreemptionSupported = A(COMPUTE_PREEMPTION_SUPPORTED);
    p->canUseHostPointerForRegisteredMem = A(CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM);
    p->cooperativeLaunch = A(COOPERATIVE_LAUNCH);
    p->sharedMemPerBlockOptin = (size_t)A(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    p->pageableMemoryAccessUsesHostPageTables = A(PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES);
    p->directManagedMemAccessFromHost = A(DIRECT_MANAGED_MEM_ACCESS_FROM_HOST);
    p->maxBlocksPerMultiProcessor = A(MAX_BLOCKS_PER_MULTIPROCESSOR);
    p->accessPolicyMaxWindowSize = A(MAX_ACCESS_POLICY_WINDOW_SIZE);
    p->reservedSharedMemPerBlock = (size_t)A(RESERVED_SHARED_MEMORY_PER_BLOCK);
    p->hostRegisterSupported = A(HOST_REGISTER_SUPPORTED);
    p->sparseCudaArraySupported = A(SPARSE_CUDA_ARRAY_SUPPORTED);
    p->hostRegisterReadOnlySupported = A(READ_ONLY_HOST_REGISTER_SUPPORTED);
    p->timelineSemaphoreInteropSupported = A(TIMELINE_SEMAPHORE_INTEROP_SUPPORTED);
    p->memoryPoolsSupported = A(MEMORY_POOLS_SUPPORTED);
    p->gpuDirectRDMASupported = A(GPU_DIRECT_RDMA_SUPPORTED);
    p->gpuDirectRDMAFlushWritesOptions = (unsigned int)A(GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS);
    p->gpuDirectRDMAWritesOrdering = A(GPU_DIRECT_RDMA_WRITES_ORDERING);
    p->memoryPoolSupportedHandleTypes = (unsigned int)A(MEMPOOL_SUPPORTED_HANDLE_TYPES);
    p->deferredMappingCudaArraySupported = A(DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED);
    p->ipcEventSupported = A(IPC_EVENT_SUPPORTED);
    p->clusterLaunch = A(CLUSTER_LAUNCH);
    p->unifiedFunctionPointers = A(UNIFIED_FUNCTION_POINTERS);
#if CUDART_VERSION >= 13000
    p->deviceNumaConfig = A(NUMA_CONFIG);
    p->deviceNumaId = A(NUMA_ID);
    p->mpsEnabled = A(MPS_ENABLED);
    p->hostNumaId = A(HOST_NUMA_ID);
    p->gpuPciDeviceID = (unsigned int)A(GPU_PCI_DEVICE_ID);
    p->gpuPciSubsystemID = (unsigned int)A(GPU_PCI_SUBSYSTEM_ID);
    p->hostNumaMultinodeIpcSupported = A(HOST_NUMA_MULTINODE_IPC_SUPPORTED);
#else
    p->clockRate = A(CLOCK_RATE);
    p->deviceOverlap = A(GPU_OVERLAP);
    p->kernelExecTimeoutEnabled = A(KERNEL_EXEC_TIMEOUT);
    p->computeMode = A(COMPUTE_MODE);
    p->maxTexture1DLinear = A(MAXIMUM_TEXTURE1D_LINEAR_WIDTH);
    p->memoryClockRate = A(MEMORY_CLOCK_RATE);
    p->singleToDoublePrecisionPerfRatio = A(SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO);
    p->cooperativeMultiDeviceLaunch = A(COOPERATIVE_MULTI_DEVICE_LAUNCH);
#endif
#undef A
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    return fill_properties(prop, device);
}

#if CUDART_VERSION < 13000
/* CUDA 12 headers call the current struct's query cudaGetDeviceProperties_v2; the unversioned
 * name stays exported for programs built against the first 12.x headers. */
RT_EXPORT cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *prop, int device) {
    return fill_properties(prop, device);
}
#endif
