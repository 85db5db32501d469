/*
 * Device Queries (nvml.h), the fabric part: GPU fabric (NVLink domain / ComputeDomain)
 * identity and health.
 *
 * The v1 symbol and the versioned ...V symbol must agree on state, status, clique and
 * cluster UUID, because the DRA driver reads v1 and go-nvlib may read V. ...V writes the
 * v2 (36-byte) or v3 (40-byte) layout chosen by the caller's version word: nvidia-ml-py
 * sends v2, code built on nvml.h sends v3.
 */
#include "mock.h"

#include <string.h>

_Static_assert(sizeof(nvmlGpuFabricInfo_t) == 28, "nvmlGpuFabricInfo_t (v1) is 28 bytes");
_Static_assert(sizeof(nvmlGpuFabricInfo_v2_t) == 36, "nvmlGpuFabricInfo_v2_t is 36 bytes");
_Static_assert(sizeof(nvmlGpuFabricInfo_v3_t) == 40, "nvmlGpuFabricInfo_v3_t is 40 bytes");

#define HEALTH_FIELD(mask, name) \
    (((mask) >> NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_##name) & NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_##name)

unsigned char mock_fabric_health_summary(unsigned int mask)
{
    if (mask == 0) {
        return NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED;
    }
    int degraded = HEALTH_FIELD(mask, DEGRADED_BW) == NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE;
    int recovery = HEALTH_FIELD(mask, ROUTE_RECOVERY) == NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_TRUE;
    int unhealthy = HEALTH_FIELD(mask, ROUTE_UNHEALTHY) == NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE;
    int timeout = HEALTH_FIELD(mask, ACCESS_TIMEOUT_RECOVERY) ==
                  NVML_GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_TRUE;
    unsigned int config = HEALTH_FIELD(mask, INCORRECT_CONFIGURATION);
    int misconfigured = config != NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NOT_SUPPORTED &&
                        config != NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE;
    if (recovery || unhealthy || timeout || misconfigured) {
        return NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY;
    }
    if (degraded) {
        return NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY;
    }
    return NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(gpuFabricInfo);
    if (!d->s.fabric_attached) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    memcpy(gpuFabricInfo->clusterUuid, d->s.fabric_cluster_uuid, NVML_GPU_FABRIC_UUID_LEN);
    gpuFabricInfo->status = NVML_SUCCESS;
    gpuFabricInfo->cliqueId = d->s.fabric_clique_id;
    gpuFabricInfo->state = (nvmlGpuFabricState_t)live_fabric_state(d);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(gpuFabricInfo);
    unsigned int version = gpuFabricInfo->version;
    if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (!d->s.fabric_attached) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    /* v2 is a prefix of v3: write the common fields through the v2 layout. */
    nvmlGpuFabricInfo_v2_t *v2 = (nvmlGpuFabricInfo_v2_t *)(void *)gpuFabricInfo;
    memcpy(v2->clusterUuid, d->s.fabric_cluster_uuid, NVML_GPU_FABRIC_UUID_LEN);
    v2->status = NVML_SUCCESS;
    v2->cliqueId = d->s.fabric_clique_id;
    v2->state = (nvmlGpuFabricState_t)live_fabric_state(d);
    v2->healthMask = live_fabric_health_mask(d);
    if (version == nvmlGpuFabricInfo_v3) {
        gpuFabricInfo->healthSummary = mock_fabric_health_summary(live_fabric_health_mask(d));
    }
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo_v4(nvmlDevice_t device, nvmlGpuFabricInfo_v4_t *gpuFabricInfo)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(gpuFabricInfo);
    if (!d->s.fabric_attached) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    memset(gpuFabricInfo, 0, sizeof(*gpuFabricInfo));
    memcpy(gpuFabricInfo->clusterUuid, d->s.fabric_cluster_uuid, NVML_GPU_FABRIC_UUID_LEN);
    gpuFabricInfo->status = NVML_SUCCESS;
    /* The single clique of format-1 state is the unicast clique the older layouts report. */
    gpuFabricInfo->cliques[0].type = NVML_GPU_FABRIC_CLIQUE_TYPE_UNICAST_POINTER;
    gpuFabricInfo->cliques[0].id = d->s.fabric_clique_id;
    gpuFabricInfo->numCliques = 1;
    gpuFabricInfo->state = (nvmlGpuFabricState_t)live_fabric_state(d);
    gpuFabricInfo->healthMask = live_fabric_health_mask(d);
    gpuFabricInfo->healthSummary = mock_fabric_health_summary(live_fabric_health_mask(d));
    return NVML_SUCCESS;
}
