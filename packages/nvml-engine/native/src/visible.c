/*
 * Visible devices (visible.h): NVIDIA_VISIBLE_DEVICES read as the NVIDIA container
 * toolkit reads it, selecting the board GPUs this process enumerates.
 * Answers no nvml.h function; init.c asks it once per init cycle, and every enumerating
 * call follows the view it makes.
 *
 * MOCK_NVML_VISIBLE_DEVICES, where set, is read instead (see visible.h).
 *
 * The rules (the engine README names the toolkit's behaviour for each):
 *   unset                        every GPU (the mock's ambient default)
 *   "", "void", "none"           no GPU (the whole value, spaces around it ignored)
 *   a comma list of entries      the union, in board order, duplicates once; empty entries
 *                                are skipped and "all" (any case) anywhere means every GPU
 *     <decimal index>            the board GPU of that index
 *     GPU-<uuid>                 the board GPU of that UUID (any case), or of the one UUID
 *                                it begins (a unique prefix)
 *     [domain:]bus:device.fn     the board GPU at that PCI address
 *     MIG-<uuid>                 that MIG device: its parent GPU, showing only the MIG
 *                                devices so named (all of them if the GPU is named too)
 *     <gpu>:<mig>                MIG device <mig> of board GPU <gpu>, counted as the host
 *                                enumerates them (GetMigDeviceHandleByIndex): selected as its
 *                                MIG- UUID is; an index past that GPU's MIG devices (or MIG off)
 *                                names no device
 * Anything else names no device: the toolkit refuses to start such a container
 * ("<entry>: unknown device"), so the selection fails and init fails with that reason.
 */
#include "visible.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mig.h"

#define SHOWN 80 /* characters of an offending entry that a message repeats */

unsigned int mock_board_count;
struct state_pci_addr mock_board_pci[STATE_MAX_GPUS];
uint8_t mock_view_of_board[STATE_MAX_GPUS];
uint8_t mock_mig_only[STATE_MAX_GPUS];
uint8_t mock_mig_allowed[STATE_MAX_GPUS][VISIBLE_MIG_GIS];

int mock_mig_visible(unsigned int board, unsigned int gi, unsigned int ci)
{
    if (board >= STATE_MAX_GPUS || !mock_mig_only[board]) {
        return 1;
    }
    return gi < VISIBLE_MIG_GIS && ci < VISIBLE_MIG_CIS && ((mock_mig_allowed[board][gi] >> ci) & 1u);
}

int mock_board_has_gpu(const struct state_pci_addr *a)
{
    for (unsigned int i = 0; i < mock_board_count; i++) {
        if (memcmp(&mock_board_pci[i], a, sizeof(*a)) == 0) {
            return 1;
        }
    }
    return 0;
}

static int blank(char c)
{
    return c == ' ' || c == '\t';
}

static void trim(const char **s, size_t *n)
{
    while (*n > 0 && blank(**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && blank((*s)[*n - 1])) {
        (*n)--;
    }
}

static int is(const char *s, size_t n, const char *word, int any_case)
{
    size_t w = strlen(word);
    return n == w && (any_case ? strncasecmp(s, word, w) == 0 : strncmp(s, word, w) == 0);
}

static int begins(const char *s, size_t n, const char *head)
{
    size_t h = strlen(head);
    return n > h && strncasecmp(s, head, h) == 0;
}

static int digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return 0;
        }
    }
    return n > 0;
}

/* A MIG- entry: the MIG device of that UUID selects its parent GPU, which then shows only the
 * MIG devices so named (unless the GPU is also named whole). A MIG device's UUID follows from
 * its GPU's UUID and its instance ids, so it is found without the layout: a device of that
 * name that does not exist now is simply absent from the view until it is created. */
static int select_mig(const char *tok, size_t n, const struct state *st, uint64_t *chosen, uint64_t *by_mig,
                      struct visible_view *out, char *why, size_t why_len)
{
    int shown = (int)(n < SHOWN ? n : SHOWN);
    for (unsigned int i = 0; i < st->gpu_count; i++) {
        if (!st->gpu[i].mig_capable) {
            continue;
        }
        for (unsigned int gi = 0; gi < VISIBLE_MIG_GIS; gi++) {
            for (unsigned int ci = 0; ci < VISIBLE_MIG_CIS; ci++) {
                char u[48];
                mock_mig_uuid(st->gpu[i].uuid, gi, ci, u, sizeof(u));
                if (strlen(u) == n && strncasecmp(u, tok, n) == 0) {
                    *chosen |= 1ull << i;
                    *by_mig |= 1ull << i;
                    out->mig_allowed[i][gi] |= (uint8_t)(1u << ci);
                    return 0;
                }
            }
        }
    }
    snprintf(why, why_len, "%.*s: unknown device (no MIG device of the node has this UUID)", shown, tok);
    return -1;
}

