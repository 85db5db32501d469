"""The values ``nvml-mock-ctl``'s flags take beside the live vocabulary's words: integers
in a range, watts, yes/no, comma lists and NVLink numbers of one GPU.

Each raises :class:`~nvml_mock_live.LiveValueError` naming the flag and the value, so the
command exits 3 with nothing written.
"""

from __future__ import annotations

import math

from nvml_mock_live import LiveValueError

from nvml_mock_engine.faults import GpuView

__all__ = ["int_arg", "links", "milliwatts", "names", "yes_no"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def int_arg(name: str, text: str, low: int = 0, high: int = (1 << 64) - 1) -> int:
    """An integer (decimal or ``0x`` hex) in ``low..high``."""
    try:
        value = int(text, 0)
    except ValueError:
        raise LiveValueError(name, text, "must be an integer") from None
    if not low <= value <= high:
        raise LiveValueError(name, text, f"must be in {low}..{high}")
    return value


def milliwatts(name: str, text: str) -> int:
    """Watts (``350``, ``350.5W``) or milliwatts (``350000mW``), in milliwatts."""
    lowered = text.strip().lower()
    scale = 1000.0
    if lowered.endswith("mw"):
        lowered, scale = lowered[:-2], 1.0
    elif lowered.endswith("w"):
        lowered = lowered[:-1]
    try:
        watts = float(lowered)
    except ValueError:
        raise LiveValueError(
            name, text, "must be watts (350, 350.5W) or milliwatts (350000mW)"
        ) from None
    if not math.isfinite(watts) or watts < 0:
        raise LiveValueError(name, text, "must not be negative")
    return round(watts * scale)


def names(text: str) -> list[str]:
    """The lowercase words of a comma-separated list."""
    return [part.strip().lower() for part in text.split(",") if part.strip()]


def links(name: str, text: str, gpu: GpuView) -> list[int]:
    """NVLink numbers of *gpu* (``all`` or a comma-separated list), each one it has."""
    count = gpu.board_number("nvlink_count")
    if text.strip().lower() == "all":
        return list(range(count))
    chosen = [int_arg(name, part, 0, 63) for part in names(text)]
    for link in chosen:
        if link >= count:
            why = "the GPU has no NVLinks" if count == 0 else f"the GPU's links are 0..{count - 1}"
            raise LiveValueError(name, link, f"{why} (GPU {gpu.board.index})")
    return chosen


def yes_no(name: str, text: str) -> bool:
    """``yes``/``no`` (or ``true``/``false``, ``on``/``off``, ``1``/``0``)."""
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise LiveValueError(name, text, "must be yes or no")
