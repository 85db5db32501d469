/*
 * Initialization and Cleanup (nvml.h): nvmlInit*, nvmlShutdown, the only entry points that
 * write process state. Error reporting (nvmlErrorString) is answered here too, because the
 * detail of a failed init that it returns is written here and shares its locking. Also the
 * library's one string helper (mock_copy_string) and nvmlInternalGetExportTable (not in
 * nvml.h).
 *
 * nvmlInit* is reference-counted. The first call reads the rendered state (path from
 * MOCK_NVML_CONFIG, else the first of state_relative[] and the injected overlay), applies the
 * fabric identity from the environment, narrows the GPUs to those NVIDIA_VISIBLE_DEVICES
 * names (visible.c) and publishes the devices by setting
 * `mock_live` with release ordering; query entry points read it with acquire ordering
 * and never lock. A failed init leaves a detail message that nvmlErrorString(code)
 * returns, because the caller's only diagnostic channel is the error string.
 */
#define _GNU_SOURCE
#include "mock.h"
#include "telemetry.h"
#include "visible.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ENV_CONFIG "MOCK_NVML_CONFIG"
#define ENV_CLUSTER_UUID "MOCK_FABRIC_CLUSTER_UUID"
#define ENV_CLIQUE_ID "MOCK_FABRIC_CLIQUE_ID"
#define ENV_LIVE "MOCK_NVML_LIVE"
#define LIVE_FILE_NAME "live.nvmlmock"

struct nvmlDevice_st mock_devices[STATE_MAX_GPUS] MOCK_COLD(mock_devices);
struct state_system mock_system;
unsigned int mock_device_count;
size_t mock_devices_bytes;
unsigned int mock_driver_branch;
atomic_int mock_live;
_Atomic(const unsigned char *) mock_live_header;
atomic_uint mock_live_epoch;

static pthread_mutex_t lifecycle_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int init_refcount;

/*
 * Error details live in slots that are written once, so a string that nvmlErrorString
 * returned stays whole while other threads keep failing init (rewriting a slot under a
 * reader is a data race and can tear the text). A repeated reason reuses its slot; only
 * after DETAIL_SLOTS distinct reasons is the oldest slot rewritten. The current slot,
 * code and text together, is published through one atomic pointer, so a reader never
 * sees a moment without a reason or a reason paired with another code.
 */
#define DETAIL_SLOTS 64
#define DETAIL_LEN 512
struct detail {
    int code;
    char text[DETAIL_LEN];
};
static struct detail detail_ring[DETAIL_SLOTS] MOCK_COLD(detail_ring);
static unsigned int detail_used;
static unsigned int detail_oldest;
static _Atomic(const struct detail *) detail_current;

/* The texts libnvidia-ml.so.1 returns, as nvidia-smi and NVIDIA's own tools print them
 * ("Failed to initialize NVML: Driver/library version mismatch", "GPU access blocked by the
 * operating system" on WSL, "Requested functionality has been deprecated" in -q reports). */
static const char *base_error_string(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
    case NVML_ERROR_OPERATING_SYSTEM: return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "The requested vgpu operation is not available on target device, because ECC is enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Requested functionality has been deprecated";
    case NVML_ERROR_NOT_READY: return "System is not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "No GPUs were found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "Reset type not supported";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    }
    return "Unknown Error";
}

MOCK_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    if (result != NVML_SUCCESS) {
        const struct detail *d = atomic_load_explicit(&detail_current, memory_order_acquire);
        if (d != NULL && d->code == (int)result) {
            return d->text;
        }
    }
    return base_error_string(result);
}

/* Caller holds lifecycle_lock. */
/* Init writes details under its lock, the live layer's guard on any thread: this lock keeps
 * the slots whole between them. */
static pthread_mutex_t detail_lock = PTHREAD_MUTEX_INITIALIZER;

void mock_clear_error_detail(nvmlReturn_t code)
{
    pthread_mutex_lock(&detail_lock);
    const struct detail *d = atomic_load_explicit(&detail_current, memory_order_relaxed);
    if (d != NULL && d->code == (int)code) {
        atomic_store_explicit(&detail_current, NULL, memory_order_release);
    }
    pthread_mutex_unlock(&detail_lock);
}

