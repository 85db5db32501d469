/*
 * This process's use of each GPU, published into the live layer as its compute process: one
 * process record per (process, GPU or MIG device), container id "cuda-<pid>-<gpu>[-<gi>-<ci>]",
 * written through the mock NVML library's live primitives (the live ABI) under the writers'
 * lock, exactly as nvml-mock-ctl and the NRI plugin write theirs. nvidia-smi, every NVML
 * client and the exporter in every process see the record at their next call.
 *
 * Gone at exit, SIGKILL included: at its first record the process starts a watcher, a child
 * that does nothing but wait on a pipe whose only writer is this process. The kernel closes
 * it when the process dies, however it dies; the watcher then removes every "cuda-<pid>-"
 * record under the writers' lock and exits. The watcher is a raw clone (no fork handlers run
 * in it), closes every descriptor it inherited, leaves the process group and blocks every
 * signal that can be blocked, so a Ctrl-C to the program's group does not take it first.
 *
 * Where the live file cannot be opened for writing (a container sees the overlay read-only),
 * the use is sent instead to the node's writer acting for containers: the NRI plugin's unix
 * socket at <overlay>/run/cuda.sock (nvml_mock_protocol.names.OVERLAY_CUDA_SOCKET; the overlay
 * is the directory above the live file's), or MOCK_CUDA_PUBLISH_SOCKET. One line per change,
 * "<GPU or MIG UUID> <bytes>\n", one line back ("ok", "refused: ...", "error: ..."). The
 * plugin takes the PID from the socket's credentials and removes the records when the
 * connection closes, so no watcher is needed. What is not published (no socket, refused, a
 * library of another live ABI) lowers the free memory only this process sees
 * (mock_cu_unpublished), and NVML elsewhere shows what the NRI plugin's allocation record for
 * the container says.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "live_gen.h"
#include "mock_cu.h"

unsigned long long mock_cu_mem_used(int dev);

static pthread_mutex_t publish_lock = PTHREAD_MUTEX_INITIALIZER;
static int ready = -1; /* -1 not tried, 0 unavailable, 1 the live file, 2 the plugin's socket */
static int sock_fd = -1;
static unsigned int sock_of; /* the PID that connected (a forked child connects again) */
static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];

#define CUDA_SOCKET "run/cuda.sock" /* nvml_mock_protocol.names.OVERLAY_CUDA_SOCKET */
#define REPLY_MAX 256
static unsigned char *base;
static char lock_path[PATH_MAX];
static unsigned long long published[MOCK_CU_MAX_DEVICES];
static unsigned int watcher_of; /* the PID whose watcher runs (a forked child needs its own) */
static unsigned long long start_ms;

static int (*proc_put)(void *, size_t, const unsigned char *, size_t);
static int (*proc_remove)(void *, size_t, const unsigned char *, size_t);
static int (*proc_read)(const void *, size_t, unsigned int, unsigned char *, size_t);
/* the writers' lock file of a live file: the NVML library's rule (nvml_mock_live_lock_path) */
static int (*lock_path_of)(const char *, char *, size_t);

/* The live file the NVML library reads: MOCK_NVML_LIVE, else live.nvmlmock beside the state
 * (MOCK_NVML_CONFIG, else ../config/state.nvmlmock from the NVML library's directory), as
 * nvml_mock_live.locate writes the rule. */
static int live_path(char *out, size_t len)
{
    const char *live = getenv("MOCK_NVML_LIVE");
    if (live != NULL && live[0] != '\0') {
        return snprintf(out, len, "%s", live) < (int)len ? 0 : -1;
    }
    char state[PATH_MAX];
    const char *config = getenv("MOCK_NVML_CONFIG");
    if (config != NULL && config[0] != '\0') {
        if (snprintf(state, sizeof(state), "%s", config) >= (int)sizeof(state)) {
            return -1;
        }
    } else {
        Dl_info info;
        char real[PATH_MAX];
        if (dladdr(*(void **)&mock_nvml.Init, &info) == 0 || info.dli_fname == NULL ||
            realpath(info.dli_fname, real) == NULL) {
            return -1;
        }
        char *slash = strrchr(real, '/');
        if (slash == NULL) {
            return -1;
        }
        *slash = '\0';
        if (snprintf(state, sizeof(state), "%s/../config/state.nvmlmock", real) >= (int)sizeof(state)) {
            return -1;
        }
    }
    char *slash = strrchr(state, '/');
    if (slash == NULL) {
        return snprintf(out, len, "live.nvmlmock") < (int)len ? 0 : -1;
    }
    return snprintf(out, len, "%.*s/live.nvmlmock", (int)(slash - state), state) < (int)len ? 0 : -1;
}

