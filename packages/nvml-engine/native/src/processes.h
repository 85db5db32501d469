/*
 * Processes on a GPU, from the live layer's process (allocation) records (STATE-FORMAT.md,
 * "Process (allocation) records"): each record is a container that holds some board GPUs,
 * with its host PID, the framebuffer memory it uses on each and a utilization pattern. The
 * NRI plugin writes them from the container life cycle; every reader here is lock-free under
 * the record's own sequence lock, and a node without records pays one load per call (the
 * header's high-water mark).
 */
#ifndef NVML_MOCK_PROCESSES_H
#define NVML_MOCK_PROCESSES_H

#include "mock.h"

/* The most processes one device reports (every slot of the region). */
#define MOCK_PROCS_MAX LIVE_PROCESS_SLOTS

/* gpu_instance / compute_instance of a process holding a whole GPU (NVML's "no instance"). */
#define MOCK_PROC_NO_INSTANCE 0xFFFFFFFFu

/* One record's NVML-visible part on one device, read in one consistent snapshot: a record
 * holding MIG devices of a GPU gives one per MIG device, with its instance ids. */
struct mock_proc {
    uint32_t gpu_instance;
    uint32_t compute_instance;
    uint32_t pid;
    uint64_t used_bytes;
    uint64_t start_ms;
    uint32_t pattern;
    uint32_t level;
    uint32_t period_ms;
    uint64_t seed;
};

/* The records holding `d` (by its board GPU), in slot order: up to `max` are stored in `out`
 * (which may be NULL when max is 0); returns how many there are. */
unsigned int mock_procs_of(const struct nvmlDevice_st *d, struct mock_proc *out, unsigned int max);

/* Call fn(p, arg) for each record holding `d`'s board GPU, in slot order (each read in one
 * consistent snapshot), once per MIG device of it the record holds, else once; returns how
 * many calls there were. */
unsigned int mock_procs_each(const struct nvmlDevice_st *d, void (*fn)(const struct mock_proc *, void *), void *arg);

/* Whether any record may hold a GPU: the one load a getter pays on a node without any. */
static inline int mock_procs_any(void)
{
    const unsigned char *h = atomic_load_explicit(&mock_live_header, memory_order_acquire);
    return h != NULL &&
           __atomic_load_n((const uint32_t *)(const void *)(h + LIVE_HDR_PROCESS_HIGH), __ATOMIC_ACQUIRE) != 0;
}

/* The framebuffer memory the records use on MIG device (gi, ci) of `d`: the sum over every
 * MIG device of GPU instance `gi` (memory is the GPU instance's, shared by its compute
 * instances); 0 without records. */
uint64_t mock_procs_mig_used_bytes(const struct nvmlDevice_st *d, unsigned int gi, unsigned int ci);

/* The framebuffer memory the records use on `d`, its MIG devices' included (the sum; 0
 * without records). */
uint64_t mock_procs_used_bytes(const struct nvmlDevice_st *d);

/* A process's utilization now (percent): its pattern at the current quantum, 0 without one. */
unsigned int mock_proc_util(const struct mock_proc *p);

/* A process's memory (framebuffer) utilization for SM utilization `u`, as a pattern's. */
unsigned int mock_proc_mem_util(unsigned int u);

/* The records' utilization of `d`: the sum over its processes, capped at 100. *moving
 * (unless NULL) says whether any of them has a pattern that moves with time (any but a steady
 * one that has started), so that the sum does. */
unsigned int mock_procs_util(const struct nvmlDevice_st *d, int *moving);

/* The current quantum's start, in microseconds (the samples' time stamps). */
uint64_t mock_procs_now_us(void);

#endif
