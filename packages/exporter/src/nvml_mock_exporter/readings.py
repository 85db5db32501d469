"""The GPUs as NVML shows them, and one reading of every family for one of them.

Everything goes through nvidia-ml-py, as a real exporter's calls go through the driver's
NVML: the device fields through one ``nvmlDeviceGetFieldValues`` batch per GPU (DCGM reads
them that way) plus the handful of plain getters the batch does not cover, the profiling
fields through GPM (two samples: the previous collection's and this one's), the MIG
instances through the MIG device handles. A value NVML does not answer (``NOT_SUPPORTED``,
a field's own error) is left out, as dcgm-exporter leaves out a blank value; a GPU that
answers ``GPU_IS_LOST`` loses every series it had (:class:`GpuLost`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import pynvml

from nvml_mock_exporter.errors import GpuLost

__all__ = [
    "FIELD_IDS",
    "Entity",
    "Gpu",
    "GpuLost",
    "Reader",
    "discover",
    "driver_version",
    "entities_of",
]

logger = logging.getLogger(__name__)

MIB: Final = 1 << 20

FIELD_IDS: Final[dict[str, tuple[int, float]]] = {
    # family: (NVML field id, scale applied to its value)
    "DCGM_FI_DEV_MEMORY_TEMP": (pynvml.NVML_FI_DEV_MEMORY_TEMP, 1),
    "DCGM_FI_DEV_POWER_USAGE": (pynvml.NVML_FI_DEV_POWER_INSTANT, 1e-3),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 1),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": (pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER, 1),
    "DCGM_FI_DEV_POWER_VIOLATION": (pynvml.NVML_FI_DEV_PERF_POLICY_POWER, 1),
    "DCGM_FI_DEV_THERMAL_VIOLATION": (pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL, 1),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": (pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, 1),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, 1),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": (pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL, 1),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": (pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL, 1),
    "DCGM_FI_DEV_RETIRED_SBE": (pynvml.NVML_FI_DEV_RETIRED_SBE, 1),
    "DCGM_FI_DEV_RETIRED_DBE": (pynvml.NVML_FI_DEV_RETIRED_DBE, 1),
    "DCGM_FI_DEV_RETIRED_PENDING": (pynvml.NVML_FI_DEV_RETIRED_PENDING, 1),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": (
        pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
        1,
    ),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": (
        pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
        1,
    ),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": (
        pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
        1,
    ),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": (
        pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
        1,
    ),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": (pynvml.NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL, 1),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (pynvml.NVML_FI_DEV_REMAPPED_UNC, 1),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": (pynvml.NVML_FI_DEV_REMAPPED_COR, 1),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": (pynvml.NVML_FI_DEV_REMAPPED_FAILURE, 1),
}
"""The families answered by one NVML field value each, read in one batch per GPU."""

GPM_METRICS: Final[dict[str, tuple[int, float]]] = {
    # family: (GPM metric id, scale: percent to ratio, MiB/s to bytes/s)
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, 0.01),
    "DCGM_FI_PROF_SM_ACTIVE": (pynvml.NVML_GPM_METRIC_SM_UTIL, 0.01),
    "DCGM_FI_PROF_SM_OCCUPANCY": (pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, 0.01),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, 0.01),
    "DCGM_FI_PROF_DRAM_ACTIVE": (pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, 0.01),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": (pynvml.NVML_GPM_METRIC_FP64_UTIL, 0.01),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": (pynvml.NVML_GPM_METRIC_FP32_UTIL, 0.01),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": (pynvml.NVML_GPM_METRIC_FP16_UTIL, 0.01),
    "DCGM_FI_PROF_PCIE_TX_BYTES": (pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, float(MIB)),
    "DCGM_FI_PROF_PCIE_RX_BYTES": (pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, float(MIB)),
}
"""The profiling families, answered by GPM between two samples."""

_FB: Final = frozenset({"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED"})
_UTIL: Final = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"})
_GPU_SENSOR: Final = pynvml.NVML_TEMPERATURE_GPU
_SM: Final = pynvml.NVML_CLOCK_SM
_MEM: Final = pynvml.NVML_CLOCK_MEM

_LOST: Final = pynvml.NVML_ERROR_GPU_IS_LOST
HEALTH: Final = "DCGM_EXP_GPU_HEALTH_STATUS"
HEALTH_INPUTS: Final = frozenset(
    {
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_RETIRED_PENDING",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    }
)
"""What the health family is derived from, read whether or not those families are served."""


@dataclass(frozen=True, slots=True)
class Gpu:
    """A GPU's identity, read once: what its series' labels say."""

    index: int
    handle: Any
    uuid: str
    bus_id: str
    model: str
    serial: str
    vbios: str
    gpm: bool
    links: int = 0
    """NVLinks the board has (0 on PCIe-only boards)."""


@dataclass(frozen=True, slots=True)
class Entity:
    """What one set of series is about: a whole GPU, or one GPU instance of it (MIG)."""

    gpu: Gpu
    gi_id: int | None = None
    profile: str | None = None
    mig_handle: Any = None


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _optional(call: Callable[..., Any], *args: Any) -> str:
    try:
        return _text(call(*args))
    except pynvml.NVMLError:
        return ""


def driver_version() -> str:
    """The driver version, for the ``DCGM_FI_DRIVER_VERSION`` label."""
    return _text(pynvml.nvmlSystemGetDriverVersion())


def discover() -> list[Gpu]:
    """Every GPU NVML enumerates that answers its identity; a lost one is logged and skipped."""
    gpus = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            bus_id = _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)
            model = _text(pynvml.nvmlDeviceGetName(handle))
        except pynvml.NVMLError as exc:
            logger.warning("GPU %d has no identity now (%s); it is left out", index, exc)
            continue
        try:
            gpm = bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
        except pynvml.NVMLError:
            gpm = False
        try:
            links = pynvml.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT])[
                0
            ]
            link_count = int(_field_value(links) or 0)
        except (pynvml.NVMLError, GpuLost):
            link_count = 0
        gpus.append(
            Gpu(
                index=index,
                handle=handle,
                uuid=uuid,
                bus_id=bus_id,
                model=model,
                serial=_optional(pynvml.nvmlDeviceGetSerial, handle),
                vbios=_optional(pynvml.nvmlDeviceGetVbiosVersion, handle),
                gpm=gpm,
                links=link_count,
            )
        )
    return gpus


def entities_of(gpu: Gpu) -> list[Entity]:
    """The GPU itself, or in MIG mode one entity per GPU instance (by its first MIG device);
    a GPU in MIG mode without any instance is the GPU itself."""
    try:
        current, _ = pynvml.nvmlDeviceGetMigMode(gpu.handle)
    except pynvml.NVMLError as exc:
        if exc.value == _LOST:
            raise GpuLost(gpu.uuid) from None
        return [Entity(gpu)]
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return [Entity(gpu)]
    found: dict[int, Entity] = {}
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu.handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
            gi = pynvml.nvmlDeviceGetGpuInstanceId(mig)
            name = _text(pynvml.nvmlDeviceGetName(mig))
        except pynvml.NVMLError:
            continue
        profile = name.rsplit(" MIG ", 1)[-1]
        # a compute instance smaller than its GPU instance ("1c.3g.40gb"): the GPU instance's
        head, _, rest = profile.partition(".")
        if head.endswith("c") and rest:
            profile = rest
        found.setdefault(gi, Entity(gpu, gi, profile, mig))
    if not found:
        # MIG mode with no GPU instance yet: the GPU itself is still there to report (its
        # temperature, ECC, Xids and health), as dcgm-exporter reports it
        return [Entity(gpu)]
    return [found[gi] for gi in sorted(found)]


_FIELD_VALUE: Final = struct.Struct("<IIqqII8s")
"""``nvmlFieldValue_t``: fieldId, scopeId, timestamp, latencyUsec, valueType, nvmlReturn, value.
A batch is decoded from its bytes in one pass: going field by field through the ctypes
structures costs more than the NVML call itself on a 64-GPU node."""
_VALUE_FORMATS: Final = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "<d",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "<I",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "<Q",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "<Q",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "<q",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "<i",
}


def _decode(kind: int, rc: int, raw: bytes) -> float | None:
    if rc != pynvml.NVML_SUCCESS:
        if rc == _LOST:
            raise GpuLost("field values")
        return None
    fmt = _VALUE_FORMATS.get(kind)
    if fmt is None:
        return None
    number: float = struct.unpack_from(fmt, raw)[0]
    return float(number)


def _field_values(values: Any) -> list[float | None]:
    """A whole batch of ``nvmlFieldValue_t``, as numbers (None: not answered)."""
    return [_decode(row[4], row[5], row[6]) for row in _FIELD_VALUE.iter_unpack(bytes(values))]


def _field_value(value: Any) -> float | None:
    return _field_values(value)[0]


def _GET_FIELD_VALUES() -> Any:  # noqa: N802 - stands for the C function
    return pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")


class _Gpm:
    """One entity's GPM state: two samples that take turns, and a request built once."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.request = pynvml.c_nvmlGpmMetricsGet_t()
        self.request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        self.request.numMetrics = len(names)
        for i, name in enumerate(names):
            self.request.metrics[i].metricId = GPM_METRICS[name][0]
        self.previous: Any = pynvml.nvmlGpmSampleAlloc()
        self.current: Any = pynvml.nvmlGpmSampleAlloc()
        self.primed = False

    def free(self) -> None:
        for sample in (self.previous, self.current):
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlGpmSampleFree(sample)


