/*
 * Answers no nvml.h function (init.c calls it). Bounded parser for the rendered GPU state
 * (STATE-FORMAT.md, format 1).
 *
 * Every limit of the format is enforced here, with fixed-size destinations, so that a
 * hostile or truncated file can only ever produce an error message: the parser never
 * allocates, never recurses and never reads past `len`. Keys are described once in a
 * table (type, destination offset, bounds, default), which keeps per-key code out of
 * the hot loop and makes the format's documentation and the parser easy to compare.
 */
#include "state.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum key_type {
    K_STR,     /* NUL-terminated string, at most size-1 bytes */
    K_U32,     /* unsigned, [min, max] */
    K_I32,     /* signed, [min, max] */
    K_U64,     /* unsigned 64-bit */
    K_BUSID,   /* PCI bus id */
    K_UUID16,  /* 8-4-4-4-12 hex -> 16 bytes */
    K_CPULIST, /* 0-3,8,10-11 -> bitmask */
    K_BUSLIST, /* comma-separated bus ids */
    K_MIGGI,   /* one MIG GPU-instance profile; the key repeats, one line per profile */
};

enum { F_REQUIRED = 1 };

struct key_def {
    const char *name;
    enum key_type type;
    size_t offset;
    size_t size;
    int64_t min;
    int64_t max;
    int flags;
    const char *dflt; /* applied when an optional key is absent; NULL = zero */
};

#define SYS(f) offsetof(struct state_system, f), sizeof(((struct state_system *)0)->f)
#define GPU(f) offsetof(struct state_gpu, f), sizeof(((struct state_gpu *)0)->f)
#define SYSTEM_KEY(name, field, kind, size, min, max, flags, dflt) {#name, K_##kind, SYS(field), min, max, flags, dflt},
/* Where a GPU key's value goes: its member, but a MIG profile key's count (the profiles
 * themselves go to the state's pool, state.h). */
#define GPU_AT_STR(f) GPU(f)
#define GPU_AT_U32(f) GPU(f)
#define GPU_AT_I32(f) GPU(f)
#define GPU_AT_U64(f) GPU(f)
#define GPU_AT_BUSID(f) GPU(f)
#define GPU_AT_UUID16(f) GPU(f)
#define GPU_AT_CPULIST(f) GPU(f)
#define GPU_AT_BUSLIST(f) GPU(f)
#define GPU_AT_MIGGI(f) GPU(f##_count)
#define GPU_KEY(name, field, kind, size, min, max, flags, dflt) {#name, K_##kind, GPU_AT_##kind(field), min, max, flags, dflt},

/* Expanded from the generated tables (keys.h): the declaration in keys.toml is the one source. */
static const struct key_def system_keys[] = {STATE_SYSTEM_KEYS(SYSTEM_KEY)};
static const struct key_def gpu_keys[] = {STATE_GPU_KEYS(GPU_KEY)};

#define NSYS (sizeof(system_keys) / sizeof(system_keys[0]))
#define NGPU (sizeof(gpu_keys) / sizeof(gpu_keys[0]))

/* Each GPU key's index in gpu_keys (declaration order), for the defaults close_section_at
 * derives from other keys. */
#define GPU_KEY_INDEX(name, field, kind, size, min, max, flags, dflt) GPU_KEY_##name,
enum { STATE_GPU_KEYS(GPU_KEY_INDEX) };
#define MAX_KEYS 128

_Static_assert(NGPU <= MAX_KEYS && NSYS <= MAX_KEYS, "seen[] too small");

struct parser {
    struct state *out;
    size_t line_no;
    char *err;
    size_t errlen;
};

