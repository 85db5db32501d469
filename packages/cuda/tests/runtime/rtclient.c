/*
 * A CUDA runtime client, as a program on a node is one: compiled against NVIDIA's
 * cuda_runtime_api.h and linked against NVIDIA's libcudart (its RPATH names NVIDIA's
 * directory, as PyTorch's libraries do). The tests run it with the work-alike preloaded.
 * Nothing here knows the mock.
 *
 *   rtclient identity          devices as the runtime describes them
 *   rtclient memory DEV BYTES  allocation, copies (every direction, peer, async), sets
 *   rtclient hold DEV BYTES    allocate, print a line, keep it until stdin closes
 *   rtclient oom DEV           ask for more than is free
 *   rtclient launch            register a kernel and a device variable, launch, query
 *   rtclient badinput          calls with wrong arguments
 *   rtclient threads           one thread per device, each with its own current device
 *   rtclient reset             cudaDeviceReset with an allocation outstanding
 *   rtclient pool              stream-ordered allocation from the default pool
 *   rtclient probe             use GPUs 0 and 1, print a line, wait for one, use them again
 *
 * Every command prints one JSON object on its last line.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The registration interface nvcc's generated code calls (crt/host_runtime.h). */
extern void **__cudaRegisterFatBinary(void *fatCubin);
extern void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
extern void __cudaUnregisterFatBinary(void **fatCubinHandle);
extern void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                   const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                                   dim3 *bDim, dim3 *gDim, int *wSize);
extern void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                              const char *deviceName, int ext, size_t size, int constant,
                              int global);
extern unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                            void *stream);
extern cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                              void *stream);

static void json_string(const char *s) {
    putchar('"');
    for (; s != NULL && *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

/* {"code": N, "name": "...", "string": "..."} for a result. */
static void result(const char *key, cudaError_t e) {
    printf("\"%s\": {\"code\": %d, \"name\": ", key, (int)e);
    json_string(cudaGetErrorName(e));
    printf(", \"string\": ");
    json_string(cudaGetErrorString(e));
    printf("}");
}

static void die(const char *what, cudaError_t e) {
    printf("\n{\"failed\": ");
    json_string(what);
    printf(", ");
    result("error", e);
    printf("}\n");
    exit(0);
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t check_e_ = (call);                                                             \
        if (check_e_ != cudaSuccess)                                                               \
            die(#call, check_e_);                                                                  \
    } while (0)

static int identity(void) {
    int runtime = 0, driver = 0, count = 0;
    CHECK(cudaRuntimeGetVersion(&runtime));
    CHECK(cudaDriverGetVersion(&driver));
    CHECK(cudaGetDeviceCount(&count));
    Dl_info info;
    dladdr((void *)&cudaMalloc, &info);
    printf("{\"runtime\": %d, \"driver\": %d, \"count\": %d, \"library\": ", runtime, driver,
           count);
    json_string(info.dli_fname);
    printf(", \"devices\": [");
    for (int i = 0; i < count; i++) {
        struct cudaDeviceProp p;
        CHECK(cudaGetDeviceProperties(&p, i));
        char bus[32];
        CHECK(cudaDeviceGetPCIBusId(bus, (int)sizeof bus, i));
        int sms = 0, major = 0;
        CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, i));
        CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i));
        int back = -1;
        CHECK(cudaDeviceGetByPCIBusId(&back, bus));
        printf("%s{\"name\": ", i ? ", " : "");
        json_string(p.name);
        printf(", \"uuid\": \"");
        for (int b = 0; b < 16; b++)
            printf("%s%02x", (b == 4 || b == 6 || b == 8 || b == 10) ? "-" : "",
                   (unsigned char)p.uuid.bytes[b]);
        printf("\", \"bus\": ");
        json_string(bus);
        printf(", \"bus_back\": %d, \"memory\": %zu, \"cc\": [%d, %d], \"sms\": %d, "
               "\"sms_attr\": %d, \"major_attr\": %d, \"pci\": [%d, %d, %d], \"l2\": %d, "
               "\"warp\": %d, \"max_threads\": %d, \"bus_width\": %d}",
               back, p.totalGlobalMem, p.major, p.minor, p.multiProcessorCount, sms, major,
               p.pciDomainID, p.pciBusID, p.pciDeviceID, p.l2CacheSize, p.warpSize,
               p.maxThreadsPerBlock, p.memoryBusWidth);
    }
    printf("]}\n");
    return 0;
}