@dataclass
class Reader:
    """Reads the selected families of each entity; keeps each entity's last GPM sample."""

    selected: frozenset[str]
    _gpm: dict[tuple[int, int | None], _Gpm] = field(default_factory=dict)
    _batches: dict[tuple[int, int | None], tuple[list[Any], Any]] = field(default_factory=dict)

    def select(self, names: Iterable[str]) -> None:
        self.selected = frozenset(names)

    def _call(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except pynvml.NVMLError as exc:
            if exc.value == _LOST:
                raise GpuLost(str(exc)) from None
            return None

    def read(self, entity: Entity) -> dict[str, float]:
        """One value per selected family NVML answers for *entity*; :class:`GpuLost` if lost.

        With the health family selected, its inputs are read too (under their family names,
        and ``_``-prefixed keys for what no family serves); the renderer writes only the
        families selected."""
        h = entity.gpu.handle
        health = HEALTH in self.selected
        want = self.selected | HEALTH_INPUTS if health else self.selected
        out: dict[str, float] = {}
        batch = [name for name in FIELD_IDS if name in want]
        ids: list[Any] = [FIELD_IDS[n][0] for n in batch]
        if health:
            ids += [(pynvml.NVML_FI_DEV_NVLINK_GET_STATE, link) for link in range(entity.gpu.links)]
            ids.append(pynvml.NVML_FI_DEV_REMAPPED_PENDING)
        if ids:
            values = self._fields(entity, ids)
            for name, number in zip(batch, values, strict=False):
                if number is not None:
                    out[name] = number * FIELD_IDS[name][1]
            if health and values:
                states = values[len(batch) : len(batch) + entity.gpu.links]
                out["_links_down"] = float(sum(1 for v in states if v == 0))
                out["_remap_pending"] = values[-1] or 0.0
                reasons = self._call(pynvml.nvmlDeviceGetCurrentClocksEventReasons, h)
                out["_clock_reasons"] = float(reasons or 0)
        if "DCGM_FI_DEV_GPU_TEMP" in want:
            self._put(out, "DCGM_FI_DEV_GPU_TEMP", pynvml.nvmlDeviceGetTemperature, h, _GPU_SENSOR)
        if "DCGM_FI_DEV_SM_CLOCK" in want:
            self._put(out, "DCGM_FI_DEV_SM_CLOCK", pynvml.nvmlDeviceGetClockInfo, h, _SM)
        if "DCGM_FI_DEV_MEM_CLOCK" in want:
            self._put(out, "DCGM_FI_DEV_MEM_CLOCK", pynvml.nvmlDeviceGetClockInfo, h, _MEM)
        if entity.gi_id is None and not want.isdisjoint(_UTIL):
            util = self._call(pynvml.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                out["DCGM_FI_DEV_GPU_UTIL"] = float(util.gpu)
                out["DCGM_FI_DEV_MEM_COPY_UTIL"] = float(util.memory)
        if "DCGM_FI_DEV_ENC_UTIL" in want:
            enc = self._call(pynvml.nvmlDeviceGetEncoderUtilization, h)
            if enc is not None:
                out["DCGM_FI_DEV_ENC_UTIL"] = float(enc[0])
        if "DCGM_FI_DEV_DEC_UTIL" in want:
            dec = self._call(pynvml.nvmlDeviceGetDecoderUtilization, h)
            if dec is not None:
                out["DCGM_FI_DEV_DEC_UTIL"] = float(dec[0])
        if not want.isdisjoint(_FB):
            target = entity.mig_handle if entity.mig_handle is not None else h
            memory = self._call(pynvml.nvmlDeviceGetMemoryInfo, target, pynvml.nvmlMemory_v2)
            if memory is not None:
                out["DCGM_FI_DEV_FB_FREE"] = float(memory.free // MIB)
                out["DCGM_FI_DEV_FB_USED"] = float(memory.used // MIB)
                out["DCGM_FI_DEV_FB_RESERVED"] = float(memory.reserved // MIB)
        if "DCGM_FI_DEV_VGPU_LICENSE_STATUS" in want:
            out["DCGM_FI_DEV_VGPU_LICENSE_STATUS"] = 0.0  # bare metal: no vGPU license to hold
        if entity.gpu.gpm and not want.isdisjoint(GPM_METRICS):
            self._profiling(entity, out)
        return out

    def _fields(self, entity: Entity, ids: list[Any]) -> list[float | None]:
        """One ``nvmlDeviceGetFieldValues`` batch, its request array built once per entity.

        The same call nvidia-ml-py's helper makes, with the array it would build each time
        kept between collections (filling it costs more than the call on a 64-GPU node)."""
        key = (entity.gpu.index, entity.gi_id)
        cached = self._batches.get(key)
        if cached is None or cached[0] != ids:
            array = (pynvml.c_nvmlFieldValue_t * len(ids))()
            for i, wanted in enumerate(ids):
                field_id, scope = wanted if isinstance(wanted, tuple) else (wanted, 0)
                array[i].fieldId, array[i].scopeId = field_id, scope
            cached = self._batches[key] = (ids, array)
        array = cached[1]
        rc = _GET_FIELD_VALUES()(entity.gpu.handle, ctypes.c_int32(len(ids)), ctypes.byref(array))
        if rc == _LOST:
            raise GpuLost("field values")
        if rc != pynvml.NVML_SUCCESS:
            return []
        return _field_values(array)

    def _put(self, out: dict[str, float], name: str, call: Callable[..., Any], *args: Any) -> None:
        value = self._call(call, *args)
        if value is not None:
            out[name] = float(value)

    def _profiling(self, entity: Entity, out: dict[str, float]) -> None:
        """The profiling families between the last collection's GPM sample and this one's."""
        key = (entity.gpu.index, entity.gi_id)
        names = [n for n in GPM_METRICS if n in self.selected]
        gpm = self._gpm.get(key)
        if gpm is None or gpm.names != names:
            if gpm is not None:
                gpm.free()
            gpm = self._gpm[key] = _Gpm(names)
        try:
            if entity.gi_id is None:
                pynvml.nvmlGpmSampleGet(entity.gpu.handle, gpm.current)
            else:
                pynvml.nvmlGpmMigSampleGet(entity.gpu.handle, entity.gi_id, gpm.current)
        except pynvml.NVMLError as exc:
            if exc.value == _LOST:
                raise GpuLost(str(exc)) from None
            return
        ok = False
        if gpm.primed:
            gpm.request.sample1 = gpm.previous
            gpm.request.sample2 = gpm.current
            try:
                pynvml.nvmlGpmMetricsGet(gpm.request)
                ok = True
            except pynvml.NVMLError as exc:
                if exc.value == _LOST:
                    raise GpuLost(str(exc)) from None
                # two samples in one telemetry quantum: the next collection has a later one
        gpm.previous, gpm.current = gpm.current, gpm.previous
        gpm.primed = True
        if not ok:
            return
        metrics = gpm.request.metrics
        for i, name in enumerate(names):
            metric = metrics[i]
            if metric.nvmlReturn == pynvml.NVML_SUCCESS:
                out[name] = metric.value * GPM_METRICS[name][1]

    def reset(self) -> None:
        """Drop every GPM sample and field batch (NVML is about to be initialised again:
        the handles they were made for are gone)."""
        for gpm in self._gpm.values():
            gpm.free()
        self._gpm.clear()
        self._batches.clear()

    def forget(self, gpu_index: int) -> None:
        """Drop a GPU's GPM samples (it was lost: its next sample starts afresh)."""
        for key in [k for k in self._gpm if k[0] == gpu_index]:
            self._gpm.pop(key).free()