static int fail(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct parser *p, const char *fmt, ...)
{
    if (p->err != NULL && p->errlen > 0) {
        int n = snprintf(p->err, p->errlen, "line %zu: ", p->line_no);
        if (n < 0 || (size_t)n >= p->errlen) {
            n = 0;
        }
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Copy at most 40 bytes of a value into a printable, NUL-terminated quote for messages. */
static void quote(char *dst, size_t cap, const char *s, size_t len)
{
    size_t j = 0;
    for (size_t i = 0; i < len && j + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        dst[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
        if (i == 39 && len > 40) {
            dst[j++] = '.';
            dst[j++] = '.';
            dst[j++] = '.';
            break;
        }
    }
    dst[j] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

int state_parse_uint(const char *s, size_t len, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    if (len == 0) {
        return -1;
    }
    if (len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        if (len > 18) {
            return -1;
        }
        for (i = 2; i < len; i++) {
            int h = hexval(s[i]);
            if (h < 0) {
                return -1;
            }
            v = (v << 4) | (uint64_t)h;
        }
    } else {
        if (len > 20) {
            return -1;
        }
        for (i = 0; i < len; i++) {
            if (s[i] < '0' || s[i] > '9') {
                return -1;
            }
            uint64_t d = (uint64_t)(s[i] - '0');
            if (v > (UINT64_MAX - d) / 10) {
                return -1;
            }
            v = v * 10 + d;
        }
    }
    if (v > max) {
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_int(const char *s, size_t len, int64_t min, int64_t max, int64_t *out)
{
    uint64_t mag = 0;
    int neg = 0;
    if (len > 0 && s[0] == '-') {
        neg = 1;
        s++;
        len--;
    }
    if (state_parse_uint(s, len, (uint64_t)INT64_MAX, &mag) != 0) {
        return -1;
    }
    int64_t v = neg ? -(int64_t)mag : (int64_t)mag;
    if (v < min || v > max) {
        return -1;
    }
    *out = v;
    return 0;
}

int state_parse_uuid16(const char *s, size_t len, uint8_t out[16])
{
    static const size_t dash[] = {8, 13, 18, 23};
    size_t nib = 0;
    if (len != 36) {
        return -1;
    }
    uint8_t tmp[16] = {0};
    for (size_t i = 0, d = 0; i < len; i++) {
        if (d < 4 && i == dash[d]) {
            if (s[i] != '-') {
                return -1;
            }
            d++;
            continue;
        }
        int h = hexval(s[i]);
        if (h < 0) {
            return -1;
        }
        tmp[nib / 2] = (uint8_t)(tmp[nib / 2] | (nib % 2 ? h : h << 4));
        nib++;
    }
    memcpy(out, tmp, 16);
    return 0;
}

static int parse_hex_field(const char *s, size_t len, size_t maxdigits, uint32_t max, uint32_t *out)
{
    uint32_t v = 0;
    if (len == 0 || len > maxdigits) {
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        int h = hexval(s[i]);
        if (h < 0) {
            return -1;
        }
        v = (v << 4) | (uint32_t)h;
    }
    if (v > max) {
        return -1;
    }
    *out = v;
    return 0;
}

int state_parse_bus_id(const char *s, size_t len, struct state_pci_addr *out)
{
    /* [domain:]bus:device.function, all hex */
    const char *colon2 = NULL;
    const char *colon1 = NULL;
    const char *dot = NULL;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ':') {
            if (colon2 != NULL) {
                return -1;
            }
            if (colon1 == NULL) {
                colon1 = s + i;
            } else {
                colon2 = s + i;
            }
        } else if (s[i] == '.') {
            if (dot != NULL) {
                return -1;
            }
            dot = s + i;
        }
    }
    if (colon1 == NULL || dot == NULL) {
        return -1;
    }
    struct state_pci_addr a = {0, 0, 0, 0};
    const char *bus_start = s;
    const char *bus_end = colon1;
    if (colon2 != NULL) {
        if (parse_hex_field(s, (size_t)(colon1 - s), 8, UINT32_MAX, &a.domain) != 0) {
            return -1;
        }
        bus_start = colon1 + 1;
        bus_end = colon2;
    }
    if (dot < bus_end) {
        return -1;
    }
    if (parse_hex_field(bus_start, (size_t)(bus_end - bus_start), 2, 0xff, &a.bus) != 0 ||
        parse_hex_field(bus_end + 1, (size_t)(dot - bus_end - 1), 2, 0x1f, &a.device) != 0 ||
        parse_hex_field(dot + 1, (size_t)(s + len - dot - 1), 1, 7, &a.function) != 0) {
        return -1;
    }
    *out = a;
    return 0;
}

static int parse_cpulist(const char *s, size_t len, uint64_t *mask)
{
    memset(mask, 0, sizeof(uint64_t) * STATE_CPU_WORDS);
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && s[j] != ',') {
            j++;
        }
        size_t dash = i;
        while (dash < j && s[dash] != '-') {
            dash++;
        }
        uint64_t lo = 0;
        uint64_t hi = 0;
        if (state_parse_uint(s + i, dash - i, STATE_MAX_CPUS - 1, &lo) != 0) {
            return -1;
        }
        hi = lo;
        if (dash < j && state_parse_uint(s + dash + 1, j - dash - 1, STATE_MAX_CPUS - 1, &hi) != 0) {
            return -1;
        }
        if (hi < lo) {
            return -1;
        }
        for (uint64_t c = lo; c <= hi; c++) {
            mask[c / 64] |= 1ULL << (c % 64);
        }
        if (j == len) {
            break;
        }
        i = j + 1;
        if (i == len) {
            return -1; /* trailing comma */
        }
    }
    return 0;
}

static int parse_buslist(const char *s, size_t len, struct state_pci_addr *dst, uint32_t *count)
{
    uint32_t n = 0;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && s[j] != ',') {
            j++;
        }
        if (n >= STATE_MAX_NVLINKS) {
            return -1;
        }
        if (state_parse_bus_id(s + i, j - i, &dst[n]) != 0) {
            return -1;
        }
        n++;
        if (j == len) {
            break;
        }
        i = j + 1;
        if (i == len) {
            return -1;
        }
    }
    *count = n;
    return 0;
}

