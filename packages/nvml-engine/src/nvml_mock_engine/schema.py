"""The keys of the rendered state format and the type of each value.

Every key is declared once, in ``keys.toml``; the C parser's table and the tables here are
generated from it (``scripts/gen_keys.py``), so the two halves of the contract
(`native/STATE-FORMAT.md`) cannot drift apart. One table per section, in the order the
renderer writes them, each key with the C type its value must fit. Profiles, config
overrides, the renderer and the live writer all validate against these tables, so a value
the C parser would refuse is refused here first, with the config key named instead of a
state line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

from nvml_mock_engine import _keys

__all__ = [
    "GPU_KEYS",
    "LIVE_GPU_KEYS",
    "LIVE_ONLY_GPU_KEYS",
    "MAX_GPUS",
    "SYSTEM_KEYS",
    "KeySpec",
    "Kind",
    "format_value",
    "parse_cpu_list",
    "parse_default",
    "validate_value",
]

MAX_GPUS: Final = 64
MAX_VALUE_BYTES: Final = 255

_UUID_HEX = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_GPU_UUID_RE: Final = re.compile(rf"GPU-{_UUID_HEX}")
_FABRIC_UUID_RE: Final = re.compile(_UUID_HEX)
_BUS_ID_RE: Final = re.compile(r"[0-9a-fA-F]{8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_CPU_RANGE_RE: Final = re.compile(r"(\d+)(?:-(\d+))?")
_MAX_CPU: Final = 1023
"""The highest CPU the library's affinity mask holds (``STATE_MAX_CPUS`` - 1)."""


class Kind(Enum):
    """The value types the state format knows."""

    STRING = "string"
    UINT32 = "uint32"
    UINT64 = "uint64"
    INT32 = "int32"
    FLAG = "flag"
    HEX32 = "hex32"
    GPU_UUID = "gpu-uuid"
    FABRIC_UUID = "fabric-uuid"
    BUS_ID = "bus-id"
    BUS_ID_LIST = "bus-id-list"
    CPU_LIST = "cpu-list"
    MIG_GI_PROFILE = "mig-gi-profile"
    """A repeated key: one state line per MIG GPU-instance profile (``nvml_mock_engine.mig``)."""


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One key as ``keys.toml`` declares it: type and bounds (inclusive) as the C parser
    enforces them, the parser's default, and where it comes from."""

    kind: Kind
    max_len: int = MAX_VALUE_BYTES
    minimum: int | None = None
    maximum: int | None = None
    default: str | None = None
    """The state-file text the parser applies when the key is absent (None: zero/empty)."""
    required: bool = False
    """A state without the key is refused."""
    derived: str | None = None
    """``render``: the renderer computes it; ``library``: absent means the library derives it."""
    live_slot: int | None = None
    """The key's slot in the live layer's GPU record; None when it is board-only."""
    board: bool = True
    """False for a live-only key (faults, patterns, triggers): never in the state file."""


def _spec(row: _keys.KeyRow, *, board: bool = True) -> KeySpec:
    _name, kind, max_len, minimum, maximum, default, required, derived, live = row
    return KeySpec(
        Kind[kind],
        max_len=max_len,
        minimum=minimum,
        maximum=maximum,
        default=default,
        required=required,
        derived=derived,
        live_slot=live,
        board=board,
    )


SYSTEM_KEYS: Final[Mapping[str, KeySpec]] = {row[0]: _spec(row) for row in _keys.SYSTEM_ROWS}
"""``[system]`` keys, in output order (generated from ``keys.toml``)."""

GPU_KEYS: Final[Mapping[str, KeySpec]] = {row[0]: _spec(row) for row in _keys.GPU_ROWS}
"""``[gpu N]`` keys, in output order (generated from ``keys.toml``)."""

LIVE_ONLY_GPU_KEYS: Final[Mapping[str, KeySpec]] = {
    row[0]: _spec(row, board=False) for row in _keys.LIVE_ONLY_ROWS
}
"""Keys only the live layer holds (faults, telemetry patterns, triggers); their ``default``
answers while unset."""

LIVE_GPU_KEYS: Final[Mapping[str, KeySpec]] = {
    **{name: spec for name, spec in GPU_KEYS.items() if spec.live_slot is not None},
    **LIVE_ONLY_GPU_KEYS,
}
"""The GPU keys the live layer can change at run time, each with its slot."""

_LIMITS: Final = {
    Kind.UINT32: (0, 2**32 - 1),
    Kind.UINT64: (0, 2**64 - 1),
    Kind.INT32: (-(2**31), 2**31 - 1),
    Kind.HEX32: (0, 2**32 - 1),
    Kind.FLAG: (0, 1),
}

ValueType = str | int | bool | tuple[str, ...]


