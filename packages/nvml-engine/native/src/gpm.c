/*
 * GPM (nvml.h "NVML GPM": GPM Functions): GPU performance monitoring samples and the metrics
 * computed between two of them, on Hopper and later boards, as DCGM's profiling module and
 * dcgm-exporter's DCGM_FI_PROF_* families read them.
 *
 * A sample is a snapshot of what the rest of the library reports at one telemetry quantum:
 * the GPU's utilization (its pattern, or the live value, raised by the allocation records'
 * processes, exactly as nvmlDeviceGetUtilizationRates answers), the memory utilization, the
 * encoder/decoder utilization, and the cumulative PCIe and NVLink byte counters the pattern
 * integrates. A metric between samples 1 and 2 is the mean of the two snapshots for a ratio
 * (so a steady pattern gives the same value whatever the interval), or the counter delta over
 * the interval for a rate, so GPM agrees with nvmlDeviceGetPcieThroughput and the NVLink
 * throughput counters over the same window. The SM, tensor and pipe activities are fixed
 * shares of the GPU utilization (a dense-GEMM-like workload): they rise and fall with it.
 *
 * MIG: nvmlGpmMigSampleGet samples one GPU instance of a GPU in MIG mode; its utilization is
 * the allocation records' processes on that instance (their sum, capped at 100), or the GPU's
 * own pattern when set. Streaming is a per-device flag kept in this process, off at init.
 *
 * Samples are looked up among those this process allocated (handles.h): a freed sample, a
 * second free or a call racing the free answers NVML_ERROR_INVALID_ARGUMENT.
 */
#include "handles.h"
#include "mig.h"
#include "mock.h"
#include "processes.h"
#include "telemetry.h"

#include <stdlib.h>
#include <string.h>

#define GPM_NO_GI 0xFFFFFFFFu
#define MIB 1048576.0

struct nvmlGpmSample_st {
    struct mock_handle handle; /* in `samples` */
    uint32_t filled;
    const struct nvmlDevice_st *d;
    uint32_t gi; /* GPM_NO_GI: the whole GPU */
    uint64_t t_us;
    uint32_t util, mem_util, enc_util, dec_util;
    uint32_t counted; /* the byte counters below come from a pattern */
    uint64_t pcie_tx, pcie_rx;     /* bytes */
    uint64_t nvlink_tx, nvlink_rx; /* KiB */
};

/* Shares (percent of the GPU utilization) of each activity a metric reports. */
struct gpm_share {
    nvmlGpmMetricId_t id;
    unsigned int percent;
    const char *short_name;
    const char *long_name;
};

static const struct gpm_share shares[] = {
    {NVML_GPM_METRIC_GRAPHICS_UTIL, 100, "gr_util", "graphics/compute engine active"},
    {NVML_GPM_METRIC_SM_UTIL, 92, "sm_util", "SMs active"},
    {NVML_GPM_METRIC_SM_OCCUPANCY, 61, "sm_occupancy", "warps resident vs theoretical maximum"},
    {NVML_GPM_METRIC_INTEGER_UTIL, 12, "integer_util", "integer pipe active"},
    {NVML_GPM_METRIC_ANY_TENSOR_UTIL, 47, "any_tensor_util", "any tensor pipe active"},
    {NVML_GPM_METRIC_DFMA_TENSOR_UTIL, 0, "dfma_tensor_util", "DFMA tensor pipe active"},
    {NVML_GPM_METRIC_HMMA_TENSOR_UTIL, 47, "hmma_tensor_util", "HMMA tensor pipe active"},
    {NVML_GPM_METRIC_DMMA_TENSOR_UTIL, 0, "dmma_tensor_util", "DMMA tensor pipe active"},
    {NVML_GPM_METRIC_IMMA_TENSOR_UTIL, 0, "imma_tensor_util", "IMMA tensor pipe active"},
    {NVML_GPM_METRIC_FP64_UTIL, 3, "fp64_util", "FP64 pipe active"},
    {NVML_GPM_METRIC_FP32_UTIL, 28, "fp32_util", "FP32 pipe active"},
    {NVML_GPM_METRIC_FP16_UTIL, 9, "fp16_util", "FP16 pipe active"},
};

