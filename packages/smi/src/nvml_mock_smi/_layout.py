"""The ``-q`` report's layout as data: every element, its text label, and when it shows.

This table is the one place the report's shape is written. Each :class:`Entry` is one XML
element (its tag) and, unless its label is ``None``, one text key; the order is the real
tool's. Which entries show depends on the driver generation NVML reports (``since`` /
``until``: the first version that shows it / the first that no longer does) and on what the
board reports (``when``: a flag the readings set, ``!`` for its negation); ``deprecated``
is the first driver whose tool prints ``Requested functionality has been deprecated`` there
instead of the value. :func:`first` picks between alternatives (the T.Limit-relative or the
absolute temperature thresholds). ``section`` is the ``-d`` category of a top-level entry.

The values are not here: :mod:`._readings` reads NVML into facts keyed by the element path
(``mig_mode/current_mig``), and :mod:`._report` walks this table with them into the tree
that :mod:`._text` and :mod:`._xml` print. A new driver layout is a change to this table.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    Version = tuple[int, ...]

DEPRECATED = "Requested functionality has been deprecated"
R555 = (555,)
"""The first driver with the ``Capabilities`` block."""
R565 = (565,)
"""The first driver with ``Platform Info`` (under its first labels) and ``GPU Recovery Action``."""
R570 = (570,)
"""The first driver of today's text layout: the 55-column key, ``Platform Info``'s current
labels, separate average and instantaneous power draw, DRAM encryption, power smoothing and
profiles, the fabric's route health."""
V13 = (575,)
"""The first driver generation of the v13 DTD (``display_attached``, ``pdi``, counters)."""
LATE_580 = (580, 106)
"""580 updates after 580.105: inactive remapped rows, unrepairable memory, partitions."""
EDPP = (590,)
"""The first generation that reports the EDPp multiplier."""
RESET_STATUS_DEPRECATED = (570,)
"""565 still answers ``Reset Required: No``; 570 prints the deprecation text there."""


class Entry:
    """One element of the report (see the module docstring for the gates).

    ``children``: a group's entries (``()`` with ``group=True``: an empty element).
    ``each``: the children repeat once per item of the list the readings give for this path.
    ``text_from``: the text view prints ``label : <that child's value>`` and hides the
    children (a retired-pages count, a supported memory clock). ``text_variant``: the text
    view prints the reading at ``path#text`` instead (PCI ids as ``0x18``). ``empty_text``:
    what the text view prints for a repeated group without items. ``raw``: an XML-only
    element whose inner text sits on its own line; a group with ``raw`` is that element only
    while the readings give its repeated child no items (``<mig_devices>None``). ``indent``:
    extra text indentation.
    ``text_only_with``: shown in text only when this ``-d`` category is asked for.
    ``old_labels``: ``((version, label), ...)``, oldest first: drivers before ``version``
    print ``label`` in text.
    """

    __slots__ = (
        "alternatives",
        "children",
        "deprecated",
        "each",
        "empty_text",
        "group",
        "indent",
        "label",
        "old_labels",
        "raw",
        "section",
        "since",
        "tag",
        "text_from",
        "text_only_with",
        "text_variant",
        "until",
        "when",
    )

    def __init__(
        self,
        tag: str,
        label: str | None,
        children: tuple[Entry, ...] | None = None,
        *,
        since: Version | None = None,
        until: Version | None = None,
        when: str | None = None,
        deprecated: Version | None = None,
        section: str | None = None,
        each: bool = False,
        text_from: str | None = None,
        text_variant: bool = False,
        empty_text: str | None = None,
        raw: str | None = None,
        indent: int = 0,
        text_only_with: str | None = None,
        alternatives: tuple[Entry, ...] = (),
        old_labels: tuple[tuple[Version, str], ...] = (),
    ) -> None:
        self.tag = tag
        self.old_labels = old_labels
        self.label = label
        self.children = children
        self.group = children is not None
        self.since = since
        self.until = until
        self.when = when
        self.deprecated = deprecated
        self.section = section
        self.each = each
        self.text_from = text_from
        self.text_variant = text_variant
        self.empty_text = empty_text
        self.raw = raw
        self.indent = indent
        self.text_only_with = text_only_with
        self.alternatives = alternatives

    def shown(self, driver: Version, flags: frozenset[str]) -> bool:
        """Whether the tool of ``driver`` prints this entry on a board with ``flags``."""
        if self.since is not None and driver < self.since:
            return False
        if self.until is not None and driver >= self.until:
            return False
        if self.when is not None:
            if self.when.startswith("!"):
                return self.when[1:] not in flags
            return self.when in flags
        return True

    def label_for(self, driver: Version) -> str | None:
        """The text label the tool of ``driver`` prints: the first of ``old_labels`` (oldest
        first, each the label of drivers before its version) that applies, else ``label``."""
        for before, label in self.old_labels:
            if driver < before:
                return label
        return self.label

    def __repr__(self) -> str:
        return f"Entry({self.tag!r}, {self.label!r})"


