/*
 * MIG devices for an allocation writer (the NRI plugin): which MIG devices a GPU has in the
 * node's live MIG layout, with their instance ids and MIG- UUIDs, so a container's
 * NVIDIA_VISIBLE_DEVICES=MIG-... or <gpu>:<mig> entry resolves to the GPU and instances it
 * holds. Called through ctypes on the mapped live file, without nvmlInit (the writer has no
 * board state loaded): the layout is read raw under its sequence lock, and the UUIDs come
 * from mig.c's own function, so the writer and the library name a MIG device alike. This
 * unit answers no nvml.h function.
 */
#include "mig.h"
#include "mock.h"

#include <string.h>

#define HELD_MAX (LIVE_MIG_MAX_GI * LIVE_MIG_MAX_CI)
#define UUID_BYTES 48u

MOCK_EXPORT int nvml_mock_live_mig_devices(const void *base, size_t len, unsigned int gpu, const char *gpu_uuid,
                                           unsigned int *gis, unsigned int *cis, unsigned int *slices, char *uuids,
                                           unsigned int max);

static uint32_t ld32(const unsigned char *rec, size_t off)
{
    return __atomic_load_n((const uint32_t *)(const void *)(rec + off), __ATOMIC_RELAXED);
}

/*
 * The MIG devices of board GPU `gpu` (whose UUID is `gpu_uuid`) in host index order (GPU
 * instance id, then compute instance id, as GetMigDeviceHandleByIndex counts them): up to
 * `max` are stored as ids in gis[] / cis[], the GPU instance's placement size (memory
 * slices, of 8) in slices[] and UUIDs in uuids[] (48 bytes each). Returns how
 * many there are (0 when MIG mode is not current), or -1 for a bad argument or a record no
 * consistent read could be taken of.
 */
int nvml_mock_live_mig_devices(const void *base, size_t len, unsigned int gpu, const char *gpu_uuid,
                               unsigned int *gis, unsigned int *cis, unsigned int *slices, char *uuids,
                               unsigned int max)
{
    if (base == NULL || len != LIVE_TOTAL_BYTES || gpu >= LIVE_GPU_SLOTS || gpu_uuid == NULL ||
        (max > 0 && (gis == NULL || cis == NULL || slices == NULL || uuids == NULL))) {
        return -1;
    }
    const unsigned char *rec = (const unsigned char *)base + LIVE_MIG_OFFSET + (size_t)gpu * LIVE_MIG_BYTES_PER_GPU;
    const uint64_t *seq = (const uint64_t *)(const void *)(rec + LIVE_MIG_SEQ);
    unsigned int key[HELD_MAX]; /* size << 16 | gi << 8 | ci, sorted on the low 16 bits */
    unsigned int n = 0;
    int consistent = 0;
    for (unsigned int attempt = 0; attempt < LIVE_READ_TRIES && !consistent; attempt++) {
        uint64_t s = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
        if (s & 1u) {
            mock_live_pause(attempt);
            continue;
        }
        n = 0;
        if (ld32(rec, LIVE_MIG_CURRENT) == 1u) {
            for (unsigned int g = 0; g < LIVE_MIG_MAX_GI; g++) {
                size_t gb = LIVE_MIG_GI + (size_t)g * LIVE_MIG_GI_BYTES;
                if (ld32(rec, gb + LIVE_MIG_GI_USED) == 0u) {
                    continue;
                }
                uint32_t gi = ld32(rec, gb + LIVE_MIG_GI_ID);
                uint32_t size = ld32(rec, gb + LIVE_MIG_GI_SIZE) & 0xFFu;
                for (unsigned int c = 0; c < LIVE_MIG_MAX_CI; c++) {
                    size_t cb = gb + LIVE_MIG_GI_CI + (size_t)c * LIVE_MIG_CI_BYTES;
                    uint32_t ci = ld32(rec, cb + LIVE_MIG_CI_ID);
                    if (ld32(rec, cb + LIVE_MIG_CI_USED) != 0u && gi <= 0xFFu && ci <= 0xFFu) {
                        key[n++] = size << 16 | gi << 8 | ci;
                    }
                }
            }
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        consistent = __atomic_load_n(seq, __ATOMIC_RELAXED) == s;
    }
    if (!consistent) {
        return -1;
    }
    for (unsigned int i = 1; i < n; i++) { /* insertion sort: at most 64 entries */
        unsigned int k = key[i];
        unsigned int j = i;
        for (; j > 0 && (key[j - 1] & 0xFFFFu) > (k & 0xFFFFu); j--) {
            key[j] = key[j - 1];
        }
        key[j] = k;
    }
    for (unsigned int i = 0; i < n && i < max; i++) {
        slices[i] = key[i] >> 16;
        gis[i] = key[i] >> 8 & 0xFFu;
        cis[i] = key[i] & 0xFFu;
        mock_mig_uuid(gpu_uuid, gis[i], cis[i], uuids + (size_t)i * UUID_BYTES, UUID_BYTES);
    }
    return (int)n;
}