/* Parse a run of decimal digits, saturating past `cap` (any index that large names nothing). */
static unsigned long long decimal(const char *s, size_t n, unsigned long long cap)
{
    unsigned long long v = 0;
    for (size_t i = 0; i < n && v <= cap; i++) {
        v = v * 10u + (unsigned long long)(s[i] - '0');
    }
    return v;
}

/* A "<gpu>:<mig>" entry names a MIG device by position, as libnvidia-container resolves it
 * at container start: MIG device <mig> of board GPU <gpu> in the node's MIG layout now. It
 * then selects as that device's MIG- UUID does; a later change of the layout does not move
 * the view of a process already running (the toolkit too resolves it once). */
static int select_mig_index(const char *tok, size_t n, const char *colon, const struct state *st,
                            const unsigned char *const *live, uint64_t *chosen, uint64_t *by_mig,
                            struct visible_view *out, char *why, size_t why_len)
{
    int shown = (int)(n < SHOWN ? n : SHOWN);
    size_t gpu_len = (size_t)(colon - tok);
    unsigned long long gpu = decimal(tok, gpu_len, STATE_MAX_GPUS);
    unsigned long long mig = decimal(colon + 1, n - gpu_len - 1, VISIBLE_MIG_GIS * VISIBLE_MIG_CIS);
    if (gpu >= st->gpu_count) {
        snprintf(why, why_len, "%.*s: unknown device (the node has %u GPUs)", shown, tok, (unsigned)st->gpu_count);
        return -1;
    }
    unsigned int gi = 0;
    unsigned int ci = 0;
    const unsigned char *rec = live != NULL ? live[gpu] : NULL;
    if (mig > VISIBLE_MIG_GIS * VISIBLE_MIG_CIS ||
        mock_mig_at(st, rec, (unsigned int)gpu, (unsigned int)mig, &gi, &ci) != 0 || gi >= VISIBLE_MIG_GIS ||
        ci >= VISIBLE_MIG_CIS) {
        int gpu_shown = (int)(gpu_len < SHOWN ? gpu_len : SHOWN);
        int mig_shown = (int)(n - gpu_len - 1 < SHOWN ? n - gpu_len - 1 : SHOWN);
        snprintf(why, why_len, "%.*s: unknown device (GPU %.*s has no MIG device %.*s)", shown, tok, gpu_shown, tok,
                 mig_shown, colon + 1);
        return -1;
    }
    *chosen |= 1ull << gpu;
    *by_mig |= 1ull << gpu;
    out->mig_allowed[gpu][gi] |= (uint8_t)(1u << ci);
    return 0;
}

/* A GPU- entry: the GPU of that full UUID, else the one GPU whose UUID begins with it. */
static int select_uuid(const char *tok, size_t n, const struct state *st, uint64_t *chosen, char *why, size_t why_len)
{
    int shown = (int)(n < SHOWN ? n : SHOWN);
    unsigned int found = 0;
    unsigned int first = 0;
    unsigned int second = 0;
    for (unsigned int i = 0; i < st->gpu_count; i++) {
        const char *u = st->gpu[i].uuid;
        if (strlen(u) == n && strncasecmp(u, tok, n) == 0) {
            *chosen |= 1ull << i;
            return 0;
        }
        if (strlen(u) > n && strncasecmp(u, tok, n) == 0) {
            if (found == 0) {
                first = i;
            } else if (found == 1) {
                second = i;
            }
            found++;
        }
    }
    if (found == 1) {
        *chosen |= 1ull << first;
        return 0;
    }
    if (found > 1) {
        snprintf(why, why_len, "%.*s: ambiguous GPU UUID prefix (%u GPUs match, %s and %s)", shown, tok, found,
                 st->gpu[first].uuid, st->gpu[second].uuid);
        return -1;
    }
    snprintf(why, why_len, "%.*s: unknown device (no GPU of the node has this UUID)", shown, tok);
    return -1;
}

