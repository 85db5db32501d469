"""Builds the ``-q`` report tree of one GPU from NVML answers, as the real tool lays it out.

The element set and order follow the real ``nvidia-smi -q -x`` of the driver generation the
library reports (see :mod:`._generation`). What a board supports is read from NVML, as the
real tool does: an answer of ``NVML_ERROR_NOT_SUPPORTED`` prints ``N/A`` and any other error
prints the library's error string. Two layouts also follow the board: a board that reports a
T.Limit margin gets thresholds relative to it (``gpu_temp_*_tlimit_threshold``), others the
absolute ones; Ampere and later get the SRAM parity/SEC-DED ECC counters and their sources,
older boards one SRAM uncorrectable counter.
"""

from __future__ import annotations

from collections.abc import Callable
from ctypes import byref, c_uint, c_ulong, c_ulonglong
from functools import partial
from typing import Any

from ._generation import Generation
from ._mig_view import report_node as mig_report_node
from ._nvml import (
    CLOCK_GRAPHICS,
    CLOCK_MEM,
    CLOCK_SM,
    CLOCK_VIDEO,
    ECC_AGGREGATE,
    ECC_CORRECTED,
    ECC_UNCORRECTED,
    ECC_VOLATILE,
    ERROR_NOT_SUPPORTED,
    FI_CLOCKS_EVENT_HW_POWER_BRAKE,
    FI_CLOCKS_EVENT_HW_THERM,
    FI_CLOCKS_EVENT_SW_THERM,
    FI_EDPP_MULTIPLIER,
    FI_GPU_RECOVERY_ACTION,
    FI_PERF_POLICY_POWER,
    FI_PERF_POLICY_SYNC_BOOST,
    FI_POWER_AVERAGE,
    FI_POWER_CURRENT_LIMIT,
    FI_POWER_DEFAULT_LIMIT,
    FI_POWER_INSTANT,
    FI_POWER_MAX_LIMIT,
    FI_POWER_MIN_LIMIT,
    FI_POWER_REQUESTED_LIMIT,
    INFOROM_ECC,
    INFOROM_OEM,
    INFOROM_POWER,
    MEM_LOC_DRAM,
    MEM_LOC_SRAM,
    PAGE_RETIREMENT_DBE,
    PAGE_RETIREMENT_MULTIPLE_SBE,
    PCIE_UTIL_RX,
    PCIE_UTIL_TX,
    POWER_SCOPE_MEMORY,
    POWER_SCOPE_MODULE,
    TEMP_THRESHOLD_GPU_MAX,
    TEMP_THRESHOLD_MEM_MAX,
    TEMP_THRESHOLD_SHUTDOWN,
    TEMP_THRESHOLD_SLOWDOWN,
    Device,
    NvmlError,
    decode_bytes,
)
from ._processes import process_rows
from ._sections import SECTIONS
from ._tree import Node, group, leaf
from ._values import (
    ADDRESSING,
    ARCHITECTURES,
    BANDWIDTH,
    BRANDS,
    COMPUTE_MODES,
    FABRIC_STATES,
    FABRIC_SUMMARY,
    GOM,
    INCORRECT_CONFIG,
    NA,
    PEER_TYPES,
    RECOVERY,
    TRUE_FALSE,
    VIRTUALIZATION,
    celsius,
    enabled,
    fabric_uuid,
    mhz,
    mib,
    pct,
    platform_slot,
    pstate,
    timestamp_us,
    watts,
    yes_no,
)

DEPRECATED = "Requested functionality has been deprecated"
FI_MEMORY_TEMP = 82
FI_PCIE_REPLAY_ROLLOVER = 95
ARCH_AMPERE = 7

REASONS = [
    ("clocks_event_reason_gpu_idle", "Idle", 0x1, 0),
    ("clocks_event_reason_applications_clocks_setting", "Applications Clocks Setting", 0x2, 0),
    ("clocks_event_reason_sw_power_cap", "SW Power Cap", 0x4, 0),
    ("clocks_event_reason_hw_slowdown", "HW Slowdown", 0x8, 0),
    ("clocks_event_reason_hw_thermal_slowdown", "HW Thermal Slowdown", 0x40, 4),
    ("clocks_event_reason_hw_power_brake_slowdown", "HW Power Brake Slowdown", 0x80, 4),
    ("clocks_event_reason_sync_boost", "Sync Boost", 0x10, 0),
    ("clocks_event_reason_sw_thermal_slowdown", "SW Thermal Slowdown", 0x20, 0),
    ("clocks_event_reason_display_clocks_setting", "Display Clock Setting", 0x100, 0),
]
REASON_COUNTERS = [
    ("clocks_event_reasons_counters_sw_power_cap", "SW Power Capping", FI_PERF_POLICY_POWER),
    ("clocks_event_reasons_counters_sync_boost", "Sync Boost", FI_PERF_POLICY_SYNC_BOOST),
    (
        "clocks_event_reasons_counters_sw_therm_slowdown",
        "SW Thermal Slowdown",
        FI_CLOCKS_EVENT_SW_THERM,
    ),
    (
        "clocks_event_reasons_counters_hw_therm_slowdown",
        "HW Thermal Slowdown",
        FI_CLOCKS_EVENT_HW_THERM,
    ),
    (
        "clocks_event_reasons_counters_hw_power_brake",
        "HW Power Braking",
        FI_CLOCKS_EVENT_HW_POWER_BRAKE,
    ),
]


