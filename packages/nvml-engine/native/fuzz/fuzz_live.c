/*
 * libFuzzer entry for the live layer's reader: a fixed 2-GPU state is written once to a
 * temporary directory (MOCK_NVML_CONFIG), and every input becomes the live.nvmlmock beside
 * it, derived from a valid template built here from live_layout.h (header fields, record
 * UUIDs = the state's). Then nvmlInit, every getter that answers from a live key on both
 * GPUs, nvmlShutdown. Whatever the file holds:
 *
 *   - init answers SUCCESS (a bad live file never fails init);
 *   - the file is used exactly when an independent check of it here says it is valid
 *     (size, magic, format, layout fields, not retired, both UUIDs the state's), and when
 *     it is not, one line `nvml-mock: live layer <path> ignored: <reason>` reaches stderr
 *     and nvmlErrorString(NVML_ERROR_INVALID_STATE) says why;
 *   - every getter answers the value this harness predicts from the bytes it wrote: the
 *     live value clamped to the key's declared bounds (LIVE_GPU_KEYS) where the record's
 *     sequence counter is even and the mask bit set, else the board value, with the
 *     getter's own rules on top (memory used clamped to the board's room, used + free +
 *     reserved = total, BAR1 used <= total, NOT_SUPPORTED when the power limit is 0, ...);
 *   - arrays sized by a count the library just reported (retired pages) are never overrun
 *     (they are allocated to the exact size, so ASan sees an overrun);
 *   - no crash, no hang (an odd sequence counter makes readers give up, not spin).
 *
 * The live-only keys (slots 64 on) are kept unset: see keep_live_only_keys_unset().
 *
 * The first input byte picks how the rest makes the file (mode = byte % 8):
 *   0  values: 10-byte entries (gpu bit 0, clear bit 1; slot % 64; value LE64) on a valid file
 *   1  overlay the input at offset 0 (the header)
 *   2  overlay the input at the first record
 *   3  overlay the input at record 0's mask (mask words, armed words, values)
 *   4  truncate/extend: the template cut or zero-padded to LE32 % (size + 4097) bytes
 *   5  the raw input is the whole file
 *   6  values as mode 0, then the sequence counter of record (byte >> 3) & 1 left odd
 *   7  overlay the input after its first 4 bytes at offset LE32 % size
 *
 * A first byte with bit 7 set writes the process (allocation) region instead, on a valid file
 * (see derive_processes()): bit 6 clear, 32-byte record entries (slot, damage flags, in_use,
 * pid, GPU mask, memory, pattern, start); bit 6 set, the input overlaid raw at the region's
 * first record. Bit 5 takes the header's process_high from the input's first 4 bytes as they
 * are (beyond the slots, below the records), else it is what a writer leaves. Whatever the
 * region holds, the process lists, process utilization, used memory and utilization rates of
 * both GPUs answer what an independent reading of the bytes predicts (expect_processes()).
 *
 * standalone_main.c drives the same entry points without libFuzzer (the pytest replay).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nvml.h>

#include "live_layout.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reports go to the saved stderr while fd 2 is captured (sanitizer builds only). */
void __sanitizer_set_report_fd(void *fd) __attribute__((weak));

#define GPUS 2
#define EXTRA 4097u
#define MAX_PAGES 64u
#define NOW_MS 7680000ull /* the pinned clock: minute 128 (process start times are whole minutes) */
#define NOW_MS_TEXT "7680000"
#define QUANTUM_MS 100u   /* TELE_QUANTUM_MS: samples are stamped with the quantum's start */

static void fail_at(int line, const char *what)
{
    fprintf(stderr, "fuzz_live: invariant broken at line %d: %s\n", line, what);
    __builtin_trap();
}
#define CHECK(cond)                 \
    do {                            \
        if (!(cond)) {              \
            fail_at(__LINE__, #cond); \
        }                           \
    } while (0)

/* ---- the declared live keys, by slot ------------------------------------------------- */

struct key {
    const char *name;
    int is_signed;
    int64_t smin, smax;
    uint64_t umin, umax;
};
#define KEY_ROW(k, slot, sg, lo, hi) [slot] = {#k, sg, (int64_t)(lo), (int64_t)(hi), (uint64_t)(lo), (uint64_t)(hi)},
static const struct key keys[LIVE_KEY_SLOTS] = {LIVE_GPU_KEYS(KEY_ROW)};
#define SLOT_ROW(k, slot, sg, lo, hi) S_##k = (slot),
enum { LIVE_GPU_KEYS(SLOT_ROW) S_COUNT_ };
_Static_assert(LIVE_MASK_WORDS == 2 && S_COUNT_ <= 64, "board-backed live keys fill mask word 0");

/* The board value of every live key on both GPUs (what the state file says). */
static const int64_t board[GPUS][S_COUNT_] = {
    {5, 16, 3, 1048576, 1048576, 1, 0, 345, 345, 2619, 765, 1980, 2619, 1, 68920, 700000, 123456789, 70000, 12000,
     900000, 910000, 2700000, 29, 37, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4, 2, 1, 0, 5, 1, 0, 0, 0, 3, 0x1aa},
    {4, 8, 0, 2097152, 4194304, 0, 3, 1410, 1410, 1593, 1275, 1410, 1593, 0, 91000, 400000, 0, 0, 0, 0, 0, 0, 41, 0,
     35, 12, 7, 5, 6, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 3, 0},
};
static const char *const uuid[GPUS] = {"GPU-4c1f0a2e-9d3b-4e57-8a61-0b2c3d4e5f60",
                                       "GPU-4c1f0a2e-9d3b-4e57-8a61-0b2c3d4e5f61"};
#define MEM_TOTAL 85520809984ULL
#define MEM_RESERVED 503316480ULL
#define BAR1_TOTAL 137438953472ULL
#define TEMP_GPU_MAX 87
#define REMAP_BANKS 4096u
static const unsigned int num_fans[GPUS] = {0, 2};
static const int fabric_attached[GPUS] = {1, 0};
static const int retired_supported[GPUS] = {1, 0};
static const int power_average_answers[GPUS] = {1, 0}; /* Hopper yes, GA100 no */

/* Non-live keys; the live ones are appended from `board`. */
static const char state_head[] =
    "nvml-mock-state 1\n[system]\ndriver_version=580.65.06\nnvml_version=13.580.65.06\n"
    "cuda_driver_version=13000\ndevice_count=2\nnode_name=fuzz-live\nprofile=fuzz\n";
static const char gpu_common[] =
    "serial=165322030%04u\nboard_part_number=692-2G520-0200-000\nboard_id=%u\nminor_number=%u\nbrand=14\n"
    "cuda_cc_major=%u\ncuda_cc_minor=0\nvbios_version=96.00.99.00.01\ninforom_image_version=G520.0200.00.05\n"
    "pci_bus_id=00000000:%02X:00.0\npci_subsystem_id=0x16C110DE\npcie_max_gen=5\npcie_max_width=16\n"
    "memory_total_bytes=85520809984\nmemory_reserved_bytes=503316480\nmemory_bus_width=5120\n"
    "bar1_total_bytes=137438953472\ncpu_affinity=0-7\ndisplay_mode=0\ndisplay_active=0\n"
    "max_clock_graphics_mhz=1980\nmax_clock_sm_mhz=1980\nmax_clock_mem_mhz=2619\nmax_clock_video_mhz=1545\n"
    "power_default_limit_mw=700000\npower_min_limit_mw=200000\npower_max_limit_mw=700000\n"
    "temp_shutdown_c=92\ntemp_slowdown_c=89\ntemp_gpu_max_c=87\ntemp_mem_max_c=95\nrow_remapper_banks=4096\n";
static const char gpu0_extra[] =
    "name=NVIDIA H100 80GB HBM3\narchitecture=9\npci_device_id=0x233010DE\nmargin_temperature_supported=1\n"
    "retired_pages_supported=1\nremapped_rows_supported=1\nnum_fans=0\nmodule_power_default_limit_mw=2700000\n"
    "module_power_min_limit_mw=400000\nmodule_power_max_limit_mw=2700000\nnvlink_count=18\nnvlink_version=6\n"
    "fabric_attached=1\nfabric_cluster_uuid=00000000-0000-0000-0000-000000000001\nfabric_clique_id=7\n";
static const char gpu1_extra[] =
    "name=NVIDIA A100-SXM4-80GB\narchitecture=7\npci_device_id=0x20B210DE\nmargin_temperature_supported=0\n"
    "retired_pages_supported=0\nremapped_rows_supported=1\nnum_fans=2\nfabric_attached=0\n";

/* ---- files ---------------------------------------------------------------------------- */

static char dir[256];
static char state_path[300];
static char live_path[300];
static int live_fd = -1;
static int capture_fd = -1;
static int saved_stderr = -1;
static size_t live_len = (size_t)-1;
static unsigned char tmpl[LIVE_TOTAL_BYTES];
static unsigned char file[LIVE_TOTAL_BYTES + EXTRA];

static void put64(unsigned char *p, unsigned int off, uint64_t v) { memcpy(p + off, &v, sizeof(v)); }
static uint32_t get32(const unsigned char *p, size_t off) { uint32_t v; memcpy(&v, p + off, sizeof(v)); return v; }
static uint64_t get64(const unsigned char *p, size_t off) { uint64_t v; memcpy(&v, p + off, sizeof(v)); return v; }

static unsigned char *record(unsigned char *base, unsigned int gpu)
{
    return base + LIVE_RECORDS_OFFSET + (size_t)gpu * LIVE_RECORD_BYTES;
}

static void build_template(void)
{
    memset(tmpl, 0, sizeof(tmpl));
    live_layout_init(tmpl, GPUS);
    for (unsigned int g = 0; g < GPUS; g++) {
        memcpy(record(tmpl, g) + LIVE_RECORD_UUID, uuid[g], strlen(uuid[g]) + 1);
    }
}

static void write_all(int fd, const char *text, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        CHECK(w > 0 || (w < 0 && errno == EINTR));
        done += w > 0 ? (size_t)w : 0;
    }
}

