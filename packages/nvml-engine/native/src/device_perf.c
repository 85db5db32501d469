/*
 * Device Queries (nvml.h), the performance part: clocks, power, temperatures, fans,
 * utilization and performance state; and the two Accounting Statistics queries (accounting
 * mode and buffer size), answered from the same per-device state.
 *
 * These are the values monitors and `nvidia-smi -q` print. The state holds one steady
 * sample per GPU (an idle board), so every reader sees the same numbers; values a board
 * does not have (a fan on a passively cooled card, a missing threshold) answer
 * NVML_ERROR_NOT_SUPPORTED as real hardware does.
 */
#include "answers.h"
#include "mig.h"
#include "mock.h"
#include "processes.h"
#include "telemetry.h"

#include <string.h>

/* Reasons a real idle datacenter GPU can report (nvmlClocksEventReason* bits). */
#define SUPPORTED_EVENT_REASONS                                                                       \
    (nvmlClocksEventReasonGpuIdle | nvmlClocksEventReasonApplicationsClocksSetting |                  \
     nvmlClocksEventReasonSwPowerCap | nvmlClocksThrottleReasonHwSlowdown | nvmlClocksEventReasonSyncBoost | \
     nvmlClocksEventReasonSwThermalSlowdown | nvmlClocksThrottleReasonHwThermalSlowdown |                \
     nvmlClocksThrottleReasonHwPowerBrakeSlowdown | nvmlClocksEventReasonDisplayClockSetting)

/* A clock lock (`nvidia-smi -lgc` / `-lmc`, live-only keys) holds the current clock inside
 * [lo, hi] whatever the load asks for; hi = 0 means no lock. */
static unsigned int locked(unsigned int mhz, uint64_t lo, uint64_t hi)
{
    if (hi == 0) {
        return mhz;
    }
    if (lo > hi) {
        lo = hi;
    }
    return mhz < lo ? (unsigned int)lo : mhz > hi ? (unsigned int)hi : mhz;
}

static int clock_of(const struct nvmlDevice_st *d, nvmlClockType_t type, int max, unsigned int *out)
{
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
        *out = max ? d->s.max_clock_graphics_mhz
                   : locked(tele_clock_graphics_mhz(d), live_locked_gpu_clock_min_mhz(d), live_locked_gpu_clock_max_mhz(d));
        return 0;
    case NVML_CLOCK_SM:
        *out = max ? d->s.max_clock_sm_mhz
                   : locked(tele_clock_sm_mhz(d), live_locked_gpu_clock_min_mhz(d), live_locked_gpu_clock_max_mhz(d));
        return 0;
    case NVML_CLOCK_MEM:
        *out = max ? d->s.max_clock_mem_mhz
                   : locked(live_clock_mem_mhz(d), live_locked_mem_clock_min_mhz(d), live_locked_mem_clock_max_mhz(d));
        return 0;
    case NVML_CLOCK_VIDEO: *out = max ? d->s.max_clock_video_mhz : live_clock_video_mhz(d); return 0;
    default: return -1;
    }
}

static int app_clock_of(const struct nvmlDevice_st *d, nvmlClockType_t type, unsigned int *out)
{
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM: *out = live_app_clock_graphics_mhz(d); return 0;
    case NVML_CLOCK_MEM: *out = live_app_clock_mem_mhz(d); return 0;
    case NVML_CLOCK_VIDEO: return 1; /* no application clock for the video engine */
    default: return -1;
    }
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(clock);
    return clock_of(d, type, 0, clock) == 0 ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(clock);
    return clock_of(d, type, 1, clock) == 0 ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* Drivers from 590 on answer the applications-clock queries, the old nvmlDeviceGetPowerState
 * and the power management mode with NVML_ERROR_DEPRECATED, which nvidia-smi prints as
 * "Requested functionality has been deprecated" (in -q; in brackets in CSV). The 595
 * captures show it in -q; 590's tool prints it for the same queries. */
#define DEPRECATING_DRIVER 590u

static int deprecated_by_driver(void)
{
    return mock_driver_branch >= DEPRECATING_DRIVER;
}

