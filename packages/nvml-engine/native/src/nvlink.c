/*
 * NvLink Methods (nvml.h): each link's state, version, capabilities, remote end (PCI info and
 * device type), error counters, and the NVLink info of the whole device.
 *
 * Aligned allocation (go-gpuallocator) reads each link's state and remote PCI address. The
 * state gives a GPU nvlink_count active links and the PCI address of each link's far end (the
 * last one repeated for later links): a modelled GPU at that address answers as a GPU peer,
 * any other address as an NVSwitch port. The unversioned remote-PCI symbol writes the older
 * 52-byte nvmlPciInfo_t (device_identity.c's layouts), as callers built on old headers pass.
 * The link number at each far end is derived from the board's links (mock_nvlink_derive).
 */
#include "mock.h"
#include "visible.h"

#include <string.h>

/* NVSwitch PCI ids reported for remote switch ports (device << 16 | vendor). */
#define NVSWITCH_PCI_DEVICE_ID 0x22A310DEu

unsigned int mock_nvlink_link_mbps(unsigned int version)
{
    switch (version) {
    case NVML_NVLINK_VERSION_1_0: return 20000;
    case NVML_NVLINK_VERSION_2_0:
    case NVML_NVLINK_VERSION_2_2:
    case NVML_NVLINK_VERSION_3_0:
    case NVML_NVLINK_VERSION_3_1: return 25000;
    case NVML_NVLINK_VERSION_4_0: return 26562;
    case NVML_NVLINK_VERSION_5_0: return 50000;
    case NVML_NVLINK_VERSION_6_0: return 100000;
    default: return 0;
    }
}