/* Split s[0..len) at `sep` into at most `max` fields; returns the count, or -1 when there are
 * more. Empty fields are kept (the caller refuses them where a value is needed). */
static int split_fields(const char *s, size_t len, char sep, const char **start, size_t *flen, int max)
{
    int n = 0;
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < len && s[j] != sep) {
            j++;
        }
        if (n >= max) {
            return -1;
        }
        start[n] = s + i;
        flen[n] = j - i;
        n++;
        if (j >= len) {
            return n;
        }
        i = j + 1;
    }
}

static int mig_u32(const char *s, size_t len, uint32_t lo, uint32_t hi, uint32_t *out)
{
    uint64_t v = 0;
    if (state_parse_uint(s, len, hi, &v) != 0 || v < lo) {
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* A MIG profile name: 1..31 bytes of [a-z0-9.+-] (`1g.10gb`, `1g.10gb+me`). */
static int mig_name(const char *s, size_t len, char *out)
{
    if (len == 0 || len >= STATE_MIG_NAME) {
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '+' || c == '-')) {
            return -1;
        }
    }
    memcpy(out, s, len);
    out[len] = '\0';
    return 0;
}

/*
 * One mig_gi_profile value: profile,id,name,instances,slices,sms,copy_engines,decoders,
 * encoders,jpegs,ofas,memory_mib,starts,size,cis (STATE-FORMAT.md). Returns NULL, or what is
 * wrong. A GPU has 8 memory slices and 7 compute slices at most; every placement fits in them.
 */