def parse_cpu_list(text: str) -> tuple[tuple[int, int], ...]:
    """Parse a Linux cpu list (``0-71,144-215``) into inclusive ranges; ValueError if malformed."""
    ranges: list[tuple[int, int]] = []
    if not text:
        raise ValueError("must be a cpu list such as 0-71,144-215")
    for part in text.split(","):
        match = _CPU_RANGE_RE.fullmatch(part)
        if match is None:
            raise ValueError(f"{part!r} is not a cpu or cpu range (a list such as 0-71,144-215)")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low:
            raise ValueError(f"range {part!r} runs backwards")
        if high > _MAX_CPU:
            raise ValueError(f"cpu {high} is above the supported {_MAX_CPU}")
        ranges.append((low, high))
    return tuple(ranges)


def validate_value(spec: KeySpec, value: object) -> ValueType:
    """Check *value* against *spec* and return it normalised; ValueError says what is wrong.

    Integers may come from YAML as ints or (for ids) as ``0x`` strings; booleans are accepted
    for flags. The message is written to follow ``<key>: `` in an error.
    """
    kind = spec.kind
    if kind in _LIMITS:
        number = _as_int(value, allow_hex=kind is Kind.HEX32 or kind is Kind.UINT32)
        if number is None:
            if kind is Kind.FLAG:
                raise ValueError(f"must be 0/1 or true/false, got {value!r}")
            raise ValueError(f"must be an integer, got {value!r}")
        low, high = _LIMITS[kind]
        if spec.minimum is not None:
            low = max(low, spec.minimum)
        if spec.maximum is not None:
            high = min(high, spec.maximum)
        if not low <= number <= high:
            if kind is Kind.FLAG:
                raise ValueError(f"must be 0/1 or true/false, got {value!r}")
            if low == 1 and high >= 2**32 - 1:
                raise ValueError(f"must be a positive integer, got {value!r}")
            raise ValueError(f"must be an integer in {low}..{high}, got {value!r}")
        return number
    if kind is Kind.MIG_GI_PROFILE:
        from nvml_mock_engine.mig import parse_record

        if not isinstance(value, list | tuple) or not all(isinstance(i, str) for i in value):
            raise ValueError(f"must be a list of MIG profile records, got {value!r}")
        for item in value:
            _check_text(item, spec.max_len)
            parse_record(item)
        return tuple(value)
    if kind is Kind.BUS_ID_LIST:
        items = value.split(",") if isinstance(value, str) and value else value
        if items in ("", []):
            return ()
        if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"must be a list of PCI bus ids, got {value!r}")
        for item in items:
            if not _BUS_ID_RE.fullmatch(item):
                raise ValueError(f"{item!r} is not a PCI bus id of the form 00000000:BB:DD.F")
        normalised = tuple(i.upper() for i in items)
        if len(",".join(normalised)) > spec.max_len:
            raise ValueError(f"list is {len(normalised)} bus ids, longer than {spec.max_len} bytes")
        return normalised
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {value!r}")
    _check_text(value, spec.max_len)
    if kind is Kind.GPU_UUID and not _GPU_UUID_RE.fullmatch(value):
        raise ValueError(f"must look like GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, got {value!r}")
    if kind is Kind.FABRIC_UUID and not _FABRIC_UUID_RE.fullmatch(value):
        raise ValueError(f"must be a UUID xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, got {value!r}")
    if kind is Kind.BUS_ID:
        if not _BUS_ID_RE.fullmatch(value):
            raise ValueError(f"must be a PCI bus id of the form 00000000:BB:DD.F, got {value!r}")
        return value.upper()
    if kind is Kind.CPU_LIST:
        parse_cpu_list(value)
    return value


def parse_default(spec: KeySpec) -> ValueType | None:
    """The declared default of *spec* as a value (None when the key has none)."""
    if spec.default is None:
        return None
    if spec.kind in _LIMITS:
        return validate_value(spec, int(spec.default, 0))
    return validate_value(spec, spec.default)


def format_value(spec: KeySpec, value: ValueType) -> str:
    """Write a validated value the way the state format spells it."""
    if spec.kind is Kind.HEX32:
        assert isinstance(value, int)
        return f"0x{value:08X}"
    if spec.kind is Kind.BUS_ID_LIST:
        assert isinstance(value, tuple)
        return ",".join(value)
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _as_int(value: object, *, allow_hex: bool) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and allow_hex and re.fullmatch(r"0[xX][0-9a-fA-F]{1,16}", value):
        return int(value, 16)
    return None


def _check_text(value: str, max_len: int) -> None:
    if "\n" in value or "\r" in value or "\x00" in value:
        raise ValueError("must be a single line of text")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("is not valid UTF-8 text (it holds a lone surrogate)") from None
    if size > max_len:
        raise ValueError(f"is {size} bytes, longer than the {max_len} the state format allows")
