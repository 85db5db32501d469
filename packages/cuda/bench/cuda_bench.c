/*
 * Cost of the mock libcuda.so.1, measured beside an empty function call in the same run so
 * the figures compare across machines.
 *
 *   cuda_bench DRIVER [BATCHES]
 *
 * The node is the one MOCK_NVML_CONFIG names (run.sh renders an 8-GPU H100 node with its
 * live layer). Reports p50 / p99:
 *   - startup: dlopen + cuInit + cuDeviceGetCount + per device name, UUID and two
 *     attributes, in a fresh child process per round (the driver loads NVML and reads every
 *     device through it), beside the same child doing nothing;
 *   - per call, over batches of 1000 calls: the empty call, cuDeviceGetAttribute (one NVML
 *     carries, one declared), cuCtxGetCurrent, cuMemGetInfo, cuStreamSynchronize (the fault
 *     check: two NVML reads), cuPointerGetAttribute, a 4 KiB cuMemcpyHtoD, and cuMemAlloc +
 *     cuMemFree of 1 MiB (each change published into the live layer under the writers' lock).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#define BATCH 1000
#define STARTUP_ROUNDS 40

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, double *samples, size_t n, double base_p50)
{
    qsort(samples, n, sizeof(double), cmp_double);
    double p50 = samples[n / 2], p99 = samples[(n * 99) / 100];
    if (base_p50 > 0) {
        printf("%-44s p50 %10.1f ns  p99 %10.1f ns  (%7.1fx empty)\n", what, p50, p99, p50 / base_p50);
    } else {
        printf("%-44s p50 %10.1f ns  p99 %10.1f ns\n", what, p50, p99);
    }
}

__attribute__((noinline)) static CUresult empty_call(void *a, int b)
{
    __asm__ volatile("" : : "r"(a), "r"(b) : "memory");
    return CUDA_SUCCESS;
}
static CUresult (*volatile empty_ptr)(void *, int) = empty_call;

#define SYM(lib, name) ((__typeof__(&name))dlsym(lib, #name))

/* One child: open the driver and read every device, as a client's startup does. */
static int startup_child(const char *driver, int do_nothing)
{
    if (do_nothing) {
        return 0;
    }
    void *lib = dlopen(driver, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        return 2;
    }
    int n = 0;
    if (SYM(lib, cuInit)(0) != CUDA_SUCCESS || SYM(lib, cuDeviceGetCount)(&n) != CUDA_SUCCESS) {
        return 3;
    }
    for (int i = 0; i < n; i++) {
        CUdevice d;
        char name[96];
        CUuuid u;
        int v;
        SYM(lib, cuDeviceGet)(&d, i);
        SYM(lib, cuDeviceGetName)(name, sizeof(name), d);
        SYM(lib, cuDeviceGetUuid_v2)(&u, d);
        SYM(lib, cuDeviceGetAttribute)(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
        SYM(lib, cuDeviceGetAttribute)(&v, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d);
    }
    return 0;
}

static double startup_round(const char *driver, int do_nothing)
{
    double t0 = now_ns();
    pid_t pid = fork();
    if (pid == 0) {
        _exit(startup_child(driver, do_nothing));
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "startup child failed (%d)\n", status);
        exit(1);
    }
    return now_ns() - t0;
}

enum kind { K_EMPTY, K_ATTR_NVML, K_ATTR_DECLARED, K_CTX, K_MEMINFO, K_SYNC, K_PTRATTR, K_COPY, K_ALLOC };

struct api {
    __typeof__(&cuDeviceGetAttribute) attr;
    __typeof__(&cuCtxGetCurrent) ctx;
    __typeof__(&cuMemGetInfo_v2) meminfo;
    __typeof__(&cuStreamSynchronize) sync;
    __typeof__(&cuPointerGetAttribute) ptrattr;
    __typeof__(&cuMemcpyHtoD_v2) copy;
    __typeof__(&cuMemAlloc_v2) alloc;
    __typeof__(&cuMemFree_v2) free;
};