static void write_state(void)
{
    static char text[16384];
    size_t n = (size_t)snprintf(text, sizeof(text), "%s", state_head);
    for (unsigned int g = 0; g < GPUS; g++) {
        n += (size_t)snprintf(text + n, sizeof(text) - n, "[gpu %u]\nuuid=%s\n%s", g, uuid[g],
                              g == 0 ? gpu0_extra : gpu1_extra);
        n += (size_t)snprintf(text + n, sizeof(text) - n, gpu_common, g, 0x1800u + g * 0x100u, g, g == 0 ? 9u : 8u,
                              0x18u + g);
        for (unsigned int s = 0; s < S_COUNT_; s++) {
            n += (size_t)snprintf(text + n, sizeof(text) - n, "%s=%lld\n", keys[s].name, (long long)board[g][s]);
        }
        CHECK(n < sizeof(text));
    }
    int fd = open(state_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    write_all(fd, text, n);
    CHECK(close(fd) == 0);
}

static void remove_files(void)
{
    unlink(live_path);
    unlink(state_path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/nvml-mock-fuzz-live.XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(state_path, sizeof(state_path), "%s/state.nvmlmock", dir);
    snprintf(live_path, sizeof(live_path), "%s/live.nvmlmock", dir); /* the default place */
    atexit(remove_files);
    write_state();
    build_template();
    setenv("MOCK_NVML_CONFIG", state_path, 1);
    /* "now" pinned, so a process's utilization pattern answers the same all through one input */
    setenv("MOCK_NVML_NOW_MS", NOW_MS_TEXT, 1);
    unsetenv("MOCK_NVML_LIVE");
    unsetenv("MOCK_FABRIC_CLUSTER_UUID");
    unsetenv("MOCK_FABRIC_CLIQUE_ID");
    live_fd = open(live_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    CHECK(live_fd >= 0);
    capture_fd = memfd_create("fuzz-live-stderr", MFD_CLOEXEC);
    saved_stderr = fcntl(2, F_DUPFD_CLOEXEC, 3);
    CHECK(capture_fd >= 0 && saved_stderr >= 0);
    if (__sanitizer_set_report_fd != NULL) {
        __sanitizer_set_report_fd((void *)(intptr_t)saved_stderr);
    }
    return 0;
}

/* The bytes of `file` the previous input changed and the current one changes: only those
 * are restored from the template and rewritten (the whole file when its length changes). */
static size_t prev_lo = 0;
static size_t prev_hi = LIVE_TOTAL_BYTES + EXTRA;
static size_t cur_lo;
static size_t cur_hi;

static void touch(size_t lo, size_t hi)
{
    cur_lo = lo < cur_lo ? lo : cur_lo;
    cur_hi = hi > cur_hi ? hi : cur_hi;
}

/* The file is rewritten in place (one inode), so the library's mapping cache holds one entry. */
static void write_live(size_t len)
{
    size_t lo = prev_lo < cur_lo ? prev_lo : cur_lo;
    size_t hi = prev_hi > cur_hi ? prev_hi : cur_hi;
    if (len != live_len) {
        CHECK(ftruncate(live_fd, (off_t)len) == 0);
        live_len = len;
        lo = 0;
        hi = len;
    }
    hi = hi < len ? hi : len;
    while (lo < hi) {
        ssize_t w = pwrite(live_fd, file + lo, hi - lo, (off_t)lo);
        CHECK(w > 0 || (w < 0 && errno == EINTR));
        lo += w > 0 ? (size_t)w : 0;
    }
    prev_lo = cur_lo;
    prev_hi = cur_hi;
}

/* ---- what the library must answer --------------------------------------------------- */

static int accepted;

/* Independent of live.c: is this file one the library must use? */
static int valid_file(const unsigned char *f, size_t len)
{
    if (len != LIVE_TOTAL_BYTES || memcmp(f, LIVE_MAGIC, sizeof(LIVE_MAGIC)) != 0) {
        return 0;
    }
    static const unsigned int f32[] = {LIVE_HDR_FORMAT, LIVE_HDR_HEADER_BYTES, LIVE_HDR_GPU_SLOTS,
                                       LIVE_HDR_KEY_SLOTS, LIVE_HDR_RECORD_BYTES, LIVE_HDR_PROCESS_SLOTS,
                                       LIVE_HDR_PROCESS_RECORD_BYTES, LIVE_HDR_MIG_BYTES_PER_GPU,
                                       LIVE_HDR_EVENT_SLOTS, LIVE_HDR_EVENT_RECORD_BYTES};
    static const unsigned int f64[] = {LIVE_HDR_TOTAL_BYTES, LIVE_HDR_RECORDS_OFFSET, LIVE_HDR_PROCESSES_OFFSET,
                                       LIVE_HDR_MIG_OFFSET, LIVE_HDR_EVENTS_OFFSET};
    for (size_t i = 0; i < sizeof(f32) / sizeof(f32[0]); i++) {
        if (get32(f, f32[i]) != get32(tmpl, f32[i])) {
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof(f64) / sizeof(f64[0]); i++) {
        if (get64(f, f64[i]) != get64(tmpl, f64[i])) {
            return 0;
        }
    }
    if (get32(f, LIVE_HDR_RETIRED) != 0) {
        return 0;
    }
    for (unsigned int g = 0; g < GPUS; g++) {
        const unsigned char *u = f + LIVE_RECORDS_OFFSET + (size_t)g * LIVE_RECORD_BYTES + LIVE_RECORD_UUID;
        if (memchr(u, '\0', LIVE_RECORD_UUID_BYTES) == NULL || strcmp((const char *)u, uuid[g]) != 0) {
            return 0;
        }
    }
    return 1;
}

/* The value key `slot` of GPU `g` must have: the live one, clamped, or the board's. */
static int64_t E(unsigned int g, unsigned int slot)
{
    if (accepted) {
        const unsigned char *rec = record(file, g);
        uint64_t seq = get64(rec, LIVE_RECORD_SEQ);
        uint64_t mask = get64(rec, LIVE_RECORD_MASK + (slot / 64u) * 8u);
        if ((seq & 1u) == 0 && (mask >> (slot % 64u)) & 1u) {
            uint64_t v = get64(rec, LIVE_RECORD_VALUES + slot * 8u);
            const struct key *k = &keys[slot];
            if (k->is_signed) {
                int64_t s = (int64_t)v;
                return s < k->smin ? k->smin : s > k->smax ? k->smax : s;
            }
            return (int64_t)(v < k->umin ? k->umin : v > k->umax ? k->umax : v);
        }
    }
    return board[g][slot];
}

static uint64_t U(unsigned int g, unsigned int slot) { return (uint64_t)E(g, slot); }

/* A getter's answer for a live key: within the key's declared bounds, and the expected value. */
static void expect_key(int line, unsigned int g, unsigned int slot, uint64_t got)
{
    const struct key *k = &keys[slot];
    int in = k->is_signed ? ((int64_t)got >= k->smin && (int64_t)got <= k->smax) : (got >= k->umin && got <= k->umax);
    if (!in || got != U(g, slot)) {
        fprintf(stderr, "gpu %u %s: got %llu, want %llu (bounds %s)\n", g, k->name, (unsigned long long)got,
                (unsigned long long)U(g, slot), in ? "ok" : "broken");
        fail_at(line, k->name);
    }
}
#define KEY(g, k, got) expect_key(__LINE__, (g), S_##k, (uint64_t)(got))
#define OK(call) CHECK((call) == NVML_SUCCESS)

static uint64_t field_value(const nvmlFieldValue_t *v)
{
    switch (v->valueType) {
    case NVML_VALUE_TYPE_UNSIGNED_INT: return v->value.uiVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return v->value.ullVal;
    case NVML_VALUE_TYPE_SIGNED_INT: return (uint64_t)(int64_t)v->value.siVal;
    default: fail_at(__LINE__, "field value of an unexpected type"); return 0;
    }
}

/* A field value that answers `want` where it is non-zero and NOT_SUPPORTED where it is 0. */
static void expect_field_or_ns(int line, const nvmlFieldValue_t *v, uint64_t want)
{
    if (want == 0 ? v->nvmlReturn != NVML_ERROR_NOT_SUPPORTED
                  : (v->nvmlReturn != NVML_SUCCESS || field_value(v) != want)) {
        fprintf(stderr, "field %u scope %u: rc %d value %llu, want %llu\n", v->fieldId, v->scopeId,
                (int)v->nvmlReturn, (unsigned long long)(v->nvmlReturn == NVML_SUCCESS ? field_value(v) : 0),
                (unsigned long long)want);
        fail_at(line, "field value");
    }
}

/* ---- the process (allocation) region ------------------------------------------------- */

/* What a process record must answer, read here from the bytes independently of processes.c. */
struct want_proc {
    uint32_t pid;
    uint64_t used;
    unsigned int util_lo, util_hi; /* the SM utilization's range now (exact where equal) */
};

static struct want_proc want_procs[GPUS][LIVE_PROCESS_SLOTS];
static unsigned int want_nprocs[GPUS];
static uint64_t want_procs_used[GPUS]; /* their memory, summed (saturating) */
static unsigned int got_procs_util[GPUS]; /* the sum of the samples the library gave, capped */

/* The utilization range of pattern `kind` at level `level` started at `start_ms`, at NOW_MS. */
static void util_range(uint32_t kind, uint32_t level, uint64_t start_ms, unsigned int *lo, unsigned int *hi)
{
    unsigned int peak = level > 100u ? 100u : level;
    *lo = *hi = 0;
    if (kind == 0 || kind > 4 || start_ms / QUANTUM_MS * QUANTUM_MS > NOW_MS) {
        return; /* none, unknown, or not started yet */
    }
    switch (kind) {
    case 1: *lo = *hi = peak; return;      /* steady */
    case 2: *lo = 90; *hi = 100; return;   /* busy: 90..100 */
    default: *hi = peak == 0 ? 100 : peak; /* burst or sine: up to the peak (0 = 100) */
    }
}

static void predict_processes(void)
{
    memset(want_nprocs, 0, sizeof(want_nprocs));
    memset(want_procs_used, 0, sizeof(want_procs_used));
    if (!accepted) {
        return; /* an ignored file holds no process either */
    }
    uint32_t high = get32(file, LIVE_HDR_PROCESS_HIGH);
    high = high < LIVE_PROCESS_SLOTS ? high : LIVE_PROCESS_SLOTS;
    /* what is left for processes: the records are served in slot order, each getting at most
     * what the GPU's own use and the earlier records left */
    uint64_t left[GPUS];
    for (unsigned int g = 0; g < GPUS; g++) {
        uint64_t room = MEM_TOTAL - MEM_RESERVED;
        uint64_t own = U(g, S_memory_used_bytes);
        left[g] = own < room ? room - own : 0;
    }
    for (uint32_t slot = 0; slot < high; slot++) {
        const unsigned char *rec = file + LIVE_PROCESSES_OFFSET + (size_t)slot * LIVE_PROCESS_RECORD_BYTES;
        if ((get64(rec, LIVE_PROC_SEQ) & 1u) != 0 || get32(rec, LIVE_PROC_IN_USE) != 1) {
            continue; /* a writer died mid-write, or the slot is free (or damaged) */
        }
        uint64_t mask = get64(rec, LIVE_PROC_GPU_MASK);
        for (unsigned int g = 0; g < GPUS; g++) {
            if (((mask >> g) & 1u) == 0) {
                continue;
            }
            struct want_proc *w = &want_procs[g][want_nprocs[g]++];
            w->pid = get32(rec, LIVE_PROC_PID);
            w->used = get64(rec, LIVE_PROC_USED_MEMORY_BYTES);
            w->used = w->used < left[g] ? w->used : left[g];
            left[g] -= w->used;
            util_range(get32(rec, LIVE_PROC_UTIL_PATTERN), get32(rec, LIVE_PROC_UTIL_LEVEL),
                       get64(rec, LIVE_PROC_START_TIME_MS), &w->util_lo, &w->util_hi);
            uint64_t sum = want_procs_used[g] + w->used;
            want_procs_used[g] = sum < w->used ? UINT64_MAX : sum;
        }
    }
}

#define NO_INSTANCE 0xFFFFFFFFu

/* The compute lists (v1, v2, v3) and the detail list, by NVML's two-call protocol, into
 * buffers of exactly the size asked for (ASan sees an overrun); graphics and MPS are empty. */
static void read_process_lists(unsigned int g, nvmlDevice_t dev)
{
    unsigned int n = want_nprocs[g];
    const struct want_proc *w = want_procs[g];
    nvmlReturn_t more = n > 0 ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    unsigned int count = 0;
    CHECK(nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, NULL) == more && count == n);
    count = 0;
    CHECK(nvmlDeviceGetComputeRunningProcesses_v2(dev, &count, NULL) == more && count == n);
    count = 0;
    CHECK(nvmlDeviceGetComputeRunningProcesses(dev, &count, NULL) == more && count == n);

    size_t cap = n > 0 ? n : 1u; /* exactly the count (malloc(0) may answer NULL) */
    nvmlProcessInfo_t *v3 = malloc(sizeof(*v3) * cap);
    nvmlProcessInfo_v1_t *v1 = malloc(sizeof(*v1) * cap);
    CHECK(v3 != NULL && v1 != NULL);
    if (n > 0) { /* one short: the count, and nothing written past it */
        count = n - 1u;
        nvmlProcessInfo_t *shorter = n > 1 ? malloc(sizeof(*shorter) * (n - 1u)) : NULL;
        CHECK(n == 1 || shorter != NULL);
        CHECK(nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, n > 1 ? shorter : NULL) == more && count == n);
        free(shorter);
    }
    count = n;
    CHECK(nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, v3) == NVML_SUCCESS && count == n);
    for (unsigned int i = 0; i < n; i++) {
        CHECK(v3[i].pid == w[i].pid && v3[i].usedGpuMemory == w[i].used);
        CHECK(v3[i].gpuInstanceId == NO_INSTANCE && v3[i].computeInstanceId == NO_INSTANCE);
    }
    count = n;
    CHECK(nvmlDeviceGetComputeRunningProcesses_v2(dev, &count, (nvmlProcessInfo_v2_t *)v3) == NVML_SUCCESS);
    CHECK(count == n);
    for (unsigned int i = 0; i < n; i++) {
        CHECK(v3[i].pid == w[i].pid && v3[i].usedGpuMemory == w[i].used);
    }
    count = n;
    CHECK(nvmlDeviceGetComputeRunningProcesses(dev, &count, v1) == NVML_SUCCESS && count == n);
    for (unsigned int i = 0; i < n; i++) {
        CHECK(v1[i].pid == w[i].pid && v1[i].usedGpuMemory == w[i].used);
    }
    count = 5;
    CHECK(nvmlDeviceGetGraphicsRunningProcesses_v3(dev, &count, v3) == NVML_SUCCESS && count == 0);
    count = 5;
    CHECK(nvmlDeviceGetMPSComputeRunningProcesses_v3(dev, &count, v3) == NVML_SUCCESS && count == 0);
    free(v3);
    free(v1);

    nvmlProcessDetailList_t list = {.version = nvmlProcessDetailList_v1, .mode = NVML_PROCESS_MODE_COMPUTE};
    CHECK(nvmlDeviceGetRunningProcessDetailList(dev, &list) == more && list.numProcArrayEntries == n);
    nvmlProcessDetail_v1_t *detail = n > 0 ? malloc(sizeof(*detail) * n) : NULL;
    CHECK(n == 0 || detail != NULL);
    list.procArray = detail;
    list.numProcArrayEntries = n;
    OK(nvmlDeviceGetRunningProcessDetailList(dev, &list));
    CHECK(list.numProcArrayEntries == n);
    for (unsigned int i = 0; i < n; i++) {
        CHECK(detail[i].pid == w[i].pid && detail[i].usedGpuMemory == w[i].used);
        CHECK(detail[i].gpuInstanceId == NO_INSTANCE && detail[i].usedGpuCcProtectedMemory == 0);
    }
    list.mode = NVML_PROCESS_MODE_GRAPHICS;
    OK(nvmlDeviceGetRunningProcessDetailList(dev, &list));
    CHECK(list.numProcArrayEntries == 0);
    free(detail);
}

static unsigned int mem_util(unsigned int u) { return (u * 40u + 50u) / 100u; } /* a pattern's */

/* Process utilization, both forms: one sample per process stamped with the pinned quantum,
 * each within its pattern's range (exact where the pattern is), the same in both forms;
 * their sum is kept for the utilization rates. */
static void read_process_util(unsigned int g, nvmlDevice_t dev)
{
    unsigned int n = want_nprocs[g];
    const struct want_proc *w = want_procs[g];
    const unsigned long long now_us = NOW_MS / QUANTUM_MS * QUANTUM_MS * 1000u;
    unsigned int count = 0;
    nvmlReturn_t rc = nvmlDeviceGetProcessUtilization(dev, NULL, &count, 0);
    CHECK(count == n && rc == (n == 0 ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INSUFFICIENT_SIZE));
    size_t cap = n > 0 ? n : 1u;
    nvmlProcessUtilizationSample_t *s = malloc(sizeof(*s) * cap);
    nvmlProcessUtilizationInfo_v1_t *s1 = malloc(sizeof(*s1) * cap);
    CHECK(s != NULL && s1 != NULL);
    count = n;
    rc = nvmlDeviceGetProcessUtilization(dev, s, &count, 0);
    CHECK(count == n && rc == (n == 0 ? NVML_ERROR_NOT_FOUND : NVML_SUCCESS));
    count = n;
    CHECK(nvmlDeviceGetProcessUtilization(dev, s, &count, now_us) == NVML_ERROR_NOT_FOUND && count == 0);
    nvmlProcessesUtilizationInfo_t info = {
        .version = nvmlProcessesUtilizationInfo_v1, .processSamplesCount = n, .procUtilArray = s1};
    OK(nvmlDeviceGetProcessesUtilizationInfo(dev, &info));
    CHECK(info.processSamplesCount == n);
    unsigned int sum = 0;
    for (unsigned int i = 0; i < n; i++) {
        CHECK(s[i].pid == w[i].pid && s[i].timeStamp == now_us);
        CHECK(s[i].smUtil >= w[i].util_lo && s[i].smUtil <= w[i].util_hi && s[i].memUtil == mem_util(s[i].smUtil));
        CHECK(s1[i].pid == s[i].pid && s1[i].timeStamp == now_us && s1[i].smUtil == s[i].smUtil);
        CHECK(s1[i].memUtil == s[i].memUtil);
        sum += s[i].smUtil;
    }
    got_procs_util[g] = sum > 100u ? 100u : sum;
    free(s);
    free(s1);
}

static void read_memory(unsigned int g, nvmlDevice_t dev)
{
    uint64_t room = MEM_TOTAL - MEM_RESERVED;
    uint64_t used = U(g, S_memory_used_bytes) + want_procs_used[g];
    used = used < want_procs_used[g] ? UINT64_MAX : used; /* the board's (or live) plus the records' */
    used = used > room ? room : used;
    nvmlMemory_t m1;
    OK(nvmlDeviceGetMemoryInfo(dev, &m1));
    CHECK(m1.total == MEM_TOTAL && m1.used == used + MEM_RESERVED && m1.used + m1.free == m1.total);
    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    OK(nvmlDeviceGetMemoryInfo_v2(dev, &m2));
    CHECK(m2.total == MEM_TOTAL && m2.reserved == MEM_RESERVED && m2.used == used);
    CHECK(m2.used + m2.free + m2.reserved == m2.total);
    uint64_t bar1 = U(g, S_bar1_used_bytes) > BAR1_TOTAL ? BAR1_TOTAL : U(g, S_bar1_used_bytes);
    nvmlBAR1Memory_t b;
    OK(nvmlDeviceGetBAR1MemoryInfo(dev, &b));
    CHECK(b.bar1Total == BAR1_TOTAL && b.bar1Used == bar1 && b.bar1Used <= b.bar1Total);
    CHECK(b.bar1Used + b.bar1Free == b.bar1Total);
}

static void read_pcie_modes(unsigned int g, nvmlDevice_t dev)
{
    unsigned int u = 0;
    OK(nvmlDeviceGetCurrPcieLinkGeneration(dev, &u));
    KEY(g, pcie_cur_gen, u);
    OK(nvmlDeviceGetCurrPcieLinkWidth(dev, &u));
    KEY(g, pcie_cur_width, u);
    OK(nvmlDeviceGetPcieReplayCounter(dev, &u));
    KEY(g, pcie_replay_counter, u);
    nvmlReturn_t rc = nvmlDeviceGetPcieSpeed(dev, &u);
    CHECK(rc == NVML_SUCCESS || rc == NVML_ERROR_NOT_SUPPORTED);
    nvmlEnableState_t on;
    OK(nvmlDeviceGetPersistenceMode(dev, &on));
    KEY(g, persistence_mode, on == NVML_FEATURE_ENABLED);
    nvmlComputeMode_t mode;
    OK(nvmlDeviceGetComputeMode(dev, &mode));
    KEY(g, compute_mode, mode);
}

static void read_clocks(unsigned int g, nvmlDevice_t dev)
{
    static const struct {
        nvmlClockType_t type;
        unsigned int slot;
    } cur[] = {{NVML_CLOCK_GRAPHICS, S_clock_graphics_mhz},
               {NVML_CLOCK_SM, S_clock_sm_mhz},
               {NVML_CLOCK_MEM, S_clock_mem_mhz},
               {NVML_CLOCK_VIDEO, S_clock_video_mhz}};
    unsigned int u = 0;
    for (size_t i = 0; i < sizeof(cur) / sizeof(cur[0]); i++) {
        OK(nvmlDeviceGetClockInfo(dev, cur[i].type, &u));
        expect_key(__LINE__, g, cur[i].slot, u);
        OK(nvmlDeviceGetClock(dev, cur[i].type, NVML_CLOCK_ID_CURRENT, &u));
        expect_key(__LINE__, g, cur[i].slot, u);
    }
    OK(nvmlDeviceGetApplicationsClock(dev, NVML_CLOCK_GRAPHICS, &u));
    KEY(g, app_clock_graphics_mhz, u);
    OK(nvmlDeviceGetApplicationsClock(dev, NVML_CLOCK_SM, &u));
    KEY(g, app_clock_graphics_mhz, u);
    OK(nvmlDeviceGetApplicationsClock(dev, NVML_CLOCK_MEM, &u));
    KEY(g, app_clock_mem_mhz, u);
    OK(nvmlDeviceGetDefaultApplicationsClock(dev, NVML_CLOCK_MEM, &u));
    KEY(g, app_clock_mem_mhz, u);
    OK(nvmlDeviceGetClock(dev, NVML_CLOCK_GRAPHICS, NVML_CLOCK_ID_APP_CLOCK_TARGET, &u));
    KEY(g, app_clock_graphics_mhz, u);
    CHECK(nvmlDeviceGetApplicationsClock(dev, NVML_CLOCK_VIDEO, &u) == NVML_ERROR_NOT_SUPPORTED);
    unsigned long long reasons = 0;
    OK(nvmlDeviceGetCurrentClocksEventReasons(dev, &reasons));
    KEY(g, clocks_event_reasons, reasons);
    OK(nvmlDeviceGetCurrentClocksThrottleReasons(dev, &reasons));
    KEY(g, clocks_event_reasons, reasons);
}

static void read_power(unsigned int g, nvmlDevice_t dev)
{
    unsigned int u = 0;
    unsigned int v = 0;
    int has_power = U(g, S_power_limit_mw) != 0;
    nvmlReturn_t want = has_power ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
    CHECK(nvmlDeviceGetPowerUsage(dev, &u) == want);
    if (has_power) {
        KEY(g, power_usage_mw, u);
    }
    CHECK(nvmlDeviceGetPowerManagementLimit(dev, &u) == want);
    if (has_power) {
        KEY(g, power_limit_mw, u);
    }
    CHECK(nvmlDeviceGetEnforcedPowerLimit(dev, &u) == want);
    if (has_power) {
        KEY(g, power_limit_mw, u);
    }
    CHECK(nvmlDeviceGetPowerManagementLimitConstraints(dev, &u, &v) == want);
    nvmlEnableState_t mode;
    OK(nvmlDeviceGetPowerManagementMode(dev, &mode));
    CHECK(mode == (has_power ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED));
    unsigned long long energy = 0;
    OK(nvmlDeviceGetTotalEnergyConsumption(dev, &energy));
    KEY(g, energy_mj, energy);

    uint64_t usage = U(g, S_power_usage_mw);
    uint64_t average = U(g, S_power_average_mw) != 0 ? U(g, S_power_average_mw) : usage;
    int module = U(g, S_module_power_limit_mw) != 0;
    nvmlFieldValue_t f[] = {
        {.fieldId = NVML_FI_DEV_POWER_AVERAGE, .scopeId = NVML_POWER_SCOPE_GPU},
        {.fieldId = NVML_FI_DEV_POWER_INSTANT, .scopeId = NVML_POWER_SCOPE_GPU},
        {.fieldId = NVML_FI_DEV_POWER_CURRENT_LIMIT, .scopeId = NVML_POWER_SCOPE_GPU},
        {.fieldId = NVML_FI_DEV_POWER_REQUESTED_LIMIT, .scopeId = NVML_POWER_SCOPE_GPU},
        {.fieldId = NVML_FI_DEV_POWER_AVERAGE, .scopeId = NVML_POWER_SCOPE_MEMORY},
        {.fieldId = NVML_FI_DEV_POWER_INSTANT, .scopeId = NVML_POWER_SCOPE_MEMORY},
        {.fieldId = NVML_FI_DEV_POWER_AVERAGE, .scopeId = NVML_POWER_SCOPE_MODULE},
        {.fieldId = NVML_FI_DEV_POWER_INSTANT, .scopeId = NVML_POWER_SCOPE_MODULE},
        {.fieldId = NVML_FI_DEV_POWER_CURRENT_LIMIT, .scopeId = NVML_POWER_SCOPE_MODULE},
        {.fieldId = NVML_FI_DEV_POWER_DEFAULT_LIMIT, .scopeId = NVML_POWER_SCOPE_MODULE},
        {.fieldId = NVML_FI_DEV_MEMORY_TEMP},
        {.fieldId = NVML_FI_DEV_GPU_TEMP},
        {.fieldId = NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION},
        {.fieldId = NVML_FI_DEV_ENERGY},
        {.fieldId = NVML_FI_DEV_PCIE_REPLAY_COUNTER},
    };
    OK(nvmlDeviceGetFieldValues(dev, (int)(sizeof(f) / sizeof(f[0])), f));
    uint64_t p = has_power ? 1 : 0; /* every power field is NOT_SUPPORTED without a power limit */
    expect_field_or_ns(__LINE__, &f[0], p * (power_average_answers[g] ? average : 0));
    expect_field_or_ns(__LINE__, &f[1], p * usage);
    expect_field_or_ns(__LINE__, &f[2], p * U(g, S_power_limit_mw));
    expect_field_or_ns(__LINE__, &f[3], p * U(g, S_power_limit_mw));
    expect_field_or_ns(__LINE__, &f[4], p * U(g, S_memory_power_average_mw));
    expect_field_or_ns(__LINE__, &f[5], 0);
    expect_field_or_ns(__LINE__, &f[6], p * module * U(g, S_module_power_average_mw));
    expect_field_or_ns(__LINE__, &f[7], p * module * U(g, S_module_power_usage_mw));
    expect_field_or_ns(__LINE__, &f[8], p * module * U(g, S_module_power_limit_mw));
    expect_field_or_ns(__LINE__, &f[9], p * module * (g == 0 ? 2700000u : 0u));
    expect_field_or_ns(__LINE__, &f[10], U(g, S_memory_temperature_c));
    CHECK(f[11].nvmlReturn == NVML_SUCCESS);
    KEY(g, temperature_c, field_value(&f[11]));
    CHECK(f[12].nvmlReturn == NVML_SUCCESS && f[13].nvmlReturn == NVML_SUCCESS);
    KEY(g, energy_mj, field_value(&f[12]));
    KEY(g, energy_mj, field_value(&f[13]));
    CHECK(f[14].nvmlReturn == NVML_SUCCESS);
    KEY(g, pcie_replay_counter, field_value(&f[14]));
}

static void read_thermal_util(unsigned int g, nvmlDevice_t dev)
{
    unsigned int u = 0;
    unsigned int period = 0;
    OK(nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &u));
    KEY(g, temperature_c, u);
    nvmlTemperature_t t = {.version = nvmlTemperature_v1, .sensorType = NVML_TEMPERATURE_GPU};
    OK(nvmlDeviceGetTemperatureV(dev, &t));
    KEY(g, temperature_c, t.temperature);
    nvmlGpuThermalSettings_t ts;
    OK(nvmlDeviceGetThermalSettings(dev, NVML_THERMAL_TARGET_ALL, &ts));
    KEY(g, temperature_c, ts.sensor[0].currentTemp);
    nvmlMarginTemperature_t margin = {.version = nvmlMarginTemperature_v1};
    nvmlReturn_t rc = nvmlDeviceGetMarginTemperature(dev, &margin);
    if (g == 0) {
        CHECK(rc == NVML_SUCCESS && margin.marginTemperature == TEMP_GPU_MAX - (int)E(g, S_temperature_c));
    } else {
        CHECK(rc == NVML_ERROR_NOT_SUPPORTED);
    }

    if (num_fans[g] == 0) {
        CHECK(nvmlDeviceGetFanSpeed(dev, &u) == NVML_ERROR_NOT_SUPPORTED);
    } else {
        OK(nvmlDeviceGetFanSpeed(dev, &u));
        KEY(g, fan_speed_pct, u);
        for (unsigned int fan = 0; fan < num_fans[g]; fan++) {
            OK(nvmlDeviceGetFanSpeed_v2(dev, fan, &u));
            KEY(g, fan_speed_pct, u);
            OK(nvmlDeviceGetTargetFanSpeed(dev, fan, &u));
            KEY(g, fan_speed_pct, u);
        }
        CHECK(nvmlDeviceGetFanSpeed_v2(dev, num_fans[g], &u) == NVML_ERROR_INVALID_ARGUMENT);
    }

    nvmlUtilization_t util;
    OK(nvmlDeviceGetUtilizationRates(dev, &util));
    /* the GPU's own rates, or its processes' where those are higher */
    unsigned int procs = got_procs_util[g];
    CHECK(util.gpu == (procs > U(g, S_util_gpu_pct) ? procs : U(g, S_util_gpu_pct)));
    CHECK(util.memory == (mem_util(procs) > U(g, S_util_mem_pct) ? mem_util(procs) : U(g, S_util_mem_pct)));
    if (want_nprocs[g] == 0) {
        KEY(g, util_gpu_pct, util.gpu);
        KEY(g, util_mem_pct, util.memory);
    }
    OK(nvmlDeviceGetEncoderUtilization(dev, &u, &period));
    KEY(g, util_encoder_pct, u);
    OK(nvmlDeviceGetDecoderUtilization(dev, &u, &period));
    KEY(g, util_decoder_pct, u);

    nvmlPstates_t ps;
    OK(nvmlDeviceGetPerformanceState(dev, &ps));
    KEY(g, pstate, ps);
    OK(nvmlDeviceGetPowerState(dev, &ps));
    KEY(g, pstate, ps);
    nvmlPstates_t list[NVML_MAX_GPU_PERF_PSTATES];
    OK(nvmlDeviceGetSupportedPerformanceStates(dev, list, sizeof(list)));
    KEY(g, pstate, list[0]);
    CHECK(list[1] == NVML_PSTATE_UNKNOWN);
}

