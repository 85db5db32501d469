/*
 * System Queries (nvml.h): driver, NVML and CUDA versions, the driver branch, a process's
 * name and the GPUs near a CPU. The Unit Queries (S-class units) and Excluded GPU Queries
 * chapters share this unit because they are the other queries that take no device handle:
 * each answers UNINITIALIZED before init and then reads the system, not a GPU.
 *
 * nvmlSystemGetTopologyGpuSet lists devices with the count/size protocol of the device
 * topology queries (mock_list_devices, device_topology.c).
 */
#include "mock.h"

#include <string.h>

#include <stdio.h>

MOCK_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    REQUIRE_LIVE();
    return mock_copy_string(version, length, mock_system.driver_version);
}

MOCK_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    REQUIRE_LIVE();
    return mock_copy_string(version, length, mock_system.nvml_version);
}

MOCK_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(cudaDriverVersion);
    *cudaDriverVersion = mock_system.cuda_driver_version;
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

MOCK_EXPORT nvmlReturn_t nvmlSystemGetDriverBranch(nvmlSystemDriverBranchInfo_t *branchInfo, unsigned int length)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(branchInfo);
    if (branchInfo->version != nvmlSystemDriverBranchInfo_v1) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (mock_driver_branch == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    char branch[32];
    snprintf(branch, sizeof(branch), "r%u_00", mock_driver_branch);
    unsigned int cap = length < sizeof(branchInfo->branch) ? length : (unsigned int)sizeof(branchInfo->branch);
    return mock_copy_string(branchInfo->branch, cap, branch);
}

MOCK_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(name);
    if (length == 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    /* The name as the process was invoked (argv[0]: "/usr/bin/python3", "./train"), which
     * is what a real driver reports and nvidia-smi prints; the kernel's short name where the
     * command line is empty (a kernel thread, a zombie). */
    char path[64];
    char comm[256];
    snprintf(path, sizeof(path), "/proc/%u/cmdline", pid);
    FILE *f = fopen(path, "re");
    size_t n = 0;
    if (f != NULL) {
        n = fread(comm, 1, sizeof(comm) - 1, f);
        fclose(f);
        comm[n] = '\0';
        n = strlen(comm); /* argv[0] ends at the first NUL */
    }
    if (n == 0) {
        snprintf(path, sizeof(path), "/proc/%u/comm", pid);
        f = fopen(path, "re");
        if (f == NULL) {
            return NVML_ERROR_NOT_FOUND;
        }
        n = fread(comm, 1, sizeof(comm) - 1, f);
        fclose(f);
        while (n > 0 && (comm[n - 1] == '\n' || comm[n - 1] == '\0')) {
            n--;
        }
        comm[n] = '\0';
    }
    return mock_copy_string(name, length, comm);
}

static int has_cpu(const struct nvmlDevice_st *self, const struct nvmlDevice_st *other, unsigned long cpu)
{
    (void)self;
    return (other->s.cpu_affinity[cpu / 64] >> (cpu % 64)) & 1u;
}

MOCK_EXPORT nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count,
                                                     nvmlDevice_t *deviceArray)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(count);
    if (cpuNumber >= STATE_MAX_CPUS) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return mock_list_devices(count, deviceArray, NULL, has_cpu, cpuNumber);
}

MOCK_EXPORT nvmlReturn_t nvmlUnitGetCount(unsigned int *unitCount)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(unitCount);
    *unitCount = 0; /* S-class units are not part of any modelled system */
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int *deviceCount)
{
    REQUIRE_LIVE();
    REQUIRE_ARG(deviceCount);
    *deviceCount = 0;
    return NVML_SUCCESS;
}
