/*
 * libFuzzer entry for the state parser (STATE-FORMAT.md): any input must either parse
 * into a state that keeps the format's invariants, or fail with a message that is
 * NUL-terminated inside its buffer and says where. ASan/UBSan catch any read outside
 * the input or any overflow on the way.
 *
 *   make -C native/fuzz run-state      (see README.md in this directory)
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_terminated(const char *s, size_t cap)
{
    if (memchr(s, '\0', cap) == NULL) {
        __builtin_trap();
    }
}

static void check_state(const struct state *st)
{
    if (st->gpu_count != st->system.device_count || st->gpu_count > STATE_MAX_GPUS) {
        __builtin_trap();
    }
    uint32_t pooled = 0; /* MIG profiles of the GPUs checked so far */
    check_terminated(st->system.driver_version, sizeof(st->system.driver_version));
    check_terminated(st->system.nvml_version, sizeof(st->system.nvml_version));
    check_terminated(st->system.node_name, sizeof(st->system.node_name));
    check_terminated(st->system.profile, sizeof(st->system.profile));
    for (uint32_t i = 0; i < st->gpu_count; i++) {
        const struct state_gpu *g = &st->gpu[i];
        check_terminated(g->name, sizeof(g->name));
        check_terminated(g->uuid, sizeof(g->uuid));
        check_terminated(g->serial, sizeof(g->serial));
        check_terminated(g->board_part_number, sizeof(g->board_part_number));
        check_terminated(g->vbios_version, sizeof(g->vbios_version));
        check_terminated(g->inforom_image_version, sizeof(g->inforom_image_version));
        check_terminated(g->platform_chassis_serial, sizeof(g->platform_chassis_serial));
        if (g->uuid[0] == '\0' || g->nvlink_count > STATE_MAX_NVLINKS ||
            g->nvlink_remote_count > STATE_MAX_NVLINKS || g->memory_used_bytes > g->memory_total_bytes ||
            g->memory_reserved_bytes > g->memory_total_bytes - g->memory_used_bytes ||
            g->bar1_used_bytes > g->bar1_total_bytes || g->pci.bus > 0xff || g->pci.device > 0x1f ||
            g->pci.function > 7 || g->numa_node < -1 || g->pstate < 0 || g->pstate > 15 ||
            g->fabric_state < 0 || g->fabric_state > 3) {
            __builtin_trap();
        }
        for (uint32_t j = 0; j < i; j++) {
            if (strcasecmp(g->uuid, st->gpu[j].uuid) == 0) {
                __builtin_trap();
            }
        }
        /* a GPU's MIG profiles: its own run of the pool, after the GPUs before it */
        if (g->mig_gi_count > STATE_MAX_MIG_GI_PROFILES ||
            (g->mig_gi_count > 0 && (g->mig_gi_first < pooled || g->mig_gi_first + g->mig_gi_count > st->mig_gi_pooled))) {
            __builtin_trap();
        }
        pooled += g->mig_gi_count;
    }
    if (pooled != st->mig_gi_pooled) {
        __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct state st;
    char err[STATE_ERR_LEN];
    memset(err, 'x', sizeof(err));
    if (state_parse((const char *)data, size, &st, err, sizeof(err)) != 0) {
        /* the message must be terminated inside its buffer and say which line */
        check_terminated(err, sizeof(err));
        if (strncmp(err, "line ", 5) != 0) {
            __builtin_trap();
        }
    } else {
        check_state(&st);
    }
    return 0;
}
