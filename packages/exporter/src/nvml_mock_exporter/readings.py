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
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import pynvml

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


class GpuLost(Exception):  # noqa: N818 - a condition, not a failure of the exporter
    """The GPU answered ``NVML_ERROR_GPU_IS_LOST``: its series are dropped."""


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


def _optional(call: Callable[[], Any]) -> str:
    try:
        return _text(call())
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
                serial=_optional(lambda h=handle: pynvml.nvmlDeviceGetSerial(h)),
                vbios=_optional(lambda h=handle: pynvml.nvmlDeviceGetVbiosVersion(h)),
                gpm=gpm,
                links=link_count,
            )
        )
    return gpus


def entities_of(gpu: Gpu) -> list[Entity]:
    """The GPU itself, or in MIG mode one entity per GPU instance (by its first MIG device)."""
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
    return [found[gi] for gi in sorted(found)]


def _field_value(value: Any) -> float | None:
    if value.nvmlReturn != pynvml.NVML_SUCCESS:
        if value.nvmlReturn == _LOST:
            raise GpuLost("field values")
        return None
    kind = value.valueType
    v = value.value
    if kind == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return float(v.dVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return float(v.uiVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return float(v.ulVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return float(v.ullVal)
    if kind == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return float(v.sllVal)
    if kind == pynvml.NVML_VALUE_TYPE_SIGNED_INT:
        return float(v.siVal)
    return None


@dataclass
class Reader:
    """Reads the selected families of each entity; keeps each entity's last GPM sample."""

    selected: frozenset[str]
    _samples: dict[tuple[int, int | None], Any] = field(default_factory=dict)

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
        """One value per selected family NVML answers for *entity*; :class:`GpuLost` if lost."""
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
            values = self._call(pynvml.nvmlDeviceGetFieldValues, h, ids) or ()
            for name, value in zip(batch, values, strict=False):
                number = _field_value(value)
                if number is not None:
                    out[name] = number * FIELD_IDS[name][1]
            if health and values:
                states = [
                    _field_value(v) for v in values[len(batch) : len(batch) + entity.gpu.links]
                ]
                out["_links_down"] = float(sum(1 for v in states if v == 0))
                pending = _field_value(values[-1])
                out["_remap_pending"] = pending or 0.0
                reasons = self._call(pynvml.nvmlDeviceGetCurrentClocksEventReasons, h)
                out["_clock_reasons"] = float(reasons or 0)
        if "DCGM_FI_DEV_GPU_TEMP" in want:
            self._put(
                out,
                "DCGM_FI_DEV_GPU_TEMP",
                pynvml.nvmlDeviceGetTemperature,
                h,
                pynvml.NVML_TEMPERATURE_GPU,
            )
        if "DCGM_FI_DEV_SM_CLOCK" in want:
            self._put(
                out, "DCGM_FI_DEV_SM_CLOCK", pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM
            )
        if "DCGM_FI_DEV_MEM_CLOCK" in want:
            self._put(
                out,
                "DCGM_FI_DEV_MEM_CLOCK",
                pynvml.nvmlDeviceGetClockInfo,
                h,
                pynvml.NVML_CLOCK_MEM,
            )
        if entity.gi_id is None and (
            "DCGM_FI_DEV_GPU_UTIL" in want or "DCGM_FI_DEV_MEM_COPY_UTIL" in want
        ):
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
        if entity.gpu.gpm and any(name in want for name in GPM_METRICS):
            self._profiling(entity, out)
        if health:
            return {n: v for n, v in out.items() if n in self.selected or n[0] == "_"}
        return out

    def _put(self, out: dict[str, float], name: str, call: Callable[..., Any], *args: Any) -> None:
        value = self._call(call, *args)
        if value is not None:
            out[name] = float(value)

    def _profiling(self, entity: Entity, out: dict[str, float]) -> None:
        key = (entity.gpu.index, entity.gi_id)
        sample = pynvml.nvmlGpmSampleAlloc()
        try:
            if entity.gi_id is None:
                pynvml.nvmlGpmSampleGet(entity.gpu.handle, sample)
            else:
                pynvml.nvmlGpmMigSampleGet(entity.gpu.handle, entity.gi_id, sample)
        except pynvml.NVMLError as exc:
            pynvml.nvmlGpmSampleFree(sample)
            if exc.value == _LOST:
                raise GpuLost(str(exc)) from None
            return
        previous = self._samples.pop(key, None)
        self._samples[key] = sample
        if previous is None:
            return  # the first sample: rates need the next one
        names = [n for n in GPM_METRICS if n in self.selected]
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(names)
        request.sample1 = previous
        request.sample2 = sample
        for i, name in enumerate(names):
            request.metrics[i].metricId = GPM_METRICS[name][0]
        try:
            pynvml.nvmlGpmMetricsGet(request)
        except pynvml.NVMLError as exc:
            if exc.value == _LOST:
                raise GpuLost(str(exc)) from None
            return  # two samples in one quantum: the next collection has a later one
        finally:
            pynvml.nvmlGpmSampleFree(previous)
        for i, name in enumerate(names):
            metric = request.metrics[i]
            if metric.nvmlReturn == pynvml.NVML_SUCCESS:
                out[name] = metric.value * GPM_METRICS[name][1]

    def forget(self, gpu_index: int) -> None:
        """Drop a GPU's GPM samples (it was lost: its next sample starts afresh)."""
        for key in [k for k in self._samples if k[0] == gpu_index]:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlGpmSampleFree(self._samples.pop(key))
