/*
 * Moving telemetry: a GPU's utilization pattern (the live-only util_pattern* keys) and what
 * follows from it — power, temperature with a lag, SM/graphics clocks, P-state, clock event
 * reasons, fan, energy and the PCIe/NVLink throughput and byte counters.
 *
 * Every value is a pure function of the board, one consistent snapshot of the GPU's live
 * record and the wall clock quantised to TELE_QUANTUM_MS, so no process runs in the
 * background, two processes reading in the same quantum agree, and a GPU without a pattern
 * costs one mask-bit load (the util_pattern slot) on top of the plain live getter. A value
 * set explicitly in the live layer for one of these keys wins over the pattern.
 */
#ifndef NVML_MOCK_TELEMETRY_H
#define NVML_MOCK_TELEMETRY_H

#include "mock.h"

/* The clock's granularity: every value is the one at the start of the current quantum. */
#define TELE_QUANTUM_MS 100u

/* What a pattern computes, by index into mock_telemetry_values(). */
enum mock_tele_field {
    TELE_UTIL_GPU,
    TELE_UTIL_MEM,
    TELE_POWER_MW,
    TELE_POWER_AVERAGE_MW,
    TELE_TEMPERATURE_C,
    TELE_MEMORY_TEMPERATURE_C,
    TELE_CLOCK_GRAPHICS_MHZ,
    TELE_CLOCK_SM_MHZ,
    TELE_PSTATE,
    TELE_CLOCKS_EVENT_REASONS,
    TELE_FAN_PCT,
    TELE_ENERGY_MJ,
    TELE_PCIE_TX_KBPS,
    TELE_PCIE_RX_KBPS,
    TELE_PCIE_TX_BYTES,
    TELE_PCIE_RX_BYTES,
    TELE_NVLINK_DATA_TX_KIB,
    TELE_NVLINK_DATA_RX_KIB,
    TELE_NVLINK_RAW_TX_KIB,
    TELE_NVLINK_RAW_RX_KIB,
    TELE_FIELDS
};

/* Forget every cached sample and re-read MOCK_NVML_NOW_MS (called at each init, before the
 * devices are bound to their live records). */
void mock_telemetry_attach(void);

/* Whether `d` has a utilization pattern key set: the one check a getter pays when not. */
static inline int mock_tele_on(const struct nvmlDevice_st *d)
{
    if (__builtin_expect(d->live == NULL, 1)) {
        return 0;
    }
    const uint64_t *mask = (const uint64_t *)(const void *)(d->live + LIVE_RECORD_MASK);
    return (int)((__atomic_load_n(&mask[LIVE_SLOT_util_pattern / 64u], __ATOMIC_RELAXED) >>
                  (LIVE_SLOT_util_pattern % 64u)) &
                 1u);
}

/* Values of `n` fields of one sample (one quantum, one live snapshot). Only for a device
 * with mock_tele_on(). */
void mock_telemetry_values(const struct nvmlDevice_st *d, unsigned int n, const enum mock_tele_field *fields,
                           uint64_t *out);

/* A utilization pattern (kind and parameters as the util_pattern* keys) at the current
 * quantum, for a process record's own pattern; 0 before `epoch_ms` or without a pattern. */
unsigned int mock_tele_pattern_util(unsigned int kind, unsigned int level, uint64_t period_ms, uint64_t seed,
                                    uint64_t epoch_ms);

/* Whether a process's pattern (kind, start) moves with time from now on: 0 for none and for
 * a steady one that has started (its level from here on, whatever the quantum), 1 otherwise. */
int mock_tele_pattern_moves(unsigned int kind, uint64_t epoch_ms);

/* The current quantum of the telemetry clock (MOCK_NVML_NOW_MS pins it): every value a pattern
 * computes is the same within one. */
uint64_t mock_tele_quantum(void);

/* Memory utilization under SM utilization `u`, as a pattern computes it. */
unsigned int mock_tele_mem_util(unsigned int u);

/* The current quantum's start in microseconds (MOCK_NVML_NOW_MS pins it). */
uint64_t mock_tele_now_us(void);

/* One field of the current sample. Only for a device with mock_tele_on(). */
uint64_t mock_telemetry_value(const struct nvmlDevice_st *d, enum mock_tele_field field);

/* tele_<key>(d): the getters' view of a key a pattern moves — the pattern's value while a
 * pattern is set (an explicit live value of the key still wins there), else the live getter. */
#define TELE_GETTER(name, type, field, otherwise)                                          \
    static inline type tele_##name(const struct nvmlDevice_st *d)                          \
    {                                                                                      \
        if (mock_tele_on(d)) {                                                             \
            return (type)mock_telemetry_value(d, field);                                   \
        }                                                                                  \
        return (type)(otherwise);                                                          \
    }

TELE_GETTER(power_usage_mw, unsigned int, TELE_POWER_MW, live_power_usage_mw(d))
TELE_GETTER(temperature_c, unsigned int, TELE_TEMPERATURE_C, live_temperature_c(d))
TELE_GETTER(memory_temperature_c, unsigned int, TELE_MEMORY_TEMPERATURE_C, live_memory_temperature_c(d))
TELE_GETTER(clock_graphics_mhz, unsigned int, TELE_CLOCK_GRAPHICS_MHZ, live_clock_graphics_mhz(d))
TELE_GETTER(clock_sm_mhz, unsigned int, TELE_CLOCK_SM_MHZ, live_clock_sm_mhz(d))
TELE_GETTER(pstate, int, TELE_PSTATE, live_pstate(d))
TELE_GETTER(clocks_event_reasons, unsigned long long, TELE_CLOCKS_EVENT_REASONS, live_clocks_event_reasons(d))
TELE_GETTER(fan_speed_pct, unsigned int, TELE_FAN_PCT, live_fan_speed_pct(d))
TELE_GETTER(energy_mj, unsigned long long, TELE_ENERGY_MJ, live_energy_mj(d))
/* An idle GPU moves no data: without a pattern, throughput and byte counters are 0. */
TELE_GETTER(pcie_tx_kbps, unsigned int, TELE_PCIE_TX_KBPS, 0u)
TELE_GETTER(pcie_rx_kbps, unsigned int, TELE_PCIE_RX_KBPS, 0u)
TELE_GETTER(pcie_tx_bytes, unsigned long long, TELE_PCIE_TX_BYTES, 0u)
TELE_GETTER(pcie_rx_bytes, unsigned long long, TELE_PCIE_RX_BYTES, 0u)
TELE_GETTER(nvlink_data_tx_kib, unsigned long long, TELE_NVLINK_DATA_TX_KIB, 0u)
TELE_GETTER(nvlink_data_rx_kib, unsigned long long, TELE_NVLINK_DATA_RX_KIB, 0u)
TELE_GETTER(nvlink_raw_tx_kib, unsigned long long, TELE_NVLINK_RAW_TX_KIB, 0u)
TELE_GETTER(nvlink_raw_rx_kib, unsigned long long, TELE_NVLINK_RAW_RX_KIB, 0u)

/* The averaged power reading (NVML_FI_DEV_POWER_AVERAGE): `board` is what answers without a
 * pattern (the board's average, or its instant reading when it has none). */
static inline unsigned int tele_power_average_mw(const struct nvmlDevice_st *d, unsigned int board)
{
    return mock_tele_on(d) ? (unsigned int)mock_telemetry_value(d, TELE_POWER_AVERAGE_MW) : board;
}

#endif