/* The plugin's socket: MOCK_CUDA_PUBLISH_SOCKET (empty: none), else run/cuda.sock in the
 * overlay, the directory above the one holding the live file. */
static int socket_path_of(const char *live)
{
    const char *given = getenv("MOCK_CUDA_PUBLISH_SOCKET");
    if (given != NULL) {
        return given[0] != '\0' && snprintf(sock_path, sizeof(sock_path), "%s", given) < (int)sizeof(sock_path)
                   ? 0
                   : -1;
    }
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof(dir), "%s", live) >= (int)sizeof(dir)) {
        return -1;
    }
    char *slash = strrchr(dir, '/');
    if (slash == NULL) {
        return snprintf(sock_path, sizeof(sock_path), "../" CUDA_SOCKET) < (int)sizeof(sock_path) ? 0 : -1;
    }
    *slash = '\0';
    slash = strrchr(dir, '/');
    int n = slash == NULL ? snprintf(sock_path, sizeof(sock_path), "%s/../" CUDA_SOCKET, dir)
                          : snprintf(sock_path, sizeof(sock_path), "%.*s/" CUDA_SOCKET, (int)(slash - dir), dir);
    return n > 0 && n < (int)sizeof(sock_path) ? 0 : -1;
}

static int connect_socket(void)
{
    if (sock_path[0] == '\0') {
        return 0;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return 0;
    }
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, sock_path, strlen(sock_path) + 1);
    struct timeval wait = {.tv_sec = 2, .tv_usec = 0}; /* a wedged plugin never hangs an allocation */
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof(wait));
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
        close(fd);
        return 0;
    }
    sock_fd = fd;
    sock_of = (unsigned int)getpid();
    return 1;
}

/* Send one change and read the answer: 1 published, 0 refused, -1 the connection is gone. */
static int socket_send(const char *uuid, unsigned long long used)
{
    char line[REPLY_MAX];
    int n = snprintf(line, sizeof(line), "%s %llu\n", uuid, used);
    if (n <= 0 || n >= (int)sizeof(line) || send(sock_fd, line, (size_t)n, MSG_NOSIGNAL) != n) {
        return -1;
    }
    size_t got = 0;
    while (got < sizeof(line) - 1) {
        ssize_t r = recv(sock_fd, line + got, 1, 0);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return -1;
        }
        if (line[got] == '\n') {
            line[got] = '\0';
            return strcmp(line, "ok") == 0 ? 1 : strncmp(line, "refused:", 8) == 0 ? 0 : -1;
        }
        got++;
    }
    return -1;
}