static double batch(const struct api *a, enum kind k, CUdeviceptr dev, const void *host)
{
    int v;
    CUcontext c;
    size_t f, t;
    unsigned int mt;
    CUdeviceptr p;
    double t0 = now_ns();
    for (int i = 0; i < BATCH; i++) {
        switch (k) {
        case K_EMPTY:
            empty_ptr(&v, i);
            break;
        case K_ATTR_NVML:
            a->attr(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
            break;
        case K_ATTR_DECLARED:
            a->attr(&v, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 0);
            break;
        case K_CTX:
            a->ctx(&c);
            break;
        case K_MEMINFO:
            a->meminfo(&f, &t);
            break;
        case K_SYNC:
            a->sync(NULL);
            break;
        case K_PTRATTR:
            a->ptrattr(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dev + 64);
            break;
        case K_COPY:
            a->copy(dev, host, 4096);
            break;
        case K_ALLOC:
            a->alloc(&p, 1 << 20);
            a->free(p);
            break;
        }
    }
    return (now_ns() - t0) / BATCH;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: cuda_bench DRIVER [BATCHES]\n");
        return 2;
    }
    const char *driver = argv[1];
    int batches = argc > 2 ? atoi(argv[2]) : 200;
    if (batches < 10) {
        batches = 10;
    }

    double base[STARTUP_ROUNDS], start[STARTUP_ROUNDS];
    for (int r = 0; r < STARTUP_ROUNDS; r++) { /* interleaved, so load drifts hit both */
        base[r] = startup_round(driver, 1);
        start[r] = startup_round(driver, 0);
    }
    report("fork + exit (baseline)", base, STARTUP_ROUNDS, 0);
    report("fork + dlopen + cuInit + 8 devices queried", start, STARTUP_ROUNDS, 0);

    void *lib = dlopen(driver, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL || SYM(lib, cuInit)(0) != CUDA_SUCCESS) {
        fprintf(stderr, "cannot start the driver %s\n", driver);
        return 1;
    }
    struct api a = {SYM(lib, cuDeviceGetAttribute), SYM(lib, cuCtxGetCurrent), SYM(lib, cuMemGetInfo_v2),
                    SYM(lib, cuStreamSynchronize), SYM(lib, cuPointerGetAttribute), SYM(lib, cuMemcpyHtoD_v2),
                    SYM(lib, cuMemAlloc_v2), SYM(lib, cuMemFree_v2)};
    CUcontext ctx;
    CUdeviceptr dev;
    if (SYM(lib, cuCtxCreate_v2)(&ctx, 0, 0) != CUDA_SUCCESS || a.alloc(&dev, 1 << 20) != CUDA_SUCCESS) {
        fprintf(stderr, "cannot make a context and an allocation\n");
        return 1;
    }
    static unsigned char host[4096];
    static const char *names[] = {"empty call (baseline)",
                                  "cuDeviceGetAttribute (from NVML)",
                                  "cuDeviceGetAttribute (declared)",
                                  "cuCtxGetCurrent",
                                  "cuMemGetInfo",
                                  "cuStreamSynchronize (fault check)",
                                  "cuPointerGetAttribute",
                                  "cuMemcpyHtoD 4 KiB",
                                  "cuMemAlloc + cuMemFree 1 MiB (published)"};
    enum { KINDS = K_ALLOC + 1 };
    double *samples[KINDS];
    for (int k = 0; k < KINDS; k++) {
        samples[k] = calloc((size_t)batches, sizeof(double));
    }
    int alloc_batches = batches / 10 > 0 ? batches / 10 : 1;
    for (int b = 0; b < batches; b++) { /* interleaved kinds, so load drifts hit all */
        for (int k = 0; k < KINDS; k++) {
            if (k == K_ALLOC && b >= alloc_batches) {
                continue;
            }
            samples[k][b] = batch(&a, (enum kind)k, dev, host);
        }
    }
    qsort(samples[K_EMPTY], (size_t)batches, sizeof(double), cmp_double);
    double base_p50 = samples[K_EMPTY][batches / 2];
    for (int k = 0; k < KINDS; k++) {
        report(names[k], samples[k], k == K_ALLOC ? (size_t)alloc_batches : (size_t)batches,
               k == K_EMPTY ? 0 : base_p50);
    }
    return 0;
}