static const char *parse_mig_gi(const char *v, size_t vlen, struct state_mig_gi *g)
{
    const char *f[16];
    size_t fl[16];
    if (split_fields(v, vlen, ',', f, fl, 16) != 15) {
        return "expected 15 comma-separated fields";
    }
    memset(g, 0, sizeof(*g));
    if (mig_u32(f[0], fl[0], 0, STATE_MAX_MIG_GI_PROFILES - 1, &g->profile) != 0) {
        return "profile is not an NVML GPU-instance profile index (0..17)";
    }
    if (mig_u32(f[1], fl[1], 0, 63, &g->id) != 0) {
        return "id is not an integer in 0..63";
    }
    if (mig_name(f[2], fl[2], g->name) != 0) {
        return "name is not 1..31 bytes of [a-z0-9.+-]";
    }
    if (mig_u32(f[3], fl[3], 1, 7, &g->instances) != 0 || mig_u32(f[4], fl[4], 1, 7, &g->slices) != 0) {
        return "instances and slices must be integers in 1..7";
    }
    uint32_t *counts[] = {&g->sms, &g->copy_engines, &g->decoders, &g->encoders, &g->jpegs, &g->ofas};
    for (int i = 0; i < 6; i++) {
        if (mig_u32(f[5 + i], fl[5 + i], 0, 1024, counts[i]) != 0) {
            return "engine and SM counts must be integers in 0..1024";
        }
    }
    uint64_t mem = 0;
    if (state_parse_uint(f[11], fl[11], 1u << 24, &mem) != 0 || mem == 0) {
        return "memory_mib is not an integer in 1..16777216";
    }
    g->memory_mib = mem;
    if (mig_u32(f[13], fl[13], 1, 8, &g->placement_size) != 0) {
        return "size is not an integer in 1..8";
    }
    const char *p[STATE_MAX_MIG_PLACEMENTS + 1];
    size_t pl[STATE_MAX_MIG_PLACEMENTS + 1];
    int np = split_fields(f[12], fl[12], ':', p, pl, STATE_MAX_MIG_PLACEMENTS);
    if (np < 1) {
        return "starts must list 1..8 placement starts";
    }
    for (int i = 0; i < np; i++) {
        if (mig_u32(p[i], pl[i], 0, 7, &g->placement_start[i]) != 0 ||
            g->placement_start[i] + g->placement_size > 8) {
            return "a placement start is not in 0..7 or its placement passes memory slice 8";
        }
    }
    g->placement_count = (uint32_t)np;
    int nc = split_fields(f[14], fl[14], ':', p, pl, STATE_MAX_MIG_CI_PROFILES);
    if (nc < 1) {
        return "cis must list 1..8 compute-instance profiles (slices@sms)";
    }
    for (int i = 0; i < nc; i++) {
        const char *at = memchr(p[i], '@', pl[i]);
        if (at == NULL) {
            return "a compute-instance profile is not slices@sms";
        }
        size_t a = (size_t)(at - p[i]);
        if (mig_u32(p[i], a, 1, g->slices, &g->ci[i].slices) != 0 ||
            mig_u32(at + 1, pl[i] - a - 1, 1, 1024, &g->ci[i].sms) != 0) {
            return "a compute-instance profile's slices exceed the GPU instance's, or its sms are not in 1..1024";
        }
    }
    g->ci_count = (uint32_t)nc;
    return NULL;
}

/* Well-formed UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF. */
static int valid_utf8(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned char c = u[i];
        size_t n;
        unsigned char lo = 0x80;
        unsigned char hi = 0xbf;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            n = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            lo = c == 0xe0 ? 0xa0 : 0x80;
            hi = c == 0xed ? 0x9f : 0xbf;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            lo = c == 0xf0 ? 0x90 : 0x80;
            hi = c == 0xf4 ? 0x8f : 0xbf;
        } else {
            return 0;
        }
        if (len - i <= n) {
            return 0;
        }
        if (u[i + 1] < lo || u[i + 1] > hi) {
            return 0;
        }
        for (size_t j = 2; j <= n; j++) {
            if (u[i + j] < 0x80 || u[i + j] > 0xbf) {
                return 0;
            }
        }
        i += n + 1;
    }
    return 1;
}

