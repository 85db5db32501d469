/*
 * Field Value Queries (nvml.h): nvmlDeviceGetFieldValues, the batched counters that
 * `nvidia-smi -q` and DCGM read (ECC, retired pages, remapped rows, NVLink speeds and error
 * counters, power, energy, memory temperature, thresholds, PCIe counters).
 *
 * Each requested field gets its own nvmlReturn; fields the board does not have answer
 * NOT_SUPPORTED while the call itself succeeds, as NVML does.
 */
#include "mock.h"
#include "telemetry.h"

#include <string.h>
#include <time.h>

static void set_uint(nvmlFieldValue_t *v, unsigned int x)
{
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v->value.uiVal = x;
    v->nvmlReturn = NVML_SUCCESS;
}

static void set_ull(nvmlFieldValue_t *v, unsigned long long x)
{
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    v->value.ullVal = x;
    v->nvmlReturn = NVML_SUCCESS;
}

static void set_sint(nvmlFieldValue_t *v, int x)
{
    v->valueType = NVML_VALUE_TYPE_SIGNED_INT;
    v->value.siVal = x;
    v->nvmlReturn = NVML_SUCCESS;
}

/* What a per-link field answers. */
enum link_value {
    LINK_SPEED,    /* the link's speed (0 while it is down) */
    LINK_CRC,      /* error counters: the live counter while the link is down, else 0 */
    LINK_REPLAY,
    LINK_RECOVERY,
    LINK_ZERO,     /* bandwidth and ECC counters: no traffic, no fault raises them */
};

/* Field ranges whose members are per-link values: first id, link of the first id. */
struct link_range {
    unsigned int first;
    unsigned int last;
    unsigned int first_link; /* link of `first` */
    enum link_value value;
};

static const struct link_range link_ranges[] = {
    {NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L5, 0, LINK_CRC},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L5, 0, LINK_CRC},
    {NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L5, 0, LINK_REPLAY},
    {NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L5, 0, LINK_RECOVERY},
    {NVML_FI_DEV_NVLINK_BANDWIDTH_C0_L0, NVML_FI_DEV_NVLINK_BANDWIDTH_C0_L5, 0, LINK_ZERO},
    {NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L0, NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L5, 0, LINK_ZERO},
    {NVML_FI_DEV_NVLINK_SPEED_MBPS_L0, NVML_FI_DEV_NVLINK_SPEED_MBPS_L5, 0, LINK_SPEED},
    {NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L6, NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L11, 6, LINK_CRC},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6, NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L11, 6, LINK_CRC},
    {NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L6, NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L11, 6, LINK_REPLAY},
    {NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L6, NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L11, 6, LINK_RECOVERY},
    {NVML_FI_DEV_NVLINK_BANDWIDTH_C0_L6, NVML_FI_DEV_NVLINK_BANDWIDTH_C0_L11, 6, LINK_ZERO},
    {NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L6, NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L11, 6, LINK_ZERO},
    {NVML_FI_DEV_NVLINK_SPEED_MBPS_L6, NVML_FI_DEV_NVLINK_SPEED_MBPS_L11, 6, LINK_SPEED},
    {NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L11, 0, LINK_ZERO},
};

static uint64_t link_value(const struct nvmlDevice_st *d, unsigned int link, enum link_value what)
{
    switch (what) {
    case LINK_SPEED: return mock_nvlink_is_down(d, link) ? 0 : mock_nvlink_link_mbps(d->s.nvlink_version);
    case LINK_CRC: return mock_nvlink_errors(d, link, NVML_NVLINK_ERROR_DL_CRC_FLIT);
    case LINK_REPLAY: return mock_nvlink_errors(d, link, NVML_NVLINK_ERROR_DL_REPLAY);
    case LINK_RECOVERY: return mock_nvlink_errors(d, link, NVML_NVLINK_ERROR_DL_RECOVERY);
    default: return 0;
    }
}

/* A device total of per-link error counters: the live counter times the links down
 * (saturating). */
static uint64_t link_total(const struct nvmlDevice_st *d, nvmlNvLinkErrorCounter_t counter)
{
    uint64_t total = 0;
    uint64_t down = mock_nvlink_down(d);
    while (down != 0) {
        unsigned int link = (unsigned int)__builtin_ctzll(down);
        down &= down - 1u;
        uint64_t v = mock_nvlink_errors(d, link, counter);
        total = total > UINT64_MAX - v ? UINT64_MAX : total + v;
    }
    return total;
}

