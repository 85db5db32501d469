/*
 * Moving telemetry (telemetry.h): utilization patterns and the values that follow load,
 * computed by the reader from the live keys and the wall clock. Answers no nvml.h function;
 * getters in device_identity.c, device_perf.c and field_values.c ask it.
 *
 * The model, per GPU (u = utilization in percent, at the start of the current quantum):
 *   steady   u = util_pattern_level
 *   busy     u = 90..100, a seeded draw per quantum (mean 95)
 *   burst    u = peak for the first BURST_DUTY_PCT % of each period, 0 for the rest
 *   sine     u = peak * (1 - cos(2 pi phase)) / 2: from idle up to the peak and back
 * (peak = util_pattern_level, 0 meaning 100; period = util_pattern_period_ms, 0 meaning the
 * pattern's default). Before util_pattern_epoch_ms, and with util_pattern 0, the board answers.
 *   memory utilization  = u * MEM_UTIL_PCT / 100
 *   power               = idle + (limit - idle) * u / 100 (idle: the board's power_usage_mw)
 *   averaged power      = the same of u through a POWER_AVERAGE_MS first-order filter
 *   temperature         = idle + (load - idle) * f, f = the pattern's mean load through a
 *                         first-order filter of time constant temperature_lag_ms, started idle
 *                         at the epoch; evaluated in closed form, so it holds no state
 *   SM/graphics clock   = idle clock with no load, rising to the maximum at CLOCK_FULL_AT_PCT
 *   P-state             = P0 under load, the board's when idle
 *   energy              = util_pattern_energy_mj (or the board's) + the integral of the
 *                         pattern's mean power since the epoch, in closed form
 *   PCIe, NVLink        = a share of the link's rate times u; the byte counters integrate it
 * A live value set for one of these keys wins over what the pattern computes.
 *
 * Samples are cached per device and keyed on (init cycle, live record sequence, quantum), so
 * a call in the same quantum as the previous one costs a clock read and a few loads; the
 * cache is only memory of a pure function and never changes what a reader answers.
 */
#define _GNU_SOURCE
#include "telemetry.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BURST_DUTY_PCT 20u
#define BUSY_LOW_PCT 90u
#define BUSY_SPAN 11u /* 90..100 */
#define BUSY_MEAN_PCT 95u
#define MEM_UTIL_PCT 40u
#define TEMPERATURE_LAG_MS 20000u
#define TEMPERATURE_LOAD_SHARE 0.6 /* of the way from idle to the maximum operating temperature */
#define POWER_AVERAGE_MS 1000u
#define CLOCK_FULL_AT_PCT 20u
#define CLOCK_STEP_MHZ 15u
#define FAN_LOAD_SHARE 0.6 /* of the way from the idle fan speed to 100 % */
#define PCIE_RX_SHARE_PCT 25u /* of the link's rate at 100 % */
#define PCIE_TX_SHARE_PCT 10u
#define NVLINK_SHARE_PCT 30u
#define NVLINK_RAW_NUM 9u /* raw = data * 9 / 8 (protocol overhead) */
#define NVLINK_RAW_DEN 8u

/*
 * libm, loaded at the first pattern computed: a process that never meets a pattern (most
 * NVML clients, and every one at start-up) does not load it, and dlopen of the library does
 * not pull it in (libm.so.6 was a tenth of a fresh client's start). The functions are
 * libm's own, so every value is what it was.
 */
static double (*m_sin)(double);
static double (*m_cos)(double);
static double (*m_exp)(double);
static pthread_once_t libm_once = PTHREAD_ONCE_INIT;

static void libm_load(void)
{
    void *m = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
    if (m != NULL) {
        *(void **)&m_sin = dlsym(m, "sin");
        *(void **)&m_cos = dlsym(m, "cos");
        *(void **)&m_exp = dlsym(m, "exp");
    }
}

/* Whether libm is there (always, with glibc); without it no pattern runs (the board answers). */
static int libm_ready(void)
{
    pthread_once(&libm_once, libm_load);
    return m_sin != NULL && m_cos != NULL && m_exp != NULL;
}