/* Validate a link index against the device's active links. */
static nvmlReturn_t check_link(const struct nvmlDevice_st *d, unsigned int link)
{
    if (d->s.nvlink_count == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (link >= d->s.nvlink_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(isActive);
    nvmlReturn_t rc = check_link(d, link);
    if (rc == NVML_SUCCESS) {
        *isActive = mock_nvlink_is_down(d, link) ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
    }
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(version);
    nvmlReturn_t rc = check_link(d, link);
    if (rc == NVML_SUCCESS) {
        *version = d->s.nvlink_version;
    }
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link,
                                                       nvmlNvLinkCapability_t capability, unsigned int *capResult)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(capResult);
    nvmlReturn_t rc = check_link(d, link);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    switch (capability) {
    case NVML_NVLINK_CAP_P2P_SUPPORTED:
    case NVML_NVLINK_CAP_P2P_ATOMICS:
    case NVML_NVLINK_CAP_VALID: *capResult = 1; break;
    case NVML_NVLINK_CAP_SYSMEM_ACCESS:
    case NVML_NVLINK_CAP_SYSMEM_ATOMICS:
    case NVML_NVLINK_CAP_SLI_BRIDGE: *capResult = 0; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

/* The remote end of `link`: the state's list, its last entry repeated for later links. */
static const struct state_pci_addr *remote_of(const struct nvmlDevice_st *d, unsigned int link)
{
    if (d->s.nvlink_remote_count == 0) {
        return NULL;
    }
    unsigned int i = link < d->s.nvlink_remote_count ? link : d->s.nvlink_remote_count - 1;
    return &d->s.nvlink_remote[i];
}

/*
 * The link number at the far end of each board GPU's links (`nvidia-smi nvlink -R`,
 * NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID), derived from the whole board (on the first query after
 * an init) so that it does
 * not depend on which GPUs this process sees:
 *  - a GPU peer: GPU A's k-th link to B ends at B's k-th link to A (link order on both
 *    sides); a link B does not return ends at the same number as A's.
 *  - any other device (an NVSwitch): its ports numbered in board order, GPU by GPU and link
 *    by link, as every GPU's links to that switch come in; so a switch's ports are distinct.
 */
static uint8_t remote_link_of[STATE_MAX_GPUS][STATE_MAX_NVLINKS];

static const struct state_pci_addr *board_remote(const struct state_gpu *g, unsigned int link)
{
    if (g->nvlink_remote_count == 0) {
        return NULL;
    }
    unsigned int i = link < g->nvlink_remote_count ? link : g->nvlink_remote_count - 1;
    return &g->nvlink_remote[i];
}

static int same_addr(const struct state_pci_addr *a, const struct state_pci_addr *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

/* How many of g's links before `link` end at `a`. */
static unsigned int links_before(const struct state_gpu *g, unsigned int link, const struct state_pci_addr *a)
{
    unsigned int n = 0;
    for (unsigned int l = 0; l < link && l < g->nvlink_count; l++) {
        const struct state_pci_addr *r = board_remote(g, l);
        n += r != NULL && same_addr(r, a);
    }
    return n;
}

/* The board index of the GPU at `a`, or -1 for any other device. */
static int board_gpu_at(const struct state *st, const struct state_pci_addr *a)
{
    for (unsigned int i = 0; i < st->gpu_count; i++) {
        if (same_addr(&st->gpu[i].pci, a)) {
            return (int)i;
        }
    }
    return -1;
}

/* GPU gi's link `link` ends at GPU pi: the link of pi that is its k-th back to gi, where
 * `link` is gi's k-th to pi; `link` itself when pi has no such link. */
static unsigned int peer_link(const struct state *st, unsigned int gi, unsigned int pi, unsigned int link)
{
    const struct state_gpu *g = &st->gpu[gi];
    const struct state_gpu *p = &st->gpu[pi];
    unsigned int k = links_before(g, link, &p->pci);
    for (unsigned int l = 0; l < p->nvlink_count; l++) {
        const struct state_pci_addr *back = board_remote(p, l);
        if (back != NULL && same_addr(back, &g->pci) && k-- == 0) {
            return l;
        }
    }
    return link;
}

static void mock_nvlink_derive(const struct state *st)
{
    /* the next free port of each switch seen so far (at most one per link of the board) */
    static struct {
        struct state_pci_addr addr;
        unsigned int next;
    } ports[STATE_MAX_GPUS * STATE_MAX_NVLINKS] MOCK_COLD(ports);
    unsigned int switches = 0;
    memset(remote_link_of, 0, sizeof(remote_link_of));
    for (unsigned int gi = 0; gi < st->gpu_count && gi < STATE_MAX_GPUS; gi++) {
        const struct state_gpu *g = &st->gpu[gi];
        for (unsigned int l = 0; l < g->nvlink_count && l < STATE_MAX_NVLINKS; l++) {
            const struct state_pci_addr *r = board_remote(g, l);
            if (r == NULL) {
                continue;
            }
            int pi = board_gpu_at(st, r);
            unsigned int v;
            if (pi >= 0 && (unsigned int)pi != gi) {
                v = peer_link(st, gi, (unsigned int)pi, l);
            } else {
                unsigned int s = 0;
                while (s < switches && !same_addr(&ports[s].addr, r)) {
                    s++;
                }
                if (s == switches) {
                    ports[switches].addr = *r;
                    ports[switches].next = 0;
                    switches++;
                }
                v = ports[s].next++;
            }
            remote_link_of[gi][l] = (uint8_t)(v < 255u ? v : 255u);
        }
    }
}

/* Boards published, and the one remote_link_of was derived for (derived == published: current). */
static atomic_uint published_board;
static atomic_uint derived_board;

void mock_nvlink_invalidate(void)
{
    atomic_fetch_add_explicit(&published_board, 1u, memory_order_release);
}

static void derive_locked(const struct state *st, void *arg)
{
    (void)arg;
    unsigned int want = atomic_load_explicit(&published_board, memory_order_acquire);
    if (atomic_load_explicit(&derived_board, memory_order_relaxed) != want) {
        mock_nvlink_derive(st);
        atomic_store_explicit(&derived_board, want, memory_order_release);
    }
}

nvmlReturn_t mock_nvlink_remote_link(const struct nvmlDevice_st *d, unsigned int link, unsigned int *out)
{
    nvmlReturn_t rc = check_link(d, link);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (d->s.nvlink_remote_count == 0 || d->board >= STATE_MAX_GPUS) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (atomic_load_explicit(&derived_board, memory_order_acquire) !=
            atomic_load_explicit(&published_board, memory_order_acquire) &&
        mock_with_board_state(derive_locked, NULL) != 0) {
        return NVML_ERROR_UNINITIALIZED; /* shut down meanwhile */
    }
    *out = remote_link_of[d->board][link];
    return NVML_SUCCESS;
}

static const struct nvmlDevice_st *gpu_at(const struct state_pci_addr *a)
{
    for (unsigned int i = 0; i < mock_device_count; i++) {
        if (memcmp(&mock_devices[i].s.pci, a, sizeof(*a)) == 0) {
            return &mock_devices[i];
        }
    }
    return NULL;
}

static nvmlReturn_t remote_pci(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(pci);
    nvmlReturn_t rc = check_link(d, link);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    const struct state_pci_addr *remote = remote_of(d, link);
    if (remote == NULL) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    const struct nvmlDevice_st *peer = gpu_at(remote);
    if (peer != NULL) {
        mock_fill_pci_v3(peer, pci);
    } else {
        /* A GPU outside this process's view (NVIDIA_VISIBLE_DEVICES) keeps its address,
         * so link counts between visible GPUs stay those of the node, but is not described
         * as a GPU (nor as an NVSwitch): no device id. */
        mock_fill_pci_addr(remote, pci);
        pci->pciDeviceId = mock_board_has_gpu(remote) ? 0 : NVSWITCH_PCI_DEVICE_ID;
    }
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    return remote_pci(device, link, pci);
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    /* The unversioned symbol predates the 68-byte layout. A NULL `pci` goes through to
     * remote_pci, so it is refused in the same order as by the _v2 symbol. */
    nvmlPciInfo_t full;
    nvmlReturn_t rc = remote_pci(device, link, pci != NULL ? &full : NULL);
    if (rc == NVML_SUCCESS) {
        mock_pci_to_v2(&full, pci);
    }
    return rc;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                             nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(pNvLinkDeviceType);
    nvmlReturn_t rc = check_link(d, link);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    const struct state_pci_addr *remote = remote_of(d, link);
    if (remote == NULL) {
        *pNvLinkDeviceType = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    } else {
        *pNvLinkDeviceType = gpu_at(remote) != NULL      ? NVML_NVLINK_DEVICE_TYPE_GPU
                             : mock_board_has_gpu(remote) ? NVML_NVLINK_DEVICE_TYPE_UNKNOWN /* outside the view */
                                                          : NVML_NVLINK_DEVICE_TYPE_SWITCH;
    }
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                                         nvmlNvLinkErrorCounter_t counter,
                                                         unsigned long long *counterValue)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(counterValue);
    nvmlReturn_t rc = check_link(d, link);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if ((unsigned int)counter >= NVML_NVLINK_ERROR_COUNT) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *counterValue = mock_nvlink_errors(d, link, counter);
    return NVML_SUCCESS;
}

MOCK_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkInfo(nvmlDevice_t device, nvmlNvLinkInfo_t *info)
{
    GET_DEVICE(device, d);
    REQUIRE_ARG(info);
    if (info->version != nvmlNvLinkInfo_v1 && info->version != nvmlNvLinkInfo_v2) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (d->s.nvlink_count == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (info->version == nvmlNvLinkInfo_v1) {
        nvmlNvLinkInfo_v1_t *v1 = (nvmlNvLinkInfo_v1_t *)(void *)info;
        v1->isNvleEnabled = 0;
        return NVML_SUCCESS;
    }
    unsigned int version = info->version;
    memset(info, 0, sizeof(*info));
    info->version = version;
    info->isNvleEnabled = 0; /* NVLink encryption off, no firmware entries reported */
    return NVML_SUCCESS;
}
