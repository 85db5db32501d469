"""Which element set the real tool writes for the driver generation NVML reports.

The real ``nvidia-smi`` ships with the driver, so its ``-q -x`` layout follows the driver
version: the 570 series writes the v12 DTD; 575 and later the v13 DTD (``display_attached``,
``pdi``, clock event counters, fabric health summary); 580 updates after 580.105 add inactive
remapped rows, ``unrepairable_memory`` and ``partition_assigned``; 590 and later add
``edpp_multiplier``. The work-alike reads the version from ``nvmlSystemGetDriverVersion`` and
writes what that generation's tool writes.
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


class Generation:
    """Which element set the real tool of this driver generation writes."""

    def __init__(self, driver: tuple[int, ...]) -> None:
        self.v13 = driver >= (575,)
        self.late580 = driver >= (580, 106)
        self.edpp = driver >= (590,)

    @property
    def dtd(self) -> str:
        return "nvsmi_device_v13.dtd" if self.v13 else "nvsmi_device_v12.dtd"