def E(tag: str, label: str | None, *children: Entry, **gates: object) -> Entry:  # noqa: N802
    """A leaf (no children) or a group; ``gates`` are :class:`Entry`'s keywords."""
    return Entry(tag, label, children if children else None, **gates)  # type: ignore[arg-type]


def G(tag: str, label: str | None, *children: Entry, **gates: object) -> Entry:  # noqa: N802
    """A group, even an empty one (an element with no children)."""
    return Entry(tag, label, children, **gates)  # type: ignore[arg-type]


def first(*entries: Entry) -> Entry:
    """The first of ``entries`` that shows (an alternative without gates ends the list)."""
    return Entry("", None, alternatives=entries)


def _current_pending(tag: str, label: str, current: str, pending: str, **gates: object) -> Entry:
    return G(tag, label, E(current, "Current"), E(pending, "Pending"), **gates)


def _clock4(tag: str, label: str, section: str) -> Entry:
    return G(
        tag,
        label,
        E("graphics_clock", "Graphics"),
        E("sm_clock", "SM"),
        E("mem_clock", "Memory"),
        E("video_clock", "Video"),
        section=section,
    )


def _clock2(tag: str, label: str, section: str) -> Entry:
    return G(tag, label, E("graphics_clock", "Graphics"), E("mem_clock", "Memory"), section=section)


def _three(tag: str, label: str, section: str) -> Entry:
    return G(tag, label, E("total", "Total"), E("used", "Used"), E("free", "Free"), section=section)


def _stats(tag: str, label: str, section: str) -> Entry:
    return G(
        tag,
        label,
        E("session_count", "Active Sessions"),
        E("average_fps", "Average FPS"),
        E("average_latency", "Average Latency"),
        section=section,
    )


def _ecc_counts(tag: str, label: str, *, aggregate: bool) -> Entry:
    new = (
        E("sram_correctable", "SRAM Correctable", when="sram_ecc"),
        E("sram_uncorrectable_parity", "SRAM Uncorrectable Parity", when="sram_ecc"),
        E("sram_uncorrectable_secded", "SRAM Uncorrectable SEC-DED", when="sram_ecc"),
    )
    old = (
        E("sram_correctable", "SRAM Correctable", when="!sram_ecc"),
        E("sram_uncorrectable", "SRAM Uncorrectable", when="!sram_ecc"),
    )
    dram = (
        E("dram_correctable", "DRAM Correctable"),
        E("dram_uncorrectable", "DRAM Uncorrectable"),
    )
    tail = (E("sram_threshold_exceeded", "SRAM Threshold Exceeded", when="sram_ecc"),)
    return G(tag, label, *new, *old, *dram, *(tail if aggregate else ()))


def _power_readings(tag: str, label: str) -> Entry:
    return G(
        tag,
        label,
        E("power_state", None),
        E("power_draw", "Power Draw", until=R570),
        E("average_power_draw", "Average Power Draw", since=R570),
        E("instant_power_draw", "Instantaneous Power Draw", since=R570),
        E("current_power_limit", "Current Power Limit"),
        E("requested_power_limit", "Requested Power Limit"),
        E("default_power_limit", "Default Power Limit"),
        E("min_power_limit", "Min Power Limit"),
        E("max_power_limit", "Max Power Limit"),
        section="POWER",
    )


REASONS = (
    ("clocks_event_reason_gpu_idle", "Idle", 0x1, 0),
    ("clocks_event_reason_applications_clocks_setting", "Applications Clocks Setting", 0x2, 0),
    ("clocks_event_reason_sw_power_cap", "SW Power Cap", 0x4, 0),
    ("clocks_event_reason_hw_slowdown", "HW Slowdown", 0x8, 0),
    ("clocks_event_reason_hw_thermal_slowdown", "HW Thermal Slowdown", 0x40, 4),
    ("clocks_event_reason_hw_power_brake_slowdown", "HW Power Brake Slowdown", 0x80, 4),
    ("clocks_event_reason_sync_boost", "Sync Boost", 0x10, 0),
    ("clocks_event_reason_sw_thermal_slowdown", "SW Thermal Slowdown", 0x20, 0),
    ("clocks_event_reason_display_clocks_setting", "Display Clock Setting", 0x100, 0),
)
"""Each clock event reason: its element, its text label, its NVML bit, its text indent."""