static void read_ecc(unsigned int g, nvmlDevice_t dev)
{
    nvmlEnableState_t cur;
    nvmlEnableState_t pend;
    OK(nvmlDeviceGetEccMode(dev, &cur, &pend));
    KEY(g, ecc_enabled, cur == NVML_FEATURE_ENABLED);
    CHECK(cur == pend);
    int on = U(g, S_ecc_enabled) != 0;
    static const struct {
        nvmlMemoryErrorType_t type;
        nvmlEccCounterType_t counter;
        unsigned int slot;
        unsigned int field;
    } counters[] = {
        {NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, S_ecc_volatile_corrected, NVML_FI_DEV_ECC_SBE_VOL_DEV},
        {NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, S_ecc_volatile_uncorrected, NVML_FI_DEV_ECC_DBE_VOL_DEV},
        {NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC, S_ecc_aggregate_corrected, NVML_FI_DEV_ECC_SBE_AGG_DEV},
        {NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, S_ecc_aggregate_uncorrected,
         NVML_FI_DEV_ECC_DBE_AGG_DEV},
    };
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
        unsigned long long n = 0;
        nvmlReturn_t rc = nvmlDeviceGetTotalEccErrors(dev, counters[i].type, counters[i].counter, &n);
        CHECK(rc == (on ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED));
        if (on) {
            expect_key(__LINE__, g, counters[i].slot, n);
        }
        rc = nvmlDeviceGetMemoryErrorCounter(dev, counters[i].type, counters[i].counter,
                                             NVML_MEMORY_LOCATION_DEVICE_MEMORY, &n);
        CHECK(rc == (on ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED));
        if (on) {
            expect_key(__LINE__, g, counters[i].slot, n);
        }
        nvmlEccErrorCounts_t detail;
        rc = nvmlDeviceGetDetailedEccErrors(dev, counters[i].type, counters[i].counter, &detail);
        CHECK(rc == (on ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED));
        if (on) {
            expect_key(__LINE__, g, counters[i].slot, detail.deviceMemory);
        }
        nvmlFieldValue_t fv = {.fieldId = counters[i].field};
        OK(nvmlDeviceGetFieldValues(dev, 1, &fv));
        CHECK(fv.nvmlReturn == NVML_SUCCESS); /* the field answers whatever the mode */
        expect_key(__LINE__, g, counters[i].slot, field_value(&fv));
    }
    nvmlFieldValue_t fv = {.fieldId = NVML_FI_DEV_ECC_CURRENT};
    OK(nvmlDeviceGetFieldValues(dev, 1, &fv));
    CHECK(fv.nvmlReturn == NVML_SUCCESS);
    KEY(g, ecc_enabled, field_value(&fv));
}