/* lround of a value >= 0 (below 2^63): v - (long)v is exact there, so the halfway test is. */
static long round_half_up(double v)
{
    long r = (long)v;
    return v - (double)r >= 0.5 ? r + 1 : r;
}

/* The patterns, numbered by keys.toml [vocabulary] patterns (live_layout.h); a new one is a
 * row there and its cases in pattern_util, pattern_filtered and pattern_integral2 here. */
#define PATTERN_ENUM(name, number, level_kind, level, period) PATTERN_##name = number,
enum { PATTERN_NONE = 0, LIVE_PATTERNS(PATTERN_ENUM) PATTERN_LAST = LIVE_PATTERN_LAST };
enum { LEVEL_NONE, LEVEL_OPTIONAL, LEVEL_REQUIRED };

/* The slots one sample reads, in one snapshot. */
#define TELE_SLOTS(X)                                                                              \
    X(util_pattern) X(util_pattern_level) X(util_pattern_period_ms) X(util_pattern_seed)              \
    X(util_pattern_epoch_ms) X(temperature_lag_ms) X(temperature_load_c) X(util_pattern_energy_mj)   \
    X(util_pattern_energy_epoch_ms)                                                               \
    X(nvlink_down_mask) X(util_gpu_pct) X(util_mem_pct) X(power_usage_mw) X(power_limit_mw)          \
    X(energy_mj) X(power_average_mw) X(temperature_c) X(memory_temperature_c) X(clock_graphics_mhz)  \
    X(clock_sm_mhz) X(pstate) X(clocks_event_reasons) X(fan_speed_pct) X(pcie_cur_gen) X(pcie_cur_width)

#define TELE_SLOT_INDEX(key) IX_##key,
enum { TELE_SLOTS(TELE_SLOT_INDEX) IX_COUNT };
_Static_assert(IX_COUNT <= 32, "one snapshot reads at most 32 slots");

#define TELE_SLOT_NUMBER(key) LIVE_SLOT_##key,
static const unsigned int tele_slots[IX_COUNT] = {TELE_SLOTS(TELE_SLOT_NUMBER)};

/* Declared bounds by slot, for clamping explicit values. */
struct bound {
    uint64_t lo;
    uint64_t hi;
    int is_signed;
};
#define BOUND(key, slot, sgn, lo_, hi_) [slot] = {(uint64_t)(lo_), (uint64_t)(hi_), (sgn)},
#define BOUND_ONLY(key, slot, sgn, lo_, hi_, dflt) [slot] = {(uint64_t)(lo_), (uint64_t)(hi_), (sgn)},
static const struct bound bounds[LIVE_KEY_SLOTS] = {LIVE_GPU_KEYS(BOUND) LIVE_ONLY_GPU_KEYS(BOUND_ONLY)};

/* One consistent read of the sample's slots. */
struct snapshot {
    unsigned int set; /* bit IX_x: slot x is set (and applies) */
    uint64_t v[IX_COUNT];
};

static int has(const struct snapshot *sn, unsigned int ix)
{
    return (sn->set >> ix) & 1u;
}

/* An explicit value, clamped to its key's bounds. */
static uint64_t explicit_value(const struct snapshot *sn, unsigned int ix)
{
    const struct bound *b = &bounds[tele_slots[ix]];
    uint64_t v = sn->v[ix];
    if (b->is_signed) {
        return (uint64_t)mock_live_clamp_s((int64_t)v, (int64_t)b->lo, (int64_t)b->hi);
    }
    return mock_live_clamp_u(v, b->lo, b->hi);
}

/* The value of a live-only parameter (its default, 0, while unset). */
static uint64_t param(const struct snapshot *sn, unsigned int ix)
{
    return has(sn, ix) ? explicit_value(sn, ix) : 0;
}

/* ---- the clock ---- */

/* MOCK_NVML_NOW_MS pins "now" for every reader of this process (tests only); 0 = the clock. */
static uint64_t pinned_now_ms;
/* Incremented at each init: a cached sample of an earlier cycle never answers. */
static _Atomic uint64_t tele_generation;

