/*
 * Concurrency check for the mock library, meant to run under ThreadSanitizer
 * (`make tsan-check`): 16 threads mix init/shutdown churn, lock-free queries on every
 * GPU, handle lookups and short event waits while one reference stays held. Any data
 * race is reported by TSan; a wrong answer makes the program exit non-zero.
 *
 *   threads LIBRARY STATE
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvml.h>

#define THREADS 16
#define ROUNDS 2000

static struct {
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_v2_t *);
    nvmlReturn_t (*fabric)(nvmlDevice_t, nvmlGpuFabricInfoV_t *);
    nvmlReturn_t (*set_create)(nvmlEventSet_t *);
    nvmlReturn_t (*set_wait)(nvmlEventSet_t, nvmlEventData_t *, unsigned int);
    nvmlReturn_t (*set_free)(nvmlEventSet_t);
    nvmlReturn_t (*fields)(nvmlDevice_t, int, nvmlFieldValue_t *);
} api;

static nvmlEventSet_t shared_set;
static int failed;

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);                 \
            return NULL;                                                    \
        }                                                                   \
    } while (0)

static void *worker(void *arg)
{
    long id = (long)arg;
    char uuid[96];
    for (int r = 0; r < ROUNDS; r++) {
        unsigned int n = 0;
        CHECK(api.init() == NVML_SUCCESS);
        CHECK(api.count(&n) == NVML_SUCCESS && n > 0);
        nvmlDevice_t d = NULL;
        nvmlDevice_t again = NULL;
        CHECK(api.handle((unsigned int)(id + r) % n, &d) == NVML_SUCCESS);
        CHECK(api.uuid(d, uuid, sizeof(uuid)) == NVML_SUCCESS);
        CHECK(api.by_uuid(uuid, &again) == NVML_SUCCESS && again == d);
        nvmlMemory_v2_t mem = {.version = nvmlMemory_v2};
        CHECK(api.mem(d, &mem) == NVML_SUCCESS && mem.free + mem.used + mem.reserved == mem.total);
        nvmlGpuFabricInfoV_t fabric = {.version = nvmlGpuFabricInfo_v3};
        nvmlReturn_t rc = api.fabric(d, &fabric);
        CHECK(rc == NVML_SUCCESS || rc == NVML_ERROR_NOT_SUPPORTED);
        nvmlFieldValue_t values[2] = {{.fieldId = NVML_FI_DEV_ECC_CURRENT}, {.fieldId = NVML_FI_DEV_POWER_INSTANT}};
        CHECK(api.fields(d, 2, values) == NVML_SUCCESS);
        if (r % 200 == 0) {
            nvmlEventData_t data;
            CHECK(api.set_wait(shared_set, &data, 1) == NVML_ERROR_TIMEOUT);
            nvmlEventSet_t own = NULL;
            CHECK(api.set_create(&own) == NVML_SUCCESS);
            CHECK(api.set_wait(own, &data, 0) == NVML_ERROR_TIMEOUT);
            CHECK(api.set_free(own) == NVML_SUCCESS);
        }
        CHECK(api.shutdown() == NVML_SUCCESS);
    }
    return NULL;
}

#define LOAD(field, name)                                         \
    do {                                                          \
        *(void **)&api.field = dlsym(lib, name);                  \
        if (api.field == NULL) {                                  \
            fprintf(stderr, "missing %s\n", name);                \
            return 1;                                             \
        }                                                         \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBRARY STATE\n", argv[0]);
        return 2;
    }
    setenv("MOCK_NVML_CONFIG", argv[2], 1);
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (lib == NULL) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    LOAD(init, "nvmlInit_v2");
    LOAD(shutdown, "nvmlShutdown");
    LOAD(count, "nvmlDeviceGetCount_v2");
    LOAD(handle, "nvmlDeviceGetHandleByIndex_v2");
    LOAD(by_uuid, "nvmlDeviceGetHandleByUUID");
    LOAD(uuid, "nvmlDeviceGetUUID");
    LOAD(mem, "nvmlDeviceGetMemoryInfo_v2");
    LOAD(fabric, "nvmlDeviceGetGpuFabricInfoV");
    LOAD(set_create, "nvmlEventSetCreate");
    LOAD(set_wait, "nvmlEventSetWait_v2");
    LOAD(set_free, "nvmlEventSetFree");
    LOAD(fields, "nvmlDeviceGetFieldValues");

    if (api.init() != NVML_SUCCESS || api.set_create(&shared_set) != NVML_SUCCESS) {
        fprintf(stderr, "init failed\n");
        return 1;
    }
    pthread_t tid[THREADS];
    for (long i = 0; i < THREADS; i++) {
        pthread_create(&tid[i], NULL, worker, (void *)i);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(tid[i], NULL);
    }
    api.set_free(shared_set);
    int extra = api.shutdown() == NVML_SUCCESS && api.shutdown() == NVML_ERROR_UNINITIALIZED;
    if (failed || !extra) {
        fprintf(stderr, "FAILED\n");
        return 1;
    }
    printf("ok: %d threads x %d rounds\n", THREADS, ROUNDS);
    return 0;
}
