/*
 * The registries of handed-out objects (handles.h; answers no nvml.h function).
 */
#include "handles.h"

#include <string.h>
#include <time.h>

void mock_handle_add(struct mock_handles *r, struct mock_handle *h)
{
    pthread_mutex_lock(&r->lock);
    h->next = r->head;
    r->head = h;
    pthread_mutex_unlock(&r->lock);
}

struct mock_handle *mock_handle_take(struct mock_handles *r, const void *p)
{
    if (p == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&r->lock);
    struct mock_handle *h = r->head;
    while (h != NULL && (const void *)h != p) {
        h = h->next;
    }
    if (h != NULL) {
        h->users++;
    }
    pthread_mutex_unlock(&r->lock);
    return h;
}

void mock_handle_drop(struct mock_handles *r, struct mock_handle *h)
{
    pthread_mutex_lock(&r->lock);
    if (--h->users == 0 && h->freeing) {
        pthread_cond_broadcast(&r->left);
    }
    pthread_mutex_unlock(&r->lock);
}

struct mock_handle *mock_handle_unlist(struct mock_handles *r, const void *p)
{
    if (p == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&r->lock);
    struct mock_handle **link = &r->head;
    while (*link != NULL && (const void *)*link != p) {
        link = &(*link)->next;
    }
    struct mock_handle *h = *link;
    if (h != NULL) {
        *link = h->next;
        h->freeing = 1;
    }
    pthread_mutex_unlock(&r->lock);
    return h;
}

void mock_handle_wait_unused(struct mock_handles *r, struct mock_handle *h, void (*wake)(void *), void *arg)
{
    pthread_mutex_lock(&r->lock);
    while (h->users > 0) {
        if (wake == NULL) {
            pthread_cond_wait(&r->left, &r->lock);
            continue;
        }
        /* a holder between its last look and its sleep misses a wake: repeat it */
        wake(arg);
        struct timespec retry;
        clock_gettime(CLOCK_REALTIME, &retry); /* the condition keeps the default clock */
        retry.tv_nsec += 1000000L;
        if (retry.tv_nsec >= 1000000000L) {
            retry.tv_sec += 1;
            retry.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&r->left, &r->lock, &retry);
    }
    pthread_mutex_unlock(&r->lock);
}

void mock_handles_fork_prepare(struct mock_handles *r)
{
    pthread_mutex_lock(&r->lock);
}

void mock_handles_fork_parent(struct mock_handles *r)
{
    pthread_mutex_unlock(&r->lock);
}

void mock_handles_fork_child(struct mock_handles *r)
{
    for (struct mock_handle *h = r->head; h != NULL; h = h->next) {
        h->users = 0;
    }
    memset(&r->left, 0, sizeof(r->left));
    pthread_cond_init(&r->left, NULL);
    pthread_mutex_unlock(&r->lock);
}