static _Atomic unsigned int streaming[STATE_MAX_GPUS];

static int gpm_board(const struct nvmlDevice_st *d)
{
    return d->s.architecture >= NVML_DEVICE_ARCH_HOPPER && d->s.architecture != NVML_DEVICE_ARCH_DLA;
}

/* The samples this process allocated and has not begun to free. */
static struct mock_handles samples = MOCK_HANDLES_INIT;

void mock_gpm_fork_prepare(void)
{
    mock_handles_fork_prepare(&samples);
}

void mock_gpm_fork_parent(void)
{
    mock_handles_fork_parent(&samples);
}

void mock_gpm_fork_child(void)
{
    mock_handles_fork_child(&samples);
}

/* A reference to the sample `p` names (NULL: none); given back with sample_drop. */
static struct nvmlGpmSample_st *sample_take(const void *p)
{
    return (struct nvmlGpmSample_st *)(void *)mock_handle_take(&samples, p);
}

static void sample_drop(struct nvmlGpmSample_st *s)
{
    if (s != NULL) {
        mock_handle_drop(&samples, &s->handle);
    }
}

/* The GPU's own utilization now: its pattern's, else the live or board value. */
static void own_util(const struct nvmlDevice_st *d, uint32_t *util, uint32_t *mem)
{
    if (mock_tele_on(d)) {
        static const enum mock_tele_field fields[2] = {TELE_UTIL_GPU, TELE_UTIL_MEM};
        uint64_t v[2];
        mock_telemetry_values(d, 2, fields, v);
        *util = (uint32_t)v[0];
        *mem = (uint32_t)v[1];
        return;
    }
    *util = live_util_gpu_pct(d);
    *mem = live_util_mem_pct(d);
}

struct gi_sum {
    unsigned int gi;
    unsigned int sum;
};

static void add_gi_util(const struct mock_proc *p, void *arg)
{
    struct gi_sum *g = arg;
    if (p->gpu_instance == g->gi && g->sum < 100u) {
        g->sum += mock_proc_util(p);
    }
}

static void fill(struct nvmlGpmSample_st *s, const struct nvmlDevice_st *d, uint32_t gi)
{
    uint32_t util = 0, mem = 0;
    own_util(d, &util, &mem);
    unsigned int procs;
    if (gi == GPM_NO_GI) {
        procs = mock_procs_util(d, NULL);
    } else {
        struct gi_sum g = {gi, 0};
        mock_procs_each(d, add_gi_util, &g);
        procs = g.sum > 100u ? 100u : g.sum;
    }
    if (procs > util) {
        util = procs;
    }
    if (mock_proc_mem_util(procs) > mem) {
        mem = mock_proc_mem_util(procs);
    }
    /* everything but the handle part, which the registry guards */
    memset((unsigned char *)s + sizeof(s->handle), 0, sizeof(*s) - sizeof(s->handle));
    s->filled = 1;
    s->d = d;
    s->gi = gi;
    s->t_us = mock_tele_now_us();
    s->util = util;
    s->mem_util = mem;
    s->enc_util = live_util_encoder_pct(d);
    s->dec_util = live_util_decoder_pct(d);
    if (mock_tele_on(d)) {
        static const enum mock_tele_field fields[4] = {TELE_PCIE_TX_BYTES, TELE_PCIE_RX_BYTES,
                                                       TELE_NVLINK_RAW_TX_KIB, TELE_NVLINK_RAW_RX_KIB};
        uint64_t v[4];
        mock_telemetry_values(d, 4, fields, v);
        s->counted = 1;
        s->pcie_tx = v[0];
        s->pcie_rx = v[1];
        s->nvlink_tx = v[2];
        s->nvlink_rx = v[3];
    }
}

