"""The driver version NVML reports, as the tuple the report layout's gates compare.

The real ``nvidia-smi`` ships with the driver, so its layout follows the driver version; the
work-alike reads the version from ``nvmlSystemGetDriverVersion`` and lays the report out as
that generation's tool does (the gates are data in :mod:`._layout`).
"""

from __future__ import annotations


def parse_driver_version(text: str) -> tuple[int, ...]:
    """``"580.105.08"`` -> ``(580, 105, 8)``; anything unparsable counts as the newest."""
    parts: list[int] = []
    for piece in text.split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts) if parts else (9999,)
