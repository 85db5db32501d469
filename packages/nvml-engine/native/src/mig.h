/*
 * MIG device handles for the units that answer device queries: a MIG device handle is an
 * nvmlDevice_t that points into mig.c's own table, never into mock_devices, so GET_DEVICE
 * refuses it (INVALID_ARGUMENT) everywhere except where a unit asks mock_mig_device first.
 */
#ifndef NVML_MOCK_MIG_H
#define NVML_MOCK_MIG_H

#include <nvml.h>
#include <stddef.h>

#include "live_layout.h"
#include "state.h"

/* What a MIG device handle stands for, read from the live MIG record at the call. */
struct mock_mig_view {
    const struct nvmlDevice_st *parent;
    unsigned int gi_id;
    unsigned int ci_id;
    unsigned int gi_slices;
    unsigned int ci_slices;
    unsigned int sms;
    unsigned int copy_engines, decoders, encoders, jpegs, ofas;
    unsigned long long memory_mib;
    unsigned int memory_slices; /* of the GPU's eight: the GPU instance's placement size */
    char name[96]; /* the device name: "<board> MIG <profile>" */
    char uuid[48]; /* "MIG-<uuid>" */
};

/* MIG device handles: addresses in this table (mig.c), by GPU, GPU-instance id and
 * compute-instance id. */
#define MOCK_MIG_IDS 14u
struct mock_mig_dev {
    unsigned char unused;
};
extern struct mock_mig_dev mock_mig_devs[STATE_MAX_GPUS][MOCK_MIG_IDS][LIVE_MIG_MAX_CI];

/* mock_mig_device for a handle in the table. */
int mock_mig_device_at(nvmlDevice_t device, struct mock_mig_view *view, nvmlReturn_t *rc);

/* Whether `device` is a MIG device handle. 1 with *view filled when it is one of a compute
 * instance that exists now; 1 with *rc = INVALID_ARGUMENT when the instance is gone (its handle
 * is stale); 0 when it is not a MIG device handle at all (told inline: a GPU's handle pays
 * one compare). */
static inline int mock_mig_device(nvmlDevice_t device, struct mock_mig_view *view, nvmlReturn_t *rc)
{
    if ((uintptr_t)device - (uintptr_t)mock_mig_devs >= sizeof(mock_mig_devs)) {
        return 0;
    }
    return mock_mig_device_at(device, view, rc);
}

/* Whether `device` is in the MIG device handle table (stale or not): the one compare of
 * mock_mig_device, for a call that hands MIG devices to a function of their own. */
static inline int mock_mig_handle(nvmlDevice_t device)
{
    return (uintptr_t)device - (uintptr_t)mock_mig_devs < sizeof(mock_mig_devs);
}

/* The UUID ("MIG-...") of MIG device (gi, ci) of the GPU whose UUID is `gpu_uuid`: stable for
 * the instance ids, so a container can be given one by name (NVIDIA_VISIBLE_DEVICES). */
void mock_mig_uuid(const char *gpu_uuid, unsigned int gi, unsigned int ci, char *out, size_t cap);

/* Whether MIG mode is current on the whole GPU `d` (0 on a board without MIG): whole-GPU
 * utilization is then not answered, as on a real GPU in MIG mode. */
int mock_mig_on(const struct nvmlDevice_st *d);

/* The instance ids of MIG device `index` of board GPU `board` in the node's live MIG layout
 * (the toolkit's "<gpu>:<mig>", index as GetMigDeviceHandleByIndex counts on the host), read
 * through `live`, that GPU's live record (NULL: no live layer, so no MIG device): 0 with *gi
 * and *ci set, -1 when that GPU has no such MIG device. Called by init before the view is
 * published, with the live header attached. */
int mock_mig_at(const struct state *st, const unsigned char *live, unsigned int board, unsigned int index,
                unsigned int *gi, unsigned int *ci);

/* The memory of GPU instance `gi` of `d` as its profile gives it, in bytes; UINT64_MAX when
 * no such instance exists now (a record naming a destroyed one is bounded by the GPU alone). */
uint64_t mock_mig_gi_memory_bytes(const struct nvmlDevice_st *d, unsigned int gi);

/* The MIG device handle whose UUID is `uuid` (case ignored); NVML_ERROR_NOT_FOUND if none. */
nvmlReturn_t mock_mig_by_uuid(const char *uuid, nvmlDevice_t *device);

/* Whether GPU instance `id` of `device` (a GPU in MIG mode) exists in this process's view:
 * SUCCESS, NOT_SUPPORTED when MIG mode is off, NOT_FOUND when there is no such instance. */
nvmlReturn_t mock_mig_gi_present(nvmlDevice_t device, unsigned int id);

#endif
