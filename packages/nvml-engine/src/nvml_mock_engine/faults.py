"""Fault recipes: what each fault writes to a GPU's live record, as a real driver shows it.

A recipe is data about one fault: the live values it sets and the NVML events it sends. It
reads the GPU's current values (a live value where one is set, else the board's) so that
counters grow and clock-event reasons accumulate instead of being overwritten, and it picks
what the GPU's architecture reports. Nothing here writes: :func:`plan` returns a
:class:`FaultPlan` that ``nvml-mock-ctl`` validates for every selected GPU before it writes
any of them.

Sources of the facts used below:

- ``nvml.h`` (the ``nvidia-nvml-dev`` package): the ``nvmlClocksEventReason*`` bits, the
  ``nvmlEventType*`` bits, ``NVML_GPU_FABRIC_HEALTH_MASK_*`` fields and
  ``nvmlDeviceGpuRecoveryAction_t``. Its comments say a hardware thermal or power-brake
  slowdown "reduc[es] the core clocks by a factor of 2 or more", and that
  ``nvmlClocksEventReasonHwSlowdown`` is the umbrella bit for both.
- ``nvmlDeviceGetRetiredPages`` / ``nvmlDeviceGetRemappedRows`` in ``nvml.h``: GPUs before
  Ampere retire pages; Ampere and later remap rows instead (``nvmlDeviceArchitecture_t``
  Ampere = 7).
- NVIDIA's Xid catalogue (the "Xid Errors" page of the GPU deployment and management
  documentation): 48 double-bit ECC error; 63 ECC page retirement or row-remapping recording
  event; 64 ECC page retirement or row-remapper recording failure; 74 NVLink error; 79 GPU
  has fallen off the bus; 94 contained ECC error; 95 uncontained ECC error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from nvml_mock_live import BoardGpu, vocabulary

from nvml_mock_engine.errors import LiveValueError
from nvml_mock_engine.schema import LIVE_GPU_KEYS, parse_default

__all__ = [
    "ARCH_AMPERE",
    "CLOCKS_EVENT_REASONS",
    "EVENT_CLOCK",
    "EVENT_DOUBLE_BIT_ECC",
    "EVENT_SINGLE_BIT_ECC",
    "EVENT_XID",
    "FABRIC_HEALTH_FIELDS",
    "FAULTS",
    "INCORRECT_CONFIGURATION",
    "RECOVERY_ACTIONS",
    "Event",
    "FaultOptions",
    "FaultPlan",
    "GpuView",
    "fabric_mask",
    "plan",
]

ARCH_AMPERE: Final = 7
"""``NVML_DEVICE_ARCH_AMPERE``: from here on, uncorrectable errors remap rows."""

# nvmlEventType* (nvml.h), as keys.toml [vocabulary] events declares them
EVENT_SINGLE_BIT_ECC: Final = vocabulary.EVENTS["single-bit-ecc"]
EVENT_DOUBLE_BIT_ECC: Final = vocabulary.EVENTS["double-bit-ecc"]
EVENT_XID: Final = vocabulary.EVENTS["xid"]
EVENT_CLOCK: Final = vocabulary.EVENTS["clock"]

# nvmlClocksEventReason* (nvml.h), by the names nvml-mock-ctl accepts
CLOCKS_EVENT_REASONS: Final[Mapping[str, int]] = {
    "gpu-idle": 0x1,
    "applications-clocks-setting": 0x2,
    "sw-power-cap": 0x4,
    "hw-slowdown": 0x8,
    "sync-boost": 0x10,
    "sw-thermal-slowdown": 0x20,
    "hw-thermal-slowdown": 0x40,
    "hw-power-brake-slowdown": 0x80,
    "display-clock-setting": 0x100,
}

# nvmlDeviceGpuRecoveryAction_t (nvml.h)
RECOVERY_ACTIONS: Final[Mapping[str, int]] = {
    "none": 0,
    "gpu-reset": 1,
    "node-reboot": 2,
    "drain-p2p": 3,
    "drain-and-reset": 4,
    "recover-imex-domain": 5,
    "bus-reset": 6,
    "system-reboot": 7,
}

# NVML_GPU_FABRIC_HEALTH_MASK_*: (shift, width) of the yes/no fields; value 1 = TRUE (the
# condition holds), 2 = FALSE
FABRIC_HEALTH_FIELDS: Final[Mapping[str, tuple[int, int]]] = {
    "degraded-bandwidth": (0, 0x3),
    "route-recovery": (2, 0x3),
    "route-unhealthy": (4, 0x3),
    "access-timeout-recovery": (6, 0x3),
}
_INCORRECT_CONFIG_SHIFT: Final = 8
_INCORRECT_CONFIG_WIDTH: Final = 0xF
INCORRECT_CONFIGURATION: Final[Mapping[str, int]] = {
    "none": 1,
    "sysguid": 2,
    "chassis-sn": 3,
    "no-partition": 4,
    "insufficient-nvlinks": 5,
    "incompatible-gpu-fw": 6,
    "invalid-location": 7,
    "gpu-state-invalid": 8,
}
"""``NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*`` (``none`` = correct)."""


def fabric_mask(
    mask: int, flags: Mapping[str, bool], incorrect_configuration: str | None = None
) -> int:
    """*mask* with the named yes/no fields set (True = the condition holds) and, when given,
    the incorrect-configuration field; other fields are kept."""
    for name, holds in flags.items():
        shift, width = FABRIC_HEALTH_FIELDS[name]
        mask = (mask & ~(width << shift)) | ((1 if holds else 2) << shift)
    if incorrect_configuration is not None:
        value = INCORRECT_CONFIGURATION[incorrect_configuration]
        mask = (mask & ~(_INCORRECT_CONFIG_WIDTH << _INCORRECT_CONFIG_SHIFT)) | (
            value << _INCORRECT_CONFIG_SHIFT
        )
    return mask


@dataclass(frozen=True, slots=True)
class Event:
    """One NVML event to send: an ``nvmlEventType*`` bit and its data (the Xid for Xids), on
    the whole GPU or on one MIG device of it (its GPU and compute instance ids)."""

    event_type: int
    data: int = 0
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """What one fault does to one GPU: live values to set, then events to send."""

    fault: str
    values: Mapping[str, int]
    events: tuple[Event, ...] = ()


@dataclass(frozen=True, slots=True)
class FaultOptions:
    """The knobs of the recipes (each recipe reads the ones it has)."""

    count: int = 1
    """ECC errors (or NVLink errors) to add."""
    uncontained: bool = False
    """ecc-uncorrectable on Ampere+: Xid 95 (uncontained) instead of 94 (contained)."""
    remap_failure: bool = False
    """ecc-uncorrectable: the retirement / remap could not be recorded (Xid 64)."""
    temperature_c: int | None = None
    """thermal: the temperature to show (default: the slowdown threshold + 3)."""
    links: tuple[int, ...] = (0,)
    """nvlink-down: the links that go down."""
    fabric_reasons: tuple[str, ...] = ("degraded-bandwidth",)
    """fabric-degraded: the health fields that turn bad (FABRIC_HEALTH_FIELDS names, or
    ``incorrect-configuration``)."""


@dataclass(frozen=True, slots=True)
class GpuView:
    """A GPU as a recipe sees it: the board, and the live values already set on it."""

    board: BoardGpu
    live: Mapping[str, int] = field(default_factory=dict)

    @property
    def architecture(self) -> int:
        return self.board.number("architecture")

    def board_number(self, key: str) -> int:
        return self.board.number(key)

    def current(self, key: str) -> int:
        """The value NVML answers now for a live key: the live one if set, else the board's,
        else the declared default."""
        if key in self.live:
            return self.live[key]
        if key in self.board.values:
            return self.board.number(key)
        default = parse_default(LIVE_GPU_KEYS[key])
        return int(default) if isinstance(default, int) else 0


def _xid(code: int) -> Event:
    return Event(EVENT_XID, code)


def _lost(gpu: GpuView, options: FaultOptions) -> FaultPlan:
    return FaultPlan("lost", {"gpu_lost": 1})


def _fallen_off_bus(gpu: GpuView, options: FaultOptions) -> FaultPlan:
    # Xid 79 "GPU has fallen off the bus"; afterwards every call answers GPU_IS_LOST. The
    # values go first, so a waiter woken by the Xid already finds the GPU lost.
    return FaultPlan("fallen-off-bus", {"gpu_lost": 1}, (_xid(79),))


def _ecc_uncorrectable(gpu: GpuView, options: FaultOptions) -> FaultPlan:
    n = options.count
    values = {
        "ecc_volatile_uncorrected": gpu.current("ecc_volatile_uncorrected") + n,
        "ecc_aggregate_uncorrected": gpu.current("ecc_aggregate_uncorrected") + n,
        "recovery_action": RECOVERY_ACTIONS["gpu-reset"],
    }
    events = [Event(EVENT_DOUBLE_BIT_ECC)]
    record = 64 if options.remap_failure else 63
    if gpu.architecture < ARCH_AMPERE:
        # page retirement: Xid 48 (DBE), then the retirement's record (63) or its failure (64)
        events.append(_xid(48))
        if not options.remap_failure:
            values["retired_pages_dbe"] = gpu.current("retired_pages_dbe") + n
            values["retired_pages_pending"] = 1
    else:
        # row remapping: the error is contained (94) or not (95), then the remap is
        # recorded (63, pending until a reset) or fails (64)
        events.append(_xid(95 if options.uncontained else 94))
        if options.remap_failure:
            values["remapped_rows_failure"] = 1
            if gpu.current("unrepairable_memory") >= 0:  # -1: the board answers NOT_SUPPORTED
                values["unrepairable_memory"] = 1
        else:
            values["remapped_rows_uncorrectable"] = gpu.current("remapped_rows_uncorrectable") + n
            values["remapped_rows_pending"] = 1
    events.append(_xid(record))
    return FaultPlan("ecc-uncorrectable", values, tuple(events))


def _ecc_correctable(gpu: GpuView, options: FaultOptions) -> FaultPlan:
    n = options.count
    values = {
        "ecc_volatile_corrected": gpu.current("ecc_volatile_corrected") + n,
        "ecc_aggregate_corrected": gpu.current("ecc_aggregate_corrected") + n,
    }
    return FaultPlan("ecc-correctable", values, (Event(EVENT_SINGLE_BIT_ECC),))


def _slowed(gpu: GpuView, factor: float) -> dict[str, int]:
    """Graphics and SM clocks at *factor* of their maximum (a GPU that hits a thermal or power
    limit is running under load, near its maximum clock)."""
    return {
        key: max(1, int(gpu.board_number(f"max_{key}") * factor))
        for key in ("clock_graphics_mhz", "clock_sm_mhz")
    }


def _reasons(gpu: GpuView, *names: str) -> int:
    bits = gpu.current("clocks_event_reasons")
    for name in names:
        bits |= CLOCKS_EVENT_REASONS[name]
    return bits & ~CLOCKS_EVENT_REASONS["gpu-idle"]


def _thermal(gpu: GpuView, options: FaultOptions) -> FaultPlan:
    slowdown = gpu.board_number("temp_slowdown_c")
    temperature = options.temperature_c if options.temperature_c is not None else slowdown + 3
    if slowdown and temperature <= slowdown:
        raise LiveValueError(
            "temperature_c",
            temperature,
            f"a thermal slowdown needs more than the slowdown threshold {slowdown} C "
            f"on GPU {gpu.board.index}",
        )
    values = {
        "temperature_c": temperature,
        "clocks_event_reasons": _reasons(
            gpu, "sw-thermal-slowdown", "hw-thermal-slowdown", "hw-slowdown"
        ),
        **_slowed(gpu, 0.5),
    }
    return FaultPlan("thermal", values, (Event(EVENT_CLOCK),))


def _power_cap(gpu: GpuView, options: FaultOptions) -> FaultPlan:
    values = {
        "power_usage_mw": gpu.current("power_limit_mw"),
        "clocks_event_reasons": _reasons(gpu, "sw-power-cap"),
        **_slowed(gpu, 0.85),
    }
    return FaultPlan("power-cap", values, (Event(EVENT_CLOCK),))


def _power_brake(gpu: GpuView, options: FaultOptions) -> FaultPlan:
    values = {
        "clocks_event_reasons": _reasons(gpu, "hw-power-brake-slowdown", "hw-slowdown"),
        **_slowed(gpu, 0.5),
    }
    return FaultPlan("power-brake", values, (Event(EVENT_CLOCK),))


def _nvlink_down(gpu: GpuView, options: FaultOptions) -> FaultPlan:
    links = gpu.board_number("nvlink_count")
    mask = gpu.current("nvlink_down_mask")
    for link in options.links:
        if not 0 <= link < links:
            why = "the GPU has no NVLinks" if links == 0 else f"the GPU's links are 0..{links - 1}"
            raise LiveValueError("link", link, f"{why} (GPU {gpu.board.index})")
        mask |= 1 << link
    n = options.count
    values = {
        "nvlink_down_mask": mask,
        "nvlink_crc_errors": gpu.current("nvlink_crc_errors") + n,
        "nvlink_replay_errors": gpu.current("nvlink_replay_errors") + n,
        "nvlink_recovery_errors": gpu.current("nvlink_recovery_errors") + 1,
    }
    return FaultPlan("nvlink-down", values, (_xid(74),))


def _fabric_degraded(gpu: GpuView, options: FaultOptions) -> FaultPlan:
    if gpu.board_number("fabric_attached") != 1:
        raise LiveValueError(
            "fabric_health_mask",
            "degraded",
            f"GPU {gpu.board.index} is not fabric-attached (no fabric info)",
        )
    flags = {r: True for r in options.fabric_reasons if r in FABRIC_HEALTH_FIELDS}
    incorrect = "no-partition" if "incorrect-configuration" in options.fabric_reasons else None
    mask = fabric_mask(gpu.current("fabric_health_mask"), flags, incorrect)
    return FaultPlan("fabric-degraded", {"fabric_health_mask": mask})


_PLANS: Final[Mapping[str, Callable[[GpuView, FaultOptions], FaultPlan]]] = {
    "lost": _lost,
    "fallen-off-bus": _fallen_off_bus,
    "ecc-uncorrectable": _ecc_uncorrectable,
    "ecc-correctable": _ecc_correctable,
    "thermal": _thermal,
    "power-cap": _power_cap,
    "power-brake": _power_brake,
    "nvlink-down": _nvlink_down,
    "fabric-degraded": _fabric_degraded,
}
if set(_PLANS) != set(vocabulary.FAULTS):  # one declaration (keys.toml), one plan each
    raise ImportError(
        "fault plans differ from keys.toml [vocabulary] faults: "
        f"{sorted(set(_PLANS) ^ set(vocabulary.FAULTS))}"
    )
FAULTS: Final[Mapping[str, Callable[[GpuView, FaultOptions], FaultPlan]]] = {
    name: _PLANS[name] for name in vocabulary.FAULTS
}
"""Every fault ``nvml-mock-ctl fail`` knows, by name, in the declaration's order: the plan of
each recipe ``keys.toml`` ``[vocabulary] faults`` declares."""


def plan(fault: str, gpu: GpuView, options: FaultOptions | None = None) -> FaultPlan:
    """What *fault* writes on *gpu*. Raises :class:`LiveValueError` for an unknown fault or
    an option the GPU cannot take (a link it does not have, a temperature below slowdown)."""
    recipe = FAULTS.get(fault)
    if recipe is None:
        raise LiveValueError("fault", fault, f"is not a fault; faults: {', '.join(FAULTS)}")
    return recipe(gpu, options or FaultOptions())
