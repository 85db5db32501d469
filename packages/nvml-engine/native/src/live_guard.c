/*
 * The live mapping's guard against its file being cut short under it
 * (answers no nvml.h function).
 *
 * The live file is mapped shared, and a page of a shared file mapping past the file's end
 * raises SIGBUS when it is touched. Root on the node can cut the file at any time
 * (`truncate -s 0`, `: > live.nvmlmock`, or `cp backup live.nvmlmock`, which truncates before
 * it writes), and every NVML client that read the live layer then would die on its next call.
 * So the library installs, once per process and at the first mapping, a SIGBUS handler that
 * acts only on a fault inside one of its live mappings: it replaces the whole mapping by
 * anonymous zero pages at the same address (mmap MAP_FIXED), and the faulting read is simply
 * repeated and reads zeros. The header's magic is then gone, which the next call sees in its
 * one guard test (mock_live_header_ok) and answers NVML_ERROR_UNKNOWN with the reason, while
 * it tries to map the file at its path again (live.c, mock_live_repair): once a re-stage or a
 * writer has made it a live file of the same GPUs again, the client is back without restarting.
 *
 * Any other SIGBUS goes where it went before: to the handler that was installed when the
 * guard was (SA_SIGINFO or not), or to the default action (the process dies of SIGBUS, with
 * a core where enabled), or is ignored when it was ignored and sent by kill(2). A client that
 * installs its own SIGBUS handler after nvmlInit replaces the guard; MOCK_NVML_LIVE_GUARD=off
 * keeps it from being installed at all (a truncated live file then kills as any mapped file).
 */
#define _GNU_SOURCE
#include "live.h"
#include "mock.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* One range per mapping the library may hold (live.c maps at most LIVE_MAPS addresses). */
#define GUARD_RANGES LIVE_MAPS

static _Atomic(uintptr_t) watched[GUARD_RANGES];
static struct sigaction previous;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static atomic_uint replaced;

/* What the SIGBUS would have done without the guard. */
static void pass_on(int sig, siginfo_t *info, void *ctx)
{
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction != NULL) {
            previous.sa_sigaction(sig, info, ctx);
        }
        return;
    }
    if (previous.sa_handler == SIG_IGN && (info == NULL || info->si_code <= 0)) {
        return; /* sent by kill(2) and ignored before: still ignored */
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    /* The default action (a fault cannot be ignored either): restore it and let the signal
     * take it. A fault repeats the access on return; a sent signal is raised again and is
     * delivered as soon as this handler returns. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGBUS, &dfl, NULL);
    if (info == NULL || info->si_code <= 0) {
        raise(sig);
    }
}

static void on_sigbus(int sig, siginfo_t *info, void *ctx)
{
    int saved = errno;
    if (info != NULL && info->si_code > 0) { /* raised by the kernel for an access */
        uintptr_t at = (uintptr_t)info->si_addr;
        for (unsigned int i = 0; i < GUARD_RANGES; i++) {
            uintptr_t base = atomic_load_explicit(&watched[i], memory_order_acquire);
            if (base != 0 && at >= base && at - base < (uintptr_t)LIVE_TOTAL_BYTES) {
                /* mmap is a plain system call; the replacement is atomic for other threads */
                void *zeros = mmap((void *)base, (size_t)LIVE_TOTAL_BYTES, PROT_READ,
                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
                if (zeros != MAP_FAILED) {
                    atomic_fetch_add_explicit(&replaced, 1u, memory_order_relaxed);
                    /* what every thread derived from the mapping is stale: the kept answers
                     * (answers.h) no longer vouch for it, and the next call takes the guard */
                    atomic_fetch_add_explicit(&mock_live_epoch, 1u, memory_order_release);
                    errno = saved;
                    return;
                }
                break;
            }
        }
    }
    errno = saved;
    pass_on(sig, info, ctx);
}

static void install(void)
{
    const char *off = getenv("MOCK_NVML_LIVE_GUARD");
    if (off != NULL && (strcmp(off, "off") == 0 || strcmp(off, "0") == 0)) {
        return;
    }
    if (sigaction(SIGBUS, NULL, &previous) != 0) {
        return;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

void mock_live_guard_watch(const void *base)
{
    pthread_once(&install_once, install);
    uintptr_t want = (uintptr_t)base;
    for (unsigned int i = 0; i < GUARD_RANGES; i++) {
        uintptr_t have = atomic_load_explicit(&watched[i], memory_order_acquire);
        if (have == want) {
            return;
        }
        if (have == 0) {
            atomic_store_explicit(&watched[i], want, memory_order_release);
            return;
        }
    }
}

unsigned int mock_live_guard_replaced(void)
{
    return atomic_load_explicit(&replaced, memory_order_relaxed);
}