static int apply_value(struct parser *p, const struct key_def *k, void *base, const char *v, size_t vlen)
{
    char q[48];
    char *dst = (char *)base + k->offset;
    switch (k->type) {
    case K_STR:
        if (vlen >= k->size) {
            return fail(p, "key '%s': value longer than %zu bytes", k->name, k->size - 1);
        }
        for (size_t i = 0; i < vlen; i++) {
            if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f) {
                return fail(p, "key '%s': control character in value", k->name);
            }
        }
        if (!valid_utf8(v, vlen)) {
            return fail(p, "key '%s': value is not valid UTF-8", k->name);
        }
        memcpy(dst, v, vlen);
        dst[vlen] = '\0';
        return 0;
    case K_U32:
    case K_U64: {
        uint64_t u = 0;
        uint64_t max = k->type == K_U64 ? UINT64_MAX : (uint64_t)k->max;
        if (state_parse_uint(v, vlen, max, &u) != 0 || (k->min > 0 && u < (uint64_t)k->min)) {
            quote(q, sizeof(q), v, vlen);
            if (k->type == K_U64) {
                return fail(p, "key '%s': '%s' is not an unsigned 64-bit integer", k->name, q);
            }
            return fail(p, "key '%s': '%s' is not an integer in %lld..%lld", k->name, q,
                        (long long)k->min, (long long)k->max);
        }
        if (k->type == K_U64) {
            memcpy(dst, &u, sizeof(uint64_t));
        } else {
            uint32_t u32 = (uint32_t)u;
            memcpy(dst, &u32, sizeof(uint32_t));
        }
        return 0;
    }
    case K_I32: {
        int64_t s = 0;
        if (parse_int(v, vlen, k->min, k->max, &s) != 0) {
            quote(q, sizeof(q), v, vlen);
            return fail(p, "key '%s': '%s' is not an integer in %lld..%lld", k->name, q,
                        (long long)k->min, (long long)k->max);
        }
        int32_t s32 = (int32_t)s;
        memcpy(dst, &s32, sizeof(int32_t));
        return 0;
    }
    case K_BUSID: {
        struct state_pci_addr a;
        if (state_parse_bus_id(v, vlen, &a) != 0) {
            quote(q, sizeof(q), v, vlen);
            return fail(p, "key '%s': '%s' is not a PCI bus id (DDDDDDDD:BB:DD.F)", k->name, q);
        }
        memcpy(dst, &a, sizeof(a));
        return 0;
    }
    case K_UUID16:
        if (state_parse_uuid16(v, vlen, (uint8_t *)dst) != 0) {
            quote(q, sizeof(q), v, vlen);
            return fail(p, "key '%s': '%s' is not a UUID (8-4-4-4-12 hex digits)", k->name, q);
        }
        return 0;
    case K_CPULIST:
        if (parse_cpulist(v, vlen, (uint64_t *)(void *)dst) != 0) {
            quote(q, sizeof(q), v, vlen);
            return fail(p, "key '%s': '%s' is not a CPU list (e.g. 0-71,144-215; CPUs < %d)", k->name,
                        q, STATE_MAX_CPUS);
        }
        return 0;
    case K_MIGGI: {
        /* A section is parsed whole before the next opens, so a GPU's profiles are appended
         * one after another to the pool, from mig_gi_first on. */
        struct state_gpu *g = (struct state_gpu *)base;
        struct state *st = p->out;
        if (g->mig_gi_count >= STATE_MAX_MIG_GI_PROFILES) {
            return fail(p, "key '%s': more than %d profiles", k->name, STATE_MAX_MIG_GI_PROFILES);
        }
        if (g->mig_gi_count == 0) {
            g->mig_gi_first = st->mig_gi_pooled;
        }
        struct state_mig_gi gi;
        const char *why = parse_mig_gi(v, vlen, &gi);
        if (why != NULL) {
            return fail(p, "key '%s': %s", k->name, why);
        }
        const struct state_mig_gi *have = &st->mig_gi_pool[g->mig_gi_first];
        for (uint32_t i = 0; i < g->mig_gi_count; i++) {
            if (have[i].profile == gi.profile) {
                return fail(p, "key '%s': profile %u appears twice", k->name, gi.profile);
            }
        }
        st->mig_gi_pool[st->mig_gi_pooled++] = gi;
        g->mig_gi_count++;
        return 0;
    }
    case K_BUSLIST: {
        struct state_gpu *g = (struct state_gpu *)base;
        if (parse_buslist(v, vlen, g->nvlink_remote, &g->nvlink_remote_count) != 0) {
            quote(q, sizeof(q), v, vlen);
            return fail(p, "key '%s': '%s' is not a list of at most %d PCI bus ids", k->name, q,
                        STATE_MAX_NVLINKS);
        }
        return 0;
    }
    }
    return fail(p, "key '%s': internal error (unknown type)", k->name);
}

static pthread_once_t hash_once = PTHREAD_ONCE_INIT;

/* Each table's keys by hash of the name (open addressing, linear probing): a line's key is
 * hashed while its characters are checked and found with one compare, where a binary search
 * cost some seven string compares per line of a 64-GPU state. An entry is the key's index in
 * its table + 1; 0 is an empty slot. The tables stay in declaration order: sorting them by
 * name at each process's first parse cost a fresh client some 17 microseconds. */
#define HASH_SLOTS 512u
_Static_assert(HASH_SLOTS >= 2u * MAX_KEYS && (HASH_SLOTS & (HASH_SLOTS - 1u)) == 0, "hash table too small");
static uint16_t hash_sys[HASH_SLOTS];
static uint16_t hash_gpu[HASH_SLOTS];
static uint8_t name_len_sys[NSYS]; /* strlen of each key's name */
static uint8_t name_len_gpu[NGPU];

/* A key's hash from its length and its first and last eight bytes: a per-character hash is a
 * chain of dependent multiplies, and the character check beside it ran at its pace. Keys
 * that differ only in their middle share a hash and are told apart by the compare. */