static void read_retired(unsigned int g, nvmlDevice_t dev)
{
    static const struct {
        nvmlPageRetirementCause_t cause;
        unsigned int slot;
        unsigned int field;
    } causes[] = {
        {NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, S_retired_pages_sbe, NVML_FI_DEV_RETIRED_SBE},
        {NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, S_retired_pages_dbe, NVML_FI_DEV_RETIRED_DBE},
    };
    for (size_t c = 0; c < sizeof(causes) / sizeof(causes[0]); c++) {
        unsigned int count = 0;
        nvmlReturn_t rc = nvmlDeviceGetRetiredPages(dev, causes[c].cause, &count, NULL);
        nvmlFieldValue_t fv = {.fieldId = causes[c].field};
        OK(nvmlDeviceGetFieldValues(dev, 1, &fv));
        if (!retired_supported[g]) {
            CHECK(rc == NVML_ERROR_NOT_SUPPORTED && fv.nvmlReturn == NVML_ERROR_NOT_SUPPORTED);
            continue;
        }
        /* a size query: SUCCESS when there is nothing, else INSUFFICIENT_SIZE with the count */
        CHECK(rc == (count == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE));
        CHECK(fv.nvmlReturn == NVML_SUCCESS);
        expect_key(__LINE__, g, causes[c].slot, count);
        expect_key(__LINE__, g, causes[c].slot, field_value(&fv));
        CHECK(count <= MAX_PAGES);
        if (count == 0) {
            continue;
        }
        /* exactly the size the library reported: ASan sees any write past it */
        unsigned long long *addrs = malloc(count * sizeof(*addrs));
        unsigned long long *stamps = malloc(count * sizeof(*stamps));
        CHECK(addrs != NULL && stamps != NULL);
        unsigned int n = count;
        OK(nvmlDeviceGetRetiredPages(dev, causes[c].cause, &n, addrs));
        CHECK(n == count);
        n = count;
        OK(nvmlDeviceGetRetiredPages_v2(dev, causes[c].cause, &n, addrs, stamps));
        CHECK(n == count);
        for (unsigned int i = 1; i < count; i++) {
            CHECK(addrs[i] != addrs[i - 1]);
        }
        n = count - 1; /* one short: refused, and the count says how many */
        CHECK(nvmlDeviceGetRetiredPages_v2(dev, causes[c].cause, &n, n > 0 ? addrs : NULL, stamps) ==
              NVML_ERROR_INSUFFICIENT_SIZE);
        CHECK(n == count);
        free(addrs);
        free(stamps);
    }
    nvmlEnableState_t pending;
    nvmlReturn_t rc = nvmlDeviceGetRetiredPagesPendingStatus(dev, &pending);
    if (retired_supported[g]) {
        CHECK(rc == NVML_SUCCESS);
        KEY(g, retired_pages_pending, pending == NVML_FEATURE_ENABLED);
    } else {
        CHECK(rc == NVML_ERROR_NOT_SUPPORTED);
    }
}