REASON_COUNTERS = (
    ("clocks_event_reasons_counters_sw_power_cap", "SW Power Capping"),
    ("clocks_event_reasons_counters_sync_boost", "Sync Boost"),
    ("clocks_event_reasons_counters_sw_therm_slowdown", "SW Thermal Slowdown"),
    ("clocks_event_reasons_counters_hw_therm_slowdown", "HW Thermal Slowdown"),
    ("clocks_event_reasons_counters_hw_power_brake", "HW Power Braking"),
)

_TLIMIT: dict[str, object] = {"when": "tlimit"}

GPU: tuple[Entry, ...] = (
    E("product_name", "Product Name"),
    E("product_brand", "Product Brand"),
    E("product_architecture", "Product Architecture"),
    E("display_mode", "Display Mode", deprecated=V13),
    E("display_attached", "Display Attached", since=V13),
    E("display_active", "Display Active"),
    E("persistence_mode", "Persistence Mode"),
    E("addressing_mode", "Addressing Mode"),
    _current_pending("mig_mode", "MIG Mode", "current_mig", "pending_mig"),
    G(
        "mig_devices",
        None,
        G(
            "mig_device",
            "MIG Device",
            E("index", "Index"),
            E("gpu_instance_id", "GPU Instance ID"),
            E("compute_instance_id", "Compute Instance ID"),
            G(
                "device_attributes",
                "Device Attributes",
                G(
                    "shared",
                    "Shared",
                    E("multiprocessor_count", "Multiprocessor count"),
                    E("copy_engine_count", "Copy Engine count"),
                    E("encoder_count", "Encoder count"),
                    E("decoder_count", "Decoder count"),
                    E("ofa_count", "OFA count"),
                    E("jpg_count", "JPG count"),
                ),
            ),
            G(
                "fb_memory_usage",
                "FB Memory Usage",
                E("total", "Total"),
                E("reserved", "Reserved"),
                E("used", "Used"),
                E("free", "Free"),
            ),
            G(
                "bar1_memory_usage",
                "BAR1 Memory Usage",
                E("total", "Total"),
                E("used", "Used"),
                E("free", "Free"),
            ),
            each=True,
        ),
        raw="None",
    ),
    E("accounting_mode", "Accounting Mode", section="ACCOUNTING"),
    E("accounting_mode_buffer_size", "Accounting Mode Buffer Size", section="ACCOUNTING"),
    _current_pending("driver_model", "Driver Model", "current_dm", "pending_dm"),
    E("serial", "Serial Number"),
    E("uuid", "GPU UUID"),
    E("pdi", "GPU PDI", since=V13),
    E("minor_number", "Minor Number"),
    E("vbios_version", "VBIOS Version"),
    E("multigpu_board", "MultiGPU Board"),
    E("board_id", "Board ID"),
    E("board_part_number", "Board Part Number"),
    E("gpu_part_number", "GPU Part Number"),
    E("gpu_fru_part_number", "FRU Part Number"),
    E("module_id", "Module ID", until=R565),
    G(
        "platformInfo",
        "Platform Info",
        E(
            "chassis_serial_number",
            "Chassis Serial Number",
            old_labels=((R570, "RACK Serial Number"),),
        ),
        E("slot_number", "Slot Number", old_labels=((R570, "Chassis Physical Slot Number"),)),
        E("tray_index", "Tray Index", old_labels=((R570, "Compute Slot Index"),)),
        E("host_id", "Host ID", old_labels=((R570, "Node Index"),)),
        E("peer_type", "Peer Type"),
        E("module_id", "Module Id"),
        E("gpu_fabric_guid", "GPU Fabric GUID", since=R570),
        since=R565,
    ),
    G(
        "inforom_version",
        "Inforom Version",
        E("img_version", "Image Version"),
        E("oem_object", "OEM Object"),
        E("ecc_object", "ECC Object"),
        E("pwr_object", "Power Management Object"),
    ),
    G(
        "inforom_bbx_flush",
        "Inforom BBX Object Flush",
        E("latest_timestamp", "Latest Timestamp"),
        E("latest_duration", "Latest Duration"),
    ),
    _current_pending("gpu_operation_mode", "GPU Operation Mode", "current_gom", "pending_gom"),
    E("c2c_mode", "GPU C2C Mode"),
    G(
        "gpu_virtualization_mode",
        "GPU Virtualization Mode",
        E("virtualization_mode", "Virtualization Mode"),
        E("host_vgpu_mode", "Host VGPU Mode"),
        E("vgpu_heterogeneous_mode", "vGPU Heterogeneous Mode"),
    ),
    G(
        "gpu_reset_status",
        "GPU Reset Status",
        E("reset_required", "Reset Required", deprecated=RESET_STATUS_DEPRECATED),
        E(
            "drain_and_reset_recommended",
            "Drain and Reset Recommended",
            deprecated=RESET_STATUS_DEPRECATED,
        ),
        until=V13,
        section="RESET_STATUS",
    ),
    E("gpu_recovery_action", "GPU Recovery Action", since=R565, section="RESET_STATUS"),
    E("gsp_firmware_version", "GSP Firmware Version", section="GSP_FIRMWARE_VERSION"),
    G("ibmnpu", "IBMNPU", E("relaxed_ordering_mode", "Relaxed Ordering Mode")),
    G(
        "pci",
        "PCI",
        E("pci_bus", "Bus", text_variant=True),
        E("pci_device", "Device", text_variant=True),
        E("pci_domain", "Domain", text_variant=True),
        E("pci_base_class", "Base Classcode", text_variant=True),
        E("pci_sub_class", "Sub Classcode", text_variant=True),
        E("pci_device_id", "Device Id", text_variant=True),
        E("pci_bus_id", "Bus Id"),
        E("pci_sub_system_id", "Sub System Id", text_variant=True),
        G(
            "pci_gpu_link_info",
            "GPU Link Info",
            G(
                "pcie_gen",
                "PCIe Generation",
                E("max_link_gen", "Max"),
                E("current_link_gen", "Current"),
                E("device_current_link_gen", "Device Current"),
                E("max_device_link_gen", "Device Max"),
                E("max_host_link_gen", "Host Max"),
            ),
            G(
                "link_widths",
                "Link Width",
                E("max_link_width", "Max"),
                E("current_link_width", "Current"),
            ),
        ),
        G(
            "pci_bridge_chip",
            "Bridge Chip",
            E("bridge_chip_type", "Type"),
            E("bridge_chip_fw", "Firmware"),
        ),
        E("replay_counter", "Replays Since Reset"),
        E("replay_rollover_counter", "Replay Number Rollovers"),
        E("tx_util", "Tx Throughput"),
        E("rx_util", "Rx Throughput"),
        E("atomic_caps_inbound", "Atomic Caps Inbound", until=R565),
        E("atomic_caps_outbound", "Atomic Caps Outbound"),
        E("atomic_caps_inbound", "Atomic Caps Inbound", since=R565),
        section="PCIE",
    ),
    E("fan_speed", "Fan Speed"),
    E("performance_state", "Performance State", section="PERFORMANCE"),
    G(
        "clocks_event_reasons",
        "Clocks Event Reasons",
        *(E(tag, label, indent=indent) for tag, label, _, indent in REASONS),
        section="PERFORMANCE",
    ),
    G(
        "clocks_event_reasons_counters",
        "Clocks Event Reasons Counters",
        *(E(tag, label) for tag, label in REASON_COUNTERS),
        since=V13,
        section="PERFORMANCE",
    ),
    E("sparse_operation_mode", "Sparse Operation Mode", section="PERFORMANCE"),
    G(
        "fb_memory_usage",
        "FB Memory Usage",
        E("total", "Total"),
        E("reserved", "Reserved"),
        E("used", "Used"),
        E("free", "Free"),
        section="MEMORY",
    ),
    _three("bar1_memory_usage", "BAR1 Memory Usage", "MEMORY"),
    _three("cc_protected_memory_usage", "Conf Compute Protected Memory Usage", "MEMORY"),
    E("compute_mode", "Compute Mode", section="COMPUTE"),
    G(
        "utilization",
        "Utilization",
        E("gpu_util", "GPU", old_labels=((R570, "Gpu"),)),
        E("memory_util", "Memory"),
        E("encoder_util", "Encoder"),
        E("decoder_util", "Decoder"),
        E("jpeg_util", "JPEG"),
        E("ofa_util", "OFA"),
        section="UTILIZATION",
    ),
    _stats("encoder_stats", "Encoder Stats", "ENCODER_STATS"),
    _stats("fbc_stats", "FBC Stats", "FBC_STATS"),
    _current_pending(
        "dram_encryption_mode",
        "DRAM Encryption Mode",
        "current_dram_encryption",
        "pending_dram_encryption",
        since=R570,
    ),
    _current_pending("ecc_mode", "ECC Mode", "current_ecc", "pending_ecc", section="ECC"),
    G(
        "ecc_errors",
        "ECC Errors",
        _ecc_counts("volatile", "Volatile", aggregate=False),
        _ecc_counts("aggregate", "Aggregate", aggregate=True),
        G(
            "aggregate_uncorrectable_sram_sources",
            "Aggregate Uncorrectable SRAM Sources",
            E("sram_l2", "SRAM L2"),
            E("sram_sm", "SRAM SM"),
            E("sram_microcontroller", "SRAM Microcontroller"),
            E("sram_pcie", "SRAM PCIE"),
            E("sram_other", "SRAM Other"),
            when="sram_ecc",
        ),
        E("channel_repair_pending", "Channel Repair Pending", since=V13, when="sram_ecc"),
        E("tpc_repair_pending", "TPC Repair Pending", since=V13, when="sram_ecc"),
        E("unrepairable_memory", "Unrepairable Memory", since=LATE_580, when="sram_ecc"),
        section="ECC",
    ),
    G(
        "retired_pages",
        "Retired Pages",
        G(
            "multiple_single_bit_retirement",
            "Single Bit ECC",
            E("retired_count", None),
            E("retired_pagelist", None),
            text_from="retired_count",
        ),
        G(
            "double_bit_retirement",
            "Double Bit ECC",
            E("retired_count", None),
            E("retired_pagelist", None),
            text_from="retired_count",
        ),
        E("pending_blacklist", "Pending Page Blacklist"),
        E("pending_retirement", None),
        section="PAGE_RETIREMENT",
    ),
    G(
        "remapped_rows",
        "Remapped Rows",
        E("remapped_row_corr", "Correctable Error"),
        E("remapped_row_corr_inactive", "Correctable Error (Inactive)", since=LATE_580),
        E("remapped_row_unc", "Uncorrectable Error"),
        E("remapped_row_unc_inactive", "Uncorrectable Error (Inactive)", since=LATE_580),
        E("remapped_row_pending", "Pending"),
        E("remapped_row_failure", "Remapping Failure Occurred"),
        G(
            "row_remapper_histogram",
            "Bank Remap Availability Histogram",
            E("row_remapper_histogram_max", "Max"),
            E("row_remapper_histogram_high", "High"),
            E("row_remapper_histogram_partial", "Partial"),
            E("row_remapper_histogram_low", "Low"),
            E("row_remapper_histogram_none", "None"),
        ),
        section="ROW_REMAPPER",
    ),
    G(
        "temperature",
        "Temperature",
        E("gpu_temp", "GPU Current Temp"),
        E("gpu_temp_tlimit", "GPU T.Limit Temp"),
        first(
            E("gpu_temp_max_tlimit_threshold", "GPU Shutdown T.Limit Temp", **_TLIMIT),
            E("gpu_temp_max_threshold", "GPU Shutdown Temp"),
        ),
        first(
            E("gpu_temp_slow_tlimit_threshold", "GPU Slowdown T.Limit Temp", **_TLIMIT),
            E("gpu_temp_slow_threshold", "GPU Slowdown Temp"),
        ),
        first(
            E("gpu_temp_max_gpu_tlimit_threshold", "GPU Max Operating T.Limit Temp", **_TLIMIT),
            E("gpu_temp_max_gpu_threshold", "GPU Max Operating Temp"),
        ),
        E("gpu_target_temperature", "GPU Target Temperature"),
        E("memory_temp", "Memory Current Temp"),
        first(
            E("gpu_temp_max_mem_tlimit_threshold", "Memory Max Operating T.Limit Temp", **_TLIMIT),
            E("gpu_temp_max_mem_threshold", "Memory Max Operating Temp"),
        ),
        section="TEMPERATURE",
    ),
    G(
        "supported_gpu_target_temp",
        "Supported GPU Target Temp",
        E("gpu_target_temp_min", "GPU Target Temp Min"),
        E("gpu_target_temp_max", "GPU Target Temp Max"),
        section="SUPPORTED_GPU_TARGET_TEMP",
        text_only_with="SUPPORTED_GPU_TARGET_TEMP",
    ),
    _power_readings("gpu_power_readings", "GPU Power Readings"),
    G(
        "gpu_memory_power_readings",
        "GPU Memory Power Readings ",
        E("power_draw", "Power Draw", until=R570),
        E("average_power_draw", "Average Power Draw", since=R570),
        E("instant_power_draw", "Instantaneous Power Draw", since=R570),
        section="POWER",
    ),
    _power_readings("module_power_readings", "Module Power Readings"),
    E("power_smoothing", "Power Smoothing", since=R570, section="POWER_SMOOTHING"),
    G(
        "power_profiles",
        "Workload Power Profiles",
        E("power_profile_requested_profiles", "Requested Profiles"),
        E("power_profile_enforced_profiles", "Enforced Profiles"),
        since=R570,
        section="POWER_PROFILES",
    ),
    E("edpp_multiplier", "EDPp Multiplier", since=EDPP, section="POWER"),
    _clock4("clocks", "Clocks", "CLOCK"),
    _clock2("applications_clocks", "Applications Clocks", "CLOCK"),
    _clock2("default_applications_clocks", "Default Applications Clocks", "CLOCK"),
    G("deferred_clocks", "Deferred Clocks", E("mem_clock", "Memory"), section="CLOCK"),
    _clock4("max_clocks", "Max Clocks", "CLOCK"),
    G(
        "max_customer_boost_clocks",
        "Max Customer Boost Clocks",
        E("graphics_clock", "Graphics"),
        section="CLOCK",
    ),
    G(
        "clock_policy",
        "Clock Policy",
        E("auto_boost", "Auto Boost"),
        E("auto_boost_default", "Auto Boost Default"),
        section="CLOCK",
    ),
    G("voltage", "Voltage", E("graphics_volt", "Graphics"), until=V13, section="VOLTAGE"),
    G(
        "fabric",
        "Fabric",
        E("state", "State"),
        E("status", "Status"),
        E("cliqueId", "CliqueId"),
        E("clusterUuid", "ClusterUUID"),
        G(
            "health",
            "Health",
            E("summary", "Summary", since=V13),
            E("bandwidth", "Bandwidth"),
            E("route_recovery_in_progress", "Route Recovery in progress", since=R570),
            E("route_unhealthy", "Route Unhealthy", since=R570),
            E("access_timeout_recovery", "Access Timeout Recovery", since=R570),
            E("incorrect_configuration", "Incorrect Configuration", since=V13),
            E("partition_assigned", "Partition Assigned", since=LATE_580),
        ),
        section="FABRIC",
    ),
    G(
        "supported_clocks",
        "Supported Clocks",
        G(
            "supported_mem_clock",
            "Memory",
            E("value", None),
            E("supported_graphics_clock", "Graphics", indent=4, each=True),
            each=True,
            text_from="value",
        ),
        section="SUPPORTED_CLOCKS",
        text_only_with="SUPPORTED_CLOCKS",
    ),
    G(
        "processes",
        "Processes",
        G(
            "process_info",
            None,
            E("gpu_instance_id", "GPU instance ID"),
            E("compute_instance_id", "Compute instance ID"),
            E("pid", "Process ID"),
            E("type", "Type", indent=4),
            E("process_name", "Name", indent=4),
            E("used_memory", "Used GPU Memory", indent=4),
            each=True,
        ),
        empty_text="None",
        section="PIDS",
    ),
    G("accounted_processes", None, section="ACCOUNTING"),
    G("capabilities", "Capabilities", E("egm", "EGM"), since=R555),
)
"""The children of ``<gpu id=...>``, in the real tool's order."""

DISPLAY_TYPES = frozenset(e.section for e in GPU if e.section)
"""The ``-d`` categories ``-q -d`` accepts."""

KEY_WIDTHS: tuple[tuple[Version, int], ...] = ((R570, 55), ((0,), 42))
"""The text view's key column (the colon sits there), newest first: the first whose version
the driver reaches. The process entries keep 42 on every driver."""


def key_width(driver: Version) -> int:
    """The text key column of the tool of ``driver``."""
    return next(width for since, width in KEY_WIDTHS if driver >= since)


DTDS: tuple[tuple[Version, str], ...] = (
    (V13, "nvsmi_device_v13.dtd"),
    ((0,), "nvsmi_device_v12.dtd"),
)
"""The DTD the DOCTYPE names, newest first: the first whose version the driver reaches."""


def dtd(driver: Version) -> str:
    """The DTD the tool of ``driver`` names in its ``-q -x`` DOCTYPE."""
    return next(name for since, name in DTDS if driver >= since)
