"""The text layouts of older drivers, held against real ``nvidia-smi`` text captures.

Each capture (``smi_fixtures/captures/text/``, with its source in its header lines) names the
profile, GPU count and driver of the node it came from; the node is rendered with the same,
and the work-alike's output must have the capture's layout: in ``-q``, the same keys in the
same order and nesting with the colon in the same column; in the table, the same lines
wherever they do not carry a GPU's values. Values differ (they are per board).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from smi_fixtures.helpers import CAPTURES, render_profile, smi

TEXT = CAPTURES / "text"


def _capture(path: Path) -> tuple[dict[str, str], list[str]]:
    """The ``# key: value`` header of a capture and the real output after ``# ---``."""
    meta: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line == "# ---":
            return meta, lines[i + 1 :]
        key, _, value = line[2:].partition(": ")
        meta[key] = value
    raise AssertionError(f"{path.name}: no '# ---' line")


def _keys(lines: list[str]) -> list[str]:
    """GPU 0's keys with their indentation (values dropped), and where each colon sits."""
    start = next(i for i, line in enumerate(lines) if line.startswith("GPU 0"))
    out = []
    for line in lines[start + 1 :]:
        if not line.strip() or line.startswith("GPU "):
            break
        key, colon, _ = line.partition(" : ")
        out.append(f"{key}|{len(key) if colon else ''}")
    return out


def _render(meta: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = meta["profile"] if meta["profile"] != "-" else "h100"
    state = render_profile(
        profile, int(meta["count"]), tmp_path / "node.nvmlmock", driver=meta["driver"]
    )
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))


@pytest.mark.parametrize("capture", sorted(p.name for p in TEXT.glob("*__q.txt")))
def test_query_text_has_the_drivers_keys_and_key_column(
    capture: str, library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta, real = _capture(TEXT / capture)
    _render(meta, tmp_path, monkeypatch)
    rc, out = smi(library_file, "-q")
    assert rc == 0
    assert _keys(out.splitlines()) == _keys(real)
    header = [line for line in out.splitlines() if line.startswith("Driver Version")]
    assert header == [f"{'Driver Version':<42}: {meta['driver']}"]


def _skeleton(lines: list[str]) -> tuple[list[str], list[str], int]:
    """The table's header box, everything after the GPU boxes, and the number of boxes."""
    top = next(i for i, line in enumerate(lines) if line.startswith("| NVIDIA-SMI"))
    double = next(i for i, line in enumerate(lines) if line.startswith("|===="))
    gap = next(i for i in range(double, len(lines)) if not lines[i].startswith(("|", "+")))
    boxes = sum(1 for line in lines[double:gap] if line.startswith("+"))
    return lines[top + 1 : double + 1], lines[gap:], boxes


@pytest.mark.parametrize("capture", sorted(p.name for p in TEXT.glob("*__table.txt")))
def test_table_has_the_drivers_rules_gap_and_process_header(
    capture: str, library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta, real = _capture(TEXT / capture)
    _render(meta, tmp_path, monkeypatch)
    rc, out = smi(library_file)
    assert rc == 0
    assert _skeleton(out.splitlines()) == _skeleton(real)


def test_the_default_drivers_keep_todays_layout(
    library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(render_profile("h100", 1, tmp_path / "h.nvmlmock")))
    _, out = smi(library_file, "-q")
    assert f"{'    Product Name':<55}: " in out
    _, table = smi(library_file)
    lines = table.splitlines()
    assert lines[3] == "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    assert "|  GPU   GI   CI              PID   Type   Process name" in table


DEPRECATED_PATHS = (
    "display_mode",
    "gpu_power_readings/power_state",
    "applications_clocks/graphics_clock",
    "applications_clocks/mem_clock",
    "default_applications_clocks/graphics_clock",
    "default_applications_clocks/mem_clock",
)


@pytest.mark.parametrize("driver", ["590.44.01", "595.91.07"])
def test_590_on_prints_the_deprecation_texts_of_the_capture(
    driver: str, library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xml.etree.ElementTree as ET

    real = ET.parse(CAPTURES / "qx-l40s.xml").getroot().find("gpu")
    assert real is not None
    state = render_profile("l40s", 1, tmp_path / "l40s.nvmlmock", driver=driver)
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    _, xml = smi(library_file, "-q", "-x")
    mine = ET.fromstring(xml).find("gpu")
    assert mine is not None
    for path in DEPRECATED_PATHS:
        assert mine.findtext(path) == real.findtext(path), path
    _, text = smi(library_file, "-q", "-d", "CLOCK")
    assert text.count(": Requested functionality has been deprecated") == 4
    _, csv = smi(
        library_file,
        "--query-gpu=power.management,clocks.applications.graphics,clocks.default_applications.memory",
        "--format=csv,noheader",
    )
    assert csv == ", ".join(["[Requested functionality has been deprecated]"] * 3) + "\n"


def test_580_still_answers_the_deprecated_queries(
    library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = render_profile("h100", 1, tmp_path / "h100.nvmlmock", driver="580.173.02")
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    _, csv = smi(
        library_file, "--query-gpu=power.management,clocks.applications.graphics", "--format=csv"
    )
    assert "deprecated" not in csv


def test_sram_counts_and_ada_on_has_no_per_structure_counters(
    library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """H100 (590) and L40S (595) captures: SRAM 0, register file / L1 / L2 ``[N/A]``; Turing
    still counts each structure."""
    fields = (
        "ecc.errors.corrected.volatile.sram,ecc.errors.uncorrected.aggregate.sram,"
        "ecc.errors.corrected.volatile.register_file,ecc.errors.uncorrected.aggregate.l2_cache"
    )
    for profile, expected in (
        ("h100", "0, 0, [N/A], [N/A]\n"),
        ("l40s", "0, 0, [N/A], [N/A]\n"),
        ("t4", "0, 0, 0, 0\n"),
    ):
        state = render_profile(profile, 1, tmp_path / f"{profile}.nvmlmock")
        monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
        _, csv = smi(library_file, f"--query-gpu={fields}", "--format=csv,noheader")
        assert csv == expected, profile


def test_csv_checksum_gsp_platform_and_fabric_cells(
    library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = (
        "inforom.checksum_validation,gsp.mode.current,gsp.mode.default,"
        "platform.slot_number,fabric.health.bandwidth,fabric.health.route_unhealthy"
    )
    # the checksum and GSP cells answer values (every capture: valid, Enabled); an H100 without
    # platform info prints slot 0, a B200 in no rack slot N/A; no fabric health here
    for profile, slot in (("h100", "0"), ("b200", "N/A")):
        state = render_profile(profile, 1, tmp_path / f"{profile}.nvmlmock")
        monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
        _, csv = smi(library_file, f"--query-gpu={fields}", "--format=csv,noheader")
        assert csv == f"valid, Enabled, Enabled, {slot}, N/A, N/A\n", profile


def test_hopper_nvlink_runs_at_26_562_gb_s_a_link(
    library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(render_profile("h100", 1, tmp_path / "h.nvmlmock")))
    _, out = smi(library_file, "nvlink", "-s")
    assert out.splitlines()[1] == "\t Link 0: 26.562 GB/s"