static nvmlReturn_t app_clock(nvmlDevice_t device, nvmlClockType_t clockType, unsigned int *clockMHz)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(clockMHz);
    if (deprecated_by_driver()) {
        return NVML_ERROR_DEPRECATED;
    }
    int rc = app_clock_of(d, clockType, clockMHz);
    return rc == 0 ? NVML_SUCCESS : rc > 0 ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                        unsigned int *clockMHz)
{
    return app_clock(device, clockType, clockMHz);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                               unsigned int *clockMHz)
{
    return app_clock(device, clockType, clockMHz);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMaxCustomerBoostClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                            unsigned int *clockMHz)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(clockMHz);
    if (clockType == NVML_CLOCK_VIDEO) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return clock_of(d, clockType, 1, clockMHz) == 0 ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType, nvmlClockId_t clockId,
                                            unsigned int *clockMHz)
{
    switch (clockId) {
    case NVML_CLOCK_ID_CURRENT: return nvmlDeviceGetClockInfo(device, clockType, clockMHz);
    case NVML_CLOCK_ID_APP_CLOCK_TARGET:
    case NVML_CLOCK_ID_APP_CLOCK_DEFAULT: return app_clock(device, clockType, clockMHz);
    case NVML_CLOCK_ID_CUSTOMER_BOOST_MAX: return nvmlDeviceGetMaxCustomerBoostClock(device, clockType, clockMHz);
    default: break;
    }
    GET_DEVICE(device, d);
    (void)d;
    return NVML_ERROR_INVALID_ARGUMENT;
}

/* One supported memory clock (the state's) and graphics clocks from max down in 15 MHz steps. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count,
                                                            unsigned int *clocksMHz)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(count);
    unsigned int have = *count;
    *count = 1;
    if (have < 1 || clocksMHz == NULL) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    clocksMHz[0] = d->s.max_clock_mem_mhz;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned int memoryClockMHz,
                                                              unsigned int *count, unsigned int *clocksMHz)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(count);
    if (memoryClockMHz != d->s.max_clock_mem_mhz) {
        return NVML_ERROR_NOT_FOUND;
    }
    unsigned int max = d->s.max_clock_graphics_mhz;
    unsigned int min = max > 210 ? 210 : max;
    unsigned int n = (max - min) / 15 + 1;
    unsigned int have = *count;
    *count = n;
    if (have < n || clocksMHz == NULL) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        clocksMHz[i] = max - i * 15;
    }
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetAutoBoostedClocksEnabled(nvmlDevice_t device, nvmlEnableState_t *isEnabled,
                                                               nvmlEnableState_t *defaultIsEnabled)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(isEnabled);
    REQUIRE_ARG(defaultIsEnabled);
    return NVML_ERROR_NOT_SUPPORTED; /* datacenter boards do not expose auto boost */
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                                unsigned long long *clocksEventReasons)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(clocksEventReasons);
    *clocksEventReasons = tele_clocks_event_reasons(d);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                   unsigned long long *clocksThrottleReasons)
{
    return nvmlDeviceGetCurrentClocksEventReasons(device, clocksThrottleReasons);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device,
                                                                  unsigned long long *supportedClocksEventReasons)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(supportedClocksEventReasons);
    *supportedClocksEventReasons = SUPPORTED_EVENT_REASONS;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device,
                                                                     unsigned long long *supportedClocksThrottleReasons)
{
    return nvmlDeviceGetSupportedClocksEventReasons(device, supportedClocksThrottleReasons);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t device, nvmlPerfPolicyType_t perfPolicyType,
                                                      nvmlViolationTime_t *violTime)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(violTime);
    if ((unsigned int)perfPolicyType >= NVML_PERF_POLICY_COUNT) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    violTime->referenceTime = 0;
    violTime->violationTime = 0;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(pState);
    *pState = (nvmlPstates_t)tele_pstate(d);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    if (deprecated_by_driver()) {
        GET_DEVICE(device, d);
        (void)d;
        REQUIRE_ARG(pState);
        return NVML_ERROR_DEPRECATED;
    }
    return nvmlDeviceGetPerformanceState(device, pState);
}

#define POWER_GETTER(fn, field)                                             \
    MOCK_EXPORT nvmlReturn_t fn(nvmlDevice_t device, unsigned int *out)     \
    {                                                                       \
        GET_DEVICE(device, d);                                              \
        REQUIRE_ARG(out);                                                   \
        if (live_power_limit_mw(d) == 0) {                                     \
            return NVML_ERROR_NOT_SUPPORTED;                                \
        }                                                                   \
        *out = (field);                                                     \
        return NVML_SUCCESS;                                                \
    }