/* The links up: the board's links less those down. */
static unsigned int links_up(const struct nvmlDevice_st *d)
{
    return d->s.nvlink_count - (unsigned int)__builtin_popcountll(mock_nvlink_down(d));
}

static int fill_link_field(const struct nvmlDevice_st *d, nvmlFieldValue_t *v)
{
    for (size_t i = 0; i < sizeof(link_ranges) / sizeof(link_ranges[0]); i++) {
        const struct link_range *r = &link_ranges[i];
        if (v->fieldId < r->first || v->fieldId > r->last) {
            continue;
        }
        unsigned int link = r->first_link + (v->fieldId - r->first);
        if (d->s.nvlink_count == 0) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        } else if (link >= d->s.nvlink_count) {
            v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
        } else if (r->value == LINK_SPEED) {
            set_uint(v, (unsigned int)link_value(d, link, r->value));
        } else {
            set_ull(v, link_value(d, link, r->value));
        }
        return 1;
    }
    return 0;
}

/* A field whose link is named by scopeId (NVML_FI_DEV_NVLINK_ERROR_DL_*, GET_SPEED, GET_STATE):
 * 1 with v answered (NOT_SUPPORTED without links, INVALID_ARGUMENT past them), 0 when `v`
 * should be filled by the caller for link v->scopeId. */
static int scoped_link_refused(const struct nvmlDevice_st *d, nvmlFieldValue_t *v)
{
    if (d->s.nvlink_count == 0) {
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        return 1;
    }
    if (v->scopeId >= d->s.nvlink_count) {
        v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
        return 1;
    }
    return 0;
}

static int ecc_field(const struct nvmlDevice_st *d, nvmlFieldValue_t *v)
{
    unsigned int id = v->fieldId;
    if (id < NVML_FI_DEV_ECC_CURRENT || id > NVML_FI_DEV_RETIRED_PENDING) {
        if (id != NVML_FI_DEV_RETIRED_PENDING_SBE && id != NVML_FI_DEV_RETIRED_PENDING_DBE &&
            (id < NVML_FI_DEV_REMAPPED_COR || id > NVML_FI_DEV_REMAPPED_FAILURE)) {
            return 0;
        }
    }
    int remap = id >= NVML_FI_DEV_REMAPPED_COR && id <= NVML_FI_DEV_REMAPPED_FAILURE;
    int retire = id == NVML_FI_DEV_RETIRED_SBE || id == NVML_FI_DEV_RETIRED_DBE ||
                 id == NVML_FI_DEV_RETIRED_PENDING || id == NVML_FI_DEV_RETIRED_PENDING_SBE ||
                 id == NVML_FI_DEV_RETIRED_PENDING_DBE;
    if (!d->s.ecc_supported || (remap && !d->s.remapped_rows_supported) ||
        (retire && !d->s.retired_pages_supported)) {
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        return 1;
    }
    switch (id) {
    case NVML_FI_DEV_ECC_CURRENT: set_uint(v, live_ecc_enabled(d)); break;
    case NVML_FI_DEV_ECC_PENDING:
        set_uint(v, live_ecc_pending(d) == 0 ? live_ecc_enabled(d) : live_ecc_pending(d) == 2);
        break;
    case NVML_FI_DEV_ECC_SBE_VOL_TOTAL:
    case NVML_FI_DEV_ECC_SBE_VOL_DEV: set_ull(v, live_ecc_volatile_corrected(d)); break;
    case NVML_FI_DEV_ECC_DBE_VOL_TOTAL:
    case NVML_FI_DEV_ECC_DBE_VOL_DEV: set_ull(v, live_ecc_volatile_uncorrected(d)); break;
    case NVML_FI_DEV_ECC_SBE_AGG_TOTAL:
    case NVML_FI_DEV_ECC_SBE_AGG_DEV: set_ull(v, live_ecc_aggregate_corrected(d)); break;
    case NVML_FI_DEV_ECC_DBE_AGG_TOTAL:
    case NVML_FI_DEV_ECC_DBE_AGG_DEV: set_ull(v, live_ecc_aggregate_uncorrected(d)); break;
    case NVML_FI_DEV_ECC_SBE_VOL_L1:
    case NVML_FI_DEV_ECC_DBE_VOL_L1:
    case NVML_FI_DEV_ECC_SBE_VOL_L2:
    case NVML_FI_DEV_ECC_DBE_VOL_L2:
    case NVML_FI_DEV_ECC_SBE_VOL_REG:
    case NVML_FI_DEV_ECC_DBE_VOL_REG:
    case NVML_FI_DEV_ECC_SBE_AGG_L1:
    case NVML_FI_DEV_ECC_DBE_AGG_L1:
    case NVML_FI_DEV_ECC_SBE_AGG_L2:
    case NVML_FI_DEV_ECC_DBE_AGG_L2:
    case NVML_FI_DEV_ECC_SBE_AGG_REG:
    case NVML_FI_DEV_ECC_DBE_AGG_REG: set_ull(v, 0); break;
    case NVML_FI_DEV_RETIRED_SBE: set_ull(v, live_retired_pages_sbe(d)); break;
    case NVML_FI_DEV_RETIRED_DBE: set_ull(v, live_retired_pages_dbe(d)); break;
    case NVML_FI_DEV_RETIRED_PENDING:
    case NVML_FI_DEV_RETIRED_PENDING_SBE:
    case NVML_FI_DEV_RETIRED_PENDING_DBE: set_ull(v, live_retired_pages_pending(d)); break;
    case NVML_FI_DEV_REMAPPED_COR: set_uint(v, live_remapped_rows_correctable(d)); break;
    case NVML_FI_DEV_REMAPPED_UNC: set_uint(v, live_remapped_rows_uncorrectable(d)); break;
    case NVML_FI_DEV_REMAPPED_PENDING: set_uint(v, live_remapped_rows_pending(d)); break;
    case NVML_FI_DEV_REMAPPED_FAILURE: set_uint(v, live_remapped_rows_failure(d)); break;
    default: v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; break; /* texture / CBU counters */
    }
    return 1;
}