static void fill(unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)((i * 131u + seed) >> 3);
}

static int memory(int dev, size_t bytes) {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    int peer = (dev + 1) % count;
    CHECK(cudaSetDevice(dev));
    int current = -1;
    CHECK(cudaGetDevice(&current));
    size_t free0, total, free1, free2;
    CHECK(cudaMemGetInfo(&free0, &total));
    unsigned char *host = malloc(bytes), *back = malloc(bytes), *expect = malloc(bytes);
    if (host == NULL || back == NULL || expect == NULL)
        return 1;
    fill(host, bytes, 7);
    void *d1, *d2;
    CHECK(cudaMalloc(&d1, bytes));
    CHECK(cudaMalloc(&d2, bytes));
    CHECK(cudaMemGetInfo(&free1, &total));
    int ok = 1;
    /* host -> device -> host */
    CHECK(cudaMemcpy(d1, host, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back, d1, bytes, cudaMemcpyDeviceToHost));
    int h2d2h = memcmp(host, back, bytes) == 0;
    /* a set in the middle, then device -> device with cudaMemcpyDefault */
    CHECK(cudaMemset((char *)d1 + bytes / 4, 0xA5, bytes / 2));
    memcpy(expect, host, bytes);
    memset(expect + bytes / 4, 0xA5, bytes / 2);
    CHECK(cudaMemcpy(d2, d1, bytes, cudaMemcpyDefault));
    memset(back, 0, bytes);
    CHECK(cudaMemcpy(back, d2, bytes, cudaMemcpyDefault));
    int set_d2d = memcmp(expect, back, bytes) == 0;
    /* async on a stream of its own, timed by two events */
    cudaStream_t s;
    cudaEvent_t e0, e1;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    fill(host, bytes, 99);
    CHECK(cudaEventRecord(e0, s));
    CHECK(cudaMemcpyAsync(d1, host, bytes, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemsetAsync(d1, 0x11, 16, s));
    CHECK(cudaMemcpyAsync(back, d1, bytes, cudaMemcpyDeviceToHost, s));
    CHECK(cudaEventRecord(e1, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaEventSynchronize(e1));
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    memcpy(expect, host, bytes);
    memset(expect, 0x11, 16);
    int async_ok = memcmp(expect, back, bytes) == 0;
    cudaError_t query = cudaStreamQuery(s);
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    CHECK(cudaStreamDestroy(s));
    /* to the peer device and back */
    void *dp;
    CHECK(cudaSetDevice(peer));
    CHECK(cudaMalloc(&dp, bytes));
    CHECK(cudaSetDevice(dev));
    CHECK(cudaMemcpyPeer(dp, peer, d1, dev, bytes));
    memset(back, 0, bytes);
    CHECK(cudaMemcpy(back, dp, bytes, cudaMemcpyDefault));
    int peer_ok = memcmp(expect, back, bytes) == 0;
    /* what the pointers are */
    struct cudaPointerAttributes a_dev, a_peer, a_host, a_pinned;
    CHECK(cudaPointerGetAttributes(&a_dev, d1));
    CHECK(cudaPointerGetAttributes(&a_peer, dp));
    CHECK(cudaPointerGetAttributes(&a_host, host));
    void *pinned;
    CHECK(cudaHostAlloc(&pinned, 4096, cudaHostAllocDefault));
    CHECK(cudaPointerGetAttributes(&a_pinned, pinned));
    memset(pinned, 0x5C, 4096);
    CHECK(cudaMemcpy(d2, pinned, 4096, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back, d2, 4096, cudaMemcpyDeviceToHost));
    int pinned_ok = back[0] == 0x5C && back[4095] == 0x5C;
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
    CHECK(cudaSetDevice(peer));
    CHECK(cudaFree(dp));
    CHECK(cudaSetDevice(dev));
    CHECK(cudaMemGetInfo(&free2, &total));
    ok = h2d2h && set_d2d && async_ok && peer_ok && pinned_ok;
    printf("{\"ok\": %s, \"h2d2h\": %d, \"set_d2d\": %d, \"async\": %d, \"peer\": %d, "
           "\"pinned\": %d, \"current\": %d, \"elapsed_ms\": %f, \"query\": %d, "
           "\"total\": %zu, \"free_before\": %zu, \"free_allocated\": %zu, \"free_after\": %zu, "
           "\"types\": {\"device\": %d, \"peer\": %d, \"host\": %d, \"pinned\": %d}, "
           "\"devices\": {\"device\": %d, \"peer\": %d}}\n",
           ok ? "true" : "false", h2d2h, set_d2d, async_ok, peer_ok, pinned_ok, current, ms,
           (int)query, total, free0, free1, free2, (int)a_dev.type, (int)a_peer.type,
           (int)a_host.type, (int)a_pinned.type, a_dev.device, a_peer.device);
    return 0;
}

static int hold(int dev, size_t bytes) {
    CHECK(cudaSetDevice(dev));
    void *d;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMemset(d, 1, bytes));
    printf("{\"pid\": %d, \"ready\": true}\n", (int)getpid());
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    CHECK(cudaFree(d));
    return 0;
}

static int oom(int dev) {
    CHECK(cudaSetDevice(dev));
    size_t free_bytes, total;
    CHECK(cudaMemGetInfo(&free_bytes, &total));
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, free_bytes + ((size_t)1 << 30));
    cudaError_t last = cudaGetLastError();
    cudaError_t cleared = cudaGetLastError();
    void *small = NULL;
    cudaError_t after = cudaMalloc(&small, (size_t)1 << 20);
    printf("{\"free\": %zu, \"total\": %zu, \"null\": %s, ", free_bytes, total,
           d == NULL ? "true" : "false");
    result("malloc", e);
    printf(", ");
    result("last", last);
    printf(", ");
    result("cleared", cleared);
    printf(", ");
    result("after", after);
    printf("}\n");
    return 0;
}