class Reader:
    """Turns each NVML answer, or its error, into display text."""

    def err(self, exc: NvmlError) -> str:
        return NA if exc.code == ERROR_NOT_SUPPORTED else exc.text

    def get(self, fn: Callable[[], Any], fmt: Callable[[Any], str] = str) -> str:
        try:
            return fmt(fn())
        except NvmlError as exc:
            return self.err(exc)

    def raw(self, fn: Callable[[], Any]) -> Any:
        """The value, or the :class:`NvmlError` itself (callers render both)."""
        try:
            return fn()
        except NvmlError as exc:
            return exc


class GpuReport:
    """Builds the node list for one GPU (the children of ``<gpu id=...>``)."""

    def __init__(self, device: Device, gen: Generation) -> None:
        self.d = device
        self.r = Reader()
        self.gen = gen
        self._arch = self.r.raw(device.architecture)
        self._pci = self.r.raw(device.pci_info)

    @property
    def bus_id(self) -> str:
        if isinstance(self._pci, NvmlError):
            return NA
        return str(self._pci.busId.decode())

    def build(self) -> list[Node]:
        g, r, d = self.gen, self.r, self.d
        nodes: list[Node] = [
            leaf("product_name", "Product Name", r.get(d.name)),
            leaf(
                "product_brand", "Product Brand", r.get(d.brand, lambda v: BRANDS.get(v, "Unknown"))
            ),
            leaf(
                "product_architecture",
                "Product Architecture",
                NA
                if isinstance(self._arch, NvmlError)
                else ARCHITECTURES.get(self._arch, "Unknown"),
            ),
        ]
        if g.v13:
            nodes.append(leaf("display_mode", "Display Mode", DEPRECATED))
            nodes.append(
                leaf("display_attached", "Display Attached", r.get(d.display_mode, yes_no))
            )
        else:
            nodes.append(leaf("display_mode", "Display Mode", r.get(d.display_mode, enabled)))
        nodes += [
            leaf("display_active", "Display Active", r.get(d.display_active, enabled)),
            leaf("persistence_mode", "Persistence Mode", r.get(d.persistence_mode, enabled)),
            leaf(
                "addressing_mode",
                "Addressing Mode",
                r.get(d.addressing_mode, lambda v: ADDRESSING.get(v, NA)),
            ),
            self._pair("mig_mode", "MIG Mode", d.mig_mode, ("current_mig", "pending_mig"), enabled),
            mig_report_node(d),
            leaf("accounting_mode", "Accounting Mode", r.get(d.accounting_mode, enabled)),
            leaf(
                "accounting_mode_buffer_size",
                "Accounting Mode Buffer Size",
                r.get(d.accounting_buffer_size),
            ),
            self._pair(
                "driver_model", "Driver Model", d.driver_model, ("current_dm", "pending_dm"), str
            ),
            leaf("serial", "Serial Number", r.get(d.serial)),
            leaf("uuid", "GPU UUID", r.get(d.uuid)),
        ]
        if g.v13:
            nodes.append(leaf("pdi", "GPU PDI", r.get(d.pdi, lambda v: f"0x{v:016x}")))
        nodes += [
            leaf("minor_number", "Minor Number", r.get(d.minor_number)),
            leaf("vbios_version", "VBIOS Version", r.get(d.vbios_version)),
            leaf("multigpu_board", "MultiGPU Board", r.get(d.multi_gpu_board, yes_no)),
            leaf("board_id", "Board ID", r.get(d.board_id, lambda v: f"0x{v:x}")),
            leaf("board_part_number", "Board Part Number", r.get(d.board_part_number)),
            leaf("gpu_part_number", "GPU Part Number", NA),
            leaf("gpu_fru_part_number", "FRU Part Number", NA),
            self._platform(),
            group(
                "inforom_version",
                "Inforom Version",
                [
                    leaf("img_version", "Image Version", r.get(d.inforom_image_version)),
                    leaf("oem_object", "OEM Object", r.get(lambda: d.inforom_version(INFOROM_OEM))),
                    leaf("ecc_object", "ECC Object", r.get(lambda: d.inforom_version(INFOROM_ECC))),
                    leaf(
                        "pwr_object",
                        "Power Management Object",
                        r.get(lambda: d.inforom_version(INFOROM_POWER)),
                    ),
                ],
            ),
            self._bbx(),
            self._pair(
                "gpu_operation_mode",
                "GPU Operation Mode",
                d.gpu_operation_mode,
                ("current_gom", "pending_gom"),
                lambda v: GOM.get(v, NA),
            ),
            leaf("c2c_mode", "GPU C2C Mode", r.get(d.c2c_mode, enabled)),
            group(
                "gpu_virtualization_mode",
                "GPU Virtualization Mode",
                [
                    leaf(
                        "virtualization_mode",
                        "Virtualization Mode",
                        r.get(d.virtualization_mode, lambda v: VIRTUALIZATION.get(v, NA)),
                    ),
                    leaf(
                        "host_vgpu_mode",
                        "Host VGPU Mode",
                        r.get(d.host_vgpu_mode, lambda v: "SR-IOV" if v else "Non SR-IOV"),
                    ),
                    leaf("vgpu_heterogeneous_mode", "vGPU Heterogeneous Mode", NA),
                ],
            ),
        ]
        if not g.v13:
            nodes.append(
                group(
                    "gpu_reset_status",
                    "GPU Reset Status",
                    [
                        leaf("reset_required", "Reset Required", DEPRECATED),
                        leaf(
                            "drain_and_reset_recommended", "Drain and Reset Recommended", DEPRECATED
                        ),
                    ],
                )
            )
        nodes += [
            leaf(
                "gpu_recovery_action",
                "GPU Recovery Action",
                r.get(
                    lambda: d.field_value(FI_GPU_RECOVERY_ACTION),
                    lambda v: RECOVERY.get(int(v), NA),
                ),
            ),
            leaf("gsp_firmware_version", "GSP Firmware Version", r.get(d.gsp_firmware_version)),
            group("ibmnpu", "IBMNPU", [leaf("relaxed_ordering_mode", "Relaxed Ordering Mode", NA)]),
            self._pci_node(),
            leaf("fan_speed", "Fan Speed", r.get(d.fan_speed, pct)),
            leaf("performance_state", "Performance State", r.get(d.performance_state, pstate)),
            self._reasons(),
        ]
        if g.v13:
            nodes.append(self._reason_counters())
        nodes += [
            leaf("sparse_operation_mode", "Sparse Operation Mode", NA),
            *self._memory(),
            leaf(
                "compute_mode",
                "Compute Mode",
                r.get(d.compute_mode, lambda v: COMPUTE_MODES.get(v, NA)),
            ),
            self._utilization(),
            self._stats("encoder_stats", "Encoder Stats", d.encoder_stats),
            self._stats("fbc_stats", "FBC Stats", d.fbc_stats),
            self._pair(
                "dram_encryption_mode",
                "DRAM Encryption Mode",
                d.dram_encryption_mode,
                ("current_dram_encryption", "pending_dram_encryption"),
                enabled,
            ),
            self._pair("ecc_mode", "ECC Mode", d.ecc_mode, ("current_ecc", "pending_ecc"), enabled),
            self._ecc_errors(),
            self._retired_pages(),
            self._remapped_rows(),
            self._temperature(),
            self._target_temp(),
            *self._power(),
            *self._clocks(),
            self._fabric(),
            self._supported_clocks(),
            self._processes(),
            Node("accounted_processes", None, children=[]),
            group("capabilities", "Capabilities", [leaf("egm", "EGM", self._egm())]),
        ]
        self._assign_sections(nodes)
        return nodes

    # --- helpers ------------------------------------------------------------------------

    def _pair(
        self,
        tag: str,
        label: str,
        fn: Callable[[], tuple[int, int]],
        tags: tuple[str, str],
        fmt: Callable[[int], str],
    ) -> Node:
        got = self.r.raw(fn)
        if isinstance(got, NvmlError):
            cur = pend = self.r.err(got)
        else:
            cur, pend = fmt(got[0]), fmt(got[1])
        return group(tag, label, [leaf(tags[0], "Current", cur), leaf(tags[1], "Pending", pend)])

    def _platform(self) -> Node:
        d, r = self.d, self.r
        info = r.raw(d.platform_info)
        module = r.get(d.module_id)
        if isinstance(info, NvmlError):
            chassis = slot = tray = host = peer = guid = r.err(info)
        else:
            chassis = decode_bytes(info.chassisSerialNumber)
            slot, tray = platform_slot(info.slotNumber), platform_slot(info.trayIndex)
            host = str(info.hostId)
            peer = PEER_TYPES.get(int(info.peerType), NA)
            guid = "0x" + bytes(info.ibGuid)[:8].hex()
            module = str(info.moduleId)
        return group(
            "platformInfo",
            "Platform Info",
            [
                leaf("chassis_serial_number", "Chassis Serial Number", chassis),
                leaf("slot_number", "Slot Number", slot),
                leaf("tray_index", "Tray Index", tray),
                leaf("host_id", "Host ID", host),
                leaf("peer_type", "Peer Type", peer),
                leaf("module_id", "Module Id", module),
                leaf("gpu_fabric_guid", "GPU Fabric GUID", guid),
            ],
        )

    def _bbx(self) -> Node:
        ts, dur = c_ulonglong(), c_ulong()
        try:
            self.d.nvml.call("nvmlDeviceGetLastBBXFlushTime", self.d.handle, byref(ts), byref(dur))
            stamp_s, dur_s = timestamp_us(ts.value), f"{dur.value} us"
        except NvmlError as exc:
            stamp_s = dur_s = self.r.err(exc)
        return group(
            "inforom_bbx_flush",
            "Inforom BBX Object Flush",
            [
                leaf("latest_timestamp", "Latest Timestamp", stamp_s),
                leaf("latest_duration", "Latest Duration", dur_s),
            ],
        )

    def _pci_node(self) -> Node:
        d, r = self.d, self.r
        pci = self._pci
        ext = r.raw(d.pci_info_ext)
        if isinstance(pci, NvmlError):
            bus = dev = dom = did = sub = busid = r.err(pci)
            bus_t = dev_t = dom_t = did_t = sub_t = bus
        else:
            bus, dev, dom = f"{pci.bus:02X}", f"{pci.device:02X}", f"{pci.domain:04X}"
            did, sub = f"{pci.pciDeviceId:08X}", f"{pci.pciSubSystemId:08X}"
            busid = self.bus_id
            bus_t, dev_t, dom_t, did_t, sub_t = (f"0x{x}" for x in (bus, dev, dom, did, sub))
        if isinstance(ext, NvmlError):
            base = subc = r.err(ext)
            base_t = subc_t = base
        else:
            base, subc = f"{ext.baseClass:X}", f"{ext.subClass:X}"
            base_t, subc_t = f"0x{base}", f"0x{subc}"

        def x16(v: int) -> str:
            return f"{v}x"

        return group(
            "pci",
            "PCI",
            [
                leaf("pci_bus", "Bus", bus, text=bus_t),
                leaf("pci_device", "Device", dev, text=dev_t),
                leaf("pci_domain", "Domain", dom, text=dom_t),
                leaf("pci_base_class", "Base Classcode", base, text=base_t),
                leaf("pci_sub_class", "Sub Classcode", subc, text=subc_t),
                leaf("pci_device_id", "Device Id", did, text=did_t),
                leaf("pci_bus_id", "Bus Id", busid),
                leaf("pci_sub_system_id", "Sub System Id", sub, text=sub_t),
                group(
                    "pci_gpu_link_info",
                    "GPU Link Info",
                    [
                        group(
                            "pcie_gen",
                            "PCIe Generation",
                            [
                                leaf("max_link_gen", "Max", r.get(d.max_pcie_link_generation)),
                                leaf(
                                    "current_link_gen",
                                    "Current",
                                    r.get(d.curr_pcie_link_generation),
                                ),
                                leaf(
                                    "device_current_link_gen",
                                    "Device Current",
                                    r.get(d.curr_pcie_link_generation),
                                ),
                                leaf(
                                    "max_device_link_gen",
                                    "Device Max",
                                    r.get(d.gpu_max_pcie_link_generation),
                                ),
                                leaf("max_host_link_gen", "Host Max", NA),
                            ],
                        ),
                        group(
                            "link_widths",
                            "Link Width",
                            [
                                leaf("max_link_width", "Max", r.get(d.max_pcie_link_width, x16)),
                                leaf(
                                    "current_link_width",
                                    "Current",
                                    r.get(d.curr_pcie_link_width, x16),
                                ),
                            ],
                        ),
                    ],
                ),
                group(
                    "pci_bridge_chip",
                    "Bridge Chip",
                    [leaf("bridge_chip_type", "Type", NA), leaf("bridge_chip_fw", "Firmware", NA)],
                ),
                leaf("replay_counter", "Replays Since Reset", r.get(d.pcie_replay_counter)),
                leaf(
                    "replay_rollover_counter",
                    "Replay Number Rollovers",
                    r.get(lambda: d.field_value(FI_PCIE_REPLAY_ROLLOVER), lambda v: str(int(v))),
                ),
                leaf(
                    "tx_util",
                    "Tx Throughput",
                    r.get(lambda: d.pcie_throughput(PCIE_UTIL_TX), lambda v: f"{v} KB/s"),
                ),
                leaf(
                    "rx_util",
                    "Rx Throughput",
                    r.get(lambda: d.pcie_throughput(PCIE_UTIL_RX), lambda v: f"{v} KB/s"),
                ),
                leaf("atomic_caps_outbound", "Atomic Caps Outbound", NA),
                leaf("atomic_caps_inbound", "Atomic Caps Inbound", NA),
            ],
        )

    def _reasons(self) -> Node:
        got = self.r.raw(self.d.clocks_event_reasons)
        children = []
        for tag, label, bit, indent in REASONS:
            if isinstance(got, NvmlError):
                value = self.r.err(got)
            else:
                value = "Active" if got & bit else "Not Active"
            children.append(leaf(tag, label, value, indent=indent))
        return group("clocks_event_reasons", "Clocks Event Reasons", children)

    def _reason_counters(self) -> Node:
        children = []
        for tag, label, fid in REASON_COUNTERS:
            value = self.r.get(partial(self.d.field_value, fid), lambda v: f"{int(v) // 1000} us")
            children.append(leaf(tag, label, value))
        return group("clocks_event_reasons_counters", "Clocks Event Reasons Counters", children)

    def _memory(self) -> list[Node]:
        r, d = self.r, self.d
        mem = r.raw(d.memory_info)
        if isinstance(mem, NvmlError):
            total = reserved = used = free = r.err(mem)
        else:
            total, reserved, used, free = (
                mib(mem.total),
                mib(mem.reserved),
                mib(mem.used),
                mib(mem.free),
            )
        bar1 = r.raw(d.bar1_memory_info)
        if isinstance(bar1, NvmlError):
            b_total = b_used = b_free = r.err(bar1)
        else:
            b_total, b_used, b_free = mib(bar1.bar1Total), mib(bar1.bar1Used), mib(bar1.bar1Free)
        cc = r.raw(d.conf_compute_mem_size)
        if isinstance(cc, NvmlError):
            c_total = c_used = c_free = "0 MiB"
        else:
            protected = int(cc.protectedMemSizeKib) * 1024
            c_total, c_used, c_free = mib(protected), "0 MiB", mib(protected)

        def three(t: str, u: str, f: str) -> list[Node]:
            return [leaf("total", "Total", t), leaf("used", "Used", u), leaf("free", "Free", f)]

        return [
            group(
                "fb_memory_usage",
                "FB Memory Usage",
                [
                    leaf("total", "Total", total),
                    leaf("reserved", "Reserved", reserved),
                    leaf("used", "Used", used),
                    leaf("free", "Free", free),
                ],
            ),
            group("bar1_memory_usage", "BAR1 Memory Usage", three(b_total, b_used, b_free)),
            group(
                "cc_protected_memory_usage",
                "Conf Compute Protected Memory Usage",
                three(c_total, c_used, c_free),
            ),
        ]

    def _utilization(self) -> Node:
        r, d = self.r, self.d
        util = r.raw(d.utilization)
        if isinstance(util, NvmlError):
            gpu = mem = r.err(util)
        else:
            gpu, mem = pct(util.gpu), pct(util.memory)

        def engine(name: str) -> str:
            return r.get(lambda: d.engine_utilization(name), pct)

        return group(
            "utilization",
            "Utilization",
            [
                leaf("gpu_util", "GPU", gpu),
                leaf("memory_util", "Memory", mem),
                leaf("encoder_util", "Encoder", engine("nvmlDeviceGetEncoderUtilization")),
                leaf("decoder_util", "Decoder", engine("nvmlDeviceGetDecoderUtilization")),
                leaf("jpeg_util", "JPEG", engine("nvmlDeviceGetJpgUtilization")),
                leaf("ofa_util", "OFA", engine("nvmlDeviceGetOfaUtilization")),
            ],
        )

    def _stats(self, tag: str, label: str, fn: Callable[[], tuple[int, int, int]]) -> Node:
        got = self.r.raw(fn)
        vals = [self.r.err(got)] * 3 if isinstance(got, NvmlError) else [str(x) for x in got]
        return group(
            tag,
            label,
            [
                leaf("session_count", "Active Sessions", vals[0]),
                leaf("average_fps", "Average FPS", vals[1]),
                leaf("average_latency", "Average Latency", vals[2]),
            ],
        )

    def _ecc_errors(self) -> Node:
        r, d = self.r, self.d
        ecc = r.raw(d.ecc_mode)
        ecc_on = not isinstance(ecc, NvmlError) and bool(ecc[0])

        def counter(err: int, kind: int, loc: int) -> str:
            if not ecc_on:
                return NA
            return r.get(lambda: d.memory_error_counter(err, kind, loc))

        new_layout = not isinstance(self._arch, NvmlError) and self._arch >= ARCH_AMPERE
        children: list[Node] = []
        if new_layout:
            sram = r.raw(d.sram_ecc_error_status)

            def s(attr: str) -> str:
                if not ecc_on:
                    return NA
                if isinstance(sram, NvmlError):
                    return r.err(sram)
                return str(getattr(sram, attr))

            for tag, label, kind in (
                ("volatile", "Volatile", ECC_VOLATILE),
                ("aggregate", "Aggregate", ECC_AGGREGATE),
            ):
                prefix = "volatile" if kind == ECC_VOLATILE else "aggregate"
                rows = [
                    leaf("sram_correctable", "SRAM Correctable", s(f"{prefix}Cor")),
                    leaf(
                        "sram_uncorrectable_parity",
                        "SRAM Uncorrectable Parity",
                        s(f"{prefix}UncParity"),
                    ),
                    leaf(
                        "sram_uncorrectable_secded",
                        "SRAM Uncorrectable SEC-DED",
                        s(f"{prefix}UncSecDed"),
                    ),
                    leaf(
                        "dram_correctable",
                        "DRAM Correctable",
                        counter(ECC_CORRECTED, kind, MEM_LOC_DRAM),
                    ),
                    leaf(
                        "dram_uncorrectable",
                        "DRAM Uncorrectable",
                        counter(ECC_UNCORRECTED, kind, MEM_LOC_DRAM),
                    ),
                ]
                if kind == ECC_AGGREGATE:
                    thr = s("bThresholdExceeded")
                    rows.append(
                        leaf(
                            "sram_threshold_exceeded",
                            "SRAM Threshold Exceeded",
                            yes_no(int(thr)) if thr.isdigit() else thr,
                        )
                    )
                children.append(group(tag, label, rows))
            children.append(
                group(
                    "aggregate_uncorrectable_sram_sources",
                    "Aggregate Uncorrectable SRAM Sources",
                    [
                        leaf("sram_l2", "SRAM L2", s("aggregateUncBucketL2")),
                        leaf("sram_sm", "SRAM SM", s("aggregateUncBucketSm")),
                        leaf(
                            "sram_microcontroller",
                            "SRAM Microcontroller",
                            s("aggregateUncBucketMcu"),
                        ),
                        leaf("sram_pcie", "SRAM PCIE", s("aggregateUncBucketPcie")),
                        leaf("sram_other", "SRAM Other", s("aggregateUncBucketOther")),
                    ],
                )
            )
            if self.gen.v13:
                rep = r.raw(d.repair_status)
                if isinstance(rep, NvmlError):
                    ch = tpc = r.err(rep)
                else:
                    ch, tpc = yes_no(rep.bChannelRepairPending), yes_no(rep.bTpcRepairPending)
                children.append(leaf("channel_repair_pending", "Channel Repair Pending", ch))
                children.append(leaf("tpc_repair_pending", "TPC Repair Pending", tpc))
            if self.gen.late580:
                children.append(
                    leaf(
                        "unrepairable_memory",
                        "Unrepairable Memory",
                        r.get(d.unrepairable_memory, yes_no),
                    )
                )
        else:
            for tag, label, kind in (
                ("volatile", "Volatile", ECC_VOLATILE),
                ("aggregate", "Aggregate", ECC_AGGREGATE),
            ):
                children.append(
                    group(
                        tag,
                        label,
                        [
                            leaf(
                                "sram_correctable",
                                "SRAM Correctable",
                                counter(ECC_CORRECTED, kind, MEM_LOC_SRAM),
                            ),
                            leaf(
                                "sram_uncorrectable",
                                "SRAM Uncorrectable",
                                counter(ECC_UNCORRECTED, kind, MEM_LOC_SRAM),
                            ),
                            leaf(
                                "dram_correctable",
                                "DRAM Correctable",
                                counter(ECC_CORRECTED, kind, MEM_LOC_DRAM),
                            ),
                            leaf(
                                "dram_uncorrectable",
                                "DRAM Uncorrectable",
                                counter(ECC_UNCORRECTED, kind, MEM_LOC_DRAM),
                            ),
                        ],
                    )
                )
        return group("ecc_errors", "ECC Errors", children)

    def _retired_pages(self) -> Node:
        r, d = self.r, self.d

        def block(tag: str, label: str, cause: int) -> Node:
            got = r.raw(lambda: d.retired_pages_count(cause))
            if isinstance(got, NvmlError):
                count = r.err(got)
                pagelist = leaf("retired_pagelist", None, count)
            else:
                count = str(got)
                pagelist = Node("retired_pagelist", None, children=[])
            return Node(
                tag, label, children=[leaf("retired_count", None, count), pagelist], text=count
            )

        pending = r.get(d.retired_pages_pending, yes_no)
        return group(
            "retired_pages",
            "Retired Pages",
            [
                block(
                    "multiple_single_bit_retirement", "Single Bit ECC", PAGE_RETIREMENT_MULTIPLE_SBE
                ),
                block("double_bit_retirement", "Double Bit ECC", PAGE_RETIREMENT_DBE),
                leaf("pending_blacklist", "Pending Page Blacklist", pending),
                leaf("pending_retirement", None, pending),
            ],
        )

    def _remapped_rows(self) -> Node:
        r, d = self.r, self.d
        rows = r.raw(d.remapped_rows)
        if isinstance(rows, NvmlError):
            return leaf("remapped_rows", "Remapped Rows", r.err(rows))
        corr, unc, pending, failure = rows
        children = [leaf("remapped_row_corr", "Correctable Error", str(corr))]
        inactive = r.raw(d.remapped_rows_v2)
        if self.gen.late580:
            c_in = (
                r.err(inactive)
                if isinstance(inactive, NvmlError)
                else str(inactive.corrInactiveRemaps)
            )
            children.append(
                leaf("remapped_row_corr_inactive", "Correctable Error (Inactive)", c_in)
            )
        children.append(leaf("remapped_row_unc", "Uncorrectable Error", str(unc)))
        if self.gen.late580:
            u_in = (
                r.err(inactive)
                if isinstance(inactive, NvmlError)
                else str(inactive.uncInactiveRemaps)
            )
            children.append(
                leaf("remapped_row_unc_inactive", "Uncorrectable Error (Inactive)", u_in)
            )
        children += [
            leaf("remapped_row_pending", "Pending", yes_no(pending)),
            leaf("remapped_row_failure", "Remapping Failure Occurred", yes_no(failure)),
        ]
        hist = r.raw(d.row_remapper_histogram)
        names = (
            ("max", "Max"),
            ("high", "High"),
            ("partial", "Partial"),
            ("low", "Low"),
            ("none", "None"),
        )
        hist_nodes = [
            leaf(
                f"row_remapper_histogram_{key}",
                label,
                r.err(hist) if isinstance(hist, NvmlError) else f"{getattr(hist, key)} bank(s)",
            )
            for key, label in names
        ]
        children.append(
            group("row_remapper_histogram", "Bank Remap Availability Histogram", hist_nodes)
        )
        return group("remapped_rows", "Remapped Rows", children)

    def _temperature(self) -> Node:
        r, d, g = self.r, self.d, self.gen
        current = leaf("gpu_temp", "GPU Current Temp", r.get(d.temperature, celsius))
        margin = r.raw(d.margin_temperature)
        tlimit = leaf(
            "gpu_temp_tlimit",
            "GPU T.Limit Temp",
            r.err(margin) if isinstance(margin, NvmlError) else celsius(margin),
        )
        target = leaf(
            "gpu_target_temperature",
            "GPU Target Temperature",
            r.get(lambda: d.temperature_threshold(5), celsius),
        )
        mem_temp = leaf(
            "memory_temp",
            "Memory Current Temp",
            r.get(lambda: d.field_value(FI_MEMORY_TEMP), lambda v: celsius(int(v))),
        )
        # Boards that report a T.Limit margin get thresholds relative to it, under other names.
        if g.v13 and not isinstance(margin, NvmlError):
            gpu_max = r.raw(lambda: d.temperature_threshold(TEMP_THRESHOLD_GPU_MAX))
            mem_max = r.raw(lambda: d.temperature_threshold(TEMP_THRESHOLD_MEM_MAX))

            def rel(kind: int) -> str:
                if isinstance(gpu_max, NvmlError):
                    return r.err(gpu_max)
                got = r.raw(lambda: d.temperature_threshold(kind))
                return r.err(got) if isinstance(got, NvmlError) else celsius(gpu_max - got)

            mem_rel = r.err(mem_max) if isinstance(mem_max, NvmlError) else celsius(0)
            return group(
                "temperature",
                "Temperature",
                [
                    current,
                    tlimit,
                    leaf(
                        "gpu_temp_max_tlimit_threshold",
                        "GPU Shutdown T.Limit Temp",
                        rel(TEMP_THRESHOLD_SHUTDOWN),
                    ),
                    leaf(
                        "gpu_temp_slow_tlimit_threshold",
                        "GPU Slowdown T.Limit Temp",
                        rel(TEMP_THRESHOLD_SLOWDOWN),
                    ),
                    leaf(
                        "gpu_temp_max_gpu_tlimit_threshold",
                        "GPU Max Operating T.Limit Temp",
                        rel(TEMP_THRESHOLD_GPU_MAX),
                    ),
                    target,
                    mem_temp,
                    leaf(
                        "gpu_temp_max_mem_tlimit_threshold",
                        "Memory Max Operating T.Limit Temp",
                        mem_rel,
                    ),
                ],
            )

        def absolute(kind: int) -> str:
            return r.get(lambda: d.temperature_threshold(kind), celsius)

        return group(
            "temperature",
            "Temperature",
            [
                current,
                tlimit,
                leaf(
                    "gpu_temp_max_threshold", "GPU Shutdown Temp", absolute(TEMP_THRESHOLD_SHUTDOWN)
                ),
                leaf(
                    "gpu_temp_slow_threshold",
                    "GPU Slowdown Temp",
                    absolute(TEMP_THRESHOLD_SLOWDOWN),
                ),
                leaf(
                    "gpu_temp_max_gpu_threshold",
                    "GPU Max Operating Temp",
                    absolute(TEMP_THRESHOLD_GPU_MAX),
                ),
                target,
                mem_temp,
                leaf(
                    "gpu_temp_max_mem_threshold",
                    "Memory Max Operating Temp",
                    absolute(TEMP_THRESHOLD_MEM_MAX),
                ),
            ],
        )

    def _target_temp(self) -> Node:
        r, d = self.r, self.d
        node = group(
            "supported_gpu_target_temp",
            "Supported GPU Target Temp",
            [
                leaf(
                    "gpu_target_temp_min",
                    "GPU Target Temp Min",
                    r.get(lambda: d.temperature_threshold(4), celsius),
                ),
                leaf(
                    "gpu_target_temp_max",
                    "GPU Target Temp Max",
                    r.get(lambda: d.temperature_threshold(6), celsius),
                ),
            ],
        )
        node.text_only_with = "SUPPORTED_GPU_TARGET_TEMP"
        return node

    def _power(self) -> list[Node]:
        r, d = self.r, self.d
        state = r.get(d.power_state, pstate)
        instant = r.raw(lambda: d.field_value(FI_POWER_INSTANT))
        instant_s = (
            watts(instant) if not isinstance(instant, NvmlError) else r.get(d.power_usage, watts)
        )
        limits = r.raw(d.power_limit_constraints)
        lo, hi = (
            (r.err(limits),) * 2
            if isinstance(limits, NvmlError)
            else (watts(limits[0]), watts(limits[1]))
        )
        gpu = group(
            "gpu_power_readings",
            "GPU Power Readings",
            [
                leaf("power_state", None, state),
                leaf(
                    "average_power_draw",
                    "Average Power Draw",
                    r.get(lambda: d.field_value(FI_POWER_AVERAGE), watts),
                ),
                leaf("instant_power_draw", "Instantaneous Power Draw", instant_s),
                leaf(
                    "current_power_limit",
                    "Current Power Limit",
                    r.get(d.enforced_power_limit, watts),
                ),
                leaf("requested_power_limit", "Requested Power Limit", r.get(d.power_limit, watts)),
                leaf(
                    "default_power_limit",
                    "Default Power Limit",
                    r.get(d.default_power_limit, watts),
                ),
                leaf("min_power_limit", "Min Power Limit", lo),
                leaf("max_power_limit", "Max Power Limit", hi),
            ],
        )

        def scoped(field: int, scope: int) -> str:
            return r.get(lambda: d.field_value(field, scope), watts)

        mem, mod = POWER_SCOPE_MEMORY, POWER_SCOPE_MODULE
        memory = group(
            "gpu_memory_power_readings",
            "GPU Memory Power Readings ",
            [
                leaf("average_power_draw", "Average Power Draw", scoped(FI_POWER_AVERAGE, mem)),
                leaf(
                    "instant_power_draw",
                    "Instantaneous Power Draw",
                    scoped(FI_POWER_INSTANT, mem),
                ),
            ],
        )
        module = group(
            "module_power_readings",
            "Module Power Readings",
            [
                leaf("power_state", None, state),
                leaf("average_power_draw", "Average Power Draw", scoped(FI_POWER_AVERAGE, mod)),
                leaf(
                    "instant_power_draw",
                    "Instantaneous Power Draw",
                    scoped(FI_POWER_INSTANT, mod),
                ),
                leaf(
                    "current_power_limit",
                    "Current Power Limit",
                    scoped(FI_POWER_CURRENT_LIMIT, mod),
                ),
                leaf(
                    "requested_power_limit",
                    "Requested Power Limit",
                    scoped(FI_POWER_REQUESTED_LIMIT, mod),
                ),
                leaf(
                    "default_power_limit",
                    "Default Power Limit",
                    scoped(FI_POWER_DEFAULT_LIMIT, mod),
                ),
                leaf("min_power_limit", "Min Power Limit", scoped(FI_POWER_MIN_LIMIT, mod)),
                leaf("max_power_limit", "Max Power Limit", scoped(FI_POWER_MAX_LIMIT, mod)),
            ],
        )
        nodes = [
            gpu,
            memory,
            module,
            leaf("power_smoothing", "Power Smoothing", NA),
            group(
                "power_profiles",
                "Workload Power Profiles",
                [
                    leaf("power_profile_requested_profiles", "Requested Profiles", NA),
                    leaf("power_profile_enforced_profiles", "Enforced Profiles", NA),
                ],
            ),
        ]
        if self.gen.edpp:
            nodes.append(
                leaf(
                    "edpp_multiplier",
                    "EDPp Multiplier",
                    r.get(lambda: d.field_value(FI_EDPP_MULTIPLIER), lambda v: f"{int(v)} %"),
                )
            )
        return nodes

    def _clocks(self) -> list[Node]:
        r, d = self.r, self.d

        def four(fn: Callable[[int], int]) -> list[Node]:
            return [
                leaf("graphics_clock", "Graphics", r.get(lambda: fn(CLOCK_GRAPHICS), mhz)),
                leaf("sm_clock", "SM", r.get(lambda: fn(CLOCK_SM), mhz)),
                leaf("mem_clock", "Memory", r.get(lambda: fn(CLOCK_MEM), mhz)),
                leaf("video_clock", "Video", r.get(lambda: fn(CLOCK_VIDEO), mhz)),
            ]

        def two(fn: Callable[[int], int]) -> list[Node]:
            return [
                leaf("graphics_clock", "Graphics", r.get(lambda: fn(CLOCK_GRAPHICS), mhz)),
                leaf("mem_clock", "Memory", r.get(lambda: fn(CLOCK_MEM), mhz)),
            ]

        boost = r.raw(d.auto_boosted_clocks)

        def on_off(v: int) -> str:
            return "On" if v else "Off"

        ab, abd = (
            (r.err(boost),) * 2
            if isinstance(boost, NvmlError)
            else (on_off(boost[0]), on_off(boost[1]))
        )
        nodes = [
            group("clocks", "Clocks", four(d.clock_info)),
            group("applications_clocks", "Applications Clocks", two(d.applications_clock)),
            group(
                "default_applications_clocks",
                "Default Applications Clocks",
                two(d.default_applications_clock),
            ),
            group("deferred_clocks", "Deferred Clocks", [leaf("mem_clock", "Memory", NA)]),
            group("max_clocks", "Max Clocks", four(d.max_clock_info)),
            group(
                "max_customer_boost_clocks",
                "Max Customer Boost Clocks",
                [
                    leaf(
                        "graphics_clock",
                        "Graphics",
                        r.get(lambda: d.max_customer_boost_clock(CLOCK_GRAPHICS), mhz),
                    )
                ],
            ),
            group(
                "clock_policy",
                "Clock Policy",
                [
                    leaf("auto_boost", "Auto Boost", ab),
                    leaf("auto_boost_default", "Auto Boost Default", abd),
                ],
            ),
        ]
        if not self.gen.v13:
            nodes.append(group("voltage", "Voltage", [leaf("graphics_volt", "Graphics", NA)]))
        return nodes

    def _fabric(self) -> Node:
        r, g = self.r, self.gen
        info = r.raw(self.d.fabric_info)
        if isinstance(info, NvmlError):
            na = r.err(info)
            state = status = clique = uuid = summary = na
            bw = rr = ru = at = ic = pa = na
        else:
            state = FABRIC_STATES.get(int(info.state), NA)
            done = int(info.state) == 3
            status = self.d.nvml.error_string(int(info.status)) if done else NA
            clique = str(info.cliqueId) if done else NA
            uuid = fabric_uuid(info.clusterUuid) if done else NA
            mask = int(info.healthMask)
            summary = FABRIC_SUMMARY.get(int(info.healthSummary), NA)
            bw = BANDWIDTH.get(mask & 0x3, NA)
            rr = TRUE_FALSE.get((mask >> 2) & 0x3, NA)
            ru = TRUE_FALSE.get((mask >> 4) & 0x3, NA)
            at = TRUE_FALSE.get((mask >> 6) & 0x3, NA)
            ic = INCORRECT_CONFIG.get((mask >> 8) & 0xF, NA)
            pa = TRUE_FALSE.get((mask >> 12) & 0x3, NA)
        health: list[Node] = []
        if g.v13:
            health.append(leaf("summary", "Summary", summary))
        health += [
            leaf("bandwidth", "Bandwidth", bw),
            leaf("route_recovery_in_progress", "Route Recovery in progress", rr),
            leaf("route_unhealthy", "Route Unhealthy", ru),
            leaf("access_timeout_recovery", "Access Timeout Recovery", at),
        ]
        if g.v13:
            health.append(leaf("incorrect_configuration", "Incorrect Configuration", ic))
        if g.late580:
            health.append(leaf("partition_assigned", "Partition Assigned", pa))
        return group(
            "fabric",
            "Fabric",
            [
                leaf("state", "State", state),
                leaf("status", "Status", status),
                leaf("cliqueId", "CliqueId", clique),
                leaf("clusterUuid", "ClusterUUID", uuid),
                group("health", "Health", health),
            ],
        )

    def _supported_clocks(self) -> Node:
        r, d = self.r, self.d
        mems = r.raw(d.supported_memory_clocks)
        if isinstance(mems, NvmlError) or not mems:
            node = leaf(
                "supported_clocks",
                "Supported Clocks",
                r.err(mems) if isinstance(mems, NvmlError) else NA,
            )
        else:
            blocks = []
            for mem in mems:
                gfx = r.raw(partial(d.supported_graphics_clocks, mem))
                kids = [leaf("value", None, mhz(mem))]
                if isinstance(gfx, NvmlError):
                    kids.append(leaf("supported_graphics_clock", "Graphics", r.err(gfx), indent=4))
                else:
                    kids += [
                        leaf("supported_graphics_clock", "Graphics", mhz(g), indent=4) for g in gfx
                    ]
                blocks.append(
                    Node("supported_mem_clock", "Memory", value=None, children=kids, text=mhz(mem))
                )
            node = group("supported_clocks", "Supported Clocks", blocks)
        node.text_only_with = "SUPPORTED_CLOCKS"
        return node

    def _processes(self) -> Node:
        procs = process_rows(self.d)
        if isinstance(procs, str):
            return Node("processes", "Processes", value=procs)
        children = []
        for proc in procs:
            children.append(
                Node(
                    "process_info",
                    None,
                    children=[
                        leaf("gpu_instance_id", "GPU instance ID", proc.gi),
                        leaf("compute_instance_id", "Compute instance ID", proc.ci),
                        leaf("pid", "Process ID", str(proc.pid)),
                        leaf("type", "Type", proc.kind, indent=4),
                        leaf("process_name", "Name", proc.name, indent=4),
                        leaf("used_memory", "Used GPU Memory", proc.memory, indent=4),
                    ],
                )
            )
        return Node("processes", "Processes", children=children, text=None if children else "None")

    def _egm(self) -> str:
        caps = (c_uint * 2)(8 | (1 << 24), 0)
        try:
            self.d.nvml.call("nvmlDeviceGetCapabilities", self.d.handle, caps)
        except NvmlError as exc:
            return self.r.err(exc)
        return "enabled" if caps[1] & 1 else "disabled"

    @staticmethod
    def _assign_sections(nodes: list[Node]) -> None:
        for node in nodes:
            node.section = SECTIONS.get(node.tag)