static int select_entry(const char *tok, size_t n, const struct state *st, const unsigned char *const *live,
                        uint64_t *chosen, uint64_t *by_mig, struct visible_view *out, char *why, size_t why_len)
{
    int shown = (int)(n < SHOWN ? n : SHOWN);
    if (begins(tok, n, "GPU-")) {
        return select_uuid(tok, n, st, chosen, why, why_len);
    }
    if (begins(tok, n, "MIG-")) {
        return select_mig(tok, n, st, chosen, by_mig, out, why, why_len);
    }
    if (digits(tok, n)) {
        unsigned long long idx = 0;
        for (size_t i = 0; i < n && idx < STATE_MAX_GPUS; i++) {
            idx = idx * 10u + (unsigned long long)(tok[i] - '0');
        }
        if (idx < st->gpu_count) {
            *chosen |= 1ull << idx;
            return 0;
        }
        if (st->gpu_count == 0) {
            snprintf(why, why_len, "%.*s: unknown device (the node has no GPUs)", shown, tok);
        } else {
            snprintf(why, why_len, "%.*s: unknown device (the node has %u GPUs, indices 0-%u)", shown, tok,
                     (unsigned)st->gpu_count, (unsigned)st->gpu_count - 1u);
        }
        return -1;
    }
    const char *colon = memchr(tok, ':', n);
    if (colon != NULL && memchr(tok, '.', n) == NULL && digits(tok, (size_t)(colon - tok)) &&
        digits(colon + 1, n - (size_t)(colon - tok) - 1)) {
        return select_mig_index(tok, n, colon, st, live, chosen, by_mig, out, why, why_len);
    }
    struct state_pci_addr a;
    if (colon != NULL && state_parse_bus_id(tok, n, &a) == 0) {
        for (unsigned int i = 0; i < st->gpu_count; i++) {
            if (memcmp(&st->gpu[i].pci, &a, sizeof(a)) == 0) {
                *chosen |= 1ull << i;
                return 0;
            }
        }
        snprintf(why, why_len, "%.*s: unknown device (no GPU of the node is at this PCI address)", shown, tok);
        return -1;
    }
    snprintf(why, why_len, "%.*s: unknown device (not an index, GPU- UUID or PCI bus id)", shown, tok);
    return -1;
}

static void fill(struct visible_view *out, const struct state *st, uint64_t chosen)
{
    memset(out->mig_only, 0, sizeof(out->mig_only));
    memset(out->mig_allowed, 0, sizeof(out->mig_allowed));
    memset(out->view, VISIBLE_NONE, sizeof(out->view));
    out->count = 0;
    for (unsigned int i = 0; i < st->gpu_count; i++) {
        if ((chosen >> i) & 1u) {
            out->view[i] = (uint8_t)out->count;
            out->board[out->count++] = (uint8_t)i;
        }
    }
}

const char *mock_visible_env(void)
{
    return getenv(ENV_MOCK_VISIBLE_DEVICES) != NULL ? ENV_MOCK_VISIBLE_DEVICES : ENV_VISIBLE_DEVICES;
}


int mock_visible_select(const char *value, const struct state *st, const unsigned char *const *live,
                        struct visible_view *out, char *why, size_t why_len)
{
    _Static_assert(STATE_MAX_GPUS <= 64 && STATE_MAX_GPUS < VISIBLE_NONE, "one bit and one byte per GPU");
    uint64_t every = st->gpu_count >= 64 ? ~0ull : (1ull << st->gpu_count) - 1u;
    fill(out, st, every);
    if (value == NULL) {
        return 0;
    }
    const char *s = value;
    size_t n = strlen(value);
    trim(&s, &n);
    if (n == 0 || is(s, n, "void", 0) || is(s, n, "none", 0)) {
        fill(out, st, 0);
        return 0;
    }
    uint64_t chosen = 0;
    uint64_t whole = 0;  /* GPUs named as GPUs */
    uint64_t by_mig = 0; /* GPUs named through their MIG devices */
    struct visible_view mig;
    memset(&mig, 0, sizeof(mig));
    for (;;) {
        const char *comma = memchr(s, ',', n);
        size_t len = comma != NULL ? (size_t)(comma - s) : n;
        const char *tok = s;
        size_t tok_len = len;
        trim(&tok, &tok_len);
        if (is(tok, tok_len, "all", 1)) {
            return 0; /* the view of every GPU is already in place */
        }
        uint64_t picked = 0;
        uint64_t through_mig = 0;
        if (tok_len > 0 && select_entry(tok, tok_len, st, live, &picked, &through_mig, &mig, why, why_len) != 0) {
            return -1;
        }
        chosen |= picked;
        by_mig |= through_mig;
        if (through_mig == 0) {
            whole |= picked;
        }
        if (comma == NULL) {
            break;
        }
        s = comma + 1;
        n -= len + 1;
    }
    fill(out, st, chosen);
    for (unsigned int i = 0; i < st->gpu_count; i++) {
        if (((by_mig & ~whole) >> i) & 1u) {
            out->mig_only[i] = 1;
            memcpy(out->mig_allowed[i], mig.mig_allowed[i], sizeof(out->mig_allowed[i]));
        }
    }
    return 0;
}