static uint64_t now_quantum(void)
{
    uint64_t pinned = __atomic_load_n(&pinned_now_ms, __ATOMIC_RELAXED);
    if (pinned != 0) {
        return pinned / TELE_QUANTUM_MS;
    }
    /* The coarse clock is a few nanoseconds (no counter read) and fine enough for 100 ms
     * quanta; every process reads the same kernel value. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return ((uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u) / TELE_QUANTUM_MS;
}

/* ---- the pattern ---- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The GPU's part of the noise seed: its UUID, so GPUs with the same seed still differ. */
static uint64_t uuid_hash(const struct nvmlDevice_st *d)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = d->s.uuid; *p != '\0'; p++) {
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    }
    return h;
}

struct pattern {
    unsigned int kind;
    unsigned int level; /* steady level or burst/sine peak, percent */
    uint64_t period_ms;
    uint64_t seed;
};

/* The declared defaults: a period of 0 is the pattern's own (1 ms for one without a period,
 * which never divides by it), a level of 0 the default level where the level is optional. */
static void pattern_defaults(struct pattern *p)
{
    switch (p->kind) {
#define PATTERN_DEFAULTS(name_, number_, level_kind_, level_, period_)                             \
    case number_:                                                                                  \
        if (p->period_ms == 0) {                                                                   \
            p->period_ms = (period_) ? (period_) : 1u;                                             \
        }                                                                                          \
        if ((level_kind_) == LEVEL_OPTIONAL && p->level == 0) {                                    \
            p->level = (level_);                                                                   \
        }                                                                                          \
        break;
        LIVE_PATTERNS(PATTERN_DEFAULTS)
#undef PATTERN_DEFAULTS
    default:
        if (p->period_ms == 0) {
            p->period_ms = 1u;
        }
        break;
    }
}

/* Utilization (percent) at `t` ms since the epoch, for the quantum `q`. */
static unsigned int pattern_util(const struct pattern *p, uint64_t t, uint64_t q)
{
    switch (p->kind) {
    case PATTERN_STEADY: return p->level;
    case PATTERN_BUSY: return BUSY_LOW_PCT + (unsigned int)(mix64(p->seed ^ mix64(q)) % BUSY_SPAN);
    case PATTERN_BURST: {
        uint64_t burst = p->period_ms * BURST_DUTY_PCT / 100u;
        return t % p->period_ms < burst ? p->level : 0;
    }
    case PATTERN_SINE: {
        double phase = (double)(t % p->period_ms) / (double)p->period_ms;
        return (unsigned int)round_half_up((double)p->level * (1.0 - m_cos(2.0 * M_PI * phase)) / 2.0);
    }
    default: return 0;
    }
}

/* The pattern's mean load (0..1) through a first-order filter of time constant `tau` ms that
 * starts at 0 at the epoch, at `t` ms since it: closed forms of y' = (u - y) / tau. */
static double pattern_filtered(const struct pattern *p, uint64_t t, double tau)
{
    double peak = (double)p->level / 100.0;
    double decay = m_exp(-(double)t / tau);
    switch (p->kind) {
    case PATTERN_STEADY: return peak * (1.0 - decay);
    case PATTERN_BUSY: return (double)BUSY_MEAN_PCT / 100.0 * (1.0 - decay);
    case PATTERN_BURST: {
        double period = (double)p->period_ms;
        double high = period * BURST_DUTY_PCT / 100.0;
        double a = m_exp(-high / tau);
        double b = m_exp(-(period - high) / tau);
        uint64_t n = t / p->period_ms;
        double r = (double)(t % p->period_ms);
        /* the level at each period's start: the periodic steady state, approached from 0 */
        double start_steady = b * (1.0 - a) / (1.0 - a * b);
        double start = start_steady * (1.0 - m_exp(-(double)n * period / tau));
        if (r < high) {
            return peak * (1.0 + (start - 1.0) * m_exp(-r / tau));
        }
        return peak * (1.0 + (start - 1.0) * a) * m_exp(-(r - high) / tau);
    }
    case PATTERN_SINE: {
        double w = 2.0 * M_PI / (double)p->period_ms;
        double r = (double)(t % p->period_ms);
        double wt = w * tau;
        double wave = (m_cos(w * r) + wt * m_sin(w * r) - decay) / (1.0 + wt * wt);
        return peak / 2.0 * ((1.0 - decay) - wave);
    }
    default: return 0.0;
    }
}