static uint32_t key_hash(const char *name, size_t len)
{
    uint64_t head = 0;
    uint64_t tail = 0;
    if (len >= 8) {
        memcpy(&head, name, 8);
        memcpy(&tail, name + len - 8, 8);
    } else {
        for (size_t i = 0; i < len; i++) {
            head = head << 8 | (unsigned char)name[i];
        }
    }
    uint64_t h = head * 0x9E3779B97F4A7C15ull ^ tail * 0xC2B2AE3D27D4EB4Full ^ (uint64_t)len;
    return (uint32_t)(h >> 29) ^ (uint32_t)h;
}

static void hash_table(const struct key_def *tab, size_t n, uint16_t *slots, uint8_t *lens)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(tab[i].name);
        lens[i] = (uint8_t)len;
        uint32_t at = key_hash(tab[i].name, len) & (HASH_SLOTS - 1u);
        while (slots[at] != 0) {
            at = (at + 1u) & (HASH_SLOTS - 1u);
        }
        slots[at] = (uint16_t)(i + 1u);
    }
}

static void hash_tables(void)
{
    hash_table(system_keys, NSYS, hash_sys, name_len_sys);
    hash_table(gpu_keys, NGPU, hash_gpu, name_len_gpu);
}

/* The index in `tab` of the key key[0..len) whose hash is `h`, or -1. */
static int find_key_hashed(const struct key_def *tab, const char *key, size_t len, uint32_t h)
{
    const uint16_t *slots = tab == system_keys ? hash_sys : hash_gpu;
    const uint8_t *lens = tab == system_keys ? name_len_sys : name_len_gpu;
    for (uint32_t at = h & (HASH_SLOTS - 1u); slots[at] != 0; at = (at + 1u) & (HASH_SLOTS - 1u)) {
        unsigned int i = slots[at] - 1u;
        if (lens[i] == len && memcmp(tab[i].name, key, len) == 0) {
            return (int)i;
        }
    }
    return -1;
}

enum section { SEC_NONE, SEC_SYSTEM, SEC_GPU };

struct section_ctx {
    enum section kind;
    void *base;
    const struct key_def *tab;
    size_t n;
    unsigned char seen[MAX_KEYS];
    size_t header_line;
    int gpu_index;
};

/* Apply defaults and check required keys when a section ends. */
static int close_section_at(struct parser *p, struct section_ctx *sc);

static int close_section(struct parser *p, struct section_ctx *sc)
{
    size_t line = p->line_no;
    int rc = close_section_at(p, sc);
    if (rc == 0) {
        p->line_no = line;
    }
    return rc;
}

/* Errors found here are reported at the section's header line. */
static int close_section_at(struct parser *p, struct section_ctx *sc)
{
    if (sc->kind == SEC_NONE) {
        return 0;
    }
    p->line_no = sc->header_line;
    for (size_t i = 0; i < sc->n; i++) {
        const struct key_def *k = &sc->tab[i];
        if (sc->seen[i]) {
            continue;
        }
        if (k->flags & F_REQUIRED) {
            if (sc->kind == SEC_GPU) {
                return fail(p, "[gpu %d]: required key '%s' is missing", sc->gpu_index, k->name);
            }
            return fail(p, "[system]: required key '%s' is missing", k->name);
        }
        if (k->dflt != NULL && apply_value(p, k, sc->base, k->dflt, strlen(k->dflt)) != 0) {
            return -1;
        }
    }
    if (sc->kind == SEC_GPU) {
        struct state_gpu *g = (struct state_gpu *)sc->base;
        if (!sc->seen[GPU_KEY_app_clock_graphics_mhz]) {
            g->app_clock_graphics_mhz = g->max_clock_graphics_mhz;
        }
        if (!sc->seen[GPU_KEY_app_clock_mem_mhz]) {
            g->app_clock_mem_mhz = g->max_clock_mem_mhz;
        }
        if (!sc->seen[GPU_KEY_platform_supported]) {
            g->platform_supported = g->platform_chassis_serial[0] != '\0';
        }
        /* Ampere replaced page retirement with row remapping (NVML_DEVICE_ARCH_AMPERE = 7). */
        if (!sc->seen[GPU_KEY_remapped_rows_supported]) {
            g->remapped_rows_supported = g->architecture >= 7;
        }
        if (!sc->seen[GPU_KEY_retired_pages_supported]) {
            g->retired_pages_supported = g->architecture < 7;
        }
        if (g->memory_used_bytes > g->memory_total_bytes ||
            g->memory_reserved_bytes > g->memory_total_bytes - g->memory_used_bytes) {
            return fail(p, "[gpu %d]: memory_used_bytes + memory_reserved_bytes exceed memory_total_bytes",
                        sc->gpu_index);
        }
        if (g->bar1_used_bytes > g->bar1_total_bytes) {
            return fail(p, "[gpu %d]: bar1_used_bytes exceeds bar1_total_bytes", sc->gpu_index);
        }
        if (g->uuid[0] == '\0') {
            return fail(p, "[gpu %d]: uuid is empty", sc->gpu_index);
        }
    }
    return 0;
}

