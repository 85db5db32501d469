/*
 * cuGetProcAddress: runtimes (cudart 11.3+, cuda-bindings, numba-cuda) fetch every entry point
 * by name and by the CUDA version whose signature they were compiled against. The table is
 * generated at build time from NVIDIA's cudaTypedefs.h (gen_procs.awk), each entry checked by
 * the compiler against the symbol that answers it. An unknown name is "not found", which
 * every runtime tolerates.
 *
 * cuGetExportTable refuses every table: NVIDIA's runtimes ask it for private tables and run
 * an integrity check only NVIDIA's driver passes. That check is NVIDIA's anti-tamper scheme
 * and is not re-implemented: such a runtime gets this error and reports it.
 */
#include <string.h>

#include "mock_cu.h"

#include "procs_gen.h"

#define PROC_COUNT (sizeof(mock_cu_procs) / sizeof(mock_cu_procs[0]))

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    if (symbol == NULL || pfn == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    int want_ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct mock_cu_proc *plain = NULL, *ptds = NULL;
    int known = 0;
    for (size_t i = 0; i < PROC_COUNT; i++) {
        const struct mock_cu_proc *p = &mock_cu_procs[i];
        if (strcmp(p->name, symbol) != 0) {
            continue;
        }
        known = 1;
        if (p->version > cudaVersion) {
            continue;
        }
        const struct mock_cu_proc **best = p->per_thread ? &ptds : &plain;
        if (*best == NULL || (*best)->version < p->version) {
            *best = p;
        }
    }
    const struct mock_cu_proc *found = want_ptds && ptds != NULL ? ptds : plain;
    if (found == NULL) {
        *pfn = NULL;
        if (status != NULL) {
            *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        }
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = found->fn;
    if (status != NULL) {
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    }
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

MOCK_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *symbolStatus)
{
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

MOCK_EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (ppExportTable == NULL || pExportTableId == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *ppExportTable = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}
