/*
 * The rendered GPU state (STATE-FORMAT.md) as plain C data, and its parser.
 *
 * The parser is kept apart from the NVML entry points so it can be fuzzed on its own:
 * state_parse() takes a byte buffer and a caller-owned result, allocates nothing and
 * touches no global, so a libFuzzer harness can call it millions of times.
 */
#ifndef NVML_MOCK_STATE_H
#define NVML_MOCK_STATE_H

#include <stddef.h>
#include <stdint.h>

#define STATE_MAGIC "nvml-mock-state 1"
#define STATE_MAX_BYTES (1u << 20)
#define STATE_MAX_LINE 1023
#define STATE_MAX_KEY 63
#define STATE_MAX_VALUE 255
#define STATE_MAX_GPUS 64
#define STATE_MAX_NVLINKS 18
#define STATE_MAX_CPUS 1024
#define STATE_CPU_WORDS (STATE_MAX_CPUS / 64)
#define STATE_ERR_LEN 256

struct state_pci_addr {
    uint32_t domain;
    uint32_t bus;
    uint32_t device;
    uint32_t function;
};

struct state_system {
    char driver_version[80];
    char nvml_version[80];
    int32_t cuda_driver_version;
    uint32_t device_count;
    char node_name[256];
    char profile[64];
};

struct state_gpu {
    /* identity */
    char name[96];
    char uuid[80];
    char serial[30];
    char board_part_number[80];
    uint32_t board_id;
    uint32_t minor_number;
    int32_t brand;
    uint32_t architecture;
    int32_t cuda_cc_major;
    int32_t cuda_cc_minor;
    uint32_t multi_gpu_board;
    uint32_t module_id;
    char vbios_version[32];
    char inforom_image_version[16];
    char inforom_oem[16];
    char inforom_ecc[16];
    char inforom_power[16];
    int32_t virtualization_mode;
    int32_t addressing_mode;
    uint32_t multiprocessor_count;
    uint32_t num_gpu_cores;
    uint64_t pdi;
    uint64_t bbx_flush_time_us;
    uint32_t bbx_flush_duration_us;
    /* PCI */
    struct state_pci_addr pci;
    uint32_t pci_device_id;
    uint32_t pci_subsystem_id;
    uint32_t pcie_max_gen;
    uint32_t pcie_max_width;
    uint32_t pcie_cur_gen;
    uint32_t pcie_cur_width;
    uint32_t pcie_replay_counter;
    /* memory */
    uint64_t memory_total_bytes;
    uint64_t memory_reserved_bytes;
    uint64_t memory_used_bytes;
    uint32_t memory_bus_width;
    uint64_t bar1_total_bytes;
    uint64_t bar1_used_bytes;
    int32_t numa_node;
    uint64_t cpu_affinity[STATE_CPU_WORDS];
    /* modes */
    uint32_t persistence_mode;
    uint32_t display_mode;
    uint32_t display_active;
    int32_t compute_mode;
    /* clocks (MHz) */
    uint32_t clock_graphics_mhz;
    uint32_t clock_sm_mhz;
    uint32_t clock_mem_mhz;
    uint32_t clock_video_mhz;
    uint32_t max_clock_graphics_mhz;
    uint32_t max_clock_sm_mhz;
    uint32_t max_clock_mem_mhz;
    uint32_t max_clock_video_mhz;
    uint32_t app_clock_graphics_mhz;
    uint32_t app_clock_mem_mhz;
    uint64_t clocks_event_reasons;
    /* power (mW) */
    uint32_t power_usage_mw;
    uint32_t power_limit_mw;
    uint32_t power_default_limit_mw;
    uint32_t power_min_limit_mw;
    uint32_t power_max_limit_mw;
    uint64_t energy_mj;
    uint32_t power_average_mw;
    uint32_t memory_power_average_mw;
    uint32_t module_power_average_mw;
    uint32_t module_power_usage_mw;
    uint32_t module_power_limit_mw;
    uint32_t module_power_default_limit_mw;
    uint32_t module_power_min_limit_mw;
    uint32_t module_power_max_limit_mw;
    /* thermal */
    uint32_t temperature_c;
    uint32_t temp_shutdown_c;
    uint32_t temp_slowdown_c;
    uint32_t temp_gpu_max_c;
    uint32_t temp_mem_max_c;
    uint32_t margin_temperature_supported;
    uint32_t memory_temperature_c;
    uint32_t num_fans;
    uint32_t fan_speed_pct;
    /* utilization */
    uint32_t util_gpu_pct;
    uint32_t util_mem_pct;
    uint32_t util_encoder_pct;
    uint32_t util_decoder_pct;
    int32_t pstate;
    /* ECC */
    uint32_t ecc_enabled;
    uint32_t ecc_supported;
    uint64_t ecc_volatile_corrected;
    uint64_t ecc_volatile_uncorrected;
    uint64_t ecc_aggregate_corrected;
    uint64_t ecc_aggregate_uncorrected;
    uint32_t retired_pages_sbe;
    uint32_t retired_pages_dbe;
    uint32_t retired_pages_pending;
    uint32_t retired_pages_supported;
    uint32_t remapped_rows_correctable;
    uint32_t remapped_rows_uncorrectable;
    uint32_t remapped_rows_pending;
    uint32_t remapped_rows_failure;
    uint32_t remapped_rows_supported;
    uint32_t row_remapper_banks;
    int32_t unrepairable_memory;
    /* MIG */
    uint32_t mig_capable;
    /* NVLink and topology */
    uint32_t nvlink_count;
    uint32_t nvlink_version;
    uint32_t nvlink_remote_count;
    struct state_pci_addr nvlink_remote[STATE_MAX_NVLINKS];
    uint32_t gpu_group;
    uint32_t c2c_enabled;
    /* fabric */
    uint32_t fabric_attached;
    uint8_t fabric_cluster_uuid[16];
    uint32_t fabric_clique_id;
    int32_t fabric_state;
    uint32_t fabric_health_mask;
    /* platform (NVSwitch baseboards and GB200-class trays) */
    uint32_t platform_supported;
    uint64_t platform_ib_guid;
    char platform_chassis_serial[17];
    uint32_t platform_slot_number;
    uint32_t platform_tray_index;
    uint32_t platform_host_id;
    uint32_t platform_peer_type;
};

struct state {
    struct state_system system;
    uint32_t gpu_count;
    struct state_gpu gpu[STATE_MAX_GPUS];
};

/*
 * Parse `len` bytes at `buf` into `out` (fully overwritten). Returns 0 on success; on
 * failure returns -1 and writes a NUL-terminated message naming the line and key into
 * `err` (at most `errlen` bytes). Never reads outside [buf, buf+len), never allocates.
 */
int state_parse(const char *buf, size_t len, struct state *out, char *err, size_t errlen);

/* Parse a canonical 8-4-4-4-12 hex UUID into 16 bytes. Returns 0 on success. */
int state_parse_uuid16(const char *s, size_t len, uint8_t out[16]);

/* Parse a decimal or 0x-hex unsigned integer no larger than `max`. Returns 0 on success. */
int state_parse_uint(const char *s, size_t len, uint64_t max, uint64_t *out);

/* Parse a PCI bus id `D:B:D.F` (domain of 4 or 8 hex digits, or omitted). Returns 0 on success. */
int state_parse_bus_id(const char *s, size_t len, struct state_pci_addr *out);

#endif
