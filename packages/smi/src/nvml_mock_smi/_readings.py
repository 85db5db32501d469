"""The NVML reads behind ``-q``: one GPU's answers as display text, keyed by element path.

This module only asks NVML and formats each answer; where each value goes, and which driver
shows it, is :mod:`._layout`'s. A fact is keyed by the element path of the layout
(``mig_mode/current_mig``); a group's own path set to a string stands for the whole group
(the real tool prints one error for ``Remapped Rows`` when the board has no remapper); a
repeated element's path holds a list (of item fact maps, or of strings for a repeated leaf);
``None`` is an empty element. The flags say which board layout applies (``tlimit``: the
board reports a T.Limit margin; ``sram_ecc``: Ampere and later's SRAM ECC counters).

What a board supports is read from NVML, as the real tool does: an answer of
``NVML_ERROR_NOT_SUPPORTED`` prints ``N/A`` and any other error the library's error string.
"""

from __future__ import annotations

from ctypes import byref, c_ulong, c_ulonglong

from ._layout import REASONS
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
    FI_PCIE_INBOUND_ATOMICS_MASK,
    FI_PCIE_OUTBOUND_ATOMICS_MASK,
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

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Fact = str | list[Any] | None
    Facts = dict[str, Fact]

FI_MEMORY_TEMP = 82
FI_PCIE_REPLAY_ROLLOVER = 95
ARCH_AMPERE = 7
REASON_FIELDS = (
    FI_PERF_POLICY_POWER,
    FI_PERF_POLICY_SYNC_BOOST,
    FI_CLOCKS_EVENT_SW_THERM,
    FI_CLOCKS_EVENT_HW_THERM,
    FI_CLOCKS_EVENT_HW_POWER_BRAKE,
)
"""The field ids behind :data:`._layout.REASON_COUNTERS`, in its order."""


REPORT_FIELDS = (
    (FI_GPU_RECOVERY_ACTION, 0),
    (FI_PCIE_REPLAY_ROLLOVER, 0),
    (FI_PCIE_OUTBOUND_ATOMICS_MASK, 0),
    (FI_PCIE_INBOUND_ATOMICS_MASK, 0),
    *((fid, 0) for fid in REASON_FIELDS),
    (FI_MEMORY_TEMP, 0),
    (FI_POWER_INSTANT, 0),
    (FI_POWER_AVERAGE, 0),
    *(
        (fid, scope)
        for scope in (POWER_SCOPE_MEMORY, POWER_SCOPE_MODULE)
        for fid in (
            FI_POWER_AVERAGE,
            FI_POWER_INSTANT,
            FI_POWER_CURRENT_LIMIT,
            FI_POWER_REQUESTED_LIMIT,
            FI_POWER_DEFAULT_LIMIT,
            FI_POWER_MIN_LIMIT,
            FI_POWER_MAX_LIMIT,
        )
    ),
    (FI_EDPP_MULTIPLIER, 0),
)
"""Every ``(field, scope)`` the report reads, asked in one call per GPU
(:meth:`._nvml.Device.prefetch_fields`); a field missing here is still read, on its own."""


ATOMICS = ("FETCHADD_32", "FETCHADD_64", "SWAP_32", "SWAP_64", "CAS_32", "CAS_64", "CAS_128")
"""``NVML_PCIE_ATOMICS_CAP_*``, bit 0 first."""


def atomic_caps(mask: float) -> str:
    """A PCIe atomics mask as the real tool prints it: each name followed by a space."""
    return "".join(f"{name} " for bit, name in enumerate(ATOMICS) if int(mask) >> bit & 1)


def err(exc: NvmlError) -> str:
    """An NVML error as the real tool prints it in a report."""
    return NA if exc.code == ERROR_NOT_SUPPORTED else exc.text


def get(fn: Callable[[], Any], fmt: Callable[[Any], str] = str) -> str:
    """``fmt`` of the answer, or the error's text."""
    try:
        return fmt(fn())
    except NvmlError as exc:
        return err(exc)


