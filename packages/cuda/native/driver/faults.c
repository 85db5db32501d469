/*
 * Faults reach CUDA: the live layer's faults, read through NVML on each call that works on a
 * GPU, fail that call, and every later one on a context of that GPU (a real driver's errors
 * of this kind are sticky: the process must start again). Other GPUs are untouched.
 *
 * | what NVML shows                                   | CUDA error                     | source |
 * | the GPU answers NVML_ERROR_GPU_IS_LOST (a lost     | CUDA_ERROR_LAUNCH_FAILED (719) | cuda.h: "an exception occurred on the device ... less common cases can be
 * |   GPU, Xid 79 "fallen off the bus")              |                                | system specific ... any further CUDA work will return the same error" |
 * | a new volatile uncorrectable (DBE) ECC error      | CUDA_ERROR_ECC_UNCORRECTABLE   | cuda.h: "an uncorrectable ECC error was detected during execution" |
 * |   since the driver started                        |   (214)                        | |
 * | compute mode PROHIBITED, or EXCLUSIVE_PROCESS     | CUDA_ERROR_DEVICE_UNAVAILABLE  | cuda.h: "devices are often unavailable due to use of
 * |   with another process on the GPU (at context    |   (46)                         | CU_COMPUTEMODE_EXCLUSIVE_PROCESS or CU_COMPUTEMODE_PROHIBITED" |
 * |   creation)                                      |                                | |
 */
#include <unistd.h>

#include "mock_cu.h"

CUresult mock_cu_device_admission(const struct mock_cu_device *d);

CUresult mock_cu_device_fault(const struct mock_cu_device *d)
{
    nvmlComputeMode_t mode;
    nvmlReturn_t r = mock_nvml.DeviceGetComputeMode(d->parent, &mode);
    if (r == NVML_ERROR_GPU_IS_LOST) {
        return CUDA_ERROR_LAUNCH_FAILED;
    }
    if (d->ecc_enabled) {
        unsigned long long dbe = 0;
        if (mock_nvml.DeviceGetTotalEccErrors(d->parent, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &dbe) ==
                NVML_SUCCESS &&
            dbe > d->ecc_uncorrected_at_init) {
            return CUDA_ERROR_ECC_UNCORRECTABLE;
        }
    }
    return CUDA_SUCCESS;
}

CUresult mock_cu_device_admission(const struct mock_cu_device *d)
{
    nvmlComputeMode_t mode = NVML_COMPUTEMODE_DEFAULT;
    if (mock_nvml.DeviceGetComputeMode(d->parent, &mode) != NVML_SUCCESS) {
        return CUDA_SUCCESS;
    }
    if (mode == NVML_COMPUTEMODE_PROHIBITED) {
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    if (mode != NVML_COMPUTEMODE_EXCLUSIVE_PROCESS) {
        return CUDA_SUCCESS;
    }
    nvmlProcessInfo_t procs[64];
    unsigned int n = 64;
    nvmlReturn_t r = mock_nvml.DeviceGetComputeRunningProcesses(d->nvml, &n, procs);
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
        return CUDA_ERROR_DEVICE_UNAVAILABLE; /* more than 64 processes: some are others */
    }
    if (r != NVML_SUCCESS) {
        return CUDA_SUCCESS;
    }
    unsigned int self = (unsigned int)getpid();
    for (unsigned int i = 0; i < n && i < 64; i++) {
        if (procs[i].pid != self) {
            return CUDA_ERROR_DEVICE_UNAVAILABLE;
        }
    }
    return CUDA_SUCCESS;
}