static void open_section(struct section_ctx *sc, enum section kind, void *base, size_t line, int idx)
{
    sc->kind = kind;
    sc->base = base;
    sc->tab = kind == SEC_SYSTEM ? system_keys : gpu_keys;
    sc->n = kind == SEC_SYSTEM ? NSYS : NGPU;
    memset(sc->seen, 0, sizeof(sc->seen));
    sc->header_line = line;
    sc->gpu_index = idx;
}

/* Bytes of a key=value line's key: 1 for [a-z0-9_], 2 for the '=' that ends it, 0 else. */
#define KEY_CHARS_4(c) [c] = 1, [c + 1] = 1, [c + 2] = 1, [c + 3] = 1
static const unsigned char key_char[256] = {
    KEY_CHARS_4('a'), KEY_CHARS_4('e'), KEY_CHARS_4('i'), KEY_CHARS_4('m'), KEY_CHARS_4('q'),
    KEY_CHARS_4('u'), ['y'] = 1, ['z'] = 1, KEY_CHARS_4('0'), KEY_CHARS_4('4'), ['8'] = 1,
    ['9'] = 1, ['_'] = 1, ['='] = 2,
};

static int parse_header(struct parser *p, const char *line, size_t n, struct state *out,
                        struct section_ctx *sc, int *seen_system)
{
    if (n == 8 && memcmp(line, "[system]", 8) == 0) {
        if (*seen_system) {
            return fail(p, "[system] appears twice");
        }
        if (out->gpu_count > 0) {
            return fail(p, "[system] must come before any [gpu N]");
        }
        if (close_section(p, sc) != 0) {
            return -1;
        }
        *seen_system = 1;
        open_section(sc, SEC_SYSTEM, &out->system, p->line_no, -1);
        return 0;
    }
    if (n >= 7 && memcmp(line, "[gpu ", 5) == 0 && line[n - 1] == ']') {
        uint64_t idx = 0;
        if (state_parse_uint(line + 5, n - 6, STATE_MAX_GPUS - 1, &idx) != 0 ||
            (line[5] == '0' && n - 6 > 1)) {
            return fail(p, "bad section header (GPU index must be decimal 0..%d)", STATE_MAX_GPUS - 1);
        }
        if (!*seen_system) {
            return fail(p, "[gpu %u] before [system]", (unsigned)idx);
        }
        if (idx != out->gpu_count) {
            return fail(p, "[gpu %u] out of order (expected [gpu %u])", (unsigned)idx, (unsigned)out->gpu_count);
        }
        if (close_section(p, sc) != 0) {
            return -1;
        }
        out->gpu_count++;
        memset(&out->gpu[idx], 0, sizeof(out->gpu[idx]));
        open_section(sc, SEC_GPU, &out->gpu[idx], p->line_no, (int)idx);
        return 0;
    }
    return fail(p, "bad section header (expected [system] or [gpu N])");
}

