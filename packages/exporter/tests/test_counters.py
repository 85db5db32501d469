"""Counters files in dcgm-exporter's CSV format: what they select is what is served; a bad
line is named and the last good set keeps serving."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Exporter, Node, get, parse
from facts import FIXTURES
from nvml_mock_exporter.counters import CountersFile, parse_counters
from nvml_mock_exporter.errors import CountersFileError

SMALL = """\
# Format
# DCGM FIELD, Prometheus metric type, help message
DCGM_FI_DEV_GPU_TEMP,    gauge, GPU temperature (in C).
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).
DCGM_FI_DRIVER_VERSION,  label, Driver Version
"""


def test_dcgm_exporters_own_default_file_selects_the_default_families() -> None:
    lines = [
        f"{name}, {kind}, {text}"
        for name, kind, text, default in (
            line.split("|")
            for line in (FIXTURES / "dcgm-exporter-counters.csv").read_text().splitlines()
            if line and not line.startswith(("#", "label|"))
        )
        if default == "yes"
    ]
    counters = parse_counters(lines)
    assert len(counters) == 26
    assert [c.name for c in counters if c.kind == "label"] == ["DCGM_FI_DRIVER_VERSION"]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("DCGM_FI_DEV_NO_SUCH_FIELD, gauge, nothing", "unknown field 'DCGM_FI_DEV_NO_SUCH_FIELD'"),
        ("DCGM_FI_DEV_GPU_TEMP, histogram, GPU temperature", "type 'histogram' is not one of"),
        (
            "DCGM_FI_DEV_GPU_TEMP, label, GPU temperature",
            "DCGM_FI_DEV_GPU_TEMP is a value: type gauge or counter",
        ),
        (
            "DCGM_FI_DRIVER_VERSION, gauge, Driver Version",
            "DCGM_FI_DRIVER_VERSION is a label: type label",
        ),
        ("DCGM_FI_DEV_GPU_TEMP, gauge", "expected 3 comma-separated fields"),
    ],
)
def test_a_bad_line_is_refused_naming_the_file_and_line(line: str, why: str) -> None:
    with pytest.raises(CountersFileError) as caught:
        parse_counters([*SMALL.splitlines(), line], "counters.csv")
    assert f"counters.csv line 6: {why}" in str(caught.value)


def test_a_field_named_twice_is_refused() -> None:
    with pytest.raises(CountersFileError, match="line 6: DCGM_FI_DEV_GPU_TEMP is selected twice"):
        parse_counters([*SMALL.splitlines(), "DCGM_FI_DEV_GPU_TEMP, gauge, again"])


def test_the_file_follower_keeps_the_last_good_set(tmp_path: Path) -> None:
    path = tmp_path / "counters.csv"
    path.write_text(SMALL)
    follower = CountersFile.open(path)
    assert [c.name for c in follower.counters][:2] == [
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
    ]
    path.write_text(SMALL + "DCGM_FI_DEV_BOGUS, gauge, x\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert follower.poll() is False
    assert follower.error is not None and "line 6: unknown field" in follower.error
    assert len(follower.counters) == 3
    path.write_text("DCGM_FI_DEV_SM_CLOCK, counter, my own help\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    assert follower.poll() is True
    assert [(c.name, c.kind, c.help) for c in follower.counters] == [
        ("DCGM_FI_DEV_SM_CLOCK", "counter", "my own help")
    ]


def test_a_running_exporter_serves_what_the_file_selects_and_survives_a_bad_edit(
    node: Node, run_exporter: Callable[..., Exporter], tmp_path: Path
) -> None:
    path = tmp_path / "counters.csv"
    path.write_text(SMALL)
    exporter = run_exporter("--collectors", str(path))
    exposition = parse(exporter.wait_for(lambda t: "DCGM_FI_DEV_POWER_USAGE" in t))
    assert set(exposition.types) == {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"}
    assert exposition.samples[0].labels["DCGM_FI_DRIVER_VERSION"]
    path.write_text(SMALL.replace("gauge, GPU", "gauge, GPU") + "DCGM_FI_DEV_TYPO, gauge, x\n")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        refused = [r for r in exporter.logs() if "counters file refused" in r["msg"]]
        if refused:
            break
        time.sleep(0.05)
    assert refused, exporter.log.read_text()
    assert "line 6: unknown field 'DCGM_FI_DEV_TYPO'" in refused[0]["msg"]
    assert set(parse(exporter.metrics()).types) == {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
    }
    path.write_text("DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).\n")
    exposition = parse(exporter.wait_for(lambda t: "DCGM_FI_DEV_GPU_TEMP" not in t))
    assert set(exposition.types) == {"DCGM_FI_DEV_MEM_CLOCK"}
    assert "DCGM_FI_DRIVER_VERSION" not in exposition.samples[0].labels


def test_a_bad_file_at_start_stops_the_exporter_naming_the_line(node: Node, tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "counters.csv"
    path.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_DEV_GPU_TEMPS, gauge, typo\n")
    proc = subprocess.run(
        [sys.executable, "-m", "nvml_mock_exporter", "--collectors", str(path), "--port", "0"],
        env=node.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 3
    assert f"{path} line 2: unknown field 'DCGM_FI_DEV_GPU_TEMPS'" in proc.stderr


def test_a_cell_past_the_csv_limit_stops_the_start_naming_the_line(
    node: Node, tmp_path: Path
) -> None:
    import subprocess
    import sys

    path = tmp_path / "counters.csv"
    path.write_text(SMALL + "DCGM_FI_DEV_SM_CLOCK, gauge, " + "h" * (129 * 1024) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "nvml_mock_exporter", "--collectors", str(path), "--port", "0"],
        env=node.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr
    assert f"{path} line 6: not a CSV line (field larger than field limit" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr) < 2000


def test_a_fifo_in_the_files_place_does_not_stop_the_collections(
    node: Node, run_exporter: Callable[..., Exporter], tmp_path: Path
) -> None:
    path = tmp_path / "counters.csv"
    path.write_text(SMALL)
    exporter = run_exporter("--collectors", str(path), "--nvml-timeout", "1")
    parse(exporter.wait_for(lambda t: "DCGM_FI_DEV_POWER_USAGE" in t))
    fifo = tmp_path / "swap.fifo"
    os.mkfifo(fifo)
    os.replace(fifo, path)  # nobody ever writes to it
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        refused = [r for r in exporter.logs() if "counters file refused" in r["msg"]]
        if refused:
            break
        time.sleep(0.05)
    assert refused and "not a regular file" in refused[0]["msg"], exporter.log.read_text()
    # collections go on: /health stays ok past three intervals plus the NVML timeout
    time.sleep(2.5)
    status, why = get(exporter.url + "/health")
    assert (status, why.strip()) == (200, "ok")
    replacement = tmp_path / "good.csv"
    replacement.write_text("DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).\n")
    os.replace(replacement, path)
    exposition = parse(exporter.wait_for(lambda t: "DCGM_FI_DEV_GPU_TEMP" not in t))
    assert set(exposition.types) == {"DCGM_FI_DEV_MEM_CLOCK"}
