"""The processes running on a GPU, merged from NVML's compute and graphics lists.

The table, the ``-q`` report and ``--query-compute-apps`` all show the same rows: one per pid,
typed ``C``, ``G`` or ``C+G``, with the memory it holds.
"""

from __future__ import annotations

from ._nvml import (
    ERROR_NOT_SUPPORTED,
    VALUE_NOT_AVAILABLE_UINT,
    VALUE_NOT_AVAILABLE_ULL,
    Device,
    NvmlError,
)
from ._values import NA


class ProcessRow:
    """One running process as the table, ``-q`` and ``--query-compute-apps`` show it."""

    __slots__ = ("ci", "gi", "kind", "memory", "name", "pid", "used_mib")

    def __init__(
        self, pid: int, kind: str, name: str, *, used: int | None, gi: str, ci: str
    ) -> None:
        self.pid = pid
        self.kind = kind
        self.name = name
        self.used_mib = None if used is None else used // (1024 * 1024)
        self.memory = NA if self.used_mib is None else f"{self.used_mib} MiB"
        self.gi = gi
        self.ci = ci


def process_rows(device: Device) -> list[ProcessRow] | str:
    """Compute and graphics processes merged by pid (type ``C``, ``G`` or ``C+G``); on a GPU
    in MIG mode a process is one row per MIG device it runs on (its GI and CI ids)."""
    found: dict[tuple[int, int, int], ProcessRow] = {}
    errors: list[NvmlError] = []
    for kind, letter in (("Compute", "C"), ("Graphics", "G")):
        try:
            infos = device.running_processes(kind)
        except NvmlError as exc:
            errors.append(exc)
            continue
        for info in infos:
            pid = int(info.pid)
            key = (pid, int(info.gpuInstanceId), int(info.computeInstanceId))
            if key in found:
                found[key].kind = "C+G"
                continue
            try:
                name = device.nvml.process_name(pid)
            except NvmlError:
                name = NA
            memory = int(info.usedGpuMemory)
            used = None if memory == VALUE_NOT_AVAILABLE_ULL else memory
            gi = NA if info.gpuInstanceId == VALUE_NOT_AVAILABLE_UINT else str(info.gpuInstanceId)
            ci = (
                NA
                if info.computeInstanceId == VALUE_NOT_AVAILABLE_UINT
                else str(info.computeInstanceId)
            )
            found[key] = ProcessRow(pid, letter, name, used=used, gi=gi, ci=ci)
    if not found and len(errors) == 2:
        first = errors[0]
        return NA if first.code == ERROR_NOT_SUPPORTED else first.text
    return list(found.values())
