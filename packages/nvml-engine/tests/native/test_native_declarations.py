"""Facts the C library declares once: a second copy of a table drifts from the first.

The NVLink per-link rate by version feeds both the speed fields (``NVML_FI_DEV_NVLINK_GET_SPEED``,
``nvidia-smi nvlink -s``) and the throughput counters the telemetry integrates, so the two
must agree: one table in ``nvlink.c`` serves both.
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "native" / "src"


def test_the_nvlink_rate_table_is_declared_once() -> None:
    sources = sorted(SRC.glob("*.[ch]"))
    assert sources
    holders = [p.name for p in sources if re.search(r"NVML_NVLINK_VERSION_4_0\s*:", p.read_text())]
    assert holders == ["nvlink.c"]
