"""The ``-d`` display categories and the report sections each one selects.

``-q -d MEMORY,ECC`` prints only the sections of those categories, in text and in XML.
"""

from __future__ import annotations

SECTIONS = {
    "fb_memory_usage": "MEMORY",
    "bar1_memory_usage": "MEMORY",
    "cc_protected_memory_usage": "MEMORY",
    "utilization": "UTILIZATION",
    "ecc_mode": "ECC",
    "ecc_errors": "ECC",
    "temperature": "TEMPERATURE",
    "gpu_power_readings": "POWER",
    "gpu_memory_power_readings": "POWER",
    "module_power_readings": "POWER",
    "edpp_multiplier": "POWER",
    "power_smoothing": "POWER_SMOOTHING",
    "power_profiles": "POWER_PROFILES",
    "clocks": "CLOCK",
    "applications_clocks": "CLOCK",
    "default_applications_clocks": "CLOCK",
    "deferred_clocks": "CLOCK",
    "max_clocks": "CLOCK",
    "max_customer_boost_clocks": "CLOCK",
    "clock_policy": "CLOCK",
    "compute_mode": "COMPUTE",
    "processes": "PIDS",
    "performance_state": "PERFORMANCE",
    "clocks_event_reasons": "PERFORMANCE",
    "clocks_event_reasons_counters": "PERFORMANCE",
    "sparse_operation_mode": "PERFORMANCE",
    "supported_clocks": "SUPPORTED_CLOCKS",
    "retired_pages": "PAGE_RETIREMENT",
    "remapped_rows": "ROW_REMAPPER",
    "accounting_mode": "ACCOUNTING",
    "accounting_mode_buffer_size": "ACCOUNTING",
    "accounted_processes": "ACCOUNTING",
    "encoder_stats": "ENCODER_STATS",
    "fbc_stats": "FBC_STATS",
    "supported_gpu_target_temp": "SUPPORTED_GPU_TARGET_TEMP",
    "voltage": "VOLTAGE",
    "gpu_reset_status": "RESET_STATUS",
    "gpu_recovery_action": "RESET_STATUS",
    "gsp_firmware_version": "GSP_FIRMWARE_VERSION",
    "pci": "PCIE",
    "fabric": "FABRIC",
}
DISPLAY_TYPES = frozenset(SECTIONS.values())
