/*
 * Device Queries (nvml.h), the ECC part: ECC mode and error counters, retired pages and
 * remapped rows.
 *
 * The counters come from the state (all zero on a healthy board). A board without ECC
 * (ecc_supported=0) answers NOT_SUPPORTED everywhere, as a GeForce card would. Retired
 * page addresses are synthesised from the GPU's board index so repeated reads agree (in
 * every view of the node's GPUs). Ampere
 * replaced page retirement with row remapping: older boards (a T4) answer NOT_SUPPORTED to
 * the remapped-row and histogram queries, newer ones to the retired-page queries (the state
 * keys remapped_rows_supported and retired_pages_supported, defaulted by architecture).
 */
#include "mig.h"
#include "mock.h"

#include <string.h>

#define REQUIRE_ECC(d)                           \
    do {                                         \
        if (!(d)->s.ecc_supported) {             \
            return NVML_ERROR_NOT_SUPPORTED;     \
        }                                        \
    } while (0)

#define REQUIRE_RETIRE(d)                                              \
    do {                                                               \
        if (!(d)->s.ecc_supported || !(d)->s.retired_pages_supported) { \
            return NVML_ERROR_NOT_SUPPORTED;                           \
        }                                                              \
    } while (0)

#define REQUIRE_REMAP(d)                                               \
    do {                                                               \
        if (!(d)->s.ecc_supported || !(d)->s.remapped_rows_supported) { \
            return NVML_ERROR_NOT_SUPPORTED;                           \
        }                                                              \
    } while (0)

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(current);
    REQUIRE_ARG(pending);
    REQUIRE_ECC(d);
    *current = live_ecc_enabled(d) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    /* `nvidia-smi -e` sets the pending mode (live-only ecc_pending); a reset makes it current */
    uint64_t next = live_ecc_pending(d);
    *pending = next == 0 ? *current : next == 2 ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetDefaultEccMode(nvmlDevice_t device, nvmlEnableState_t *defaultMode)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(defaultMode);
    REQUIRE_ECC(d);
    *defaultMode = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