static void read_remapped(unsigned int g, nvmlDevice_t dev)
{
    unsigned int corr = 0;
    unsigned int unc = 0;
    unsigned int pending = 0;
    unsigned int failure = 0;
    OK(nvmlDeviceGetRemappedRows(dev, &corr, &unc, &pending, &failure));
    KEY(g, remapped_rows_correctable, corr);
    KEY(g, remapped_rows_uncorrectable, unc);
    KEY(g, remapped_rows_pending, pending);
    KEY(g, remapped_rows_failure, failure);
    nvmlRemappedRowsInfo_v2_t info;
    OK(nvmlDeviceGetRemappedRows_v2(dev, &info));
    KEY(g, remapped_rows_correctable, info.corrActiveRemaps);
    KEY(g, remapped_rows_uncorrectable, info.uncActiveRemaps);
    KEY(g, remapped_rows_pending, info.bPending);
    KEY(g, remapped_rows_failure, info.bFailureOccurred);
    nvmlRowRemapperHistogramValues_t hist;
    OK(nvmlDeviceGetRowRemapperHistogram(dev, &hist));
    uint64_t rows = U(g, S_remapped_rows_correctable) + U(g, S_remapped_rows_uncorrectable);
    unsigned int used = rows < REMAP_BANKS ? (unsigned int)rows : REMAP_BANKS;
    CHECK(hist.high == used && hist.max == REMAP_BANKS - used && hist.max + hist.high == REMAP_BANKS);
    CHECK(hist.partial == 0 && hist.low == 0 && hist.none == 0);
    static const struct {
        unsigned int field;
        unsigned int slot;
    } fields[] = {{NVML_FI_DEV_REMAPPED_COR, S_remapped_rows_correctable},
                  {NVML_FI_DEV_REMAPPED_UNC, S_remapped_rows_uncorrectable},
                  {NVML_FI_DEV_REMAPPED_PENDING, S_remapped_rows_pending},
                  {NVML_FI_DEV_REMAPPED_FAILURE, S_remapped_rows_failure}};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        nvmlFieldValue_t fv = {.fieldId = fields[i].field};
        OK(nvmlDeviceGetFieldValues(dev, 1, &fv));
        CHECK(fv.nvmlReturn == NVML_SUCCESS);
        expect_key(__LINE__, g, fields[i].slot, field_value(&fv));
    }
    nvmlUnrepairableMemoryStatus_v1_t flag;
    nvmlReturn_t rc = nvmlDeviceGetUnrepairableMemoryFlag_v1(dev, &flag);
    if (E(g, S_unrepairable_memory) < 0) {
        CHECK(rc == NVML_ERROR_NOT_SUPPORTED);
    } else {
        CHECK(rc == NVML_SUCCESS);
        KEY(g, unrepairable_memory, flag.bUnrepairableMemory);
    }
}

