"""Prometheus text in dcgm-exporter's shape: its label keys, in its order, its value formats.

A GPU series reads, as dcgm-exporter 4.x writes it::

    DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-…",pci_bus_id="00000000:1A:00.0",device="nvidia0",
      modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",hostname="node-a",
      DCGM_FI_DRIVER_VERSION="580.65.06",container="train",namespace="ml",pod="train-0"} 45

``GPU_I_PROFILE``/``GPU_I_ID`` only on a GPU instance's series, the host label only when one
is set (``hostname``, or ``Hostname`` as before the 2026 rename), then the label fields of the
counters (``DCGM_FI_DRIVER_VERSION`` …) and the family's own labels in key order, then the
pod's labels in key order. Integer fields print as integers, DCGM's double fields (power,
profiling ratios and rates) with six decimals, as dcgm-exporter formats them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from nvml_mock_exporter.counters import Counter
from nvml_mock_exporter.pods import PodLabels
from nvml_mock_exporter.readings import Entity

__all__ = ["DOUBLE_FIELDS", "Row", "escape", "render"]

DOUBLE_FIELDS: Final = frozenset(
    {
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    }
)
"""The families DCGM holds as doubles (``DCGM_FT_DOUBLE``)."""

XID: Final = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT: Final = "DCGM_EXP_XID_ERRORS_COUNT"
HEALTH: Final = "DCGM_EXP_GPU_HEALTH_STATUS"
_OWN_LABELS: Final = frozenset({XID_COUNT, HEALTH})


def escape(value: str) -> str:
    """A label value as the text format needs it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass(slots=True)
class Row:
    """One entity's part of a collection: its labels and what was read for it."""

    entity: Entity
    values: Mapping[str, float]
    lost: bool = False
    xid: int = 0
    xid_counts: Mapping[int, int] = field(default_factory=dict)
    health: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    pods: Sequence[PodLabels] = ()


def _identity(entity: Entity, host_key: str | None, host: str) -> str:
    gpu = entity.gpu
    text = (
        f'gpu="{gpu.index}",UUID="{escape(gpu.uuid)}",pci_bus_id="{escape(gpu.bus_id)}",'
        f'device="nvidia{gpu.index}",modelName="{escape(gpu.model)}"'
    )
    if entity.gi_id is not None:
        text += f',GPU_I_PROFILE="{escape(entity.profile or "")}",GPU_I_ID="{entity.gi_id}"'
    if host_key:
        text += f',{host_key}="{escape(host)}"'
    return text


def _label_values(entity: Entity, driver: str, nvml_version: str) -> dict[str, str]:
    return {
        "DCGM_FI_DRIVER_VERSION": driver,
        "DCGM_FI_NVML_VERSION": nvml_version,
        "DCGM_FI_DEV_SERIAL": entity.gpu.serial,
        "DCGM_FI_DEV_VBIOS_VERSION": entity.gpu.vbios,
    }


def _pods(pods: Sequence[PodLabels]) -> list[str]:
    if not pods:
        return [""]
    return [
        f',container="{escape(p.container)}",namespace="{escape(p.namespace)}",'
        f'pod="{escape(p.pod)}"'
        for p in pods
    ]


def _number(name: str, value: float) -> str:
    if name in DOUBLE_FIELDS:
        return f"{value:f}"
    return str(int(value))


def render(
    counters: Sequence[Counter],
    rows: Iterable[Row],
    *,
    host_key: str | None,
    host: str,
    driver: str,
    nvml_version: str = "",
    window_ms: int = 300000,
) -> bytes:
    """The exposition of one collection, families in the counters' order."""
    label_fields = [c.name for c in counters if c.kind == "label"]
    # per row, the label text before and after a family's own labels, built once: a 64-GPU
    # collection writes some 2,000 series
    prepared: list[tuple[Row, str, list[str], str]] = []
    for row in rows:
        values = _label_values(row.entity, driver, nvml_version)
        labels = {name: values[name] for name in label_fields if values.get(name)}
        head = _identity(row.entity, host_key, host)
        plain = "".join(f',{k}="{escape(v)}"' for k, v in sorted(labels.items()))
        prepared.append((row, head, _pods(row.pods), plain))
    out: list[str] = []
    for counter in counters:
        if counter.kind == "label":
            continue
        name = counter.name
        lines: list[str] = []
        for row, head, pods, plain in prepared:
            if name not in _OWN_LABELS:
                if name == XID:
                    value = str(row.xid)
                elif not row.lost and name in row.values:
                    value = _number(name, row.values[name])
                else:
                    continue
                lines.extend(f"{name}{{{head}{plain}{pod}}} {value}\n" for pod in pods)
                continue
            # the label fields' keys are upper case and sort before the family's own labels
            if name == XID_COUNT:
                own = f'{plain},window_size_in_ms="{window_ms}"'
                series = [] if row.xid_counts else [(own, "0")]
                series += [
                    (f'{own},xid="{xid}"', str(count))
                    for xid, count in sorted(row.xid_counts.items())
                ]
            else:
                series = [
                    (f'{plain},health_error_code="{code}",health_watch="{watch}"', str(result))
                    for watch, (result, code) in row.health.items()
                ]
            for middle, value in series:
                lines.extend(f"{name}{{{head}{middle}{pod}}} {value}\n" for pod in pods)
        if lines:
            out.append(f"# HELP {name} {counter.help}\n# TYPE {name} {counter.kind}\n")
            out.extend(lines)
    return "".join(out).encode("utf-8")
