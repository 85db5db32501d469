/*
 * The per-thread default stream variants (_ptds, _ptsz) of the modelled copies and memsets.
 * They differ from the legacy ones only in which stream NULL means; every operation here is
 * done at the call, so each forwards to its legacy twin.
 */
#include "mock_cu.h"

MOCK_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount);
}

MOCK_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount);
}

MOCK_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return cuMemcpyDtoD_v2(dstDevice, srcDevice, ByteCount);
}

MOCK_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return cuMemcpy(dst, src, ByteCount);
}

MOCK_EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                       CUcontext srcContext, size_t ByteCount)
{
    return cuMemcpyPeer(dstDevice, dstContext, srcDevice, srcContext, ByteCount);
}

MOCK_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
    return cuMemcpy2D_v2(pCopy);
}

MOCK_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
    return cuMemcpy2DUnaligned_v2(pCopy);
}

MOCK_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                               CUstream hStream)
{
    return cuMemcpyHtoDAsync_v2(dstDevice, srcHost, ByteCount, hStream);
}

MOCK_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                               CUstream hStream)
{
    return cuMemcpyDtoHAsync_v2(dstHost, srcDevice, ByteCount, hStream);
}

MOCK_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                               CUstream hStream)
{
    return cuMemcpyDtoDAsync_v2(dstDevice, srcDevice, ByteCount, hStream);
}

MOCK_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return cuMemcpyAsync(dst, src, ByteCount, hStream);
}

MOCK_EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                            CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
    return cuMemcpyPeerAsync(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream);
}

MOCK_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return cuMemcpy2DAsync_v2(pCopy, hStream);
}

MOCK_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return cuMemsetD8_v2(dstDevice, uc, N);
}

MOCK_EXPORT CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    return cuMemsetD16_v2(dstDevice, us, N);
}

MOCK_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return cuMemsetD32_v2(dstDevice, ui, N);
}

MOCK_EXPORT CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                                          size_t Height)
{
    return cuMemsetD2D8_v2(dstDevice, dstPitch, uc, Width, Height);
}

MOCK_EXPORT CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                                           size_t Height)
{
    return cuMemsetD2D16_v2(dstDevice, dstPitch, us, Width, Height);
}

MOCK_EXPORT CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                                           size_t Height)
{
    return cuMemsetD2D32_v2(dstDevice, dstPitch, ui, Width, Height);
}

MOCK_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return cuMemsetD8Async(dstDevice, uc, N, hStream);
}

MOCK_EXPORT CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    return cuMemsetD16Async(dstDevice, us, N, hStream);
}

MOCK_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return cuMemsetD32Async(dstDevice, ui, N, hStream);
}

MOCK_EXPORT CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                                            size_t Height, CUstream hStream)
{
    return cuMemsetD2D8Async(dstDevice, dstPitch, uc, Width, Height, hStream);
}

MOCK_EXPORT CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                             size_t Width, size_t Height, CUstream hStream)
{
    return cuMemsetD2D16Async(dstDevice, dstPitch, us, Width, Height, hStream);
}

MOCK_EXPORT CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                                             size_t Height, CUstream hStream)
{
    return cuMemsetD2D32Async(dstDevice, dstPitch, ui, Width, Height, hStream);
}

MOCK_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    CUresult r = mock_cu_stream_check(hStream);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    if (captureStatus == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE; /* capture is not modelled: it never starts */
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return cuStreamIsCapturing(hStream, captureStatus);
}