/* Twice the integral of the mean utilization (percent x ms) from the epoch to `t`: exact
 * integers, so the counters that follow it never step back. */
static uint64_t pattern_integral2(const struct pattern *p, uint64_t t)
{
    switch (p->kind) {
    case PATTERN_STEADY: return 2u * p->level * t;
    case PATTERN_BUSY: return 2u * BUSY_MEAN_PCT * t;
    case PATTERN_BURST: {
        uint64_t burst = p->period_ms * BURST_DUTY_PCT / 100u;
        uint64_t r = t % p->period_ms;
        return 2u * p->level * ((t / p->period_ms) * burst + (r < burst ? r : burst));
    }
    case PATTERN_SINE: {
        /* each whole period contributes peak * period / 2; the part of this one, from the
         * closed form r - sin(w r) / w (non-negative and increasing in r) */
        uint64_t r = t % p->period_ms;
        double w = 2.0 * M_PI / (double)p->period_ms;
        double part = (double)p->level * ((double)r - m_sin(w * (double)r) / w);
        uint64_t whole = (uint64_t)p->level * (t - r);
        return whole + (part > 0.0 ? (uint64_t)part : 0u);
    }
    default: return 0;
    }
}

/* ---- the sample ---- */

static unsigned int pcie_lane_mbps(uint64_t gen)
{
    static const unsigned int mbps[] = {0, 2500, 5000, 8000, 16000, 32000, 64000, 128000};
    return gen < sizeof(mbps) / sizeof(mbps[0]) ? mbps[gen] : 0;
}

static unsigned int lerp_u(unsigned int from, unsigned int to, double share)
{
    double v = (double)from + ((double)to - (double)from) * share;
    return v <= 0.0 ? 0u : (unsigned int)round_half_up(v);
}

/* `amount` * `num` / `den` without overflowing 64 bits in between. */
static uint64_t muldiv(uint64_t amount, uint64_t num, uint64_t den)
{
    return (uint64_t)((unsigned __int128)amount * num / den);
}

/* The clock under load `u`: from `idle` to `max`, on the max - 15 MHz grid the board lists. */
static unsigned int loaded_clock(unsigned int idle, unsigned int max, unsigned int u)
{
    if (u == 0 || max <= idle) {
        return idle;
    }
    unsigned int share = u >= CLOCK_FULL_AT_PCT ? CLOCK_FULL_AT_PCT : u;
    unsigned int raw = idle + (unsigned int)((uint64_t)(max - idle) * share / CLOCK_FULL_AT_PCT);
    unsigned int below = (max - raw + CLOCK_STEP_MHZ / 2) / CLOCK_STEP_MHZ * CLOCK_STEP_MHZ;
    unsigned int snapped = max - below;
    return snapped < idle ? idle : snapped;
}

#define EXPLICIT_OR(ix, value) (has(sn, (ix)) ? explicit_value(sn, (ix)) : (uint64_t)(value))