static void set_threshold(nvmlFieldValue_t *v, unsigned int c)
{
    if (c == 0) {
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    } else {
        set_sint(v, (int)c);
    }
}

/* GA100 (the A100, A30) is the Ampere chip without the averaged power reading. */
static int is_ga100(const struct nvmlDevice_st *d)
{
    return d->s.architecture == NVML_DEVICE_ARCH_AMPERE && (d->s.pci_device_id >> 24) == 0x20;
}

/*
 * A power reading or limit in milliwatts by scope; 0 = NOT_SUPPORTED. The GPU scope comes
 * from the main power keys (the averaged reading from Ampere on, except GA100, as nvml.h
 * documents); the memory scope has an averaged reading only; the module scope (a
 * Grace-Blackwell module) has its own readings and limits.
 */
static unsigned int power_reading(const struct nvmlDevice_st *d, unsigned int field, unsigned int scope)
{
    const struct state_gpu *s = &d->s;
    switch (scope) {
    case NVML_POWER_SCOPE_GPU:
        switch (field) {
        case NVML_FI_DEV_POWER_AVERAGE:
        {
            if (s->architecture < NVML_DEVICE_ARCH_AMPERE || is_ga100(d)) {
                return 0;
            }
            /* one read of each key: two reads of one key may straddle a live write */
            unsigned int average = live_power_average_mw(d);
            return tele_power_average_mw(d, average != 0 ? average : live_power_usage_mw(d));
        }
        case NVML_FI_DEV_POWER_INSTANT: return tele_power_usage_mw(d);
        case NVML_FI_DEV_POWER_MIN_LIMIT: return s->power_min_limit_mw;
        case NVML_FI_DEV_POWER_MAX_LIMIT: return s->power_max_limit_mw;
        case NVML_FI_DEV_POWER_DEFAULT_LIMIT: return s->power_default_limit_mw;
        default: return live_power_limit_mw(d); /* current and requested */
        }
    case NVML_POWER_SCOPE_MEMORY: return field == NVML_FI_DEV_POWER_AVERAGE ? live_memory_power_average_mw(d) : 0;
    case NVML_POWER_SCOPE_MODULE:
        if (live_module_power_limit_mw(d) == 0) {
            return 0;
        }
        switch (field) {
        case NVML_FI_DEV_POWER_AVERAGE: return live_module_power_average_mw(d);
        case NVML_FI_DEV_POWER_INSTANT: return live_module_power_usage_mw(d);
        case NVML_FI_DEV_POWER_MIN_LIMIT: return s->module_power_min_limit_mw;
        case NVML_FI_DEV_POWER_MAX_LIMIT: return s->module_power_max_limit_mw;
        case NVML_FI_DEV_POWER_DEFAULT_LIMIT: return s->module_power_default_limit_mw;
        default: return live_module_power_limit_mw(d);
        }
    default: return 0;
    }
}

