"""MIG profile tables: the GPU-instance profiles a board offers, declared once per board.

A MIG-capable profile (``profiles/<board>.yaml``) carries a ``mig.gpu_instance_profiles``
table taken from NVIDIA's MIG user guide. The renderer writes it into the board state as
repeated ``mig_gi_profile`` lines (``native/STATE-FORMAT.md``), which the library's bounded
parser reads, so the C library, ``nvidia-smi`` and the stager all answer from the same
numbers. The MIG *layout* (mode, GPU and compute instances) is node state that changes at run
time: it lives in the live layer's MIG record and is written through NVML (the library).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MigGpuInstanceProfile",
    "parse_mig_table",
    "parse_record",
]

MEMORY_SLICES: Final = 8
"""Memory slices of a MIG-capable GPU; every placement lies within them."""
PROFILE_COUNT: Final = 18
"""``NVML_GPU_INSTANCE_PROFILE_COUNT``: profile indices are 0..17."""
_NAME_RE: Final = re.compile(r"[a-z0-9.+-]{1,31}")
_FIELDS: Final = (
    "profile",
    "id",
    "name",
    "instances",
    "slices",
    "sms",
    "copy_engines",
    "decoders",
    "encoders",
    "jpegs",
    "ofas",
    "memory_mib",
    "placements",
    "placement_size",
    "compute_instances",
)


@dataclass(frozen=True, slots=True)
class MigGpuInstanceProfile:
    """One GPU-instance profile: what ``nvmlDeviceGetGpuInstanceProfileInfoV`` reports, its
    placements and the compute-instance profiles it offers (slices -> SMs)."""

    profile: int
    """The ``NVML_GPU_INSTANCE_PROFILE_*`` index callers pass."""
    id: int
    """The profile id the board reports (``nvidia-smi mig -lgip``'s ID column)."""
    name: str
    instances: int
    slices: int
    sms: int
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int
    memory_mib: int
    placements: tuple[int, ...]
    placement_size: int
    compute_instances: Mapping[int, int]

    def record(self) -> str:
        """The profile as one ``mig_gi_profile`` value of the state format."""
        starts = ":".join(str(s) for s in self.placements)
        cis = ":".join(f"{s}@{m}" for s, m in self.compute_instances.items())
        counts = (
            self.instances,
            self.slices,
            self.sms,
            self.copy_engines,
            self.decoders,
            self.encoders,
            self.jpegs,
            self.ofas,
            self.memory_mib,
        )
        middle = ",".join(str(c) for c in counts)
        return f"{self.profile},{self.id},{self.name},{middle},{starts},{self.placement_size},{cis}"


def _int(value: object, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{what} must be an integer in {low}..{high}, got {value!r}")
    return value


def _profile(row: object, where: str) -> MigGpuInstanceProfile:
    if not isinstance(row, dict):
        raise ValueError(f"{where}: must be a mapping of {', '.join(_FIELDS)}")
    missing = [f for f in _FIELDS if f not in row]
    unknown = sorted(str(k) for k in row if k not in _FIELDS)
    if missing or unknown:
        raise ValueError(f"{where}: missing {missing} / unknown {unknown}")
    name = row["name"]
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(f"{where}.name: must be 1..31 characters of [a-z0-9.+-], got {name!r}")
    slices = _int(row["slices"], 1, 7, f"{where}.slices")
    size = _int(row["placement_size"], 1, MEMORY_SLICES, f"{where}.placement_size")
    starts = row["placements"]
    if not isinstance(starts, list) or not 1 <= len(starts) <= MEMORY_SLICES:
        raise ValueError(f"{where}.placements: must list 1..8 placement starts")
    for start in starts:
        _int(start, 0, MEMORY_SLICES - size, f"{where}.placements[]")
    cis = row["compute_instances"]
    if not isinstance(cis, dict) or not 1 <= len(cis) <= 8:
        raise ValueError(f"{where}.compute_instances: must map 1..8 slice counts to SMs")
    compute = {
        _int(s, 1, slices, f"{where}.compute_instances key"): _int(
            m, 1, 1024, f"{where}.compute_instances value"
        )
        for s, m in cis.items()
    }
    return MigGpuInstanceProfile(
        profile=_int(row["profile"], 0, PROFILE_COUNT - 1, f"{where}.profile"),
        id=_int(row["id"], 0, 63, f"{where}.id"),
        name=name,
        instances=_int(row["instances"], 1, 7, f"{where}.instances"),
        slices=slices,
        sms=_int(row["sms"], 0, 1024, f"{where}.sms"),
        copy_engines=_int(row["copy_engines"], 0, 1024, f"{where}.copy_engines"),
        decoders=_int(row["decoders"], 0, 1024, f"{where}.decoders"),
        encoders=_int(row["encoders"], 0, 1024, f"{where}.encoders"),
        jpegs=_int(row["jpegs"], 0, 1024, f"{where}.jpegs"),
        ofas=_int(row["ofas"], 0, 1024, f"{where}.ofas"),
        memory_mib=_int(row["memory_mib"], 1, 1 << 24, f"{where}.memory_mib"),
        placements=tuple(starts),
        placement_size=size,
        compute_instances=compute,
    )


def parse_mig_table(value: object) -> tuple[MigGpuInstanceProfile, ...]:
    """Validate a profile's ``mig`` block; ValueError names the row and field."""
    if not isinstance(value, dict) or set(value) != {"gpu_instance_profiles"}:
        raise ValueError("must be a mapping with one key, gpu_instance_profiles")
    rows = value["gpu_instance_profiles"]
    if not isinstance(rows, list) or not 1 <= len(rows) <= PROFILE_COUNT:
        raise ValueError(f"gpu_instance_profiles: must list 1..{PROFILE_COUNT} profiles")
    table = tuple(_profile(row, f"gpu_instance_profiles[{i}]") for i, row in enumerate(rows))
    for key in ("profile", "name"):
        seen = [getattr(p, key) for p in table]
        if len(set(seen)) != len(seen):
            raise ValueError(f"gpu_instance_profiles: every {key} must be distinct")
    return table


def parse_record(text: str) -> MigGpuInstanceProfile:
    """Read one ``mig_gi_profile`` state value back (the inverse of ``record``)."""
    parts = text.split(",")
    if len(parts) != len(_FIELDS):
        raise ValueError(f"a MIG profile record has {len(_FIELDS)} comma-separated fields")
    try:
        numbers = [int(p) for i, p in enumerate(parts) if i not in (2, 12, 14)]
        starts = [int(s) for s in parts[12].split(":")]
        cis = {int(a): int(b) for a, b in (c.split("@") for c in parts[14].split(":"))}
    except ValueError:
        raise ValueError(f"{text!r} is not a MIG profile record") from None
    row: dict[str, object] = dict(
        zip(
            [f for i, f in enumerate(_FIELDS) if i not in (2, 12, 14)],
            numbers,
            strict=True,
        )
    )
    row.update(name=parts[2], placements=starts, compute_instances=cis)
    return _profile(row, "mig_gi_profile")


def records(table: Sequence[MigGpuInstanceProfile]) -> tuple[str, ...]:
    """The state values of a board's table, in declaration order."""
    return tuple(p.record() for p in table)
