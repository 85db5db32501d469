/*
 * What both C benchmarks (nvml_bench.c, floor_bench.c) measure against and with: the empty
 * call, a call through a pointer to a function that does nothing, which the compiler cannot
 * see through (every figure is given beside it, measured in the same run); the monotonic
 * clock in nanoseconds; and the comparison qsort needs for medians and percentiles.
 */
#ifndef NVML_MOCK_BENCH_BASELINE_H
#define NVML_MOCK_BENCH_BASELINE_H

#include <time.h>

#include <nvml.h>

typedef nvmlReturn_t (*empty_fn)(nvmlDevice_t, void *);

__attribute__((noinline)) static nvmlReturn_t empty_call(nvmlDevice_t device, void *out)
{
    __asm__ volatile("" : : "r"(device), "r"(out) : "memory");
    return NVML_SUCCESS;
}
static empty_fn volatile empty_ptr = empty_call;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