/* Every field of the sample of `d` at quantum `q` from snapshot `sn`. */
static void compute(const struct nvmlDevice_st *d, const struct snapshot *sn, uint64_t q, uint64_t *out)
{
    const struct state_gpu *s = &d->s;
    uint64_t now_ms = q * TELE_QUANTUM_MS;
    uint64_t epoch = param(sn, IX_util_pattern_epoch_ms);
    struct pattern p = {(unsigned int)param(sn, IX_util_pattern), (unsigned int)param(sn, IX_util_pattern_level),
                        param(sn, IX_util_pattern_period_ms), param(sn, IX_util_pattern_seed) ^ uuid_hash(d)};
    if (p.kind > PATTERN_LAST || now_ms < epoch || !libm_ready()) {
        p.kind = PATTERN_NONE;
    }
    pattern_defaults(&p);
    int active = p.kind != PATTERN_NONE;
    uint64_t t = active ? now_ms - epoch : 0;

    unsigned int u = active ? pattern_util(&p, t, q) : (unsigned int)s->util_gpu_pct;
    uint64_t lag = param(sn, IX_temperature_lag_ms);
    double f_temp = active ? pattern_filtered(&p, t, (double)(lag ? lag : TEMPERATURE_LAG_MS)) : 0.0;
    double f_avg = active ? pattern_filtered(&p, t, (double)POWER_AVERAGE_MS) : 0.0;
    uint64_t integral2 = active ? pattern_integral2(&p, t) : 0;

    out[TELE_UTIL_GPU] = EXPLICIT_OR(IX_util_gpu_pct, u);
    out[TELE_UTIL_MEM] = EXPLICIT_OR(IX_util_mem_pct, active ? (u * MEM_UTIL_PCT + 50u) / 100u : s->util_mem_pct);

    /* power: idle (the board's reading) to the current limit */
    unsigned int limit = (unsigned int)EXPLICIT_OR(IX_power_limit_mw, s->power_limit_mw);
    unsigned int idle_mw = s->power_usage_mw < limit || limit == 0 ? s->power_usage_mw : limit;
    unsigned int load_mw = limit > idle_mw ? limit - idle_mw : 0;
    unsigned int power = active ? idle_mw + (unsigned int)((uint64_t)load_mw * u / 100u) : s->power_usage_mw;
    out[TELE_POWER_MW] = EXPLICIT_OR(IX_power_usage_mw, power);
    out[TELE_POWER_AVERAGE_MW] =
        has(sn, IX_power_average_mw) && explicit_value(sn, IX_power_average_mw) != 0
            ? explicit_value(sn, IX_power_average_mw)
            : (active ? lerp_u(idle_mw, idle_mw + load_mw, f_avg)
                      : (s->power_average_mw != 0 ? s->power_average_mw : out[TELE_POWER_MW]));

    /* temperature: follows the filtered load towards the full-load temperature */
    unsigned int idle_c = s->temperature_c;
    unsigned int load_c = (unsigned int)param(sn, IX_temperature_load_c);
    if (load_c == 0) {
        load_c = s->temp_gpu_max_c > idle_c ? lerp_u(idle_c, s->temp_gpu_max_c, TEMPERATURE_LOAD_SHARE) : idle_c;
    }
    out[TELE_TEMPERATURE_C] = EXPLICIT_OR(IX_temperature_c, mock_live_clamp_u(lerp_u(idle_c, load_c, f_temp), 0, 200));
    unsigned int mem_idle_c = s->memory_temperature_c;
    unsigned int mem_load_c = mem_idle_c;
    if (mem_idle_c != 0) {
        mem_load_c = s->temp_mem_max_c > mem_idle_c ? lerp_u(mem_idle_c, s->temp_mem_max_c, TEMPERATURE_LOAD_SHARE)
                                                    : mem_idle_c + (load_c > idle_c ? load_c - idle_c : 0);
    }
    out[TELE_MEMORY_TEMPERATURE_C] =
        EXPLICIT_OR(IX_memory_temperature_c, mock_live_clamp_u(lerp_u(mem_idle_c, mem_load_c, f_temp), 0, 200));

    /* clocks, P-state, event reasons: the board's when idle */
    unsigned int load = active ? u : 0;
    out[TELE_CLOCK_GRAPHICS_MHZ] =
        EXPLICIT_OR(IX_clock_graphics_mhz, loaded_clock(s->clock_graphics_mhz, s->max_clock_graphics_mhz, load));
    out[TELE_CLOCK_SM_MHZ] = EXPLICIT_OR(IX_clock_sm_mhz, loaded_clock(s->clock_sm_mhz, s->max_clock_sm_mhz, load));
    out[TELE_PSTATE] = EXPLICIT_OR(IX_pstate, (uint64_t)(active && u > 0 ? 0 : s->pstate));
    out[TELE_CLOCKS_EVENT_REASONS] =
        EXPLICIT_OR(IX_clocks_event_reasons,
                    active && u > 0 ? s->clocks_event_reasons & ~(uint64_t)nvmlClocksEventReasonGpuIdle
                                    : s->clocks_event_reasons);
    unsigned int fan = s->fan_speed_pct;
    out[TELE_FAN_PCT] = EXPLICIT_OR(IX_fan_speed_pct, active ? lerp_u(fan, 100, FAN_LOAD_SHARE * f_temp) : fan);

    /* energy: the base at the energy epoch plus the integral of power since, in mJ
     * (mW x ms / 1000); the energy epoch is the pattern's unless a writer re-based it */
    uint64_t base = param(sn, IX_util_pattern_energy_mj);
    if (base == 0) {
        base = s->energy_mj;
    }
    uint64_t energy_epoch = param(sn, IX_util_pattern_energy_epoch_ms);
    uint64_t te = energy_epoch > epoch ? energy_epoch - epoch : 0;
    uint64_t energy = base;
    if (active && t > te) {
        unsigned __int128 uj_x200 = (unsigned __int128)idle_mw * (t - te) * 200u +
                                    (unsigned __int128)load_mw * (integral2 - pattern_integral2(&p, te));
        energy += (uint64_t)(uj_x200 / 200000u);
    }
    out[TELE_ENERGY_MJ] = EXPLICIT_OR(IX_energy_mj, energy);

    /* PCIe: a share of the link's rate; the counters integrate it (bytes) */
    uint64_t gen = EXPLICIT_OR(IX_pcie_cur_gen, s->pcie_cur_gen);
    uint64_t width = EXPLICIT_OR(IX_pcie_cur_width, s->pcie_cur_width);
    uint64_t link_kbps = (uint64_t)pcie_lane_mbps(gen) * width / 8u * 1000u; /* Mb/s x lanes / 8 = MB/s */
    out[TELE_PCIE_TX_KBPS] = active ? link_kbps * PCIE_TX_SHARE_PCT / 100u * u / 100u : 0;
    out[TELE_PCIE_RX_KBPS] = active ? link_kbps * PCIE_RX_SHARE_PCT / 100u * u / 100u : 0;
    /* bytes = KB/s x 1000 x share / 100 x (integral2 / 200: load x ms) / 1000 */
    out[TELE_PCIE_TX_BYTES] = muldiv(link_kbps * PCIE_TX_SHARE_PCT, integral2, 20000u);
    out[TELE_PCIE_RX_BYTES] = muldiv(link_kbps * PCIE_RX_SHARE_PCT, integral2, 20000u);

    /* NVLink: the active links' rate; data and raw counters in KiB */
    unsigned int links = s->nvlink_count;
    uint64_t down = param(sn, IX_nvlink_down_mask);
    if (links > 0 && links < 64) {
        down &= (1ull << links) - 1u;
    }
    links -= (unsigned int)__builtin_popcountll(down) > links ? links : (unsigned int)__builtin_popcountll(down);
    uint64_t link_mbps = (uint64_t)mock_nvlink_link_mbps(s->nvlink_version) * links; /* MB/s */
    /* KiB = MB/s x 10^6 / 1024 x share / 100 x (integral2 / 200: load x ms) / 1000 */
    uint64_t data_kib = muldiv(link_mbps * NVLINK_SHARE_PCT, integral2, 1024u * 20u);
    out[TELE_NVLINK_DATA_TX_KIB] = data_kib;
    out[TELE_NVLINK_DATA_RX_KIB] = data_kib;
    out[TELE_NVLINK_RAW_TX_KIB] = data_kib / NVLINK_RAW_DEN * NVLINK_RAW_NUM;
    out[TELE_NVLINK_RAW_RX_KIB] = data_kib / NVLINK_RAW_DEN * NVLINK_RAW_NUM;
}