/* The NVLink throughput counters (KiB since the utilization pattern began; 0 idle). */
static unsigned long long nvlink_throughput_kib(const struct nvmlDevice_st *d, unsigned int field)
{
    switch (field) {
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: return tele_nvlink_data_tx_kib(d);
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: return tele_nvlink_data_rx_kib(d);
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX: return tele_nvlink_raw_tx_kib(d);
    default: return tele_nvlink_raw_rx_kib(d);
    }
}

static void fill_field(const struct nvmlDevice_st *d, nvmlFieldValue_t *v)
{
    if (ecc_field(d, v) || fill_link_field(d, v)) {
        return;
    }
    int have_links = d->s.nvlink_count > 0;
    int power = live_power_limit_mw(d) > 0;
    switch (v->fieldId) {
    case NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL:
    case NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL:
    case NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL:
    case NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL:
        if (!have_links) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        } else {
            nvmlNvLinkErrorCounter_t c = v->fieldId == NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL ? NVML_NVLINK_ERROR_DL_REPLAY
                                         : v->fieldId == NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL
                                             ? NVML_NVLINK_ERROR_DL_RECOVERY
                                             : NVML_NVLINK_ERROR_DL_CRC_FLIT;
            set_ull(v, link_total(d, c));
        }
        return;
    case NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL:
    case NVML_FI_DEV_NVLINK_BANDWIDTH_C1_TOTAL:
    case NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL:
        if (have_links) {
            set_ull(v, 0);
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
        return;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX:
        if (have_links) {
            set_ull(v, nvlink_throughput_kib(d, v->fieldId));
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
        return;
    case NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY:
    case NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY:
    case NVML_FI_DEV_NVLINK_ERROR_DL_CRC:
        if (!scoped_link_refused(d, v)) {
            nvmlNvLinkErrorCounter_t c = v->fieldId == NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY     ? NVML_NVLINK_ERROR_DL_REPLAY
                                         : v->fieldId == NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY ? NVML_NVLINK_ERROR_DL_RECOVERY
                                                                                              : NVML_NVLINK_ERROR_DL_CRC_FLIT;
            set_ull(v, mock_nvlink_errors(d, v->scopeId, c));
        }
        return;
    case NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON:
        if (have_links) {
            set_uint(v, mock_nvlink_link_mbps(d->s.nvlink_version));
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
        return;
    case NVML_FI_DEV_NVLINK_GET_SPEED:
        if (!scoped_link_refused(d, v)) {
            set_uint(v, (unsigned int)link_value(d, v->scopeId, LINK_SPEED));
        }
        return;
    case NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID:
        if (!scoped_link_refused(d, v)) {
            unsigned int remote = 0;
            v->nvmlReturn = mock_nvlink_remote_link(d, v->scopeId, &remote);
            if (v->nvmlReturn == NVML_SUCCESS) {
                set_uint(v, remote);
            }
        }
        return;
    case NVML_FI_DEV_NVLINK_LINK_COUNT: set_uint(v, links_up(d)); return;
    case NVML_FI_DEV_NVLINK_GET_STATE:
        if (!scoped_link_refused(d, v)) {
            set_uint(v, mock_nvlink_is_down(d, v->scopeId) ? NVML_NVLINK_STATE_INACTIVE : NVML_NVLINK_STATE_ACTIVE);
        }
        return;
    case NVML_FI_DEV_NVLINK_GET_VERSION:
        if (have_links) {
            set_uint(v, d->s.nvlink_version);
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
        return;
    case NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT:
        if (have_links) {
            set_uint(v, d->s.nvlink_remote_count > 0 ? links_up(d) : 0);
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
        return;
    case NVML_FI_DEV_PERF_POLICY_POWER:
    case NVML_FI_DEV_PERF_POLICY_THERMAL:
    case NVML_FI_DEV_PERF_POLICY_SYNC_BOOST:
    case NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT:
    case NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION:
    case NVML_FI_DEV_PERF_POLICY_RELIABILITY:
    case NVML_FI_DEV_PERF_POLICY_TOTAL_APP_CLOCKS:
    case NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS:
    case NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN:
    case NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN:
    case NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: set_ull(v, 0); return;
    case NVML_FI_DEV_MEMORY_TEMP: {
        unsigned int c = tele_memory_temperature_c(d);
        if (c == 0) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        } else {
            set_uint(v, c);
        }
        return;
    }
    case NVML_FI_DEV_GPU_TEMP: set_uint(v, tele_temperature_c(d)); return;
    case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
    case NVML_FI_DEV_ENERGY: set_ull(v, tele_energy_mj(d)); return;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER: set_uint(v, live_pcie_replay_counter(d)); return;
    case NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER:
    case NVML_FI_DEV_PCIE_L0_TO_RECOVERY_COUNTER:
    case NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS:
    case NVML_FI_DEV_PCIE_COUNT_NAKS_RECEIVED:
    case NVML_FI_DEV_PCIE_COUNT_RECEIVER_ERROR:
    case NVML_FI_DEV_PCIE_COUNT_BAD_TLP:
    case NVML_FI_DEV_PCIE_COUNT_NAKS_SENT:
    case NVML_FI_DEV_PCIE_COUNT_BAD_DLLP:
    case NVML_FI_DEV_PCIE_COUNT_NON_FATAL_ERROR:
    case NVML_FI_DEV_PCIE_COUNT_FATAL_ERROR:
    case NVML_FI_DEV_PCIE_COUNT_UNSUPPORTED_REQ:
    case NVML_FI_DEV_PCIE_COUNT_LCRC_ERROR:
    case NVML_FI_DEV_PCIE_COUNT_LANE_ERROR: set_uint(v, 0); return;
    case NVML_FI_DEV_PCIE_COUNT_TX_BYTES: set_ull(v, tele_pcie_tx_bytes(d)); return;
    case NVML_FI_DEV_PCIE_COUNT_RX_BYTES: set_ull(v, tele_pcie_rx_bytes(d)); return;
    case NVML_FI_DEV_IS_RESETLESS_MIG_SUPPORTED: set_uint(v, 0); return;
    case NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: set_uint(v, (unsigned int)live_recovery_action(d)); return;
    case NVML_FI_DEV_EDPP_MULTIPLIER:
        if (d->s.edpp_multiplier_pct != 0) {
            set_uint(v, d->s.edpp_multiplier_pct);
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
        return;
    case NVML_FI_DEV_PCIE_OUTBOUND_ATOMICS_MASK:
    case NVML_FI_DEV_PCIE_INBOUND_ATOMICS_MASK: {
        unsigned int mask = v->fieldId == NVML_FI_DEV_PCIE_OUTBOUND_ATOMICS_MASK ? d->s.pcie_atomics_outbound
                                                                                : d->s.pcie_atomics_inbound;
        if (mask != 0) {
            set_uint(v, mask);
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
        return;
    }
    case NVML_FI_DEV_IS_MIG_MODE_INDEPENDENT_MIG_QUERY_CAPABLE: set_uint(v, d->s.mig_capable); return;
    case NVML_FI_DEV_C2C_LINK_COUNT:
        if (d->s.c2c_enabled) {
            set_uint(v, 1);
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
        return;
    case NVML_FI_DEV_POWER_AVERAGE:
    case NVML_FI_DEV_POWER_INSTANT:
    case NVML_FI_DEV_POWER_MIN_LIMIT:
    case NVML_FI_DEV_POWER_MAX_LIMIT:
    case NVML_FI_DEV_POWER_DEFAULT_LIMIT:
    case NVML_FI_DEV_POWER_CURRENT_LIMIT:
    case NVML_FI_DEV_POWER_REQUESTED_LIMIT: {
        unsigned int mw = power ? power_reading(d, v->fieldId, v->scopeId) : 0;
        if (mw == 0) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        } else {
            set_uint(v, mw);
        }
        return;
    }
    case NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT: set_threshold(v, d->s.temp_shutdown_c); return;
    case NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT: set_threshold(v, d->s.temp_slowdown_c); return;
    case NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT: set_threshold(v, d->s.temp_mem_max_c); return;
    case NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT: set_threshold(v, d->s.temp_gpu_max_c); return;
    default:
        v->nvmlReturn = v->fieldId >= NVML_FI_MAX ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
        return;
    }
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    GET_DEVICE(device, d);
    if (values == NULL || valuesCount < 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long usec = (long long)now.tv_sec * 1000000LL + now.tv_nsec / 1000;
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = usec;
        v->latencyUsec = 0;
        memset(&v->value, 0, sizeof(v->value));
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        fill_field(d, v);
    }
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceClearFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    GET_DEVICE(device, d);
    (void)d;
    if (values == NULL || valuesCount < 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (int i = 0; i < valuesCount; i++) {
        values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED; /* nothing is cleared on a mock */
    }
    return NVML_SUCCESS;
}
