/*
 * Modules and libraries load, kernels never run. An image (PTX text, a cubin ELF, a fat
 * binary, or the wrapper nvcc emits around one) is copied and kept so its functions can be
 * looked up by name: PTX by its `.entry` lines, a binary by the name among its strings. A
 * fat binary whose ELF is compressed hides the names, so any name is taken from it.
 *
 * Every launch fails with CUDA_ERROR_NOT_SUPPORTED (its string says this driver runs no
 * kernels): this node has no GPU, and its binaries hold GPU code. Only with
 * MOCK_CUDA_LAUNCH=noop-meaningless-results does a launch of a valid function succeed
 * without doing anything, for programs whose test needs a launch to return and never reads
 * what a kernel would have written: every result such a program computes is meaningless.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_cu.h"

#define NOOP_SWITCH "noop-meaningless-results"
#define IMAGE_MAX (1ull << 31) /* the largest image kept (2 GiB) */

struct CUmod_st {
    unsigned char *image;
    size_t size;
    int text;       /* PTX */
    int names_seen; /* the names are readable (not a compressed fat binary) */
    struct CUctx_st *ctx;
};

struct CUfunc_st {
    struct CUmod_st *module;
    char name[256];
};

struct CUlib_st {
    struct CUmod_st *module;
};

static int launch_noop(void)
{
    const char *v = getenv("MOCK_CUDA_LAUNCH");
    return v != NULL && strcmp(v, NOOP_SWITCH) == 0;
}

static uint64_t rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint16_t rd16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243B1u

/* The size of the image at `p`, from its own header (0: not an image this driver reads).
 * Sets *text for PTX. */
static size_t image_size(const unsigned char *p, int *text, const unsigned char **start)
{
    *text = 0;
    *start = p;
    if (rd32(p) == FATBIN_WRAPPER_MAGIC) {
        /* struct { int magic; int version; const void *data; void *filename_or_fatbins; } */
        const unsigned char *data;
        memcpy(&data, p + 8, sizeof(data));
        if (data == NULL) {
            return 0;
        }
        return image_size(data, text, start);
    }
    if (rd32(p) == FATBIN_MAGIC) {
        uint16_t header = rd16(p + 6);
        uint64_t body = rd64(p + 8);
        return header < 16 || body > IMAGE_MAX ? 0 : (size_t)header + (size_t)body;
    }
    if (memcmp(p, "\177ELF", 4) == 0 && p[4] == 2 /* 64-bit */) {
        uint64_t shoff = rd64(p + 0x28);
        uint16_t shentsize = rd16(p + 0x3A);
        uint16_t shnum = rd16(p + 0x3C);
        uint64_t end = shoff + (uint64_t)shentsize * shnum;
        return end < 64 || end > IMAGE_MAX ? 0 : (size_t)end;
    }
    size_t n = strnlen((const char *)p, IMAGE_MAX);
    if (n < IMAGE_MAX && memmem(p, n, ".version", 8) != NULL && memmem(p, n, ".target", 7) != NULL) {
        *text = 1;
        return n + 1;
    }
    return 0;
}