void mock_set_error_detail(nvmlReturn_t code, const char *fmt, ...)
{
    char text[DETAIL_LEN];
    int n = snprintf(text, DETAIL_LEN, "%s: ", base_error_string(code));
    if (n < 0 || n >= DETAIL_LEN) {
        n = 0;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text + n, DETAIL_LEN - (size_t)n, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&detail_lock);
    const struct detail *slot = NULL;
    for (unsigned int i = 0; i < detail_used && slot == NULL; i++) {
        if (detail_ring[i].code == (int)code && strcmp(detail_ring[i].text, text) == 0) {
            slot = &detail_ring[i];
        }
    }
    if (slot == NULL) {
        struct detail *fresh;
        if (detail_used < DETAIL_SLOTS) {
            fresh = &detail_ring[detail_used++];
        } else {
            if (&detail_ring[detail_oldest] == atomic_load_explicit(&detail_current, memory_order_relaxed)) {
                detail_oldest = (detail_oldest + 1) % DETAIL_SLOTS; /* never rewrite the published one */
            }
            fresh = &detail_ring[detail_oldest];
            detail_oldest = (detail_oldest + 1) % DETAIL_SLOTS;
        }
        fresh->code = (int)code;
        memcpy(fresh->text, text, strlen(text) + 1);
        slot = fresh;
    }
    atomic_store_explicit(&detail_current, slot, memory_order_release);
    pthread_mutex_unlock(&detail_lock);
}

static void clear_error_detail(void)
{
    atomic_store_explicit(&detail_current, NULL, memory_order_release);
}

/* Where the state is looked for when MOCK_NVML_CONFIG is unset, relative to the directory
 * this library was loaded from: the overlay's lib/, a driver root's usr/lib64 (and
 * usr/lib/<triplet>), then the overlay a container got injected at its mount path, for a
 * copy of the library that a CDI spec mounted at /usr/lib64. The mount path's default is
 * names.OVERLAY_MOUNT_PATH (a test checks that the two agree). */
#define ENV_OVERLAY_MOUNT "NVML_MOCK_OVERLAY_MOUNT_PATH"
#define OVERLAY_MOUNT_DEFAULT "/opt/nvml-mock"
#define STATE_IN_ROOT "/config/state.nvmlmock"
static const char *const state_relative[] = {"/..", "/../..", "/../../.."};

/*
 * Paths are put together with mock_join, not snprintf: a successful init then runs no
 * printf-family code at all, whose pages a fresh client would otherwise fault in first
 * (bench/floor.py, startup).
 */

/* `tried` += ", " (after the first) + `path`, cut short where it does not fit. */
static void note_tried(char *tried, size_t tried_cap, const char *path)
{
    size_t used = strlen(tried);
    if (used > 0 && mock_join(tried, tried_cap, &used, ", ", 2) != 0) {
        return;
    }
    size_t n = strlen(path);
    size_t room = tried_cap - 1 - used;
    (void)mock_join(tried, tried_cap, &used, path, n < room ? n : room);
}

/* The state to read: MOCK_NVML_CONFIG, else the first candidate that is there. `tried`
 * gets every place looked at, for the error when none is. 0 found, -1 too long, 1 none. */
static int state_path(char *out, size_t cap, char *tried, size_t tried_cap)
{
    tried[0] = '\0';
    size_t used = 0;
    const char *env = getenv(ENV_CONFIG);
    if (env != NULL && env[0] != '\0') {
        return mock_join(out, cap, &used, env, strlen(env));
    }
    Dl_info info;
    if (dladdr((const void *)&nvmlErrorString, &info) != 0 && info.dli_fname != NULL) {
        const char *slash = strrchr(info.dli_fname, '/');
        size_t dir_len = slash == NULL ? 1 : (size_t)(slash - info.dli_fname);
        const char *dir = slash == NULL ? "." : info.dli_fname;
        for (size_t i = 0; i < sizeof(state_relative) / sizeof(state_relative[0]); i++) {
            used = 0;
            if (mock_join(out, cap, &used, dir, dir_len) != 0 ||
                mock_join(out, cap, &used, state_relative[i], strlen(state_relative[i])) != 0 ||
                mock_join(out, cap, &used, STATE_IN_ROOT, sizeof(STATE_IN_ROOT) - 1) != 0) {
                return -1;
            }
            if (access(out, F_OK) == 0) {
                return 0;
            }
            note_tried(tried, tried_cap, out);
        }
    }
    const char *mount = getenv(ENV_OVERLAY_MOUNT);
    if (mount == NULL || mount[0] == '\0') {
        mount = OVERLAY_MOUNT_DEFAULT;
    }
    used = 0;
    if (mock_join(out, cap, &used, mount, strlen(mount)) != 0 ||
        mock_join(out, cap, &used, STATE_IN_ROOT, sizeof(STATE_IN_ROOT) - 1) != 0) {
        return -1;
    }
    if (access(out, F_OK) == 0) {
        return 0;
    }
    note_tried(tried, tried_cap, out);
    return 1;
}