/* ---- the cache ---- */

struct tele_cache {
    _Atomic uint64_t lock; /* odd while a thread stores a sample */
    uint64_t generation;   /* of the init cycle the sample belongs to */
    uint64_t record_seq;   /* the live record's sequence the snapshot was read at */
    uint64_t quantum;
    uint64_t vals[TELE_FIELDS];
} __attribute__((aligned(64)));

static struct tele_cache caches[STATE_MAX_GPUS] MOCK_COLD(caches);

void mock_telemetry_attach(void)
{
    const char *pin = getenv("MOCK_NVML_NOW_MS");
    uint64_t ms = 0;
    if (pin != NULL && pin[0] != '\0') {
        char *end = NULL;
        unsigned long long v = strtoull(pin, &end, 10);
        ms = end != NULL && *end == '\0' ? v : 0;
    }
    __atomic_store_n(&pinned_now_ms, ms, __ATOMIC_RELAXED);
    atomic_fetch_add_explicit(&tele_generation, 1, memory_order_acq_rel);
}

/* Read the sample's slots; returns 1 when the snapshot may be cached (read at one even record
 * sequence `*seq`, and no slot of it armed behind a trigger, whose firing is per process and
 * per call). */
static int take_snapshot(const unsigned char *rec, struct snapshot *sn, uint64_t *seq)
{
    const uint64_t *seqp = (const uint64_t *)(const void *)(rec + LIVE_RECORD_SEQ);
    const uint64_t *arm = (const uint64_t *)(const void *)(rec + LIVE_RECORD_ARMED);
    uint64_t before = __atomic_load_n(seqp, __ATOMIC_ACQUIRE);
    sn->set = mock_live_load_n(rec, IX_COUNT, tele_slots, sn->v);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    uint64_t after = __atomic_load_n(seqp, __ATOMIC_RELAXED);
    int armed = 0;
    for (unsigned int i = 0; i < IX_COUNT; i++) {
        unsigned int slot = tele_slots[i];
        armed |= (int)((__atomic_load_n(&arm[slot / 64u], __ATOMIC_RELAXED) >> (slot % 64u)) & 1u);
    }
    *seq = before;
    return before == after && (before & 1u) == 0 && !armed;
}

