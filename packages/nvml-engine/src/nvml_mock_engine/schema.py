"""The keys of the rendered state format and the type of each value.

Every key is declared once, in ``keys.toml`` (the live-file contract package,
:mod:`nvml_mock_live.keys`, holds it and its tables); the C parser's table and those tables
are generated from it (``live/scripts/gen_keys.py``), so the two halves of the contract
(`native/STATE-FORMAT.md`) cannot drift apart. One table per section, in the order the
renderer writes them, each key with the C type its value must fit. Profiles, config
overrides, the renderer and the live writer all validate against these tables, so a value
the C parser would refuse is refused here first, with the config key named instead of a
state line.
"""

from __future__ import annotations

import re
from typing import Final

from nvml_mock_live.keys import (
    GPU_KEYS,
    INTEGER_LIMITS,
    LIVE_GPU_KEYS,
    LIVE_ONLY_GPU_KEYS,
    SYSTEM_KEYS,
    KeySpec,
    Kind,
    check_integer,
)

__all__ = [
    "GPU_KEYS",
    "INTEGER_LIMITS",
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

_UUID_HEX = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_GPU_UUID_RE: Final = re.compile(rf"GPU-{_UUID_HEX}")
_FABRIC_UUID_RE: Final = re.compile(_UUID_HEX)
_BUS_ID_RE: Final = re.compile(r"[0-9a-fA-F]{8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_CPU_RANGE_RE: Final = re.compile(r"(\d+)(?:-(\d+))?")
_MAX_CPU: Final = 1023
"""The highest CPU the library's affinity mask holds (``STATE_MAX_CPUS`` - 1)."""


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
    if kind in INTEGER_LIMITS:
        return check_integer(spec, value)
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
    if spec.kind in INTEGER_LIMITS:
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


def _check_text(value: str, max_len: int) -> None:
    if "\n" in value or "\r" in value or "\x00" in value:
        raise ValueError("must be a single line of text")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("is not valid UTF-8 text (it holds a lone surrogate)") from None
    if size > max_len:
        raise ValueError(f"is {size} bytes, longer than the {max_len} the state format allows")