static void read_fabric(unsigned int g, nvmlDevice_t dev)
{
    nvmlGpuFabricInfo_t f1;
    nvmlGpuFabricInfoV_t f3 = {.version = nvmlGpuFabricInfo_v3};
    nvmlGpuFabricInfoV_t f2 = {.version = nvmlGpuFabricInfo_v2};
    nvmlReturn_t want = fabric_attached[g] ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
    CHECK(nvmlDeviceGetGpuFabricInfo(dev, &f1) == want);
    CHECK(nvmlDeviceGetGpuFabricInfoV(dev, &f3) == want);
    CHECK(nvmlDeviceGetGpuFabricInfoV(dev, &f2) == want);
    if (!fabric_attached[g]) {
        return;
    }
    KEY(g, fabric_state, f1.state);
    KEY(g, fabric_state, f3.state);
    KEY(g, fabric_state, f2.state);
    KEY(g, fabric_health_mask, f3.healthMask);
    KEY(g, fabric_health_mask, f2.healthMask);
    CHECK(f1.cliqueId == 7 && f3.cliqueId == 7);
    if (f3.healthMask == 0) {
        CHECK(f3.healthSummary == NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED);
    } else {
        CHECK(f3.healthSummary >= NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY &&
              f3.healthSummary <= NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY);
    }
}