static void store_sample(struct tele_cache *c, uint64_t generation, uint64_t seq, uint64_t q, const uint64_t *vals)
{
    uint64_t lock = atomic_load_explicit(&c->lock, memory_order_relaxed);
    if ((lock & 1u) != 0 ||
        !atomic_compare_exchange_strong_explicit(&c->lock, &lock, lock + 1, memory_order_acquire, memory_order_relaxed)) {
        return; /* another thread stores one: this sample is only not remembered */
    }
    __atomic_store_n(&c->generation, generation, __ATOMIC_RELAXED);
    __atomic_store_n(&c->record_seq, seq, __ATOMIC_RELAXED);
    __atomic_store_n(&c->quantum, q, __ATOMIC_RELAXED);
    for (unsigned int i = 0; i < TELE_FIELDS; i++) {
        __atomic_store_n(&c->vals[i], vals[i], __ATOMIC_RELAXED);
    }
    atomic_store_explicit(&c->lock, lock + 2, memory_order_release);
}

/* A sample not in the cache: snapshot, compute, remember. Kept out of line so the cached
 * path stays a small function without the computation's stack frame. */
__attribute__((noinline)) static void sample_miss(const struct nvmlDevice_st *d, struct tele_cache *c,
                                                  uint64_t generation, uint64_t q, unsigned int n,
                                                  const enum mock_tele_field *fields, uint64_t *out)
{
    struct snapshot sn;
    uint64_t vals[TELE_FIELDS];
    uint64_t seq;
    int cacheable = take_snapshot(d->live, &sn, &seq);
    compute(d, &sn, q, vals);
    if (cacheable) {
        store_sample(c, generation, seq, q, vals);
    }
    for (unsigned int i = 0; i < n; i++) {
        out[i] = vals[fields[i]];
    }
}

/* The cached sample's fields when it is the current one (this init cycle, this record
 * sequence, this quantum): 1, else 0. */
