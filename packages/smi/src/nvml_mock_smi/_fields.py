"""The ``--query-gpu`` properties: names, aliases, units and how each is read from NVML.

Exporters and scripts parse this CSV, so a property keeps the real tool's name, its header
unit (``memory.total [MiB]``) and its cell shape (``40960 MiB``, or ``40960`` with
``nounits``). An answer of ``NVML_ERROR_NOT_SUPPORTED`` prints ``[N/A]``; any other error
prints the library's error string in brackets. The header always names the property by its
first name, whichever alias was asked for. The help texts are this project's own words.

The set of names follows the emulated driver, as the real tool's does: what 590 accepts is
accepted everywhere, later additions (``kmd_version`` from 595, ``gpu.base.*`` from 610) only
when NVML reports that driver or a newer one, and from 590 on the display mode, power
management and applications clocks properties answer the deprecation text. The lists of
names, their units and their answers come from real ``--help-query-gpu`` and ``--query-gpu``
captures (``tests/smi_fixtures/exporter``).
"""

from __future__ import annotations

import time

from ._errors import EXIT_INVALID_ARGUMENT, SmiError, WorkAlikeError
from ._generation import parse_driver_version
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
    FI_POWER_INSTANT,
    INFOROM_ECC,
    INFOROM_OEM,
    INFOROM_POWER,
    MEM_LOC_CBU,
    MEM_LOC_DRAM,
    MEM_LOC_L1,
    MEM_LOC_L2,
    MEM_LOC_REGISTER,
    MEM_LOC_SRAM,
    MEM_LOC_TEXTURE,
    PAGE_RETIREMENT_DBE,
    PAGE_RETIREMENT_MULTIPLE_SBE,
    Device,
    Nvml,
    NvmlError,
    decode_bytes,
)
from ._values import (
    ADDRESSING,
    BANDWIDTH,
    COMPUTE_MODES,
    FABRIC_STATES,
    FABRIC_SUMMARY,
    GOM,
    INCORRECT_CONFIG,
    PEER_TYPES,
    RECOVERY,
    TRUE_FALSE,
    enabled,
    fabric_uuid,
    platform_slot,
    pstate,
    timestamp_us,
    yes_no,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from functools import cached_property
    from typing import Any

    Reader = Callable[["Ctx"], Any]
else:
    # functools, typing and collections.abc cost a --query-gpu run more start-up time
    # than its NVML calls

    class cached_property:  # noqa: N801 (stands in for functools.cached_property)
        """The part of ``functools.cached_property`` that :class:`Ctx` uses: the first
        read stores the answer in the instance; an exception stores nothing."""

        def __init__(self, fn: Callable[[Any], Any]) -> None:
            self.fn = fn
            self.name = fn.__name__

        def __get__(self, obj: object, owner: type | None = None) -> Any:
            if obj is None:
                return self
            value = obj.__dict__[self.name] = self.fn(obj)
            return value


NOT_APPLICABLE = "[N/A]"
DEPRECATED = "[Requested functionality has been deprecated]"
DEPRECATED_FROM = (590,)
"""The first driver whose tool answers the deprecation text for display mode, power
management and applications clocks (590.48.01 captures; 580.105.08 still prints values)."""


class NotAvailableError(WorkAlikeError):
    """A property that has no value here (printed ``[N/A]``)."""


class DeprecatedError(WorkAlikeError):
    """A property the emulated driver's tool no longer reports (printed :data:`DEPRECATED`)."""


class Ctx:
    """One GPU's NVML answers, fetched at most once per query row."""

    def __init__(self, nvml: Nvml, device: Device, count: int) -> None:
        self.nvml = nvml
        self.d = device
        self.count = count

    @cached_property
    def pci(self) -> Any:
        return self.d.pci_info()

    @cached_property
    def memory(self) -> Any:
        return self.d.memory_info()

    @cached_property
    def utilization(self) -> Any:
        return self.d.utilization()

    @cached_property
    def reasons(self) -> int:
        return self.d.clocks_event_reasons()

    @cached_property
    def fabric(self) -> Any:
        return self.d.fabric_info()

    @cached_property
    def platform(self) -> Any:
        return self.d.platform_info()

    @cached_property
    def ecc_on(self) -> bool:
        return bool(self.d.ecc_mode()[0])

    @cached_property
    def encoder(self) -> tuple[int, int, int]:
        return self.d.encoder_stats()

    @cached_property
    def recovery(self) -> int:
        return int(self.d.field_value(FI_GPU_RECOVERY_ACTION))

    @cached_property
    def conf_compute(self) -> Any:
        return self.d.conf_compute_mem_size()

    @cached_property
    def driver(self) -> tuple[int, ...]:
        """The driver NVML reports, as numbers; an unreadable one counts as the newest."""
        try:
            return parse_driver_version(self.nvml.driver_version())
        except NvmlError:
            return (9999,)

    @cached_property
    def sram(self) -> Any:
        if not self.ecc_on:
            raise NotAvailableError
        return self.d.sram_ecc_error_status()

    @cached_property
    def histogram(self) -> Any:
        return self.d.row_remapper_histogram()

    @cached_property
    def remaps(self) -> Any:
        return self.d.remapped_rows_v2()

    def fabric_done(self) -> Any:
        info = self.fabric
        if int(info.state) != 3:
            raise NotAvailableError
        return info


class Field:
    """One property: its names (the first is the header's), unit, reader and help text.

    A plain class rather than a ``NamedTuple``: importing ``typing`` would cost each
    ``--query-gpu`` run more than its NVML calls do.
    """

    __slots__ = ("help", "names", "read", "since", "unit", "until")

    def __init__(  # noqa: PLR0917 (the NamedTuple it replaces took these by position)
        self,
        names: tuple[str, ...],
        unit: str,
        read: Reader,
        help: str,
        since: tuple[int, ...] = (),
        until: tuple[int, ...] | None = None,
    ) -> None:
        self.names = names
        self.unit = unit
        self.read = read
        self.help = help
        self.since = since
        """The first driver whose tool accepts the property (empty: every driver)."""
        self.until = until
        """The first driver whose tool no longer accepts it (None: still accepted)."""

    def __repr__(self) -> str:
        return f"Field({self.names!r})"

    @property
    def name(self) -> str:
        return self.names[0]

    def header(self, units: bool) -> str:
        return f"{self.name} [{self.unit}]" if units and self.unit else self.name

    def cell(self, ctx: Ctx, units: bool) -> str:
        try:
            value = self.read(ctx)
        except NotAvailableError:
            return NOT_APPLICABLE
        except DeprecatedError:
            return DEPRECATED
        except NvmlError as exc:
            return NOT_APPLICABLE if exc.code == ERROR_NOT_SUPPORTED else f"[{exc.text}]"
        text = str(value)
        return f"{text} {self.unit}" if units and self.unit else text


def _mib(n: int) -> int:
    return n // (1024 * 1024)


def _w(mw: int | float) -> str:
    return f"{mw / 1000:.2f}"


def _reason(bit: int) -> Reader:
    return lambda c: "Active" if c.reasons & bit else "Not Active"


def _counter(fid: int) -> Reader:
    return lambda c: int(c.d.field_value(fid)) // 1000


def _ecc(err: int, kind: int, loc: int | None) -> Reader:
    def read(c: Ctx) -> int:
        if not c.ecc_on:
            raise NotAvailableError
        if loc is None:
            return c.d.total_ecc_errors(err, kind)
        return c.d.memory_error_counter(err, kind, loc)

    return read


def _until_deprecated(read: Reader) -> Reader:
    """``read`` on drivers before :data:`DEPRECATED_FROM`, the deprecation text from then on."""

    def wrapped(c: Ctx) -> Any:
        if c.driver >= DEPRECATED_FROM:
            raise DeprecatedError
        return read(c)

    return wrapped


def _sram(attr: str, flag: bool = False) -> Reader:
    def read(c: Ctx) -> Any:
        value = int(getattr(c.sram, attr))
        return yes_no(value) if flag else value

    return read


def _histogram(attr: str) -> Reader:
    return lambda c: int(getattr(c.histogram, attr))


def _recovery(c: Ctx) -> str:
    value = RECOVERY.get(c.recovery)
    if value is None:
        raise NotAvailableError
    return value


def _percent(fid: int) -> Reader:
    return lambda c: f"{float(c.d.field_value(fid)):.2f}"


def _bus_id(c: Ctx) -> str:
    return str(c.pci.busId.decode())


def _timestamp(_: Ctx) -> str:
    return timestamp_us(time.time_ns() // 1000)


def _na(_: Ctx) -> str:
    raise NotAvailableError


def _bare_na(read: Reader) -> Reader:
    """``read``, but a board that answers ``NVML_ERROR_NOT_SUPPORTED`` prints a bare ``N/A``
    (no brackets), as the real tool does for ``temperature.memory`` on a board without an
    HBM sensor (the L40S and RTX captures of 595 and 610)."""

    def field(c: Ctx) -> Any:
        try:
            return read(c)
        except NvmlError as exc:
            if exc.code == ERROR_NOT_SUPPORTED:
                return "N/A"
            raise

    return field


INFOROM_CORRUPTED = 14
"""``NVML_ERROR_CORRUPTED_INFOROM``: the checksum was read and does not match."""


def _checksum(c: Ctx) -> str:
    """``valid`` when ``nvmlDeviceValidateInforom`` succeeds (every real capture), ``invalid``
    for a corrupted infoROM, a bare ``N/A`` for a board without one."""
    try:
        c.d.validate_inforom()
    except NvmlError as exc:
        if exc.code == INFOROM_CORRUPTED:
            return "invalid"
        if exc.code == ERROR_NOT_SUPPORTED:
            return "N/A"
        raise
    return "valid"


def _gsp(index: int) -> Reader:
    """``gsp.mode.current`` (0) or ``gsp.mode.default`` (1), from ``GetGspFirmwareMode``."""
    return _bare_na(lambda c: enabled(c.d.gsp_firmware_mode()[index]))


def _protected(attr: str) -> Reader:
    def read(c: Ctx) -> int:
        total = _mib(int(c.conf_compute.protectedMemSizeKib) * 1024)
        return {"total": total, "used": 0, "free": total}[attr]

    return read


def _mask(shift: int, names: dict[int, str]) -> Reader:
    def read(c: Ctx) -> str:
        value = names.get(
            (int(c.fabric_done().healthMask) >> shift) & (0xF if shift == 8 else 0x3), "N/A"
        )
        return value  # the real tool prints a bare N/A for an unknown health bit

    return read


def _fabric(read: Reader) -> Reader:
    """A ``fabric.*`` field: a board without an NVLink fabric (its fabric info answers
    ``NVML_ERROR_NOT_SUPPORTED``) answers a bare ``N/A``, as the real tool prints these there
    (the L40S and RTX captures of 595 and 610)."""

    def field(c: Ctx) -> Any:
        try:
            c.fabric  # noqa: B018 (reads, and caches, the fabric info)
        except NvmlError as exc:
            if exc.code == ERROR_NOT_SUPPORTED:
                return "N/A"
            raise
        return read(c)

    return field


def _platform(read: Callable[[Any], Any], unplaced: Reader) -> Reader:
    """A ``platform.*`` field. On a board whose platform info answers
    ``NVML_ERROR_NOT_SUPPORTED`` (no rack, tray or switch to report: the H100, L40S and RTX
    captures of 590, 595 and 610) the real tool still prints a value, the same on all three:
    an empty chassis serial, slot and tray 0, host 1, ``Direct Connected``, the board's module
    id and an all-zero GUID. ``unplaced`` gives that value; ``-q`` prints ``N/A`` there."""

    def field(c: Ctx) -> Any:
        try:
            info = c.platform
        except NvmlError as exc:
            if exc.code == ERROR_NOT_SUPPORTED:
                return unplaced(c)
            raise
        return read(info)

    return field


def _const(value: str) -> Reader:
    return lambda _: value


F = Field
_ECC_LOCATIONS: list[tuple[str, int | None, str]] = [
    ("device_memory", MEM_LOC_DRAM, "in device memory"),
    ("dram", MEM_LOC_DRAM, "in DRAM"),
    ("register_file", MEM_LOC_REGISTER, "in the register file"),
    ("l1_cache", MEM_LOC_L1, "in the L1 cache"),
    ("l2_cache", MEM_LOC_L2, "in the L2 cache"),
    ("texture_memory", MEM_LOC_TEXTURE, "in texture memory"),
    ("cbu", MEM_LOC_CBU, "in the CBU"),
    ("sram", MEM_LOC_SRAM, "in SRAM"),
    ("total", None, "anywhere on the GPU"),
]


def _ecc_fields() -> list[Field]:
    out = []
    for err, err_name in ((ECC_CORRECTED, "corrected"), (ECC_UNCORRECTED, "uncorrected")):
        for kind, kind_name, span in (
            (ECC_VOLATILE, "volatile", "since the driver last loaded"),
            (ECC_AGGREGATE, "aggregate", "over the life of the board"),
        ):
            for loc_name, loc, where in _ECC_LOCATIONS:
                out.append(
                    F(
                        (f"ecc.errors.{err_name}.{kind_name}.{loc_name}",),
                        "",
                        _ecc(err, kind, loc),
                        f"{err_name.capitalize()} ECC errors {where}, counted {span}.",
                    )
                )
    return out


V590 = (590,)
"""590 replaced ``reset_status.*`` with ``gpu_recovery_action``."""
V595 = (595,)
V610 = (610,)

_SMOOTHING: list[tuple[str, str, tuple[int, ...], str]] = [
    ("tmp_floor", "W", V610, "The temporary power floor in force."),
    ("tmp_ceil", "W", V610, "The highest temporary power floor that may be set."),
    ("hw_lifetime_remaining_percent", "%", V610, "Power smoothing hardware lifetime left."),
    ("enabled", "", V610, "Whether power smoothing is on (Yes or No)."),
    ("delayed_power_smoothing_supported", "", (), "Whether delayed power smoothing exists."),
    ("soc_power_smoothing_enabled", "", V610, "Whether power smoothing of the SoC is on."),
    ("priv_level", "", V610, "The privilege needed to change power smoothing."),
    ("imm_ramp_down", "", V610, "Whether the power ramps down at once when smoothing stops."),
    ("max_percent_tmp_floor", "%", V610, "Highest temporary floor, in percent of the limit."),
    ("min_percent_tmp_floor", "%", V610, "Lowest temporary floor, in percent of the limit."),
    ("primary_power_floor", "W", (), "The primary power floor."),
    ("secondary_power_floor", "W", (), "The secondary power floor."),
    ("min_primary_floor_activation_offset", "W", (), "Lowest primary floor activation offset."),
    ("min_primary_floor_activation_point", "W", (), "Lowest primary floor activation point."),
    ("window_multiplier", "ms", (), "The time window unit of the floor multipliers."),
    ("num_preset_profiles", "", V610, "How many preset power smoothing profiles exist."),
]
_SMOOTHING_PROFILE: list[tuple[str, str, tuple[int, ...], str]] = [
    ("percent_tmp_floor", "%", V610, "temporary floor, in percent of the limit"),
    ("ramp_up_rate", "W/s", V610, "ramp up rate"),
    ("ramp_down_rate", "W/s", V610, "ramp down rate"),
    ("ramp_down_hysteresis", "ms", V610, "ramp down hysteresis"),
    ("secondary_power_floor", "W", (), "secondary power floor"),
    ("primary_floor_act_window_multiplier", "", (), "primary floor activation window"),
    ("primary_floor_tar_window_multiplier", "", (), "primary floor target window"),
    ("primary_floor_act_offset", "W", (), "primary floor activation offset"),
]


def _smoothing_fields() -> list[Field]:
    """Power smoothing: no modelled board has it, so every property answers ``[N/A]``."""
    out = [F((f"power_smoothing.{n}",), u, _na, h, since) for n, u, since, h in _SMOOTHING]
    for part, whose in (
        ("curr_profile", "The current profile's"),
        (None, ""),
        ("admin_override", "The administrator override's"),
    ):
        if part is None:
            out.append(
                F(("power_smoothing.active_profile",), "", _na, "The active preset profile.", V610)
            )
            continue
        out += [
            F((f"power_smoothing.{part}.{n}",), u, _na, f"{whose} {h}.", since)
            for n, u, since, h in _SMOOTHING_PROFILE
        ]
    return out


def _sram_fields() -> list[Field]:
    """The SRAM uncorrectable counters by kind and source (Ampere and later report them)."""
    out = []
    for kind in ("volatile", "aggregate"):
        out += [
            F(
                (f"ecc.errors.uncorrected.{kind}.sram.parity",),
                "",
                _sram(f"{kind}UncParity"),
                f"Distinct {kind} uncorrectable parity errors in SRAM.",
            ),
            F(
                (f"ecc.errors.uncorrected.{kind}.sram.secded",),
                "",
                _sram(f"{kind}UncSecDed"),
                f"Distinct {kind} uncorrectable SEC-DED errors in SRAM.",
            ),
        ]
    out.append(
        F(
            ("ecc.errors.uncorrected.aggregate.sram.thresholdExceeded",),
            "",
            _sram("bThresholdExceeded", flag=True),
            "Whether the aggregate SRAM error count passed its threshold (Yes or No).",
        )
    )
    for name, attr, where in (
        ("l2", "L2", "the L2 cache"),
        ("sm", "Sm", "the streaming multiprocessors"),
        ("mcu", "Mcu", "the microcontrollers"),
        ("pcie", "Pcie", "the PCIe interface"),
        ("other", "Other", "other units"),
    ):
        out.append(
            F(
                (f"ecc.errors.uncorrected.aggregate.sram.{name}",),
                "",
                _sram(f"aggregateUncBucket{attr}"),
                f"Aggregate uncorrectable SRAM errors in {where}.",
            )
        )
    return out


FIELDS: list[Field] = [
    F(("timestamp",), "", _timestamp, 'When the row was read, as "YYYY/MM/DD HH:MM:SS.msec".'),
    F(
        ("driver_version",),
        "",
        lambda c: c.nvml.driver_version(),
        "Version of the installed display driver.",
    ),
    F(
        ("kmd_version",),
        "",
        lambda c: c.nvml.driver_version(),
        "Version of the installed kernel-mode driver.",
        V595,
    ),
    F(
        ("vgpu_driver_capability.heterogenous_multivGPU",),
        "",
        _na,
        "Whether the vGPU driver can run vGPUs of different profiles on one GPU.",
    ),
    F(("count",), "", lambda c: c.count, "How many GPUs the system has; the same on every row."),
    F(("name", "gpu_name"), "", lambda c: c.d.name(), "The product name of the board."),
    F(
        ("serial", "gpu_serial"),
        "",
        lambda c: c.d.serial(),
        "The serial number printed on the board.",
    ),
    F(
        ("uuid", "gpu_uuid"),
        "",
        lambda c: c.d.uuid(),
        "The GPU's globally unique, immutable identifier.",
    ),
    F(
        ("pci.bus_id", "gpu_bus_id"),
        "",
        _bus_id,
        'PCI address as "domain:bus:device.function", in hex.',
    ),
    F(("pci.domain",), "", lambda c: f"0x{c.pci.domain:04X}", "PCI domain number, in hex."),
    F(("pci.bus",), "", lambda c: f"0x{c.pci.bus:02X}", "PCI bus number, in hex."),
    F(("pci.device",), "", lambda c: f"0x{c.pci.device:02X}", "PCI device number, in hex."),
    F(
        ("pci.baseClass",),
        "",
        lambda c: f"0x{c.d.pci_info_ext().baseClass:X}",
        "PCI base class code, in hex.",
    ),
    F(
        ("pci.subClass",),
        "",
        lambda c: f"0x{c.d.pci_info_ext().subClass:X}",
        "PCI sub class code, in hex.",
    ),
    F(
        ("pci.device_id",),
        "",
        lambda c: f"0x{c.pci.pciDeviceId:08X}",
        "PCI vendor and device id, in hex.",
    ),
    F(
        ("pci.sub_device_id",),
        "",
        lambda c: f"0x{c.pci.pciSubSystemId:08X}",
        "PCI sub system id, in hex.",
    ),
    F(
        ("vgpu_device_capability.fractional_multiVgpu",),
        "",
        _na,
        "Whether fractional vGPU profiles may share the GPU.",
    ),
    F(
        ("vgpu_device_capability.heterogeneous_timeSlice_profile",),
        "",
        _na,
        "Whether time-sliced vGPU profiles of different kinds may share the GPU.",
    ),
    F(
        ("vgpu_device_capability.heterogeneous_timeSlice_sizes",),
        "",
        _na,
        "Whether time-sliced vGPUs of different sizes may share the GPU.",
    ),
    F(
        ("vgpu_device_capability.homogeneous_placements",),
        "",
        _na,
        "Whether placements of same-size time-sliced vGPUs are reported.",
    ),
    F(
        ("vgpu_device_capability.mig_timeSlicing",),
        "",
        _na,
        "Whether time-sliced vGPUs may run on MIG instances.",
    ),
    F(
        ("vgpu_device_capability.mig_timeSlicing_mode",),
        "",
        _na,
        "Whether MIG time-sliced mode is on.",
    ),
    F(
        ("pcie.link.gen.current",),
        "",
        lambda c: c.d.curr_pcie_link_generation(),
        "The PCIe generation the link runs at now (older name of pcie.link.gen.gpucurrent).",
    ),
    F(
        ("pcie.link.gen.gpucurrent",),
        "",
        lambda c: c.d.curr_pcie_link_generation(),
        "The PCIe generation the link runs at now.",
    ),
    F(
        ("pcie.link.gen.max",),
        "",
        lambda c: c.d.max_pcie_link_generation(),
        "The highest PCIe generation the GPU and system allow together.",
    ),
    F(
        ("pcie.link.gen.gpumax",),
        "",
        lambda c: c.d.gpu_max_pcie_link_generation(),
        "The highest PCIe generation the GPU supports.",
    ),
    F(
        ("pcie.link.gen.hostmax",),
        "",
        _na,
        "The highest PCIe generation of the root port above the GPU.",
    ),
    F(
        ("pcie.link.width.current",),
        "",
        lambda c: c.d.curr_pcie_link_width(),
        "The number of PCIe lanes in use now.",
    ),
    F(
        ("pcie.link.width.max",),
        "",
        lambda c: c.d.max_pcie_link_width(),
        "The most PCIe lanes the link can use.",
    ),
    F(("index",), "", lambda c: c.d.index, "Zero-based index of the GPU, in NVML order."),
    F(
        ("display_mode",),
        "",
        _until_deprecated(lambda c: enabled(c.d.display_mode())),
        "Whether a display may be attached to the GPU (deprecated from 590 on).",
    ),
    F(
        ("display_attached",),
        "",
        lambda c: yes_no(c.d.display_mode()),
        "Whether a display is attached to the GPU.",
    ),
    F(
        ("display_active",),
        "",
        lambda c: enabled(c.d.display_active()),
        "Whether a display is initialized on the GPU.",
    ),
    F(
        ("persistence_mode",),
        "",
        lambda c: enabled(c.d.persistence_mode()),
        "Whether the driver stays loaded with no client.",
    ),
    F(
        ("addressing_mode",),
        "",
        lambda c: ADDRESSING.get(c.d.addressing_mode(), "N/A"),
        "How the GPU shares addresses with the host (HMM, ATS or None).",
    ),
    F(
        ("accounting.mode",),
        "",
        lambda c: enabled(c.d.accounting_mode()),
        "Whether per-process accounting is on.",
    ),
    F(
        ("accounting.buffer_size",),
        "",
        lambda c: c.d.accounting_buffer_size(),
        "How many processes the accounting buffer holds.",
    ),
    F(
        ("driver_model.current",),
        "",
        lambda c: c.d.driver_model()[0],
        "The Windows driver model in use (Linux: none).",
    ),
    F(
        ("driver_model.pending",),
        "",
        lambda c: c.d.driver_model()[1],
        "The Windows driver model after the next reboot.",
    ),
    F(("vbios_version",), "", lambda c: c.d.vbios_version(), "The BIOS version of the board."),
    F(
        ("inforom.img", "inforom.image"),
        "",
        lambda c: c.d.inforom_image_version(),
        "The version of the infoROM image.",
    ),
    F(
        ("inforom.oem",),
        "",
        lambda c: c.d.inforom_version(INFOROM_OEM),
        "The version of the OEM object in the infoROM.",
    ),
    F(
        ("inforom.ecc",),
        "",
        lambda c: c.d.inforom_version(INFOROM_ECC),
        "The version of the ECC object in the infoROM.",
    ),
    F(
        ("inforom.pwr", "inforom.power"),
        "",
        lambda c: c.d.inforom_version(INFOROM_POWER),
        "The version of the power object in the infoROM.",
    ),
    F(("inforom.checksum_validation",), "", _checksum, "Whether the infoROM checksum is valid."),
    F(
        ("gpu_recovery_action",),
        "",
        _recovery,
        "What the driver recommends to recover the GPU (None, Reset, Node Reboot, ...).",
    ),
    F(
        ("reset_status.reset_required",),
        "",
        lambda c: yes_no(c.recovery in (1, 2, 6, 7)),
        "Whether the GPU needs a reset (or a reboot) to recover from an error.",
        (),
        V590,
    ),
    F(
        ("reset_status.drain_and_reset_recommended",),
        "",
        lambda c: yes_no(c.recovery in (3, 4)),
        "Whether draining the GPU's work and then a reset is recommended.",
        (),
        V590,
    ),
    F(
        ("gom.current", "gpu_operation_mode.current"),
        "",
        lambda c: GOM.get(c.d.gpu_operation_mode()[0], "N/A"),
        "The GPU operation mode in use.",
    ),
    F(
        ("gom.pending", "gpu_operation_mode.pending"),
        "",
        lambda c: GOM.get(c.d.gpu_operation_mode()[1], "N/A"),
        "The GPU operation mode after the next reboot.",
    ),
    F(
        ("fan.speed",),
        "%",
        lambda c: c.d.fan_speed(),
        "The fan's intended speed, in percent of its maximum.",
    ),
    F(
        ("pstate",),
        "",
        lambda c: pstate(c.d.performance_state()),
        "The performance state, from P0 (highest) to P12 (lowest).",
    ),
    F(
        ("clocks_event_reasons.supported", "clocks_throttle_reasons.supported"),
        "",
        lambda c: f"0x{c.d.supported_clocks_event_reasons():016X}",
        "Bit mask of the clock event reasons the GPU can report.",
    ),
    F(
        ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
        "",
        lambda c: f"0x{c.reasons:016X}",
        "Bit mask of the clock event reasons active now.",
    ),
    F(
        ("clocks_event_reasons.gpu_idle", "clocks_throttle_reasons.gpu_idle"),
        "",
        _reason(0x1),
        "Clocks are low because nothing runs.",
    ),
    F(
        (
            "clocks_event_reasons.applications_clocks_setting",
            "clocks_throttle_reasons.applications_clocks_setting",
        ),
        "",
        _reason(0x2),
        "Clocks are held by the applications clocks setting.",
    ),
    F(
        ("clocks_event_reasons.sw_power_cap", "clocks_throttle_reasons.sw_power_cap"),
        "",
        _reason(0x4),
        "Clocks are lowered to stay under the power limit.",
    ),
    F(
        ("clocks_event_reasons.hw_slowdown", "clocks_throttle_reasons.hw_slowdown"),
        "",
        _reason(0x8),
        "Hardware slowdown is engaged (heat, power brake or a power supply signal).",
    ),
    F(
        ("clocks_event_reasons.hw_thermal_slowdown", "clocks_throttle_reasons.hw_thermal_slowdown"),
        "",
        _reason(0x40),
        "Hardware slowdown because the GPU is too hot.",
    ),
    F(
        (
            "clocks_event_reasons.hw_power_brake_slowdown",
            "clocks_throttle_reasons.hw_power_brake_slowdown",
        ),
        "",
        _reason(0x80),
        "Hardware slowdown because an external power brake is asserted.",
    ),
    F(
        ("clocks_event_reasons.sw_thermal_slowdown", "clocks_throttle_reasons.sw_thermal_slowdown"),
        "",
        _reason(0x20),
        "Clocks are lowered to keep GPU and memory under their operating temperature.",
    ),
    F(
        ("clocks_event_reasons.sync_boost", "clocks_throttle_reasons.sync_boost"),
        "",
        _reason(0x10),
        "Clocks follow the slowest GPU of a sync boost group.",
    ),
    F(
        ("clocks_event_reasons_counters.sw_power_cap",),
        "us",
        _counter(FI_PERF_POLICY_POWER),
        "Time spent capped by software power limits, in microseconds.",
    ),
    F(
        ("clocks_event_reasons_counters.sync_boost",),
        "us",
        _counter(FI_PERF_POLICY_SYNC_BOOST),
        "Time spent held by sync boost, in microseconds.",
    ),
    F(
        ("clocks_event_reasons_counters.sw_thermal_slowdown",),
        "us",
        _counter(FI_CLOCKS_EVENT_SW_THERM),
        "Time spent in software thermal slowdown, in microseconds.",
    ),
    F(
        ("clocks_event_reasons_counters.hw_thermal_slowdown",),
        "us",
        _counter(FI_CLOCKS_EVENT_HW_THERM),
        "Time spent in hardware thermal slowdown, in microseconds.",
    ),
    F(
        ("clocks_event_reasons_counters.hw_power_brake_slowdown",),
        "us",
        _counter(FI_CLOCKS_EVENT_HW_POWER_BRAKE),
        "Time spent under an external power brake, in microseconds.",
    ),
    F(("memory.total",), "MiB", lambda c: _mib(c.memory.total), "Installed framebuffer memory."),
    F(
        ("memory.reserved",),
        "MiB",
        lambda c: _mib(c.memory.reserved),
        "Framebuffer memory the driver and firmware keep for themselves.",
    ),
    F(
        ("memory.used",),
        "MiB",
        lambda c: _mib(c.memory.used),
        "Framebuffer memory allocated by processes.",
    ),
    F(("memory.free",), "MiB", lambda c: _mib(c.memory.free), "Framebuffer memory not allocated."),
    F(
        ("compute_mode",),
        "",
        lambda c: COMPUTE_MODES.get(c.d.compute_mode(), "N/A"),
        "Which processes may create contexts (Default, Exclusive_Process, Prohibited).",
    ),
    F(
        ("compute_cap",),
        "",
        lambda c: "{}.{}".format(*c.d.cuda_compute_capability()),
        "CUDA compute capability, as major.minor.",
    ),
    F(
        ("utilization.gpu",),
        "%",
        lambda c: c.utilization.gpu,
        "Share of the last sample period in which a kernel ran.",
    ),
    F(
        ("utilization.memory",),
        "%",
        lambda c: c.utilization.memory,
        "Share of the last sample period in which device memory was read or written.",
    ),
    F(
        ("utilization.encoder",),
        "%",
        lambda c: c.d.engine_utilization("nvmlDeviceGetEncoderUtilization"),
        "Encoder busy share of the last sample period.",
    ),
    F(
        ("utilization.decoder",),
        "%",
        lambda c: c.d.engine_utilization("nvmlDeviceGetDecoderUtilization"),
        "Decoder busy share of the last sample period.",
    ),
    F(
        ("utilization.jpeg",),
        "%",
        lambda c: c.d.engine_utilization("nvmlDeviceGetJpgUtilization"),
        "JPEG engine busy share of the last sample period.",
    ),
    F(
        ("utilization.ofa",),
        "%",
        lambda c: c.d.engine_utilization("nvmlDeviceGetOfaUtilization"),
        "Optical flow engine busy share of the last sample period.",
    ),
    F(("encoder.stats.sessionCount",), "", lambda c: c.encoder[0], "Encoder sessions running now."),
    F(
        ("encoder.stats.averageFps",),
        "",
        lambda c: c.encoder[1],
        "Average frames per second over all encoder sessions.",
    ),
    F(
        ("encoder.stats.averageLatency",),
        "",
        lambda c: c.encoder[2],
        "Average encode latency over all sessions, in microseconds.",
    ),
    F(
        ("dramEncryption.mode.current",),
        "",
        lambda c: enabled(c.d.dram_encryption_mode()[0]),
        "Whether DRAM encryption is on.",
    ),
    F(
        ("dramEncryption.mode.pending",),
        "",
        lambda c: enabled(c.d.dram_encryption_mode()[1]),
        "Whether DRAM encryption is on after the next reboot.",
    ),
    F(("ecc.mode.current",), "", lambda c: enabled(c.d.ecc_mode()[0]), "Whether ECC is on."),
    F(
        ("ecc.mode.pending",),
        "",
        lambda c: enabled(c.d.ecc_mode()[1]),
        "Whether ECC is on after the next reboot.",
    ),
    *_ecc_fields(),
    *_sram_fields(),
    F(
        ("retired_pages.single_bit_ecc.count", "retired_pages.sbe"),
        "",
        lambda c: c.d.retired_pages_count(PAGE_RETIREMENT_MULTIPLE_SBE),
        "Pages retired after repeated single-bit ECC errors.",
    ),
    F(
        ("retired_pages.double_bit.count", "retired_pages.dbe"),
        "",
        lambda c: c.d.retired_pages_count(PAGE_RETIREMENT_DBE),
        "Pages retired after a double-bit ECC error.",
    ),
    F(
        ("retired_pages.pending",),
        "",
        lambda c: yes_no(c.d.retired_pages_pending()),
        "Whether a page waits to be retired at the next reset.",
    ),
    F(
        ("remapped_rows.correctable", "remapped_rows.sbe"),
        "",
        lambda c: c.d.remapped_rows()[0],
        "Rows remapped after correctable errors.",
    ),
    F(
        ("remapped_rows.correctable_inactive",),
        "",
        lambda c: int(c.remaps.corrInactiveRemaps),
        "Rows remapped after correctable errors that are no longer in use.",
        V595,
    ),
    F(
        ("remapped_rows.uncorrectable", "remapped_rows.dbe"),
        "",
        lambda c: c.d.remapped_rows()[1],
        "Rows remapped after uncorrectable errors.",
    ),
    F(
        ("remapped_rows.uncorrectable_inactive",),
        "",
        lambda c: int(c.remaps.uncInactiveRemaps),
        "Rows remapped after uncorrectable errors that are no longer in use.",
        V595,
    ),
    F(
        ("remapped_rows.pending",),
        "",
        lambda c: yes_no(c.d.remapped_rows()[2]),
        "Whether a remap waits for the next reset.",
    ),
    F(
        ("remapped_rows.failure",),
        "",
        lambda c: yes_no(c.d.remapped_rows()[3]),
        "Whether a row remap has ever failed.",
    ),
    F(
        ("remapped_rows.histogram.max",),
        "",
        _histogram("max"),
        "Memory banks with every spare row left.",
    ),
    F(
        ("remapped_rows.histogram.high",),
        "",
        _histogram("high"),
        "Memory banks with most spare rows left.",
    ),
    F(
        ("remapped_rows.histogram.partial",),
        "",
        _histogram("partial"),
        "Memory banks with some spare rows left.",
    ),
    F(
        ("remapped_rows.histogram.low",),
        "",
        _histogram("low"),
        "Memory banks with few spare rows left.",
    ),
    F(
        ("remapped_rows.histogram.none",),
        "",
        _histogram("none"),
        "Memory banks with no spare row left.",
    ),
    F(("temperature.gpu",), "", lambda c: c.d.temperature(), "Core GPU temperature, in degrees C."),
    F(
        ("temperature.gpu.tlimit",),
        "",
        lambda c: c.d.margin_temperature(),
        "Degrees C left before the GPU slows down.",
    ),
    F(
        ("temperature.memory",),
        "",
        _bare_na(lambda c: int(c.d.field_value(82))),
        "HBM temperature, in degrees C.",
    ),
    F(
        ("power.management",),
        "",
        _until_deprecated(
            lambda c: "Supported" if c.d.power_management_mode() else "[Not Supported]"
        ),
        "Whether the board manages its power (deprecated from 590 on).",
    ),
    F(("power.draw",), "W", lambda c: _w(c.d.power_usage()), "Board power draw now, in watts."),
    F(
        ("power.draw.average", "gpu.power.draw.average"),
        "W",
        lambda c: _w(c.d.field_value(FI_POWER_AVERAGE)),
        "Board power draw averaged over one second, in watts.",
    ),
    F(
        ("power.draw.instant", "gpu.power.draw.instant"),
        "W",
        lambda c: _w(c.d.field_value(FI_POWER_INSTANT)),
        "Board power draw at this instant, in watts.",
    ),
    F(
        ("power.limit", "gpu.power.requested_limit"),
        "W",
        lambda c: _w(c.d.power_limit()),
        "The software power limit, in watts.",
    ),
    F(
        ("enforced.power.limit", "gpu.power.current_limit"),
        "W",
        lambda c: _w(c.d.enforced_power_limit()),
        "The power limit in force (the lowest of all limits), in watts.",
    ),
    F(
        ("power.default_limit", "gpu.power.default_limit"),
        "W",
        lambda c: _w(c.d.default_power_limit()),
        "The power limit after a reset, in watts.",
    ),
    F(
        ("power.min_limit", "gpu.power.min_limit"),
        "W",
        lambda c: _w(c.d.power_limit_constraints()[0]),
        "The lowest power limit that may be set, in watts.",
    ),
    F(
        ("power.max_limit", "gpu.power.max_limit"),
        "W",
        lambda c: _w(c.d.power_limit_constraints()[1]),
        "The highest power limit that may be set, in watts.",
    ),
    F(
        ("module.power.draw.average",),
        "W",
        _na,
        "Module (GPU, CPU and memory) power averaged over one second, in watts.",
    ),
    F(("module.power.draw.instant",), "W", _na, "Module power at this instant, in watts."),
    F(
        ("module.power.limit", "module.power.requested_limit"),
        "W",
        _na,
        "The module's software power limit, in watts.",
    ),
    F(
        ("module.enforced.power.limit", "module.power.current_limit"),
        "W",
        _na,
        "The module power limit in force, in watts.",
    ),
    F(("module.power.default_limit",), "W", _na, "The module power limit after a reset, in watts."),
    F(
        ("module.power.min_limit",),
        "W",
        _na,
        "The lowest module power limit that may be set, in watts.",
    ),
    F(
        ("module.power.max_limit",),
        "W",
        _na,
        "The highest module power limit that may be set, in watts.",
    ),
    F(("gpu.base.current",), "W", _na, "The base power setting software asked for.", V610),
    F(("gpu.base.requested",), "W", _na, "The base power setting in force.", V610),
    F(("gpu.base.default",), "W", _na, "The base power setting after a reset.", V610),
    F(("gpu.base.min",), "W", _na, "The lowest base power setting allowed.", V610),
    F(("gpu.base.max",), "W", _na, "The highest base power setting allowed.", V610),
    *_smoothing_fields(),
    F(
        ("edpp_multiplier",),
        "%",
        _percent(FI_EDPP_MULTIPLIER),
        "The electrical design point (EDPp) multiplier, in percent.",
    ),
    F(
        ("clocks.current.graphics", "clocks.gr"),
        "MHz",
        lambda c: c.d.clock_info(CLOCK_GRAPHICS),
        "Graphics (shader) clock now.",
    ),
    F(
        ("clocks.current.sm", "clocks.sm"),
        "MHz",
        lambda c: c.d.clock_info(CLOCK_SM),
        "Streaming multiprocessor clock now.",
    ),
    F(
        ("clocks.current.memory", "clocks.mem"),
        "MHz",
        lambda c: c.d.clock_info(CLOCK_MEM),
        "Memory clock now.",
    ),
    F(
        ("clocks.current.video", "clocks.video"),
        "MHz",
        lambda c: c.d.clock_info(CLOCK_VIDEO),
        "Video (encoder and decoder) clock now.",
    ),
    F(
        ("clocks.applications.graphics", "clocks.applications.gr"),
        "MHz",
        _until_deprecated(lambda c: c.d.applications_clock(CLOCK_GRAPHICS)),
        "Graphics clock applications run at.",
    ),
    F(
        ("clocks.applications.memory", "clocks.applications.mem"),
        "MHz",
        _until_deprecated(lambda c: c.d.applications_clock(CLOCK_MEM)),
        "Memory clock applications run at.",
    ),
    F(
        ("clocks.default_applications.graphics", "clocks.default_applications.gr"),
        "MHz",
        _until_deprecated(lambda c: c.d.default_applications_clock(CLOCK_GRAPHICS)),
        "Default graphics clock for applications.",
    ),
    F(
        ("clocks.default_applications.memory", "clocks.default_applications.mem"),
        "MHz",
        _until_deprecated(lambda c: c.d.default_applications_clock(CLOCK_MEM)),
        "Default memory clock for applications.",
    ),
    F(
        ("clocks.max.graphics", "clocks.max.gr"),
        "MHz",
        lambda c: c.d.max_clock_info(CLOCK_GRAPHICS),
        "Highest graphics clock.",
    ),
    F(
        ("clocks.max.sm",),
        "MHz",
        lambda c: c.d.max_clock_info(CLOCK_SM),
        "Highest streaming multiprocessor clock.",
    ),
    F(
        ("clocks.max.memory", "clocks.max.mem"),
        "MHz",
        lambda c: c.d.max_clock_info(CLOCK_MEM),
        "Highest memory clock.",
    ),
    F(("mig.mode.current",), "", lambda c: enabled(c.d.mig_mode()[0]), "Whether MIG is on."),
    F(
        ("mig.mode.pending",),
        "",
        lambda c: enabled(c.d.mig_mode()[1]),
        "Whether MIG is on after the next reset.",
    ),
    F(("gsp.mode.current",), "", _gsp(0), "Whether GSP firmware runs the GPU."),
    F(("gsp.mode.default",), "", _gsp(1), "Whether GSP firmware runs the GPU by default."),
    F(
        ("c2c.mode",),
        "",
        lambda c: enabled(c.d.c2c_mode()),
        "Whether the chip-to-chip link to the CPU is on.",
    ),
    F(
        ("protected_memory.total",),
        "MiB",
        _protected("total"),
        "Memory set aside for confidential computing.",
    ),
    F(
        ("protected_memory.used",),
        "MiB",
        _protected("used"),
        "Confidential computing memory in use.",
    ),
    F(
        ("protected_memory.free",),
        "MiB",
        _protected("free"),
        "Confidential computing memory not in use.",
    ),
    F(
        ("fabric.state",),
        "",
        _fabric(lambda c: FABRIC_STATES.get(int(c.fabric.state), "N/A")),
        "Where the GPU is in NVLink fabric registration.",
    ),
    F(
        ("fabric.status",),
        "",
        _fabric(lambda c: c.nvml.error_string(int(c.fabric_done().status))),
        "The result of fabric registration once it completed.",
    ),
    F(
        ("fabric.cliqueId",),
        "",
        _fabric(lambda c: c.fabric_done().cliqueId),
        "The NVLink clique the GPU belongs to.",
    ),
    F(
        ("fabric.clusterUuid",),
        "",
        _fabric(lambda c: fabric_uuid(c.fabric_done().clusterUuid)),
        "The UUID of the NVLink cluster (ComputeDomain) the GPU belongs to.",
    ),
    F(
        ("fabric.health.summary",),
        "",
        _fabric(lambda c: FABRIC_SUMMARY.get(int(c.fabric_done().healthSummary), "N/A")),
        "Overall fabric health.",
    ),
    F(
        ("fabric.health.bandwidth",),
        "",
        _fabric(_mask(0, BANDWIDTH)),
        "Whether NVLink bandwidth is full or degraded.",
    ),
    F(
        ("fabric.health.route_recovery_in_progress",),
        "",
        _fabric(_mask(2, TRUE_FALSE)),
        "Whether a fabric route is being recovered.",
    ),
    F(
        ("fabric.health.route_unhealthy",),
        "",
        _fabric(_mask(4, TRUE_FALSE)),
        "Whether a fabric route is unhealthy.",
    ),
    F(
        ("fabric.health.access_timeout_recovery",),
        "",
        _fabric(_mask(6, TRUE_FALSE)),
        "Whether the GPU recovers from a fabric access timeout.",
    ),
    F(
        ("fabric.health.incorrect_configuration",),
        "",
        _fabric(_mask(8, INCORRECT_CONFIG)),
        "What, if anything, is misconfigured in the fabric.",
    ),
    F(
        ("fabric.health.partition_assigned",),
        "",
        _fabric(_mask(12, TRUE_FALSE)),
        "Whether the GPU has a fabric partition.",
        V595,
    ),
    F(
        ("platform.chassis_serial_number",),
        "",
        _platform(lambda p: decode_bytes(p.chassisSerialNumber), _const("")),
        "Serial number of the chassis holding the GPU.",
    ),
    F(
        ("platform.slot_number",),
        "",
        _platform(lambda p: platform_slot(p.slotNumber), _const("0")),
        "Slot of the chassis holding the GPU.",
    ),
    F(
        ("platform.tray_index",),
        "",
        _platform(lambda p: platform_slot(p.trayIndex), _const("0")),
        "Compute tray holding the GPU.",
    ),
    F(
        ("platform.host_id",),
        "",
        _platform(lambda p: p.hostId, _const("1")),
        "Host within the tray.",
    ),
    F(
        ("platform.peer_type",),
        "",
        _platform(lambda p: PEER_TYPES.get(int(p.peerType), "N/A"), _const(PEER_TYPES[0])),
        "How NVLink peers are reached (direct or through switches).",
    ),
    F(
        ("platform.module_id",),
        "",
        _platform(lambda p: p.moduleId, lambda c: c.d.module_id()),
        "The GPU's module number within its host.",
    ),
    F(
        ("platform.gpu_fabric_guid",),
        "",
        _platform(lambda p: "0x" + bytes(p.ibGuid)[:8].hex(), _const("0x" + "0" * 16)),
        "The GPU's fabric GUID.",
    ),
    F(("hostname",), "", _na, "The hostname an administrator stored on the GPU."),
    F(
        ("bbx.time_run",),
        "seconds",
        _na,
        "How long the GPU has run since it was first initialized, in seconds.",
        V610,
    ),
]


def _whole_gpu_only(read: Reader) -> Reader:
    """``read``, but ``[N/A]`` while the GPU is in MIG mode, as the real tool prints the
    remapped-row properties of a MIG-enabled GPU."""

    def field(c: Ctx) -> Any:
        try:
            mig = c.d.mig_mode()[0]
        except NvmlError:
            mig = 0
        if mig == 1:
            raise NotAvailableError
        return read(c)

    return field


for _field in FIELDS:
    if _field.name.startswith("remapped_rows."):
        _field.read = _whole_gpu_only(_field.read)

BY_NAME: dict[str, Field] = {name.lower(): f for f in FIELDS for name in f.names}


def lookup(name: str, driver: tuple[int, ...] | None = None) -> Field | None:
    """The property ``name`` names, or None; with ``driver``, only if that driver accepts it."""
    field = BY_NAME.get(name.strip().lower())
    if field is None or driver is None:
        return field
    if driver < field.since or (field.until is not None and driver >= field.until):
        return None
    return field


def refuse_newer(nvml: Nvml, names: tuple[str, ...]) -> None:
    """Refuse, as that driver's tool does, a property newer than the driver NVML reports."""
    try:
        driver = parse_driver_version(nvml.driver_version())
    except NvmlError:
        return
    for name in names:
        if lookup(name, driver) is None:
            raise SmiError(f'Field "{name}" is not a valid field to query.', EXIT_INVALID_ARGUMENT)


def help_text(driver: tuple[int, ...] | None = None) -> str:
    """The ``--help-query-gpu`` listing: each property, its aliases, and what it holds; with
    ``driver``, only the properties that driver's tool knows (the real tool ships with its
    driver, so its list is that driver's)."""
    out = ["", 'List of valid properties to query for the switch "--query-gpu":', ""]
    for f in FIELDS:
        if driver is not None and lookup(f.name, driver) is None:
            continue
        out.append(" or ".join(f'"{n}"' for n in f.names))
        unit = f" Unit: {f.unit}." if f.unit else ""
        out.append(f.help + unit)
        out.append("")
    return "\n".join(out) + "\n"