/* Map the live file for writing, once: every check a writer makes before its first write. */
static int prepare(void)
{
    if (mock_nvml.lib == NULL) {
        return 0;
    }
    unsigned int (*abi)(void) = (unsigned int (*)(void))dlsym(mock_nvml.lib, "nvml_mock_live_abi_version");
    unsigned long long (*layout)(void) =
        (unsigned long long (*)(void))dlsym(mock_nvml.lib, "nvml_mock_live_layout_bytes");
    *(void **)&proc_put = dlsym(mock_nvml.lib, "nvml_mock_live_proc_put");
    *(void **)&proc_remove = dlsym(mock_nvml.lib, "nvml_mock_live_proc_remove");
    *(void **)&proc_read = dlsym(mock_nvml.lib, "nvml_mock_live_proc_read");
    *(void **)&lock_path_of = dlsym(mock_nvml.lib, "nvml_mock_live_lock_path");
    if (abi == NULL || layout == NULL || proc_put == NULL || proc_remove == NULL || proc_read == NULL ||
        lock_path_of == NULL ||
        abi() != MOCK_LIVE_ABI_VERSION || layout() != MOCK_LIVE_TOTAL_BYTES) {
        return 0; /* a library of another live ABI: never write through it */
    }
    char live[PATH_MAX];
    if (live_path(live, sizeof(live)) != 0 || lock_path_of(live, lock_path, sizeof(lock_path)) != 0) {
        return 0;
    }
    int fd = open(live, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        /* read-only (a container): the plugin's socket, if there is one */
        return errno != ENOENT && socket_path_of(live) == 0 && connect_socket() ? 2 : 0;
    }
    struct stat st;
    unsigned char header[32];
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (unsigned long long)st.st_size == MOCK_LIVE_TOTAL_BYTES &&
             pread(fd, header, sizeof(header), 0) == (ssize_t)sizeof(header) &&
             memcmp(header, MOCK_LIVE_MAGIC, sizeof(MOCK_LIVE_MAGIC) - 1) == 0;
    if (ok) {
        uint32_t format;
        uint64_t total;
        memcpy(&format, header + MOCK_LIVE_HDR_FORMAT, 4);
        memcpy(&total, header + MOCK_LIVE_HDR_TOTAL_BYTES, 8);
        ok = format == MOCK_LIVE_FORMAT && total == MOCK_LIVE_TOTAL_BYTES;
    }
    if (ok) {
        void *m = mmap(NULL, MOCK_LIVE_TOTAL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ok = m != MAP_FAILED;
        if (ok) {
            base = m;
        }
    }
    close(fd);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    start_ms = (unsigned long long)now.tv_sec * 1000ull + (unsigned long long)now.tv_nsec / 1000000ull;
    return ok;
}

static int take_lock(void)
{
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        return -1;
    }
    if (flock(fd, LOCK_EX) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int id_of(int dev, unsigned int pid, char *out, size_t len)
{
    const struct mock_cu_device *d = &mock_cu_devices[dev];
    int n = d->is_mig ? snprintf(out, len, "cuda-%u-%u-%u-%u", pid, d->board_gpu, d->gpu_instance, d->compute_instance)
                      : snprintf(out, len, "cuda-%u-%u", pid, d->board_gpu);
    return n > 0 && (size_t)n < len ? n : -1;
}

/* ---- the watcher ----------------------------------------------------------------------- */

static long raw(long nr, long a, long b, long c)
{
    return syscall(nr, a, b, c);
}

/* The watcher's whole life, in a raw clone: only system calls and the library's record
 * primitives (plain memory operations) run here. */
static void watch(int fd, unsigned int pid)
{
    (void)raw(SYS_setsid, 0, 0, 0);
    unsigned long all = ~0ul;
    (void)syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, NULL, sizeof(all));
    /* close every inherited descriptor but the pipe (close_range where the kernel has it) */
#ifdef SYS_close_range
    int ranged = (fd == 0 || raw(SYS_close_range, 0, fd - 1, 0) == 0) && raw(SYS_close_range, fd + 1, ~0u, 0) == 0;
#else
    int ranged = 0;
#endif
    for (int i = 0; !ranged && i < 65536; i++) {
        if (i != fd) {
            (void)raw(SYS_close, i, 0, 0);
        }
    }
    char byte;
    for (;;) {
        long n = raw(SYS_read, fd, (long)&byte, 1);
        if (n == 0 || (n < 0 && errno != EINTR)) {
            break;
        }
    }
    char prefix[32];
    int plen = 0;
    {
        /* "cuda-<pid>-" without stdio */
        char digits[12];
        int nd = 0;
        unsigned int v = pid;
        do {
            digits[nd++] = (char)('0' + v % 10u);
            v /= 10u;
        } while (v != 0 && nd < 11);
        memcpy(prefix, "cuda-", 5);
        plen = 5;
        while (nd > 0) {
            prefix[plen++] = digits[--nd];
        }
        prefix[plen++] = '-';
    }
    int lock = (int)raw(SYS_openat, AT_FDCWD, (long)lock_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (lock >= 0) {
        (void)raw(SYS_flock, lock, LOCK_EX, 0);
    }
    unsigned char rec[MOCK_LIVE_PROCESS_RECORD_BYTES];
    for (unsigned int slot = 0; slot < MOCK_LIVE_PROCESS_SLOTS; slot++) {
        if (proc_read(base, MOCK_LIVE_TOTAL_BYTES, slot, rec, sizeof(rec)) != 1) {
            continue;
        }
        const unsigned char *id = rec + MOCK_LIVE_PROC_CONTAINER_ID;
        if (memcmp(id, prefix, (size_t)plen) == 0) {
            size_t idlen = strnlen((const char *)id, MOCK_LIVE_PROC_CONTAINER_ID_BYTES);
            (void)proc_remove(base, MOCK_LIVE_TOTAL_BYTES, id, idlen);
        }
    }
    (void)raw(SYS_exit_group, 0, 0, 0);
}

static void start_watcher(unsigned int pid)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        return;
    }
    long child = raw(SYS_clone, SIGCHLD, 0, 0);
    if (child == 0) {
        watch(fds[0], pid);
    }
    close(fds[0]);
    if (child < 0) {
        close(fds[1]);
        return;
    }
    /* fds[1] stays open, unread and unwritten, for the rest of this process's life */
    watcher_of = (unsigned int)getpid();
}