/* Host stubs stand for kernels: their addresses are what a program registers and launches. */
static void kernel_stub(void) {}
static void unregistered_stub(void) {}
static char device_variable[64];

static int launch(void) {
    static const struct {
        int magic, version;
        const void *data, *filename;
    } wrapper = {0x466243b1, 1, NULL, NULL};
    void **module = __cudaRegisterFatBinary((void *)&wrapper);
    __cudaRegisterFunction(module, (const char *)&kernel_stub, (char *)"_Z6addonePf",
                           "_Z6addonePf", -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterVar(module, device_variable, (char *)"table", "table", 0,
                      sizeof device_variable, 0, 0);
    __cudaRegisterFatBinaryEnd(module);

    dim3 grid = {4, 1, 1}, block = {128, 1, 1};
    void *arg = NULL;
    void *args[] = {&arg};
    printf("{");
    cudaError_t e = cudaLaunchKernel((const void *)&kernel_stub, grid, block, args, 0, NULL);
    result("launch", e);
    printf(", ");
    result("last", cudaGetLastError());
    printf(", ");
    result("last_cleared", cudaGetLastError());
    printf(", ");
    /* the <<<>>> path: push, pop in the stub, launch */
    unsigned pushed = __cudaPushCallConfiguration(grid, block, 0, NULL);
    dim3 g2, b2;
    size_t shared = 1;
    void *stream = (void *)1;
    cudaError_t popped = __cudaPopCallConfiguration(&g2, &b2, &shared, &stream);
    printf("\"pushed\": %u, \"popped\": %d, \"popped_grid\": %u, \"popped_block\": %u, ", pushed,
           (int)popped, g2.x, b2.x);
    cudaLaunchConfig_t config;
    memset(&config, 0, sizeof config);
    config.gridDim = grid;
    config.blockDim = block;
    result("launch_ex", cudaLaunchKernelExC(&config, (const void *)&kernel_stub, args));
    printf(", ");
    result("unregistered", cudaLaunchKernel((const void *)&unregistered_stub, grid, block, args, 0,
                                            NULL));
    printf(", ");
    result("empty_grid", cudaLaunchKernel((const void *)&kernel_stub, (dim3){0, 1, 1}, block, args,
                                          0, NULL));
    printf(", ");
    cudaKernel_t handle = NULL;
    cudaError_t got = cudaGetKernel(&handle, (const void *)&kernel_stub);
    result("get_kernel", got);
    printf(", ");
    result("launch_handle", cudaLaunchKernel((const void *)handle, grid, block, args, 0, NULL));
    printf(", ");
    const char *name = NULL;
    result("func_name", cudaFuncGetName(&name, (const void *)&kernel_stub));
    printf(", \"name\": ");
    json_string(name);
    printf(", ");
    struct cudaFuncAttributes fa;
    result("func_attributes", cudaFuncGetAttributes(&fa, (const void *)&kernel_stub));
    printf(", ");
    size_t var_size = 0;
    result("symbol_size", cudaGetSymbolSize(&var_size, device_variable));
    printf(", \"var_size\": %zu, ", var_size);
    result("to_symbol", cudaMemcpyToSymbol(device_variable, "x", 1, 0, cudaMemcpyHostToDevice));
    printf(", ");
    result("not_a_symbol", cudaMemcpyToSymbol(&wrapper, "x", 1, 0, cudaMemcpyHostToDevice));
    printf(", ");
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    result("capture", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    printf(", ");
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    result("is_capturing", cudaStreamIsCapturing(s, &status));
    printf(", \"capture_status\": %d, ", (int)status);
    CHECK(cudaStreamDestroy(s));
    cudaGraph_t graph;
    result("graph", cudaGraphCreate(&graph, 0));
    __cudaUnregisterFatBinary(module);
    printf(", ");
    result("after_unregister", cudaLaunchKernel((const void *)&kernel_stub, grid, block, args, 0,
                                                NULL));
    printf("}\n");
    return 0;
}

static int badinput(void) {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    printf("{");
    result("malloc_null", cudaMalloc(NULL, 16));
    printf(", ");
    result("set_device_negative", cudaSetDevice(-1));
    printf(", ");
    result("set_device_past_end", cudaSetDevice(count));
    printf(", ");
    result("properties_null", cudaGetDeviceProperties(NULL, 0));
    printf(", ");
    struct cudaDeviceProp p;
    result("properties_past_end", cudaGetDeviceProperties(&p, count));
    printf(", ");
    int v = 0;
    result("attribute_unknown", cudaDeviceGetAttribute(&v, (enum cudaDeviceAttr)99999, 0));
    printf(", ");
    result("count_null", cudaGetDeviceCount(NULL));
    printf(", ");
    void *d = NULL;
    CHECK(cudaMalloc(&d, 4096));
    char host[64];
    result("memcpy_bad_kind", cudaMemcpy(d, host, 16, (enum cudaMemcpyKind)7));
    printf(", ");
    result("memcpy2d_bad_pitch", cudaMemcpy2D(d, 8, host, 8, 16, 2, cudaMemcpyHostToDevice));
    printf(", ");
    result("free_host_pointer", cudaFree(host));
    printf(", ");
    result("free_misaligned", cudaFree((char *)d + 1));
    printf(", ");
    CHECK(cudaFree(d));
    result("free_twice", cudaFree(d));
    printf(", ");
    result("memcpy_freed", cudaMemcpy(d, host, 16, cudaMemcpyHostToDevice));
    printf(", ");
    result("stream_destroy_default", cudaStreamDestroy(NULL));
    printf(", ");
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaStreamDestroy(s));
    result("stream_used_after_destroy", cudaStreamSynchronize(s));
    printf(", ");
    cudaEvent_t e;
    CHECK(cudaEventCreate(&e));
    CHECK(cudaEventDestroy(e));
    result("event_destroy_twice", cudaEventDestroy(e));
    printf(", ");
    result("event_bad_flags", cudaEventCreateWithFlags(&e, 0x80));
    printf(", ");
    result("host_get_device_pointer_flags", cudaHostGetDevicePointer((void **)&d, host, 1));
    printf(", ");
    struct cudaPointerAttributes a;
    result("attributes_stack", cudaPointerGetAttributes(&a, host));
    printf(", \"stack_type\": %d, \"stack_device\": %d, ", (int)a.type, a.device);
    result("peer_self", cudaDeviceCanAccessPeer(&v, 0, 0));
    printf(", \"peer_self_value\": %d, ", v);
    printf("\"unknown_code_string\": ");
    json_string(cudaGetErrorString((cudaError_t)12345));
    printf(", \"unknown_code_name\": ");
    json_string(cudaGetErrorName((cudaError_t)12345));
    printf(", ");
    result("last", cudaGetLastError());
    printf("}\n");
    return 0;
}

static int reset(void) {
    CHECK(cudaSetDevice(1));
    size_t free0, free1, free2, total;
    CHECK(cudaMemGetInfo(&free0, &total));
    void *d;
    CHECK(cudaMalloc(&d, (size_t)64 << 20));
    CHECK(cudaMemGetInfo(&free1, &total));
    cudaError_t r = cudaDeviceReset();
    CHECK(cudaMemGetInfo(&free2, &total));
    int device = -1;
    CHECK(cudaGetDevice(&device));
    printf("{\"free_before\": %zu, \"free_allocated\": %zu, \"free_after_reset\": %zu, "
           "\"device\": %d, ", free0, free1, free2, device);
    result("reset", r);
    printf(", ");
    result("free_stale", cudaFree(d));
    printf(", ");
    void *again = NULL;
    result("malloc_after", cudaMalloc(&again, 4096));
    printf("}\n");
    return 0;
}

static int pool(void) {
    CHECK(cudaSetDevice(0));
    cudaMemPool_t p0, p1, p;
    CHECK(cudaDeviceGetDefaultMemPool(&p0, 0));
    CHECK(cudaDeviceGetDefaultMemPool(&p1, 1));
    CHECK(cudaDeviceGetMemPool(&p, 0));
    unsigned long long threshold = 1 << 30, got = 0, used = 0, high = 0, after = 0, zero = 0;
    CHECK(cudaMemPoolSetAttribute(p0, cudaMemPoolAttrReleaseThreshold, &threshold));
    CHECK(cudaMemPoolGetAttribute(p0, cudaMemPoolAttrReleaseThreshold, &got));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    void *a, *b;
    CHECK(cudaMallocAsync(&a, 3 << 20, s));
    CHECK(cudaMallocFromPoolAsync(&b, 1 << 20, p0, s));
    CHECK(cudaMemPoolGetAttribute(p0, cudaMemPoolAttrUsedMemCurrent, &used));
    unsigned char in[64], out[64];
    memset(in, 0x3C, sizeof in);
    CHECK(cudaMemcpyAsync(a, in, sizeof in, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(out, a, sizeof out, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaFreeAsync(a, s));
    CHECK(cudaFreeAsync(b, s));
    CHECK(cudaMemPoolGetAttribute(p0, cudaMemPoolAttrUsedMemHigh, &high));
    CHECK(cudaMemPoolGetAttribute(p0, cudaMemPoolAttrUsedMemCurrent, &after));
    CHECK(cudaMemPoolSetAttribute(p0, cudaMemPoolAttrUsedMemHigh, &zero));
    unsigned long long high_reset = 1;
    CHECK(cudaMemPoolGetAttribute(p0, cudaMemPoolAttrUsedMemHigh, &high_reset));
    CHECK(cudaMemPoolTrimTo(p0, 0));
    printf("{\"same\": %d, \"distinct\": %d, \"threshold\": %llu, \"used\": %llu, "
           "\"high\": %llu, \"after\": %llu, \"high_reset\": %llu, \"copy\": %d, ",
           p == p0, p0 != p1, (unsigned long long)got, (unsigned long long)used,
           (unsigned long long)high, (unsigned long long)after, (unsigned long long)high_reset,
           memcmp(in, out, sizeof in) == 0);
    void *c;
    result("other_device_pool", cudaMallocFromPoolAsync(&c, 4096, p1, s));
    printf(", ");
    unsigned long long bad = 5;
    result("high_nonzero", cudaMemPoolSetAttribute(p0, cudaMemPoolAttrUsedMemHigh, &bad));
    printf(", ");
    result("foreign_pool", cudaMemPoolTrimTo((cudaMemPool_t)(void *)in, 0));
    printf("}\n");
    CHECK(cudaStreamDestroy(s));
    return 0;
}

/* One allocation and a synchronize on `dev`: the calls a fault is seen through. */
static void use(const char *key, int dev) {
    void *d = NULL;
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess)
        e = cudaMalloc(&d, 1 << 20);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    if (d != NULL)
        cudaFree(d);
    result(key, e);
}

static int probe(void) {
    printf("{");
    use("gpu0", 0);
    printf(", ");
    use("gpu1", 1);
    printf("}\n");
    fflush(stdout);
    char line[16];
    if (fgets(line, sizeof line, stdin) == NULL)
        return 1;
    printf("{");
    use("gpu0", 0);
    printf(", ");
    use("gpu0_again", 0);
    printf(", ");
    use("gpu1", 1);
    printf("}\n");
    return 0;
}

struct worker {
    int device, seen;
    cudaError_t error;
    size_t pattern_ok;
};

static void *work(void *arg) {
    struct worker *w = arg;
    w->error = cudaSetDevice(w->device);
    if (w->error != cudaSuccess)
        return NULL;
    void *d;
    unsigned char in[256], out[256];
    memset(in, w->device + 1, sizeof in);
    if ((w->error = cudaMalloc(&d, sizeof in)) != cudaSuccess ||
        (w->error = cudaMemcpy(d, in, sizeof in, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (w->error = cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost)) != cudaSuccess ||
        (w->error = cudaGetDevice(&w->seen)) != cudaSuccess ||
        (w->error = cudaFree(d)) != cudaSuccess)
        return NULL;
    w->pattern_ok = memcmp(in, out, sizeof in) == 0;
    return NULL;
}

static int threads(void) {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    struct worker w[64];
    pthread_t t[64];
    int n = count < 64 ? count : 64;
    for (int i = 0; i < n; i++) {
        w[i] = (struct worker){.device = i, .seen = -1};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    printf("{\"workers\": [");
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        printf("%s{\"device\": %d, \"seen\": %d, \"error\": %d, \"ok\": %zu}", i ? ", " : "",
               w[i].device, w[i].seen, (int)w[i].error, w[i].pattern_ok);
    }
    int main_device = -1;
    CHECK(cudaGetDevice(&main_device));
    printf("], \"main_device\": %d}\n", main_device);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "identity") == 0)
        return identity();
    if (argc >= 4 && strcmp(argv[1], "memory") == 0)
        return memory(atoi(argv[2]), strtoull(argv[3], NULL, 0));
    if (argc >= 4 && strcmp(argv[1], "hold") == 0)
        return hold(atoi(argv[2]), strtoull(argv[3], NULL, 0));
    if (argc >= 3 && strcmp(argv[1], "oom") == 0)
        return oom(atoi(argv[2]));
    if (argc >= 2 && strcmp(argv[1], "launch") == 0)
        return launch();
    if (argc >= 2 && strcmp(argv[1], "badinput") == 0)
        return badinput();
    if (argc >= 2 && strcmp(argv[1], "threads") == 0)
        return threads();
    if (argc >= 2 && strcmp(argv[1], "reset") == 0)
        return reset();
    if (argc >= 2 && strcmp(argv[1], "pool") == 0)
        return pool();
    if (argc >= 2 && strcmp(argv[1], "probe") == 0)
        return probe();
    fprintf(stderr, "usage: rtclient identity|memory DEV BYTES|hold DEV BYTES|oom DEV|launch|"
                    "badinput|threads|reset|pool|probe\n");
    return 2;
}