/* ---- building the file from the input ---------------------------------------------- */

static uint32_t le32(const uint8_t *p, size_t n)
{
    uint8_t b[4] = {0};
    memcpy(b, p, n < 4 ? n : 4);
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void apply_values(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 10 <= n; i += 10) {
        unsigned int g = p[i] & 1u;
        unsigned int slot = p[i + 1] % 64u;
        unsigned char *rec = record(file, g);
        uint64_t mask = get64(rec, LIVE_RECORD_MASK + (slot / 64u) * 8u);
        uint64_t value;
        memcpy(&value, p + i + 2, sizeof(value));
        if (p[i] & 2u) {
            mask &= ~(1ull << (slot % 64u)); /* cleared: a stale value stays behind */
        } else {
            mask |= 1ull << (slot % 64u);
        }
        put64(rec, LIVE_RECORD_MASK + (slot / 64u) * 8u, mask);
        put64(rec, LIVE_RECORD_VALUES + slot * 8u, value);
        put64(rec, LIVE_RECORD_SEQ, get64(rec, LIVE_RECORD_SEQ) + 2u);
        put64(rec, LIVE_RECORD_WRITES, get64(rec, LIVE_RECORD_WRITES) + 1u);
    }
    touch(LIVE_RECORDS_OFFSET, LIVE_RECORDS_OFFSET + (size_t)GPUS * LIVE_RECORD_BYTES);
}

static void overlay(size_t at, const uint8_t *p, size_t n)
{
    n = n < LIVE_TOTAL_BYTES - at ? n : LIVE_TOTAL_BYTES - at;
    memcpy(file + at, p, n);
    touch(at, at + n);
}

/*
 * The process region from the input (a first byte with bit 7 set), on an otherwise valid file.
 * p[0..3]: process_high as it is when `raw_high` (bit 5), else ignored and the header gets what
 * a writer leaves (one past the last slot in use). Bit 6 clear: 32-byte entries, each
 *   [0] slot  [1] flags: 1 sequence left odd, 2 every string filled to its size without a NUL,
 *                        4 in_use as [2..5] (else 1)
 *   [2..5] in_use  [6..9] pid  [10..17] GPU mask  [18..25] used memory  [26] pattern
 *   [27] level  [28..29] period  [30] start minute (now is minute 128)  [31] seed
 * Bit 6 set: the rest overlaid raw at the first record.
 */
static const unsigned int proc_strings[][2] = {
    {LIVE_PROC_CONTAINER_ID, LIVE_PROC_CONTAINER_ID_BYTES},
    {LIVE_PROC_NAMESPACE, LIVE_PROC_NAMESPACE_BYTES},
    {LIVE_PROC_CONTAINER_NAME, LIVE_PROC_CONTAINER_NAME_BYTES},
    {LIVE_PROC_POD, LIVE_PROC_POD_BYTES},
};

static void put32(unsigned char *p, unsigned int off, uint32_t v) { memcpy(p + off, &v, sizeof(v)); }