static CUresult load(CUmodule *out, const void *image, struct CUctx_st *ctx)
{
    if (out == NULL || image == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    int text;
    const unsigned char *start;
    size_t size = image_size(image, &text, &start);
    if (size == 0) {
        return CUDA_ERROR_INVALID_IMAGE;
    }
    struct CUmod_st *m = calloc(1, sizeof(*m));
    unsigned char *copy = malloc(size);
    if (m == NULL || copy == NULL) {
        free(m);
        free(copy);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(copy, start, size);
    m->image = copy;
    m->size = size;
    m->text = text;
    /* a fat binary's entries are ELF or PTX, plain or compressed: names are readable when
     * one shows an ELF or PTX header */
    m->names_seen = text || memmem(copy, size, "\177ELF", 4) != NULL || memmem(copy, size, ".entry", 6) != NULL;
    m->ctx = ctx;
    pthread_mutex_lock(&mock_cu_lock);
    int bad = mock_cu_handle_add(m, MOCK_KIND_MODULE);
    pthread_mutex_unlock(&mock_cu_lock);
    if (bad) {
        free(copy);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = m;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    struct CUctx_st *ctx;
    CUresult r = mock_cu_current(&ctx);
    return r != CUDA_SUCCESS ? r : load(module, image, ctx);
}

MOCK_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                        CUjit_option *options, void **optionValues)
{
    (void)numOptions;
    (void)options;
    (void)optionValues;
    return cuModuleLoadData(module, image);
}

MOCK_ALIAS(cuModuleLoadFatBinary, cuModuleLoadData);

static CUresult read_file(const char *path, unsigned char **out)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return CUDA_ERROR_FILE_NOT_FOUND;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap + 1);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) {
            break;
        }
        if (cap >= IMAGE_MAX) {
            free(buf);
            buf = NULL;
            break;
        }
        cap *= 2;
        unsigned char *grown = realloc(buf, cap + 1);
        if (grown == NULL) {
            free(buf);
        }
        buf = grown;
    }
    fclose(f);
    if (buf == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    buf[n] = 0; /* PTX read from a file ends here */
    if (n < 16) {
        free(buf);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    *out = buf;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    struct CUctx_st *ctx;
    CUresult r = mock_cu_current(&ctx);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    if (module == NULL || fname == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    unsigned char *buf;
    r = read_file(fname, &buf);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    r = load(module, buf, ctx);
    free(buf);
    return r;
}

static void free_module(struct CUmod_st *m)
{
    free(m->image);
    free(m);
}

MOCK_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
    CUresult r = mock_cu_handle_retire(hmod, MOCK_KIND_MODULE);
    if (r == CUDA_SUCCESS) {
        /* functions of the module stay registered but name a module that is gone: looked up first */
        free_module(hmod);
    }
    return r;
}

/* Whether module `m` (live, under mock_cu_lock) defines function `name`. */
static int defines(const struct CUmod_st *m, const char *name)
{
    size_t len = strlen(name);
    if (!m->names_seen) {
        return 1;
    }
    const unsigned char *p = m->image, *end = m->image + m->size;
    while (p < end) {
        const unsigned char *hit = memmem(p, (size_t)(end - p), name, len);
        if (hit == NULL) {
            return 0;
        }
        unsigned char before = hit > m->image ? hit[-1] : 0;
        unsigned char after = hit + len < end ? hit[len] : 0;
        if (m->text) {
            /* ".entry name(" or ".entry name (" */
            if ((before == ' ' || before == '\t') && (after == '(' || after == ' ' || after == '\n') &&
                hit - m->image >= 7 && memcmp(hit - 7, ".entry", 6) == 0) {
                return 1;
            }
        } else if (before == 0 && after == 0) {
            return 1; /* a whole string of the ELF's string table */
        }
        p = hit + 1;
    }
    return 0;
}

static CUresult function_of(CUfunction *hfunc, struct CUmod_st *m, const char *name)
{
    if (hfunc == NULL || name == NULL || name[0] == '\0' || strlen(name) >= sizeof(((struct CUfunc_st *)0)->name)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&mock_cu_lock);
    int live = mock_cu_handle_is(m, MOCK_KIND_MODULE);
    int found = live && defines(m, name);
    pthread_mutex_unlock(&mock_cu_lock);
    if (!live) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (!found) {
        return CUDA_ERROR_NOT_FOUND;
    }
    struct CUfunc_st *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    f->module = m;
    snprintf(f->name, sizeof(f->name), "%s", name);
    pthread_mutex_lock(&mock_cu_lock);
    int bad = mock_cu_handle_add(f, MOCK_KIND_FUNCTION);
    pthread_mutex_unlock(&mock_cu_lock);
    if (bad) {
        free(f);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *hfunc = f;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    CUresult state = mock_cu_init_state();
    return state != CUDA_SUCCESS ? state : function_of(hfunc, hmod, name);
}

MOCK_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    if (name == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&mock_cu_lock);
    int live = mock_cu_handle_is(hfunc, MOCK_KIND_FUNCTION);
    pthread_mutex_unlock(&mock_cu_lock);
    if (!live) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    *name = hfunc->name;
    return CUDA_SUCCESS;
}

/* ---- libraries (cuLibrary*, the context-independent loading of CUDA 12) ----------------- */

static CUresult library_load(CUlibrary *library, const void *code)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    if (library == NULL || code == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUmodule m;
    CUresult r = load(&m, code, NULL);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    struct CUlib_st *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        (void)cuModuleUnload(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    l->module = m;
    pthread_mutex_lock(&mock_cu_lock);
    int bad = mock_cu_handle_add(l, MOCK_KIND_LIBRARY);
    pthread_mutex_unlock(&mock_cu_lock);
    if (bad) {
        free(l);
        (void)cuModuleUnload(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *library = l;
    return CUDA_SUCCESS;
}

MOCK_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                       void **jitOptionsValues, unsigned int numJitOptions,
                                       CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                       unsigned int numLibraryOptions)
{
    (void)jitOptions;
    (void)jitOptionsValues;
    (void)numJitOptions;
    (void)libraryOptions;
    (void)libraryOptionValues;
    (void)numLibraryOptions;
    return library_load(library, code);
}

MOCK_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                                           void **jitOptionsValues, unsigned int numJitOptions,
                                           CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                           unsigned int numLibraryOptions)
{
    if (fileName == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    unsigned char *buf;
    CUresult r = read_file(fileName, &buf);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    r = cuLibraryLoadData(library, buf, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                          libraryOptionValues, numLibraryOptions);
    free(buf);
    return r;
}

static CUresult library_module(CUlibrary library, struct CUmod_st **m)
{
    pthread_mutex_lock(&mock_cu_lock);
    int live = mock_cu_handle_is(library, MOCK_KIND_LIBRARY);
    *m = live ? library->module : NULL;
    pthread_mutex_unlock(&mock_cu_lock);
    return live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

MOCK_EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
    struct CUmod_st *m;
    CUresult r = library_module(library, &m);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    pthread_mutex_lock(&mock_cu_lock);
    mock_cu_handle_remove(library);
    pthread_mutex_unlock(&mock_cu_lock);
    free(library);
    return cuModuleUnload(m);
}

MOCK_EXPORT CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
    struct CUmod_st *m;
    if (pMod == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = library_module(library, &m);
    if (r == CUDA_SUCCESS) {
        *pMod = m;
    }
    return r;
}

MOCK_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    struct CUmod_st *m;
    CUresult r = library_module(library, &m);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    CUfunction f;
    r = function_of(&f, m, name);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&mock_cu_lock);
        (void)mock_cu_handle_add(f, MOCK_KIND_KERNEL); /* a kernel is the function, by kind */
        pthread_mutex_unlock(&mock_cu_lock);
        *pKernel = (CUkernel)(void *)f;
    }
    return r;
}