/* ---- publishing ------------------------------------------------------------------------ */

void mock_cu_publish(int dev, unsigned long long used)
{
    (void)used;
    pthread_mutex_lock(&publish_lock);
    if (ready < 0) {
        ready = prepare();
    }
    if (!ready) {
        pthread_mutex_unlock(&publish_lock);
        return;
    }
    if (ready == 2 && sock_of != (unsigned int)getpid()) {
        /* a forked child: the connection is its parent's (the plugin knows it by the parent's
         * PID), and nothing it holds was published by it */
        close(sock_fd);
        sock_fd = -1;
        memset(published, 0, sizeof(published));
        if (!connect_socket()) {
            ready = 0;
            pthread_mutex_unlock(&publish_lock);
            return;
        }
    }
    unsigned long long now_used = mock_cu_mem_used(dev); /* the latest, whatever order callers came in */
    if (now_used == published[dev]) {
        pthread_mutex_unlock(&publish_lock);
        return;
    }
    if (ready == 2) {
        int sent = socket_send(mock_cu_devices[dev].uuid, now_used);
        if (sent > 0) {
            published[dev] = now_used;
        } else if (sent < 0) { /* the plugin went away: its records went with the connection */
            close(sock_fd);
            sock_fd = -1;
            memset(published, 0, sizeof(published));
            ready = 0;
        }
        pthread_mutex_unlock(&publish_lock);
        return;
    }
    unsigned int pid = (unsigned int)getpid();
    char id[MOCK_LIVE_PROC_CONTAINER_ID_BYTES];
    int idlen = id_of(dev, pid, id, sizeof(id));
    if (idlen < 0) {
        pthread_mutex_unlock(&publish_lock);
        return;
    }
    if (now_used > 0 && watcher_of != pid) {
        start_watcher(pid);
    }
    int lock = take_lock();
    if (lock < 0) {
        pthread_mutex_unlock(&publish_lock);
        return;
    }
    int ok;
    if (now_used == 0) {
        ok = proc_remove(base, MOCK_LIVE_TOTAL_BYTES, (const unsigned char *)id, (size_t)idlen) >= 0;
    } else {
        const struct mock_cu_device *d = &mock_cu_devices[dev];
        unsigned char rec[MOCK_LIVE_PROCESS_RECORD_BYTES] = {0};
        uint32_t one = 1;
        uint64_t mask = 1ull << (d->board_gpu & 63u);
        uint64_t bytes = now_used;
        memcpy(rec + MOCK_LIVE_PROC_IN_USE, &one, 4);
        memcpy(rec + MOCK_LIVE_PROC_PID, &pid, 4);
        memcpy(rec + MOCK_LIVE_PROC_GPU_MASK, &mask, 8);
        memcpy(rec + MOCK_LIVE_PROC_USED_MEMORY_BYTES, &bytes, 8);
        memcpy(rec + MOCK_LIVE_PROC_START_TIME_MS, &start_ms, 8);
        memcpy(rec + MOCK_LIVE_PROC_CONTAINER_ID, id, (size_t)idlen);
        memcpy(rec + MOCK_LIVE_PROC_CONTAINER_NAME, "cuda", 4);
        if (d->is_mig) {
            uint32_t word = 1u << 31 | (d->board_gpu & 0xFFu) | (d->gpu_instance & 0xFFu) << 8 |
                            (d->compute_instance & 0xFFu) << 16;
            memcpy(rec + MOCK_LIVE_PROC_MIG_HOLDINGS, &word, 4);
        }
        ok = proc_put(base, MOCK_LIVE_TOTAL_BYTES, rec, sizeof(rec)) >= 0;
    }
    flock(lock, LOCK_UN);
    close(lock);
    if (ok) {
        published[dev] = now_used;
    }
    pthread_mutex_unlock(&publish_lock);
}

unsigned long long mock_cu_unpublished(int dev)
{
    pthread_mutex_lock(&publish_lock);
    unsigned long long shown = published[dev];
    pthread_mutex_unlock(&publish_lock);
    unsigned long long used = mock_cu_mem_used(dev);
    return used > shown ? used - shown : 0;
}