static size_t derive_processes(uint8_t how, const uint8_t *p, size_t n)
{
    unsigned char *region = file + LIVE_PROCESSES_OFFSET;
    uint32_t high = 0;
    size_t hi = 0; /* bytes of the region written */
    const uint8_t *body = n > 4 ? p + 4 : p + n;
    size_t len = n > 4 ? n - 4 : 0;
    if (how & 0x40u) {
        size_t room = (size_t)LIVE_PROCESS_SLOTS * LIVE_PROCESS_RECORD_BYTES;
        hi = len < room ? len : room;
        memcpy(region, body, hi);
        for (uint32_t slot = 0; (size_t)slot * LIVE_PROCESS_RECORD_BYTES < hi; slot++) {
            if (get32(region + (size_t)slot * LIVE_PROCESS_RECORD_BYTES, LIVE_PROC_IN_USE) != 0) {
                high = slot + 1u;
            }
        }
    } else {
        for (size_t i = 0; i + 32 <= len; i += 32) {
            const uint8_t *e = body + i;
            unsigned char *rec = region + (size_t)e[0] * LIVE_PROCESS_RECORD_BYTES;
            uint64_t v;
            put64(rec, LIVE_PROC_SEQ, get64(rec, LIVE_PROC_SEQ) + 2u + (e[1] & 1u));
            put32(rec, LIVE_PROC_IN_USE, (e[1] & 4u) ? le32(e + 2, 4) : 1u);
            put32(rec, LIVE_PROC_PID, le32(e + 6, 4));
            memcpy(&v, e + 10, 8);
            put64(rec, LIVE_PROC_GPU_MASK, v);
            memcpy(&v, e + 18, 8);
            put64(rec, LIVE_PROC_USED_MEMORY_BYTES, v);
            put32(rec, LIVE_PROC_UTIL_PATTERN, e[26]);
            put32(rec, LIVE_PROC_UTIL_LEVEL, e[27]);
            put32(rec, LIVE_PROC_UTIL_PERIOD_MS, (uint32_t)e[28] | (uint32_t)e[29] << 8);
            put64(rec, LIVE_PROC_START_TIME_MS, (uint64_t)e[30] * 60000u);
            put64(rec, LIVE_PROC_UTIL_SEED, e[31]);
            for (size_t k = 0; k < sizeof(proc_strings) / sizeof(proc_strings[0]); k++) {
                memset(rec + proc_strings[k][0], (e[1] & 2u) ? 'x' : 0, proc_strings[k][1]);
                if (!(e[1] & 2u)) {
                    memcpy(rec + proc_strings[k][0], "c", 2);
                }
            }
            high = e[0] + 1u > high ? e[0] + 1u : high;
            size_t end = ((size_t)e[0] + 1u) * LIVE_PROCESS_RECORD_BYTES;
            hi = end > hi ? end : hi;
        }
    }
    put32(file, LIVE_HDR_PROCESS_HIGH, (how & 0x20u) ? le32(p, n) : high);
    touch(LIVE_HDR_PROCESS_HIGH, LIVE_HDR_PROCESS_HIGH + 4u);
    if (hi > 0) {
        touch(LIVE_PROCESSES_OFFSET, LIVE_PROCESSES_OFFSET + hi);
    }
    return LIVE_TOTAL_BYTES;
}

static size_t derive_file(const uint8_t *data, size_t size)
{
    /* back to the template where the previous input changed it */
    size_t top = prev_hi < LIVE_TOTAL_BYTES ? prev_hi : LIVE_TOTAL_BYTES;
    if (prev_lo < top) {
        memcpy(file + prev_lo, tmpl + prev_lo, top - prev_lo);
    }
    if (prev_hi > LIVE_TOTAL_BYTES) {
        memset(file + LIVE_TOTAL_BYTES, 0, prev_hi - LIVE_TOTAL_BYTES);
    }
    cur_lo = SIZE_MAX;
    cur_hi = 0;
    if (size == 0) {
        return LIVE_TOTAL_BYTES;
    }
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if (data[0] & 0x80u) {
        return derive_processes(data[0], p, n);
    }
    switch (data[0] % 8u) {
    case 0: apply_values(p, n); return LIVE_TOTAL_BYTES;
    case 1: overlay(0, p, n); return LIVE_TOTAL_BYTES;
    case 2: overlay(LIVE_RECORDS_OFFSET, p, n); return LIVE_TOTAL_BYTES;
    case 3: /* record 0 from its mask on, and no further than the record */
        overlay(LIVE_RECORDS_OFFSET + LIVE_RECORD_MASK, p,
                n < LIVE_RECORD_BYTES - LIVE_RECORD_MASK ? n : LIVE_RECORD_BYTES - LIVE_RECORD_MASK);
        return LIVE_TOTAL_BYTES;
    case 4: return le32(p, n) % (LIVE_TOTAL_BYTES + EXTRA); /* the template, cut or zero-padded */
    case 5:
        n = n < LIVE_TOTAL_BYTES + EXTRA ? n : LIVE_TOTAL_BYTES + EXTRA;
        memset(file, 0, LIVE_TOTAL_BYTES);
        memcpy(file, p, n);
        touch(0, n > LIVE_TOTAL_BYTES ? n : LIVE_TOTAL_BYTES);
        return n;
    case 6: {
        apply_values(p, n);
        unsigned char *rec = record(file, (data[0] >> 3) & 1u);
        put64(rec, LIVE_RECORD_SEQ, get64(rec, LIVE_RECORD_SEQ) | 1u);
        touch(LIVE_RECORDS_OFFSET, LIVE_RECORDS_OFFSET + (size_t)GPUS * LIVE_RECORD_BYTES);
        return LIVE_TOTAL_BYTES;
    }
    default:
        if (n > 4) {
            overlay(le32(p, n) % LIVE_TOTAL_BYTES, p + 4, n - 4);
        }
        return LIVE_TOTAL_BYTES;
    }
}

/*
 * Slots from 64 on hold the live-only keys (LIVE_ONLY_GPU_KEYS: lost GPU, utilization
 * patterns, fault triggers), whose answers depend on time and per-process call counts; they
 * are kept unset and zero here, so armed slots (the record's armed mask, which the input
 * still sets) see fault_trigger 0, "fired", and apply at once like set ones. The getters that
 * answer from live-only keys have their own tests.
 */
static void keep_live_only_keys_unset(void)
{
    static const unsigned char zero[LIVE_RECORD_BYTES];
    const size_t first = LIVE_RECORD_VALUES + 64u * 8u;
    for (unsigned int g = 0; g < GPUS; g++) {
        unsigned char *rec = record(file, g);
        size_t at = (size_t)(rec - file);
        if (memcmp(rec + LIVE_RECORD_MASK + 8u, zero, 8u) != 0 ||
            memcmp(rec + first, zero, LIVE_RECORD_BYTES - first) != 0) {
            memset(rec + LIVE_RECORD_MASK + 8u, 0, 8u);
            memset(rec + first, 0, LIVE_RECORD_BYTES - first);
            touch(at, at + LIVE_RECORD_BYTES);
        }
    }
}

static size_t make_file(const uint8_t *data, size_t size)
{
    size_t len = derive_file(data, size);
    keep_live_only_keys_unset();
    return len;
}

/* What the library wrote to stderr during init (fd 2 points at a memfd meanwhile). */
static char init_stderr[2048];

static nvmlReturn_t init_capturing_stderr(void)
{
    CHECK(ftruncate(capture_fd, 0) == 0);
    CHECK(lseek(capture_fd, 0, SEEK_SET) == 0);
    fflush(stderr);
    CHECK(dup2(capture_fd, 2) == 2);
    nvmlReturn_t rc = nvmlInit_v2();
    fflush(stderr);
    CHECK(dup2(saved_stderr, 2) == 2);
    ssize_t got = pread(capture_fd, init_stderr, sizeof(init_stderr) - 1, 0);
    init_stderr[got > 0 ? (size_t)got : 0] = '\0';
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t len = make_file(data, size);
    write_live(len);
    accepted = valid_file(file, len);
    predict_processes();

    CHECK(init_capturing_stderr() == NVML_SUCCESS); /* a bad live file never fails init */
    const char *why = nvmlErrorString(NVML_ERROR_INVALID_STATE);
    CHECK(why != NULL);
    if (accepted) {
        CHECK(strcmp(why, "Invalid state") == 0 && init_stderr[0] == '\0');
    } else {
        static const char line_start[] = "nvml-mock: live layer ";
        CHECK(strncmp(init_stderr, line_start, sizeof(line_start) - 1) == 0);
        CHECK(strstr(init_stderr, live_path) != NULL && strstr(init_stderr, " ignored") != NULL);
        CHECK(strchr(init_stderr, '\n') == init_stderr + strlen(init_stderr) - 1); /* one line */
        CHECK(strstr(why, "live layer ") != NULL && strstr(why, live_path) != NULL);
    }

    unsigned int count = 0;
    OK(nvmlDeviceGetCount_v2(&count));
    CHECK(count == GPUS);
    for (unsigned int g = 0; g < GPUS; g++) {
        nvmlDevice_t dev = NULL;
        OK(nvmlDeviceGetHandleByIndex_v2(g, &dev));
        read_process_lists(g, dev);
        read_process_util(g, dev);
        read_memory(g, dev);
        read_pcie_modes(g, dev);
        read_clocks(g, dev);
        read_power(g, dev);
        read_thermal_util(g, dev);
        read_ecc(g, dev);
        read_retired(g, dev);
        read_remapped(g, dev);
        read_fabric(g, dev);
    }
    OK(nvmlShutdown());
    return 0;
}