static inline int sample_hit(const struct nvmlDevice_st *d, struct tele_cache *c, uint64_t generation, uint64_t q,
                             unsigned int n, const enum mock_tele_field *fields, uint64_t *out)
{
    uint64_t seq = __atomic_load_n((const uint64_t *)(const void *)(d->live + LIVE_RECORD_SEQ), __ATOMIC_ACQUIRE);
    uint64_t lock = atomic_load_explicit(&c->lock, memory_order_acquire);
    if ((lock & 1u) != 0 || __atomic_load_n(&c->record_seq, __ATOMIC_RELAXED) != seq ||
        __atomic_load_n(&c->quantum, __ATOMIC_RELAXED) != q ||
        __atomic_load_n(&c->generation, __ATOMIC_RELAXED) != generation) {
        return 0;
    }
    for (unsigned int i = 0; i < n; i++) {
        out[i] = __atomic_load_n(&c->vals[fields[i]], __ATOMIC_RELAXED);
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return atomic_load_explicit(&c->lock, memory_order_relaxed) == lock;
}

void mock_telemetry_values(const struct nvmlDevice_st *d, unsigned int n, const enum mock_tele_field *fields,
                           uint64_t *out)
{
    struct tele_cache *c = &caches[d->index];
    uint64_t generation = atomic_load_explicit(&tele_generation, memory_order_acquire);
    uint64_t q = now_quantum();
    if (!sample_hit(d, c, generation, q, n, fields, out)) {
        sample_miss(d, c, generation, q, n, fields, out);
    }
}

uint64_t mock_telemetry_value(const struct nvmlDevice_st *d, enum mock_tele_field field)
{
    struct tele_cache *c = &caches[d->index];
    uint64_t generation = atomic_load_explicit(&tele_generation, memory_order_acquire);
    uint64_t q = now_quantum();
    uint64_t v;
    if (!sample_hit(d, c, generation, q, 1, &field, &v)) {
        sample_miss(d, c, generation, q, 1, &field, &v);
    }
    return v;
}

/* ---- a process's pattern (processes.c) ---- */

/* A process's pattern start as the quantum clock sees it, at the current quantum `now_ms`. */
static uint64_t pattern_start_ms(uint64_t epoch_ms, uint64_t now_ms)
{
    /* the epoch's own quantum already runs the pattern: a process shows its load from the
     * first call after it started, not one quantum later */
    epoch_ms = epoch_ms / TELE_QUANTUM_MS * TELE_QUANTUM_MS;
    /* The coarse clock runs up to a tick behind the writer's precise one, so a process
     * stamped early in a quantum can read as one quantum ahead: it has started. */
    if (epoch_ms == now_ms + TELE_QUANTUM_MS) {
        epoch_ms = now_ms;
    }
    return epoch_ms;
}

unsigned int mock_tele_pattern_util(unsigned int kind, unsigned int level, uint64_t period_ms, uint64_t seed,
                                    uint64_t epoch_ms)
{
    uint64_t q = now_quantum();
    uint64_t now_ms = q * TELE_QUANTUM_MS;
    epoch_ms = pattern_start_ms(epoch_ms, now_ms);
    if (kind == PATTERN_NONE || kind > PATTERN_LAST || now_ms < epoch_ms || !libm_ready()) {
        return 0;
    }
    struct pattern p = {kind, level > 100 ? 100 : level, period_ms, seed};
    pattern_defaults(&p);
    return pattern_util(&p, now_ms - epoch_ms, q);
}

int mock_tele_pattern_moves(unsigned int kind, uint64_t epoch_ms)
{
    if (kind == PATTERN_NONE || kind > PATTERN_LAST) {
        return 0; /* 0, always */
    }
    if (kind != PATTERN_STEADY) {
        return 1;
    }
    uint64_t now_ms = now_quantum() * TELE_QUANTUM_MS;
    return now_ms < pattern_start_ms(epoch_ms, now_ms); /* 0 until it starts, its level from then on */
}

uint64_t mock_tele_quantum(void)
{
    return now_quantum();
}

unsigned int mock_tele_mem_util(unsigned int u)
{
    return (u * MEM_UTIL_PCT + 50u) / 100u;
}

uint64_t mock_tele_now_us(void)
{
    return now_quantum() * TELE_QUANTUM_MS * 1000u;
}