MOCK_EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(gpmSample);
    struct nvmlGpmSample_st *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return NVML_ERROR_MEMORY;
    }
    mock_handle_add(&samples, &s->handle);
    *gpmSample = s;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample)
{
    REQUIRE_LIVE();
    struct mock_handle *h = mock_handle_unlist(&samples, gpmSample);
    REQUIRE_ARG(h);
    mock_handle_wait_unused(&samples, h, NULL, NULL);
    free(h);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(gpmSupport);
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    gpmSupport->isSupportedDevice = (unsigned int)gpm_board(d);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample)
{
    GET_DEVICE(device, d);
    struct nvmlGpmSample_st *s = sample_take(gpmSample);
    REQUIRE_ARG(s);
    nvmlReturn_t rc = NVML_ERROR_NOT_SUPPORTED;
    if (gpm_board(d)) {
        fill(s, d, GPM_NO_GI);
        rc = NVML_SUCCESS;
    }
    sample_drop(s);
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t gpmSample)
{
    GET_DEVICE(device, d);
    struct nvmlGpmSample_st *s = sample_take(gpmSample);
    REQUIRE_ARG(s);
    nvmlReturn_t rc = gpm_board(d) ? mock_mig_gi_present(device, gpuInstanceId) : NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS) {
        fill(s, d, gpuInstanceId);
    }
    sample_drop(s);
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlGpmQueryIfStreamingEnabled(nvmlDevice_t device, unsigned int *state)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(state);
    if (!gpm_board(d)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *state = atomic_load_explicit(&streaming[d->board], memory_order_relaxed);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlGpmSetStreamingEnabled(nvmlDevice_t device, unsigned int state)
{
    GET_DEVICE(device, d);
    if (!gpm_board(d)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (state > 1u) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    atomic_store_explicit(&streaming[d->board], state, memory_order_relaxed);
    return NVML_SUCCESS;
}

static double mean(uint32_t a, uint32_t b)
{
    return ((double)a + (double)b) / 2.0;
}

/* MiB/s of a counter that moved from `a` to `b` (units of `unit` bytes) over `seconds`. */
static double rate(int counted, uint64_t a, uint64_t b, double unit, double seconds)
{
    if (!counted || b < a) {
        return 0.0;
    }
    return (double)(b - a) * unit / MIB / seconds;
}

static unsigned int links_up(const struct nvmlDevice_st *d)
{
    unsigned int n = 0;
    for (unsigned int l = 0; l < d->s.nvlink_count; l++) {
        n += !mock_nvlink_is_down(d, l);
    }
    return n;
}

static void metric(nvmlGpmMetric_t *m, const struct nvmlGpmSample_st *a, const struct nvmlGpmSample_st *b,
                   double seconds)
{
    const unsigned int id = m->metricId;
    const int counted = a->counted && b->counted;
    const double util = mean(a->util, b->util);
    m->nvmlReturn = NVML_SUCCESS;
    m->metricInfo.unit = "%";
    for (size_t i = 0; i < sizeof(shares) / sizeof(shares[0]); i++) {
        if (shares[i].id == id) {
            m->value = util * shares[i].percent / 100.0;
            m->metricInfo.shortName = (char *)shares[i].short_name;
            m->metricInfo.longName = (char *)shares[i].long_name;
            return;
        }
    }
    unsigned int up = links_up(a->d);
    switch (id) {
    case NVML_GPM_METRIC_DRAM_BW_UTIL:
        m->value = mean(a->mem_util, b->mem_util);
        m->metricInfo.shortName = "dram_bw_util";
        m->metricInfo.longName = "DRAM bandwidth used vs theoretical maximum";
        return;
    case NVML_GPM_METRIC_NVDEC_0_UTIL:
        m->value = mean(a->dec_util, b->dec_util);
        m->metricInfo.shortName = "nvdec_0_util";
        m->metricInfo.longName = "NVDEC 0 active";
        return;
    case NVML_GPM_METRIC_PCIE_TX_PER_SEC:
    case NVML_GPM_METRIC_PCIE_RX_PER_SEC: {
        int tx = id == NVML_GPM_METRIC_PCIE_TX_PER_SEC;
        m->value = tx ? rate(counted, a->pcie_tx, b->pcie_tx, 1.0, seconds)
                      : rate(counted, a->pcie_rx, b->pcie_rx, 1.0, seconds);
        m->metricInfo.shortName = tx ? "pcie_tx_per_sec" : "pcie_rx_per_sec";
        m->metricInfo.longName = tx ? "PCIe traffic from this GPU" : "PCIe traffic to this GPU";
        m->metricInfo.unit = "MiB/sec";
        return;
    }
    case NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC:
    case NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: {
        if (a->d->s.nvlink_count == 0) {
            break;
        }
        int tx = id == NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC;
        m->value = tx ? rate(counted, a->nvlink_tx, b->nvlink_tx, 1024.0, seconds)
                      : rate(counted, a->nvlink_rx, b->nvlink_rx, 1024.0, seconds);
        m->metricInfo.shortName = tx ? "nvlink_total_tx_per_sec" : "nvlink_total_rx_per_sec";
        m->metricInfo.longName = tx ? "NvLink write bandwidth for all links" : "NvLink read bandwidth for all links";
        m->metricInfo.unit = "MiB/sec";
        return;
    }
    default:
        if (id >= NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC && id <= NVML_GPM_METRIC_NVLINK_L17_TX_PER_SEC) {
            unsigned int link = (id - NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC) / 2u;
            int tx = (id - NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC) % 2u == 1u;
            if (link >= a->d->s.nvlink_count) {
                break;
            }
            double total = tx ? rate(counted, a->nvlink_tx, b->nvlink_tx, 1024.0, seconds)
                              : rate(counted, a->nvlink_rx, b->nvlink_rx, 1024.0, seconds);
            /* the traffic is spread over the links that are up; a link that is down moves none */
            m->value = (up == 0 || mock_nvlink_is_down(a->d, link)) ? 0.0 : total / up;
            m->metricInfo.shortName = tx ? "nvlink_tx_per_sec" : "nvlink_rx_per_sec";
            m->metricInfo.longName = tx ? "NvLink write bandwidth for one link" : "NvLink read bandwidth for one link";
            m->metricInfo.unit = "MiB/sec";
            return;
        }
        break;
    }
    m->value = 0.0;
    m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    m->metricInfo.shortName = NULL;
    m->metricInfo.longName = NULL;
    m->metricInfo.unit = NULL;
}

/* The metrics between two samples the caller holds (references taken). */
static nvmlReturn_t metrics_between(nvmlGpmMetricsGet_t *metricsGet, const struct nvmlGpmSample_st *a,
                                    const struct nvmlGpmSample_st *b)
{
    if (a == NULL || b == NULL || !a->filled || !b->filled || metricsGet->numMetrics > NVML_GPM_METRIC_MAX) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    /* two samples of one GPU (or one GPU instance of it), the second taken later */
    if (a->d != b->d || a->gi != b->gi || b->t_us <= a->t_us) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    const struct nvmlDevice_st *now = NULL;
    nvmlReturn_t rc = mock_device((nvmlDevice_t)(uintptr_t)a->d, &now); /* lost since: lost now */
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    const double seconds = (double)(b->t_us - a->t_us) / 1e6;
    for (unsigned int i = 0; i < metricsGet->numMetrics; i++) {
        metric(&metricsGet->metrics[i], a, b, seconds);
    }
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(metricsGet);
    if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    struct nvmlGpmSample_st *a = sample_take(metricsGet->sample1);
    struct nvmlGpmSample_st *b = sample_take(metricsGet->sample2);
    nvmlReturn_t rc = metrics_between(metricsGet, a, b);
    sample_drop(b);
    sample_drop(a);
    return rc;
}