def bind(fn: Callable[[Any], Any], arg: Any) -> Callable[[], Any]:
    """``functools.partial(fn, arg)`` without importing functools (and the collections it
    loads), which would cost each ``-q`` run a millisecond or two."""
    return lambda: fn(arg)


def raw(fn: Callable[[], Any]) -> Any:
    """The answer, or the :class:`NvmlError` itself (callers render both)."""
    try:
        return fn()
    except NvmlError as exc:
        return exc


class Readings:
    """The facts and flags of one GPU (see the module docstring)."""

    def __init__(self, device: Device) -> None:
        self.d = device
        self.facts: Facts = {}
        self.flags: set[str] = set()
        self.arch = raw(device.architecture)
        self.pci = raw(device.pci_info)
        device.prefetch_fields(REPORT_FIELDS)

    @property
    def bus_id(self) -> str:
        if isinstance(self.pci, NvmlError):
            return NA
        return str(self.pci.busId.decode())

    def read(self) -> Readings:
        """Ask NVML for everything the report may show; return ``self``."""
        for step in (
            self._identity,
            self._platform,
            self._inforom,
            self._modes,
            self._pci_facts,
            self._performance,
            self._memory,
            self._utilization,
            self._ecc,
            self._retired_pages,
            self._remapped_rows,
            self._temperature,
            self._power,
            self._clocks,
            self._fabric,
            self._supported_clocks,
            self._processes,
            self._mig_devices,
        ):
            step()
        return self

    # --- helpers ------------------------------------------------------------------------

    def _set(self, prefix: str, **values: Fact) -> None:
        for key, value in values.items():
            self.facts[f"{prefix}/{key}" if prefix else key] = value

    def _pair(
        self,
        tag: str,
        fn: Callable[[], tuple[int, int]],
        tags: tuple[str, str],
        fmt: Callable[[int], str],
    ) -> None:
        got = raw(fn)
        if isinstance(got, NvmlError):
            cur = pend = err(got)
        else:
            cur, pend = fmt(got[0]), fmt(got[1])
        self.facts[f"{tag}/{tags[0]}"] = cur
        self.facts[f"{tag}/{tags[1]}"] = pend

    # --- sections -----------------------------------------------------------------------

    def _identity(self) -> None:
        d = self.d
        arch = self.arch
        self._set(
            "",
            product_name=get(d.name),
            product_brand=get(d.brand, lambda v: BRANDS.get(v, "Unknown")),
            product_architecture=NA
            if isinstance(arch, NvmlError)
            else ARCHITECTURES.get(arch, "Unknown"),
            display_mode=get(d.display_mode, enabled),
            display_attached=get(d.display_mode, yes_no),
            display_active=get(d.display_active, enabled),
            persistence_mode=get(d.persistence_mode, enabled),
            addressing_mode=get(d.addressing_mode, lambda v: ADDRESSING.get(v, NA)),
            accounting_mode=get(d.accounting_mode, enabled),
            accounting_mode_buffer_size=get(d.accounting_buffer_size),
            serial=get(d.serial),
            uuid=get(d.uuid),
            pdi=get(d.pdi, lambda v: f"0x{v:016x}"),
            minor_number=get(d.minor_number),
            vbios_version=get(d.vbios_version),
            multigpu_board=get(d.multi_gpu_board, yes_no),
            board_id=get(d.board_id, lambda v: f"0x{v:x}"),
            board_part_number=get(d.board_part_number),
            gpu_part_number=get(d.gpu_part_number),
            gpu_fru_part_number=NA,
        )
        self._pair("mig_mode", d.mig_mode, ("current_mig", "pending_mig"), enabled)
        self._pair("driver_model", d.driver_model, ("current_dm", "pending_dm"), str)

    def _platform(self) -> None:
        d = self.d
        info = raw(d.platform_info)
        module = get(d.module_id)
        if isinstance(info, NvmlError):
            chassis = slot = tray = host = peer = guid = err(info)
        else:
            chassis = decode_bytes(info.chassisSerialNumber)
            slot, tray = platform_slot(info.slotNumber), platform_slot(info.trayIndex)
            host = str(info.hostId)
            peer = PEER_TYPES.get(int(info.peerType), NA)
            guid = "0x" + bytes(info.ibGuid)[:8].hex()
            module = str(info.moduleId)
        self._set(
            "platformInfo",
            chassis_serial_number=chassis,
            slot_number=slot,
            tray_index=tray,
            host_id=host,
            peer_type=peer,
            module_id=module,
            gpu_fabric_guid=guid,
        )
        self.facts["module_id"] = module

    def _inforom(self) -> None:
        d = self.d
        self._set(
            "inforom_version",
            img_version=get(d.inforom_image_version),
            oem_object=get(lambda: d.inforom_version(INFOROM_OEM)),
            ecc_object=get(lambda: d.inforom_version(INFOROM_ECC)),
            pwr_object=get(lambda: d.inforom_version(INFOROM_POWER)),
        )
        ts, dur = c_ulonglong(), c_ulong()
        try:
            d.nvml.call("nvmlDeviceGetLastBBXFlushTime", d.handle, byref(ts), byref(dur))
            stamp_s, dur_s = timestamp_us(ts.value), f"{dur.value} us"
        except NvmlError as exc:
            stamp_s = dur_s = err(exc)
        self._set("inforom_bbx_flush", latest_timestamp=stamp_s, latest_duration=dur_s)

    def _modes(self) -> None:
        d = self.d
        self._pair(
            "gpu_operation_mode",
            d.gpu_operation_mode,
            ("current_gom", "pending_gom"),
            lambda v: GOM.get(v, NA),
        )
        self.facts["c2c_mode"] = get(d.c2c_mode, enabled)
        self._set(
            "gpu_virtualization_mode",
            virtualization_mode=get(d.virtualization_mode, lambda v: VIRTUALIZATION.get(v, NA)),
            host_vgpu_mode=get(d.host_vgpu_mode, lambda v: "SR-IOV" if v else "Non SR-IOV"),
            vgpu_heterogeneous_mode=NA,
        )
        self._set("gpu_reset_status", reset_required="No", drain_and_reset_recommended="No")
        self._set(
            "",
            gpu_recovery_action=get(
                lambda: d.field_value(FI_GPU_RECOVERY_ACTION), lambda v: RECOVERY.get(int(v), NA)
            ),
            gsp_firmware_version=get(d.gsp_firmware_version),
            fan_speed=get(d.fan_speed, pct),
            compute_mode=get(d.compute_mode, lambda v: COMPUTE_MODES.get(v, NA)),
            sparse_operation_mode=get(d.sparse_operation_mode, enabled),
        )
        self.facts["ibmnpu/relaxed_ordering_mode"] = NA
        for tag, fn in (("encoder_stats", d.encoder_stats), ("fbc_stats", d.fbc_stats)):
            got = raw(fn)
            vals = [err(got)] * 3 if isinstance(got, NvmlError) else [str(x) for x in got]
            self._set(tag, session_count=vals[0], average_fps=vals[1], average_latency=vals[2])
        self._pair(
            "dram_encryption_mode",
            d.dram_encryption_mode,
            ("current_dram_encryption", "pending_dram_encryption"),
            enabled,
        )
        self._pair("ecc_mode", d.ecc_mode, ("current_ecc", "pending_ecc"), enabled)
        self.facts["capabilities/egm"] = self._egm()

    def _pci_facts(self) -> None:
        d, pci = self.d, self.pci
        ext = raw(d.pci_info_ext)
        if isinstance(pci, NvmlError):
            bus = dev = dom = did = sub = busid = err(pci)
            bus_t = dev_t = dom_t = did_t = sub_t = bus
        else:
            bus, dev, dom = f"{pci.bus:02X}", f"{pci.device:02X}", f"{pci.domain:04X}"
            did, sub = f"{pci.pciDeviceId:08X}", f"{pci.pciSubSystemId:08X}"
            busid = self.bus_id
            bus_t, dev_t, dom_t, did_t, sub_t = (f"0x{x}" for x in (bus, dev, dom, did, sub))
        if isinstance(ext, NvmlError):
            base = subc = err(ext)
            base_t = subc_t = base
        else:
            base, subc = f"{ext.baseClass:X}", f"{ext.subClass:X}"
            base_t, subc_t = f"0x{base}", f"0x{subc}"
        for tag, value, text in (
            ("pci_bus", bus, bus_t),
            ("pci_device", dev, dev_t),
            ("pci_domain", dom, dom_t),
            ("pci_base_class", base, base_t),
            ("pci_sub_class", subc, subc_t),
            ("pci_device_id", did, did_t),
            ("pci_sub_system_id", sub, sub_t),
        ):
            self.facts[f"pci/{tag}"] = value
            self.facts[f"pci/{tag}#text"] = text

        def x16(v: int) -> str:
            return f"{v}x"

        self._set(
            "pci",
            pci_bus_id=busid,
            replay_counter=get(d.pcie_replay_counter),
            replay_rollover_counter=get(
                lambda: d.field_value(FI_PCIE_REPLAY_ROLLOVER), lambda v: str(int(v))
            ),
            tx_util=get(lambda: d.pcie_throughput(PCIE_UTIL_TX), lambda v: f"{v} KB/s"),
            rx_util=get(lambda: d.pcie_throughput(PCIE_UTIL_RX), lambda v: f"{v} KB/s"),
            atomic_caps_outbound=get(
                lambda: d.field_value(FI_PCIE_OUTBOUND_ATOMICS_MASK), atomic_caps
            ),
            atomic_caps_inbound=get(
                lambda: d.field_value(FI_PCIE_INBOUND_ATOMICS_MASK), atomic_caps
            ),
        )
        self._set(
            "pci/pci_gpu_link_info/pcie_gen",
            max_link_gen=get(d.max_pcie_link_generation),
            current_link_gen=get(d.curr_pcie_link_generation),
            device_current_link_gen=get(d.curr_pcie_link_generation),
            max_device_link_gen=get(d.gpu_max_pcie_link_generation),
            max_host_link_gen=NA,
        )
        self._set(
            "pci/pci_gpu_link_info/link_widths",
            max_link_width=get(d.max_pcie_link_width, x16),
            current_link_width=get(d.curr_pcie_link_width, x16),
        )
        self._set("pci/pci_bridge_chip", bridge_chip_type=NA, bridge_chip_fw=NA)

    def _performance(self) -> None:
        d = self.d
        self.facts["performance_state"] = get(d.performance_state, pstate)
        got = raw(d.clocks_event_reasons)
        for tag, _, bit, _ in REASONS:
            if isinstance(got, NvmlError):
                value = err(got)
            else:
                value = "Active" if got & bit else "Not Active"
            self.facts[f"clocks_event_reasons/{tag}"] = value
        from ._layout import REASON_COUNTERS

        for (tag, _), fid in zip(REASON_COUNTERS, REASON_FIELDS, strict=True):
            value = get(bind(d.field_value, fid), lambda v: f"{int(v) // 1000} us")
            self.facts[f"clocks_event_reasons_counters/{tag}"] = value

    def _memory(self) -> None:
        d = self.d
        mem = raw(d.memory_info)
        if isinstance(mem, NvmlError):
            total = reserved = used = free = err(mem)
        else:
            total, reserved = mib(mem.total), mib(mem.reserved)
            used, free = mib(mem.used), mib(mem.free)
        self._set("fb_memory_usage", total=total, reserved=reserved, used=used, free=free)
        bar1 = raw(d.bar1_memory_info)
        if isinstance(bar1, NvmlError):
            b_total = b_used = b_free = err(bar1)
        else:
            b_total, b_used, b_free = mib(bar1.bar1Total), mib(bar1.bar1Used), mib(bar1.bar1Free)
        self._set("bar1_memory_usage", total=b_total, used=b_used, free=b_free)
        cc = raw(d.conf_compute_mem_size)
        if isinstance(cc, NvmlError):
            c_total = c_used = c_free = "0 MiB"
        else:
            protected = int(cc.protectedMemSizeKib) * 1024
            c_total, c_used, c_free = mib(protected), "0 MiB", mib(protected)
        self._set("cc_protected_memory_usage", total=c_total, used=c_used, free=c_free)

    def _utilization(self) -> None:
        d = self.d
        util = raw(d.utilization)
        if isinstance(util, NvmlError):
            gpu = mem = err(util)
        else:
            gpu, mem = pct(util.gpu), pct(util.memory)

        def engine(name: str) -> str:
            return get(lambda: d.engine_utilization(name), pct)

        self._set(
            "utilization",
            gpu_util=gpu,
            memory_util=mem,
            encoder_util=engine("nvmlDeviceGetEncoderUtilization"),
            decoder_util=engine("nvmlDeviceGetDecoderUtilization"),
            jpeg_util=engine("nvmlDeviceGetJpgUtilization"),
            ofa_util=engine("nvmlDeviceGetOfaUtilization"),
        )

    def _ecc(self) -> None:
        d = self.d
        ecc = raw(d.ecc_mode)
        ecc_on = not isinstance(ecc, NvmlError) and bool(ecc[0])

        def counter(error: int, kind: int, loc: int) -> str:
            if not ecc_on:
                return NA
            return get(lambda: d.memory_error_counter(error, kind, loc))

        for prefix, kind in (("volatile", ECC_VOLATILE), ("aggregate", ECC_AGGREGATE)):
            path = f"ecc_errors/{prefix}"
            self._set(
                path,
                dram_correctable=counter(ECC_CORRECTED, kind, MEM_LOC_DRAM),
                dram_uncorrectable=counter(ECC_UNCORRECTED, kind, MEM_LOC_DRAM),
            )
        if isinstance(self.arch, NvmlError) or self.arch < ARCH_AMPERE:
            for prefix, kind in (("volatile", ECC_VOLATILE), ("aggregate", ECC_AGGREGATE)):
                self._set(
                    f"ecc_errors/{prefix}",
                    sram_correctable=counter(ECC_CORRECTED, kind, MEM_LOC_SRAM),
                    sram_uncorrectable=counter(ECC_UNCORRECTED, kind, MEM_LOC_SRAM),
                )
            return
        self.flags.add("sram_ecc")
        sram = raw(d.sram_ecc_error_status)

        def s(attr: str) -> str:
            if not ecc_on:
                return NA
            if isinstance(sram, NvmlError):
                return err(sram)
            return str(getattr(sram, attr))

        for prefix in ("volatile", "aggregate"):
            self._set(
                f"ecc_errors/{prefix}",
                sram_correctable=s(f"{prefix}Cor"),
                sram_uncorrectable_parity=s(f"{prefix}UncParity"),
                sram_uncorrectable_secded=s(f"{prefix}UncSecDed"),
            )
        thr = s("bThresholdExceeded")
        self.facts["ecc_errors/aggregate/sram_threshold_exceeded"] = (
            yes_no(int(thr)) if thr.isdigit() else thr
        )
        self._set(
            "ecc_errors/aggregate_uncorrectable_sram_sources",
            sram_l2=s("aggregateUncBucketL2"),
            sram_sm=s("aggregateUncBucketSm"),
            sram_microcontroller=s("aggregateUncBucketMcu"),
            sram_pcie=s("aggregateUncBucketPcie"),
            sram_other=s("aggregateUncBucketOther"),
        )
        rep = raw(d.repair_status)
        if isinstance(rep, NvmlError):
            ch = tpc = err(rep)
        else:
            ch, tpc = yes_no(rep.bChannelRepairPending), yes_no(rep.bTpcRepairPending)
        self._set(
            "ecc_errors",
            channel_repair_pending=ch,
            tpc_repair_pending=tpc,
            unrepairable_memory=get(d.unrepairable_memory, yes_no),
        )

    def _retired_pages(self) -> None:
        d = self.d
        for tag, cause in (
            ("multiple_single_bit_retirement", PAGE_RETIREMENT_MULTIPLE_SBE),
            ("double_bit_retirement", PAGE_RETIREMENT_DBE),
        ):
            got = raw(bind(d.retired_pages_count, cause))
            path = f"retired_pages/{tag}"
            if isinstance(got, NvmlError):
                self._set(path, retired_count=err(got), retired_pagelist=err(got))
            else:
                self._set(path, retired_count=str(got), retired_pagelist=None)
        pending = get(d.retired_pages_pending, yes_no)
        self._set("retired_pages", pending_blacklist=pending, pending_retirement=pending)

    def _remapped_rows(self) -> None:
        d = self.d
        rows = raw(d.remapped_rows)
        if isinstance(rows, NvmlError):
            self.facts["remapped_rows"] = err(rows)
            return
        corr, unc, pending, failure = rows
        inactive = raw(d.remapped_rows_v2)
        if isinstance(inactive, NvmlError):
            c_in = u_in = err(inactive)
        else:
            c_in, u_in = str(inactive.corrInactiveRemaps), str(inactive.uncInactiveRemaps)
        self._set(
            "remapped_rows",
            remapped_row_corr=str(corr),
            remapped_row_corr_inactive=c_in,
            remapped_row_unc=str(unc),
            remapped_row_unc_inactive=u_in,
            remapped_row_pending=yes_no(pending),
            remapped_row_failure=yes_no(failure),
        )
        hist = raw(d.row_remapper_histogram)
        for key in ("max", "high", "partial", "low", "none"):
            self.facts[f"remapped_rows/row_remapper_histogram/row_remapper_histogram_{key}"] = (
                err(hist) if isinstance(hist, NvmlError) else f"{getattr(hist, key)} bank(s)"
            )

    def _temperature(self) -> None:
        d = self.d
        margin = raw(d.margin_temperature)
        self._set(
            "temperature",
            gpu_temp=get(d.temperature, celsius),
            gpu_temp_tlimit=err(margin) if isinstance(margin, NvmlError) else celsius(margin),
            gpu_target_temperature=get(lambda: d.temperature_threshold(5), celsius),
            memory_temp=get(lambda: d.field_value(FI_MEMORY_TEMP), lambda v: celsius(int(v))),
        )

        def absolute(kind: int) -> str:
            return get(lambda: d.temperature_threshold(kind), celsius)

        self._set(
            "temperature",
            gpu_temp_max_threshold=absolute(TEMP_THRESHOLD_SHUTDOWN),
            gpu_temp_slow_threshold=absolute(TEMP_THRESHOLD_SLOWDOWN),
            gpu_temp_max_gpu_threshold=absolute(TEMP_THRESHOLD_GPU_MAX),
            gpu_temp_max_mem_threshold=absolute(TEMP_THRESHOLD_MEM_MAX),
        )
        self._set(
            "supported_gpu_target_temp",
            gpu_target_temp_min=get(lambda: d.temperature_threshold(4), celsius),
            gpu_target_temp_max=get(lambda: d.temperature_threshold(6), celsius),
        )
        if isinstance(margin, NvmlError):
            return
        # Boards that report a T.Limit margin get thresholds relative to it, under other names.
        self.flags.add("tlimit")
        gpu_max = raw(lambda: d.temperature_threshold(TEMP_THRESHOLD_GPU_MAX))
        mem_max = raw(lambda: d.temperature_threshold(TEMP_THRESHOLD_MEM_MAX))

        def rel(kind: int) -> str:
            if isinstance(gpu_max, NvmlError):
                return err(gpu_max)
            got = raw(lambda: d.temperature_threshold(kind))
            return err(got) if isinstance(got, NvmlError) else celsius(gpu_max - got)

        self._set(
            "temperature",
            gpu_temp_max_tlimit_threshold=rel(TEMP_THRESHOLD_SHUTDOWN),
            gpu_temp_slow_tlimit_threshold=rel(TEMP_THRESHOLD_SLOWDOWN),
            gpu_temp_max_gpu_tlimit_threshold=rel(TEMP_THRESHOLD_GPU_MAX),
            gpu_temp_max_mem_tlimit_threshold=err(mem_max)
            if isinstance(mem_max, NvmlError)
            else celsius(0),
        )

    def _power(self) -> None:
        d = self.d
        state = get(d.power_state, pstate)
        instant = raw(lambda: d.field_value(FI_POWER_INSTANT))
        instant_s = (
            watts(instant) if not isinstance(instant, NvmlError) else get(d.power_usage, watts)
        )
        limits = raw(d.power_limit_constraints)
        lo, hi = (
            (err(limits),) * 2
            if isinstance(limits, NvmlError)
            else (watts(limits[0]), watts(limits[1]))
        )
        self._set(
            "gpu_power_readings",
            power_state=state,
            average_power_draw=get(lambda: d.field_value(FI_POWER_AVERAGE), watts),
            instant_power_draw=instant_s,
            current_power_limit=get(d.enforced_power_limit, watts),
            requested_power_limit=get(d.power_limit, watts),
            default_power_limit=get(d.default_power_limit, watts),
            min_power_limit=lo,
            max_power_limit=hi,
            power_draw=instant_s,
        )

        def scoped(field: int, scope: int) -> str:
            return get(lambda: d.field_value(field, scope), watts)

        mem, mod = POWER_SCOPE_MEMORY, POWER_SCOPE_MODULE
        self._set(
            "gpu_memory_power_readings",
            average_power_draw=scoped(FI_POWER_AVERAGE, mem),
            instant_power_draw=scoped(FI_POWER_INSTANT, mem),
            power_draw=scoped(FI_POWER_INSTANT, mem),
        )
        self._set(
            "module_power_readings",
            power_state=state,
            average_power_draw=scoped(FI_POWER_AVERAGE, mod),
            instant_power_draw=scoped(FI_POWER_INSTANT, mod),
            current_power_limit=scoped(FI_POWER_CURRENT_LIMIT, mod),
            requested_power_limit=scoped(FI_POWER_REQUESTED_LIMIT, mod),
            default_power_limit=scoped(FI_POWER_DEFAULT_LIMIT, mod),
            min_power_limit=scoped(FI_POWER_MIN_LIMIT, mod),
            max_power_limit=scoped(FI_POWER_MAX_LIMIT, mod),
            power_draw=scoped(FI_POWER_INSTANT, mod),
        )
        self.facts["power_smoothing"] = NA
        self._set(
            "power_profiles",
            power_profile_requested_profiles=NA,
            power_profile_enforced_profiles=NA,
        )
        self.facts["edpp_multiplier"] = get(
            lambda: d.field_value(FI_EDPP_MULTIPLIER), lambda v: f"{float(v):.2f}%"
        )

    def _clocks(self) -> None:
        d = self.d

        def clocks(tag: str, fn: Callable[[int], int], which: tuple[str, ...]) -> None:
            kinds = {
                "graphics_clock": CLOCK_GRAPHICS,
                "sm_clock": CLOCK_SM,
                "mem_clock": CLOCK_MEM,
                "video_clock": CLOCK_VIDEO,
            }
            for name in which:
                kind = kinds[name]
                self.facts[f"{tag}/{name}"] = get(bind(fn, kind), mhz)

        four = ("graphics_clock", "sm_clock", "mem_clock", "video_clock")
        clocks("clocks", d.clock_info, four)
        clocks("applications_clocks", d.applications_clock, ("graphics_clock", "mem_clock"))
        clocks(
            "default_applications_clocks",
            d.default_applications_clock,
            ("graphics_clock", "mem_clock"),
        )
        self.facts["deferred_clocks/mem_clock"] = NA
        clocks("max_clocks", d.max_clock_info, four)
        self.facts["max_customer_boost_clocks/graphics_clock"] = get(
            lambda: d.max_customer_boost_clock(CLOCK_GRAPHICS), mhz
        )
        boost = raw(d.auto_boosted_clocks)

        def on_off(v: int) -> str:
            return "On" if v else "Off"

        ab, abd = (
            (err(boost),) * 2
            if isinstance(boost, NvmlError)
            else (on_off(boost[0]), on_off(boost[1]))
        )
        self._set("clock_policy", auto_boost=ab, auto_boost_default=abd)
        self.facts["voltage/graphics_volt"] = NA

    def _fabric(self) -> None:
        info = raw(self.d.fabric_info)
        if isinstance(info, NvmlError):
            na = err(info)
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
        self._set("fabric", state=state, status=status, cliqueId=clique, clusterUuid=uuid)
        self._set(
            "fabric/health",
            summary=summary,
            bandwidth=bw,
            route_recovery_in_progress=rr,
            route_unhealthy=ru,
            access_timeout_recovery=at,
            incorrect_configuration=ic,
            partition_assigned=pa,
        )

    def _supported_clocks(self) -> None:
        d = self.d
        mems = raw(d.supported_memory_clocks)
        if isinstance(mems, NvmlError) or not mems:
            self.facts["supported_clocks"] = err(mems) if isinstance(mems, NvmlError) else NA
            return
        items: list[Facts] = []
        for mem in mems:
            gfx = raw(bind(d.supported_graphics_clocks, mem))
            clocks = [err(gfx)] if isinstance(gfx, NvmlError) else [mhz(g) for g in gfx]
            items.append({"value": mhz(mem), "supported_graphics_clock": clocks})
        self.facts["supported_clocks/supported_mem_clock"] = items

    def _processes(self) -> None:
        procs = process_rows(self.d)
        if isinstance(procs, str):
            self.facts["processes"] = procs
            return
        self.facts["processes/process_info"] = [
            {
                "gpu_instance_id": proc.gi,
                "compute_instance_id": proc.ci,
                "pid": str(proc.pid),
                "type": proc.kind,
                "process_name": proc.name,
                "used_memory": proc.memory,
            }
            for proc in procs
        ]

    def _mig_devices(self) -> None:
        """The GPU's MIG devices (none unless MIG is on), one walk shared with the table."""
        from ._mig_view import mig_devices

        def mib(value: int | None) -> str:
            return NA if value is None else f"{value} MiB"

        items = []
        for m in mig_devices(self.d):
            free = (
                None
                if m.total_mib is None or m.used_mib is None
                else m.total_mib - m.used_mib - (m.reserved_mib or 0)
            )
            used_bar1, total_bar1 = m.bar1 if m.bar1 is not None else (None, None)
            items.append(
                {
                    "index": str(m.index),
                    "gpu_instance_id": str(m.gi),
                    "compute_instance_id": str(m.ci),
                    "device_attributes/shared/multiprocessor_count": str(m.sms),
                    "device_attributes/shared/copy_engine_count": str(m.copy_engines),
                    "device_attributes/shared/encoder_count": str(m.encoders),
                    "device_attributes/shared/decoder_count": str(m.decoders),
                    "device_attributes/shared/ofa_count": str(m.ofas),
                    "device_attributes/shared/jpg_count": str(m.jpegs),
                    "fb_memory_usage/total": mib(m.total_mib),
                    "fb_memory_usage/reserved": mib(m.reserved_mib),
                    "fb_memory_usage/used": mib(m.used_mib),
                    "fb_memory_usage/free": mib(free),
                    "bar1_memory_usage/total": mib(total_bar1),
                    "bar1_memory_usage/used": mib(used_bar1),
                    "bar1_memory_usage/free": mib(
                        None if m.bar1 is None else m.bar1[1] - m.bar1[0]
                    ),
                }
            )
        self.facts["mig_devices/mig_device"] = items

    def _egm(self) -> str:
        try:
            mask = self.d.capabilities()
        except NvmlError as exc:
            return err(exc)
        return "enabled" if mask & 1 else "disabled"
