"""``--query-compute-apps``: one CSV row per compute process on the selected GPUs.

Monitoring agents join these rows to pods by ``gpu_uuid`` and ``pid``; the property names,
aliases and ``[MiB]`` unit follow the real tool. With no process running only the header
prints (nothing with ``noheader``), as the real tool does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from ._nvml import ERROR_NOT_SUPPORTED, Device, Nvml, NvmlError
from ._processes import ProcessRow
from ._values import timestamp_us


class AppField(NamedTuple):
    names: tuple[str, ...]
    unit: str
    read: Callable[[Device, ProcessRow], object]
    help: str


def _stamp(_: Device, __: ProcessRow) -> str:
    return timestamp_us(time.time_ns() // 1000)


APP_FIELDS = [
    AppField(("timestamp",), "", _stamp, 'When the row was read, as "YYYY/MM/DD HH:MM:SS.msec".'),
    AppField(
        ("gpu_name",), "", lambda d, p: d.name(), "Product name of the GPU the process runs on."
    ),
    AppField(
        ("gpu_bus_id",), "", lambda d, p: d.pci_info().busId.decode(), "PCI bus id of that GPU."
    ),
    AppField(("gpu_serial",), "", lambda d, p: d.serial(), "Board serial number of that GPU."),
    AppField(("gpu_uuid",), "", lambda d, p: d.uuid(), "UUID of that GPU."),
    AppField(("pid",), "", lambda d, p: p.pid, "Process id."),
    AppField(
        ("process_name", "name"), "", lambda d, p: p.name, "Process name, as the driver knows it."
    ),
    AppField(
        ("used_gpu_memory", "used_memory"),
        "MiB",
        lambda d, p: p.used_mib,
        "GPU memory the process holds.",
    ),
]
_BY_NAME = {n: f for f in APP_FIELDS for n in f.names}


def lookup(name: str) -> AppField | None:
    return _BY_NAME.get(name.strip().lower())


def _cell(field: AppField, device: Device, proc: ProcessRow, units: bool) -> str:
    try:
        value = field.read(device, proc)
    except NvmlError as exc:
        return "[N/A]" if exc.code == ERROR_NOT_SUPPORTED else f"[{exc.text}]"
    if value is None:
        return "[N/A]"
    return f"{value} {field.unit}" if units and field.unit else str(value)


def render(
    nvml: Nvml, devices: list[Device], names: tuple[str, ...], *, header: bool, units: bool
) -> str:
    from ._processes import process_rows

    fields = [f for f in (lookup(n) for n in names) if f is not None]
    rows = []
    if header:
        rows.append(
            ", ".join(
                f"{f.names[0]} [{f.unit}]" if units and f.unit else f.names[0] for f in fields
            )
        )
    for device in devices:
        got = process_rows(device)
        if isinstance(got, str):
            continue
        for proc in got:
            if proc.kind == "G":
                continue
            rows.append(", ".join(_cell(f, device, proc, units) for f in fields))
    return "\n".join(rows) + "\n" if rows else ""


def help_text() -> str:
    out = ["", 'List of valid properties to query for the switch "--query-compute-apps":', ""]
    for f in APP_FIELDS:
        out.append(" or ".join(f'"{n}"' for n in f.names))
        out.append(f.help + (f" Unit: {f.unit}." if f.unit else ""))
        out.append("")
    return "\n".join(out) + "\n"