static int parse_kv(struct parser *p, const char *line, size_t n, struct section_ctx *sc)
{
    size_t eq = 0;
    while (eq < n && key_char[(unsigned char)line[eq]] == 1) {
        eq++;
    }
    if (eq < n && line[eq] != '=') {
        return fail(p, "expected key=value with a key of [a-z0-9_]");
    }
    if (eq == n) {
        return fail(p, "expected key=value (no '=')");
    }
    if (eq == 0) {
        return fail(p, "empty key");
    }
    if (eq > STATE_MAX_KEY) {
        return fail(p, "key longer than %d bytes", STATE_MAX_KEY);
    }
    size_t vlen = n - eq - 1;
    int klen = (int)eq; /* the key is line[0..eq), quoted with %.*s (no copy on the way) */
    if (vlen > STATE_MAX_VALUE) {
        return fail(p, "key '%.*s': value longer than %d bytes", klen, line, STATE_MAX_VALUE);
    }
    if (sc->kind == SEC_NONE) {
        return fail(p, "key '%.*s' outside a section", klen, line);
    }
    int idx = find_key_hashed(sc->tab, line, eq, key_hash(line, eq));
    if (idx < 0) {
        return 0; /* unknown keys are ignored for forward compatibility */
    }
    if (sc->seen[idx] && sc->tab[idx].type != K_MIGGI) {
        return fail(p, "key '%.*s' appears twice in this section", klen, line);
    }
    sc->seen[idx] = 1;
    return apply_value(p, &sc->tab[idx], sc->base, line + eq + 1, vlen);
}

static int check_unique(struct parser *p, const struct state *out)
{
    for (uint32_t i = 0; i < out->gpu_count; i++) {
        for (uint32_t j = 0; j < i; j++) {
            /* nvmlDeviceGetHandleByUUID ignores case, so uniqueness must too */
            if (strcasecmp(out->gpu[i].uuid, out->gpu[j].uuid) == 0) {
                return fail(p, "[gpu %u]: uuid duplicates [gpu %u]", i, j);
            }
            if (memcmp(&out->gpu[i].pci, &out->gpu[j].pci, sizeof(struct state_pci_addr)) == 0) {
                return fail(p, "[gpu %u]: pci_bus_id duplicates [gpu %u]", i, j);
            }
        }
    }
    return 0;
}

int state_parse(const char *buf, size_t len, struct state *out, char *err, size_t errlen)
{
    struct parser p = {out, 0, err, errlen};
    struct section_ctx sc;
    int seen_system = 0;

    pthread_once(&hash_once, hash_tables);
    /* Only what the text fills: the system part here, each GPU's entry as its section opens.
     * A whole struct state is 300 KiB, and clearing it all made a fresh process fault in every
     * page of it at its first nvmlInit for the few GPUs a node has. */
    memset(&out->system, 0, sizeof(out->system));
    out->gpu_count = 0;
    out->mig_gi_pooled = 0;
    memset(&sc, 0, sizeof(sc));
    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }
    if (buf == NULL) {
        return fail(&p, "no data");
    }
    if (len > STATE_MAX_BYTES) {
        return fail(&p, "file larger than %u bytes", STATE_MAX_BYTES);
    }

    /* the first NUL byte, found in one pass rather than line by line: its line is refused */
    const char *nul = memchr(buf, '\0', len);
    size_t pos = 0;
    while (pos < len) {
        const char *line = buf + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl != NULL ? (size_t)(nl - line) : len - pos;
        pos += n + (nl != NULL ? 1 : 0);
        p.line_no++;
        if (n > STATE_MAX_LINE) {
            return fail(&p, "line longer than %d bytes", STATE_MAX_LINE);
        }
        if (nul != NULL && nul < line + n) {
            return fail(&p, "NUL byte in line");
        }
        if (p.line_no == 1) {
            if (n != sizeof(STATE_MAGIC) - 1 || memcmp(line, STATE_MAGIC, n) != 0) {
                return fail(&p, "not a state file (first line must be '%s')", STATE_MAGIC);
            }
            continue;
        }
        if (n == 0 || line[0] == '#') {
            continue;
        }
        int rc = line[0] == '[' ? parse_header(&p, line, n, out, &sc, &seen_system) : parse_kv(&p, line, n, &sc);
        if (rc != 0) {
            return -1;
        }
    }
    if (p.line_no == 0) {
        return fail(&p, "empty file (first line must be '%s')", STATE_MAGIC);
    }
    if (close_section(&p, &sc) != 0) {
        return -1;
    }
    p.line_no++;
    if (!seen_system) {
        return fail(&p, "end of file: no [system] section");
    }
    if (out->system.device_count != out->gpu_count) {
        return fail(&p, "end of file: device_count=%u but %u [gpu N] sections", out->system.device_count,
                    out->gpu_count);
    }
    return check_unique(&p, out);
}
