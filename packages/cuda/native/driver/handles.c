/*
 * The handle registry: every context, stream, event, module, function, library and kernel
 * this driver hands out is recorded here with its kind. Every call looks a handle up before
 * reading it, so a handle that was destroyed, belongs to another kind, or was never ours is
 * refused with an error instead of being dereferenced. An open-addressing set keyed by the
 * pointer, grown by doubling; callers hold mock_cu_lock.
 */
#include <stdlib.h>

#include "mock_cu.h"

pthread_mutex_t mock_cu_lock = PTHREAD_MUTEX_INITIALIZER;

struct slot {
    const void *handle; /* NULL: empty; TOMBSTONE: removed */
    enum mock_cu_kind kind;
};

static const char tombstone_byte;
#define TOMBSTONE ((const void *)&tombstone_byte)

static struct slot *slots;
static size_t capacity; /* a power of two */
static size_t used;     /* live + tombstones */
static size_t live;     /* live handles */

static size_t hash(const void *p)
{
    uintptr_t x = (uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x;
}

static int grow(void)
{
    size_t old_capacity = capacity;
    struct slot *old = slots;
    /* rehash in place when tombstones fill the table, double when live handles do */
    size_t next = capacity == 0 ? 256 : (live + 1) * 4 > capacity ? capacity * 2 : capacity;
    struct slot *fresh = calloc(next, sizeof(*fresh));
    if (fresh == NULL) {
        return -1;
    }
    slots = fresh;
    capacity = next;
    used = 0;
    live = 0;
    for (size_t i = 0; i < old_capacity; i++) {
        if (old[i].handle != NULL && old[i].handle != TOMBSTONE) {
            (void)mock_cu_handle_add(old[i].handle, old[i].kind);
        }
    }
    free(old);
    return 0;
}

int mock_cu_handle_add(const void *handle, enum mock_cu_kind kind)
{
    if (handle == NULL) {
        return -1;
    }
    if ((used + 1) * 2 > capacity && grow() != 0) {
        return -1;
    }
    for (size_t i = hash(handle) & (capacity - 1);; i = (i + 1) & (capacity - 1)) {
        if (slots[i].handle == NULL || slots[i].handle == TOMBSTONE) {
            if (slots[i].handle == NULL) {
                used++;
            }
            live++;
            slots[i].handle = handle;
            slots[i].kind = kind;
            return 0;
        }
        if (slots[i].handle == handle) {
            slots[i].kind = kind;
            return 0;
        }
    }
}

static struct slot *find(const void *handle)
{
    if (capacity == 0 || handle == NULL) {
        return NULL;
    }
    for (size_t i = hash(handle) & (capacity - 1);; i = (i + 1) & (capacity - 1)) {
        if (slots[i].handle == NULL) {
            return NULL;
        }
        if (slots[i].handle == handle) {
            return &slots[i];
        }
    }
}

void mock_cu_handle_remove(const void *handle)
{
    struct slot *s = find(handle);
    if (s != NULL) {
        s->handle = TOMBSTONE;
        live--;
    }
}

int mock_cu_handle_is(const void *handle, enum mock_cu_kind kind)
{
    const struct slot *s = find(handle);
    return s != NULL && s->kind == kind;
}

CUresult mock_cu_handle_retire(const void *handle, enum mock_cu_kind kind)
{
    CUresult state = mock_cu_init_state();
    if (state != CUDA_SUCCESS) {
        return state;
    }
    pthread_mutex_lock(&mock_cu_lock);
    int ours = mock_cu_handle_is(handle, kind);
    if (ours) {
        mock_cu_handle_remove(handle);
    }
    pthread_mutex_unlock(&mock_cu_lock);
    return ours ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
