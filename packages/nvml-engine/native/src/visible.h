/*
 * Visible devices: the GPUs NVML enumerates in this process, chosen by
 * NVIDIA_VISIBLE_DEVICES the way the NVIDIA container toolkit chooses the GPUs of a
 * container (the engine README, "Visible devices"). The view is taken once per init cycle
 * from the rendered state's board GPUs; view index i is board GPU board[i], in board order.
 *
 * The selection is a function of the value, the board and the node's MIG layout (no
 * globals written, no allocation) so that the init fuzzer reaches it and a test can name
 * every rule.
 */
#ifndef NVML_MOCK_VISIBLE_H
#define NVML_MOCK_VISIBLE_H

#include <stddef.h>
#include <stdint.h>

#include "state.h"

#define ENV_VISIBLE_DEVICES "NVIDIA_VISIBLE_DEVICES"
/* The mock's own twin, read first when set, same grammar: the NRI plugin sets it where the
 * runtime's view differs from what the toolkit's variable says (a driver component given
 * the driver surfaces with the toolkit's "void" sees every GPU, as real NVML ignores
 * NVIDIA_VISIBLE_DEVICES). */
#define ENV_MOCK_VISIBLE_DEVICES "MOCK_NVML_VISIBLE_DEVICES"

/* The variable the view follows: ENV_MOCK_VISIBLE_DEVICES when set, else ENV_VISIBLE_DEVICES. */
const char *mock_visible_env(void);

/* No view index for a board GPU outside the view. */
#define VISIBLE_NONE 0xffu

/* GPU-instance ids a MIG device can have (0..13) and compute-instance ids within one (0..7). */
#define VISIBLE_MIG_GIS 14u
#define VISIBLE_MIG_CIS 8u

struct visible_view {
    unsigned int count;              /* GPUs in the view */
    uint8_t board[STATE_MAX_GPUS];   /* view index -> board index */
    uint8_t view[STATE_MAX_GPUS];    /* board index -> view index, or VISIBLE_NONE */
    /* A GPU in the view only through MIG- entries shows only those MIG devices: mig_only[b]
     * is set and mig_allowed[b][gi] has bit ci set for each (board index b). */
    uint8_t mig_only[STATE_MAX_GPUS];
    uint8_t mig_allowed[STATE_MAX_GPUS][VISIBLE_MIG_GIS];
};

/*
 * Select the board GPUs of `st` that `value` names (NULL: the variable is unset, every
 * GPU). `live` gives each board GPU's live record (NULL for a GPU without one, or NULL
 * altogether): a "<gpu>:<mig>" entry is resolved against the MIG layout read through it.
 * Returns 0 with `out` filled, or -1 with `out` holding every GPU and a message naming the
 * offending entry in `why` (the toolkit's "<entry>: unknown device").
 */
int mock_visible_select(const char *value, const struct state *st, const unsigned char *const *live,
                        struct visible_view *out, char *why, size_t why_len);

/* The board of the current init cycle, for the callers that must tell a GPU outside the
 * view from a device that is no GPU at all (NVLink peers). Written at init only. */
extern unsigned int mock_board_count;
extern struct state_pci_addr mock_board_pci[STATE_MAX_GPUS];
/* Board index -> view index of the current init cycle, or VISIBLE_NONE (events carry
 * board indices). */
extern uint8_t mock_view_of_board[STATE_MAX_GPUS];

/* The MIG devices of the current init cycle's view, by board index (see visible_view). */
extern uint8_t mock_mig_only[STATE_MAX_GPUS];
extern uint8_t mock_mig_allowed[STATE_MAX_GPUS][VISIBLE_MIG_GIS];

/* Whether the MIG device (gi, ci) of board GPU `board` is in the view. */
int mock_mig_visible(unsigned int board, unsigned int gi, unsigned int ci);

/* Whether `a` is the PCI address of a board GPU (inside the view or not). */
int mock_board_has_gpu(const struct state_pci_addr *a);

#endif