/*
 * Init is serialised by lifecycle_lock, so the file and the parse result use static
 * buffers: no allocation on the init path, and the pages stay mapped for the next init.
 */
static char read_buffer[STATE_MAX_BYTES + 1] MOCK_COLD(read_buffer);
static struct state staging MOCK_COLD(staging);

/* The published devices' MIG profiles (each device's `mig_gi` points in here): the staging
 * pool's entries in use, copied as the devices are. */
static struct state_mig_gi published_mig_gi[STATE_MAX_GPUS * STATE_MAX_MIG_GI_PROFILES] MOCK_COLD(published_mig_gi);

/* Read the whole file, refusing anything larger than the format allows. */
static nvmlReturn_t read_state_file(const char *path, char **buf, size_t *len)
{
    /* O_NONBLOCK: a FIFO (or a device) named as the state must fail init, not block it
     * while the lifecycle lock is held (every other thread's init would block behind it).
     * Reads of a regular file ignore the flag. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        mock_set_error_detail(NVML_ERROR_DRIVER_NOT_LOADED, "cannot open GPU state %s: %s (set %s)", path,
                              strerror(e), ENV_CONFIG);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        mock_set_error_detail(NVML_ERROR_DRIVER_NOT_LOADED, "GPU state %s is not a regular file (set %s)", path,
                              ENV_CONFIG);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if ((unsigned long long)st.st_size > STATE_MAX_BYTES) {
        close(fd);
        mock_set_error_detail(NVML_ERROR_INVALID_STATE, "GPU state %s: file larger than %u bytes", path, STATE_MAX_BYTES);
        return NVML_ERROR_INVALID_STATE;
    }
    char *data = read_buffer;
    size_t got = 0;
    while (got <= STATE_MAX_BYTES) {
        ssize_t r = read(fd, data + got, STATE_MAX_BYTES + 1 - got);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            int e = errno;
            close(fd);
            mock_set_error_detail(NVML_ERROR_DRIVER_NOT_LOADED, "cannot read GPU state %s: %s", path, strerror(e));
            return NVML_ERROR_DRIVER_NOT_LOADED;
        }
        if (r == 0) {
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    if (got > STATE_MAX_BYTES) {
        mock_set_error_detail(NVML_ERROR_INVALID_STATE, "GPU state %s: file larger than %u bytes", path, STATE_MAX_BYTES);
        return NVML_ERROR_INVALID_STATE;
    }
    *buf = data;
    *len = got;
    return NVML_SUCCESS;
}

/* Fabric identity from the environment, applied to fabric-attached GPUs. */
static nvmlReturn_t apply_fabric_env(struct state *st)
{
    const char *uuid_env = getenv(ENV_CLUSTER_UUID);
    const char *clique_env = getenv(ENV_CLIQUE_ID);
    uint8_t uuid[16];
    uint64_t clique = 0;
    int have_uuid = uuid_env != NULL && uuid_env[0] != '\0';
    int have_clique = clique_env != NULL && clique_env[0] != '\0';

    if (have_uuid && state_parse_uuid16(uuid_env, strlen(uuid_env), uuid) != 0) {
        mock_set_error_detail(NVML_ERROR_INVALID_STATE, "%s='%.64s' is not a UUID (8-4-4-4-12 hex digits)",
                              ENV_CLUSTER_UUID, uuid_env);
        return NVML_ERROR_INVALID_STATE;
    }
    if (have_clique && state_parse_uint(clique_env, strlen(clique_env), UINT32_MAX, &clique) != 0) {
        mock_set_error_detail(NVML_ERROR_INVALID_STATE, "%s='%.64s' is not an unsigned 32-bit integer", ENV_CLIQUE_ID,
                              clique_env);
        return NVML_ERROR_INVALID_STATE;
    }
    if (!have_uuid && !have_clique) {
        return NVML_SUCCESS;
    }
    for (uint32_t i = 0; i < st->gpu_count; i++) {
        struct state_gpu *g = &st->gpu[i];
        if (!g->fabric_attached) {
            continue;
        }
        if (have_uuid) {
            memcpy(g->fabric_cluster_uuid, uuid, sizeof(uuid));
        }
        if (have_clique) {
            g->fabric_clique_id = (uint32_t)clique;
        }
        g->fabric_state = NVML_GPU_FABRIC_STATE_COMPLETED;
    }
    return NVML_SUCCESS;
}

/* The view NVIDIA_VISIBLE_DEVICES (or the mock's twin, visible.h) selects; a value that names no device fails init, as
 * the toolkit refuses to start such a container. `live` holds the board GPUs' live records
 * ("<gpu>:<mig>" entries are resolved against the MIG layout in them). */
static nvmlReturn_t select_view(const struct state *st, const unsigned char *const *live, struct visible_view *view)
{
    const char *name = mock_visible_env();
    const char *value = getenv(name);
    char why[STATE_ERR_LEN];
    if (mock_visible_select(value, st, live, view, why, sizeof(why)) == 0) {
        return NVML_SUCCESS;
    }
    mock_set_error_detail(NVML_ERROR_INVALID_STATE, "%s='%.80s': %s", name, value, why);
    fprintf(stderr, "nvml-mock: %s='%.80s': %s\n", name, value, why);
    return NVML_ERROR_INVALID_STATE;
}

static void publish(const struct state *st, const struct visible_view *view)
{
    mock_system = st->system;
    /* the branch: the driver version's leading number ("580" of "580.95.05"), 0 without one */
    mock_driver_branch = 0;
    for (const char *c = mock_system.driver_version; *c >= '0' && *c <= '9' && mock_driver_branch < 100000000u; c++) {
        mock_driver_branch = mock_driver_branch * 10u + (unsigned int)(*c - '0');
    }
    mock_board_count = st->gpu_count;
    for (uint32_t i = 0; i < st->gpu_count; i++) {
        mock_board_pci[i] = st->gpu[i].pci;
    }
    memcpy(mock_view_of_board, view->view, sizeof(mock_view_of_board));
    memcpy(mock_mig_only, view->mig_only, sizeof(mock_mig_only));
    memcpy(mock_mig_allowed, view->mig_allowed, sizeof(mock_mig_allowed));
    mock_nvlink_invalidate();
    memcpy(published_mig_gi, st->mig_gi_pool, st->mig_gi_pooled * sizeof(st->mig_gi_pool[0]));
    for (uint32_t i = 0; i < view->count; i++) {
        struct nvmlDevice_st *d = &mock_devices[i];
        memset(d, 0, sizeof(*d));
        d->s = st->gpu[view->board[i]];
        d->index = i;
        d->board = view->board[i];
        d->mig_gi = &published_mig_gi[d->s.mig_gi_first];
        mock_format_bus_id(d->bus_id, sizeof(d->bus_id), &d->s.pci, 0);
        mock_format_bus_id(d->bus_id_legacy, sizeof(d->bus_id_legacy), &d->s.pci, 1);
    }
    mock_device_count = view->count;
    mock_devices_bytes = (size_t)view->count * sizeof(struct nvmlDevice_st);
}

/* Why the live layer was ignored at the last init ("" when it was not). */
static char live_problem[DETAIL_LEN];

/* The live file bound at the last init ("" without one): MIG changes are written to it. */
char mock_live_path[4096] MOCK_COLD(mock_live_path);

/* The live file: MOCK_NVML_LIVE, else live.nvmlmock beside the state. */
static int live_path(const char *state, char *out, size_t cap)
{
    size_t used = 0;
    const char *env = getenv(ENV_LIVE);
    if (env != NULL && env[0] != '\0') {
        return mock_join(out, cap, &used, env, strlen(env));
    }
    const char *slash = strrchr(state, '/');
    size_t dir_len = slash == NULL ? 1 : (size_t)(slash - state);
    const char *dir = slash == NULL ? "." : state;
    if (mock_join(out, cap, &used, dir, dir_len) != 0) {
        return -1;
    }
    return mock_join(out, cap, &used, "/" LIVE_FILE_NAME, sizeof("/" LIVE_FILE_NAME) - 1);
}

/* The live records of the current init cycle, by board index (NULL: none). */
static const unsigned char *live_recs[STATE_MAX_GPUS];

/* Attach the live file, its records by board GPU in live_recs (the records follow the
 * board's GPUs, whatever the view). A live file that cannot be used is ignored as a whole:
 * the board values stand and the reason is kept for the caller. It is attached before the
 * view is chosen, which may name MIG devices by their place in the node's layout. */
static void attach_live(const char *state, const struct state *st)
{
    const unsigned char **recs = live_recs;
    const unsigned char *header = NULL;
    char path[4096];
    char why[200];
    live_problem[0] = '\0';
    mock_telemetry_attach();
    memset(live_recs, 0, sizeof(live_recs));
    for (unsigned int i = 0; i < mock_device_count; i++) {
        mock_devices[i].live = NULL;
    }
    atomic_store_explicit(&mock_live_header, NULL, memory_order_release);
    mock_live_path[0] = '\0';
    if (live_path(state, path, sizeof(path)) != 0) {
        snprintf(live_problem, sizeof(live_problem), "live layer path too long (set %s)", ENV_LIVE);
        return;
    }
    if (mock_live_attach(path, st->gpu_count, st->gpu[0].uuid, sizeof(struct state_gpu), recs, &header, why,
                         sizeof(why)) != 0) {
        snprintf(live_problem, sizeof(live_problem), "live layer %.240s ignored (board values stand): %s", path, why);
        fprintf(stderr, "nvml-mock: %s\n", live_problem);
        memset(live_recs, 0, sizeof(live_recs));
        return;
    }
    size_t used = 0;
    mock_live_path[0] = '\0';
    if (header != NULL) {
        (void)mock_join(mock_live_path, sizeof(mock_live_path), &used, path, strlen(path)); /* both 4096 */
    }
    atomic_fetch_add_explicit(&mock_live_epoch, 1u, memory_order_release);
    atomic_store_explicit(&mock_live_header, header, memory_order_release);
}

/* Caller holds lifecycle_lock and init_refcount == 0. */
static nvmlReturn_t load_state(void)
{
    char path[4096];
    char tried[DETAIL_LEN];
    int found = state_path(path, sizeof(path), tried, sizeof(tried));
    if (found < 0) {
        mock_set_error_detail(NVML_ERROR_DRIVER_NOT_LOADED, "cannot locate the GPU state (set %s)", ENV_CONFIG);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if (found > 0) {
        mock_set_error_detail(NVML_ERROR_DRIVER_NOT_LOADED, "no GPU state in %s (set %s)", tried, ENV_CONFIG);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    char *data = NULL;
    size_t len = 0;
    nvmlReturn_t rc = read_state_file(path, &data, &len);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    struct state *st = &staging;
    char err[STATE_ERR_LEN];
    if (state_parse(data, len, st, err, sizeof(err)) != 0) {
        mock_set_error_detail(NVML_ERROR_INVALID_STATE, "corrupt GPU state %s: %s", path, err);
        rc = NVML_ERROR_INVALID_STATE;
    } else {
        rc = apply_fabric_env(st);
    }
    struct visible_view view;
    if (rc == NVML_SUCCESS) {
        attach_live(path, st);
        rc = select_view(st, live_recs, &view);
    }
    if (rc == NVML_SUCCESS) {
        publish(st, &view);
        for (unsigned int i = 0; i < mock_device_count; i++) {
            mock_devices[i].live = live_recs[mock_devices[i].board];
        }
    }
    return rc;
}

/*
 * fork() copies only the calling thread. A lock another thread held at that moment stays held
 * in the child for good, and the child's next init, event call or error report would wait for
 * it forever (a Python client that forks workers while a monitoring thread calls NVML). The
 * handlers take every lock of the library before the fork, in the order the library nests
 * them (init, event sets, each set, GPM samples, the live binding, error details), and release
 * them after it on both sides; the child's handle registries also forget the parent's other
 * threads.
 */
static void fork_prepare(void)
{
    pthread_mutex_lock(&lifecycle_lock);
    mock_events_fork_prepare();
    mock_gpm_fork_prepare();
    mock_live_fork_prepare();
    pthread_mutex_lock(&detail_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&detail_lock);
    mock_live_fork_release();
    mock_gpm_fork_parent();
    mock_events_fork_parent();
    pthread_mutex_unlock(&lifecycle_lock);
}

static void fork_child(void)
{
    pthread_mutex_unlock(&detail_lock);
    mock_live_fork_release();
    mock_gpm_fork_child();
    mock_events_fork_child();
    pthread_mutex_unlock(&lifecycle_lock);
}

static pthread_once_t fork_handlers_once = PTHREAD_ONCE_INIT;
static void fork_handlers_install(void)
{
    (void)pthread_atfork(fork_prepare, fork_parent, fork_child);
}

MOCK_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    nvmlReturn_t rc = NVML_SUCCESS;
    pthread_once(&fork_handlers_once, fork_handlers_install);
    pthread_mutex_lock(&lifecycle_lock);
    if (init_refcount == 0) {
        rc = load_state();
    }
    if (rc == NVML_SUCCESS && mock_device_count == 0 && !(flags & NVML_INIT_FLAG_NO_GPUS)) {
        if (mock_board_count > 0) {
            mock_set_error_detail(NVML_ERROR_GPU_NOT_FOUND,
                                  "%s='%.80s' makes no GPU visible (nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS) "
                                  "accepts that)",
                                  mock_visible_env(),
                                  getenv(mock_visible_env()) ? getenv(mock_visible_env()) : "");
        } else {
            mock_set_error_detail(NVML_ERROR_GPU_NOT_FOUND, "the GPU state lists no GPUs "
                                                            "(nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS) accepts that)");
        }
        rc = NVML_ERROR_GPU_NOT_FOUND;
    }
    if (rc == NVML_SUCCESS) {
        if (init_refcount == 0) {
            clear_error_detail();
            if (live_problem[0] != '\0') {
                mock_set_error_detail(NVML_ERROR_INVALID_STATE, "%s", live_problem);
            }
            atomic_store_explicit(&mock_live, 1, memory_order_release);
        }
        init_refcount++;
    }
    pthread_mutex_unlock(&lifecycle_lock);
    return rc;
}

int mock_with_board_state(void (*fn)(const struct state *, void *), void *arg)
{
    int rc = -1;
    pthread_mutex_lock(&lifecycle_lock);
    if (init_refcount > 0) { /* no load_state runs meanwhile: staging is the published board */
        fn(&staging, arg);
        rc = 0;
    }
    pthread_mutex_unlock(&lifecycle_lock);
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

MOCK_EXPORT nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

MOCK_EXPORT nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t rc = NVML_SUCCESS;
    pthread_mutex_lock(&lifecycle_lock);
    if (init_refcount == 0) {
        rc = NVML_ERROR_UNINITIALIZED;
    } else if (--init_refcount == 0) {
        atomic_store_explicit(&mock_live, 0, memory_order_release);
    }
    pthread_mutex_unlock(&lifecycle_lock);
    return rc;
}

int mock_join(char *out, size_t cap, size_t *used, const char *s, size_t n)
{
    if (*used >= cap || n > cap - 1 - *used) {
        return -1;
    }
    memcpy(out + *used, s, n);
    *used += n;
    out[*used] = '\0';
    return 0;
}

nvmlReturn_t mock_copy_string(char *dst, unsigned int length, const char *src)
{
    if (dst == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    size_t n = strlen(src);
    if (length == 0 || n + 1 > length) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(dst, src, n + 1);
    return NVML_SUCCESS;
}

/*
 * Not in nvml.h: the private table the real nvidia-smi asks for. No table is offered, so
 * callers fall back to the public API.
 */
MOCK_EXPORT nvmlReturn_t nvmlInternalGetExportTable(const void **ppExportTable, const void *pExportTableId);

MOCK_EXPORT nvmlReturn_t nvmlInternalGetExportTable(const void **ppExportTable, const void *pExportTableId)
{
    (void)pExportTableId;
    if (ppExportTable != NULL) {
        *ppExportTable = NULL;
    }
    return NVML_ERROR_NOT_SUPPORTED;
}
