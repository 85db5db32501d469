/*
 * Objects the library hands out by pointer (event sets, GPM samples): a registry per kind,
 * so that a handle is looked up, never dereferenced on trust.
 *
 * nvml.h types these handles as pointers to structs the caller cannot see, and a caller can
 * pass one after freeing it (a second free, a call racing the free on another thread). The
 * library keeps what it created in a list; every call takes a reference to its object under
 * the list's lock, and a free takes the object out of the list first, then waits for the
 * references already taken before the memory goes. A stale handle names nothing: the call
 * answers NVML_ERROR_INVALID_ARGUMENT instead of reading freed memory. A process holds a few
 * of each (one event set per waiting thread, two GPM samples per GPU), so a lookup walks them.
 */
#ifndef NVML_MOCK_HANDLES_H
#define NVML_MOCK_HANDLES_H

#include <pthread.h>

/* The first member of each registered object. */
struct mock_handle {
    struct mock_handle *next; /* in its registry; guarded by the registry's lock */
    unsigned int users;       /* calls holding the object; guarded by the registry's lock */
    int freeing;              /* its free has begun (unlisted); guarded by the registry's lock */
};

struct mock_handles {
    pthread_mutex_t lock;
    pthread_cond_t left; /* an object being freed lost its last user */
    struct mock_handle *head;
};

#define MOCK_HANDLES_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL}

/* Register a fresh object (zeroed handle part). */
void mock_handle_add(struct mock_handles *r, struct mock_handle *h);

/* A reference to the registered object at `p`, or NULL when `p` names none (never created,
 * freed, or being freed). Every reference taken is given back with mock_handle_drop. */
struct mock_handle *mock_handle_take(struct mock_handles *r, const void *p);
void mock_handle_drop(struct mock_handles *r, struct mock_handle *h);

/* Begin freeing the object at `p`: out of the list, so that no call can take it any more.
 * NULL when `p` names none (never created, or a free of it already began). */
struct mock_handle *mock_handle_unlist(struct mock_handles *r, const void *p);

/* Wait until no call holds `h` (unlisted). With `wake`, holders may be asleep where only
 * wake(arg) reaches them: it is called before each look, every millisecond until they have
 * left; without it, holders only come and go. */
void mock_handle_wait_unused(struct mock_handles *r, struct mock_handle *h, void (*wake)(void *), void *arg);

/* Around fork() (init.c's handlers): prepare takes the registry's lock; parent releases it;
 * child also forgets the references of threads fork did not copy and re-creates the
 * condition, which may count waiters the child does not have. */
void mock_handles_fork_prepare(struct mock_handles *r);
void mock_handles_fork_parent(struct mock_handles *r);
void mock_handles_fork_child(struct mock_handles *r);

#endif
