/*
 * The rendered GPU state (STATE-FORMAT.md) as plain C data, and its parser.
 *
 * The parser is kept apart from the NVML entry points so it can be fuzzed on its own:
 * state_parse() takes a byte buffer and a caller-owned result, allocates nothing and
 * touches no global, so a libFuzzer harness can call it millions of times.
 */
#ifndef NVML_MOCK_STATE_H
#define NVML_MOCK_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "keys.h"

#define STATE_MAGIC "nvml-mock-state 1"
#define STATE_MAX_BYTES (1u << 20)
#define STATE_MAX_LINE 1023
#define STATE_MAX_KEY 63
#define STATE_MAX_VALUE 255
#define STATE_MAX_GPUS 64
#define STATE_MAX_NVLINKS 18
#define STATE_MAX_CPUS 1024
#define STATE_CPU_WORDS (STATE_MAX_CPUS / 64)
#define STATE_ERR_LEN 256
#define STATE_MAX_MIG_GI_PROFILES 18 /* NVML_GPU_INSTANCE_PROFILE_COUNT */
#define STATE_MAX_MIG_CI_PROFILES 8
#define STATE_MAX_MIG_PLACEMENTS 8
#define STATE_MIG_NAME 32

struct state_pci_addr {
    uint32_t domain;
    uint32_t bus;
    uint32_t device;
    uint32_t function;
};

/* One MIG compute-instance profile of a GPU-instance profile: its slice count and SMs. */
struct state_mig_ci {
    uint32_t slices;
    uint32_t sms;
};

/* One MIG GPU-instance profile (key mig_gi_profile, STATE-FORMAT.md). */
struct state_mig_gi {
    uint32_t profile; /* NVML_GPU_INSTANCE_PROFILE_* index */
    uint32_t id;      /* nvmlGpuInstanceProfileInfo_t.id */
    char name[STATE_MIG_NAME];
    uint32_t instances;
    uint32_t slices;
    uint32_t sms;
    uint32_t copy_engines;
    uint32_t decoders;
    uint32_t encoders;
    uint32_t jpegs;
    uint32_t ofas;
    uint64_t memory_mib;
    uint32_t placement_count;
    uint32_t placement_start[STATE_MAX_MIG_PLACEMENTS];
    uint32_t placement_size;
    uint32_t ci_count;
    struct state_mig_ci ci[STATE_MAX_MIG_CI_PROFILES];
};

/*
 * The structs are expanded from the generated key tables (keys.h), one member per key in
 * declaration order, so a key added to keys.toml is a member here without a hand edit.
 */
#define STATE_FIELD_STR(field, size) char field[size];
#define STATE_FIELD_U32(field, size) uint32_t field;
#define STATE_FIELD_I32(field, size) int32_t field;
#define STATE_FIELD_U64(field, size) uint64_t field;
#define STATE_FIELD_BUSID(field, size) struct state_pci_addr field;
#define STATE_FIELD_UUID16(field, size) uint8_t field[16];
#define STATE_FIELD_CPULIST(field, size) uint64_t field[STATE_CPU_WORDS];
#define STATE_FIELD_BUSLIST(field, size) \
    uint32_t field##_count;              \
    struct state_pci_addr field[STATE_MAX_NVLINKS];
/* A GPU's MIG profiles are not in its entry but in the state's pool (struct state), from
 * field##_first on: most GPUs list some 7 of the 18 profiles a GPU may have, and 18 slots in
 * every entry tripled its size, and the pages a client's first nvmlInit writes. */
#define STATE_FIELD_MIGGI(field, size) \
    uint32_t field##_count;            \
    uint32_t field##_first;
#define STATE_FIELD(name, field, kind, size, min, max, flags, dflt) STATE_FIELD_##kind(field, size)

struct state_system {
    STATE_SYSTEM_KEYS(STATE_FIELD)
};

struct state_gpu {
    STATE_GPU_KEYS(STATE_FIELD)
};

struct state {
    struct state_system system;
    uint32_t gpu_count;
    struct state_gpu gpu[STATE_MAX_GPUS];
    uint32_t mig_gi_pooled; /* entries of mig_gi_pool in use */
    /* each GPU's, one after another: room for every GPU's STATE_MAX_MIG_GI_PROFILES, which
     * the parser holds each to, so an append never needs a bounds check of its own */
    struct state_mig_gi mig_gi_pool[STATE_MAX_GPUS * STATE_MAX_MIG_GI_PROFILES];
};

/*
 * Parse `len` bytes at `buf` into `out` (its system part and gpu[0..gpu_count) overwritten;
 * the entries past gpu_count are left as they were and mean nothing). Returns 0 on success; on
 * failure returns -1 and writes a NUL-terminated message naming the line and key into
 * `err` (at most `errlen` bytes). Never reads outside [buf, buf+len), never allocates.
 */
int state_parse(const char *buf, size_t len, struct state *out, char *err, size_t errlen);

/* Parse a canonical 8-4-4-4-12 hex UUID into 16 bytes. Returns 0 on success. */
int state_parse_uuid16(const char *s, size_t len, uint8_t out[16]);

/* Parse a decimal or 0x-hex unsigned integer no larger than `max`. Returns 0 on success. */
int state_parse_uint(const char *s, size_t len, uint64_t max, uint64_t *out);

/* Parse a PCI bus id `D:B:D.F` (domain of 4 or 8 hex digits, or omitted). Returns 0 on success. */
int state_parse_bus_id(const char *s, size_t len, struct state_pci_addr *out);

#endif