MOCK_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    if (pFunc == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&mock_cu_lock);
    int live = mock_cu_handle_is(kernel, MOCK_KIND_KERNEL);
    pthread_mutex_unlock(&mock_cu_lock);
    if (!live) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    *pFunc = (CUfunction)(void *)kernel;
    return CUDA_SUCCESS;
}

/* ---- launches -------------------------------------------------------------------------- */

/* What every launch answers: the function and stream are checked as a real driver checks
 * them, then NOT_SUPPORTED, or success with no work under the no-op switch. */
static CUresult launch(const void *f, CUstream stream)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    pthread_mutex_lock(&mock_cu_lock);
    int live = mock_cu_handle_is(f, MOCK_KIND_FUNCTION) || mock_cu_handle_is(f, MOCK_KIND_KERNEL);
    int module_live = live && mock_cu_handle_is(((const struct CUfunc_st *)f)->module, MOCK_KIND_MODULE);
    pthread_mutex_unlock(&mock_cu_lock);
    if (!live || !module_live) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    CUresult r = mock_cu_stream_check(stream);
    if (r != CUDA_SUCCESS) {
        return r;
    }
    return launch_noop() ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

MOCK_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                    unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY, (void)blockDimZ;
    (void)sharedMemBytes, (void)kernelParams, (void)extra;
    return launch(f, hStream);
}

MOCK_ALIAS(cuLaunchKernel_ptsz, cuLaunchKernel);

MOCK_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    (void)kernelParams, (void)extra;
    if (config == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return launch(f, config->hStream);
}

MOCK_ALIAS(cuLaunchKernelEx_ptsz, cuLaunchKernelEx);

MOCK_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                               unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                               void **kernelParams)
{
    return cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                          kernelParams, NULL);
}

MOCK_ALIAS(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel);

MOCK_EXPORT CUresult cuLaunch(CUfunction f)
{
    return launch(f, NULL);
}

MOCK_EXPORT CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
    (void)grid_width, (void)grid_height;
    return launch(f, NULL);
}

MOCK_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream)
{
    (void)grid_width, (void)grid_height;
    return launch(f, hStream);
}