static nvmlReturn_t ecc_count(const struct nvmlDevice_st *d, nvmlMemoryErrorType_t errorType,
                              nvmlEccCounterType_t counterType, unsigned long long *out)
{
    int corrected;
    if (errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED) {
        corrected = 1;
    } else if (errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED) {
        corrected = 0;
    } else {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (counterType == NVML_VOLATILE_ECC) {
        *out = corrected ? live_ecc_volatile_corrected(d) : live_ecc_volatile_uncorrected(d);
    } else if (counterType == NVML_AGGREGATE_ECC) {
        *out = corrected ? live_ecc_aggregate_corrected(d) : live_ecc_aggregate_uncorrected(d);
    } else {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                     nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
    struct mock_mig_view mig;
    nvmlReturn_t mig_rc;
    if (mock_mig_device(device, &mig, &mig_rc)) {
        /* a MIG device counts its parent's errors (the MIG devices box prints them) */
        if (mig_rc != NVML_SUCCESS) {
            return mig_rc;
        }
        device = (nvmlDevice_t)(uintptr_t)mig.parent;
    }
    GET_DEVICE(device, d);
    REQUIRE_ARG(eccCounts);
    REQUIRE_ECC(d);
    if (!live_ecc_enabled(d)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return ecc_count(d, errorType, counterType, eccCounts);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetDetailedEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                        nvmlEccCounterType_t counterType,
                                                        nvmlEccErrorCounts_t *eccCounts)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(eccCounts);
    REQUIRE_ECC(d);
    if (!live_ecc_enabled(d)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    unsigned long long dram = 0;
    nvmlReturn_t rc = ecc_count(d, errorType, counterType, &dram);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    memset(eccCounts, 0, sizeof(*eccCounts));
    eccCounts->deviceMemory = dram;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                         nvmlEccCounterType_t counterType,
                                                         nvmlMemoryLocation_t locationType, unsigned long long *count)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(count);
    REQUIRE_ECC(d);
    if (!live_ecc_enabled(d)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    unsigned long long dram = 0;
    nvmlReturn_t rc = ecc_count(d, errorType, counterType, &dram);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    switch (locationType) {
    case NVML_MEMORY_LOCATION_DEVICE_MEMORY: *count = dram; return NVML_SUCCESS;
    case NVML_MEMORY_LOCATION_L1_CACHE:
    case NVML_MEMORY_LOCATION_L2_CACHE:
    case NVML_MEMORY_LOCATION_REGISTER_FILE:
        /* From Ada on the driver counts these only inside the SRAM total: the per-structure
         * counters answer NOT_SUPPORTED (the L40S and H100 captures of 595 and 590 print
         * [N/A] there and 0 for SRAM). */
        if (d->s.architecture >= NVML_DEVICE_ARCH_ADA) {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        *count = 0;
        return NVML_SUCCESS;
    case NVML_MEMORY_LOCATION_SRAM: *count = 0; return NVML_SUCCESS;
    case NVML_MEMORY_LOCATION_TEXTURE_MEMORY:
    case NVML_MEMORY_LOCATION_TEXTURE_SHM:
    case NVML_MEMORY_LOCATION_CBU: return NVML_ERROR_NOT_SUPPORTED;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

static unsigned int retired_count(const struct nvmlDevice_st *d, nvmlPageRetirementCause_t cause)
{
    return cause == NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS ? live_retired_pages_sbe(d)
                                                                               : live_retired_pages_dbe(d);
}

static nvmlReturn_t retired_pages(nvmlDevice_t device, nvmlPageRetirementCause_t cause, unsigned int *pageCount,
                                  unsigned long long *addresses, unsigned long long *timestamps)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(pageCount);
    REQUIRE_RETIRE(d);
    if (cause != NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS &&
        cause != NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned int have = *pageCount;
    if (have != 0 && addresses == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT; /* only a zero count may come without a buffer */
    }
    unsigned int n = retired_count(d, cause);
    *pageCount = n;
    if (n == 0) {
        return NVML_SUCCESS;
    }
    if (have < n) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        /* page frame numbers: distinct per GPU, cause and page */
        addresses[i] = 0x100000ULL + ((unsigned long long)d->board << 16) + ((unsigned long long)cause << 12) + i;
        if (timestamps != NULL) {
            timestamps[i] = 1700000000ULL + i;
        }
    }
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                                   unsigned int *pageCount, unsigned long long *addresses)
{
    return retired_pages(device, cause, pageCount, addresses, NULL);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                                      unsigned int *pageCount, unsigned long long *addresses,
                                                      unsigned long long *timestamps)
{
    return retired_pages(device, cause, pageCount, addresses, timestamps);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(isPending);
    REQUIRE_RETIRE(d);
    *isPending = live_retired_pages_pending(d) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                                   unsigned int *isPending, unsigned int *failureOccurred)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(corrRows);
    REQUIRE_ARG(uncRows);
    REQUIRE_ARG(isPending);
    REQUIRE_ARG(failureOccurred);
    REQUIRE_REMAP(d);
    *corrRows = live_remapped_rows_correctable(d);
    *uncRows = live_remapped_rows_uncorrectable(d);
    *isPending = live_remapped_rows_pending(d);
    *failureOccurred = live_remapped_rows_failure(d);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows_v2(nvmlDevice_t device, nvmlRemappedRowsInfo_v2_t *info)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(info);
    REQUIRE_REMAP(d);
    memset(info, 0, sizeof(*info));
    info->corrActiveRemaps = live_remapped_rows_correctable(d);
    info->uncActiveRemaps = live_remapped_rows_uncorrectable(d);
    info->bPending = live_remapped_rows_pending(d);
    info->bFailureOccurred = live_remapped_rows_failure(d);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device, nvmlRowRemapperHistogramValues_t *values)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(values);
    REQUIRE_REMAP(d);
    /* Banks with all remap slots free ("max"), one used slot per remapped row otherwise. */
    unsigned long long rows = (unsigned long long)live_remapped_rows_correctable(d) + live_remapped_rows_uncorrectable(d);
    unsigned int banks = d->s.row_remapper_banks;
    unsigned int used = rows < banks ? (unsigned int)rows : banks;
    memset(values, 0, sizeof(*values));
    values->max = banks - used;
    values->high = used;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t device, nvmlEccSramErrorStatus_t *status)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(status);
    if (status->version != nvmlEccSramErrorStatus_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    REQUIRE_ECC(d);
    memset(status, 0, sizeof(*status));
    status->version = nvmlEccSramErrorStatus_v1; /* SRAM counters stay at zero */
    return NVML_SUCCESS;
}

/* Channel / TPC repair is reported from Ada on. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetRepairStatus(nvmlDevice_t device, nvmlRepairStatus_t *repairStatus)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(repairStatus);
    if (repairStatus->version != nvmlRepairStatus_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (d->s.architecture < NVML_DEVICE_ARCH_ADA) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    repairStatus->bChannelRepairPending = 0;
    repairStatus->bTpcRepairPending = 0;
    return NVML_SUCCESS;
}

/* Memory the row remapper can no longer repair (nvidia-smi's "Unrepairable Memory"). */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetUnrepairableMemoryFlag_v1(nvmlDevice_t device,
                                                               nvmlUnrepairableMemoryStatus_v1_t *status)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(status);
    if (live_unrepairable_memory(d) < 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    status->bUnrepairableMemory = (unsigned int)live_unrepairable_memory(d);
    return NVML_SUCCESS;
}
