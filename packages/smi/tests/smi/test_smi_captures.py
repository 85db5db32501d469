"""``-q -x`` and ``-q`` against the mock, checked against real-hardware captures.

For every profile with a real ``nvidia-smi -q -x`` capture, the node is rendered with the
capture's GPU count and the work-alike's XML must hold the same element paths in the same
order (values differ: they are per board). The text report must carry the same sections,
in the same order, with as many keys in each as the capture has leaves.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from nvml_mock_smi._layout import GPU
from smi_fixtures.helpers import CAPTURES, PROFILE_CAPTURES, read_state, render_profile, smi

# What the work-alike calls each <gpu> child in its text report, from the one layout table
# (XML-only elements, and those text shows only under -d, map to None). A capture element the
# layout lacks is a KeyError below, so the table is checked against the captures, not a copy.
TEXT_SECTIONS: dict[str, str | None] = {e.tag: None if e.text_only_with else e.label for e in GPU}
# Sections whose text view folds XML leaves (so leaf counts differ by design).
FOLDED = {"retired_pages", "gpu_power_readings", "module_power_readings", "processes"}


def element_paths(root: ET.Element) -> list[str]:
    """Every element path, in document order of first appearance (repeats collapse)."""
    seen: dict[str, None] = {}

    def walk(node: ET.Element, prefix: str) -> None:
        path = f"{prefix}/{node.tag}"
        seen.setdefault(path, None)
        for child in node:
            walk(child, path)

    walk(root, "")
    return list(seen)


@pytest.fixture(scope="module")
def states(library_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("smi-states")
    result = {}
    for profile, capture in PROFILE_CAPTURES.items():
        count = len(ET.parse(CAPTURES / capture).getroot().findall("gpu"))
        result[profile] = render_profile(profile, count, out / f"{profile}.nvmlmock")
    return result


@pytest.fixture
def use_state(states: dict[str, Path], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def pick(profile: str) -> Path:
        monkeypatch.setenv("MOCK_NVML_CONFIG", str(states[profile]))
        return states[profile]

    return pick


@pytest.mark.parametrize("profile", sorted(PROFILE_CAPTURES))
def test_xml_has_the_capture_element_paths_in_order(
    profile: str, library_file: Path, use_state
) -> None:  # type: ignore[no-untyped-def]
    use_state(profile)
    rc, out = smi(library_file, "-q", "-x")
    assert rc == 0, out
    capture = ET.parse(CAPTURES / PROFILE_CAPTURES[profile]).getroot()
    mine = ET.fromstring(out)
    assert element_paths(mine) == element_paths(capture)


@pytest.mark.parametrize("profile", sorted(PROFILE_CAPTURES))
def test_xml_header_doctype_and_gpu_ids(profile: str, library_file: Path, use_state) -> None:  # type: ignore[no-untyped-def]
    state = use_state(profile)
    system, gpus = read_state(state)
    rc, out = smi(library_file, "-q", "-x")
    assert rc == 0
    capture_text = (CAPTURES / PROFILE_CAPTURES[profile]).read_text()
    # Same prolog and DOCTYPE (the DTD generation follows the driver version).
    assert out.splitlines()[:3] == capture_text.splitlines()[:3]
    root = ET.fromstring(out)
    assert root.findtext("driver_version") == system["driver_version"]
    assert root.findtext("attached_gpus") == str(len(gpus))
    assert [g.get("id") for g in root.findall("gpu")] == [g["pci_bus_id"] for g in gpus]
    first = root.find("gpu")
    assert first is not None
    assert first.findtext("product_name") == gpus[0]["name"]
    assert first.findtext("uuid") == gpus[0]["uuid"]
    assert (
        first.findtext("fb_memory_usage/total")
        == f"{int(gpus[0]['memory_total_bytes']) // 1048576} MiB"
    )


@pytest.mark.parametrize("profile", sorted(PROFILE_CAPTURES))
def test_text_report_has_the_capture_sections_and_keys(
    profile: str, library_file: Path, use_state
) -> None:  # type: ignore[no-untyped-def]
    use_state(profile)
    rc, out = smi(library_file, "-q")
    assert rc == 0
    capture = ET.parse(CAPTURES / PROFILE_CAPTURES[profile]).getroot()
    gpu = capture.find("gpu")
    assert gpu is not None
    expected = [TEXT_SECTIONS[child.tag] for child in gpu if TEXT_SECTIONS[child.tag] is not None]

    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("GPU "))
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith("GPU ") or not lines[i]),
        len(lines),
    )
    block = lines[start + 1 : end]
    sections: list[tuple[str, list[str]]] = []
    for line in block:
        if line.startswith("    ") and not line.startswith("     "):
            sections.append((line[4:].split(" :")[0].rstrip(), []))
        else:
            sections[-1][1].append(line)
    assert [name for name, _ in sections] == [e.strip() for e in expected if e]

    by_label = dict(sections)
    for child in gpu:
        label = TEXT_SECTIONS[child.tag]
        if label is None or child.tag in FOLDED or len(child) == 0:
            continue
        leaves = [e for e in child.iter() if len(e) == 0 and e is not child]
        keyed = [
            line for line in by_label[label.strip()] if " : " in line or line.rstrip().endswith(":")
        ]
        assert len(keyed) == len(leaves), (child.tag, keyed)


# Elements whose values the profiles take from the capture's first GPU: the work-alike must
# print them exactly as the real tool did (N/A included).
CAPTURED_VALUES = (
    "gpu_part_number",
    "sparse_operation_mode",
    "pci/atomic_caps_outbound",
    "pci/atomic_caps_inbound",
    "addressing_mode",
    "c2c_mode",
    "temperature",
    "remapped_rows",
    "retired_pages",
    "ecc_errors/unrepairable_memory",
    "fabric/health",
    "gpu_power_readings/power_state",
    "gpu_power_readings/average_power_draw",
    "module_power_readings/power_state",
    "applications_clocks",
    "default_applications_clocks",
    "gpu_memory_power_readings",
    *(
        f"module_power_readings/{leaf}"
        for leaf in (
            "average_power_draw",
            "instant_power_draw",
            "current_power_limit",
            "requested_power_limit",
            "default_power_limit",
            "min_power_limit",
            "max_power_limit",
        )
    ),
    "inforom_bbx_flush",
    "cc_protected_memory_usage",
    "platformInfo/slot_number",
    "platformInfo/tray_index",
    "platformInfo/host_id",
    "platformInfo/peer_type",
)
# Identifiers the capture replaced with placeholders: only whether they print N/A must agree.
CAPTURED_IDENTIFIERS = ("pdi", "platformInfo/chassis_serial_number", "platformInfo/gpu_fabric_guid")


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC (the profiles hold the captures' timestamps as UTC)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def leaf_values(gpu: ET.Element, prefixes: tuple[str, ...]) -> dict[str, str]:
    """``section/.../leaf`` -> text for every leaf of *gpu* at or under one of *prefixes*."""
    values: dict[str, str] = {}

    def walk(node: ET.Element, path: str) -> None:
        if len(node) == 0 and any(path == p or path.startswith(p + "/") for p in prefixes):
            values[path] = (node.text or "").strip()
        for child in node:
            walk(child, f"{path}/{child.tag}")

    for child in gpu:
        walk(child, child.tag)
    return values


@pytest.mark.parametrize("profile", sorted(PROFILE_CAPTURES))
@pytest.mark.usefixtures("utc")
def test_board_values_print_as_in_the_capture(profile: str, library_file: Path, use_state) -> None:  # type: ignore[no-untyped-def]
    use_state(profile)
    rc, out = smi(library_file, "-q", "-x", "-i", "0")
    assert rc == 0, out
    mine = ET.fromstring(out).find("gpu")
    capture = ET.parse(CAPTURES / PROFILE_CAPTURES[profile]).getroot().find("gpu")
    assert mine is not None and capture is not None
    expected = leaf_values(capture, CAPTURED_VALUES)
    assert expected
    assert leaf_values(mine, CAPTURED_VALUES) == expected
    ids = {k: v == "N/A" for k, v in leaf_values(capture, CAPTURED_IDENTIFIERS).items()}
    assert {k: v == "N/A" for k, v in leaf_values(mine, CAPTURED_IDENTIFIERS).items()} == ids


def test_display_filter_limits_text_and_xml(library_file: Path, use_state) -> None:  # type: ignore[no-untyped-def]
    use_state("h100")
    rc, out = smi(library_file, "-q", "-d", "MEMORY,TEMPERATURE", "-i", "0")
    assert rc == 0
    heads = [
        line.strip()
        for line in out.splitlines()
        if line.startswith("    ") and not line.startswith("     ")
    ]
    assert heads == [
        "FB Memory Usage",
        "BAR1 Memory Usage",
        "Conf Compute Protected Memory Usage",
        "Temperature",
    ]
    rc, out = smi(library_file, "-q", "-x", "-d", "ECC")
    assert rc == 0
    gpu = ET.fromstring(out).find("gpu")
    assert gpu is not None
    assert [c.tag for c in gpu] == ["ecc_mode", "ecc_errors"]


def test_supported_clocks_only_in_text_when_asked(library_file: Path, use_state) -> None:  # type: ignore[no-untyped-def]
    use_state("a100")
    rc, out = smi(library_file, "-q")
    assert rc == 0
    assert "Supported Clocks" not in out
    rc, out = smi(library_file, "-q", "-d", "SUPPORTED_CLOCKS")
    assert rc == 0
    assert "    Supported Clocks" in out
