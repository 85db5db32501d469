"""``--query-gpu`` cell by cell against the real runs: H100 on 590.48.01, L40S on 595.80.

Each capture (``smi_fixtures/exporter``) holds one idle ``--query-gpu`` run over every property
its driver accepts. The work-alike renders the same board with the same driver, runs the same
query and must print the same header and, cell by cell, the same text: the same ``[N/A]`` or
bare ``N/A``, the same ``valid``/``Enabled``, units, spacing and rounding, and the board's own
facts. Only the cells listed in :data:`DYNAMIC` may differ, and only when the real board printed
a value there: then both cells must have that kind's shape. An answer such as ``[N/A]`` is a
fact of the board and driver, so it must match exactly even in a listed cell.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from smi_fixtures.helpers import render_profile, smi

EXPORTER = Path(__file__).resolve().parents[1] / "smi_fixtures" / "exporter"

KINDS = {
    "timestamp": r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}",
    "serial": r"\d{13}",
    "uuid": r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}",
    "bus id": r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]",
    "hex byte": r"0x[0-9A-F]{2}",
    "count": r"\d+",
    "link width": r"1|2|4|8|16",
    "mode": r"Enabled|Disabled",
    "addressing": r"HMM|ATS|None",
    "vbios": r"[0-9A-F]{2}(\.[0-9A-F]{2}){4}",
    "pstate": r"P([0-9]|1[0-5])",
    "mask": r"0x[0-9A-F]{16}",
    "reason": r"Active|Not Active",
    "us": r"\d+ us",
    "MiB": r"\d+ MiB",
    "percent": r"\d{1,3} %",
    "celsius": r"-?\d+",
    "watts": r"\d+\.\d\d W",
    "MHz": r"\d+ MHz",
}

_REASONS = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
    "sync_boost",
)
_COUNTERS = (
    "sw_power_cap",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)

DYNAMIC: dict[str, tuple[str, str]] = {
    # identity: the captures are masked, and the mock derives these per node
    "timestamp": ("timestamp", "the time of the run"),
    "serial": ("serial", "masked in the capture; derived per node"),
    "uuid": ("uuid", "masked in the capture; derived per node"),
    "pci.bus_id": ("bus id", "where the board sits in that host"),
    "pci.bus": ("hex byte", "where the board sits in that host"),
    "pci.device": ("hex byte", "the H100 capture is a VM (device 0x09)"),
    # the host and its administrator, not the board: the profiles follow the -q -x captures,
    # which are other machines with the same boards
    "vbios_version": ("vbios", "firmware revision flashed on that board"),
    "addressing_mode": ("addressing", "HMM needs the host kernel's support (None on 5.15)"),
    "persistence_mode": ("mode", "set by the host's administrator"),
    "accounting.mode": ("mode", "set by the host's administrator"),
    "memory.reserved": ("MiB", "the driver's reservation moves by a MiB between drivers"),
    # link training and power state move with load
    "pcie.link.gen.current": ("count", "the link slows down when idle"),
    "pcie.link.gen.gpucurrent": ("count", "the link slows down when idle"),
    "pcie.link.width.current": ("link width", "as the link trained on that host"),
    "pstate": ("pstate", "moves with load"),
    # readings
    "clocks_event_reasons.active": ("mask", "moves with load"),
    **{f"clocks_event_reasons.{r}": ("reason", "moves with load") for r in _REASONS},
    **{f"clocks_event_reasons_counters.{c}": ("us", "time spent so far") for c in _COUNTERS},
    "memory.used": ("MiB", "what processes hold"),
    "memory.free": ("MiB", "what processes hold"),
    **{
        f"utilization.{u}": ("percent", "moves with load")
        for u in ("gpu", "memory", "encoder", "decoder", "jpeg", "ofa")
    },
    **{
        f"encoder.stats.{s}": ("count", "encoder sessions running")
        for s in ("sessionCount", "averageFps", "averageLatency")
    },
    "temperature.gpu": ("celsius", "a reading"),
    "temperature.gpu.tlimit": ("celsius", "a reading (margin to the slowdown limit)"),
    "temperature.memory": ("celsius", "a reading"),
    "power.draw": ("watts", "a reading"),
    "power.draw.average": ("watts", "a reading"),
    "power.draw.instant": ("watts", "a reading"),
    **{
        f"clocks.current.{c}": ("MHz", "moves with load")
        for c in ("graphics", "sm", "memory", "video")
    },
}
"""Property -> (its kind in :data:`KINDS`, why its value is not the board's fixed fact)."""

CAPTURES = [
    ("h100", "590.48.01", "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"),
    ("l40s", "595.80", "linux-x86_64__nvidia-l40s__595.80.txt"),
]


def idle_run(capture: Path) -> tuple[str, list[str], list[str]]:
    """The idle ``--query-gpu`` run of a capture: the query, the header and the first row."""
    text = capture.read_text()
    start = text.index("# idle :: query-gpu")
    lines = text[start:].split("\n")
    query = lines[1].split("--query-gpu=", 1)[1].split(" ", 1)[0]
    body = "\n".join(lines[3:]).split("\n\n\n", 1)[0]
    header, row = list(csv.reader(io.StringIO(body), skipinitialspace=True))[:2]
    return query, header, row


def test_every_listed_property_exists_and_names_a_kind() -> None:
    names = {h.split(" [", 1)[0] for _, _, file in CAPTURES for h in idle_run(EXPORTER / file)[1]}
    assert set(DYNAMIC) <= names
    assert {kind for kind, _ in DYNAMIC.values()} <= set(KINDS)


@pytest.mark.parametrize(("profile", "driver", "file"), CAPTURES)
def test_query_gpu_matches_the_real_run_cell_by_cell(
    library_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    profile: str,
    driver: str,
    file: str,
) -> None:
    query, header, real = idle_run(EXPORTER / file)
    assert len(header) == len(real) > 200
    state = render_profile(profile, 1, tmp_path / f"{profile}.nvmlmock", driver=driver)
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    rc, out = smi(library_file, f"--query-gpu={query}", "--format=csv")
    assert rc == 0, out
    rows = list(csv.reader(io.StringIO(out), skipinitialspace=True))
    assert rows[0] == header
    assert len(rows) == 2
    wrong = []
    for name, want, got in zip(header, real, rows[1], strict=True):
        prop = name.split(" [", 1)[0]
        kind = DYNAMIC.get(prop, ("", ""))[0]
        if kind and re.fullmatch(KINDS[kind], want):
            if not re.fullmatch(KINDS[kind], got):
                wrong.append(f"{name}: {got!r} is not a {kind} (real {want!r})")
        elif got != want:
            wrong.append(f"{name}: {got!r}, real {want!r}")
    assert not wrong, "\n".join(wrong)