POWER_GETTER(nvmlDeviceGetPowerUsage, tele_power_usage_mw(d))
POWER_GETTER(nvmlDeviceGetPowerManagementLimit, live_power_limit_mw(d))
POWER_GETTER(nvmlDeviceGetPowerManagementDefaultLimit, d->s.power_default_limit_mw)
POWER_GETTER(nvmlDeviceGetEnforcedPowerLimit, live_power_limit_mw(d))

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                                      unsigned int *maxLimit)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(minLimit);
    REQUIRE_ARG(maxLimit);
    if (live_power_limit_mw(d) == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *minLimit = d->s.power_min_limit_mw;
    *maxLimit = d->s.power_max_limit_mw;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(mode);
    if (deprecated_by_driver()) {
        return NVML_ERROR_DEPRECATED;
    }
    *mode = live_power_limit_mw(d) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(energy);
    *energy = tele_energy_mj(d);
    return NVML_SUCCESS;
}

static __attribute__((noinline)) nvmlReturn_t temperature_full(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                                               unsigned int *temp)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(temp);
    if (sensorType != NVML_TEMPERATURE_GPU) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *temp = tele_temperature_c(d);
    return NVML_SUCCESS;
}

/* The fast path (answers.h): the board's temperature, or the thread's kept one while no
 * pattern moves it; anything else takes the full path. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                                  unsigned int *temp)
{
    const struct nvmlDevice_st *d;
    const struct mock_answer *a;
    if (__builtin_expect(mock_fast_device(device, &d, &a) && temp != NULL && sensorType == NVML_TEMPERATURE_GPU &&
                             (a == NULL || (a->flags & ANSWER_TEMP) != 0),
                         1)) {
        *temp = a != NULL ? a->temp_c : live_temperature_c(d);
        return NVML_SUCCESS;
    }
    return temperature_full(device, sensorType, temp);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(temperature);
    if (temperature->version != nvmlTemperature_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (temperature->sensorType != NVML_TEMPERATURE_GPU) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    temperature->temperature = (int)tele_temperature_c(d);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device,
                                                           nvmlTemperatureThresholds_t thresholdType,
                                                           unsigned int *temp)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(temp);
    unsigned int v = 0;
    switch (thresholdType) {
    case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: v = d->s.temp_shutdown_c; break;
    case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: v = d->s.temp_slowdown_c; break;
    case NVML_TEMPERATURE_THRESHOLD_MEM_MAX: v = d->s.temp_mem_max_c; break;
    case NVML_TEMPERATURE_THRESHOLD_GPU_MAX: v = d->s.temp_gpu_max_c; break;
    case NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN:
    case NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR:
    case NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX:
    case NVML_TEMPERATURE_THRESHOLD_GPS_CURR: return NVML_ERROR_NOT_SUPPORTED;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (v == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *temp = v;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device, nvmlMarginTemperature_t *marginTempInfo)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(marginTempInfo);
    if (marginTempInfo->version != nvmlMarginTemperature_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    /* Boards with a T.Limit sensor report the distance to the maximum operating temperature
     * (nvidia-smi's "GPU T.Limit Temp"); the A100 and T4 have none. */
    if (!d->s.margin_temperature_supported || d->s.temp_gpu_max_c == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    marginTempInfo->marginTemperature = (int)d->s.temp_gpu_max_c - (int)tele_temperature_c(d);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetThermalSettings(nvmlDevice_t device, unsigned int sensorIndex,
                                                      nvmlGpuThermalSettings_t *pThermalSettings)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(pThermalSettings);
    if (sensorIndex != NVML_THERMAL_TARGET_ALL && sensorIndex != 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    memset(pThermalSettings, 0, sizeof(*pThermalSettings));
    pThermalSettings->count = 1;
    pThermalSettings->sensor[0].controller = NVML_THERMAL_CONTROLLER_GPU_INTERNAL;
    pThermalSettings->sensor[0].defaultMinTemp = 0;
    pThermalSettings->sensor[0].defaultMaxTemp = (int)d->s.temp_gpu_max_c;
    pThermalSettings->sensor[0].currentTemp = (int)tele_temperature_c(d);
    pThermalSettings->sensor[0].target = NVML_THERMAL_TARGET_GPU;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int *numFans)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(numFans);
    if (d->s.num_fans == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *numFans = d->s.num_fans;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device, unsigned int fan, unsigned int *speed)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(speed);
    if (d->s.num_fans == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (fan >= d->s.num_fans) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *speed = tele_fan_speed_pct(d);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    return nvmlDeviceGetFanSpeed_v2(device, 0, speed);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetTargetFanSpeed(nvmlDevice_t device, unsigned int fan, unsigned int *targetSpeed)
{
    return nvmlDeviceGetFanSpeed_v2(device, fan, targetSpeed);
}

/* Whole-GPU utilization (MIG mode off): the pattern's sample, else the live or board rates;
 * raised to the records' sum where that is higher. Returns whether the value holds until the
 * live file is written (no pattern on the GPU or on a process holding it), so that the
 * thread's answers may keep it (answers.h). */
int mock_utilization_now(const struct nvmlDevice_st *d, unsigned int *gpu, unsigned int *mem)
{
    int still = 1;
    *gpu = d->s.util_gpu_pct; /* live-checked below */
    *mem = d->s.util_mem_pct; /* live-checked below */
    if (mock_tele_on(d)) {
        /* one sample: both rates of the same quantum */
        static const enum mock_tele_field fields[2] = {TELE_UTIL_GPU, TELE_UTIL_MEM};
        uint64_t v[2];
        mock_telemetry_values(d, 2, fields, v);
        *gpu = (unsigned int)v[0];
        *mem = (unsigned int)v[1];
        still = 0;
    } else if (d->live != NULL) {
        /* one snapshot: a writer that sets both rates is never seen half-way */
        static const unsigned int slots[2] = {LIVE_SLOT_util_gpu_pct, LIVE_SLOT_util_mem_pct};
        uint64_t v[2];
        unsigned int set = mock_live_load_n(d->live, 2, slots, v);
        if (set & 1u) {
            *gpu = (unsigned int)mock_live_clamp_u(v[0], 0, 100);
        }
        if (set & 2u) {
            *mem = (unsigned int)mock_live_clamp_u(v[1], 0, 100);
        }
    }
    /* processes from the live layer's records: their sum (capped at 100) where it is above
     * what the GPU itself reports */
    int moving = 0;
    unsigned int procs = mock_procs_util(d, &moving);
    still &= !moving;
    if (procs > *gpu) {
        *gpu = procs;
    }
    if (mock_proc_mem_util(procs) > *mem) {
        *mem = mock_proc_mem_util(procs);
    }
    return still;
}

static __attribute__((noinline)) nvmlReturn_t utilization_full(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    GET_DEVICE_ANSWERS(device, d, a);
    REQUIRE_ARG(utilization);
    if (a != NULL && (a->flags & ANSWER_UTIL) != 0) {
        if (a->flags & ANSWER_MIG_ON) {
            return NVML_ERROR_NOT_SUPPORTED; /* no whole-GPU utilization in MIG mode */
        }
        if (a->flags & ANSWER_UTIL_TIMED) {
            mock_answer_util_now(a, d, &utilization->gpu, &utilization->memory);
        } else {
            utilization->gpu = a->util_gpu;
            utilization->memory = a->util_mem;
        }
        return NVML_SUCCESS;
    }
    if (d->live == NULL) { /* the board alone: no MIG mode, pattern or record without it */
        utilization->gpu = live_util_gpu_pct(d);
        utilization->memory = live_util_mem_pct(d);
        return NVML_SUCCESS;
    }
    if (mock_mig_on(d)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    mock_utilization_now(d, &utilization->gpu, &utilization->memory);
    return NVML_SUCCESS;
}

/* The fast path (answers.h): the board's rates, or the thread's kept ones when they are a
 * plain value; anything else (MIG mode, a moving pattern, an error) takes the full path. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    const struct nvmlDevice_st *d;
    const struct mock_answer *a;
    if (__builtin_expect(mock_fast_device(device, &d, &a) && utilization != NULL, 1)) {
        if (a == NULL) {
            utilization->gpu = live_util_gpu_pct(d);
            utilization->memory = live_util_mem_pct(d);
            return NVML_SUCCESS;
        }
        if ((a->flags & (ANSWER_UTIL | ANSWER_MIG_ON | ANSWER_UTIL_TIMED)) == ANSWER_UTIL) {
            utilization->gpu = a->util_gpu;
            utilization->memory = a->util_mem;
            return NVML_SUCCESS;
        }
    }
    return utilization_full(device, utilization);
}

#define SAMPLING_PERIOD_US 167000 /* the engines' sampling window on current boards */

/* Engine utilization of a whole GPU; like its SM utilization, not answered in MIG mode (the
 * engines belong to the GPU instances): nvidia-smi prints [N/A], dmon "-". */
static nvmlReturn_t engine_util(const struct nvmlDevice_st *d, unsigned int value, unsigned int *utilization,
                                unsigned int *samplingPeriodUs)
{
    if (mock_mig_on(d)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    REQUIRE_ARG(utilization);
    REQUIRE_ARG(samplingPeriodUs);
    *utilization = value;
    *samplingPeriodUs = SAMPLING_PERIOD_US;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                         unsigned int *samplingPeriodUs)
{
    GET_DEVICE(device, d);
    return engine_util(d, live_util_encoder_pct(d), utilization, samplingPeriodUs);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                         unsigned int *samplingPeriodUs)
{
    GET_DEVICE(device, d);
    return engine_util(d, live_util_decoder_pct(d), utilization, samplingPeriodUs);
}

/* The JPEG and optical-flow engines are idle on every modelled board. */
MOCK_EXPORT nvmlReturn_t nvmlDeviceGetJpgUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                     unsigned int *samplingPeriodUs)
{
    GET_DEVICE(device, d);
    return engine_util(d, 0, utilization, samplingPeriodUs);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetOfaUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                     unsigned int *samplingPeriodUs)
{
    GET_DEVICE(device, d);
    return engine_util(d, 0, utilization, samplingPeriodUs);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *numCores)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(numCores);
    if (d->s.num_gpu_cores == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *numCores = d->s.num_gpu_cores;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGpuOperationMode(nvmlDevice_t device, nvmlGpuOperationMode_t *current,
                                                       nvmlGpuOperationMode_t *pending)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(current);
    REQUIRE_ARG(pending);
    return NVML_ERROR_NOT_SUPPORTED; /* GOM is a GeForce/Quadro feature */
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(mode);
    *mode = NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetAccountingBufferSize(nvmlDevice_t device, unsigned int *bufferSize)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(bufferSize);
    *bufferSize = 4000;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetSupportedPerformanceStates(nvmlDevice_t device, nvmlPstates_t *pstates,
                                                                 unsigned int size)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(pstates);
    unsigned int slots = size / (unsigned int)sizeof(nvmlPstates_t); /* `size` is in bytes */
    if (slots < 1) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    /* A datacenter board runs in P0 only; the rest of the array is NVML_PSTATE_UNKNOWN. */
    pstates[0] = (nvmlPstates_t)live_pstate(d);
    for (unsigned int i = 1; i < slots; i++) {
        pstates[i] = NVML_PSTATE_UNKNOWN;
    }
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetEncoderSessions(nvmlDevice_t device, unsigned int *sessionCount,
                                                      nvmlEncoderSessionInfo_t *sessionInfos)
{
    GET_DEVICE(device, d);
    (void)d;
    (void)sessionInfos;
    REQUIRE_ARG(sessionCount);
    *sessionCount = 0;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetFBCStats(nvmlDevice_t device, nvmlFBCStats_t *fbcStats)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(fbcStats);
    memset(fbcStats, 0, sizeof(*fbcStats));
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetFBCSessions(nvmlDevice_t device, unsigned int *sessionCount,
                                                  nvmlFBCSessionInfo_t *sessionInfo)
{
    GET_DEVICE(device, d);
    (void)d;
    (void)sessionInfo;
    REQUIRE_ARG(sessionCount);
    *sessionCount = 0;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetEncoderStats(nvmlDevice_t device, unsigned int *sessionCount,
                                                   unsigned int *averageFps, unsigned int *averageLatency)
{
    GET_DEVICE(device, d);
    (void)d;
    REQUIRE_ARG(sessionCount);
    REQUIRE_ARG(averageFps);
    REQUIRE_ARG(averageLatency);
    *sessionCount = 0;
    *averageFps = 0;
    *averageLatency = 0;
    return NVML_SUCCESS;
}
